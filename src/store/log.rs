//! The page log's bookkeeping: where each job's latest image is, and which
//! pages can go.
//!
//! Pages (`page.rs`) are only ever appended, so the log holds dead entries:
//! images a later page superseded, images and tombstones of deleted jobs.
//! It is kept bounded the way log-structured stores are: once it holds more
//! than twice its live bytes (plus [`SLACK`]), each commit also cleans the
//! oldest pages, copying their still-live images into the commit's new pages
//! and removing them, in the same atomic batch. Cleaning only ever takes the
//! oldest page, and that is what makes dropping its tombstones safe: a
//! tombstone only has to outlive the older images of its job, and once its
//! page is the oldest there are none. Each commit cleans at most a few times
//! what it wrote, so the work is spread over the writes that cause it, and a
//! pass over the whole log frees at least half of it; when no records wait,
//! the writer cleans on its own, so a quiet queue's log shrinks too.

use std::sync::{Arc, MutexGuard};

use sprout_protocol::JobId;

use super::corrupt::Corrupt;
use super::directory::{Directory, Map};
use super::entry::Kind;
use super::page;
use super::page_table::Page;
use super::places::Place;
use super::slots::{Slot, Slots};

/// Dead bytes tolerated beyond the live ones before cleaning starts.
pub const SLACK: u64 = 1024 * 1024;

/// Cleaning per commit: at most this many times the bytes it wrote.
const CLEAN_FACTOR: u64 = 4;

/// Cleaning done in one step while no records wait: a queue that went quiet
/// after a burst gives its disk back without waiting for more writes.
pub const IDLE_CLEAN_BYTES: u64 = 1024 * 1024;

/// How much a commit that wrote `written` bytes cleans at most.
pub fn clean_budget(written: u64) -> u64 {
    (CLEAN_FACTOR * written).max(page::PAGE_BYTES as u64)
}

#[derive(Default)]
pub struct Log {
    /// Every stored job: the page holding its latest image, and that
    /// entry's length (`places.rs`); stored pages by sequence number. Shared
    /// with readers on other threads (`directory.rs`), who take its lock for
    /// one lookup; the writer takes it once per batch ([`Log::hold`]).
    dir: Arc<Directory>,
    own: Own,
}

/// What only the writer uses.
#[derive(Default)]
struct Own {
    slots: Slots,
    next_seq: u64,
    live_bytes: u64,
    stored_bytes: u64,
}

/// The log with the directory's lock held: a batch's changes (`pack.rs`)
/// take the lock once, not once a job.
pub struct Held<'a> {
    map: MutexGuard<'a, Map>,
    own: &'a mut Own,
}

/// How far past the run of stored pages a page's sequence number may be
/// before it is damage ([`Replay::finish`]): one run has no gaps, but a
/// page skipped when salvaging leaves one.
const STRAY_SLACK: u64 = 1024;

/// Whether page `seq` is further from the run `first..next` of stored
/// pages (`None`: none stored) than the run is long plus
/// [`STRAY_SLACK`].
fn stray(seq: u64, run: Option<(u64, u64)>) -> bool {
    let Some((first, next)) = run else {
        return false;
    };
    let reach = next.saturating_sub(first) + STRAY_SLACK;
    seq > next.saturating_add(reach) || seq.saturating_add(reach) < first
}

/// One entry of a page as recovery's first pass keeps it: no bytes.
#[derive(Clone, Copy)]
struct Seen {
    id: JobId,
    /// The entry's stored length.
    len: u32,
    /// An image, else a tombstone.
    image: bool,
}

/// A page as recovery's first pass keeps it.
struct PageSeen {
    seq: u64,
    slot: Slot,
    bytes: u64,
    entries: Vec<Seen>,
}

/// Rebuilds the log from every stored page, in whatever order they come
/// ([`Replay::page`]): each page's entries are kept without their bytes,
/// then applied in sequence order ([`Replay::finish`]). The pages
/// themselves are not kept: holding every page until the end took a
/// recovery of 10M 100-byte jobs to 3.1 GB of RSS, for a server that then
/// serves them in 0.86 GB (issue 33).
pub struct Replay {
    pages: Vec<PageSeen>,
    /// Damaged pages and entries skipped (only when salvaging).
    skipped: usize,
    salvage: bool,
}

