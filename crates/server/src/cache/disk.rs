//! The cache's disk tier (`--cache-disk DIR`): every stored entry also written to a file of its
//! own, so that the cache holds more than memory allows (and objects larger than the memory
//! tier takes), and what it holds survives a restart.
//!
//! - **Writes** leave the workers at once: an entry stored in memory is queued (a bounded
//!   queue; when it is full the write is dropped and counted, never waited for) to one writer
//!   thread, which writes it to `tmp/` and renames it into place, so a file is either whole or
//!   absent. Each write carries a sequence number noted in the index when it was queued: a
//!   write overtaken by a newer one for its key, or by a removal (purge, invalidation), is
//!   discarded instead of bringing back what was removed.
//! - **Reads** happen on a memory miss, on the worker that asks (the file is most often in the
//!   page cache; the entry is then kept in memory again). The key is in the file and checked,
//!   and a file that is damaged or gone is a miss.
//! - **Eviction** keeps the files within `--cache-disk-size`, as a segmented LRU: a file enters
//!   on probation and moves to the protected segment (at most 80% of the budget) when it is
//!   read again, and probation is evicted first, so a scan of URLs fetched once cannot push
//!   out what is read from disk again and again. Reads here are memory misses, so an entry hot
//!   in memory ages on disk; it comes back to the protected segment on its next read from disk.
//! - **At start**, a loader thread reads every file's head (its key and tags) and rebuilds the
//!   index, oldest first; until it is done, what it has not reached yet is a miss. Files of
//!   another version or damaged are removed.
//!
//! Files are `DIR/xx/ID` (256 folders, `xx` the ID's low byte) named by a 64-bit ID that
//! starts at the process's start time in nanoseconds, so two runs (or the two processes of a
//! hot upgrade) never choose the same name.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use super::entry::Entry;
use super::record::{self, Summary, PREAMBLE};

/// The disk tier's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskConfig {
    pub dir: PathBuf,
    /// The budget of the files, bytes.
    pub size: u64,
    /// The largest body the disk tier stores.
    pub max_object: u64,
}

/// Writes queued and not yet done before more are dropped.
const QUEUE: usize = 4096;

/// The protected segment's share of the budget, percent.
const PROTECTED_SHARE: u64 = 80;

/// A file in `tmp/` older than this is a write a dead process left unfinished.
const TMP_ABANDONED: Duration = Duration::from_secs(600);

/// The disk tier's counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct DiskCounters {
    /// Entries read back from disk on a memory miss.
    pub reads: AtomicU64,
    /// Files written.
    pub writes: AtomicU64,
    /// Writes dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Writes or reads that failed (a full disk, a damaged file).
    pub errors: AtomicU64,
    /// Files removed to stay within the budget.
    pub evictions: AtomicU64,
}

/// A cache-tag of a stored response.
pub(crate) type Tag = Box<[u8]>;

/// A file the index knows.
#[derive(Debug, Clone, Copy)]
struct OnDisk {
    id: u64,
    len: u64,
    /// Its place in its segment.
    tick: u64,
    protected: bool,
}

/// What the index holds for a key.
#[derive(Debug, Default)]
struct Slot {
    file: Option<OnDisk>,
    /// The newest write queued for the key (0: none); only that one may land.
    pending: u64,
    /// Its cache-tags, for purging by tag (known from the entry when it is queued).
    tags: Box<[Tag]>,
}

#[derive(Debug, Default)]
struct Index {
    map: HashMap<Arc<[u8]>, Slot, foldhash::fast::RandomState>,
    probation: BTreeMap<u64, Arc<[u8]>>,
    protected: BTreeMap<u64, Arc<[u8]>>,
    protected_bytes: u64,
    bytes: u64,
    files: u64,
    tick: u64,
    seq: u64,
}

impl Index {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Takes `key`'s file out of its segment and the totals; returns it.
    fn unlink(&mut self, key: &[u8]) -> Option<OnDisk> {
        let f = self.map.get_mut(key)?.file.take()?;
        if f.protected {
            self.protected.remove(&f.tick);
            self.protected_bytes -= f.len;
        } else {
            self.probation.remove(&f.tick);
        }
        self.bytes -= f.len;
        self.files -= 1;
        Some(f)
    }

    /// Places a new file for `key` on probation; returns the file it replaces.
    fn place(&mut self, key: &Arc<[u8]>, id: u64, len: u64) -> Option<OnDisk> {
        let old = self.unlink(key);
        let tick = self.next_tick();
        let slot = self.map.entry(Arc::clone(key)).or_default();
        slot.file = Some(OnDisk {
            id,
            len,
            tick,
            protected: false,
        });
        self.probation.insert(tick, Arc::clone(key));
        self.bytes += len;
        self.files += 1;
        old
    }

