//! The engine's time: [`Time`], and [`Clock`], the one place that reads
//! the system clock. The engine itself never calls it (its module promises
//! no clock reads): the server reads the clock and passes the time into
//! every engine call, and tests pass explicit times.

use std::time::Duration;

/// Microseconds since the Unix epoch, as read at startup and then advanced
/// by the monotonic clock (see [`Clock`]). Being wall-clock based, a stored
/// deadline means the same moment after a restart; being monotonic while
/// the server runs, a clock step never fires a job early or late.
pub type Time = u64;

/// Reads [`Time`] and maps it back to `Instant`s for sleeping.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: std::time::Instant,
    /// [`Time`] at `epoch`.
    base: Time,
}

impl Clock {
    pub fn new() -> Clock {
        let since_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Clock {
            epoch: std::time::Instant::now(),
            base: micros(since_unix),
        }
    }

    pub fn now(&self) -> Time {
        self.base + micros(self.epoch.elapsed())
    }

    /// The `Instant` at which `t` falls, for sleeping until it (capped at
    /// decades away: a delay of 2^32-1 s is beyond what `Instant` can add).
    pub fn instant(&self, t: Time) -> std::time::Instant {
        const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
        let after = Duration::from_micros(t.saturating_sub(self.base)).min(FAR);
        self.epoch + after
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

pub(super) const MICROS_PER_SECOND: Time = 1_000_000;

pub(super) fn micros(d: Duration) -> Time {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Whole seconds of `d`, as beanstalkd stores delays and TTRs.
pub(super) fn seconds(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}