impl Log {
    /// Where stored jobs are, for readers on other threads.
    pub fn directory(&self) -> Arc<Directory> {
        self.dir.clone()
    }

    /// The log with the directory's lock held, for a batch of changes.
    pub fn hold(&mut self) -> Held<'_> {
        Held {
            map: self.dir.lock(),
            own: &mut self.own,
        }
    }

    /// The sequence number the next new page gets.
    pub fn next_seq(&self) -> u64 {
        self.own.next_seq
    }

    /// As [`Held::forget`].
    pub fn forget(&mut self, id: JobId) -> bool {
        self.hold().forget(id)
    }

    /// As [`Held::place`].
    pub fn place(&mut self, seq: u64, id: JobId, len: u32) {
        self.hold().place(seq, id, len)
    }

    /// A standby's log follows the leader's pages (`cluster/follow.rs`):
    /// page `seq`, `bytes` long, is now stored in `slot`. Its entries are
    /// then placed or forgotten as they come.
    pub fn follow_page(&mut self, seq: u64, slot: Slot, bytes: usize) {
        let mut held = self.hold();
        let page = Page {
            slot,
            bytes: bytes as u64,
        };
        if let Some(old) = held.map.pages.insert(seq, page) {
            held.own.stored_bytes -= old.bytes;
        }
        held.own.stored_bytes += bytes as u64;
        held.own.next_seq = held.own.next_seq.max(seq + 1);
    }

    /// Whether page `seq`, come from the leader, is numbered too far from
    /// this log's run of pages to be one of them ([`stray`]): damage, as
    /// recovery's [`Replay`] takes it. Followed, it would stretch the page
    /// table by the gap.
    pub fn is_stray(&self, seq: u64) -> bool {
        let first = self.dir.lock().pages.first().map(|(first, _)| first);
        stray(seq, first.map(|first| (first, self.own.next_seq)))
    }

    /// Page `seq` is gone from the leader's store (its slot was freed or
    /// given to a newer page).
    pub fn unfollow_page(&mut self, seq: u64) {
        let mut held = self.hold();
        if let Some(old) = held.map.pages.remove(seq) {
            held.own.stored_bytes -= old.bytes;
        }
    }

    /// Once a standby leads: every slot no page holds is free to hand out.
    pub fn reslot(&mut self) {
        self.hold().reslot()
    }

    /// Whether the log holds more dead bytes than it should.
    pub fn over_bound(&self) -> bool {
        self.own.over_bound()
    }

    /// Bytes in stored pages, and in their live images.
    pub fn sizes(&self) -> (u64, u64) {
        (self.own.stored_bytes, self.own.live_bytes)
    }
}

impl Replay {
    pub fn new(salvage: bool) -> Replay {
        Replay {
            pages: Vec::new(),
            skipped: 0,
            salvage,
        }
    }

