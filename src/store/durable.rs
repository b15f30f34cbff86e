//! The durable store (`-b DIR`): opens sled and the journal, recovers, and
//! starts the store's three threads: the keeper (`keeper.rs`, the
//! journal's syncs), the allocator (`allocator.rs`, its files) and the
//! absorber (`absorb.rs`, sled's). Connections write the journal themselves
//! (`journal.rs`).
//!
//! What DIR holds: sled's files (`db`, `conf`, `snap.*`, `blobs/`), and
//! `journal/`: the journal files, numbered, and the ballast
//! (`ballast.rs`).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use sprout_protocol::JobId;
use tokio::sync::watch;

use super::absorb::{Absorb, Absorber};
use super::allocator::Allocator;
use super::ballast::Ballast;
use super::bells;
use super::blobs::Blobs;
use super::body_cache::BodyCache;
use super::body_read::Bodies;
use super::journal::{Journal, Settings};
use super::keeper::Keeper;
use super::reclaim::Garbage;
pub use super::recover::Restore;
use super::recover::{self, Recovered};
use super::share::Unshared;
use super::whole::Marker;
use super::{ids, segment, Policy, Progress, Seq, Store};
use crate::binlog_stats::BinlogStats;
use crate::engine::{Record, Room};

/// The smallest journal file `-s` may ask for.
pub const MIN_FILE_SIZE: u64 = 64 << 10;
/// The largest.
pub const MAX_FILE_SIZE: u64 = 1 << 30;

/// How to open a store.
#[derive(Clone, Debug)]
pub struct Options {
    pub dir: PathBuf,
    pub policy: Policy,
    /// sled's page cache, in bytes: the main part of the store's memory.
    pub cache_bytes: u64,
    /// Start with whatever decodes, skipping damaged jobs, instead of
    /// refusing to start.
    pub salvage: bool,
    /// `-s`: the size of each journal file (clamped to
    /// [`MIN_FILE_SIZE`]..=[`MAX_FILE_SIZE`]).
    pub file_size: u64,
    /// `-z`: the largest job body.
    pub max_job_size: u32,
    /// `--body-cache`: the body cache's bound, in bytes (`body_cache.rs`).
    pub body_cache_bytes: u64,
}

pub struct DurableStore {
    journal: Arc<Journal>,
    /// The bodies the engine leaves to the store (longer than
    /// `engine::INLINE_BODY`): from the body cache, or read back from sled.
    bodies: Arc<Bodies>,
}

fn other(what: String) -> io::Error {
    io::Error::other(what)
}

/// How long shutdown waits for the last writes.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(15);

impl DurableStore {
    /// Opens (or creates) the store in `options.dir` and reads every job
    /// back into `into`. A damaged store is an error unless
    /// `options.salvage` is set.
    pub fn open(
        options: &Options,
        stats: Arc<BinlogStats>,
        into: &mut dyn Restore,
    ) -> io::Result<(DurableStore, Recovered)> {
        let dir = &options.dir;
        let file_size = options.file_size.clamp(MIN_FILE_SIZE, MAX_FILE_SIZE);
        let (db, ballast, mut whole) = prepare(options)?;
        let opened = read_back(&db, options, whole.present(), file_size, into)?;
        // sled keeps every node recovery's scan read (see `reopen_sled`).
        let db = reopen_sled(db, options)?;
        // The nodes freed are ~4 KiB chunks each, below glibc's mmap
        // threshold: counted in RSS until trimmed.
        crate::malloc::trim();
        let progress = Arc::new(watch::Sender::new(Progress::default()));
        let (absorb_tx, absorb_rx) = mpsc::channel();
        let start = opened.journal;
        if !whole.present() {
            whole.needs(start.commit);
        }
        let cache = BodyCache::new(options.body_cache_bytes, stats.clone());
        let places = opened.absorb.log.directory();
        let pages = Arc::new(db.clone());
        let bodies = Arc::new(Bodies::new(Arc::new(cache), places, pages));
        if let Some((commit, records)) = opened.tail {
            // Their bodies are in the journal alone until sled takes them.
            bodies.submitted(&records);
            let _ = absorb_tx.send(Absorb::Frame {
                commit,
                last_seq: 0,
                ids_below: start.ids_below,
                records,
            });
        }
        let oldest = opened
            .absorb
            .retired
            .front()
            .map_or(start.current.number, |&(n, _)| n);
        stats.oldest_index.store(oldest, Ordering::Relaxed);
        let next_id = start.next_id;
        let settings = Settings {
            policy: options.policy,
            dir: segment::dir(dir),
            file_size,
            max_job_size: options.max_job_size,
        };
        let (wake, calls) = bells::channel();
        let journal = Arc::new(Journal::new(
            settings,
            start,
            absorb_tx.clone(),
            progress.clone(),
            stats.clone(),
            wake.clone(),
        ));
        // The room the first puts need, before they come.
        let mut allocator = Allocator::new(journal.clone(), ballast);
        allocator.look();
        write_ceiling_ahead(&journal, &progress, next_id);
        let absorber = Absorber {
            file: File::open(dir.join("db"))?,
            db,
            blobs: Blobs::new(dir),
            store_dir: dir.clone(),
            stats,
            progress,
            state: opened.absorb,
            broken: None,
            flushed: 0,
            whole,
            low_disk: false,
            bodies: bodies.clone(),
            unshared: Unshared::default(),
            garbage: Garbage::default(),
        };
        spawn("sprout-store", move || absorber.run(absorb_rx))?;
        spawn("sprout-alloc", move || allocator.run(calls))?;
        let keeper = Keeper::new(journal.clone(), absorb_tx, wake);
        spawn("sprout-journal", move || keeper.run())?;
        Ok((DurableStore { journal, bodies }, opened.recovered))
    }
}

