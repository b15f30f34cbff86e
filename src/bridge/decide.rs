//! The bridge's decisions, as pure functions of what the index holds for a
//! key, what Redis answered, why the key is looked at, and the time: no
//! locks, no I/O, no clock. [`crate::bridge::registry`] takes the locks,
//! asks Redis, calls these, and carries the plans out in its pipelines, in
//! the order that makes them safe. Each function's arms are in the order
//! they are tried; `tests` has one row per arm.
//!
//! * [`sync`]: after an event on a key, or when SCAN lists it.
//! * [`claim`] then [`settle`]: a timer came due; first from the index
//!   alone (is it still the key's timer?), then from Redis's answer.
//! * [`echo`]: an `expired` event that needs no Redis read at all (the
//!   index knows the key).
//! * [`timer_due`]: when a timer comes due (at the deadline, or a
//!   `--precheck-ms` lead before it for a last look).
//! * [`is_timer_of`]: whether a timer job is the one the index names.

use super::body::Timer;
use super::expiry::{Expiry, Reading};
use super::index::{KeyEntry, CANCELLED};
use super::keys::KeyRef;
use super::work::Hint;

/// A key gone this close to its deadline counts as expired, not deleted
/// (Redis's clock may run slightly ahead of ours).
pub const EXPIRY_SLACK_MS: i64 = 50;
/// When Redis still has a key at its deadline, look again this many ms
/// later (rounded up to a second for a classic beanstalkd).
pub const RECHECK_MS: i64 = 2;
/// Timers are armed this long after the deadline: Redis counts a key as
/// expired only once its clock is past the deadline's millisecond, so a
/// timer firing within that millisecond found the key still there and
/// looked again [`RECHECK_MS`] later (measured: a fifth of all keys at 2k
/// expiries a second, a tenth at 10k).
pub const FIRE_AFTER_MS: i64 = 1;

/// What a sync does to one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    /// Nothing to change.
    Keep,
    /// The key lives on without a TTL after its expiry was delivered:
    /// forget the delivered mark.
    Unmark,
    /// Put a timer for `at`, record it, then delete `old`'s timer.
    Arm { at: i64, old: Option<KeyEntry> },
    /// The index is right about the expiry; check that the server still
    /// holds `cur`'s timer, and if not, arm one for `at`.
    Verify { at: i64, cur: KeyEntry },
    /// Delete `cur`'s timer: no TTL any more, or gone before its deadline.
    Cancel(KeyEntry),
}

/// Do two readings of an expiry agree, as far as `err_ms` (the error of
/// the later one, see [`Reading`]) can tell? Exact with `PEXPIRETIME`.
fn same(a: i64, b: i64, err_ms: i64) -> bool {
    a.abs_diff(b) <= err_ms.max(0) as u64
}

/// Brings a key's timer in line with `read`, what Redis says now (read
/// under the key's lock, before `now_ms`). An expiry within the reading's
/// error of the index's is the same one (a `PTTL` reading moves with the
/// round trip): the timer stays, and fires no earlier than Redis says.
pub fn sync(hint: Hint, current: Option<KeyEntry>, read: Reading, now_ms: i64) -> Sync {
    let Reading { expiry, err_ms } = read;
    match (expiry, current) {
        (Expiry::Gone, Some(cur)) if cur.is_delivered() => Sync::Keep,
        (Expiry::Persistent, Some(cur)) if cur.is_delivered() => Sync::Unmark,
        // Redis said `expired` for a key without a timer (its events came
        // after it expired): deliver it now rather than lose it.
        (Expiry::Gone, None) if hint.expired => Sync::Arm {
            at: now_ms,
            old: None,
        },
        (Expiry::At(at), Some(cur))
            if cur.expire_at_ms >= 0 && same(cur.expire_at_ms, at, err_ms) =>
        {
            if hint.verify {
                Sync::Verify {
                    at: cur.expire_at_ms,
                    cur,
                }
            } else {
                Sync::Keep
            }
        }
        (Expiry::At(at), old) => Sync::Arm { at, old },
        // Gone at or after its deadline: expired, left to its timer (unless
        // Redis said a command took it away).
        (Expiry::Gone, Some(cur))
            if hint.expired || !hint.removed && cur.expire_at_ms - EXPIRY_SLACK_MS <= now_ms =>
        {
            Sync::Keep
        }
        (Expiry::Gone | Expiry::Persistent, Some(cur)) if cur.expire_at_ms != CANCELLED => {
            Sync::Cancel(cur)
        }
        _ => Sync::Keep,
    }
}

