//! The journal: where an acknowledged change is kept first.
//!
//! Every command's records are appended to a journal file of our own
//! (`segment.rs`) before its reply goes out, as one framed, checksummed
//! write (`frame.rs`); sled, the store of record, takes the frames in
//! behind it (`absorb.rs`), and a journal file is removed once sled holds
//! all of it durably. Recovery loads sled and replays the journal's tail
//! (`recover.rs`). What each policy adds to the write:
//!
//! | policy | before the reply | afterwards |
//! | --- | --- | --- |
//! | `-f 0` | the frame is written and `fdatasync`ed | |
//! | `-f MS` | the frame is written (`pwrite` returned) | synced within MS |
//! | `-F` | the frame is written | never forced |
//!
//! So a killed process (kill -9, a panic, the OOM killer) loses nothing
//! acknowledged under any policy: what `pwrite` handed to the kernel is the
//! kernel's to write back. The policy only bounds what a power loss or a
//! kernel crash can take. Job ids survive even that (`ids.rs`).
//!
//! Why a journal in front of sled: sled's flush costs far too much to pay
//! per reply, one `pwrite` does not (see docs/durability.md, section 5).
//! sled keeps the compacted state, so the disk stays bounded by live data
//! (`log.rs`), and the journal by the few files sled has not taken in yet.
//!
//! Who writes: no thread sits between a connection and the disk. A
//! submission (under the engine's lock, so in engine order) only queues the
//! records; whichever connection first needs its reply written takes the
//! writer and writes everything queued by then as one frame, for everybody
//! (group commit without a hand-off; the others find their records written,
//! or wait for the writer to finish). Under `-f 0` the keeper thread
//! (`keeper.rs`) writes and syncs, one `fdatasync` answering every reply
//! that waits. The keeper also syncs under `-f MS` and writes what no reply
//! waits for (a TTR running out); the allocator thread (`allocator.rs`)
//! makes journal files ahead of use (`room.rs`).
//!
//! A failed write poisons the journal: a frame may be half written, and a
//! disk that fails one write will fail more, so from then on every
//! submission fails at once (puts answer OUT_OF_MEMORY, other changes
//! INTERNAL_ERROR) until sprout is restarted; everything acknowledged before
//! is in DIR.

mod space;

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::FxHashSet;
use sprout_protocol::JobId;
use tokio::sync::watch;

use super::absorb::Absorb;
use super::bells::{Bell, Wake};
use super::{frame, ids, room, segment, Policy, Progress, Seq};
use crate::binlog_stats::BinlogStats;
use crate::engine::Record;

/// A journal file in use.
pub struct Segment {
    pub number: u64,
    pub file: Arc<File>,
    pub size: u64,
    /// Where the next frame goes.
    pub offset: u64,
}

impl Segment {
    fn usable(&self) -> i64 {
        room::usable(self.size, self.offset)
    }
}

/// One command's records, queued.
struct Group {
    seq: Seq,
    records: Vec<Record>,
    /// What its frame may take: a header and its entries.
    bytes: usize,
}

#[derive(Default)]
struct Pending {
    last: Seq,
    groups: VecDeque<Group>,
    /// The highest id any put has had.
    highest_id: Option<JobId>,
}

/// The writer's state: only whoever holds it writes to the journal.
pub struct Writer {
    pub current: Segment,
    pub spares: VecDeque<Segment>,
    /// Earlier files with frames not yet synced.
    pub unsynced: Vec<Arc<File>>,
    /// The last frame's commit number.
    pub commit: u64,
    /// The id ceiling written in frames.
    pub ids_below: JobId,
    /// Every submission up to here is written (or failed).
    pub written: Seq,
    buf: Vec<u8>,
    absorb: mpsc::Sender<Absorb>,
    broken: Option<String>,
    /// Jobs whose put failed: a later record of theirs is dropped (a job
    /// handed to a waiting reserver before its put failed may still be
    /// released or buried by it), so no frame names a job never stored.
    lost: FxHashSet<JobId>,
}

