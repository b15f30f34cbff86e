//! The commands one by one: put and reserve, delete, release, bury,
//! touch, kick and peek.

use super::*;

#[test]
fn put_then_reserve_hands_out_the_body() {
    let mut e = engine();
    let c = e.connect();
    assert_eq!(
        reply(&mut e, c, put_cmd(0, Duration::ZERO, 10, "hello"), 0),
        R::Inserted(1)
    );
    assert_eq!(
        reply(&mut e, c, C::Reserve, 0),
        R::Reserved {
            id: 1,
            body: Bytes::from_static(b"hello")
        }
    );
}

#[test]
fn reserve_order_is_priority_then_id() {
    let mut e = engine();
    let c = e.connect();
    let a = put_ready(&mut e, c, 5, 0);
    let b = put_ready(&mut e, c, 1, 0);
    let d = put_ready(&mut e, c, 5, 0);
    let f = put_ready(&mut e, c, 1, 0);
    let g = put_ready(&mut e, c, u32::MAX, 0);
    let h = put_ready(&mut e, c, 0, 0);
    let order: Vec<_> = (0..6).map(|_| reserve(&mut e, c, 0)).collect();
    assert_eq!(order, [h, b, f, a, d, g]);
}

#[test]
fn ids_start_at_one_and_are_never_reused() {
    let mut e = engine();
    let c = e.connect();
    assert_eq!(put_ready(&mut e, c, 0, 0), 1);
    assert_eq!(reply(&mut e, c, C::Delete(1), 0), R::Deleted);
    assert_eq!(put_ready(&mut e, c, 0, 0), 2);
}

#[test]
fn ttr_below_one_second_becomes_one() {
    let mut e = engine();
    let c = e.connect();
    let id = put(&mut e, c, 0, Duration::ZERO, 0, 0);
    assert_eq!(job_stat(&mut e, c, id, "ttr", 0), "1");
}

#[test]
fn quit_closes() {
    let mut e = engine();
    let c = e.connect();
    assert_eq!(e.execute(c, C::Quit, 0), Outcome::Close);
}

#[test]
fn unknown_connection_is_closed() {
    let mut e = engine();
    assert_eq!(e.execute(42, C::Stats, 0), Outcome::Close);
}

// delete / release / bury / touch.

#[test]
fn delete_rules() {
    let mut e = engine();
    let (a, b) = (e.connect(), e.connect());
    let ready = put_ready(&mut e, a, 0, 0);
    let delayed = put(&mut e, a, 0, secs(10), 60, 0);
    let held = put_ready(&mut e, a, 1, 0);
    let buried = put_ready(&mut e, a, 2, 0);
    assert_eq!(reserve(&mut e, a, 0), ready);
    assert_eq!(reserve(&mut e, a, 0), held);
    assert_eq!(reserve(&mut e, a, 0), buried);
    assert_eq!(
        reply(&mut e, a, C::Bury { id: buried, pri: 2 }, 0),
        R::Buried
    );
    assert_eq!(
        reply(
            &mut e,
            a,
            C::Release {
                id: ready,
                pri: 0,
                delay: Duration::ZERO
            },
            0
        ),
        R::Released
    );

    assert_eq!(
        reply(&mut e, b, C::Delete(held), 0),
        R::NotFound,
        "reserved by another"
    );
    assert_eq!(reply(&mut e, a, C::Delete(held), 0), R::Deleted);
    assert_eq!(reply(&mut e, b, C::Delete(ready), 0), R::Deleted);
    assert_eq!(reply(&mut e, b, C::Delete(delayed), 0), R::Deleted);
    assert_eq!(reply(&mut e, b, C::Delete(buried), 0), R::Deleted);
    assert_eq!(reply(&mut e, b, C::Delete(buried), 0), R::NotFound);
    assert_eq!(reply(&mut e, b, C::Delete(999), 0), R::NotFound);
    assert_eq!(tube_stat(&mut e, a, "default", "cmd-delete", 0), "4");
    let stats = yaml(reply(&mut e, a, C::Stats, 0));
    for key in [
        "current-jobs-ready",
        "current-jobs-reserved",
        "current-jobs-delayed",
        "current-jobs-buried",
    ] {
        assert_eq!(field(&stats, key), "0", "{key}");
    }
}

