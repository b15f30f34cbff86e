//! The one timer structure: when the engine next has work of its own.
//!
//! Each owner (a tube's soonest delayed job, a tube's pause, a connection's
//! TTR / safety margin / reserve timeout) has at most one armed moment. The
//! heap holds one entry per armed moment plus stale entries left behind when
//! an owner re-arms; a stale entry is recognised by not matching its owner's
//! armed moment, dropped as soon as it reaches the top, and the heap is
//! rebuilt when stale entries outnumber live ones. So the top is always live
//! ([`Timers::next`] is O(1)) and memory stays proportional to the owners,
//! not to the jobs: a million delayed jobs in one tube are one entry here.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use super::clock::Time;
use super::conn::ConnId;
use super::tube_ix::TubeIx;

/// What is due. At equal moments, delayed jobs wake first, then tubes
/// resume, then connections time out, so a job that becomes ready at the
/// very moment a `reserve-with-timeout` ends is still handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum TimerKey {
    Delayed(TubeIx),
    Unpause(TubeIx),
    Conn(ConnId),
}

#[derive(Default)]
pub(super) struct Timers {
    heap: BinaryHeap<Reverse<(Time, TimerKey)>>,
    /// Touched several times per promoted job. Owners are tube indexes and
    /// connection ids the engine hands out, never chosen by a client, so the
    /// fast unkeyed FxHash is safe.
    armed: FxHashMap<TimerKey, Time>,
}

impl Timers {
    /// Arms `key` for `at`, or disarms it.
    pub(super) fn set(&mut self, key: TimerKey, at: Option<Time>) {
        let old = match at {
            Some(at) => self.armed.insert(key, at),
            None => self.armed.remove(&key),
        };
        if old == at {
            return;
        }
        if let Some(at) = at {
            self.heap.push(Reverse((at, key)));
        }
        if self.heap.len() > 2 * self.armed.len() + 32 {
            self.heap = self
                .armed
                .iter()
                .map(|(&key, &at)| Reverse((at, key)))
                .collect();
        }
        self.drop_stale();
    }

    /// Heap entries, stale ones included.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    /// The earliest armed moment.
    pub(super) fn next(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Disarms and returns the earliest key due at `now`.
    pub(super) fn pop_due(&mut self, now: Time) -> Option<TimerKey> {
        let &Reverse((at, key)) = self.heap.peek()?;
        if at > now {
            return None;
        }
        self.heap.pop();
        self.armed.remove(&key);
        self.drop_stale();
        Some(key)
    }

    fn drop_stale(&mut self) {
        while let Some(&Reverse((at, key))) = self.heap.peek() {
            if self.armed.get(&key) == Some(&at) {
                break;
            }
            self.heap.pop();
        }
    }
}
