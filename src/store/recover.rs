//! Recovery: sled's pages, then the journal's tail laid over them.
//!
//! sled holds every journal frame up to its commit number `c` (`absorb.rs`);
//! the journal files hold the frames since (and maybe some before, not yet
//! removed), and every one of them is laid over sled's jobs again (see
//! below for why). Reading them in commit order, a frame counts if its checksum
//! holds and its number is one up from the last; the first that does not is
//! where the journal ends (a tail torn by a crash), and everything after it
//! is dropped, never replayed. One jump is allowed: to a number just past
//! sled's `c`, which is how the journal continues when sled kept more than
//! the journal did (a power loss under `-F`).
//!
//! Damage is refused, not silently read as a shorter store (sled opens a
//! damaged log without complaint: see docs/durability.md, section 6): if
//! the journal's oldest frame is past what sled holds plus one, the start
//! is refused (`--salvage` starts with what can be read).
//!
//! The jobs go to the engine as they are decoded ([`Restore`]), merged by
//! id from sled's images and the journal's last word on the jobs it
//! touched, never gathered into one vector first: at 1M jobs that vector
//! was 136 MB, and filling it cost page faults (~29% of a restart); without
//! it a restart took 1.26 s of CPU instead of 1.48-1.58 s, and its peak RSS
//! fell by ~50 MB.
//!
//! Then the journal is made ready to continue: the torn tail is zeroed and
//! files after it removed (so no stale frame can ever line up behind a new
//! one), all synced before the first new frame.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};
use sprout_protocol::JobId;

use super::absorb;
use super::corrupt::Corrupt;
use super::entry::Kind;
use super::frame;
use super::journal::{Segment, Start};
use super::log::{Live, Log};
use super::page::{self, PAGE_PREFIX};
use super::record::{self, COMMIT_KEY, NEXT_ID_KEY};
use super::segment;
use crate::engine::{JobImage, Record, Stored};

/// The file an earlier version of sprout kept the last durable commit in;
/// read once, for the same check, then removed.
const LEGACY_CHECKPOINT: &str = "sprout-commit";

/// Where a recovered store's jobs go (the engine), one at a time and not
/// gathered first: at 1M jobs a vector of them all cost 136 MB and the
/// page faults of filling it. They come by id, buried jobs last, oldest
/// burial first: so tubes come back in a stable order, buried jobs bury
/// in order, and each ready job goes to the end of its heap without
/// sifting.
pub trait Restore {
    /// Room for about `jobs` jobs, before the first of them.
    fn reserve(&mut self, jobs: usize);
    fn restore(&mut self, image: &JobImage);
}

/// Gathers them (tests).
impl Restore for Vec<JobImage> {
    fn reserve(&mut self, jobs: usize) {
        self.reserve(jobs);
    }

    fn restore(&mut self, image: &JobImage) {
        self.push(image.clone());
    }
}

/// What a store held at startup, beside its jobs.
pub struct Recovered {
    /// Jobs restored.
    pub jobs: usize,
    /// The next id to issue.
    pub next_id: JobId,
    /// Damaged jobs skipped (only with salvage).
    pub skipped: usize,
    /// The size of sled's pages, and of the live job images in them.
    pub stored_bytes: u64,
    pub live_bytes: u64,
    /// Journal frames laid over sled.
    pub replayed: usize,
}

/// Everything the store's threads start from.
pub struct Opened {
    pub recovered: Recovered,
    pub absorb: absorb::SledState,
    /// The journal's tail, for sled to take in first: each touched job's
    /// final image or delete, as of frame `.0`.
    pub tail: Option<(u64, Vec<Record>)>,
    pub journal: Start,
}

