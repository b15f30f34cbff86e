//! The durable store: jobs in an embedded sled database, written by one
//! thread that commits in groups.
//!
//! Connections never touch sled. Their records queue on a channel; the
//! writer takes everything queued, packs it into a few pages (`page.rs`),
//! applies them as one atomic `sled::Batch` and, under `-f 0`, makes it
//! durable before it reports the whole group done: one flush answers every
//! reply that was waiting, however many connections sent them (group
//! commit).
//!
//! What "durable" means here: sled's `flush` writes its log buffers with
//! `pwrite` and then, on Linux, calls only `sync_file_range` on the written
//! range (sled 0.34.7, `pagecache/iobuf.rs`). That survives a killed process
//! (the data is in the kernel) but not a power loss: `sync_file_range`
//! flushes neither the file's metadata (its growing size) nor the drive's
//! write cache. So after every flush the writer also calls `fdatasync` on
//! sled's `db` file, which covers both (or `syncfs`, when sled wrote blob
//! files it does not sync itself: see `blobs.rs`).
//!
//! A failed write poisons the writer: sled 0.34 does not recover from a
//! write error in-process (after ENOSPC its next flush waits forever), so
//! from the first failure on nothing more is sent to sled, every later
//! submission fails at once, and the server refuses new jobs until it is
//! restarted with room on the disk.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use sprout_protocol::JobId;
use tokio::sync::watch;

use super::blobs::Blobs;
use super::checkpoint::{self, Checkpoint};
use super::log::{self, Log};
use super::page::{self, PageBuilder, PAGE_PREFIX};
use super::record::{self, COMMIT_KEY, NEXT_ID_KEY};
use super::{Policy, Progress, Seq, Store};
use crate::engine::{BinlogStats, JobImage, Record, Stored};

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
}

/// What a store held at startup.
pub struct Recovered {
    /// Non-buried jobs by id, then buried jobs in bury order: the order to
    /// restore them in.
    pub jobs: Vec<JobImage>,
    /// The next id to issue.
    pub next_id: JobId,
    /// Damaged jobs skipped (only with `salvage`).
    pub skipped: usize,
    /// The size of the store's pages, and of the live job images in them.
    pub stored_bytes: u64,
    pub live_bytes: u64,
    /// The number of the last batch in the store.
    commit: u64,
    /// Where each job is kept.
    log: Log,
}

enum Message {
    Records(Seq, Vec<Record>),
    /// Make everything durable, then answer.
    Close(mpsc::SyncSender<()>),
}

pub struct SledStore {
    tx: Mutex<mpsc::Sender<Message>>,
    next_seq: AtomicU64,
    progress: watch::Receiver<Progress>,
    policy: Policy,
    healthy: Arc<AtomicBool>,
}

fn other(what: String) -> io::Error {
    io::Error::other(what)
}