/// Makes the directories, opens sled and reads the marker of a whole
/// sled; a new store's files are durable before the first reply, like
/// everything else.
fn prepare(options: &Options) -> io::Result<(::sled::Db, Ballast, Marker)> {
    let dir = &options.dir;
    let new = !dir.join("conf").exists();
    let existed = dir.is_dir();
    std::fs::create_dir_all(segment::dir(dir))
        .map_err(|e| other(create_failure(dir, existed, &e)))?;
    let ballast = Ballast::prepare(dir)?;
    let db = open_sled(options)?;
    if new {
        File::open(dir.join("conf"))?.sync_all()?;
        segment::sync_dir(dir)?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            segment::sync_dir(parent)?;
        }
    }
    let mut whole = Marker::read(dir)?;
    if new {
        whole.make()?;
    }
    Ok((db, ballast, whole))
}

/// Recovery, with a damaged store named as such (see `recover.rs`).
fn read_back(
    db: &::sled::Db,
    options: &Options,
    whole: bool,
    file_size: u64,
    into: &mut dyn Restore,
) -> io::Result<recover::Opened> {
    recover::recover(db, &options.dir, options.salvage, whole, file_size, into).map_err(|e| {
        other(format!(
            "the store in {} is damaged: {e}; refusing to start so no job is \
             silently dropped (start with --salvage to keep what can be read)",
            options.dir.display()
        ))
    })
}

/// The ceiling goes ahead of the ids to come before the first of them
/// (see `ids.rs`). On a full disk that may not fit: puts are refused then
/// anyway.
fn write_ceiling_ahead(journal: &Journal, progress: &watch::Sender<Progress>, next_id: JobId) {
    let ahead = journal
        .write_ceiling(next_id + ids::BLOCK)
        .and_then(|()| journal.sync());
    match ahead {
        Ok((written, ids_below)) => progress.send_modify(|p| {
            p.written = written;
            p.synced = written;
            p.ids_below = ids_below;
        }),
        Err(e) => tracing::warn!("cannot write the id ceiling yet: {e}"),
    }
}

fn spawn<T: Send + 'static>(
    name: &str,
    run: impl FnOnce() -> T + Send + 'static,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(run)
        .map(drop)
}

/// Opens sled in `options.dir`, as sled says.
fn sled_config(options: &Options) -> ::sled::Result<::sled::Db> {
    ::sled::Config::new()
        .path(&options.dir)
        .cache_capacity(options.cache_bytes)
        // sled writes only when the absorber says so.
        .flush_every_ms(None)
        .open()
}

/// Opens sled in `options.dir`; a failure in one sentence.
fn open_sled(options: &Options) -> io::Result<::sled::Db> {
    sled_config(options).map_err(|e| open_failure(&e, &options.dir))
}

/// Why sled could not open `dir`, in one sentence.
fn open_failure(e: &::sled::Error, dir: &Path) -> io::Error {
    if locked(e) {
        return other(in_use(dir, lock_holder(dir)));
    }
    other(format!(
        "cannot open the store in {}: {e} (if it is damaged, move it aside; \
         sled cannot open it even to salvage)",
        dir.display()
    ))
}

