//! What sled replaced, freed once the store is quiet.
//!
//! sled 0.34 frees what it replaces (a node's earlier versions, the nodes
//! it read back for cleaning, each sealed 512 KiB IO buffer) through
//! crossbeam-epoch's global collector, which frees only while threads pin
//! it: up to 8 bags of 64 every 128 pins. What a thread defers waits in
//! its own bag until it fills, or the thread pins again or exits; sled's
//! extra IO threads exit after about 3 idle seconds (its `threadpool.rs`),
//! handing theirs over then. Once the store is quiet nothing pins, so all
//! of it stayed: 1M jobs of 1 KiB put and drained left 145 MB of RSS with
//! no job held, ~70 MB of it this garbage (heaptrack: sled's node copies
//! and IO buffers). So the absorber, the thread that writes sled, pins and
//! flushes at each quiet wake-up (about one a second) for [`COLLECT_FOR`]
//! after it last used sled: the frees show 8-10 s after a burst, as
//! sled's threads exit.

use std::time::{Duration, Instant};

use crossbeam_epoch::Guard;

/// Pins and flushes in one collection: each flush moves the epoch on when
/// it can and frees up to 8 bags two epochs old.
const ROUNDS: usize = 256;

/// How long after sled's last use quiet wake-ups still collect: past the
/// exit of sled's idle IO threads, with room to spare.
pub const COLLECT_FOR: Duration = Duration::from_secs(15);

/// When sled was last used, while what it replaced may wait to be freed.
#[derive(Default)]
pub struct Garbage {
    used: Option<Instant>,
}

impl Garbage {
    /// sled was used at `now`: it may have replaced something.
    pub fn made(&mut self, now: Instant) {
        self.used = Some(now);
    }

    /// Frees what sled's threads have handed over, while that may be
    /// anything (see [`collecting`]).
    pub fn collect(&mut self, now: Instant) {
        self.collect_in(now, crossbeam_epoch::pin);
    }

    /// [`Garbage::collect`] through `pin` (sled's collector, or a test's
    /// own, which no other thread holds back).
    fn collect_in(&mut self, now: Instant, pin: impl Fn() -> Guard) {
        if !collecting(self.used, now) {
            self.used = None;
            return;
        }
        for _ in 0..ROUNDS {
            pin().flush();
        }
    }
}

/// Whether a quiet wake-up at `now` collects, sled last used at `used`.
fn collecting(used: Option<Instant>, now: Instant) -> bool {
    used.is_some_and(|used| now.saturating_duration_since(used) <= COLLECT_FOR)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crossbeam_epoch::{Collector, LocalHandle};

    use super::{collecting, Garbage, COLLECT_FOR};

    /// Defers `n` frees through `handle`, as sled does through its
    /// collector, each counted when it runs.
    fn defer(handle: &LocalHandle, n: usize) -> Arc<AtomicUsize> {
        let freed = Arc::new(AtomicUsize::new(0));
        for _ in 0..n {
            let freed = freed.clone();
            handle
                .pin()
                .defer(move || freed.fetch_add(1, Ordering::Relaxed));
        }
        freed
    }

    #[test]
    fn quiet_wake_ups_collect_for_a_while_after_sled_was_used() {
        let now = Instant::now();
        let second = Duration::from_secs(1);
        let cases = [
            (None, now, false),
            (Some(now), now, true),
            (Some(now), now + second, true),
            (Some(now), now + COLLECT_FOR, true),
            (Some(now), now + COLLECT_FOR + second, false),
            // A use stamped after the wake-up's clock reading.
            (Some(now + second), now, true),
        ];
        for (used, at, collects) in cases {
            assert_eq!(collecting(used, at), collects, "{used:?} {at:?}");
        }
    }

    #[test]
    fn a_collection_frees_what_was_deferred_once_sled_was_used() {
        let collector = Collector::new();
        let handle = collector.register();
        // Fewer than a bag: without a flush they would wait for ever.
        let freed = defer(&handle, 10);
        let mut garbage = Garbage::default();
        let now = Instant::now();
        garbage.collect_in(now, || handle.pin());
        assert_eq!(freed.load(Ordering::Relaxed), 0, "sled was not used");
        garbage.made(now);
        garbage.collect_in(now, || handle.pin());
        assert_eq!(freed.load(Ordering::Relaxed), 10);
        // Long after: nothing more is collected, and the use is forgotten.
        let freed = defer(&handle, 10);
        let later = now + COLLECT_FOR + Duration::from_secs(1);
        garbage.collect_in(later, || handle.pin());
        garbage.collect_in(now, || handle.pin());
        assert_eq!(freed.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn one_collection_frees_a_burst_of_many_bags() {
        let collector = Collector::new();
        let handle = collector.register();
        let freed = defer(&handle, 64 * 500);
        let mut garbage = Garbage::default();
        let now = Instant::now();
        garbage.made(now);
        garbage.collect_in(now, || handle.pin());
        assert_eq!(freed.load(Ordering::Relaxed), 64 * 500);
    }
}