    /// Takes in page `value`, stored in `slot`.
    pub fn page(&mut self, slot: Slot, value: &[u8]) -> Result<(), Corrupt> {
        let (seq, entries) = match page::read(value) {
            Ok(read) => read,
            Err(e) => return self.skip("a damaged page", e),
        };
        let mut seen = Vec::new();
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                // Nothing after a damaged entry can be found.
                Err(e) => {
                    self.skip("the rest of a damaged page", e)?;
                    break;
                }
            };
            let image = match entry.kind {
                Kind::Image(_) => true,
                Kind::Tombstone => false,
                Kind::State(_) => {
                    self.skip("an entry", Corrupt("a job's state in a page"))?;
                    continue;
                }
            };
            let len = entry.raw.len() as u32;
            seen.push(Seen {
                id: entry.id,
                len,
                image,
            });
        }
        self.pages.push(PageSeen {
            seq,
            slot,
            bytes: value.len() as u64,
            entries: seen,
        });
        Ok(())
    }

    /// Drops the pages whose sequence number is outside the run the
    /// others make (damage: a store's pages are one run of consecutive
    /// numbers), when salvaging; else fails. The page table is indexed by
    /// sequence number (`page_table.rs`), so a stray far off would make
    /// it as long as the gap.
    fn drop_strays(&mut self) -> Result<(), Corrupt> {
        let Some(median) = self.pages.get(self.pages.len() / 2).map(|p| p.seq) else {
            return Ok(());
        };
        let reach = self.pages.len() as u64 + STRAY_SLACK;
        let before = self.pages.len();
        self.pages.retain(|page| page.seq.abs_diff(median) <= reach);
        for _ in self.pages.len()..before {
            self.skip(
                "a page",
                Corrupt("a page numbered far outside the others' run"),
            )?;
        }
        Ok(())
    }

    /// Skips `what` when salvaging (counted and logged); else fails.
    fn skip(&mut self, what: &str, e: Corrupt) -> Result<(), Corrupt> {
        if !self.salvage {
            return Err(e);
        }
        tracing::error!("skipping {what}: {e}");
        self.skipped += 1;
        Ok(())
    }

    /// The log the pages make, and how many damaged pages and entries
    /// were skipped.
    pub fn finish(mut self) -> Result<(Log, usize), Corrupt> {
        self.pages.sort_unstable_by_key(|page| page.seq);
        self.drop_strays()?;
        let mut log = Log::default();
        let mut held = log.hold();
        for page in &self.pages {
            let stored = Page {
                slot: page.slot,
                bytes: page.bytes,
            };
            if held.map.pages.insert(page.seq, stored).is_some() {
                return Err(Corrupt("two pages with the same sequence number"));
            }
            held.own.stored_bytes += page.bytes;
            held.own.next_seq = page.seq + 1;
            for entry in &page.entries {
                match entry.image {
                    true => held.place(page.seq, entry.id, entry.len),
                    false => _ = held.forget(entry.id),
                }
            }
        }
        held.reslot();
        drop(held);
        Ok((log, self.skipped))
    }
}

impl Own {
    fn over_bound(&self) -> bool {
        self.stored_bytes > 2 * self.live_bytes + SLACK
    }
}

impl Held<'_> {
    /// The sequence number the next new page gets.
    pub fn next_seq(&self) -> u64 {
        self.own.next_seq
    }

    /// Drops the stored image of `id`, if any; says whether there was one
    /// (then a delete needs a tombstone).
    pub fn forget(&mut self, id: JobId) -> bool {
        match self.map.jobs.remove(id) {
            Some(place) => {
                self.own.live_bytes -= u64::from(place.len);
                true
            }
            None => false,
        }
    }

    /// Records that page `seq` holds the latest image of `id`.
    pub fn place(&mut self, seq: u64, id: JobId, len: u32) {
        if let Some(old) = self.map.jobs.insert(id, Place::new(seq, len)) {
            self.own.live_bytes -= u64::from(old.len);
        }
        self.own.live_bytes += u64::from(len);
    }

    /// How many jobs have a stored image.
    pub fn jobs(&self) -> usize {
        self.map.jobs.len()
    }

    /// Whether the image of `id` in page `seq` is its latest.
    pub fn is_live(&self, seq: u64, id: JobId) -> bool {
        self.map
            .jobs
            .get(id)
            .is_some_and(|place| place.in_page(seq))
    }

    /// Adds the next page, of `bytes` bytes; returns its sequence number
    /// and slot.
    pub fn add_page(&mut self, bytes: usize) -> (u64, Slot) {
        let seq = self.own.next_seq;
        self.own.next_seq += 1;
        let slot = self.own.slots.take();
        let bytes = bytes as u64;
        self.map.pages.insert(seq, Page { slot, bytes });
        self.own.stored_bytes += bytes;
        (seq, slot)
    }

    /// Every slot no page holds is free to hand out.
    fn reslot(&mut self) {
        self.own.slots = Slots::recovered(self.map.pages.slots());
    }

    /// The oldest page, to clean next, if the log is over its bound and
    /// `cleaned` bytes are still within `budget`.
    pub fn to_clean(&self, budget: u64, cleaned: u64) -> Option<(u64, Slot)> {
        let (seq, p) = self.map.pages.first()?;
        (self.own.over_bound() && cleaned < budget).then_some((seq, p.slot))
    }

    /// Removes the oldest page (once its live images are copied).
    pub fn remove_oldest(&mut self) {
        if let Some((_, p)) = self.map.pages.pop_first() {
            self.own.stored_bytes -= p.bytes;
            self.own.slots.give(p.slot);
        }
    }
}

#[cfg(test)]
mod tests;