/// Why the store's directories could not be made. A `-b` directory that
/// exists but refuses is not writable (by this user, or it is on a
/// read-only filesystem): "cannot create" would send people looking for a
/// missing directory.
fn create_failure(dir: &Path, existed: bool, e: &io::Error) -> String {
    let refused = matches!(
        e.kind(),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
    );
    match (existed, refused) {
        (true, true) => format!("-b {} is not writable: {e}", dir.display()),
        _ => format!("cannot create {}: {e}", dir.display()),
    }
}

/// The sentence for a store another process holds (sled's lock on
/// `dir/db`), with that process's pid when the kernel says.
fn in_use(dir: &Path, holder: Option<u32>) -> String {
    let pid = holder.map_or_else(String::new, |pid| format!(" (pid {pid})"));
    format!(
        "-b {} is in use by another sprout{pid}: one server per store; stop it \
         or give this one another -b",
        dir.display()
    )
}

/// The pid holding a lock on sled's lock file `dir/db`, from /proc/locks.
fn lock_holder(dir: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir.join("db")).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let dev = meta.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    holder_in(&locks, major, minor, meta.ino())
}

/// The pid of the first lock in `locks` (the text of /proc/locks: `1:
/// FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF`, device numbers in hex)
/// on the file (`major`:`minor`, `inode`).
fn holder_in(locks: &str, major: u64, minor: u64, inode: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // A blocked waiter's line has "->" after the number.
        let at = if fields.get(1) == Some(&"->") { 2 } else { 1 };
        let pid = fields.get(at + 3)?.parse().ok()?;
        let mut file = fields.get(at + 4)?.split(':');
        let mut hex = || u64::from_str_radix(file.next()?, 16).ok();
        let (ma, mi) = (hex()?, hex()?);
        let ino: u64 = file.next()?.parse().ok()?;
        (ma == major && mi == minor && ino == inode && at == 1).then_some(pid)
    })
}

/// Whether sled could not open because its directory is locked (it says
/// so only in the message text).
fn locked(e: &dyn std::fmt::Display) -> bool {
    e.to_string().contains("acquire lock")
}

/// Drops the `Db` recovery read and opens sled again, for the absorber:
/// sled 0.34 keeps every node one scan reads, whatever its cache size, and
/// dropping the `Db` frees them (see docs/durability.md, section 6).
fn reopen_sled(db: ::sled::Db, options: &Options) -> io::Result<::sled::Db> {
    drop(db);
    // sled's background threads let go of the directory's lock a little
    // after its last handle is dropped (seen in tests/crash.rs).
    let deadline = std::time::Instant::now() + CLOSE_TIMEOUT;
    loop {
        match sled_config(options) {
            Err(e) if locked(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            opened => return opened.map_err(|e| open_failure(&e, &options.dir)),
        }
    }
}

impl Store for DurableStore {
    fn submit(&self, records: Vec<Record>) -> Seq {
        // Before the journal: the absorber unpins what it takes in.
        self.bodies.submitted(&records);
        self.journal.submit(records)
    }

    fn progress(&self) -> watch::Receiver<Progress> {
        self.journal.progress.subscribe()
    }

    fn replies_wait_for_sync(&self) -> bool {
        self.journal.policy == Policy::Always
    }

    fn write_out(&self) -> bool {
        self.journal.write_out()
    }

    fn request_sync(&self) {
        self.journal.bell.ring_sync();
    }

    fn room(&self) -> Room {
        self.journal.room()
    }

    fn file(&self) -> u32 {
        self.journal.current_file()
    }

    fn oldest_file(&self) -> u64 {
        self.journal.stats.oldest_index.load(Ordering::Relaxed)
    }

    fn bodies(&self) -> Option<&Arc<Bodies>> {
        Some(&self.bodies)
    }

    fn forget(&self, id: JobId) {
        self.bodies.cache.remove(id);
    }

    fn close(&self) {
        self.bodies.close();
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        self.journal.bell.ring_close(done_tx);
        // Bounded: a disk that hangs must not keep the process from exiting.
        if done_rx.recv_timeout(CLOSE_TIMEOUT).is_err() {
            tracing::error!("the store did not finish its last writes in {CLOSE_TIMEOUT:?}");
        }
    }
}

#[cfg(test)]
mod tests;
