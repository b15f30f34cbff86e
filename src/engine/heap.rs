//! A 4-ary min-heap of jobs that supports removal from the middle.
//!
//! Each tube keeps its ready jobs in one (ordered by priority, then id) and
//! its delayed jobs in another (ordered by deadline, then id). With a million
//! jobs the heap is far bigger than the caches, so the layout is built
//! around cache misses:
//!
//! - An entry is the job's slot plus a copy of its order key, so sifting
//!   compares entries without reading the job records (scattered over
//!   tens of megabytes). A key never changes while its job is in a heap:
//!   priority and deadline are only set while the job is out of one. A
//!   ready entry is 16 bytes (priority, id, slot); a delayed one is 12
//!   (deadline and slot, packed to 4-byte alignment: 4 bytes a delayed job
//!   less), with no room for the id, so two equal deadlines (rare: both
//!   jobs must be due in the same microsecond) are ordered by reading both
//!   ids from the records.
//! - Four children per node: half the levels of a binary heap, and the four
//!   children (64 adjacent bytes) cost about one miss between them. (With a
//!   million jobs, eight measured faster for `reserve` but slower for
//!   promotions; two, slower for both.)
//! - The job table keeps each job's position (see [`JobTable::heap_pos`]) in
//!   a dense array, so moving an entry does not touch its record, and
//!   `delete`, `reserve-job` or `kick-job` take a job out in O(log n).
//! - When a removal brings a new entry to the top, its record is
//!   prefetched: that is the job the next `reserve` or promotion reads.

use super::job::JobRow;
use super::table::{JobSlot, JobTable};
use crate::shrink::shrunk;

/// Children per node.
const ARITY: usize = 4;

/// Entries a heap keeps room for however few it holds: giving back less
/// is not worth a reallocation.
const KEEP: usize = 4096;

/// A heap entry: a job's slot and a copy of its order key.
pub(super) trait HeapEntry: Copy + PartialEq {
    fn of(job: &JobRow, slot: JobSlot) -> Self;
    fn slot(self) -> JobSlot;
    /// Whether `self` comes before `other` (entries are never equal).
    fn less(self, other: Self, jobs: &JobTable) -> bool;
    /// The order as a pair (for browsing: [`SlotHeap::ordered_after`]).
    fn order(self, jobs: &JobTable) -> (u64, u64);
}

/// The reserve order: lower priority value first, then older job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ByPriority {
    pub(super) id: u64,
    pub(super) pri: u32,
    pub(super) slot: JobSlot,
}

impl ByPriority {
    /// The order as one number (a branch-free comparison).
    pub(super) fn key(self) -> u128 {
        (u128::from(self.pri) << 64) | u128::from(self.id)
    }
}

impl HeapEntry for ByPriority {
    fn of(job: &JobRow, slot: JobSlot) -> Self {
        ByPriority {
            id: job.id,
            pri: job.pri,
            slot,
        }
    }

    fn slot(self) -> JobSlot {
        self.slot
    }

    fn less(self, other: Self, _: &JobTable) -> bool {
        self.key() < other.key()
    }

    fn order(self, _: &JobTable) -> (u64, u64) {
        (u64::from(self.pri), self.id)
    }
}

/// The delay order: sooner deadline first, then older job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed(4))]
pub(super) struct ByDeadline {
    pub(super) deadline: u64,
    pub(super) slot: JobSlot,
}

impl HeapEntry for ByDeadline {
    fn of(job: &JobRow, slot: JobSlot) -> Self {
        ByDeadline {
            deadline: job.deadline,
            slot,
        }
    }

    fn slot(self) -> JobSlot {
        self.slot
    }

    fn less(self, other: Self, jobs: &JobTable) -> bool {
        if self.deadline == other.deadline {
            return older(self.slot, other.slot, jobs);
        }
        self.deadline < other.deadline
    }

    fn order(self, jobs: &JobTable) -> (u64, u64) {
        (self.deadline, jobs[self.slot].id)
    }
}

const _: () = assert!(std::mem::size_of::<ByDeadline>() == 12);

/// Whether the job in slot `a` was put before the one in slot `b`.
#[cold]
#[inline(never)]
fn older(a: JobSlot, b: JobSlot, jobs: &JobTable) -> bool {
    jobs[a].id < jobs[b].id
}

pub(super) struct SlotHeap<E> {
    /// Node `i`'s children are nodes `ARITY * i + 1 ..= ARITY * i + ARITY`.
    entries: Vec<E>,
}