/// How the journal starts, from recovery.
pub struct Start {
    pub current: Segment,
    pub spares: VecDeque<Segment>,
    pub commit: u64,
    pub ids_below: JobId,
    /// The next id the engine hands out.
    pub next_id: JobId,
    pub live: i64,
    pub next_number: u64,
}

/// What the journal is told by the command line.
pub struct Settings {
    pub policy: Policy,
    /// Where the journal files go.
    pub dir: PathBuf,
    /// `-s`.
    pub file_size: u64,
    /// `-z`.
    pub max_job_size: u32,
}

pub struct Journal {
    pub policy: Policy,
    pub dir: PathBuf,
    pub file_size: u64,
    pending: Mutex<Pending>,
    writer: Mutex<Writer>,
    pub progress: Arc<watch::Sender<Progress>>,
    /// The room figures (`room.rs`).
    capacity: AtomicI64,
    pending_bytes: AtomicI64,
    live: AtomicI64,
    /// What the disk can still give the journal (the keeper measures it).
    allocatable: AtomicI64,
    /// The bytes the ballast lacks (the allocator says): the journal
    /// leaves them to it, or the next open on a full disk could fail.
    ballast_missing: AtomicI64,
    pub kept: i64,
    /// The file being written, for `stats-job`.
    current: AtomicU32,
    /// The number the next journal file gets.
    next_number: AtomicU64,
    start_id: JobId,
    pub bell: Bell,
    allocator: Wake,
    pub stats: Arc<BinlogStats>,
}

impl Journal {
    pub fn new(
        settings: Settings,
        start: Start,
        absorb: mpsc::Sender<Absorb>,
        progress: Arc<watch::Sender<Progress>>,
        stats: Arc<BinlogStats>,
        allocator: Wake,
    ) -> Journal {
        let Settings {
            policy,
            dir,
            file_size,
            max_job_size,
        } = settings;
        let capacity =
            start.current.usable() + start.spares.iter().map(Segment::usable).sum::<i64>();
        stats
            .current_index
            .store(start.current.number, Ordering::Relaxed);
        progress.send_modify(|p| p.ids_below = start.ids_below);
        Journal {
            policy,
            dir,
            file_size,
            pending: Mutex::new(Pending::default()),
            current: AtomicU32::new(start.current.number as u32),
            writer: Mutex::new(Writer {
                current: start.current,
                spares: start.spares,
                unsynced: Vec::new(),
                commit: start.commit,
                ids_below: start.ids_below,
                written: 0,
                buf: Vec::new(),
                absorb,
                broken: None,
                lost: FxHashSet::default(),
            }),
            progress,
            capacity: AtomicI64::new(capacity),
            pending_bytes: AtomicI64::new(0),
            live: AtomicI64::new(start.live),
            allocatable: AtomicI64::new(0),
            ballast_missing: AtomicI64::new(0),
            kept: room::kept(file_size, max_job_size),
            next_number: AtomicU64::new(start.next_number),
            start_id: start.next_id,
            bell: Bell::default(),
            allocator,
            stats,
        }
    }

    /// Queues one command's records (under the engine's lock).
    pub fn submit(&self, records: Vec<Record>) -> Seq {
        let mut bytes = frame::HEADER_LEN;
        let (mut live, mut highest) = (0, None);
        for record in &records {
            bytes += frame::pushed_len(record);
            match record {
                Record::Put(image) => {
                    live += 1;
                    highest = highest.max(Some(image.id));
                }
                Record::Delete(_) => live -= 1,
                Record::Update(_) => {}
            }
        }
        self.live.fetch_add(live, Ordering::Relaxed);
        self.pending_bytes
            .fetch_add(bytes as i64, Ordering::Relaxed);
        let mut pending = lock(&self.pending);
        pending.last += 1;
        let seq = pending.last;
        pending.highest_id = pending.highest_id.max(highest);
        pending.groups.push_back(Group {
            seq,
            records,
            bytes,
        });
        seq
    }

