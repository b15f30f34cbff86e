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
//! sled is read twice, one page at a time, and no page is kept (issue 33).
//! The first pass keeps each page's entries without their bytes and
//! rebuilds the page log from them (`log::Replay`): which image of each
//! job is its latest. The second decodes those images as their pages come
//! and hands each to the engine at once ([`Restore`]), never gathering
//! them first: holding every page until the end took a recovery of 10M
//! 100-byte jobs to 3.1 GB of RSS (the server then serves them in
//! 0.86 GB), and one of 50M 256-byte jobs past this machine's 24 GB. The
//! journal's last word on the jobs it touched (a few, beside sled's) is
//! kept apart and restored after sled's jobs.
//!
//! Then the journal is made ready to continue: the torn tail is zeroed and
//! files after it removed (so no stale frame can ever line up behind a new
//! one), all synced before the first new frame.

mod damage;
mod files;
mod over;

use std::fs::File;
use std::io;
use std::path::Path;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use sprout_protocol::JobId;

use self::damage::{corrupt, Damage};
use self::files::Journal;
use self::over::{Over, Sled};
use super::absorb;
use super::journal::Start;
use super::log::{Log, Replay};
use super::page::{self, PAGE_PREFIX};
use super::record::{self, Decoder, COMMIT_KEY, NEXT_ID_KEY};
use super::slots::Slot;
use crate::engine::{JobImage, Record, Stored};

/// The file an earlier version of sprout kept the last durable commit in;
/// read once, for the same check, then removed.
const LEGACY_CHECKPOINT: &str = "sprout-commit";

