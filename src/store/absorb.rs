//! The absorber: sled takes the journal in, behind the replies.
//!
//! One thread owns sled. It takes the journal's frames in order, gathers
//! what arrives within [`WINDOW`] of the first (earlier once it holds
//! [`WINDOW_SUBMISSIONS`] commands or [`WINDOW_BYTES`]), and applies it as
//! one atomic batch: the window's last word on each job it touched, packed
//! into pages (`page.rs`), what cleaning copies out of the oldest pages
//! (`log.rs`), the number of the last frame it holds (`c`) and its id
//! ceiling (`n`). A job put and deleted within one window (one its worker
//! takes at once) never reaches sled. While a window is open the thread
//! looks at the channel every [`GATHER`] instead of being woken per frame
//! (waking a thread per command costs more than the command).
//!
//! sled is flushed and synced once per journal file, when the writer has
//! moved past it and sled holds all of it; only then is the file removed
//! (why, and what sled 0.34's flush does not sync: see docs/durability.md,
//! section 5). On a disk with less free space than a batch needs (with a
//! margin) the absorber waits, trying again every [`LOW_DISK_RETRY`], since
//! sled does not survive a failed write (same section); should one fail
//! anyway, the absorber stops writing to sled.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sprout_protocol::JobId;
use tokio::sync::watch;

use super::ballast::free_space;
use super::blobs::Blobs;
use super::body_read::Bodies;
use super::log::Log;
use super::pack::{self, Placed};
use super::page;
use super::reclaim::Garbage;
use super::record::{COMMIT_KEY, NEXT_ID_KEY};
use super::share::Unshared;
use super::slots::Slot;
use super::whole::Marker;
use super::{segment, Progress, Seq};
use crate::binlog_stats::BinlogStats;
use crate::engine::Record;

/// What a commit wrote: the new pages' slots and sequence numbers, and
/// where the batch's bodies are in them.
type Written = (Vec<(Slot, u64)>, Vec<Placed>);

/// What the journal sends the absorber, in journal order.
pub enum Absorb {
    /// A frame was written: its commit number, the last submission in it,
    /// its id ceiling and its records.
    Frame {
        commit: u64,
        last_seq: Seq,
        ids_below: JobId,
        records: Vec<Record>,
    },
    /// The writer moved past journal file `number`, whose last frame is
    /// `last_commit`: it can go once sled holds that durably.
    Retired { number: u64, last_commit: u64 },
    /// Take in everything, flush, then answer.
    Close(mpsc::SyncSender<()>),
}

/// How long the first frame of a window waits for others.
const WINDOW: Duration = Duration::from_millis(50);
/// How often an open window looks at the channel.
const GATHER: Duration = Duration::from_micros(500);
/// A window is applied early once it holds this many commands...
const WINDOW_SUBMISSIONS: u64 = 4096;
/// ... or once its pages would hold this many bytes (`Log::page_bytes`:
/// an update counts its body, which it does not carry but its new image
/// holds).
const WINDOW_BYTES: usize = 16 << 20;
/// How often a window held back by a low disk is tried again.
const LOW_DISK_RETRY: Duration = Duration::from_millis(100);
/// Free space sled must have beyond twice a batch's bytes: a new sled log
/// segment and a snapshot, with room to spare.
const LOW_DISK_MARGIN: u64 = 2 << 20;

/// What sled holds, as the absorber starts.
pub struct SledState {
    pub log: Log,
    /// The last journal frame sled holds.
    pub commit: u64,
    pub ids_below: JobId,
    /// Journal files older than the current one, oldest first, with their
    /// last frame.
    pub retired: VecDeque<(u64, u64)>,
}

pub struct Absorber {
    pub db: ::sled::Db,
    /// sled's log file, for `fdatasync`.
    pub file: File,
    pub blobs: Blobs,
    pub store_dir: PathBuf,
    pub stats: Arc<BinlogStats>,
    pub progress: Arc<watch::Sender<Progress>>,
    pub state: SledState,
    /// Set by the first failed sled write (see the module docs).
    pub broken: Option<String>,
    /// The last frame sled holds durably.
    pub flushed: u64,
    /// Whether sled is known to hold all its commit key says (`whole.rs`).
    pub whole: Marker,
    /// Whether the last window waited for disk space.
    pub low_disk: bool,
    /// The bodies pinned until sled holds them (`body_read.rs`); an
    /// updated job's body, before its page is read (`pack.rs`).
    pub bodies: Arc<Bodies>,
    /// Bodies the cache may hold as copies of what sled's pages hold.
    pub unshared: Unshared,
    /// What sled replaced and has not freed yet (`reclaim.rs`).
    pub garbage: Garbage,
}

#[derive(Default)]
struct Window {
    frames: Vec<(u64, Vec<Record>)>,
    bytes: usize,
    first_seq: Option<Seq>,
    last_seq: Seq,
    ids_below: JobId,
    opened: Option<Instant>,
}