    /// Writes whatever is queued, unless someone else is writing; true if
    /// it wrote (and reported) something. False when another writer holds
    /// the writer, or took the queue and has yet to report (it reports
    /// after letting go of the writer): either way a report follows, and a
    /// caller that looped instead of waiting for it spun meanwhile (seen
    /// under valgrind: 7 times a drain's instructions).
    pub fn write_out(&self) -> bool {
        match self.writer.try_lock() {
            Ok(writer) => self.write_held(writer),
            Err(std::sync::TryLockError::WouldBlock) => false,
            Err(std::sync::TryLockError::Poisoned(e)) => self.write_held(e.into_inner()),
        }
    }

    /// Writes whatever is queued, waiting for the writer (the keeper's way).
    pub fn write_all(&self) {
        self.write_held(lock(&self.writer));
    }

    /// Writes what is queued with the writer `w`, then releases it and
    /// tells the replies waiting. (Waking them with the writer held would
    /// keep every other connection from writing meanwhile: a thread
    /// descheduled while holding it stalls them all.)
    /// Returns whether it wrote (or failed) anything.
    fn write_held(&self, mut w: MutexGuard<'_, Writer>) -> bool {
        let before = w.written;
        self.write_queued(&mut w);
        let written = w.written;
        drop(w);
        if written != before {
            self.published(written);
        }
        written != before
    }

    /// Reports submissions up to `written` written.
    fn published(&self, written: Seq) {
        self.progress
            .send_modify(|p| p.written = p.written.max(written));
        if let Policy::Every(_) = self.policy {
            self.bell.ring_dirty();
        }
    }

    /// Writes everything queued, as one frame per journal file it fills;
    /// the caller reports the progress once it let go of the writer.
    fn write_queued(&self, w: &mut Writer) {
        let (mut groups, highest) = {
            let mut pending = lock(&self.pending);
            (std::mem::take(&mut pending.groups), pending.highest_id)
        };
        if groups.is_empty() {
            return;
        }
        if w.broken.is_none() {
            if let Some(ceiling) = highest.and_then(|h| ids::raise(w.ids_below, h)) {
                w.ids_below = ceiling;
                // The new ceiling must reach the disk before any reply
                // names an id above the old one.
                self.bell.ring_sync();
            }
        }
        self.admit(w, &mut groups);
        while !groups.is_empty() {
            if let Some(why) = &w.broken {
                tracing::debug!("journal broken ({why}): failing {} commands", groups.len());
                self.fail(w, groups.drain(..));
                break;
            }
            let free = (w.current.size - w.current.offset) as usize;
            let (mut len, mut take) = (frame::HEADER_LEN, 0);
            for group in &groups {
                let entries = group.bytes - frame::HEADER_LEN;
                if len + entries > free {
                    break;
                }
                len += entries;
                take += 1;
            }
            if take == 0 {
                let need = groups[0].bytes;
                if let Err(e) = self.next_file(w, need) {
                    self.poison(w, format!("cannot start a new journal file: {e}"));
                }
                continue;
            }
            let frame: Vec<Group> = groups.drain(..take).collect();
            if let Err((e, frame)) = self.write_frame(w, frame, len) {
                self.poison(w, format!("journal write failed: {e}"));
                self.fail(w, frame.into_iter());
            }
        }
    }

