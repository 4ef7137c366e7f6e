//! Static files at the process's descriptor limit: the cache of open large files stays within
//! its share of the limit, and when opening a file fails for want of descriptors the worker
//! gives up its cached ones and serves the file, instead of answering 503 until entries expire.
//! Its own test binary, because it lowers this process's descriptor limit.

mod support;

use std::fs;

use support::{Reader, TestServer};

fn set_soft_fd_limit(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct they are given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim), 0);
        lim.rlim_cur = n.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim), 0);
    }
}

#[test]
fn cached_descriptors_stay_within_the_limit_and_give_way() {
    set_soft_fd_limit(256);
    let dir = tempfile::tempdir().unwrap();
    for i in 0..300 {
        fs::write(dir.path().join(format!("f{i}.bin")), vec![b'x'; 4096]).unwrap();
    }
    fs::write(dir.path().join("new.bin"), vec![b'y'; 4096]).unwrap();
    // Files over 1 KiB are cached as open descriptors, at most 256 / 4 = 64 for one worker.
    let server = TestServer::from_flags(&[
        "--root",
        &dir.path().display().to_string(),
        "--cache-file-max",
        "1024",
    ]);
    let mut r = Reader::new(server.connect());
    for i in 0..300 {
        r.send(format!("GET /f{i}.bin HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        let reply = r.reply().unwrap();
        assert_eq!(
            reply.status, 200,
            "f{i}.bin with 300 files and 256 descriptors"
        );
        assert_eq!(reply.body.len(), 4096);
    }

    // Now take every free descriptor, so the next open fails with EMFILE.
    let mut hog = Vec::new();
    while let Ok(f) = fs::File::open("/dev/null") {
        hog.push(f);
    }
    assert!(!hog.is_empty());
    r.send(b"GET /new.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    let reply = r.reply().unwrap();
    assert_eq!(
        reply.status, 200,
        "the worker's cached descriptors make room"
    );
    assert_eq!(reply.body, vec![b'y'; 4096]);
    drop(hog);
}