    /// `key`'s file was read: to the protected segment's most recent end.
    fn touch(&mut self, key: &[u8], budget: u64) {
        let Some(mut f) = self.map.get(key).and_then(|s| s.file) else {
            return;
        };
        // The segment holds the key under the file's tick: taken out, it moves.
        let k = if f.protected {
            self.protected.remove(&f.tick)
        } else {
            self.probation.remove(&f.tick)
        };
        let Some(k) = k else {
            return;
        };
        if !f.protected {
            self.protected_bytes += f.len;
        }
        f.tick = self.next_tick();
        f.protected = true;
        self.protected.insert(f.tick, k);
        if let Some(s) = self.map.get_mut(key) {
            s.file = Some(f);
        }
        // The protected segment over its share: its oldest go back on probation.
        while self.protected_bytes > budget / 100 * PROTECTED_SHARE {
            let Some((_, k)) = self.protected.pop_first() else {
                break;
            };
            let tick = self.next_tick();
            if let Some(f) = self.map.get_mut(&k).and_then(|s| s.file.as_mut()) {
                self.protected_bytes -= f.len;
                f.protected = false;
                f.tick = tick;
            }
            self.probation.insert(tick, k);
        }
    }

    /// Files to remove so that the rest fit `budget`: probation's oldest first.
    fn evict(&mut self, budget: u64, victims: &mut Vec<u64>) {
        while self.bytes > budget {
            let oldest = self
                .probation
                .first_key_value()
                .or_else(|| self.protected.first_key_value())
                .map(|(_, k)| Arc::clone(k));
            let Some(key) = oldest else { break };
            if let Some(f) = self.unlink(&key) {
                victims.push(f.id);
            }
            if self.map.get(&key).is_some_and(|s| s.pending == 0) {
                self.map.remove(&key);
            }
        }
    }

    /// Forgets `key` altogether (a queued write for it is then discarded); its file, if any.
    fn forget(&mut self, key: &[u8]) -> Option<OnDisk> {
        let f = self.unlink(key);
        self.map.remove(key);
        f
    }
}

/// What the writer thread and the workers share.
#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    budget: u64,
    index: Mutex<Index>,
    counters: DiskCounters,
    /// The next file's ID.
    next_id: AtomicU64,
    /// The loader has read every file that was there at start.
    loaded: AtomicBool,
}

impl Shared {
    fn index(&self) -> MutexGuard<'_, Index> {
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir
            .join(format!("{:02x}", id & 0xff))
            .join(format!("{id:016x}"))
    }

    fn remove_files(&self, ids: &[u64]) {
        for &id in ids {
            let _ = std::fs::remove_file(self.path(id));
        }
    }
}

/// A queued write.
struct Job {
    key: Arc<[u8]>,
    entry: Entry,
    seq: u64,
}

/// The disk tier of the process's cache.
#[derive(Debug)]
pub struct DiskTier {
    shared: Arc<Shared>,
    queue: SyncSender<Job>,
    pub(crate) max_object: u64,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("seq", &self.seq).finish()
    }
}