    /// The writer's side of the room rules (`engine/admission.rs`): a put is
    /// written only while the allocated room left after it covers what
    /// puts must leave; short of that, a journal file is allocated on the
    /// spot, and if the disk has no room for one, the put fails (its reply
    /// becomes OUT_OF_MEMORY). Records of jobs whose put failed are dropped.
    fn admit(&self, w: &mut Writer, groups: &mut VecDeque<Group>) {
        let mut kept = VecDeque::with_capacity(groups.len());
        for mut group in groups.drain(..) {
            let put = group.records.iter().find_map(|r| match r {
                Record::Put(image) => Some(image.id),
                _ => None,
            });
            if let Some(id) = put {
                while w.broken.is_none() && self.room().bytes < self.kept {
                    let size = (group.bytes + segment::MAGIC.len()) as u64;
                    match self.allocate(size) {
                        Ok(spare) => {
                            self.capacity.fetch_add(spare.usable(), Ordering::Relaxed);
                            w.spares.push_back(spare);
                        }
                        Err(e) => {
                            tracing::debug!("a put finds no room: {e}");
                            break;
                        }
                    }
                }
                if w.broken.is_none() && self.room().bytes < self.kept {
                    w.lost.insert(id);
                    self.fail(w, std::iter::once(group));
                    continue;
                }
            }
            if !w.lost.is_empty() {
                let before = group.records.len();
                group.records.retain(|r| {
                    let id = match r {
                        Record::Put(image) | Record::Update(image) => image.id,
                        Record::Delete(id) => *id,
                    };
                    !w.lost.contains(&id)
                });
                let dropped = before - group.records.len();
                if dropped > 0 {
                    for r in &group.records {
                        if let Record::Delete(id) = r {
                            w.lost.remove(id);
                        }
                    }
                    let bytes = frame::HEADER_LEN
                        + group.records.iter().map(frame::pushed_len).sum::<usize>();
                    self.pending_bytes
                        .fetch_sub((group.bytes - bytes) as i64, Ordering::Relaxed);
                    group.bytes = bytes;
                }
            }
            kept.push_back(group);
        }
        *groups = kept;
    }

    /// Writes `groups` as one frame of `len` bytes; gives them back if the
    /// write failed.
    fn write_frame(
        &self,
        w: &mut Writer,
        groups: Vec<Group>,
        len: usize,
    ) -> Result<(), (io::Error, Vec<Group>)> {
        let commit = w.commit + 1;
        w.buf.clear();
        let start = frame::begin(&mut w.buf, commit, w.ids_below);
        let mut records = 0;
        for record in groups.iter().flat_map(|g| &g.records) {
            frame::push(&mut w.buf, record);
            records += 1;
        }
        frame::finish(&mut w.buf, start);
        debug_assert_eq!(w.buf.len(), len);
        if let Err(e) = w.current.file.write_all_at(&w.buf, w.current.offset) {
            return Err((e, groups));
        }
        w.current.offset += len as u64;
        w.commit = commit;
        let last_seq = groups.last().map_or(w.written, |g| g.seq);
        w.written = last_seq;
        let estimated: usize = groups.iter().map(|g| g.bytes).sum();
        self.capacity.fetch_sub(len as i64, Ordering::Relaxed);
        self.pending_bytes
            .fetch_sub(estimated as i64, Ordering::Relaxed);
        self.stats
            .records_written
            .fetch_add(records, Ordering::Relaxed);
        self.stats.frames_written.fetch_add(1, Ordering::Relaxed);
        // sled takes it in behind (`absorb.rs`); the channel only closes
        // once the journal is closed.
        let _ = w.absorb.send(Absorb::Frame {
            commit,
            last_seq,
            ids_below: w.ids_below,
            records: groups.into_iter().flat_map(|g| g.records).collect(),
        });
        Ok(())
    }

    /// Moves on to the next journal file: a spare if one has room for
    /// `need` bytes, else a new one made now.
    fn next_file(&self, w: &mut Writer, need: usize) -> io::Result<()> {
        let need = (need + segment::MAGIC.len()) as u64;
        let next = match w.spares.iter().position(|spare| spare.size >= need) {
            Some(at) => {
                // The allocator makes the next spare.
                self.allocator.look();
                w.spares.remove(at).expect("a spare")
            }
            None => {
                let spare = self.allocate(need)?;
                self.capacity.fetch_add(spare.usable(), Ordering::Relaxed);
                spare
            }
        };
        let old = std::mem::replace(&mut w.current, next);
        // What the old file had left is stranded.
        self.capacity.fetch_sub(old.usable(), Ordering::Relaxed);
        w.unsynced.push(old.file);
        let _ = w.absorb.send(Absorb::Retired {
            number: old.number,
            last_commit: w.commit,
        });
        self.current
            .store(w.current.number as u32, Ordering::Relaxed);
        self.stats
            .current_index
            .store(w.current.number, Ordering::Relaxed);
        Ok(())
    }