impl SledStore {
    /// Opens (or creates) the store in `options.dir` and reads back every
    /// job. A damaged store is an error unless `options.salvage` is set.
    pub fn open(options: &Options, stats: Arc<BinlogStats>) -> io::Result<(SledStore, Recovered)> {
        let dir = &options.dir;
        std::fs::create_dir_all(dir)
            .map_err(|e| other(format!("cannot create {}: {e}", dir.display())))?;
        let db = ::sled::Config::new()
            .path(dir)
            .cache_capacity(options.cache_bytes)
            .flush_every_ms(match options.policy {
                // -F: sled's own background writer, about once a second.
                Policy::Never => Some(1000),
                _ => None,
            })
            .open()
            .map_err(|e| {
                // sled reports its file lock only in the message text.
                let hint = if e.to_string().contains("acquire lock") {
                    "is another sprout using this directory?"
                } else {
                    "if it is damaged, move it aside; sled cannot open it even to salvage"
                };
                other(format!(
                    "cannot open the store in {}: {e} ({hint})",
                    dir.display()
                ))
            })?;
        let (checkpoint, durable) = Checkpoint::open(dir)?;
        let mut recovered = recover(&db, durable, options.salvage).map_err(|e| {
            other(format!(
                "the store in {} is damaged: {e}; refusing to start so no job is \
                 silently dropped (start with --salvage to keep what can be read)",
                dir.display()
            ))
        })?;
        let file = File::open(dir.join("db"))?;
        let (tx, rx) = mpsc::channel();
        let (progress_tx, progress) = watch::channel(Progress::default());
        let healthy = Arc::new(AtomicBool::new(true));
        let writer = Writer {
            db,
            file,
            blobs: Blobs::new(dir),
            policy: options.policy,
            progress: progress_tx,
            stats,
            healthy: healthy.clone(),
            next_id: recovered.next_id,
            log: std::mem::take(&mut recovered.log),
            checkpoint,
            commit: recovered.commit.max(durable),
            broken: None,
        };
        std::thread::Builder::new()
            .name("sprout-store".into())
            .spawn(move || writer.run(rx))?;
        let store = SledStore {
            tx: Mutex::new(tx),
            next_seq: AtomicU64::new(0),
            progress,
            policy: options.policy,
            healthy,
        };
        Ok((store, recovered))
    }

    fn send(&self, message: Message) {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        // The writer only stops after Close; a send before that cannot fail.
        let _ = tx.send(message);
    }
}

impl Store for SledStore {
    fn submit(&self, records: Vec<Record>) -> Seq {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed) + 1;
        self.send(Message::Records(seq, records));
        seq
    }

    fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.clone()
    }

    fn replies_wait(&self) -> bool {
        self.policy == Policy::Always
    }

    fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    fn close(&self) {
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        self.send(Message::Close(done_tx));
        // Bounded: a disk that hangs must not keep the process from exiting.
        if done_rx.recv_timeout(CLOSE_TIMEOUT).is_err() {
            tracing::error!("the store did not finish its last flush in {CLOSE_TIMEOUT:?}");
        }
    }
}

/// How long shutdown waits for the final flush.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads a counter key, 0 when absent.
fn counter(db: &::sled::Db, key: &[u8]) -> Result<u64, String> {
    match db.get(key).map_err(|e| e.to_string())? {
        Some(v) => record::decode_u64(&v).map_err(|e| e.to_string()),
        None => Ok(0),
    }
}

