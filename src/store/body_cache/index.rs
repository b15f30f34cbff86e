//! Where the body cache keeps each job's slot.
//!
//! Job ids rise in put order, and the bodies a cache holds are mostly those
//! of recent puts: ids close together. Those index a window directly, so
//! the path every job takes (its put, its reserve, its delete) does no
//! hashing, which cost durable puts ~15% of their CPU when every id went
//! through a hash map (issue 33). Other ids (older ones, read back from the
//! disk, or put out of order) are in a map. Every id in the map is below
//! the window's first: the window only grows at its end, and moves ids to
//! the map only from its front.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use sprout_protocol::JobId;

/// How many ids the window may span per id it holds (plus [`SLACK`])
/// before its oldest move to the map: bodies left inline by the engine, or
/// evicted, leave holes.
const SPARSE: usize = 8;
const SLACK: usize = 1024;

#[derive(Default)]
pub(super) struct Index {
    /// The id of `window[0]`.
    base: JobId,
    /// Slot + 1 of each id from `base` on; 0: not held.
    window: VecDeque<u32>,
    /// Ids held in the window.
    held: usize,
    map: FxHashMap<JobId, u32>,
}

impl Index {
    /// The slot of `id`, if held.
    pub(super) fn get(&self, id: JobId) -> Option<u32> {
        match self.offset(id) {
            Some(i) => self.window[i].checked_sub(1),
            None => self.map.get(&id).copied(),
        }
    }

    pub(super) fn contains(&self, id: JobId) -> bool {
        self.get(id).is_some()
    }

    /// How many ids are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.held + self.map.len()
    }

    /// Holds `id` at slot `at` (replacing where it was).
    pub(super) fn insert(&mut self, id: JobId, at: u32) {
        if let Some(i) = self.offset(id) {
            if self.window[i] == 0 {
                self.held += 1;
            }
            self.window[i] = at + 1;
            return;
        }
        let end = self.end();
        if id < end {
            self.map.insert(id, at);
            return;
        }
        let gap = (id - end) as usize;
        if gap > SPARSE * (self.held + 1) + SLACK {
            // Too far ahead to fill the ids between: start again there.
            self.move_to_map(self.window.len());
            self.base = id;
        } else {
            self.window.extend(std::iter::repeat_n(0, gap));
        }
        self.window.push_back(at + 1);
        self.held += 1;
        self.keep_dense();
    }

    /// Lets go of `id`; its slot, if it was held.
    pub(super) fn remove(&mut self, id: JobId) -> Option<u32> {
        let Some(i) = self.offset(id) else {
            return self.map.remove(&id);
        };
        let at = std::mem::take(&mut self.window[i]).checked_sub(1)?;
        self.held -= 1;
        while self.window.front() == Some(&0) {
            self.window.pop_front();
            self.base += 1;
        }
        self.keep_dense();
        Some(at)
    }

    /// Every id held, and its slot.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = (JobId, u32)> + '_ {
        let window = (self.window.iter().enumerate())
            .filter(|&(_, &at)| at != 0)
            .map(|(i, &at)| (self.base + i as JobId, at - 1));
        window.chain(self.map.iter().map(|(&id, &at)| (id, at)))
    }

    /// Gives back room (after a burst, or a smaller bound).
    pub(super) fn shrink(&mut self) {
        self.window.shrink_to(2 * self.window.len());
        self.map.shrink_to(2 * self.map.len());
    }

    fn end(&self) -> JobId {
        self.base + self.window.len() as JobId
    }

    fn offset(&self, id: JobId) -> Option<usize> {
        let i = usize::try_from(id.checked_sub(self.base)?).ok()?;
        (i < self.window.len()).then_some(i)
    }

    /// Moves the window's oldest ids to the map while it spans too many
    /// ids for those it holds.
    fn keep_dense(&mut self) {
        let over = self.window.len().saturating_sub(SPARSE * self.held + SLACK);
        if over > 0 {
            self.move_to_map(over.max(self.window.len() / 4));
        }
    }

    /// Moves the window's first `n` ids to the map.
    fn move_to_map(&mut self, n: usize) {
        for at in self.window.drain(..n.min(self.window.len())) {
            if at != 0 {
                self.map.insert(self.base, at - 1);
                self.held -= 1;
            }
            self.base += 1;
        }
        while self.window.front() == Some(&0) {
            self.window.pop_front();
            self.base += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Against a map, with ids in order, out of order, far apart, and
    /// removed from the middle and the front.
    #[test]
    fn holds_what_a_map_holds() {
        let mut index = Index::default();
        let mut model: HashMap<JobId, u32> = HashMap::new();
        let mut x: u64 = 7;
        let mut next = 1_000;
        for step in 0..200_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = match x >> 61 {
                0..=3 => {
                    next += 1 + (x >> 40) % 3;
                    next
                }
                4 => next.saturating_sub((x >> 20) % 5_000),
                5 => next + 20_000 + (x >> 30) % 100_000,
                _ => next.saturating_sub((x >> 20) % 2_000),
            };
            if x & 1 == 0 || model.len() > 50_000 {
                assert_eq!(index.remove(id), model.remove(&id), "remove {id} at {step}");
            } else {
                index.insert(id, step);
                model.insert(id, step);
            }
            if step % 997 == 0 {
                assert_eq!(index.len(), model.len());
                let mut held: Vec<_> = index.iter().collect();
                let mut expected: Vec<_> = model.iter().map(|(&id, &at)| (id, at)).collect();
                held.sort_unstable();
                expected.sort_unstable();
                assert_eq!(held, expected, "at {step}");
                assert!(index.window.len() <= SPARSE * index.held + SLACK + 1 || index.held == 0);
            }
            assert_eq!(index.get(id), model.get(&id).copied(), "get {id} at {step}");
        }
    }
}
