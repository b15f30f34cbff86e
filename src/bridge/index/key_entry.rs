//! An index entry: where a key's pending expiry lives, or that it was
//! cancelled or delivered (shared by the map, its log and the bridge).

/// `expire_at_ms` of a tombstone.
pub const CANCELLED: i64 = -1;
/// How long a delivered mark is kept: far longer than an event can lag.
pub const MARK_KEEP_MS: i64 = 10 * 60 * 1000;

/// Where a key's pending expiry lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyEntry {
    pub expire_at_ms: i64,
    pub timer: u64,
}

impl KeyEntry {
    /// The mark of an expiry delivered at `at_ms` by `timer`: the delivery
    /// time, negated, as the expiry, and the timer that delivered it, so a
    /// timer of the key no newer than that one (the same timer back after
    /// a lost delete, or an older one a lost delete left behind) is known
    /// for a duplicate. Marks of earlier versions name no timer (0).
    pub fn delivered(at_ms: i64, timer: u64) -> KeyEntry {
        KeyEntry {
            expire_at_ms: -at_ms.max(2),
            timer,
        }
    }

    pub fn is_delivered(self) -> bool {
        self.expire_at_ms < CANCELLED
    }
}
