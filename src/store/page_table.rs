//! The stored pages by sequence number: where each is kept, and its size.
//!
//! One entry per page for the life of the process, so its size counts: a
//! `BTreeMap<u64, Page>` cost ~65 bytes a page (heaptrack, 1M jobs of
//! 1 KiB: 16 MB, 16 bytes a job). The stored pages are a run of consecutive
//! sequence numbers (a leader adds pages at the end and removes the oldest,
//! `log.rs`), so they are kept as a deque indexed by `seq - first`, 8 bytes
//! a page. A standby follows the leader's pages as they come
//! (`cluster/follow.rs`) and may briefly have a page missing inside the
//! run: that is a hole, and holes at either end are trimmed, so the first
//! entry is always a page.

use std::collections::VecDeque;

use super::slots::Slot;
use crate::shrink::shrunk;

/// A stored page: where it is kept, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    pub slot: Slot,
    pub bytes: u64,
}

/// A page as kept: its slot, or [`HOLE`], and its bytes (a page is at most
/// `PAGE_BYTES` or one image, whose body is under 2^30 bytes).
#[derive(Clone, Copy)]
struct Entry {
    slot: Slot,
    bytes: u32,
}

/// Entries a page table keeps room for however few pages it holds.
const KEEP_ENTRIES: usize = 1024;

/// The slot of an entry that holds no page: slots are handed out from 0
/// up, one per stored page, so this one never is.
const HOLE: Slot = Slot::MAX;

impl Entry {
    fn page(self) -> Option<Page> {
        (self.slot != HOLE).then_some(Page {
            slot: self.slot,
            bytes: u64::from(self.bytes),
        })
    }
}

#[derive(Default)]
pub struct PageTable {
    /// The sequence number of `entries[0]`.
    first: u64,
    entries: VecDeque<Entry>,
}

impl PageTable {
    /// Page `seq`, if stored.
    pub fn get(&self, seq: u64) -> Option<Page> {
        let at = usize::try_from(seq.checked_sub(self.first)?).ok()?;
        self.entries.get(at)?.page()
    }

    /// The oldest stored page.
    pub fn first(&self) -> Option<(u64, Page)> {
        Some((self.first, self.entries.front()?.page()?))
    }

    /// Stores page `seq`; returns what was stored under it before.
    pub fn insert(&mut self, seq: u64, page: Page) -> Option<Page> {
        let bytes = u32::try_from(page.bytes).expect("a page is under 4 GiB");
        assert!(page.slot != HOLE, "slot {HOLE} is never handed out");
        let entry = Entry {
            slot: page.slot,
            bytes,
        };
        if self.entries.is_empty() {
            self.first = seq;
        }
        while seq < self.first {
            self.entries.push_front(Entry {
                slot: HOLE,
                bytes: 0,
            });
            self.first -= 1;
        }
        let at = (seq - self.first) as usize;
        if at >= self.entries.len() {
            self.entries.resize(
                at + 1,
                Entry {
                    slot: HOLE,
                    bytes: 0,
                },
            );
        }
        std::mem::replace(&mut self.entries[at], entry).page()
    }

    /// Forgets page `seq`; returns it if it was stored.
    pub fn remove(&mut self, seq: u64) -> Option<Page> {
        let at = usize::try_from(seq.checked_sub(self.first)?).ok()?;
        let old = self.entries.get_mut(at)?;
        let page = old.page()?;
        old.slot = HOLE;
        self.trim();
        Some(page)
    }

    /// Forgets the oldest page, and returns it.
    pub fn pop_first(&mut self) -> Option<(u64, Page)> {
        let first = self.first()?;
        self.remove(first.0);
        Some(first)
    }

    /// Every stored page's slot.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        self.entries
            .iter()
            .filter(|e| e.slot != HOLE)
            .map(|e| e.slot)
    }

    /// Drops holes at both ends, so the first entry is a page, and gives
    /// room back as `shrink.rs` says: a burst's pages leave, oldest first,
    /// and its room went with them only at a restart (4 MB after 1M jobs
    /// of 1 KiB).
    fn trim(&mut self) {
        while self.entries.back().is_some_and(|e| e.slot == HOLE) {
            self.entries.pop_back();
        }
        while self.entries.front().is_some_and(|e| e.slot == HOLE) {
            self.entries.pop_front();
            self.first += 1;
        }
        let (len, room) = (self.entries.len(), self.entries.capacity());
        if let Some(capacity) = shrunk(len, room, KEEP_ENTRIES) {
            self.entries.shrink_to(capacity);
        }
    }

    /// The entries it has room for.
    #[cfg(test)]
    fn room(&self) -> usize {
        self.entries.capacity()
    }
}

#[cfg(test)]
mod tests;