/// Reads every job back, checking that the store holds every commit the
/// checkpoint says was durable and that every page decodes.
fn recover(db: &::sled::Db, durable: u64, salvage: bool) -> Result<Recovered, String> {
    let commit = counter(db, COMMIT_KEY)?;
    if commit < durable {
        let lost = format!(
            "it ends at commit {commit} but commit {durable} was made durable \
             ({} says so): the log is damaged or truncated",
            checkpoint::FILE_NAME
        );
        if !salvage {
            return Err(lost);
        }
        tracing::error!("salvaging: {lost}");
    }
    let mut pages = Vec::new();
    for item in db.iter() {
        let (key, value) = item.map_err(|e| e.to_string())?;
        match key.first() {
            Some(&PAGE_PREFIX) => {
                pages.push((page::key_slot(&key).map_err(|e| e.to_string())?, value))
            }
            _ if *key == *COMMIT_KEY || *key == *NEXT_ID_KEY => {}
            _ => {
                return Err(format!(
                    "it holds a key this sprout does not know ({:?}): \
                     was it written by another version?",
                    String::from_utf8_lossy(&key)
                ))
            }
        }
    }
    let replayed = Log::replay(&pages, salvage).map_err(|e| e.to_string())?;
    let mut recovered = Recovered {
        jobs: Vec::with_capacity(replayed.images.len()),
        next_id: counter(db, NEXT_ID_KEY)?.max(1),
        skipped: replayed.skipped,
        stored_bytes: 0,
        live_bytes: 0,
        commit,
        log: Log::default(),
    };
    for image in replayed.images {
        match record::decode_job(image) {
            Ok(image) => {
                recovered.next_id = recovered.next_id.max(image.id + 1);
                recovered.jobs.push(image);
            }
            Err(e) if salvage => {
                tracing::error!("skipping a damaged job: {e}");
                recovered.skipped += 1;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    (recovered.stored_bytes, recovered.live_bytes) = replayed.log.sizes();
    recovered.log = replayed.log;
    // Buried jobs go last, oldest burial first, so they bury in order.
    recovered
        .jobs
        .sort_unstable_by_key(|image| match image.state {
            Stored::Buried(seq) => (1, seq),
            _ => (0, image.id),
        });
    Ok(recovered)
}

/// The thread that owns the database.
struct Writer {
    db: ::sled::Db,
    file: File,
    blobs: Blobs,
    policy: Policy,
    progress: watch::Sender<Progress>,
    stats: Arc<BinlogStats>,
    healthy: Arc<AtomicBool>,
    /// The highest next id written to the store.
    next_id: JobId,
    log: Log,
    checkpoint: Checkpoint,
    /// The number of the last batch applied.
    commit: u64,
    /// Set by the first failed write (see the module docs).
    broken: Option<String>,
}

/// Under `-f MS`, how often the writer takes what was submitted while a
/// window is open.
const GATHER: Duration = Duration::from_micros(500);

/// Submissions taken off the channel before the writer looks at the clock
/// again.
const MAX_GROUP: usize = 4096;

/// Under `-f MS`, a window is applied early once it holds this many
/// submissions: applying more at once keeps the writer from taking new
/// ones long enough for connections to reach `MAX_STORE_LAG` and wait
/// (measured: a whole 50 ms window cost pipelined puts ~25% of their
/// throughput; 2048 costs none and keeps the gain for pingpong).
const WINDOW_SUBMISSIONS: usize = 2048;

/// ... or once its records hold this many bytes, so the writer's memory
/// stays bounded whatever the job size.
const WINDOW_BYTES: usize = 16 << 20;

/// The records the writer holds before it applies them.
///
/// Under `-f MS` that is a window: what arrives within MS of its first
/// record is applied as one batch (earlier once it reaches
/// [`WINDOW_SUBMISSIONS`] or [`WINDOW_BYTES`]) and flushed once, MS after
/// that first record: nothing waits longer than `-f` promises (the clock
/// starts when a record arrives, not when it is applied). The writer wakes
/// every [`GATHER`] rather than per submission, pays sled's per-batch cost
/// once per window, and a job put and deleted within one window (a job its
/// worker takes at once) never reaches the disk: a commit writes only each
/// job's last state. Under `-f 0` and `-F` a window is whatever was queued
/// at once.
#[derive(Default)]
struct Window {
    group: Vec<(Seq, Vec<Record>)>,
    bytes: usize,
    /// Under `-f MS`: when what was applied or taken must be durable.
    due: Option<Instant>,
}

impl Window {
    fn push(&mut self, seq: Seq, records: Vec<Record>) {
        self.bytes += records.iter().map(held_bytes).sum::<usize>();
        self.group.push((seq, records));
    }

    /// The first and last submission held.
    fn span(&self) -> Option<(Seq, Seq)> {
        Some((self.group.first()?.0, self.group.last()?.0))
    }

    fn take(&mut self) -> Vec<(Seq, Vec<Record>)> {
        self.bytes = 0;
        std::mem::take(&mut self.group)
    }
}

/// About what a record keeps alive while it waits: its body, and the rest.
fn held_bytes(record: &Record) -> usize {
    match record {
        Record::Put(image) | Record::Update(image) => image.body.len() + 64,
        Record::Delete(_) => 16,
    }
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Message>) {
        let mut window = Window::default();
        loop {
            if window.due.is_some_and(|due| due <= Instant::now()) {
                self.apply(&mut window);
                self.report(self.make_durable(), "flush");
                window.due = None;
                continue;
            }
            let received =
                if self.broken.is_none() && window.group.is_empty() && self.log.over_bound() {
                    match rx.try_recv() {
                        Err(TryRecvError::Empty) => {
                            // Nothing waits: a cleaning step on its own.
                            let result = self.commit(&[]);
                            if self.report(result, "cleaning") {
                                self.made_dirty(&mut window);
                            }
                            continue;
                        }
                        received => received.ok(),
                    }
                } else {
                    match window.due {
                        Some(due) => {
                            // A window is open: look at the channel every
                            // GATHER, not at every submission (waking this
                            // thread per command costs more than the command).
                            let left = due.saturating_duration_since(Instant::now());
                            std::thread::sleep(GATHER.min(left));
                            match rx.try_recv() {
                                // Due now: applied and flushed at the top of the loop.
                                Err(TryRecvError::Empty) => continue,
                                received => received.ok(),
                            }
                        }
                        None => rx.recv().ok(),
                    }
                };
            // The channel only closes after Close was answered.
            let Some(first) = received else { return };
            let taken_from = window.group.len();
            let mut close = None;
            let mut next = Some(first);
            let mut taken = 0;
            while let Some(message) = next.take() {
                match message {
                    Message::Records(seq, records) => window.push(seq, records),
                    Message::Close(done) => {
                        close = Some(done);
                        break;
                    }
                }
                taken += 1;
                if taken < MAX_GROUP {
                    next = rx.try_recv().ok();
                }
            }
            if let Policy::Every(_) = self.policy {
                // Taken is as good as written here: replies never wait for
                // a window, and one is never held past its due time.
                let first_taken = window.group.get(taken_from).map(|g| g.0);
                if let (Some(from), Some((_, to))) = (first_taken, window.span()) {
                    self.made_dirty(&mut window);
                    self.progress.send_modify(|p| p.advance(from, to, false));
                }
                if window.group.len() >= WINDOW_SUBMISSIONS || window.bytes >= WINDOW_BYTES {
                    self.apply(&mut window);
                }
            } else if let Some((from, to)) = window.span() {
                let ok = self.apply(&mut window);
                self.progress.send_modify(|p| p.advance(from, to, !ok));
            }
            if let Some(done) = close {
                self.apply(&mut window);
                if self.policy != Policy::Never || window.due.is_some() {
                    self.report(self.make_durable(), "final flush");
                }
                let _ = done.send(());
                return;
            }
        }
    }

    /// Applies what the window holds (durably under `-f 0`); says whether
    /// that worked (see [`Writer::report`]).
    fn apply(&mut self, window: &mut Window) -> bool {
        if window.group.is_empty() {
            return true;
        }
        let group = window.take();
        let result = self.commit(&group);
        self.report(result, "write")
    }

    /// Under `-f MS`, starts the clock for the next flush if it is not
    /// running: something not yet durable was applied or taken.
    fn made_dirty(&self, window: &mut Window) {
        if let Policy::Every(interval) = self.policy {
            window.due.get_or_insert_with(|| Instant::now() + interval);
        }
    }

    /// Applies a group as one atomic batch (durably under `-f 0`): the
    /// group's last word on each job it touched, in new pages, plus what
    /// cleaning the oldest pages copies out of them. An empty group is a
    /// cleaning step on its own.
    fn commit(&mut self, group: &[(Seq, Vec<Record>)]) -> io::Result<()> {
        self.check_broken()?;
        let mut written = 0;
        let mut next_id = self.next_id;
        let mut order = Vec::new();
        let mut last: FxHashMap<JobId, Option<&JobImage>> = FxHashMap::default();
        for record in group.iter().flat_map(|(_, records)| records) {
            written += 1;
            let (id, image) = match record {
                Record::Put(image) => {
                    next_id = next_id.max(image.id + 1);
                    (image.id, Some(image))
                }
                Record::Update(image) => (image.id, Some(image)),
                Record::Delete(id) => (*id, None),
            };
            if last.insert(id, image).is_none() {
                order.push(id);
            }
        }
        let first_seq = self.log.next_seq();
        let mut pages = PageBuilder::default();
        for id in order {
            let stored = self.log.forget(id);
            match last[&id] {
                Some(image) => {
                    let (page, len) = pages.image(image);
                    self.log.place(first_seq + page as u64, id, len);
                }
                None if stored => pages.tombstone(id),
                None => {}
            }
        }
        let mut batch = ::sled::Batch::default();
        self.clean(&mut pages, &mut batch, first_seq)?;
        for entries in pages.finish() {
            let value = page::seal(self.log.next_seq(), &entries);
            let (_, slot) = self.log.add_page(value.len());
            batch.insert(&page::page_key(slot), value);
        }
        if next_id != self.next_id {
            batch.insert(NEXT_ID_KEY, &next_id.to_le_bytes());
        }
        batch.insert(COMMIT_KEY, &(self.commit + 1).to_le_bytes());
        self.db.apply_batch(batch).map_err(io::Error::from)?;
        self.commit += 1;
        self.next_id = next_id;
        self.stats
            .records_written
            .fetch_add(written, Ordering::Relaxed);
        if self.policy == Policy::Always {
            self.make_durable()?;
        }
        Ok(())
    }

    /// Cleans the oldest pages while the log is over its bound (see
    /// `log.rs`): their live images go into `pages`, they leave the tree.
    fn clean(
        &mut self,
        pages: &mut PageBuilder,
        batch: &mut ::sled::Batch,
        first_seq: u64,
    ) -> io::Result<()> {
        let budget = match pages.bytes() {
            0 => log::IDLE_CLEAN_BYTES,
            written => log::clean_budget(written as u64),
        };
        let (mut cleaned, mut moved) = (0, 0);
        while let Some((seq, slot)) = self.log.to_clean(budget, cleaned) {
            let key = page::page_key(slot);
            let value = self.db.get(key).map_err(io::Error::from)?;
            let value = value.ok_or_else(|| other(format!("page {seq} is missing")))?;
            let corrupt = |e: record::Corrupt| other(format!("page {seq}: {e}"));
            let (_, entries) = page::read(&value).map_err(corrupt)?;
            for entry in entries {
                let entry = entry.map_err(corrupt)?;
                if entry.image.is_some() && self.log.is_live(seq, entry.id) {
                    let (page, len) = pages.copy(entry.raw);
                    self.log.place(first_seq + page as u64, entry.id, len);
                    moved += 1;
                }
            }
            cleaned += value.len() as u64;
            batch.remove(&key);
            self.log.remove_oldest();
        }
        self.stats
            .records_migrated
            .fetch_add(moved, Ordering::Relaxed);
        Ok(())
    }

    fn make_durable(&self) -> io::Result<()> {
        self.check_broken()?;
        self.db.flush().map_err(io::Error::from)?;
        // See the module docs: sled's flush alone is not an fsync; nor does
        // sled ever sync its blob files (see `blobs.rs`).
        self.blobs.sync(&self.file)?;
        self.checkpoint.record(self.commit)?;
        self.stats.oldest_index.store(1, Ordering::Relaxed);
        self.stats.current_index.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn check_broken(&self) -> io::Result<()> {
        match &self.broken {
            Some(why) => Err(other(format!("the store failed earlier: {why}"))),
            None => Ok(()),
        }
    }

    /// Logs a failure and poisons the writer; says whether `result` was Ok.
    fn report(&mut self, result: io::Result<()>, what: &str) -> bool {
        let Err(e) = result else { return true };
        if self.broken.is_none() {
            tracing::error!(
                "store {what} failed: {e}; refusing new jobs until sprout is \
                 restarted with room on the disk"
            );
            self.broken = Some(e.to_string());
            self.healthy.store(false, Ordering::Relaxed);
        }
        false
    }
}

#[cfg(test)]
mod tests;
