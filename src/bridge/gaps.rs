//! When the bridge could not have seen a key deleted: the windows of time,
//! per node, in which a key that is gone at its deadline may have been
//! deleted rather than expired without the bridge being able to tell.
//!
//! A window opens when something may have been missed: the bridge starts
//! (it was down for who knows how long), the node's event connection is
//! lost, an unannounced wipe (`FLUSHDB`, `FLUSHALL`, `SWAPDB`, a restart)
//! is detected, or the job server connection is lost (queued events may
//! wait behind due timers). It closes when a complete reconciliation that
//! *began* after the last such moment (and, after a lost event connection,
//! after events flow again) has ended: from then on every key deleted
//! before the window was recognised (a complete SCAN pass syncs every
//! indexed key it did not list). A delivery whose deadline lies in a window
//! is marked uncertain. Pure: every time is passed in.

/// The windows of one node.
#[derive(Clone, Debug)]
pub struct Gaps {
    /// The window not yet closed, if any.
    open: Option<Open>,
    /// Closed windows, newest last, at most [`KEEP`].
    closed: Vec<(i64, i64)>,
}

#[derive(Clone, Copy, Debug)]
struct Open {
    /// Deadlines from here on may hide a deletion.
    from: i64,
    /// Only a pass that began at or after this closes the window.
    since: i64,
    /// Events are not flowing: no pass closes the window.
    events_down: bool,
}

/// Closed windows kept: a timer is decided within seconds of its deadline
/// (or right after a restart, inside the window that start opened), so
/// only the latest few can matter.
const KEEP: usize = 16;

impl Gaps {
    /// At start: everything until the first complete pass is uncertain.
    pub fn at_start() -> Gaps {
        Gaps {
            open: Some(Open {
                from: i64::MIN,
                since: i64::MIN,
                events_down: false,
            }),
            closed: Vec::new(),
        }
    }

    /// Something from `from_ms` on may have been missed; noticed at
    /// `now_ms`, so a pass that begins from then on can catch up.
    pub fn missed(&mut self, from_ms: i64, now_ms: i64) {
        let open = self.open.get_or_insert(Open {
            from: from_ms,
            since: now_ms,
            events_down: false,
        });
        open.from = open.from.min(from_ms);
        open.since = open.since.max(now_ms);
    }

    /// The event connection was lost at `now_ms`: nothing closes the
    /// window until [`Gaps::events_back`].
    pub fn events_lost(&mut self, now_ms: i64) {
        self.missed(now_ms, now_ms);
        if let Some(open) = &mut self.open {
            open.events_down = true;
        }
    }

    /// Events flow again since `now_ms`; a pass that begins from then on
    /// closes the window.
    pub fn events_back(&mut self, now_ms: i64) {
        if let Some(open) = &mut self.open {
            open.events_down = false;
            open.since = open.since.max(now_ms);
        }
    }

    /// A complete pass that began at `started_ms` ended at `now_ms`.
    pub fn passed(&mut self, started_ms: i64, now_ms: i64) {
        match self.open {
            Some(open) if !open.events_down && started_ms >= open.since => {
                self.open = None;
                if self.closed.len() == KEEP {
                    self.closed.remove(0);
                }
                self.closed.push((open.from, now_ms));
            }
            _ => {}
        }
    }

    /// Does a deadline at `at_ms` lie in a window?
    pub fn covers(&self, at_ms: i64) -> bool {
        self.open.is_some_and(|open| at_ms >= open.from)
            || self
                .closed
                .iter()
                .any(|&(from, until)| from <= at_ms && at_ms < until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_is_uncertain_until_the_first_complete_pass() {
        let mut g = Gaps::at_start();
        assert!(g.covers(0) && g.covers(i64::MIN) && g.covers(5_000));
        g.passed(1_000, 2_000);
        assert!(g.covers(1_999), "deadlines before the pass ended");
        assert!(!g.covers(2_000) && !g.covers(9_000));
    }

    #[test]
    fn only_a_pass_begun_after_the_last_miss_closes() {
        let mut g = Gaps::at_start();
        g.passed(0, 10);
        g.missed(1_000, 1_500);
        assert!(!g.covers(999) && g.covers(1_000) && g.covers(50_000));
        g.passed(1_400, 1_800);
        assert!(
            g.covers(50_000),
            "the pass began before the miss was noticed"
        );
        g.missed(1_200, 1_900);
        g.passed(1_900, 2_500);
        assert!(!g.covers(999) && g.covers(1_000) && g.covers(2_499));
        assert!(!g.covers(2_500));
    }

    #[test]
    fn a_lost_event_connection_stays_open_until_events_are_back_and_a_pass_ran() {
        let mut g = Gaps::at_start();
        g.passed(0, 10);
        g.events_lost(1_000);
        g.passed(1_100, 1_200);
        assert!(g.covers(5_000), "a pass while events are down");
        g.missed(500, 1_300);
        g.passed(1_300, 1_400);
        assert!(g.covers(5_000), "still down");
        g.events_back(2_000);
        g.passed(1_900, 2_100);
        assert!(g.covers(5_000), "the pass began before events were back");
        g.passed(2_000, 3_000);
        assert!(!g.covers(499) && g.covers(500) && g.covers(2_999));
        assert!(!g.covers(3_000));
    }

    #[test]
    fn old_windows_are_forgotten() {
        let mut g = Gaps::at_start();
        g.passed(0, 10);
        for i in 1..=(KEEP as i64 + 1) {
            g.missed(i * 100, i * 100);
            g.passed(i * 100, i * 100 + 50);
        }
        assert!(!g.covers(120), "the oldest window is gone");
        assert!(g.covers(220) && g.covers(KEEP as i64 * 100 + 120));
        assert!(!g.covers(5));
    }
}
