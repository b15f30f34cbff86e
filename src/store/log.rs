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

use std::sync::Arc;

use sprout_protocol::JobId;

use super::corrupt::Corrupt;
use super::directory::{Directory, Page};
use super::entry::Kind;
use super::page;
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
    /// one lookup; the writer's changes are few and short.
    dir: Arc<Directory>,
    slots: Slots,
    next_seq: u64,
    live_bytes: u64,
    stored_bytes: u64,
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
        for (seq, slot, bytes, entries, _) in &read {
            if log
                .dir
                .lock()
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
            log.stored_bytes += *bytes as u64;
            log.next_seq = seq + 1;
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
                    Kind::Image(_) => log.place(*seq, entry.id, entry.raw.len() as u32),
                    Kind::Tombstone => _ = log.forget(entry.id),
                    Kind::State(_) if salvage => {
                        tracing::error!("skipping a job's state in a page");
                        skipped += 1;
                    }
                    Kind::State(_) => return Err(Corrupt("a job's state in a page")),
                }
            }
        }
        // A second pass picks out the latest images, now that they are known.
        let mut images = Vec::with_capacity(log.dir.lock().jobs.len());
        for (seq, _, _, entries, at) in read {
            for entry in entries.flatten() {
                if let Some(bytes) = entry.image().filter(|_| log.is_live(seq, entry.id)) {
                    images.push(Live {
                        id: entry.id,
                        page: at,
                        bytes,
                    });
                }
            }
        }
        log.slots = Slots::recovered(log.dir.lock().pages.values().map(|p| p.slot));
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

    /// The sequence number the next new page gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Drops the stored image of `id`, if any; says whether there was one
    /// (then a delete needs a tombstone).
    pub fn forget(&mut self, id: JobId) -> bool {
        match self.dir.lock().jobs.remove(id) {
            Some(place) => {
                self.live_bytes -= u64::from(place.len);
                true
            }
            None => false,
        }
    }

    /// Records that page `seq` holds the latest image of `id`.
    pub fn place(&mut self, seq: u64, id: JobId, len: u32) {
        if let Some(old) = self.dir.lock().jobs.insert(id, Place::new(seq, len)) {
            self.live_bytes -= u64::from(old.len);
        }
        self.live_bytes += u64::from(len);
    }

    /// Whether the image of `id` in page `seq` is its latest.
    pub fn is_live(&self, seq: u64, id: JobId) -> bool {
        self.dir
            .lock()
            .jobs
            .get(id)
            .is_some_and(|place| place.in_page(seq))
    }

    /// Adds the next page, of `bytes` bytes; returns its sequence number
    /// and slot.
    pub fn add_page(&mut self, bytes: usize) -> (u64, Slot) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = self.slots.take();
        let bytes = bytes as u64;
        self.dir.lock().pages.insert(seq, Page { slot, bytes });
        self.stored_bytes += bytes;
        (seq, slot)
    }

    /// A standby's log follows the leader's pages (`cluster/follow.rs`):
    /// page `seq`, `bytes` long, is now stored in `slot`. Its entries are
    /// then placed or forgotten as they come.
    pub fn follow_page(&mut self, seq: u64, slot: Slot, bytes: usize) {
        if let Some(old) = self.dir.lock().pages.insert(
            seq,
            Page {
                slot,
                bytes: bytes as u64,
            },
        ) {
            self.stored_bytes -= old.bytes;
        }
        self.stored_bytes += bytes as u64;
        self.next_seq = self.next_seq.max(seq + 1);
    }

    /// Page `seq` is gone from the leader's store (its slot was freed or
    /// given to a newer page).
    pub fn unfollow_page(&mut self, seq: u64) {
        if let Some(old) = self.dir.lock().pages.remove(&seq) {
            self.stored_bytes -= old.bytes;
        }
    }

    /// Once a standby leads: every slot no page holds is free to hand out.
    pub fn reslot(&mut self) {
        self.slots = Slots::recovered(self.dir.lock().pages.values().map(|p| p.slot));
    }

    /// Whether the log holds more dead bytes than it should.
    pub fn over_bound(&self) -> bool {
        self.stored_bytes > 2 * self.live_bytes + SLACK
    }

    /// The oldest page, to clean next, if the log is over its bound and
    /// `cleaned` bytes are still within `budget`.
    pub fn to_clean(&self, budget: u64, cleaned: u64) -> Option<(u64, Slot)> {
        let first = self
            .dir
            .lock()
            .pages
            .first_key_value()
            .map(|(&s, p)| (s, p.slot));
        first.filter(|_| self.over_bound() && cleaned < budget)
    }

    /// Removes the oldest page (once its live images are copied).
    pub fn remove_oldest(&mut self) {
        if let Some((_, p)) = self.dir.lock().pages.pop_first() {
            self.stored_bytes -= p.bytes;
            self.slots.give(p.slot);
        }
    }

    /// Bytes in stored pages, and in their live images.
    pub fn sizes(&self) -> (u64, u64) {
        (self.stored_bytes, self.live_bytes)
    }
}