#[test]
fn release_bury_touch_need_the_owner() {
    let mut e = engine();
    let (a, b) = (e.connect(), e.connect());
    let id = put_ready(&mut e, a, 0, 0);
    assert_eq!(
        reply(
            &mut e,
            a,
            C::Release {
                id,
                pri: 0,
                delay: Duration::ZERO
            },
            0
        ),
        R::NotFound,
        "ready"
    );
    assert_eq!(reply(&mut e, a, C::Bury { id, pri: 0 }, 0), R::NotFound);
    assert_eq!(reply(&mut e, a, C::Touch(id), 0), R::NotFound);
    reserve(&mut e, a, 0);
    assert_eq!(
        reply(
            &mut e,
            b,
            C::Release {
                id,
                pri: 0,
                delay: Duration::ZERO
            },
            0
        ),
        R::NotFound
    );
    assert_eq!(reply(&mut e, b, C::Bury { id, pri: 0 }, 0), R::NotFound);
    assert_eq!(reply(&mut e, b, C::Touch(id), 0), R::NotFound);
    assert_eq!(reply(&mut e, a, C::Touch(id), 0), R::Touched);
    assert_eq!(reply(&mut e, a, C::Touch(999), 0), R::NotFound);
    assert_eq!(
        reply(
            &mut e,
            a,
            C::Release {
                id,
                pri: 7,
                delay: Duration::ZERO
            },
            0
        ),
        R::Released
    );
    assert_eq!(job_stat(&mut e, a, id, "pri", 0), "7");
    assert_eq!(job_stat(&mut e, a, id, "releases", 0), "1");
    assert_eq!(
        job_stat(&mut e, a, id, "reserves", 0),
        "1",
        "touch does not count as a reserve"
    );
}

#[test]
fn release_with_delay_is_ready_at_exactly_the_deadline() {
    let mut e = engine();
    let c = e.connect();
    let id = put_ready(&mut e, c, 0, 0);
    reserve(&mut e, c, 0);
    assert_eq!(
        reply(
            &mut e,
            c,
            C::Release {
                id,
                pri: 3,
                delay: secs(1)
            },
            5 * S
        ),
        R::Released
    );
    assert_eq!(job_stat(&mut e, c, id, "state", 5 * S), "delayed");
    assert_eq!(job_stat(&mut e, c, id, "delay", 5 * S), "1");
    assert_eq!(e.next_deadline(), Some(6 * S));
    assert_eq!(
        reply(&mut e, c, C::ReserveWithTimeout(Duration::ZERO), 6 * S - 1),
        R::TimedOut
    );
    assert_eq!(reserve(&mut e, c, 6 * S), id);
}

#[test]
fn bury_sets_priority_and_counts() {
    let mut e = engine();
    let c = e.connect();
    let id = put_ready(&mut e, c, 0, 0);
    reserve(&mut e, c, 0);
    assert_eq!(reply(&mut e, c, C::Bury { id, pri: 9 }, 0), R::Buried);
    let doc = yaml(reply(&mut e, c, C::StatsJob(id), 0));
    assert_eq!(field(&doc, "state"), "buried");
    assert_eq!(field(&doc, "pri"), "9");
    assert_eq!(field(&doc, "buries"), "1");
    assert_eq!(server_stat(&mut e, c, "current-jobs-buried", 0), "1");
    assert_eq!(
        tube_stat(&mut e, c, "default", "current-jobs-buried", 0),
        "1"
    );
}

#[test]
fn touch_pushes_the_deadline_back() {
    let mut e = engine();
    let c = e.connect();
    let id = put(&mut e, c, 0, Duration::ZERO, 10, 0);
    reserve(&mut e, c, 0);
    assert_eq!(e.next_deadline(), Some(10 * S));
    assert_eq!(reply(&mut e, c, C::Touch(id), 4 * S), R::Touched);
    assert_eq!(e.next_deadline(), Some(14 * S));
    assert_eq!(job_stat(&mut e, c, id, "time-left", 4 * S), "10");
    e.tick(10 * S);
    assert_eq!(job_stat(&mut e, c, id, "state", 10 * S), "reserved");
    e.tick(14 * S);
    assert_eq!(job_stat(&mut e, c, id, "state", 14 * S), "ready");
}

// kick.

#[test]
fn kick_takes_buried_jobs_in_bury_order_first() {
    let mut e = engine();
    let c = e.connect();
    let ids: Vec<_> = (0..3).map(|_| put_ready(&mut e, c, 0, 0)).collect();
    let delayed = put(&mut e, c, 0, secs(5), 60, 0);
    for _ in 0..3 {
        reserve(&mut e, c, 0);
    }
    for &id in [ids[2], ids[0], ids[1]].iter() {
        assert_eq!(reply(&mut e, c, C::Bury { id, pri: 0 }, 0), R::Buried);
    }
    assert_eq!(
        reply(&mut e, c, C::PeekBuried, 0),
        R::Found {
            id: ids[2],
            body: Bytes::from_static(b"body")
        }
    );
    assert_eq!(reply(&mut e, c, C::Kick(2), 0), R::KickedCount(2));
    assert_eq!(job_stat(&mut e, c, ids[2], "state", 0), "ready");
    assert_eq!(job_stat(&mut e, c, ids[0], "state", 0), "ready");
    assert_eq!(job_stat(&mut e, c, ids[0], "kicks", 0), "1");
    assert_eq!(job_stat(&mut e, c, ids[1], "state", 0), "buried");
    // Buried jobs remain, so the delayed one is not kicked.
    assert_eq!(reply(&mut e, c, C::Kick(10), 0), R::KickedCount(1));
    assert_eq!(job_stat(&mut e, c, delayed, "state", 0), "delayed");
    assert_eq!(reply(&mut e, c, C::Kick(10), 0), R::KickedCount(1));
    assert_eq!(job_stat(&mut e, c, delayed, "state", 0), "ready");
    assert_eq!(reply(&mut e, c, C::Kick(10), 0), R::KickedCount(0));
    assert_eq!(e.next_deadline(), None);
}

