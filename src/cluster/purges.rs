//! When the change messages a snapshot covers are purged.
//!
//! Not at once: a standby reading behind the leader would find the changes
//! it had not read yet gone, and a job put and deleted between two
//! snapshots is in no page, so nothing would tell it the job is gone. Such
//! a standby stops rather than take over with that job (`follow.rs`,
//! `PageError::Behind`), so purges wait until a standby still reading is
//! far behind: [`AFTER`] after the snapshot, or sooner once the changes not
//! purged pass [`BYTES`]. The stream so holds its live pages plus at most
//! that much of changes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long the change messages a snapshot covers stay after it.
pub const AFTER: Duration = Duration::from_secs(5);
/// Bytes of change messages past which the oldest covered ones go sooner.
pub const BYTES: usize = 64 << 20;

/// Snapshots acknowledged, and the change bytes not purged.
#[derive(Default)]
pub struct Purges {
    /// Each snapshot's time, the stream sequence it starts at, and the
    /// change bytes written before it since the last purge.
    done: VecDeque<(Instant, u64, usize)>,
    /// Change bytes written since the last purge.
    bytes: usize,
}

impl Purges {
    /// Change messages of `bytes` were sent.
    pub fn changed(&mut self, bytes: usize) {
        self.bytes += bytes;
    }

    /// The snapshot starting at stream sequence `from` was acknowledged
    /// at `now`.
    pub fn snapshot(&mut self, now: Instant, from: u64) {
        self.done.push_back((now, from, self.bytes));
    }

    /// The sequence to purge change messages below at `now`, if any is
    /// due: the latest snapshot old enough, or, while the changes kept
    /// pass [`BYTES`], the latest acknowledged.
    pub fn due(&mut self, now: Instant) -> Option<u64> {
        let over = self.bytes > BYTES;
        let n = self
            .done
            .iter()
            .rposition(|&(at, _, _)| over || now.duration_since(at) >= AFTER)?;
        let (_, below, covered) = self.done[n];
        self.done.drain(..=n);
        self.bytes -= covered;
        for (_, _, before) in &mut self.done {
            *before -= covered;
        }
        Some(below)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purges_wait_for_their_time_or_for_the_bytes() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut p = Purges::default();
        assert_eq!(p.due(t0), None);
        p.changed(1000);
        p.snapshot(t0, 10);
        p.changed(500);
        p.snapshot(t0 + 2 * s, 20);
        p.changed(300);
        // (when, what is due)
        for (at, want) in [
            (t0 + 4 * s, None),
            (t0 + AFTER, Some(10)),
            (t0 + AFTER + s, None),
            (t0 + AFTER + 2 * s, Some(20)),
            (t0 + AFTER + 60 * s, None),
        ] {
            assert_eq!(p.due(at), want, "{:?}", at - t0);
        }
        assert_eq!(p.bytes, 300);
        // Past the bytes: the latest acknowledged goes at once.
        p.changed(BYTES);
        let t1 = t0 + 100 * s;
        p.snapshot(t1, 30);
        p.changed(10);
        p.snapshot(t1, 40);
        p.changed(7);
        assert_eq!(p.due(t1), Some(40));
        assert_eq!((p.bytes, p.done.len()), (7, 0));
        assert_eq!(p.due(t1 + AFTER), None);
    }
}