impl<E: HeapEntry> SlotHeap<E> {
    pub(super) fn new() -> SlotHeap<E> {
        SlotHeap {
            entries: Vec::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The smallest entry.
    pub(super) fn peek(&self) -> Option<E> {
        self.entries.first().copied()
    }

    /// Adds the job in `slot`, keyed as it is now.
    pub(super) fn push(&mut self, slot: JobSlot, jobs: &mut JobTable) {
        let entry = E::of(&jobs[slot], slot);
        let at = self.entries.len();
        self.entries.push(entry);
        self.sift_up(at, entry, jobs);
    }

    /// Takes out `slot`, which must be in this heap.
    pub(super) fn remove(&mut self, slot: JobSlot, jobs: &mut JobTable) {
        let at = jobs.heap_pos(slot);
        debug_assert!(self.entries[at] == E::of(&jobs[slot], slot));
        let last = self.entries.pop().expect("heap holds the job");
        if let Some(capacity) = shrunk(self.entries.len(), self.entries.capacity(), KEEP) {
            self.entries.shrink_to(capacity);
        }
        if at == self.entries.len() {
            return;
        }
        if at > 0 && last.less(self.entries[(at - 1) / ARITY], jobs) {
            self.sift_up(at, last, jobs);
        } else {
            self.sift_down(at, last, jobs);
        }
    }

    /// At most `limit` entries in heap order, starting after the entry
    /// whose order is `after` (from the first without one), for paging.
    ///
    /// A best-first walk from the root: the nodes at or before `after` are
    /// skipped (every node below one beyond `after` is beyond it too), then
    /// the smallest of the frontier is taken `limit` times, its children
    /// joining the frontier. O(skipped + limit · log limit), without
    /// touching the heap: the first pages cost next to nothing, a page a
    /// million entries deep costs a pass over the entries before it.
    pub(super) fn ordered_after(
        &self,
        after: Option<(u64, u64)>,
        limit: usize,
        jobs: &JobTable,
    ) -> Vec<E> {
        use std::cmp::Reverse;
        let children =
            |i: usize| (ARITY * i + 1..ARITY * i + 1 + ARITY).filter(|&c| c < self.len());
        let mut frontier = std::collections::BinaryHeap::new();
        let mut skipped = if self.is_empty() { vec![] } else { vec![0] };
        while let Some(i) = skipped.pop() {
            let order = self.entries[i].order(jobs);
            if after.is_none_or(|after| order > after) {
                frontier.push(Reverse((order, i)));
            } else {
                skipped.extend(children(i));
            }
        }
        let mut page = Vec::with_capacity(limit.min(self.len()));
        while page.len() < limit {
            let Some(Reverse((_, i))) = frontier.pop() else {
                break;
            };
            page.push(self.entries[i]);
            for c in children(i) {
                frontier.push(Reverse((self.entries[c].order(jobs), c)));
            }
        }
        page
    }

    /// Every entry, in no particular order.
    pub(super) fn entries(&self) -> &[E] {
        &self.entries
    }

    /// Puts `entry` at node `i` and records its position.
    fn set(&mut self, i: usize, entry: E, jobs: &mut JobTable) {
        self.entries[i] = entry;
        jobs.set_heap_pos(entry.slot(), i);
    }

    /// Puts `entry` in the hole at node `at`, or above it.
    fn sift_up(&mut self, mut at: usize, entry: E, jobs: &mut JobTable) {
        while at > 0 {
            let parent = (at - 1) / ARITY;
            let above = self.entries[parent];
            if above.less(entry, jobs) {
                break;
            }
            self.set(at, above, jobs);
            at = parent;
        }
        self.set(at, entry, jobs);
    }

    /// Puts `entry` in the hole at node `at`, or below it.
    fn sift_down(&mut self, mut at: usize, entry: E, jobs: &mut JobTable) {
        let len = self.entries.len();
        loop {
            let first = ARITY * at + 1;
            if first >= len {
                break;
            }
            let mut child = first;
            let mut below = self.entries[first];
            for c in first + 1..(first + ARITY).min(len) {
                let e = self.entries[c];
                if e.less(below, jobs) {
                    child = c;
                    below = e;
                }
            }
            if entry.less(below, jobs) {
                break;
            }
            if at == 0 {
                jobs.prefetch(below.slot());
            }
            self.set(at, below, jobs);
            at = child;
        }
        self.set(at, entry, jobs);
    }
}