#[test]
fn kick_takes_delayed_jobs_soonest_first() {
    let mut e = engine();
    let c = e.connect();
    let late = put(&mut e, c, 0, secs(30), 60, 0);
    let soon = put(&mut e, c, 0, secs(10), 60, 0);
    let soon2 = put(&mut e, c, 0, secs(10), 60, 0);
    assert_eq!(
        reply(&mut e, c, C::PeekDelayed, 0),
        R::Found {
            id: soon,
            body: Bytes::from_static(b"body")
        }
    );
    assert_eq!(e.next_deadline(), Some(10 * S));
    assert_eq!(reply(&mut e, c, C::Kick(2), 0), R::KickedCount(2));
    assert_eq!(job_stat(&mut e, c, soon2, "state", 0), "ready");
    assert_eq!(job_stat(&mut e, c, late, "state", 0), "delayed");
    assert_eq!(e.next_deadline(), Some(30 * S));
}

#[test]
fn kick_works_on_the_used_tube_only() {
    let mut e = engine();
    let c = e.connect();
    use_tube(&mut e, c, "other");
    let id = put(&mut e, c, 0, secs(30), 60, 0);
    use_tube(&mut e, c, "default");
    assert_eq!(reply(&mut e, c, C::Kick(5), 0), R::KickedCount(0));
    assert_eq!(job_stat(&mut e, c, id, "state", 0), "delayed");
}

#[test]
fn kick_job_moves_buried_or_delayed_jobs_only() {
    let mut e = engine();
    let c = e.connect();
    let ready = put_ready(&mut e, c, 0, 0);
    let delayed = put(&mut e, c, 0, secs(9), 60, 0);
    let held = put_ready(&mut e, c, 1, 0);
    use_tube(&mut e, c, "elsewhere");
    let buried = put_ready(&mut e, c, 2, 0);
    reply(&mut e, c, C::Watch(name("elsewhere")), 0);
    assert_eq!(reserve(&mut e, c, 0), ready);
    assert_eq!(reserve(&mut e, c, 0), held);
    assert_eq!(reserve(&mut e, c, 0), buried);
    reply(&mut e, c, C::Bury { id: buried, pri: 2 }, 0);
    reply(
        &mut e,
        c,
        C::Release {
            id: ready,
            pri: 0,
            delay: Duration::ZERO,
        },
        0,
    );
    use_tube(&mut e, c, "default");
    assert_eq!(reply(&mut e, c, C::KickJob(ready), 0), R::NotFound);
    assert_eq!(reply(&mut e, c, C::KickJob(held), 0), R::NotFound);
    assert_eq!(reply(&mut e, c, C::KickJob(999), 0), R::NotFound);
    assert_eq!(reply(&mut e, c, C::KickJob(delayed), 0), R::Kicked);
    assert_eq!(
        reply(&mut e, c, C::KickJob(buried), 0),
        R::Kicked,
        "any tube"
    );
    assert_eq!(job_stat(&mut e, c, buried, "state", 0), "ready");
    assert_eq!(job_stat(&mut e, c, delayed, "kicks", 0), "1");
}

// peek.

#[test]
fn peeks() {
    let mut e = engine();
    let c = e.connect();
    for cmd in [C::PeekReady, C::PeekDelayed, C::PeekBuried, C::Peek(1)] {
        assert_eq!(reply(&mut e, c, cmd, 0), R::NotFound);
    }
    let found = |id| R::Found {
        id,
        body: Bytes::from_static(b"body"),
    };
    let a = put_ready(&mut e, c, 9, 0);
    let b = put_ready(&mut e, c, 3, 0);
    let d = put(&mut e, c, 0, secs(3), 60, 0);
    assert_eq!(reply(&mut e, c, C::PeekReady, 0), found(b));
    assert_eq!(reply(&mut e, c, C::PeekDelayed, 0), found(d));
    assert_eq!(reply(&mut e, c, C::Peek(a), 0), found(a));
    reserve(&mut e, c, 0);
    assert_eq!(
        reply(&mut e, c, C::Peek(b), 0),
        found(b),
        "peek sees reserved jobs"
    );
    // peek-ready ignores pauses.
    reply(
        &mut e,
        c,
        C::PauseTube {
            tube: name("default"),
            delay: secs(100),
        },
        0,
    );
    assert_eq!(reply(&mut e, c, C::PeekReady, 0), found(a));
    // Other tubes are invisible to peek-ready.
    use_tube(&mut e, c, "x");
    assert_eq!(reply(&mut e, c, C::PeekReady, 0), R::NotFound);
    assert_eq!(
        reply(&mut e, c, C::Peek(a), 0),
        found(a),
        "peek <id> sees every tube"
    );
}