fn corrupt(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Reads a counter key, 0 when absent.
fn counter(db: &::sled::Db, key: &[u8]) -> io::Result<u64> {
    match db.get(key)? {
        Some(v) => record::decode_u64(&v).map_err(|e| corrupt(e.to_string())),
        None => Ok(0),
    }
}

/// A journal file as read.
struct Read {
    number: u64,
    file: File,
    bytes: Bytes,
    /// (commit, ids_below, offset, len) of each frame that checks out, up
    /// to the first that does not.
    frames: Vec<(u64, JobId, usize, usize)>,
}

impl Read {
    fn first_commit(&self) -> Option<u64> {
        self.frames.first().map(|f| f.0)
    }
}

fn read_journal(dir: &Path) -> io::Result<Vec<Read>> {
    let mut files = Vec::new();
    for number in segment::list(dir)? {
        let file = segment::open(dir, number)?;
        let bytes = segment::read(&file)
            .map_err(|e| io::Error::new(e.kind(), format!("journal file {number}: {e}")))?;
        let mut frames = Vec::new();
        let mut at = segment::MAGIC.len();
        while let Some(f) = frame::read(&bytes[at..]) {
            frames.push((f.commit, f.ids_below, at, f.len));
            at += f.len;
        }
        files.push(Read {
            number,
            file,
            bytes: Bytes::from(bytes),
            frames,
        });
    }
    Ok(files)
}

/// Where the journal ends: a file (by index into the used files) and the
/// number of its frames that count.
struct End {
    file: usize,
    frames: usize,
}

/// Finds where the journal ends (see the module docs), given sled's commit.
fn find_end(used: &[Read], sled_commit: u64) -> End {
    let mut prev: Option<u64> = None;
    for (i, file) in used.iter().enumerate() {
        for (k, &(commit, ..)) in file.frames.iter().enumerate() {
            if let Some(prev) = prev {
                let next = commit == prev + 1 || (commit > prev + 1 && commit - 1 <= sled_commit);
                if !next {
                    return End { file: i, frames: k };
                }
            }
            prev = Some(commit);
        }
    }
    End {
        file: used.len().saturating_sub(1),
        frames: used.last().map_or(0, |f| f.frames.len()),
    }
}

/// sled's image of job `id`, in `images` sorted by id.
fn sled_image<'a, 'p>(images: &'a [Live<'p>], id: JobId) -> Option<&'a Live<'p>> {
    images
        .binary_search_by_key(&id, |image| image.id)
        .ok()
        .map(|at| &images[at])
}