impl DiskTier {
    /// Opens (creating) the folder, starts the writer and the loader.
    ///
    /// # Errors
    /// When the folder or its sub-folders cannot be created, or a file cannot be written in it.
    pub fn open(cfg: &DiskConfig) -> io::Result<Self> {
        for sub in (0..=0xff).map(|i| format!("{i:02x}")).chain(["tmp".into()]) {
            std::fs::create_dir_all(cfg.dir.join(sub))?;
        }
        let probe = cfg
            .dir
            .join("tmp")
            .join(format!(".probe-{}", std::process::id()));
        File::create(&probe)?;
        let _ = std::fs::remove_file(&probe);
        let start = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 2));
        let shared = Arc::new(Shared {
            dir: cfg.dir.clone(),
            budget: cfg.size,
            index: Mutex::default(),
            counters: DiskCounters::default(),
            next_id: AtomicU64::new(start),
            loaded: AtomicBool::new(false),
        });
        let (queue, jobs) = sync_channel(QUEUE);
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("lowlat-cache-writer".into())
            .spawn(move || write_loop(&writer, &jobs))?;
        let loader = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("lowlat-cache-loader".into())
            .spawn(move || load_all(&loader, start))?;
        Ok(DiskTier {
            shared,
            queue,
            max_object: cfg.max_object,
        })
    }

    /// Queues `entry` to be written under `key` (replacing what is there). An object larger
    /// than the tier takes removes the older copy instead.
    pub(crate) fn write(&self, key: &[u8], entry: &Entry) {
        let tags = match entry {
            Entry::Object(o) if o.body().len() as u64 > self.max_object => {
                self.remove(key);
                return;
            }
            Entry::Object(o) => o.tags.clone(),
            Entry::Vary { .. } => Box::default(),
        };
        let mut ix = self.shared.index();
        ix.seq += 1;
        let seq = ix.seq;
        let key: Arc<[u8]> = match ix.map.get_key_value(key) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::from(key),
        };
        let slot = ix.map.entry(Arc::clone(&key)).or_default();
        slot.pending = seq;
        slot.tags = tags;
        drop(ix);
        let job = Job {
            key,
            entry: entry.clone(),
            seq,
        };
        if let Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) =
            self.queue.try_send(job)
        {
            // The older copy must not outlive the newer one that could not be written.
            self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            self.remove(&job.key);
        }
    }

    /// The entry stored on disk under `key`, if any (read now, on this thread).
    pub(crate) fn read(&self, key: &[u8]) -> Option<Entry> {
        let id = {
            let mut ix = self.shared.index();
            let id = ix.map.get(key)?.file?.id;
            ix.touch(key, self.shared.budget);
            id
        };
        let path = self.shared.path(id);
        let found = std::fs::read(&path).ok().and_then(|bytes| {
            let bytes = bytes::Bytes::from(bytes);
            let (k, entry) = record::decode(&bytes).ok()?;
            (k == key).then_some(entry)
        });
        if found.is_none() {
            // Gone or damaged: forgotten, unless a newer file took its place meanwhile.
            self.shared.counters.errors.fetch_add(1, Ordering::Relaxed);
            let mut ix = self.shared.index();
            if ix
                .map
                .get(key)
                .and_then(|s| s.file)
                .is_some_and(|f| f.id == id)
            {
                ix.unlink(key);
                drop(ix);
                let _ = std::fs::remove_file(&path);
            }
            return None;
        }
        self.shared.counters.reads.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Removes `key`'s file and cancels a queued write of it; true when there was a file.
    pub(crate) fn remove(&self, key: &[u8]) -> bool {
        let gone = self.shared.index().forget(key);
        if let Some(f) = gone {
            self.shared.remove_files(&[f.id]);
        }
        gone.is_some()
    }

    /// Removes every entry (stored or queued) for which `doomed(key, tags)` holds; the keys of
    /// those that had a file.
    pub(crate) fn remove_where(&self, doomed: &dyn Fn(&[u8], &[Tag]) -> bool) -> Vec<Arc<[u8]>> {
        let mut ix = self.shared.index();
        let keys: Vec<Arc<[u8]>> = ix
            .map
            .iter()
            .filter(|(k, s)| doomed(k, &s.tags))
            .map(|(k, _)| Arc::clone(k))
            .collect();
        let mut ids = Vec::new();
        let mut had_file = Vec::new();
        for k in keys {
            if let Some(f) = ix.forget(&k) {
                ids.push(f.id);
                had_file.push(k);
            }
        }
        drop(ix);
        self.shared.remove_files(&ids);
        had_file
    }

    /// Files held and their bytes.
    #[must_use]
    pub fn usage(&self) -> (u64, u64) {
        let ix = self.shared.index();
        (ix.files, ix.bytes)
    }

    /// The budget, bytes.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.shared.budget
    }

    /// Whether the files there at start have all been read into the index.
    #[must_use]
    pub fn loaded(&self) -> bool {
        self.shared.loaded.load(Ordering::Acquire)
    }

    #[must_use]
    pub fn counters(&self) -> &DiskCounters {
        &self.shared.counters
    }
}

/// The writer thread: until the tier is dropped.
fn write_loop(shared: &Shared, jobs: &Receiver<Job>) {
    let mut reported = false;
    while let Ok(job) = jobs.recv() {
        if let Err(e) = write_one(shared, &job) {
            shared.counters.errors.fetch_add(1, Ordering::Relaxed);
            if !reported {
                // Once: a full disk would otherwise log every write.
                tracing::warn!(
                    "cache disk tier: cannot write to {}: {e}",
                    shared.dir.display()
                );
                reported = true;
            }
            let mut ix = shared.index();
            if ix.map.get(&job.key).is_some_and(|s| s.pending == job.seq) {
                // The memory copy stays; the disk has none of this version.
                ix.forget(&job.key);
                drop(ix);
            }
        }
    }
}