/// Where a recovered store's jobs go (the engine), one at a time and not
/// gathered first: at 1M jobs a vector of them all cost 136 MB and the
/// page faults of filling it. They come in the order of sled's pages
/// (roughly by id: pages are written in put order), then the journal's,
/// by id; buried jobs last, oldest burial first, so they bury in order.
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
/// Reads a counter key, 0 when absent.
fn counter(db: &::sled::Db, key: &[u8]) -> io::Result<u64> {
    match db.get(key)? {
        Some(v) => record::decode_u64(&v).map_err(|e| corrupt(e.to_string())),
        None => Ok(0),
    }
}
/// Refuses a sled that ends before the commit an earlier sprout's
/// checkpoint file says was durable.
fn check_legacy(legacy: &Path, sled_commit: u64, damage: Damage) -> io::Result<()> {
    let Ok(bytes) = std::fs::read(legacy) else {
        return Ok(());
    };
    let durable = bytes
        .get(..8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    if sled_commit < durable {
        damage.refuse(format!(
            "sled ends at commit {sled_commit} but commit {durable} was made durable \
             ({LEGACY_CHECKPOINT} says so): its log is damaged or truncated"
        ))?;
    }
    Ok(())
}

/// Calls `f` with each of sled's pages and its slot, in key order; any
/// key but a page or a counter is refused. Returns how many pages.
fn each_page(
    db: &::sled::Db,
    mut f: impl FnMut(Slot, Bytes) -> io::Result<()>,
) -> io::Result<usize> {
    let mut pages = 0;
    for item in db.iter() {
        let (key, value) = item?;
        match key.first() {
            Some(&PAGE_PREFIX) => {
                let slot = page::key_slot(&key).map_err(|e| corrupt(e.to_string()))?;
                f(slot, Bytes::from_owner(value))?;
                pages += 1;
            }
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
    Ok(pages)
}

/// Recovery's first pass: the page log, from every page's entries
/// without their bytes (`log::Replay`); and how many damaged pages and
/// entries were skipped, and how many pages there are.
fn replay(db: &::sled::Db, salvage: bool) -> io::Result<(Log, usize, usize)> {
    let mut replay = Replay::new(salvage);
    let pages = each_page(db, |slot, value| {
        replay
            .page(slot, &value)
            .map_err(|e| corrupt(e.to_string()))
    })?;
    let (log, skipped) = replay.finish().map_err(|e| corrupt(e.to_string()))?;
    Ok((log, skipped, pages))
}

/// What [`restore_all`] handed the engine.
struct Restored {
    live: i64,
    highest: JobId,
    skipped: usize,
}

/// Every job, to the engine (recovery's second pass): the live images in
/// sled's pages, read again one page at a time and restored as they are
/// decoded, except those the journal has the last word on (`over`: its
/// image, restored after them, or `None`, deleted); buried jobs last,
/// oldest burial first (see `Restore`).
fn restore_all(
    db: &::sled::Db,
    log: &mut Log,
    over: FxHashMap<JobId, Option<JobImage>>,
    damage: Damage,
    decoder: &mut Decoder,
    into: &mut dyn Restore,
) -> io::Result<Restored> {
    let held = log.hold();
    into.reserve(held.jobs());
    let (mut buried, mut live, mut highest, mut skipped) = (Vec::new(), 0i64, 0, 0);
    let mut restore = |mut image: JobImage| {
        live += 1;
        highest = highest.max(image.id);
        match image.state {
            // Kept until the end: a copy of the body, not its page.
            Stored::Buried(_) => {
                image.body = Bytes::copy_from_slice(&image.body);
                buried.push(image)
            }
            _ => into.restore(&image),
        }
    };
    each_page(db, |_, value| {
        // A damaged page was refused or skipped by the first pass.
        let Ok((seq, entries)) = page::read(&value) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let Some(bytes) = entry.image().filter(|_| held.is_live(seq, entry.id)) else {
                continue;
            };
            // Decoded even when the journal has the last word on the job:
            // damage is refused wherever it is.
            match decoder.job(&value, bytes) {
                Ok(image) if !over.contains_key(&image.id) => restore(image),
                Ok(_) => {}
                Err(e) if damage.salvage => {
                    tracing::error!("skipping a damaged job: {e}");
                    skipped += 1;
                }
                Err(e) => return Err(corrupt(e.to_string())),
            }
        }
        Ok(())
    })?;
    drop(held);
    let mut newer: Vec<JobImage> = over.into_values().flatten().collect();
    newer.sort_unstable_by_key(|image| image.id);
    newer.into_iter().for_each(&mut restore);
    buried.sort_unstable_by_key(|image| match image.state {
        Stored::Buried(seq) => (seq, image.id),
        _ => unreachable!("only buried jobs"),
    });
    for image in &buried {
        into.restore(image);
    }
    Ok(Restored {
        live,
        highest,
        skipped,
    })
}
/// The id ceiling: the newest of sled and the journal names it.
fn ceiling(over: &Over, sled_commit: u64, sled_ceiling: JobId) -> JobId {
    match (over.last_commit, over.last_ceiling) {
        (Some(c), Some(ceiling)) if c >= sled_commit => ceiling,
        _ => sled_ceiling,
    }
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
    let damage = Damage { salvage };
    let sled_commit = counter(db, COMMIT_KEY)?;
    let sled_ceiling = counter(db, NEXT_ID_KEY)?;
    let legacy = store.join(LEGACY_CHECKPOINT);
    check_legacy(&legacy, sled_commit, damage)?;

    let (mut log, replay_skipped, pages) = replay(db, salvage)?;
    let (stored_bytes, live_bytes) = log.sizes();
    let sled = Sled {
        commit: sled_commit,
        db,
        dir: log.directory(),
    };
    let sled_took = started.elapsed();

    let journal = Journal::read(store, sled_commit, damage)?;
    let mut decoder = Decoder::default();
    let mut over = Over::lay(&journal, &sled, whole, damage, &mut decoder)?;
    let tail = over.tail(sled_commit);
    let restored = restore_all(
        db,
        &mut log,
        std::mem::take(&mut over.jobs),
        damage,
        &mut decoder,
        into,
    )?;
    let ceiling = ceiling(&over, sled_commit, sled_ceiling);
    let next_id = ceiling.max(restored.highest + 1).max(1);

    let last_commit = over.last_commit.unwrap_or(0);
    let readied = journal.ready(file_size)?;
    if sled_commit > last_commit {
        // The journal goes on past a jump that only sled covers.
        db.flush()?;
        File::open(store.join("db"))?.sync_data()?;
    }
    if legacy.exists() {
        // The journal does its work from here on.
        std::fs::remove_file(&legacy)?;
    }
    tracing::info!(
        pages,
        frames = over.replayed,
        whole,
        sled = ?sled_took,
        journal = ?(started.elapsed() - sled_took),
        "read the store back"
    );
    Ok(Opened {
        recovered: Recovered {
            jobs: restored.live as usize,
            next_id,
            skipped: replay_skipped + over.skipped + restored.skipped,
            stored_bytes,
            live_bytes,
            replayed: over.replayed,
        },
        absorb: absorb::SledState {
            log,
            commit: sled_commit,
            ids_below: sled_ceiling,
            retired: readied.retired,
        },
        tail,
        journal: Start {
            current: readied.current,
            spares: readied.spares,
            commit: last_commit.max(sled_commit),
            ids_below: ceiling,
            next_id,
            live: restored.live,
            next_number: readied.next_number,
        },
    })
}
