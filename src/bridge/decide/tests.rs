//! Every arm of the bridge's decisions, as tables with explicit times:
//! each row is one case (what the index holds, what Redis answered, why
//! the key is looked at, the time) and the one plan it must give.

use super::*;

/// The time of every row: a key's deadline is given relative to it.
const NOW: i64 = 1_700_000_000_000;

fn entry(expire_at_ms: i64, timer: u64) -> KeyEntry {
    KeyEntry {
        expire_at_ms,
        timer,
    }
}

const EVENT: Hint = Hint {
    expired: false,
    verify: false,
    changed: true,
    removed: false,
};
/// `rename_from` or `move_from`.
const REMOVED: Hint = Hint {
    expired: false,
    verify: false,
    changed: true,
    removed: true,
};
const EXPIRED: Hint = Hint {
    expired: true,
    verify: false,
    changed: false,
    removed: false,
};
const VERIFY: Hint = Hint {
    expired: false,
    verify: true,
    changed: true,
    removed: false,
};

#[test]
fn sync_has_one_plan_per_case() {
    let mark = KeyEntry::delivered(NOW - 1_000, 6);
    let pending = entry(NOW + 5_000, 7);
    let tomb = entry(CANCELLED, 7);
    let due_soon = entry(NOW + EXPIRY_SLACK_MS, 7);
    let past_slack = entry(NOW + EXPIRY_SLACK_MS + 1, 7);
    use Expiry::{At, Gone, Persistent};
    /// (case, why, the key's entry, Redis's answer, plan)
    type Row = (&'static str, Hint, Option<KeyEntry>, Expiry, Sync);
    #[rustfmt::skip]
    let rows: &[Row] = &[
        ("delivered, gone: the echo of the delivery", EVENT, Some(mark), Gone, Sync::Keep),
        ("delivered, now without a TTL", EVENT, Some(mark), Persistent, Sync::Unmark),
        ("delivered, written again with a TTL", EVENT, Some(mark), At(NOW + 9), Sync::Arm { at: NOW + 9, old: Some(mark) }),
        ("expired before the bridge saw it", EXPIRED, None, Gone, Sync::Arm { at: NOW, old: None }),
        ("gone, never seen, no expired event", EVENT, None, Gone, Sync::Keep),
        ("same expiry", EVENT, Some(pending), At(NOW + 5_000), Sync::Keep),
        ("same expiry, verify the timer", VERIFY, Some(pending), At(NOW + 5_000), Sync::Verify { at: NOW + 5_000, cur: pending }),
        ("new key with a TTL", EVENT, None, At(NOW + 300), Sync::Arm { at: NOW + 300, old: None }),
        ("TTL moved", EVENT, Some(pending), At(NOW + 8_000), Sync::Arm { at: NOW + 8_000, old: Some(pending) }),
        ("TTL set again after a cancel in flight", EVENT, Some(tomb), At(NOW + 8_000), Sync::Arm { at: NOW + 8_000, old: Some(tomb) }),
        ("gone with an expired event", EXPIRED, Some(pending), Gone, Sync::Keep),
        ("gone within the slack of its deadline", EVENT, Some(due_soon), Gone, Sync::Keep),
        ("gone after its deadline", EVENT, Some(entry(NOW - 10, 7)), Gone, Sync::Keep),
        ("renamed away, read within the slack: taken away", REMOVED, Some(due_soon), Gone, Sync::Cancel(due_soon)),
        ("renamed away, read after its deadline: taken away", REMOVED, Some(entry(NOW - 10, 7)), Gone, Sync::Cancel(entry(NOW - 10, 7))),
        ("renamed away, then written and expired again: expired", REMOVED.merge(EXPIRED), Some(due_soon), Gone, Sync::Keep),
        ("gone just before the slack: deleted", EVENT, Some(past_slack), Gone, Sync::Cancel(past_slack)),
        ("gone well before its deadline: deleted", EVENT, Some(pending), Gone, Sync::Cancel(pending)),
        ("TTL cleared (PERSIST, plain SET)", EVENT, Some(pending), Persistent, Sync::Cancel(pending)),
        ("TTL cleared after its deadline too", EVENT, Some(entry(NOW - 10, 7)), Persistent, Sync::Cancel(entry(NOW - 10, 7))),
        ("cancelled already, gone", EVENT, Some(tomb), Gone, Sync::Keep),
        ("cancelled already, no TTL", EVENT, Some(tomb), Persistent, Sync::Keep),
        ("no TTL, never seen", EVENT, None, Persistent, Sync::Keep),
    ];
    for &(case, hint, current, expiry, want) in rows {
        assert_eq!(sync(hint, current, expiry.into(), NOW), want, "{case}");
    }
}

#[test]
fn only_a_bare_expired_event_of_a_known_key_is_an_echo() {
    let mark = Some(KeyEntry::delivered(NOW, 6));
    let pending = Some(entry(NOW + 5, 7));
    let merged = EXPIRED.merge(EVENT);
    #[rustfmt::skip]
    let rows: &[(&str, Hint, Option<KeyEntry>, bool)] = &[
        ("expired, delivered", EXPIRED, mark, true),
        ("expired, its timer firing", EXPIRED, Some(entry(NOW - 1, 7)), true),
        ("expired, pending (Redis ahead of the index)", EXPIRED, pending, true),
        ("expired, cancelled in flight", EXPIRED, Some(entry(CANCELLED, 7)), true),
        ("expired, unknown: read Redis", EXPIRED, None, false),
        ("expired and another event", merged, mark, false),
        ("expired and a verifying scan", EXPIRED.merge(VERIFY), mark, false),
        ("another event", EVENT, mark, false),
    ];
    for &(case, hint, current, want) in rows {
        assert_eq!(echo(hint, || current), want, "{case}");
    }
    // The index is not even read when the hint settles it.
    assert!(!echo(EVENT, || panic!("looked up")));
}

#[test]
fn claim_tells_current_timers_from_superseded_and_lost_writes() {
    let at = NOW + 100;
    #[rustfmt::skip]
    let rows: &[(&str, Option<KeyEntry>, u64, Claim)] = &[
        ("a newer timer replaced it", Some(entry(at, 9)), 8, Claim::Superseded),
        ("cancelled while reserved", Some(entry(CANCELLED, 8)), 8, Claim::Tombstone),
        ("a tombstone of a newer timer", Some(entry(CANCELLED, 9)), 8, Claim::Superseded),
        ("newer than the index", Some(entry(at - 50, 7)), 8, Claim::Adopt { adopted: entry(at, 8), drop: 7 }),
        ("delivered by this very timer (its delete was lost)", Some(KeyEntry::delivered(NOW, 8)), 8, Claim::Delivered),
        ("older than the timer that delivered", Some(KeyEntry::delivered(NOW, 9)), 8, Claim::Delivered),
        ("newer than a delivered mark", Some(KeyEntry::delivered(NOW, 7)), 8, Claim::Adopt { adopted: entry(at, 8), drop: 7 }),
        ("newer than a mark of an earlier version", Some(KeyEntry::delivered(NOW, 0)), 8, Claim::Adopt { adopted: entry(at, 8), drop: 0 }),
        ("the key's timer", Some(entry(at, 8)), 8, Claim::Ask(Some(entry(at, 8)))),
        ("not indexed at all", None, 8, Claim::Ask(None)),
    ];
    for &(case, current, id, want) in rows {
        assert_eq!(claim(current, id, at), want, "{case}");
    }
}

#[test]
fn settle_delivers_only_what_redis_no_longer_has() {
    let at = NOW - 1;
    let cur = Some(entry(at, 8));
    use Expiry::{At, Gone, Persistent};
    /// (case, the key's entry, Redis's answer, the timer's expiry, now, plan)
    type Row = (&'static str, Option<KeyEntry>, Expiry, i64, i64, Settle);
    #[rustfmt::skip]
    let rows: &[Row] = &[
        ("gone", cur, Gone, at, NOW, Settle::Deliver),
        ("gone, not indexed", None, Gone, at, NOW, Settle::Deliver),
        ("gone at its very deadline", cur, Gone, NOW, NOW, Settle::Deliver),
        ("gone within the slack before it: not early", cur, Gone, NOW + EXPIRY_SLACK_MS, NOW, Settle::Release { until_ms: NOW + EXPIRY_SLACK_MS + FIRE_AFTER_MS }),
        ("gone well before it: deleted (a precheck)", cur, Gone, NOW + EXPIRY_SLACK_MS + 1, NOW, Settle::Drop { unindex: true }),
        ("gone before it, not indexed", None, Gone, NOW + 500, NOW, Settle::Drop { unindex: false }),
        ("TTL cleared", cur, Persistent, at, NOW, Settle::Drop { unindex: true }),
        ("TTL cleared, not indexed", None, Persistent, at, NOW, Settle::Drop { unindex: false }),
        ("still there at its deadline", cur, At(at), at, NOW, Settle::Release { until_ms: NOW + RECHECK_MS }),
        ("still there, deadline ahead (a precheck)", cur, At(NOW + 10), NOW + 10, NOW, Settle::Release { until_ms: NOW + 10 + FIRE_AFTER_MS }),
        ("expiry moved", cur, At(NOW + 5_000), at, NOW, Settle::Rearm { at: NOW + 5_000 }),
    ];
    for &(case, current, expiry, expire_at_ms, now, want) in rows {
        assert_eq!(
            settle(current, expiry.into(), expire_at_ms, now),
            want,
            "{case}"
        );
    }
}

#[test]
fn ttl_readings_agree_within_their_error() {
    let pending = entry(NOW + 5_000, 7);
    let read = |at, err_ms| Reading {
        expiry: Expiry::At(at),
        err_ms,
    };
    #[rustfmt::skip]
    let rows: &[(&str, Hint, Reading, Sync)] = &[
        ("1 ms later, error 1: the same expiry", EVENT, read(NOW + 5_001, 1), Sync::Keep),
        ("2 ms earlier, error 2: the same expiry", EVENT, read(NOW + 4_998, 2), Sync::Keep),
        ("verified against the index's deadline", VERIFY, read(NOW + 5_001, 1), Sync::Verify { at: NOW + 5_000, cur: pending }),
        ("2 ms later, error 1: moved", EVENT, read(NOW + 5_002, 1), Sync::Arm { at: NOW + 5_002, old: Some(pending) }),
    ];
    for &(case, hint, reading, want) in rows {
        assert_eq!(sync(hint, Some(pending), reading, NOW), want, "{case}");
    }
    // A tombstone or a delivered mark is never "the same expiry".
    let tomb = entry(CANCELLED, 7);
    let plan = sync(EVENT, Some(tomb), read(1, 5), NOW);
    assert_eq!(
        plan,
        Sync::Arm {
            at: 1,
            old: Some(tomb)
        }
    );
    // At the deadline, a reading within its error is the timer's own
    // expiry: looked at again after the later of the two, never early.
    let at = NOW - 1;
    let cur = Some(entry(at, 8));
    let still = settle(cur, read(at + 2, 3), at, NOW);
    assert_eq!(
        still,
        Settle::Release {
            until_ms: at + 2 + FIRE_AFTER_MS
        }
    );
    assert_eq!(
        settle(cur, read(at + 4, 3), at, NOW),
        Settle::Rearm { at: at + 4 }
    );
}

#[test]
fn timers_come_due_after_the_deadline_or_a_precheck_lead_before_it() {
    #[rustfmt::skip]
    let rows: &[(&str, i64, i64, i64)] = &[
        ("no precheck", NOW + 5_000, 0, NOW + 5_000 + FIRE_AFTER_MS),
        ("a precheck ahead", NOW + 5_000, 1_000, NOW + 4_000),
        ("the precheck would be now", NOW + 1_000, 1_000, NOW + 1_000 + FIRE_AFTER_MS),
        ("the precheck has passed", NOW + 500, 1_000, NOW + 500 + FIRE_AFTER_MS),
        ("the deadline has passed", NOW - 10, 1_000, NOW - 10 + FIRE_AFTER_MS),
    ];
    for &(case, at, precheck, want) in rows {
        assert_eq!(timer_due(at, NOW, precheck), want, "{case}");
    }
}

#[test]
fn timers_match_by_node_key_and_expiry() {
    let timer = Timer {
        node: 1,
        db: 0,
        key: b"k".to_vec(),
        expire_at_ms: NOW,
        value: None,
    };
    assert!(is_timer_of(&timer, KeyRef::new(1, b"k"), entry(NOW, 3)));
    assert!(!is_timer_of(&timer, KeyRef::new(0, b"k"), entry(NOW, 3)));
    assert!(!is_timer_of(&timer, KeyRef::new(1, b"j"), entry(NOW, 3)));
    assert!(!is_timer_of(
        &timer,
        KeyRef::new(1, b"k"),
        entry(NOW + 1, 3)
    ));
}