/// Only Redis's `expired` event asked, and the index knows the key: there
/// is nothing to read. Its expiry was delivered (the event is the echo of
/// that delivery: the bridge's own check at the deadline made Redis delete
/// the key), or its timer is due and firing (the echo arrives before the
/// fire is done: every expiry, read once more, would cost a Redis command
/// each), or it was cancelled; Redis's `Gone` would leave each of them as
/// it is ([`sync`]), and a key written again after it expired has events
/// of its own, queued behind this one, which do read Redis. Only a key
/// the index does not know is read: it expired before the bridge saw it.
/// `current` is only looked up when the hint leaves the question open.
pub fn echo(hint: Hint, current: impl FnOnce() -> Option<KeyEntry>) -> bool {
    hint.expired && !hint.changed && !hint.verify && current().is_some()
}

/// What the index says about a due timer, before Redis is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The key's expiry was delivered, by this timer (its delete was lost)
    /// or a newer one: delete it, unfired.
    Delivered,
    /// A newer timer replaced it: delete it, unfired.
    Superseded,
    /// Its key was cancelled while a firing worker held it: delete it and
    /// forget the key.
    Tombstone,
    /// Newer than the timer the index names (a crash lost the index's last
    /// write): record it as the key's, delete `drop`, then ask Redis.
    Adopt { adopted: KeyEntry, drop: u64 },
    /// Ask Redis, with the key's current entry.
    Ask(Option<KeyEntry>),
}

/// Decides what a due timer `id` (for an expiry at `expire_at_ms`) is,
/// from the key's entry. Job ids only grow, and a new timer is put before
/// it is recorded, so an id below the index's is superseded and one above
/// it was put just before a crash. A delivered mark names the timer that
/// delivered: that one and older ones are duplicates.
pub fn claim(current: Option<KeyEntry>, id: u64, expire_at_ms: i64) -> Claim {
    match current {
        Some(cur) if cur.is_delivered() && cur.timer >= id => Claim::Delivered,
        Some(cur) if cur.timer > id => Claim::Superseded,
        Some(cur) if cur.timer == id && cur.expire_at_ms == CANCELLED => Claim::Tombstone,
        Some(cur) if cur.timer < id => Claim::Adopt {
            adopted: KeyEntry {
                expire_at_ms,
                timer: id,
            },
            drop: cur.timer,
        },
        current => Claim::Ask(current),
    }
}

/// What firing does with a due timer Redis was asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// The key is gone at or after its deadline: put the delivery, then
    /// delete the timer, then mark the key delivered.
    Deliver,
    /// No expiry will come: the key lives on without a TTL, or it was gone
    /// before its deadline (deleted: seen by a `--precheck-ms` look).
    /// Delete the timer, and forget the key if it is indexed.
    Drop { unindex: bool },
    /// Not due yet: the key is still there (at its deadline: Redis's clock
    /// behind ours; before it: a precheck), or gone within the slack just
    /// before its deadline (an expiry, but never delivered early). Release
    /// the timer to come back at `until_ms`.
    Release { until_ms: i64 },
    /// The expiry moved to `at`: arm a timer for it (replacing the key's
    /// current entry), delete this one.
    Rearm { at: i64 },
}

/// Decides a due timer for an expiry at `expire_at_ms` from `read`, what
/// Redis says now, and the key's entry after [`claim`]. An expiry within
/// the reading's error of the timer's is the timer's own.
pub fn settle(current: Option<KeyEntry>, read: Reading, expire_at_ms: i64, now_ms: i64) -> Settle {
    let Reading { expiry, err_ms } = read;
    let drop = Settle::Drop {
        unindex: current.is_some(),
    };
    let later = |at: i64| Settle::Release {
        until_ms: (at.max(expire_at_ms) + FIRE_AFTER_MS).max(now_ms + RECHECK_MS),
    };
    match expiry {
        Expiry::Gone if now_ms >= expire_at_ms => Settle::Deliver,
        Expiry::Gone if now_ms < expire_at_ms - EXPIRY_SLACK_MS => drop,
        Expiry::Gone => later(expire_at_ms),
        Expiry::Persistent => drop,
        Expiry::At(at) if same(at, expire_at_ms, err_ms) => later(at),
        Expiry::At(at) => Settle::Rearm { at },
    }
}

/// When a timer for an expiry at `at`, armed at `now_ms`, comes due: just
/// after the deadline, or `precheck_ms` before it for a last look (if that
/// is still ahead; a key found gone then was deleted, see [`settle`]).
pub fn timer_due(at: i64, now_ms: i64, precheck_ms: i64) -> i64 {
    let look = at - precheck_ms;
    if precheck_ms > 0 && look > now_ms {
        look
    } else {
        at + FIRE_AFTER_MS
    }
}

/// Is `timer` the timer `cur` names for `key`?
pub fn is_timer_of(timer: &Timer, key: KeyRef<'_>, cur: KeyEntry) -> bool {
    timer.key_ref() == key && timer.expire_at_ms == cur.expire_at_ms
}

#[cfg(test)]
mod tests;
