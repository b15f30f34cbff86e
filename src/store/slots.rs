//! Storage slots: the small, reused numbers pages are keyed by in the tree.
//!
//! Page sequence numbers only grow, and sled 0.34 never merges the tree
//! nodes that deletes at the low end of a growing key space empty, so keys
//! that only grow made the store grow without bound under churn (measured
//! with one key per job id: ~15 MiB of disk and ~170 MiB of RSS per 100k
//! put+delete cycles with 1000 jobs live). Pages are therefore keyed by a
//! slot, handed out lowest free first, and carry their sequence number in
//! their value; the key space stays as small as the number of live pages.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Where a page is kept in the tree.
pub type Slot = u32;

#[derive(Default)]
pub struct Slots {
    free: BinaryHeap<Reverse<Slot>>,
    /// Every slot below this has been handed out at some point.
    high: Slot,
}

impl Slots {
    /// The free slots around those a store's keys use.
    pub fn recovered(used: impl IntoIterator<Item = Slot>) -> Slots {
        let used: Vec<Slot> = used.into_iter().collect();
        let high = used.iter().max().map_or(0, |&s| s + 1);
        let mut taken = vec![false; high as usize];
        for &slot in &used {
            taken[slot as usize] = true;
        }
        let free = (0..high)
            .filter(|&s| !taken[s as usize])
            .map(Reverse)
            .collect();
        Slots { free, high }
    }

    /// The lowest free slot.
    pub fn take(&mut self) -> Slot {
        match self.free.pop() {
            Some(Reverse(slot)) => slot,
            None => {
                self.high += 1;
                self.high - 1
            }
        }
    }

    /// Frees a slot for reuse. Once every slot is free (no page is
    /// stored), the numbers start again from 0 and the free list's room
    /// goes: after a burst it held a slot for each page the burst stored
    /// (2 MB at 1M jobs of 1 KiB).
    pub fn give(&mut self, slot: Slot) {
        self.free.push(Reverse(slot));
        if self.free.len() == self.high as usize {
            *self = Slots::default();
        }
    }

    /// The slots the free list has room for.
    #[cfg(test)]
    fn room(&self) -> usize {
        self.free.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_slots_are_reused_lowest_first() {
        let mut slots = Slots::default();
        assert_eq!((slots.take(), slots.take(), slots.take()), (0, 1, 2));
        slots.give(2);
        slots.give(0);
        assert_eq!((slots.take(), slots.take(), slots.take()), (0, 2, 3));
    }

    #[test]
    fn once_all_are_free_they_start_again_from_zero() {
        let mut slots = Slots::default();
        let taken: Vec<Slot> = (0..10_000).map(|_| slots.take()).collect();
        for &slot in &taken[1..] {
            slots.give(slot);
        }
        assert!(slots.room() >= 9_999);
        assert_eq!(slots.take(), 1, "slot 0 is still used");
        slots.give(1);
        slots.give(0);
        assert_eq!(slots.room(), 0);
        assert_eq!((slots.take(), slots.take()), (0, 1));
    }

    #[test]
    fn recovery_frees_the_gaps() {
        let mut slots = Slots::recovered([0, 3]);
        assert_eq!((slots.take(), slots.take(), slots.take()), (1, 2, 4));
    }
}
