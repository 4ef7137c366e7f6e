//! The peers' configurations exist once, in bench/conf/, and both of their users fill them in
//! whole: every shipped spec passes `--check` (each template it renders has every `${...}`
//! defined), and the measurement kit's compare.py renders every file there with nothing left
//! unfilled and the ports it measures on.

mod common;

use std::path::{Path, PathBuf};

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: lowlat_bench::cli::BenchArgs,
}

fn bench_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench")
}

/// Every spec in bench/specs/ expands its targets and templates without starting anything.
#[test]
fn every_shipped_spec_renders_its_templates() {
    let mut specs: Vec<PathBuf> = std::fs::read_dir(bench_dir().join("specs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    specs.sort();
    assert!(specs.len() >= 5, "{specs:?}");
    for spec in &specs {
        let argv = ["lowlat-bench", "--check", spec.to_str().unwrap()];
        let cli = Cli::try_parse_from(argv).unwrap();
        assert_eq!(
            format!("{:?}", lowlat_bench::cli::run(cli.args)),
            format!("{:?}", std::process::ExitCode::SUCCESS),
            "{} does not pass --check",
            spec.display()
        );
        let text = std::fs::read_to_string(spec).unwrap();
        assert!(
            !text.contains("kit/conf"),
            "{} uses a second copy of the configurations",
            spec.display()
        );
    }
}

/// The proxy spec sends every proxy to its one upstream service: bench/conf's `${upstream}` and
/// lowlat's `${upstream_addr}` are the service's address; the service shares the loader's CPU
/// and no proxy's; each server is a target in clear and over TLS, each in its own scenario.
#[test]
fn proxy_spec_forwards_to_its_service() {
    use lowlat_bench::spec::{expand, Launch};
    let spec = lowlat_bench::spec::load(&bench_dir().join("specs/proxy.toml")).unwrap();
    let vars = spec.vars();
    assert_eq!(spec.services.len(), 1);
    let up = &spec.services[0];
    assert_eq!(expand(&up.addr, &vars).unwrap(), "127.0.0.1:8078");
    assert_eq!(expand("${upstream}", &vars).unwrap(), "127.0.0.1:8078");
    assert_eq!(up.process.cpus, spec.loader.cpus);
    let Launch::Command { argv, .. } = &spec.targets[0].launch else {
        panic!("lowlat is started by the spec")
    };
    let argv: Vec<String> = argv.iter().map(|a| expand(a, &vars).unwrap()).collect();
    assert!(
        argv.windows(2)
            .any(|w| w[0] == "--proxy" && w[1] == "/up/=http://127.0.0.1:8078"),
        "{argv:?}"
    );
    for t in &spec.targets {
        assert_eq!(t.cpus, vec![0], "{}", t.name);
    }
    for (scenario, https) in [("proxy", false), ("proxy-tls", true)] {
        let sc = spec.scenarios.iter().find(|s| s.name == scenario).unwrap();
        assert_eq!(sc.path, "/up/plaintext");
        assert_eq!(sc.targets.len(), 5, "{scenario}: {:?}", sc.targets);
        for name in &sc.targets {
            let t = spec.targets.iter().find(|t| &t.name == name).unwrap();
            assert_eq!(t.url.starts_with("https://"), https, "{name}");
        }
    }
}

/// compare.py fills in every configuration in bench/conf/ (its only copy: bench/kit has none).
#[test]
fn the_kit_renders_every_configuration() {
    let python = common::need("python3");
    common::need("openssl"); // compare.py makes the TLS listeners' certificate
    let kit = bench_dir().join("kit");
    assert!(
        !kit.join("conf").exists(),
        "bench/kit/conf is a second copy of bench/conf"
    );
    let run = common::scratch("kit-render");
    let script = format!(
        "import os, sys\nsys.path.insert(0, {kit:?})\nimport compare\n\
         for t in sorted(os.listdir(compare.CONF)):\n    print(compare.render(t, {run:?}, {www:?}))\n",
        kit = kit.display().to_string(),
        run = run.display().to_string(),
        www = run.join("www").display().to_string(),
    );
    let out = std::process::Command::new(python)
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "compare.py render: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .collect();
    let templates = std::fs::read_dir(bench_dir().join("conf")).unwrap().count();
    assert_eq!(rendered.len(), templates, "{rendered:?}");
    for (file, port) in [
        ("nginx.conf", "8081"),
        ("lighttpd.conf", "8082"),
        ("h2o.conf", "8083"),
        ("haproxy.cfg", "8086"),
        ("Caddyfile", "8087"),
        ("squid.conf", "8091"),
        ("trafficserver-records.config", "8092"),
        ("trafficserver-remap.config", "8092"),
    ] {
        let text = read(&run.join(file));
        assert!(!text.contains("${"), "{file} left unfilled:\n{text}");
        assert!(text.contains(port), "{file} lacks its port {port}");
    }
    // The proxies point at the kit's upstream, and haproxy gets its one-file certificate.
    for file in ["nginx.conf", "h2o.conf", "haproxy.cfg", "Caddyfile"] {
        assert!(read(&run.join(file)).contains("127.0.0.1:8078"), "{file}");
    }
    assert!(read(&run.join("cert+key.pem")).contains("PRIVATE KEY"));
    // The caches point at the cache scenario's origin.
    for (file, origin) in [
        ("nginx-cache-http.conf", "127.0.0.1:8077"),
        ("trafficserver-remap.config", "http://127.0.0.1:8077/"),
        ("squid.conf", "parent 8077 "),
    ] {
        assert!(
            read(&run.join(file)).contains(origin),
            "{file} lacks {origin}"
        );
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
