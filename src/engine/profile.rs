//! A job's tube, TTR and delay, interned: a record holds a 4-byte
//! [`ProfileId`] where the three took 12 bytes.
//!
//! The three are set by the `put` (the delay again by a `release`) and are
//! almost always the same for every job a producer puts, so a million held
//! jobs share a handful of [`Profile`]s. Each profile counts the jobs that
//! use it. One that no job uses any more is not dropped at once: it waits
//! in a queue of the last [`IDLE_KEPT`] unused ones, so a tube whose one
//! job is put and deleted over and over finds its profile again instead of
//! rebuilding it each time; each release past that drops the oldest unused
//! one (O(1), never a sweep). Where every job has a profile of its own
//! (every delay different), a profile costs 40 to 60 bytes (its entry and
//! its place in the map) against the 8 the record saves: the same shape
//! that costs nothing in the common case is what costs there.
//!
//! Values are chosen by clients, so the map hashes with the standard
//! library's keyed hasher; the last profile interned is remembered, so a
//! run of puts alike hashes nothing.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;

use super::tube_ix::TubeIx;

/// Unused profiles kept for reuse.
const IDLE_KEPT: usize = 64;

/// What jobs put alike share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Profile {
    pub(super) tube: TubeIx,
    /// Seconds, at least 1.
    pub(super) ttr: u32,
    /// Seconds of the delay given by the last `put` or `release`.
    pub(super) delay: u32,
}

/// A profile's place in [`Profiles`] (plus one: `Option<JobRow>` needs no
/// byte of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ProfileId(NonZeroU32);

impl ProfileId {
    fn index(self) -> usize {
        self.0.get() as usize - 1
    }

    fn at(index: usize) -> ProfileId {
        let id = u32::try_from(index + 1).expect("at most one profile per job");
        ProfileId(NonZeroU32::new(id).expect("index + 1 is not zero"))
    }
}

struct Interned {
    profile: Profile,
    /// Jobs that use it.
    jobs: u32,
    /// It is in the idle queue (maybe used again since).
    queued: bool,
}

#[derive(Default)]
pub(super) struct Profiles {
    /// By index; a dropped profile's entry is in `free`.
    entries: Vec<Interned>,
    free: Vec<usize>,
    ids: HashMap<Profile, ProfileId>,
    /// Profiles whose job count reached zero, oldest first.
    idle: VecDeque<ProfileId>,
    last: Option<(Profile, ProfileId)>,
}

impl Profiles {
    pub(super) fn get(&self, id: ProfileId) -> Profile {
        self.entries[id.index()].profile
    }

    /// The profile for one more job with `profile`.
    pub(super) fn acquire(&mut self, profile: Profile) -> ProfileId {
        let id = match self.last {
            Some((last, id)) if last == profile => id,
            _ => {
                let id = match self.ids.get(&profile) {
                    Some(&id) => id,
                    None => self.make(profile),
                };
                self.last = Some((profile, id));
                id
            }
        };
        self.entries[id.index()].jobs += 1;
        id
    }

    /// One job fewer uses `id`.
    pub(super) fn release(&mut self, id: ProfileId) {
        let entry = &mut self.entries[id.index()];
        entry.jobs -= 1;
        if entry.jobs > 0 || entry.queued {
            return;
        }
        entry.queued = true;
        self.idle.push_back(id);
        if self.idle.len() > IDLE_KEPT {
            let oldest = self.idle.pop_front().expect("the queue is not empty");
            let entry = &mut self.entries[oldest.index()];
            entry.queued = false;
            if entry.jobs == 0 {
                self.ids.remove(&entry.profile);
                self.free.push(oldest.index());
                if self.last.is_some_and(|(_, id)| id == oldest) {
                    self.last = None;
                }
            }
        }
    }

    /// Profiles kept, used or not.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    fn make(&mut self, profile: Profile) -> ProfileId {
        let entry = Interned {
            profile,
            jobs: 0,
            queued: false,
        };
        let id = match self.free.pop() {
            Some(index) => {
                self.entries[index] = entry;
                ProfileId::at(index)
            }
            None => {
                self.entries.push(entry);
                ProfileId::at(self.entries.len() - 1)
            }
        };
        self.ids.insert(profile, id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(delay: u32) -> Profile {
        Profile {
            tube: crate::engine::tube_ix::DEFAULT_TUBE,
            ttr: 60,
            delay,
        }
    }

    #[test]
    fn jobs_alike_share_one_profile() {
        let mut profiles = Profiles::default();
        let a = profiles.acquire(profile(0));
        let b = profiles.acquire(profile(5));
        assert_eq!(profiles.acquire(profile(0)), a);
        assert_ne!(a, b);
        assert_eq!(profiles.get(a), profile(0));
        assert_eq!(profiles.get(b), profile(5));
        profiles.release(a);
        profiles.release(a);
        // Unused, but kept: the same profile comes back.
        assert_eq!(profiles.acquire(profile(0)), a);
        assert_eq!(profiles.len(), 2);
    }

    #[test]
    fn only_the_last_unused_profiles_are_kept() {
        let mut profiles = Profiles::default();
        let held = profiles.acquire(profile(u32::MAX));
        for delay in 0..1000 {
            let id = profiles.acquire(profile(delay));
            profiles.release(id);
            assert!(profiles.len() <= IDLE_KEPT + 1, "at {delay}");
        }
        assert_eq!(profiles.len(), IDLE_KEPT + 1);
        assert_eq!(profiles.get(held), profile(u32::MAX));
        // Dropped ones are made anew, in freed places, and read back right.
        let again = profiles.acquire(profile(0));
        assert_eq!(profiles.get(again), profile(0));
        assert!(profiles.entries.len() <= IDLE_KEPT + 3);
    }

    #[test]
    fn a_profile_used_again_while_queued_is_not_dropped() {
        let mut profiles = Profiles::default();
        let a = profiles.acquire(profile(1));
        profiles.release(a);
        assert_eq!(profiles.acquire(profile(1)), a);
        for delay in 100..100 + 2 * IDLE_KEPT as u32 {
            let id = profiles.acquire(profile(delay));
            profiles.release(id);
        }
        assert_eq!(profiles.get(a), profile(1));
        assert_eq!(profiles.acquire(profile(1)), a);
        // Released again later, it queues again and is dropped in turn.
        profiles.release(a);
        profiles.release(a);
        for delay in 1000..1000 + 2 * IDLE_KEPT as u32 {
            let id = profiles.acquire(profile(delay));
            profiles.release(id);
        }
        assert!(!profiles.ids.contains_key(&profile(1)));
    }
}