fn write_one(shared: &Shared, job: &Job) -> io::Result<()> {
    if shared
        .index()
        .map
        .get(&job.key)
        .is_none_or(|s| s.pending != job.seq)
    {
        return Ok(()); // overtaken before it started
    }
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let tmp = shared.dir.join("tmp").join(format!("{id:016x}"));
    let (head, body) = record::encode(&job.key, &job.entry);
    let len = (head.len() + body.len()) as u64;
    let written = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(&head)?;
        f.write_all(body)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let mut victims = Vec::new();
    let mut ix = shared.index();
    if ix.map.get(&job.key).is_none_or(|s| s.pending != job.seq) {
        drop(ix);
        let _ = std::fs::remove_file(&tmp);
        return Ok(()); // overtaken while it was written
    }
    // Renamed under the lock, so that a removal cannot fall between the check and the rename.
    if let Err(e) = std::fs::rename(&tmp, shared.path(id)) {
        drop(ix);
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Some(slot) = ix.map.get_mut(&job.key) {
        slot.pending = 0;
    }
    if let Some(old) = ix.place(&job.key, id, len) {
        victims.push(old.id);
    }
    let before = victims.len();
    ix.evict(shared.budget, &mut victims);
    drop(ix);
    shared
        .counters
        .evictions
        .fetch_add((victims.len() - before) as u64, Ordering::Relaxed);
    shared.counters.writes.fetch_add(1, Ordering::Relaxed);
    shared.remove_files(&victims);
    Ok(())
}

/// The loader thread: every file there at start into the index, oldest first.
fn load_all(shared: &Shared, start: u64) {
    let mut found: Vec<(SystemTime, u64, Summary)> = Vec::new();
    for sub in 0..=0xffu64 {
        let Ok(dir) = std::fs::read_dir(shared.dir.join(format!("{sub:02x}"))) else {
            continue;
        };
        for e in dir.flatten() {
            let path = e.path();
            let id = e
                .file_name()
                .to_str()
                .filter(|n| n.len() == 16)
                .and_then(|n| u64::from_str_radix(n, 16).ok());
            // Files this run wrote are in the index already.
            let Some(id) = id.filter(|&id| id < start) else {
                continue;
            };
            match summary(&path) {
                Ok((mtime, s)) => found.push((mtime, id, s)),
                Err(_) => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
    }
    found.sort_by_key(|(t, id, _)| (*t, *id));
    let mut stale = Vec::new();
    let mut victims = Vec::new();
    {
        let mut ix = shared.index();
        for (_, id, s) in found {
            // Sorted oldest first: a later file of a key is a newer copy.
            let existing = ix.map.get(&s.key[..]).map(|slot| slot.file);
            match existing {
                Some(Some(old)) if old.id < start => stale.push(old.id),
                // This run wrote (or is writing) a newer copy.
                Some(_) => {
                    stale.push(id);
                    continue;
                }
                None => {}
            }
            let key: Arc<[u8]> = Arc::from(s.key);
            ix.place(&key, id, s.len);
            if let Some(slot) = ix.map.get_mut(&key) {
                slot.tags = s.tags;
            }
        }
        let before = victims.len();
        ix.evict(shared.budget, &mut victims);
        shared
            .counters
            .evictions
            .fetch_add((victims.len() - before) as u64, Ordering::Relaxed);
    }
    shared.remove_files(&stale);
    shared.remove_files(&victims);
    // Writes a process left half done.
    if let Ok(dir) = std::fs::read_dir(shared.dir.join("tmp")) {
        for e in dir.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > TMP_ABANDONED);
            if old {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    shared.loaded.store(true, Ordering::Release);
}

/// A file's modification time and what its head says, checked against its length.
fn summary(path: &Path) -> Result<(SystemTime, Summary), record::Malformed> {
    let mut f = File::open(path).map_err(|_| record::Malformed)?;
    let meta = f.metadata().map_err(|_| record::Malformed)?;
    let mut pre = [0u8; PREAMBLE];
    f.read_exact(&mut pre).map_err(|_| record::Malformed)?;
    let mut head = vec![0u8; record::head_len(&pre)?];
    f.read_exact(&mut head).map_err(|_| record::Malformed)?;
    let s = Summary::of_head(&head)?;
    if s.len != meta.len() {
        return Err(record::Malformed);
    }
    Ok((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::lines::Lines;
    use crate::cache::object::{reason_of, Object};
    use bytes::Bytes;
    use lowlat_http::cache::freshness::{AgeBase, Stored};
    use lowlat_http::cache::Directives;

    fn object(body: usize, tag: &str) -> Entry {
        let fields: [(&str, &[u8]); 1] = [("Cache-Tag", tag.as_bytes())];
        Entry::Object(Arc::new(Object::new(
            200,
            reason_of(200, ""),
            Lines::of(fields.iter().copied(), |_| true),
            Bytes::from(vec![b'x'; body]),
            AgeBase {
                initial: 0,
                response_time: 1,
            },
            Stored::new(60, &Directives::default()),
        )))
    }

    fn tier(dir: &Path, size: u64) -> DiskTier {
        let t = DiskTier::open(&DiskConfig {
            dir: dir.to_owned(),
            size,
            max_object: 1 << 20,
        })
        .unwrap();
        wait(|| t.loaded());
        t
    }

    fn wait(done: impl Fn() -> bool) {
        for _ in 0..500 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("not done in 5 s");
    }

    fn body_len(e: &Entry) -> usize {
        match e {
            Entry::Object(o) => o.body().len(),
            Entry::Vary { .. } => usize::MAX,
        }
    }

    #[test]
    fn written_read_back_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        {
            let t = tier(dir.path(), 1 << 20);
            t.write(b"k1", &object(100, "a"));
            t.write(b"k2", &object(200, "b"));
            wait(|| t.usage().0 == 2);
            assert_eq!(t.read(b"k1").map(|e| body_len(&e)), Some(100));
            assert!(t.read(b"k3").is_none());
        }
        // A second tier over the same folder (a restart) finds both.
        let t = tier(dir.path(), 1 << 20);
        assert_eq!(t.usage().0, 2);
        assert_eq!(t.read(b"k2").map(|e| body_len(&e)), Some(200));
        // Replaced: one file for the key, the newer.
        t.write(b"k2", &object(300, "b"));
        wait(|| t.read(b"k2").is_some_and(|e| body_len(&e) == 300));
        assert_eq!(t.usage().0, 2);
        let files: usize = (0..=0xff)
            .map(|i| {
                std::fs::read_dir(dir.path().join(format!("{i:02x}")))
                    .unwrap()
                    .count()
            })
            .sum();
        assert_eq!(files, 2);
    }

    #[test]
    fn removals_win_over_queued_writes() {
        let dir = tempfile::tempdir().unwrap();
        let t = tier(dir.path(), 1 << 30);
        for i in 0..200u32 {
            let k = format!("k{i}");
            t.write(
                k.as_bytes(),
                &object(1000, if i % 2 == 0 { "even" } else { "odd" }),
            );
            if i % 10 == 0 {
                t.remove(k.as_bytes());
            }
        }
        let gone = t.remove_where(&|_, tags| tags.iter().any(|t| &t[..] == b"odd"));
        assert!(gone.len() <= 100);
        std::thread::sleep(Duration::from_millis(300));
        // Written or not when the purge came, no odd one and no removed one is left.
        for i in 0..200u32 {
            let there = t.read(format!("k{i}").as_bytes()).is_some();
            assert_eq!(there, i % 2 == 0 && i % 10 != 0, "k{i}");
        }
    }

    #[test]
    fn the_budget_holds_and_what_is_read_again_stays() {
        let dir = tempfile::tempdir().unwrap();
        // Room for about 40 files of 10 000 bytes.
        let t = tier(dir.path(), 400_000);
        for i in 0..10u32 {
            t.write(format!("hot{i}").as_bytes(), &object(10_000, ""));
        }
        wait(|| t.usage().0 == 10);
        for i in 0..10u32 {
            assert!(t.read(format!("hot{i}").as_bytes()).is_some());
        }
        for i in 0..500u32 {
            t.write(format!("scan{i}").as_bytes(), &object(10_000, ""));
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        let (_, bytes) = t.usage();
        assert!(bytes <= 400_000, "{bytes}");
        let kept = (0..10u32)
            .filter(|i| t.read(format!("hot{i}").as_bytes()).is_some())
            .count();
        assert_eq!(kept, 10, "the scan flushed what was read again");
        assert!(t.counters().evictions.load(Ordering::Relaxed) > 400);
    }

    #[test]
    fn damaged_files_are_misses_and_go() {
        let dir = tempfile::tempdir().unwrap();
        {
            let t = tier(dir.path(), 1 << 20);
            t.write(b"k", &object(100, ""));
            t.write(b"v", &object(100, ""));
            wait(|| t.usage().0 == 2);
        }
        // Cut every file short.
        for i in 0..=0xff {
            for e in std::fs::read_dir(dir.path().join(format!("{i:02x}"))).unwrap() {
                let p = e.unwrap().path();
                let bytes = std::fs::read(&p).unwrap();
                std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
            }
        }
        let t = tier(dir.path(), 1 << 20);
        assert_eq!(t.usage().0, 0);
        assert!(t.read(b"k").is_none());
    }
}
