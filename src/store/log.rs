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

/// A live job's latest image in the pages replayed.
#[derive(Clone, Copy, Debug)]
pub struct Live<'a> {
    pub id: JobId,
    /// The index of its page.
    pub page: usize,
    pub bytes: &'a [u8],
}

/// What replaying a store's pages found.
pub struct Replayed<'a> {
    pub log: Log,
    /// The latest image of every live job, still encoded.
    pub images: Vec<Live<'a>>,
    /// Damaged entries skipped (only when salvaging).
    pub skipped: usize,
}

impl Log {
    /// Rebuilds the log from every stored page, given as (slot, value):
    /// applies their entries in sequence order.
    pub fn replay<V: AsRef<[u8]>>(
        pages: &[(Slot, V)],
        salvage: bool,
    ) -> Result<Replayed<'_>, Corrupt> {
        let mut log = Log::default();
        let mut skipped = 0;
        let mut read = Vec::with_capacity(pages.len());
        for (at, (slot, value)) in pages.iter().enumerate() {
            let value = value.as_ref();
            match page::read(value) {
                Ok((seq, entries)) => read.push((seq, *slot, value.len(), entries, at)),
                Err(e) if salvage => {
                    tracing::error!("skipping a damaged page: {e}");
                    skipped += 1;
                }
                Err(e) => return Err(e),
            }
        }
        read.sort_by_key(|&(seq, ..)| seq);
        let mut held = log.hold();
        for (seq, slot, bytes, entries, _) in &read {
            if held
                .map
                .pages
                .insert(
                    *seq,
                    Page {
                        slot: *slot,
                        bytes: *bytes as u64,
                    },
                )
                .is_some()
            {
                return Err(Corrupt("two pages with the same sequence number"));
            }
            held.own.stored_bytes += *bytes as u64;
            held.own.next_seq = seq + 1;
            for entry in entries.clone() {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(e) if salvage => {
                        tracing::error!("skipping the rest of a damaged page: {e}");
                        skipped += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                match entry.kind {
                    Kind::Image(_) => held.place(*seq, entry.id, entry.raw.len() as u32),
                    Kind::Tombstone => _ = held.forget(entry.id),
                    Kind::State(_) if salvage => {
                        tracing::error!("skipping a job's state in a page");
                        skipped += 1;
                    }
                    Kind::State(_) => return Err(Corrupt("a job's state in a page")),
                }
            }
        }
        // A second pass picks out the latest images, now that they are known.
        let mut images = Vec::with_capacity(held.map.jobs.len());
        for (seq, _, _, entries, at) in read {
            for entry in entries.flatten() {
                if let Some(bytes) = entry.image().filter(|_| held.is_live(seq, entry.id)) {
                    images.push(Live {
                        id: entry.id,
                        page: at,
                        bytes,
                    });
                }
            }
        }
        held.reslot();
        drop(held);
        Ok(Replayed {
            log,
            images,
            skipped,
        })
    }

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
