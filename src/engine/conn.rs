//! What the engine knows about one client connection: the tube it uses, the
//! tubes it watches, the jobs it holds, and whether it is blocked in
//! `reserve`.

use std::collections::BTreeSet;

use sprout_protocol::Response;

use super::clock::Time;
use super::table::JobSlot;
use super::tube_ix::{TubeIx, DEFAULT_TUBE};

/// A connection, as the engine knows it.
pub type ConnId = u64;

/// The holder of jobs reserved on another node, whose connection died with
/// it (cluster mode): nobody can delete, release, bury or touch them, and
/// each times out (back to ready, `timeouts` one more) when its TTR runs
/// out. Never a client's id (those start at 1).
pub(super) const DEPARTED: ConnId = 0;

/// How long before a TTR runs out a holder counts as "deadline soon".
pub(super) const SAFETY_MARGIN: Time = 1_000_000;

pub(super) struct Conn {
    pub(super) using: TubeIx,
    /// Watched tubes, in beanstalkd's order (appended; an ignored tube's
    /// place taken by the last one), as `list-tubes-watched` shows them.
    pub(super) watch: Vec<TubeIx>,
    /// `(TTR deadline, slot)` of every job this connection holds.
    pub(super) reserved: BTreeSet<(Time, JobSlot)>,
    pub(super) wait: Option<Wait>,
    pub(super) producer: bool,
    pub(super) worker: bool,
}

/// A connection blocked in `reserve` (or `reserve-batch <n> <timeout>`).
pub(super) struct Wait {
    /// Orders waiters: the smallest waited longest.
    pub(super) seq: u64,
    /// When `reserve-with-timeout` gives up.
    pub(super) until: Option<Time>,
    /// A `reserve-batch`'s `n`: the jobs it takes once one is ready.
    pub(super) batch: Option<u32>,
}

impl Wait {
    /// What a wait for `batch` answers when its time is up: TIMED_OUT, or
    /// an empty batch (tuber's `reserve-batch` never answers TIMED_OUT).
    pub(super) fn timed_out(batch: Option<u32>) -> Response {
        match batch {
            None => Response::TimedOut,
            Some(_) => Response::ReservedBatch(Vec::new()),
        }
    }
}

impl Conn {
    pub(super) fn new() -> Conn {
        Conn {
            using: DEFAULT_TUBE,
            watch: vec![DEFAULT_TUBE],
            reserved: BTreeSet::new(),
            wait: None,
            producer: false,
            worker: false,
        }
    }

    /// The holder of reservations taken over from another node (the
    /// engine's `DEPARTED`): it uses the default tube without counting in
    /// it, watches nothing, and never disconnects.
    pub(super) fn departed() -> Conn {
        Conn {
            watch: Vec::new(),
            ..Conn::new()
        }
    }

    /// The reserved job whose TTR runs out first.
    pub(super) fn soonest(&self) -> Option<(Time, JobSlot)> {
        self.reserved.first().copied()
    }

    /// beanstalkd's `conndeadlinesoon`: a held job is within the safety
    /// margin of its deadline.
    pub(super) fn deadline_soon(&self, now: Time) -> bool {
        self.soonest()
            .is_some_and(|(deadline, _)| now >= deadline.saturating_sub(SAFETY_MARGIN))
    }

    /// Holds `slot` reserved until `deadline`.
    pub(super) fn holds(&self, deadline: Time, slot: JobSlot) -> bool {
        self.reserved.contains(&(deadline, slot))
    }

    /// The next moment something happens to this connection on its own
    /// (beanstalkd's `conntickat`): a TTR runs out, or, while waiting, a held
    /// job enters the safety margin or the reserve times out.
    pub(super) fn due(&self) -> Option<Time> {
        let margin = if self.wait.is_some() {
            SAFETY_MARGIN
        } else {
            0
        };
        let ttr = self
            .soonest()
            .map(|(deadline, _)| deadline.saturating_sub(margin));
        let timeout = self.wait.as_ref().and_then(|w| w.until);
        match (ttr, timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
