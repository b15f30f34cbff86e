//! A binary min-heap of job slots that supports removal from the middle.
//!
//! Each tube keeps its ready jobs in one (ordered by priority, then id) and
//! its delayed jobs in another (ordered by deadline, then id). An entry is
//! just the job's 4-byte slot; the job record remembers its position, so
//! `delete`, `reserve-job` or `kick-job` take a job out in O(log n).

use super::job::Job;
use super::table::JobTable;

/// The order of a heap: smallest key on top.
pub(super) type Key = fn(&Job) -> (u64, u64);

pub(super) struct SlotHeap {
    slots: Vec<u32>,
    key: Key,
}

impl SlotHeap {
    pub(super) fn new(key: Key) -> SlotHeap {
        SlotHeap {
            slots: Vec::new(),
            key,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The smallest job.
    pub(super) fn peek(&self) -> Option<u32> {
        self.slots.first().copied()
    }

    pub(super) fn push(&mut self, slot: u32, jobs: &mut JobTable) {
        self.slots.push(slot);
        let at = self.slots.len() - 1;
        jobs[slot].set_heap_pos(at);
        self.sift_up(at, jobs);
    }

    /// Takes out `slot`, which must be in this heap.
    pub(super) fn remove(&mut self, slot: u32, jobs: &mut JobTable) {
        let at = jobs[slot].heap_pos();
        debug_assert_eq!(self.slots[at], slot);
        let last = self.slots.pop().expect("heap holds the job");
        if at < self.slots.len() {
            self.slots[at] = last;
            jobs[last].set_heap_pos(at);
            self.sift_down(at, jobs);
            self.sift_up(at, jobs);
        }
    }

    fn less(&self, a: usize, b: usize, jobs: &JobTable) -> bool {
        (self.key)(&jobs[self.slots[a]]) < (self.key)(&jobs[self.slots[b]])
    }

    fn swap(&mut self, a: usize, b: usize, jobs: &mut JobTable) {
        self.slots.swap(a, b);
        jobs[self.slots[a]].set_heap_pos(a);
        jobs[self.slots[b]].set_heap_pos(b);
    }

    fn sift_up(&mut self, mut at: usize, jobs: &mut JobTable) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if !self.less(at, parent, jobs) {
                break;
            }
            self.swap(at, parent, jobs);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize, jobs: &mut JobTable) {
        loop {
            let left = 2 * at + 1;
            if left >= self.slots.len() {
                break;
            }
            let right = left + 1;
            let child = if right < self.slots.len() && self.less(right, left, jobs) {
                right
            } else {
                left
            };
            if !self.less(child, at, jobs) {
                break;
            }
            self.swap(at, child, jobs);
            at = child;
        }
    }
}