/// Reads sled and the journal back (see the module docs), and readies the
/// journal to go on. `whole`: whether sled is known to hold all its commit
/// says (`whole.rs`). `file_size` is `-s`. The jobs go to `into`.
pub fn recover(
    db: &::sled::Db,
    store: &Path,
    salvage: bool,
    whole: bool,
    file_size: u64,
    into: &mut dyn Restore,
) -> io::Result<Opened> {
    let started = std::time::Instant::now();
    let sled_commit = counter(db, COMMIT_KEY)?;
    let sled_ceiling = counter(db, NEXT_ID_KEY)?;
    let refuse = |what: String| -> io::Result<()> {
        if !salvage {
            return Err(corrupt(what));
        }
        tracing::error!("salvaging: {what}");
        Ok(())
    };
    let legacy = store.join(LEGACY_CHECKPOINT);
    if let Ok(bytes) = std::fs::read(&legacy) {
        let durable = bytes
            .get(..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        if sled_commit < durable {
            refuse(format!(
                "sled ends at commit {sled_commit} but commit {durable} was made durable \
                 ({LEGACY_CHECKPOINT} says so): its log is damaged or truncated"
            ))?;
        }
    }

    // sled's pages.
    let mut pages = Vec::new();
    for item in db.iter() {
        let (key, value) = item?;
        match key.first() {
            Some(&PAGE_PREFIX) => pages.push((
                page::key_slot(&key).map_err(|e| corrupt(e.to_string()))?,
                Bytes::from_owner(value),
            )),
            _ if *key == *COMMIT_KEY || *key == *NEXT_ID_KEY => {}
            _ => {
                return Err(corrupt(format!(
                    "it holds a key this sprout does not know ({:?}): was it written by \
                     another version?",
                    String::from_utf8_lossy(&key)
                )))
            }
        }
    }
    let replayed = Log::replay(&pages, salvage).map_err(|e| corrupt(e.to_string()))?;
    let mut skipped = replayed.skipped;
    // sled's live images by id: the order they are restored in, and how a
    // journal frame finds the image it lays a state over.
    let mut images = replayed.images;
    images.sort_unstable_by_key(|image| image.id);
    let mut decoder = record::Decoder::default();
    let (stored_bytes, live_bytes) = replayed.log.sizes();
    let log = replayed.log;
    let sled_took = started.elapsed();

    // The journal.
    let dir = segment::dir(store);
    std::fs::create_dir_all(&dir)?;
    segment::remove_unfinished(&dir)?;
    let files = read_journal(&dir)?;
    let next_number = files.last().map_or(1, |f| f.number + 1);
    let (mut used, unused): (Vec<Read>, Vec<Read>) =
        files.into_iter().partition(|f| !f.frames.is_empty());
    used.sort_by_key(|f| f.first_commit());
    if let Some(first) = used.first().and_then(Read::first_commit) {
        if first > sled_commit + 1 {
            refuse(format!(
                "sled ends at commit {sled_commit} but the journal only starts at \
                 {first}: sled's log is damaged or truncated"
            ))?;
        }
    }
    let end = find_end(&used, sled_commit);

    // Lay the frames past sled's commit over its jobs, and those it holds
    // already too unless it is known whole (`whole.rs`): replaying is
    // idempotent (images and tombstones, the last word wins), and after a
    // failed write sled 0.34 can miss pages written before its commit key.
    // The frames touch few jobs next to all sled holds: their last word on
    // each is kept apart (`over`), and laid over sled's jobs as those are
    // restored.
    let mut frames_replayed = 0;
    let (mut last_commit, mut last_ceiling) = (None, None);
    let mut over: FxHashMap<JobId, Option<JobImage>> = FxHashMap::default();
    for (i, file) in used.iter().enumerate().take(end.file + 1) {
        let count = if i == end.file {
            end.frames
        } else {
            file.frames.len()
        };
        for &(commit, ids_below, at, len) in &file.frames[..count] {
            last_commit = Some(commit);
            last_ceiling = Some(ids_below);
            if whole && commit <= sled_commit {
                continue;
            }
            frames_replayed += 1;
            let frame = frame::read(&file.bytes[at..at + len]).expect("read before");
            for entry in frame.entries {
                let damaged = |e: &dyn std::fmt::Display| format!("journal frame {commit}: {e}");
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(e) => {
                        refuse(damaged(&e))?;
                        skipped += 1;
                        break;
                    }
                };
                let image = match entry.kind {
                    Kind::Image(bytes) => decoder.job(&file.bytes, bytes).map(Some),
                    Kind::State(bytes) => {
                        let old = match over.get(&entry.id) {
                            Some(old) => Ok(old.clone()),
                            None => sled_image(&images, entry.id)
                                .map(|image| decoder.job(&pages[image.page].1, image.bytes))
                                .transpose(),
                        };
                        match old {
                            Ok(Some(old)) => record::decode_state(bytes).map(|state| {
                                Some(JobImage {
                                    body: old.body,
                                    ..state
                                })
                            }),
                            // sled is past this frame and the job was
                            // deleted since: a later frame says so.
                            Ok(None) if commit <= sled_commit => {
                                over.entry(entry.id).or_insert(None);
                                continue;
                            }
                            Ok(None) => Err(Corrupt("a state for a job that is not stored")),
                            Err(e) => Err(e),
                        }
                    }
                    Kind::Tombstone => Ok(None),
                };
                match image {
                    Ok(image) => _ = over.insert(entry.id, image),
                    Err(e) => {
                        refuse(damaged(&e))?;
                        skipped += 1;
                    }
                }
            }
        }
    }
    let tail = last_commit.filter(|_| !over.is_empty()).map(|commit| {
        let mut ids: Vec<JobId> = over.keys().copied().collect();
        ids.sort_unstable();
        let records = ids
            .into_iter()
            .map(|id| match &over[&id] {
                Some(image) => Record::Put(image.clone()),
                None => Record::Delete(id),
            })
            .collect();
        (commit.max(sled_commit), records)
    });

    // Every job, to the engine: sled's and the journal's, merged by id;
    // buried jobs last, oldest burial first (see `Restore`).
    let (mut newer, mut gone) = (Vec::new(), FxHashSet::default());
    for (id, image) in over {
        match image {
            Some(image) => newer.push(image),
            None => _ = gone.insert(id),
        }
    }
    newer.sort_unstable_by_key(|image| image.id);
    into.reserve(images.len() + newer.len());
    let (mut buried, mut live, mut highest) = (Vec::new(), 0i64, 0);
    let mut restore = |image: JobImage| {
        live += 1;
        highest = highest.max(image.id);
        match image.state {
            Stored::Buried(_) => buried.push(image),
            _ => into.restore(&image),
        }
    };
    let mut newer = newer.into_iter().peekable();
    for image in &images {
        while let Some(first) = newer.next_if(|first| first.id < image.id) {
            restore(first);
        }
        // Decoded even when the journal has the last word on the job:
        // damage is refused wherever it is.
        let decoded = match decoder.job(&pages[image.page].1, image.bytes) {
            Ok(decoded) => decoded,
            Err(e) if salvage => {
                tracing::error!("skipping a damaged job: {e}");
                skipped += 1;
                continue;
            }
            Err(e) => return Err(corrupt(e.to_string())),
        };
        if let Some(first) = newer.next_if(|first| first.id == image.id) {
            restore(first);
        } else if !gone.contains(&image.id) {
            restore(decoded);
        }
    }
    newer.for_each(&mut restore);
    buried.sort_unstable_by_key(|image| match image.state {
        Stored::Buried(seq) => (seq, image.id),
        _ => unreachable!("only buried jobs"),
    });
    for image in &buried {
        into.restore(image);
    }

    // The newest of sled and the journal names the ceiling.
    let ceiling = match (last_commit, last_ceiling) {
        (Some(c), Some(ceiling)) if c >= sled_commit => ceiling,
        _ => sled_ceiling,
    };
    let next_id = ceiling.max(highest + 1).max(1);

    // Ready the journal to go on where it ends.
    let commit = last_commit.unwrap_or(0).max(sled_commit);
    let mut retired = VecDeque::new();
    let current = if used.is_empty() {
        None
    } else {
        for dropped in used.drain(end.file + 1..) {
            tracing::warn!(
                "dropping journal file {} past the end of the journal",
                dropped.number
            );
            std::fs::remove_file(segment::path(&dir, dropped.number))?;
        }
        let last = used.pop().expect("used files");
        for file in &used {
            let last_commit = file.frames.last().map_or(0, |f| f.0);
            retired.push_back((file.number, last_commit));
        }
        let offset = last.frames[..end.frames]
            .last()
            .map_or(segment::MAGIC.len(), |&(_, _, at, len)| at + len);
        let data_end = segment::data_end(&last.bytes);
        if data_end > offset {
            tracing::warn!(
                "journal file {}: cutting a torn tail of {} bytes",
                last.number,
                data_end - offset
            );
            segment::zero(&last.file, offset as u64, data_end as u64)?;
            last.file.sync_data()?;
        }
        segment::sync_dir(&dir)?;
        Some(Segment {
            number: last.number,
            size: last.bytes.len() as u64,
            file: Arc::new(last.file),
            offset: offset as u64,
        })
    };
    let mut spares = VecDeque::new();
    for f in unused {
        // A spare holds nothing but a frame a crash tore at its start.
        let data_end = segment::data_end(&f.bytes);
        if data_end > segment::MAGIC.len() {
            segment::zero(&f.file, segment::MAGIC.len() as u64, data_end as u64)?;
            f.file.sync_data()?;
        }
        spares.push_back(Segment {
            number: f.number,
            size: f.bytes.len() as u64,
            file: Arc::new(f.file),
            offset: segment::MAGIC.len() as u64,
        });
    }
    // What was read must be on the disk before anything new goes after
    // it: after a kill -9 some of it may still be only in the kernel.
    for file in &used {
        file.file.sync_data()?;
    }
    if let Some(current) = &current {
        current.file.sync_data()?;
    }
    if sled_commit > last_commit.unwrap_or(0) {
        // The journal goes on past a jump that only sled covers.
        db.flush()?;
        File::open(store.join("db"))?.sync_data()?;
    }
    let current = match current.or_else(|| spares.pop_front()) {
        Some(current) => current,
        None => {
            let file = segment::create(&dir, next_number, file_size)?;
            Segment {
                number: next_number,
                file: Arc::new(file),
                size: file_size,
                offset: segment::MAGIC.len() as u64,
            }
        }
    };
    let next_number = next_number.max(current.number + 1);
    if legacy.exists() {
        // The journal does its work from here on.
        std::fs::remove_file(&legacy)?;
    }
    tracing::info!(
        pages = pages.len(),
        frames = frames_replayed,
        whole,
        sled = ?sled_took,
        journal = ?(started.elapsed() - sled_took),
        "read the store back"
    );
    Ok(Opened {
        recovered: Recovered {
            jobs: live as usize,
            next_id,
            skipped,
            stored_bytes,
            live_bytes,
            replayed: frames_replayed,
        },
        absorb: absorb::SledState {
            log,
            commit: sled_commit,
            ids_below: sled_ceiling,
            retired,
        },
        tail,
        journal: Start {
            current,
            spares,
            commit,
            ids_below: ceiling,
            next_id,
            live,
            next_number,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(files: &[&[u64]]) -> Vec<Read> {
        files
            .iter()
            .enumerate()
            .map(|(i, commits)| Read {
                number: i as u64 + 1,
                file: tempfile(),
                bytes: Bytes::new(),
                frames: commits.iter().map(|&c| (c, 0, 0, 0)).collect(),
            })
            .collect()
    }

    fn tempfile() -> File {
        File::open("/dev/null").unwrap()
    }

    /// Files of frame commits, sled's commit, (file, frames) that count.
    type Case = (&'static [&'static [u64]], u64, (usize, usize));

    #[test]
    fn where_the_journal_ends() {
        let table: &[Case] = &[
            (&[&[1, 2, 3]], 0, (0, 3)),
            (&[&[1, 2], &[3, 4]], 0, (1, 2)),
            // A gap: the end, wherever it is.
            (&[&[1, 2, 4]], 0, (0, 2)),
            (&[&[1, 2], &[4, 5]], 0, (1, 0)),
            // A number going back: stale, the end.
            (&[&[5, 6, 2]], 4, (0, 2)),
            // The one jump: past what sled holds.
            (&[&[1, 2, 9, 10]], 8, (0, 4)),
            (&[&[1, 2], &[9]], 8, (1, 1)),
            (&[&[1, 2, 9]], 7, (0, 2)),
            (&[], 3, (0, 0)),
        ];
        for &(files, sled, want) in table {
            let end = find_end(&used(files), sled);
            assert_eq!((end.file, end.frames), want, "{files:?} sled at {sled}");
        }
    }
}