impl Window {
    /// Adds a frame whose records add `bytes` to the pages.
    fn push(&mut self, frame: (u64, Vec<Record>), last_seq: Seq, ids_below: JobId, bytes: usize) {
        self.bytes += bytes;
        self.opened.get_or_insert_with(Instant::now);
        if last_seq > 0 {
            self.first_seq.get_or_insert(last_seq);
            self.last_seq = last_seq;
        }
        self.ids_below = ids_below;
        self.frames.push(frame);
    }

    fn full(&self) -> bool {
        self.bytes >= WINDOW_BYTES
            || self
                .first_seq
                .is_some_and(|first| self.last_seq - first >= WINDOW_SUBMISSIONS)
    }

    fn due(&self) -> Option<Instant> {
        self.opened.map(|at| at + WINDOW)
    }
}

impl Absorber {
    pub fn run(mut self, rx: mpsc::Receiver<Absorb>) {
        let mut window = Window::default();
        let mut low_disk_until: Option<Instant> = None;
        // Recovery read all of sled.
        self.garbage.made(Instant::now());
        loop {
            let now = Instant::now();
            let apply = window.full() || window.due().is_some_and(|due| due <= now);
            if apply && low_disk_until.is_none_or(|until| until <= now) {
                low_disk_until = match self.apply(&mut window) {
                    true => None,
                    false => Some(now + LOW_DISK_RETRY),
                };
            }
            self.retire();
            self.whole.tend(
                self.broken.is_some(),
                self.low_disk,
                self.flushed,
                self.state.commit,
            );
            let share_at = self.unshared.due().filter(|_| self.broken.is_none());
            let idle_work = self.can_clean() || share_at.is_some_and(|at| at <= now);
            let quiet = window.frames.is_empty() && !idle_work && share_at.is_none();
            if quiet && low_disk_until.is_none() {
                self.garbage.collect(now);
            }
            let received = if window.frames.is_empty() && idle_work {
                match rx.try_recv() {
                    Err(TryRecvError::Empty) => {
                        self.idle_step();
                        continue;
                    }
                    received => received.ok(),
                }
            } else {
                // Held back by a low disk: wake per frame, or to try again.
                let wait = match (low_disk_until, window.due()) {
                    (Some(until), _) => Err(until),
                    (None, Some(due)) => Ok(due),
                    (None, None) => {
                        Err(share_at.unwrap_or(Instant::now() + Duration::from_secs(1)))
                    }
                };
                match wait {
                    Ok(due) => {
                        let left = due.saturating_duration_since(Instant::now());
                        std::thread::sleep(GATHER.min(left));
                        match rx.try_recv() {
                            Err(TryRecvError::Empty) => continue,
                            received => received.ok(),
                        }
                    }
                    Err(until) => {
                        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                            Err(RecvTimeoutError::Timeout) => continue,
                            received => received.ok(),
                        }
                    }
                }
            };
            // The channel only closes once the journal is gone.
            let Some(first) = received else { return };
            // Everything queued by now, up to a full window.
            let mut next = Some(first);
            while let Some(message) = next.take() {
                match message {
                    Absorb::Frame {
                        commit,
                        last_seq,
                        ids_below,
                        records,
                    } => {
                        // What the window's batch writes, and about what
                        // it keeps alive meanwhile (for an update, less).
                        let bytes = self.state.log.page_bytes(&records);
                        window.push((commit, records), last_seq, ids_below, bytes)
                    }
                    Absorb::Retired {
                        number,
                        last_commit,
                    } => self.state.retired.push_back((number, last_commit)),
                    Absorb::Close(done) => {
                        self.close(&mut window);
                        let _ = done.send(());
                        return;
                    }
                }
                if !window.full() {
                    next = rx.try_recv().ok();
                }
            }
        }
    }

    /// Nothing waits: a cleaning step on its own, or else (the store
    /// quiet) cached bodies made slices of sled's pages (`share.rs`).
    fn idle_step(&mut self) {
        self.garbage.made(Instant::now());
        if self.can_clean() {
            let result = self.commit(&[]);
            self.report(result);
        } else if self.broken.is_none() {
            self.unshared.step(&self.db, &self.bodies);
        }
    }

    fn can_clean(&self) -> bool {
        self.broken.is_none() && self.state.log.over_bound()
    }

    /// Applies the window to sled unless the disk is too low for it; says
    /// whether the window is done with (applied, or dropped after sled
    /// failed).
    fn apply(&mut self, window: &mut Window) -> bool {
        if window.frames.is_empty() {
            return true;
        }
        self.low_disk = self.broken.is_none() && self.disk_too_low(window.bytes);
        if self.low_disk {
            self.progress.send_modify(|p| p.absorb_paused = true);
            return false;
        }
        let window = std::mem::take(window);
        if self.broken.is_none() {
            self.garbage.made(Instant::now());
            let result = self.commit(&window.frames);
            if let Some((pages, placed)) = self.report(result) {
                self.state.ids_below = window.ids_below;
                // Not before: until sled holds them, the cache is the only
                // place to read these bodies from.
                let records = window.frames.iter().flat_map(|(_, records)| records);
                self.bodies.absorbed(records);
                self.unshared.queue(Instant::now(), &pages, &placed);
            }
        }
        let absorbed = window.last_seq;
        let paused = self.broken.is_some();
        self.progress.send_modify(|p| {
            p.absorbed = p.absorbed.max(absorbed);
            p.absorb_paused = paused;
        });
        true
    }

    fn disk_too_low(&self, bytes: usize) -> bool {
        let needed = 2 * bytes as u64 + LOW_DISK_MARGIN;
        match free_space(&self.store_dir) {
            Ok(free) if free >= needed => false,
            Ok(free) => {
                if !self.progress.borrow().absorb_paused {
                    tracing::warn!(
                        "the disk is nearly full ({free} bytes free): sled waits, the \
                         journal keeps every change meanwhile"
                    );
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Removes the journal files sled holds entirely, after making sled
    /// durable if it is not yet.
    fn retire(&mut self) {
        if self.broken.is_some() {
            return;
        }
        while let Some(&(number, last_commit)) = self.state.retired.front() {
            if last_commit > self.state.commit {
                return;
            }
            if self.flushed < last_commit {
                let result = self.make_durable();
                if self.report(result).is_none() {
                    return;
                }
            }
            if let Err(e) = segment::remove(&segment::dir(&self.store_dir), number) {
                tracing::warn!("cannot remove journal file {number}: {e}");
                return;
            }
            self.state.retired.pop_front();
            let oldest = match self.state.retired.front() {
                Some(&(next, _)) => next,
                None => self.stats.current_index.load(Ordering::Relaxed),
            };
            self.stats.oldest_index.store(oldest, Ordering::Relaxed);
        }
    }

    fn close(&mut self, window: &mut Window) {
        // A low disk does not hold a clean stop: what sled cannot take in
        // now, the journal keeps for the next start.
        if !window.frames.is_empty() && !self.disk_too_low(window.bytes) {
            self.apply(window);
        }
        if self.broken.is_none() && self.flushed < self.state.commit {
            let result = self.make_durable();
            self.report(result);
        }
        self.retire();
    }

    /// Applies frames as one atomic batch (see `pack.rs`): their last word
    /// on each job they touched, in new pages, plus what cleaning the
    /// oldest pages copies out of them. No frames: a cleaning step on its
    /// own. Returns the new pages' slots and sequence numbers, and where
    /// the batch's bodies are in them.
    fn commit(&mut self, frames: &[(u64, Vec<Record>)]) -> io::Result<Written> {
        // Readers of bodies (`body_read.rs`) look again if a read does not
        // check out while this runs.
        let dir = self.state.log.directory();
        dir.change(|| self.pack_and_apply(frames))
    }

    fn pack_and_apply(&mut self, frames: &[(u64, Vec<Record>)]) -> io::Result<Written> {
        let db = &self.db;
        let old_page = |slot| match db.get(page::page_key(slot)) {
            Ok(Some(value)) => Ok(Some(value.to_vec())),
            Ok(None) => Err(io::Error::other(format!(
                "the page in slot {slot} is missing"
            ))),
            Err(e) => Err(io::Error::from(e)),
        };
        let records = frames.iter().flat_map(|(_, records)| records);
        let cached = |id| self.bodies.cache.peek(id);
        let log = &mut self.state.log;
        let packed = pack::pack(log, records, usize::MAX, cached, old_page)?;
        let mut batch = ::sled::Batch::default();
        for slot in packed.freed {
            batch.remove(&page::page_key(slot));
        }
        let mut pages = Vec::with_capacity(packed.pages.len());
        for (slot, value) in packed.pages {
            pages.push((slot, page::read(&value).map_or(0, |(seq, _)| seq)));
            batch.insert(&page::page_key(slot), value);
        }
        let commit = frames.last().map_or(self.state.commit, |(c, _)| *c);
        batch.insert(COMMIT_KEY, &commit.to_le_bytes());
        batch.insert(NEXT_ID_KEY, &self.state.ids_below.to_le_bytes());
        self.db.apply_batch(batch).map_err(io::Error::from)?;
        self.state.commit = commit;
        self.stats
            .records_migrated
            .fetch_add(packed.moved, Ordering::Relaxed);
        Ok((pages, packed.bodies))
    }

    fn make_durable(&mut self) -> io::Result<()> {
        self.db.flush().map_err(io::Error::from)?;
        // sled's flush alone is not an fsync, nor does sled ever sync its
        // blob files (see docs/durability.md, section 5).
        self.blobs.sync(&self.file)?;
        self.flushed = self.state.commit;
        Ok(())
    }

    /// Logs a failure and stops writing to sled; returns what `result`
    /// holds if it is Ok.
    fn report<T>(&mut self, result: io::Result<T>) -> Option<T> {
        let e = match result {
            Ok(value) => return Some(value),
            Err(e) => e,
        };
        if self.broken.is_none() {
            tracing::error!(
                "the store failed to take in the journal: {e}; the journal keeps \
                 every change, and a restart takes it in"
            );
            self.broken = Some(e.to_string());
            self.progress.send_modify(|p| p.absorb_paused = true);
        }
        None
    }
}