    fn poison(&self, w: &mut Writer, why: String) {
        if w.broken.is_none() {
            tracing::error!(
                "{why}; refusing every change until sprout is restarted (everything \
                 acknowledged so far is in the journal)"
            );
            w.broken = Some(why);
            // Nothing more can be recorded, and so no new id acknowledged:
            // nobody waits for a ceiling any more.
            self.capacity.store(i64::MIN / 2, Ordering::Relaxed);
            self.progress.send_modify(|p| p.ids_below = JobId::MAX);
        }
    }

    /// Reports `groups` as failed: their commands answer errors.
    fn fail(&self, w: &mut Writer, groups: impl Iterator<Item = Group>) {
        let (mut from, mut to, mut bytes, mut live) = (None, 0, 0, 0);
        for group in groups {
            from.get_or_insert(group.seq);
            to = group.seq;
            bytes += group.bytes as i64;
            for record in &group.records {
                match record {
                    Record::Put(_) => live -= 1,
                    Record::Delete(_) => live += 1,
                    Record::Update(_) => {}
                }
            }
        }
        let Some(from) = from else { return };
        self.live.fetch_add(live, Ordering::Relaxed);
        self.pending_bytes.fetch_sub(bytes, Ordering::Relaxed);
        w.written = to;
        self.progress.send_modify(|p| p.fail(from, to));
    }

    /// A sync failed: poisons the journal and fails everything written
    /// since the last sync that worked.
    pub fn fail_unsynced(&self) {
        let mut w = lock(&self.writer);
        self.poison(&mut w, "a journal sync failed".into());
        let synced = self.progress.borrow().synced;
        let written = w.written;
        if written > synced {
            self.progress.send_modify(|p| p.fail(synced + 1, written));
        }
    }

    /// Syncs everything written so far; returns (written, ceiling) as of
    /// the sync. Under the writer only to collect the files.
    pub fn sync(&self) -> io::Result<(Seq, JobId)> {
        let (files, written, ids_below) = {
            let mut w = lock(&self.writer);
            self.write_queued(&mut w);
            let mut files: Vec<Arc<File>> = w.unsynced.drain(..).collect();
            files.push(w.current.file.clone());
            (files, w.written, w.ids_below)
        };
        self.published(written);
        let started = std::time::Instant::now();
        for file in files {
            file.sync_data()?;
        }
        let took = started.elapsed().as_micros();
        self.stats
            .syncs
            .observe(u64::try_from(took).unwrap_or(u64::MAX));
        Ok((written, ids_below))
    }

    /// Writes a frame with no records: the ceiling `ids_below` (at the
    /// start, and the exact next id at a clean stop).
    pub fn write_ceiling(&self, ids_below: JobId) -> io::Result<()> {
        let mut w = lock(&self.writer);
        self.write_queued(&mut w);
        let written = w.written;
        if let Some(why) = &w.broken {
            return Err(io::Error::other(why.clone()));
        }
        w.ids_below = ids_below;
        if w.current.size - w.current.offset < frame::HEADER_LEN as u64 {
            self.next_file(&mut w, frame::HEADER_LEN)?;
        }
        let result = self
            .write_frame(&mut w, Vec::new(), frame::HEADER_LEN)
            .map_err(|(e, _)| e);
        drop(w);
        self.published(written);
        result
    }

    /// The ceiling a clean stop leaves.
    pub fn exact_ceiling(&self) -> JobId {
        ids::exact(self.start_id, lock(&self.pending).highest_id)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these is a bug already reported; the
    // state is still the best there is.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
