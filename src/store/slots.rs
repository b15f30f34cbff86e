//! Storage slots: the small, reused numbers jobs are keyed by in the tree
//! (see `record.rs` for why not job ids).
//!
//! The writer thread alone assigns them, so no locking; the mapping is
//! rebuilt from the keys at startup, and freed slots are handed out again
//! lowest first, so the key space stays as compact as the live jobs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use sprout_protocol::JobId;

use super::record::Slot;

#[derive(Default)]
pub struct Slots {
    by_id: HashMap<JobId, Slot>,
    free: BinaryHeap<Reverse<Slot>>,
    /// Every slot below this has been handed out at some point.
    high: Slot,
}

impl Slots {
    /// The mapping a store's keys describe.
    pub fn recovered(used: impl IntoIterator<Item = (JobId, Slot)>) -> Slots {
        let by_id: HashMap<JobId, Slot> = used.into_iter().collect();
        let high = by_id.values().max().map_or(0, |&s| s + 1);
        let mut taken = vec![false; high as usize];
        for &slot in by_id.values() {
            taken[slot as usize] = true;
        }
        let free = (0..high)
            .filter(|&s| !taken[s as usize])
            .map(Reverse)
            .collect();
        Slots { by_id, free, high }
    }

    /// A slot for a new job.
    pub fn assign(&mut self, id: JobId) -> Slot {
        let slot = match self.free.pop() {
            Some(Reverse(slot)) => slot,
            None => {
                self.high += 1;
                self.high - 1
            }
        };
        self.by_id.insert(id, slot);
        slot
    }

    pub fn get(&self, id: JobId) -> Option<Slot> {
        self.by_id.get(&id).copied()
    }

    /// Frees the slot of a deleted job.
    pub fn release(&mut self, id: JobId) -> Option<Slot> {
        let slot = self.by_id.remove(&id)?;
        self.free.push(Reverse(slot));
        Some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_slots_are_reused_lowest_first() {
        let mut slots = Slots::default();
        assert_eq!(
            (slots.assign(10), slots.assign(11), slots.assign(12)),
            (0, 1, 2)
        );
        assert_eq!(slots.release(12), Some(2));
        assert_eq!(slots.release(10), Some(0));
        assert_eq!(slots.assign(13), 0);
        assert_eq!(slots.assign(14), 2);
        assert_eq!(slots.assign(15), 3);
        assert_eq!(slots.get(11), Some(1));
        assert_eq!(slots.release(99), None);
    }

    #[test]
    fn recovery_frees_the_gaps() {
        let mut slots = Slots::recovered([(7, 0), (9, 3)]);
        assert_eq!(slots.get(9), Some(3));
        assert_eq!(
            (slots.assign(20), slots.assign(21), slots.assign(22)),
            (1, 2, 4)
        );
    }
}
