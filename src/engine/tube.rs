//! Tubes: named queues of jobs, and the registry that creates them on
//! demand and drops them when nothing refers to them.
//!
//! A tube holds its ready jobs (by priority), its delayed jobs (by deadline),
//! its buried jobs (in bury order), the connections waiting on it (oldest
//! first) and its pause. beanstalkd keeps a tube alive while a job, a `use`
//! or a `watch` refers to it (`default` always lives); the registry mirrors
//! that, and keeps the global list in beanstalkd's order (new tubes appended,
//! a removed tube's place taken by the last one) because `list-tubes` shows it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::{Index, IndexMut};

use sprout_protocol::TubeName;

use super::clock::Time;
use super::conn::ConnId;
use super::heap::{ByDeadline, ByPriority, SlotHeap};
use super::histogram::Latency;
use super::table::JobSlot;
use super::tube_ix::{TubeIx, DEFAULT_TUBE};

pub(super) struct Tube {
    pub(super) name: TubeName,
    pub(super) ready: SlotHeap<ByPriority>,
    pub(super) delayed: SlotHeap<ByDeadline>,
    /// `(bury sequence, slot)`: the first entry was buried first.
    pub(super) buried: BTreeSet<(u64, JobSlot)>,
    /// Waiting connections watching this tube, by wait sequence (oldest first).
    pub(super) waiters: BTreeMap<u64, ConnId>,
    pub(super) reserved: u64,
    /// Ready jobs with an urgent priority.
    pub(super) urgent: u64,
    pub(super) using: u32,
    pub(super) watching: u32,
    pub(super) total_jobs: u64,
    pub(super) deletes: u64,
    pub(super) pauses: u64,
    /// The length of the current pause in µs; 0 when not paused.
    pub(super) pause: Time,
    pub(super) unpause_at: Time,
    pub(super) latency: Latency,
    /// Where the tube sits in the registry's list.
    list_pos: usize,
}

impl Tube {
    fn new(name: TubeName, list_pos: usize) -> Tube {
        Tube {
            name,
            ready: SlotHeap::new(),
            delayed: SlotHeap::new(),
            buried: BTreeSet::new(),
            waiters: BTreeMap::new(),
            reserved: 0,
            urgent: 0,
            using: 0,
            watching: 0,
            total_jobs: 0,
            deletes: 0,
            pauses: 0,
            pause: 0,
            unpause_at: 0,
            latency: Latency::default(),
            list_pos,
        }
    }

    pub(super) fn is_paused(&self) -> bool {
        self.pause > 0
    }

    fn is_unreferenced(&self) -> bool {
        self.using == 0
            && self.watching == 0
            && self.reserved == 0
            && self.ready.is_empty()
            && self.delayed.is_empty()
            && self.buried.is_empty()
    }
}

pub(super) struct Tubes {
    slots: Vec<Option<Tube>>,
    free: Vec<TubeIx>,
    /// Names come from clients, so this map keeps the standard library's
    /// randomly keyed SipHash, which a flood of crafted colliding names
    /// cannot degrade. Only commands that name a tube look it up.
    by_name: HashMap<TubeName, TubeIx>,
    /// Every tube, in beanstalkd's order.
    list: Vec<TubeIx>,
}

impl Tubes {
    /// A registry holding only `default` (as [`DEFAULT_TUBE`]).
    pub(super) fn new() -> Tubes {
        let mut tubes = Tubes {
            slots: Vec::new(),
            free: Vec::new(),
            by_name: HashMap::new(),
            list: Vec::new(),
        };
        let default = tubes.find_or_make(&TubeName::default_tube());
        debug_assert_eq!(default, DEFAULT_TUBE);
        tubes
    }

    pub(super) fn find(&self, name: &TubeName) -> Option<TubeIx> {
        self.by_name.get(name).copied()
    }

    pub(super) fn find_or_make(&mut self, name: &TubeName) -> TubeIx {
        if let Some(t) = self.find(name) {
            return t;
        }
        let tube = Tube::new(name.clone(), self.list.len());
        let t = match self.free.pop() {
            Some(t) => {
                self.slots[t.at()] = Some(tube);
                t
            }
            None => {
                self.slots.push(Some(tube));
                TubeIx::new(self.slots.len() - 1)
            }
        };
        self.by_name.insert(name.clone(), t);
        self.list.push(t);
        t
    }

    /// Drops tube `t` if nothing refers to it any more; says whether it did.
    pub(super) fn remove_if_unused(&mut self, t: TubeIx) -> bool {
        if t == DEFAULT_TUBE || !self[t].is_unreferenced() {
            return false;
        }
        let tube = self.slots[t.at()].take().expect("live tube");
        self.by_name.remove(&tube.name);
        self.list.swap_remove(tube.list_pos);
        if let Some(&moved) = self.list.get(tube.list_pos) {
            self[moved].list_pos = tube.list_pos;
        }
        self.free.push(t);
        true
    }

    /// Every tube, in `list-tubes` order.
    pub(super) fn list(&self) -> &[TubeIx] {
        &self.list
    }
}

impl Index<TubeIx> for Tubes {
    type Output = Tube;

    fn index(&self, t: TubeIx) -> &Tube {
        self.slots[t.at()].as_ref().expect("live tube")
    }
}

impl IndexMut<TubeIx> for Tubes {
    fn index_mut(&mut self, t: TubeIx) -> &mut Tube {
        self.slots[t.at()].as_mut().expect("live tube")
    }
}
