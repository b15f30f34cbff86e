//! The engine's unit tests: every command against explicit clock values, so
//! timing is exact and nothing sleeps.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::{Command as C, JobId, Op, ProtocolError, Rejected, Response as R, TubeName};

use super::heap::{ByDeadline, ByPriority, SlotHeap};
use super::job::JobRow;
use super::profile::Profile;
use super::table::{JobSlot, JobTable};
use super::tube_ix::{TubeIx, DEFAULT_TUBE};
use super::{ConnId, Engine, EngineConfig, Outcome, Time};

const S: Time = 1_000_000;

fn engine() -> Engine {
    engine_with(false)
}

/// An engine at time 0 with beanstalkd's default limits, journaling or not.
pub(super) fn engine_with(journal: bool) -> Engine {
    Engine::new(
        EngineConfig {
            max_job_size: 65_535,
            binlog_max_size: 10_485_760,
            journal,
            binlog: Default::default(),
            jobs_budget: None,
        },
        0,
    )
}

pub(super) fn name(s: &str) -> TubeName {
    TubeName::new(s.as_bytes()).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub(super) fn put_cmd(pri: u32, delay: Duration, ttr: u64, body: &'static str) -> C {
    C::Put {
        pri,
        delay,
        ttr: secs(ttr),
        body: Bytes::from_static(body.as_bytes()),
        tags: None,
    }
}

pub(super) fn reply(e: &mut Engine, c: ConnId, cmd: C, now: Time) -> R {
    match e.execute(c, cmd, now) {
        Outcome::Reply(r) => r,
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn put(e: &mut Engine, c: ConnId, pri: u32, delay: Duration, ttr: u64, now: Time) -> JobId {
    match reply(e, c, put_cmd(pri, delay, ttr, "body"), now) {
        R::Inserted(id) => id,
        r => panic!("expected INSERTED, got {r:?}"),
    }
}

fn put_ready(e: &mut Engine, c: ConnId, pri: u32, now: Time) -> JobId {
    put(e, c, pri, Duration::ZERO, 60, now)
}

fn reserved(r: R) -> JobId {
    match r {
        R::Reserved { id, .. } => id,
        r => panic!("expected RESERVED, got {r:?}"),
    }
}

fn reserve(e: &mut Engine, c: ConnId, now: Time) -> JobId {
    reserved(reply(e, c, C::Reserve, now))
}

fn wakeups(e: &mut Engine) -> Vec<(ConnId, R)> {
    e.take_wakeups().collect()
}

fn woken_reserved(e: &mut Engine) -> Vec<(ConnId, JobId)> {
    wakeups(e)
        .into_iter()
        .map(|(c, r)| (c, reserved(r)))
        .collect()
}

fn yaml(r: R) -> String {
    match r {
        R::Ok(body) => String::from_utf8(body.to_vec()).unwrap(),
        r => panic!("expected OK, got {r:?}"),
    }
}

fn field(doc: &str, key: &str) -> String {
    let prefix = format!("{key}: ");
    doc.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {key} in {doc}"))
        .to_string()
}

fn server_stat(e: &mut Engine, c: ConnId, key: &str, now: Time) -> String {
    field(&yaml(reply(e, c, C::Stats, now)), key)
}

fn job_stat(e: &mut Engine, c: ConnId, id: JobId, key: &str, now: Time) -> String {
    field(&yaml(reply(e, c, C::StatsJob(id), now)), key)
}

fn tube_stat(e: &mut Engine, c: ConnId, tube: &str, key: &str, now: Time) -> String {
    field(&yaml(reply(e, c, C::StatsTube(name(tube)), now)), key)
}

fn use_tube(e: &mut Engine, c: ConnId, tube: &str) {
    assert_eq!(reply(e, c, C::Use(name(tube)), 0), R::Using(name(tube)));
}

fn watch_only(e: &mut Engine, c: ConnId, tubes: &[&str]) {
    for t in tubes {
        reply(e, c, C::Watch(name(t)), 0);
    }
    if !tubes.contains(&"default") {
        reply(e, c, C::Ignore(name("default")), 0);
    }
}

fn list(e: &mut Engine, c: ConnId, cmd: C) -> String {
    yaml(reply(e, c, cmd, 0))
}

// Basics.

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

// Reserving, waiting and timeouts.

#[test]
fn reserve_with_zero_timeout_times_out_at_once() {
    let mut e = engine();
    let c = e.connect();
    assert_eq!(
        reply(&mut e, c, C::ReserveWithTimeout(Duration::ZERO), 0),
        R::TimedOut
    );
    assert_eq!(server_stat(&mut e, c, "current-waiting", 0), "0");
    assert_eq!(server_stat(&mut e, c, "current-workers", 0), "1");
}

#[test]
fn reserve_with_timeout_times_out_at_the_deadline() {
    let mut e = engine();
    let (c, o) = (e.connect(), e.connect());
    assert_eq!(
        e.execute(c, C::ReserveWithTimeout(Duration::from_millis(250)), S),
        Outcome::Wait
    );
    assert_eq!(server_stat(&mut e, o, "current-waiting", S), "1");
    assert_eq!(tube_stat(&mut e, o, "default", "current-waiting", S), "1");
    assert_eq!(e.next_deadline(), Some(S + 250_000));
    e.tick(S + 249_999);
    assert!(wakeups(&mut e).is_empty());
    e.tick(S + 250_000);
    assert_eq!(wakeups(&mut e), [(c, R::TimedOut)]);
    assert_eq!(e.next_deadline(), None);
}

#[test]
fn a_job_arriving_at_the_timeout_moment_wins() {
    let mut e = engine();
    let (w, p) = (e.connect(), e.connect());
    put(&mut e, p, 0, secs(2), 60, 0);
    assert_eq!(
        e.execute(w, C::ReserveWithTimeout(secs(2)), 0),
        Outcome::Wait
    );
    e.tick(2 * S);
    assert_eq!(woken_reserved(&mut e), [(w, 1)]);
}

#[test]
fn plain_reserve_waits_forever() {
    let mut e = engine();
    let (w, p) = (e.connect(), e.connect());
    assert_eq!(e.execute(w, C::Reserve, 0), Outcome::Wait);
    assert_eq!(e.next_deadline(), None);
    e.tick(1_000 * S);
    assert!(wakeups(&mut e).is_empty());
    let id = put_ready(&mut e, p, 0, 1_000 * S);
    assert_eq!(woken_reserved(&mut e), [(w, id)]);
    assert_eq!(server_stat(&mut e, p, "current-waiting", 1_000 * S), "0");
}

#[test]
fn waiters_are_served_oldest_first_across_tubes() {
    let mut e = engine();
    let (a, b, c, p) = (e.connect(), e.connect(), e.connect(), e.connect());
    watch_only(&mut e, a, &["t1"]);
    watch_only(&mut e, b, &["t1", "t2"]);
    watch_only(&mut e, c, &["t2"]);
    for conn in [b, a, c] {
        assert_eq!(e.execute(conn, C::Reserve, 0), Outcome::Wait);
    }
    assert_eq!(tube_stat(&mut e, p, "t1", "current-waiting", 0), "2");
    use_tube(&mut e, p, "t2");
    let j1 = put_ready(&mut e, p, 0, 0);
    assert_eq!(woken_reserved(&mut e), [(b, j1)]);
    assert_eq!(tube_stat(&mut e, p, "t1", "current-waiting", 0), "1");
    let j2 = put_ready(&mut e, p, 0, 0);
    assert_eq!(woken_reserved(&mut e), [(c, j2)]);
    use_tube(&mut e, p, "t1");
    let j3 = put_ready(&mut e, p, 0, 0);
    assert_eq!(woken_reserved(&mut e), [(a, j3)]);
    let j4 = put_ready(&mut e, p, 0, 0);
    assert!(wakeups(&mut e).is_empty());
    assert_eq!(reserve(&mut e, b, 0), j4);
}

#[test]
fn reserve_picks_the_best_job_among_watched_tubes() {
    let mut e = engine();
    let c = e.connect();
    use_tube(&mut e, c, "a");
    put_ready(&mut e, c, 5, 0);
    use_tube(&mut e, c, "b");
    let best = put_ready(&mut e, c, 2, 0);
    use_tube(&mut e, c, "c");
    put_ready(&mut e, c, 0, 0);
    watch_only(&mut e, c, &["a", "b"]);
    assert_eq!(reserve(&mut e, c, 0), best);
}

#[test]
fn every_way_a_job_becomes_ready_wakes_a_waiter() {
    let mut e = engine();
    let (w, p) = (e.connect(), e.connect());
    let wait = |e: &mut Engine, now| assert_eq!(e.execute(w, C::Reserve, now), Outcome::Wait);

    // Delay expiry.
    let id = put(&mut e, p, 0, secs(1), 60, 0);
    wait(&mut e, 0);
    e.tick(S);
    assert_eq!(woken_reserved(&mut e), [(w, id)]);
    // Release by another holder.
    let id2 = put_ready(&mut e, p, 0, S);
    assert_eq!(reserve(&mut e, p, S), id2);
    wait(&mut e, S);
    reply(
        &mut e,
        p,
        C::Release {
            id: id2,
            pri: 0,
            delay: Duration::ZERO,
        },
        S,
    );
    assert_eq!(woken_reserved(&mut e), [(w, id2)]);
    // Kick.
    let id3 = put_ready(&mut e, p, 0, S);
    assert_eq!(reserve(&mut e, p, S), id3);
    reply(&mut e, p, C::Bury { id: id3, pri: 0 }, S);
    wait(&mut e, S);
    reply(&mut e, p, C::Kick(1), S);
    assert_eq!(woken_reserved(&mut e), [(w, id3)]);
    // TTR expiry of another holder.
    let id4 = put(&mut e, p, 0, Duration::ZERO, 5, S);
    assert_eq!(reserve(&mut e, p, S), id4);
    wait(&mut e, S);
    e.tick(6 * S);
    assert_eq!(woken_reserved(&mut e), [(w, id4)]);
    // The holder disconnecting.
    let id5 = put_ready(&mut e, p, 0, 6 * S);
    assert_eq!(reserve(&mut e, p, 6 * S), id5);
    wait(&mut e, 6 * S);
    e.disconnect(p, 6 * S);
    assert_eq!(woken_reserved(&mut e), [(w, id5)]);
}

#[test]
fn timers_fire_in_deadline_order_across_tubes() {
    let mut e = engine();
    let (w, p) = (e.connect(), e.connect());
    use_tube(&mut e, p, "a");
    put(&mut e, p, 0, secs(2), 60, 0);
    use_tube(&mut e, p, "b");
    let first = put(&mut e, p, 0, secs(1), 60, 0);
    watch_only(&mut e, w, &["a", "b"]);
    assert_eq!(e.execute(w, C::Reserve, 0), Outcome::Wait);
    e.tick(3 * S);
    assert_eq!(woken_reserved(&mut e), [(w, first)]);
}

#[test]
fn ttr_expires_even_when_the_owner_is_silent() {
    let mut e = engine();
    let (c, o) = (e.connect(), e.connect());
    let id = put(&mut e, c, 0, Duration::ZERO, 2, 0);
    assert_eq!(reserve(&mut e, c, 0), id);
    assert_eq!(server_stat(&mut e, o, "current-jobs-reserved", 0), "1");
    assert_eq!(e.next_deadline(), Some(2 * S));
    e.tick(2 * S - 1);
    assert_eq!(job_stat(&mut e, o, id, "state", 2 * S - 1), "reserved");
    e.tick(2 * S);
    let doc = yaml(reply(&mut e, o, C::StatsJob(id), 2 * S));
    assert_eq!(field(&doc, "state"), "ready");
    assert_eq!(field(&doc, "timeouts"), "1");
    assert_eq!(server_stat(&mut e, o, "job-timeouts", 2 * S), "1");
    assert_eq!(server_stat(&mut e, o, "current-jobs-reserved", 2 * S), "0");
    assert_eq!(
        reply(&mut e, c, C::Delete(id), 2 * S),
        R::Deleted,
        "anyone may delete it now"
    );
}

#[test]
fn deadline_soon_at_once_when_nothing_is_ready() {
    let mut e = engine();
    let c = e.connect();
    let id = put(&mut e, c, 0, Duration::ZERO, 3, 0);
    reserve(&mut e, c, 0);
    assert_eq!(
        e.execute(c, C::ReserveWithTimeout(secs(10)), 2 * S - 1),
        Outcome::Wait
    );
    assert_eq!(
        reply(&mut e, c, C::ReserveWithTimeout(Duration::ZERO), 2 * S),
        R::DeadlineSoon
    );
    assert_eq!(reply(&mut e, c, C::Reserve, 2 * S), R::DeadlineSoon);
    // With a ready job, reserve hands it out instead.
    let other = put_ready(&mut e, c, 0, 2 * S);
    assert_eq!(reserve(&mut e, c, 2 * S), other);
    assert_eq!(reply(&mut e, c, C::Touch(id), 2 * S), R::Touched);
    assert_eq!(reply(&mut e, c, C::Touch(other), 2 * S), R::Touched);
    assert_eq!(e.execute(c, C::Reserve, 2 * S), Outcome::Wait);
}

#[test]
fn deadline_soon_while_waiting() {
    let mut e = engine();
    let c = e.connect();
    put(&mut e, c, 0, Duration::ZERO, 3, 0);
    reserve(&mut e, c, 0);
    assert_eq!(e.execute(c, C::Reserve, S / 2), Outcome::Wait);
    assert_eq!(e.next_deadline(), Some(2 * S));
    e.tick(2 * S - 1);
    assert!(wakeups(&mut e).is_empty());
    e.tick(2 * S);
    assert_eq!(wakeups(&mut e), [(c, R::DeadlineSoon)]);
    assert_eq!(server_stat(&mut e, c, "current-waiting", 2 * S), "0");
    assert_eq!(
        e.next_deadline(),
        Some(3 * S),
        "the TTR itself is still armed"
    );
}

#[test]
fn deadline_soon_comes_even_when_the_only_ready_job_is_paused() {
    // beanstalkd's conn_ready counts paused tubes, so reserve waits, and the
    // margin, already passed, answers at once.
    let mut e = engine();
    let c = e.connect();
    put(&mut e, c, 0, Duration::ZERO, 1, 0);
    reserve(&mut e, c, 0);
    put_ready(&mut e, c, 0, 0);
    reply(
        &mut e,
        c,
        C::PauseTube {
            tube: name("default"),
            delay: secs(60),
        },
        0,
    );
    assert_eq!(e.execute(c, C::Reserve, 0), Outcome::Wait);
    assert_eq!(wakeups(&mut e), [(c, R::DeadlineSoon)]);
}

#[test]
fn reserve_job_takes_any_unreserved_job() {
    let mut e = engine();
    let (a, b) = (e.connect(), e.connect());
    use_tube(&mut e, a, "hidden");
    let ready = put_ready(&mut e, a, 0, 0);
    let delayed = put(&mut e, a, 0, secs(60), 60, 0);
    let buried = put_ready(&mut e, a, 1, 0);
    reply(
        &mut e,
        a,
        C::PauseTube {
            tube: name("hidden"),
            delay: secs(60),
        },
        0,
    );
    assert_eq!(reserved(reply(&mut e, b, C::ReserveJob(buried), 0)), buried);
    reply(&mut e, b, C::Bury { id: buried, pri: 1 }, 0);
    for id in [ready, delayed, buried] {
        assert_eq!(reserved(reply(&mut e, b, C::ReserveJob(id), 0)), id);
        assert_eq!(
            reply(&mut e, a, C::ReserveJob(id), 0),
            R::NotFound,
            "already reserved"
        );
    }
    assert_eq!(reply(&mut e, b, C::ReserveJob(999), 0), R::NotFound);
    let stats = yaml(reply(&mut e, b, C::Stats, 0));
    assert_eq!(field(&stats, "current-jobs-reserved"), "3");
    assert_eq!(field(&stats, "current-jobs-delayed"), "0");
    assert_eq!(field(&stats, "current-workers"), "1");
    assert_eq!(e.next_deadline(), Some(60 * S), "the pause and the TTRs");
}

// Pause.

#[test]
fn paused_tube_hands_jobs_to_waiters_when_it_resumes() {
    let mut e = engine();
    let (w, p) = (e.connect(), e.connect());
    assert_eq!(
        reply(
            &mut e,
            p,
            C::PauseTube {
                tube: name("default"),
                delay: secs(5)
            },
            0
        ),
        R::Paused
    );
    let id = put_ready(&mut e, p, 0, 0);
    assert_eq!(e.execute(w, C::Reserve, 0), Outcome::Wait);
    assert!(wakeups(&mut e).is_empty());
    let doc = yaml(reply(&mut e, p, C::StatsTube(name("default")), 2 * S + 1));
    assert_eq!(field(&doc, "pause"), "5");
    assert_eq!(field(&doc, "pause-time-left"), "2");
    assert_eq!(field(&doc, "cmd-pause-tube"), "1");
    assert_eq!(e.next_deadline(), Some(5 * S));
    e.tick(5 * S);
    assert_eq!(woken_reserved(&mut e), [(w, id)]);
    let doc = yaml(reply(&mut e, p, C::StatsTube(name("default")), 5 * S));
    assert_eq!(field(&doc, "pause"), "0");
    assert_eq!(field(&doc, "pause-time-left"), "0");
}

#[test]
fn pause_zero_is_the_shortest_pause_and_missing_tubes_are_not_found() {
    let mut e = engine();
    let c = e.connect();
    assert_eq!(
        reply(
            &mut e,
            c,
            C::PauseTube {
                tube: name("nope"),
                delay: secs(1)
            },
            0
        ),
        R::NotFound
    );
    assert_eq!(server_stat(&mut e, c, "cmd-pause-tube", 0), "1");
    assert_eq!(
        reply(
            &mut e,
            c,
            C::PauseTube {
                tube: name("default"),
                delay: Duration::ZERO
            },
            10
        ),
        R::Paused
    );
    assert_eq!(e.next_deadline(), Some(11));
    put_ready(&mut e, c, 0, 10);
    assert_eq!(
        reply(&mut e, c, C::ReserveWithTimeout(Duration::ZERO), 10),
        R::TimedOut
    );
    assert_eq!(reserve(&mut e, c, 11), 1);
}

// Tubes.

#[test]
fn use_watch_ignore_answers() {
    let mut e = engine();
    let c = e.connect();
    assert_eq!(
        reply(&mut e, c, C::ListTubeUsed, 0),
        R::Using(name("default"))
    );
    assert_eq!(reply(&mut e, c, C::Use(name("x")), 0), R::Using(name("x")));
    assert_eq!(reply(&mut e, c, C::ListTubeUsed, 0), R::Using(name("x")));
    assert_eq!(reply(&mut e, c, C::Watch(name("a")), 0), R::Watching(2));
    assert_eq!(reply(&mut e, c, C::Watch(name("a")), 0), R::Watching(2));
    assert_eq!(reply(&mut e, c, C::Ignore(name("zzz")), 0), R::Watching(2));
    assert_eq!(
        reply(&mut e, c, C::Ignore(name("x")), 0),
        R::Watching(2),
        "used, not watched"
    );
    assert_eq!(
        reply(&mut e, c, C::Ignore(name("default")), 0),
        R::Watching(1)
    );
    assert_eq!(reply(&mut e, c, C::Ignore(name("a")), 0), R::NotIgnored);
    assert_eq!(list(&mut e, c, C::ListTubesWatched), "---\n- a\n");
    assert_eq!(tube_stat(&mut e, c, "a", "current-watching", 0), "1");
    assert_eq!(tube_stat(&mut e, c, "x", "current-using", 0), "1");
}

#[test]
fn tubes_live_while_referenced() {
    let mut e = engine();
    let (c, o) = (e.connect(), e.connect());
    assert_eq!(list(&mut e, c, C::ListTubes), "---\n- default\n");
    for t in ["a", "b", "c"] {
        reply(&mut e, c, C::Watch(name(t)), 0);
    }
    assert_eq!(
        list(&mut e, c, C::ListTubes),
        "---\n- default\n- a\n- b\n- c\n"
    );
    assert_eq!(
        list(&mut e, c, C::ListTubesWatched),
        "---\n- default\n- a\n- b\n- c\n"
    );
    // Removal swaps the last tube into the hole, in both lists.
    reply(&mut e, c, C::Ignore(name("a")), 0);
    assert_eq!(
        list(&mut e, c, C::ListTubesWatched),
        "---\n- default\n- c\n- b\n"
    );
    assert_eq!(list(&mut e, c, C::ListTubes), "---\n- default\n- c\n- b\n");
    assert_eq!(reply(&mut e, c, C::StatsTube(name("a")), 0), R::NotFound);
    // A job keeps its tube alive.
    use_tube(&mut e, o, "j");
    let id = put_ready(&mut e, o, 0, 0);
    use_tube(&mut e, o, "default");
    assert_eq!(tube_stat(&mut e, c, "j", "current-jobs-ready", 0), "1");
    reply(&mut e, o, C::Delete(id), 0);
    assert_eq!(reply(&mut e, c, C::StatsTube(name("j")), 0), R::NotFound);
    // Re-using the same tube keeps it.
    use_tube(&mut e, o, "u");
    use_tube(&mut e, o, "u");
    assert_eq!(tube_stat(&mut e, c, "u", "current-using", 0), "1");
    // The default tube is never removed.
    watch_only(&mut e, o, &["b"]);
    use_tube(&mut e, o, "b");
    e.disconnect(c, 0);
    assert_eq!(list(&mut e, o, C::ListTubes), "---\n- default\n- b\n");
    assert_eq!(server_stat(&mut e, o, "current-tubes", 0), "2");
    assert_eq!(tube_stat(&mut e, o, "default", "current-watching", 0), "0");
}

#[test]
fn disconnect_drops_watches_in_beanstalkd_order() {
    let mut e = engine();
    let (c, o) = (e.connect(), e.connect());
    for t in ["a", "b", "c", "d"] {
        reply(&mut e, o, C::Watch(name(t)), 0);
    }
    for t in ["b", "d"] {
        reply(&mut e, c, C::Watch(name(t)), 0);
    }
    // o watches [default, a, b, c, d]; clearing it removes items[0] each
    // time: default, d, c, b, a. Unshared ones (a, c) leave the global list
    // [default, a, b, c, d] in that order: c first (d fills its hole),
    // then a (d moves again).
    e.disconnect(o, 0);
    assert_eq!(list(&mut e, c, C::ListTubes), "---\n- default\n- d\n- b\n");
}

#[test]
fn paused_tube_forgets_its_pause_when_removed() {
    let mut e = engine();
    let c = e.connect();
    use_tube(&mut e, c, "p");
    reply(
        &mut e,
        c,
        C::PauseTube {
            tube: name("p"),
            delay: secs(5),
        },
        0,
    );
    assert_eq!(e.next_deadline(), Some(5 * S));
    use_tube(&mut e, c, "default");
    assert_eq!(e.next_deadline(), None);
    use_tube(&mut e, c, "p");
    assert_eq!(tube_stat(&mut e, c, "p", "pause", 0), "0");
}

// Connections.

#[test]
fn disconnect_releases_reserved_jobs_without_counting_timeouts() {
    let mut e = engine();
    let (a, b) = (e.connect(), e.connect());
    let first = put_ready(&mut e, a, 0, 0);
    put_ready(&mut e, a, 0, 0);
    reserve(&mut e, a, 0);
    reserve(&mut e, a, 0);
    assert_eq!(e.execute(b, C::Reserve, 0), Outcome::Wait);
    e.disconnect(a, S);
    assert_eq!(woken_reserved(&mut e), [(b, first)]);
    let stats = yaml(reply(&mut e, b, C::Stats, S));
    assert_eq!(field(&stats, "current-jobs-ready"), "1");
    assert_eq!(field(&stats, "current-jobs-reserved"), "1");
    assert_eq!(field(&stats, "job-timeouts"), "0");
    assert_eq!(field(&stats, "current-connections"), "1");
    assert_eq!(field(&stats, "total-connections"), "2");
    assert_eq!(field(&stats, "current-producers"), "0");
    assert_eq!(field(&stats, "current-workers"), "1");
    assert_eq!(job_stat(&mut e, b, first, "timeouts", S), "0");
    e.disconnect(b, S);
    assert_eq!(e.next_deadline(), None);
}

#[test]
fn disconnect_of_a_waiter_removes_it() {
    let mut e = engine();
    let (w, p) = (e.connect(), e.connect());
    assert_eq!(
        e.execute(w, C::ReserveWithTimeout(secs(5)), 0),
        Outcome::Wait
    );
    e.disconnect(w, 0);
    assert_eq!(e.next_deadline(), None);
    put_ready(&mut e, p, 0, 0);
    assert!(wakeups(&mut e).is_empty());
    assert_eq!(tube_stat(&mut e, p, "default", "current-waiting", 0), "0");
    assert_eq!(server_stat(&mut e, p, "current-waiting", 0), "0");
}

#[test]
fn cancel_wait_stops_waiting() {
    let mut e = engine();
    let (w, p) = (e.connect(), e.connect());
    assert_eq!(e.cancel_wait(w), None);
    assert_eq!(e.execute(w, C::Reserve, 0), Outcome::Wait);
    assert_eq!(e.cancel_wait(w), Some(R::TimedOut));
    put_ready(&mut e, p, 0, 0);
    assert!(wakeups(&mut e).is_empty());
    // A `reserve-batch` that waits ends with an empty batch, never
    // TIMED_OUT.
    let batch = C::ReserveBatchWait {
        n: 5,
        timeout: Duration::from_secs(9),
    };
    assert!(
        matches!(e.execute(w, C::ReserveBatch(5), 0), Outcome::Reply(R::ReservedBatch(jobs)) if jobs.len() == 1)
    );
    assert_eq!(e.execute(w, batch, 0), Outcome::Wait);
    assert_eq!(e.cancel_wait(w), Some(R::ReservedBatch(Vec::new())));
}

#[test]
fn producers_and_workers() {
    let mut e = engine();
    let (a, b, c) = (e.connect(), e.connect(), e.connect());
    put_ready(&mut e, a, 0, 0);
    put_ready(&mut e, a, 0, 0);
    reserve(&mut e, b, 0);
    reply(&mut e, c, C::ReserveJob(999), 0);
    let stats = yaml(reply(&mut e, c, C::Stats, 0));
    assert_eq!(field(&stats, "current-producers"), "1");
    assert_eq!(
        field(&stats, "current-workers"),
        "1",
        "a failed reserve-job does not make a worker"
    );
    reply(&mut e, c, C::ReserveJob(2), 0);
    assert_eq!(server_stat(&mut e, c, "current-workers", 0), "2");
}

// Drain mode and rejected requests.

#[test]
fn drain_mode_refuses_puts_but_uses_up_ids() {
    let mut e = engine();
    let c = e.connect();
    e.set_draining(true);
    assert_eq!(
        reply(&mut e, c, put_cmd(0, Duration::ZERO, 1, "x"), 0),
        R::Draining
    );
    let stats = yaml(reply(&mut e, c, C::Stats, 0));
    assert_eq!(field(&stats, "draining"), "true");
    assert_eq!(field(&stats, "cmd-put"), "1");
    assert_eq!(field(&stats, "total-jobs"), "0");
    assert_eq!(field(&stats, "current-producers"), "1");
    e.set_draining(false);
    assert_eq!(put_ready(&mut e, c, 0, 0), 2);
}

#[test]
fn rejects_move_counters_like_beanstalkd() {
    let mut e = engine();
    let (a, b) = (e.connect(), e.connect());
    e.reject(
        a,
        Rejected {
            error: ProtocolError::JobTooBig,
            counted: Some(Op::Put),
        },
    );
    e.reject(
        a,
        Rejected {
            error: ProtocolError::BadFormat,
            counted: Some(Op::PauseTube),
        },
    );
    e.reject(
        a,
        Rejected {
            error: ProtocolError::BadFormat,
            counted: None,
        },
    );
    e.reject(
        a,
        Rejected {
            error: ProtocolError::UnknownCommand,
            counted: None,
        },
    );
    let stats = yaml(reply(&mut e, b, C::Stats, 0));
    assert_eq!(field(&stats, "cmd-put"), "1");
    assert_eq!(field(&stats, "cmd-pause-tube"), "1");
    assert_eq!(field(&stats, "current-producers"), "0");
    e.reject(
        a,
        Rejected {
            error: ProtocolError::ExpectedCrlf,
            counted: Some(Op::Put),
        },
    );
    assert_eq!(server_stat(&mut e, b, "cmd-put", 0), "2");
    assert_eq!(server_stat(&mut e, b, "current-producers", 0), "1");
    assert_eq!(
        put_ready(&mut e, b, 0, 0),
        2,
        "the refused body used up id 1"
    );
}

// Stats documents.

// The key set and order of `stats` are checked end to end in
// tests/stats.rs, against the binary (and proven there against beanstalkd).

#[test]
fn stats_document() {
    let mut e = Engine::new(
        EngineConfig {
            max_job_size: 1234,
            binlog_max_size: 5678,
            journal: false,
            binlog: Default::default(),
            jobs_budget: None,
        },
        7 * S,
    );
    let c = e.connect();
    put_ready(&mut e, c, 1, 7 * S);
    put_ready(&mut e, c, 2000, 7 * S);
    put(&mut e, c, 0, secs(1), 60, 7 * S);
    reply(&mut e, c, C::PeekReady, 7 * S);
    let doc = yaml(reply(&mut e, c, C::Stats, 10 * S + 999_999));
    assert!(doc.starts_with("---\n") && doc.ends_with('\n') && !doc.ends_with("\r\n"));
    let expect = [
        ("current-jobs-urgent", "2"),
        ("current-jobs-ready", "3"),
        ("current-jobs-delayed", "0"),
        ("cmd-put", "3"),
        ("cmd-peek-ready", "1"),
        ("cmd-stats", "1"),
        ("total-jobs", "3"),
        ("max-job-size", "1234"),
        ("binlog-max-size", "5678"),
        ("binlog-records-written", "0"),
        ("current-tubes", "1"),
        ("uptime", "3"),
        ("draining", "false"),
    ];
    for (key, value) in expect {
        assert_eq!(field(&doc, key), value, "{key}");
    }
    assert_eq!(field(&doc, "pid"), std::process::id().to_string());
    assert_eq!(
        field(&doc, "version"),
        format!("\"{}\"", env!("CARGO_PKG_VERSION"))
    );
    let id = field(&doc, "id");
    assert!(
        id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    for key in ["rusage-utime", "rusage-stime"] {
        let v = field(&doc, key);
        let (s, us) = v.split_once('.').unwrap();
        assert!(s.parse::<u64>().is_ok() && us.len() == 6, "{key}: {v}");
    }
    for key in ["hostname", "os", "platform"] {
        let v = field(&doc, key);
        assert!(v.starts_with('"') && v.ends_with('"'), "{key}: {v}");
    }
}

#[test]
fn stats_job_document() {
    let mut e = engine();
    let c = e.connect();
    use_tube(&mut e, c, "jobs");
    let id = put(&mut e, c, 42, Duration::from_millis(2500), 30, S);
    let doc = yaml(reply(&mut e, c, C::StatsJob(id), 2 * S + 400_000));
    assert_eq!(
        doc,
        "---\nid: 1\ntube: \"jobs\"\nstate: delayed\npri: 42\nage: 1\ndelay: 2\nttr: 30\ntime-left: 1\n\
         file: 0\nreserves: 0\ntimeouts: 0\nreleases: 0\nburies: 0\nkicks: 0\n"
    );
    reply(&mut e, c, C::Watch(name("jobs")), 4 * S);
    reserve(&mut e, c, 4 * S);
    let doc = yaml(reply(&mut e, c, C::StatsJob(id), 4 * S + 1));
    assert_eq!(field(&doc, "state"), "reserved");
    assert_eq!(field(&doc, "time-left"), "29");
    assert_eq!(field(&doc, "reserves"), "1");
    assert_eq!(reply(&mut e, c, C::StatsJob(99), 0), R::NotFound);
}

#[test]
fn counts_past_a_byte_are_kept_whole() {
    // A record keeps each count in a few bits until one reaches its
    // field's top (255 reserves, 7 of the others); past it every count
    // moves to the table's side map and goes on counting.
    let mut e = engine_with(true);
    let c = e.connect();
    let id = put_ready(&mut e, c, 0, 0);
    for n in 1..=300u32 {
        assert_eq!(reserve(&mut e, c, 0), id);
        let cmd = if n % 3 == 0 {
            C::Bury { id, pri: 0 }
        } else {
            C::Release {
                id,
                pri: 0,
                delay: Duration::ZERO,
            }
        };
        reply(&mut e, c, cmd, 0);
        if n % 3 == 0 {
            assert_eq!(reply(&mut e, c, C::KickJob(id), 0), R::Kicked);
        }
    }
    let doc = yaml(reply(&mut e, c, C::StatsJob(id), 0));
    for (key, n) in [
        ("reserves", "300"),
        ("releases", "200"),
        ("buries", "100"),
        ("kicks", "100"),
    ] {
        assert_eq!(field(&doc, key), n, "{key}");
    }
    // The journal's last image carries them, and a restore brings them back.
    let journal = e.take_journal();
    let Some(super::Record::Update(image)) = journal.last() else {
        panic!("expected an update, got {:?}", journal.last());
    };
    assert_eq!(
        (image.reserves, image.releases, image.buries, image.kicks),
        (300, 200, 100, 100)
    );
    let mut again = engine_with(true);
    let image = super::JobImage {
        timeouts: 70_000,
        ..image.clone()
    };
    again.restore(&image);
    let c2 = again.connect();
    let doc = yaml(reply(&mut again, c2, C::StatsJob(id), 0));
    assert_eq!(field(&doc, "timeouts"), "70000");
    assert_eq!(field(&doc, "kicks"), "100");
    assert_eq!(reserve(&mut again, c2, 0), id);
    assert_eq!(job_stat(&mut again, c2, id, "reserves", 0), "301");
    // A job whose counts fit again after a restore is back in its bytes.
    let small = super::JobImage {
        id: id + 1,
        reserves: 3,
        timeouts: 0,
        ..image
    };
    again.restore(&small);
    assert_eq!(job_stat(&mut again, c2, id + 1, "reserves", 0), "3");
    assert_eq!(reply(&mut again, c2, C::Delete(id), 0), R::Deleted);
    assert_eq!(reply(&mut again, c2, C::Delete(id + 1), 0), R::Deleted);
}

#[test]
fn stats_tube_document() {
    let mut e = engine();
    let (c, w) = (e.connect(), e.connect());
    use_tube(&mut e, c, "t");
    put_ready(&mut e, c, 0, 0);
    put_ready(&mut e, c, 1024, 0);
    put(&mut e, c, 0, secs(5), 60, 0);
    watch_only(&mut e, w, &["t"]);
    reserve(&mut e, w, 0);
    let doc = yaml(reply(&mut e, c, C::StatsTube(name("t")), 0));
    assert_eq!(
        doc,
        "---\nname: \"t\"\ncurrent-jobs-urgent: 0\ncurrent-jobs-ready: 1\ncurrent-jobs-reserved: 1\n\
         current-jobs-delayed: 1\ncurrent-jobs-buried: 0\ntotal-jobs: 3\ncurrent-using: 1\n\
         current-watching: 1\ncurrent-waiting: 0\ncmd-delete: 0\ncmd-pause-tube: 0\npause: 0\n\
         pause-time-left: 0\n"
    );
    assert_eq!(reply(&mut e, c, C::StatsTube(name("none")), 0), R::NotFound);
}

#[test]
fn every_command_counts_once() {
    let mut e = engine();
    let c = e.connect();
    let cmds = [
        (C::PeekReady, "cmd-peek-ready"),
        (C::PeekDelayed, "cmd-peek-delayed"),
        (C::PeekBuried, "cmd-peek-buried"),
        (C::Peek(1), "cmd-peek"),
        (C::Delete(1), "cmd-delete"),
        (
            C::Release {
                id: 1,
                pri: 0,
                delay: Duration::ZERO,
            },
            "cmd-release",
        ),
        (C::Bury { id: 1, pri: 0 }, "cmd-bury"),
        (C::Touch(1), "cmd-touch"),
        (C::Kick(1), "cmd-kick"),
        (C::StatsJob(1), "cmd-stats-job"),
        (C::StatsTube(name("default")), "cmd-stats-tube"),
        (C::ListTubes, "cmd-list-tubes"),
        (C::ListTubeUsed, "cmd-list-tube-used"),
        (C::ListTubesWatched, "cmd-list-tubes-watched"),
        (C::Use(name("default")), "cmd-use"),
        (C::Watch(name("default")), "cmd-watch"),
        (C::Ignore(name("default")), "cmd-ignore"),
        (
            C::ReserveWithTimeout(Duration::ZERO),
            "cmd-reserve-with-timeout",
        ),
    ];
    for (cmd, key) in cmds {
        e.execute(c, cmd, 0);
        assert_eq!(server_stat(&mut e, c, key, 0), "1", "{key}");
    }
    assert_eq!(server_stat(&mut e, c, "cmd-stats", 0), "19");
}

// Internals.

#[test]
fn job_record_is_compact() {
    assert!(
        std::mem::size_of::<Option<JobRow>>() <= 96,
        "{}",
        std::mem::size_of::<JobRow>()
    );
}

/// One step of a 64-bit linear congruential generator (Knuth's MMIX
/// constants): repeatable randomness for the model tests.
fn lcg(x: u64) -> u64 {
    x.wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
}

#[test]
fn job_table_matches_a_hash_map() {
    // As it starts, and sized up front as recovery sizes it (smaller than
    // it gets, so it also grows from there).
    for reserved in [0, 10_000] {
        job_table_against_a_hash_map(reserved);
    }
}

fn job_table_against_a_hash_map(reserved: usize) {
    let mut table = JobTable::new();
    table.reserve(reserved);
    let mut model: HashMap<JobId, JobSlot> = HashMap::new();
    let mut live: Vec<JobId> = Vec::new();
    let mut next_id = 1;
    let mut rng = 12345u64;
    for _ in 0..50_000 {
        rng = lcg(rng);
        if rng >> 62 != 0 || live.is_empty() {
            let body = table_body(next_id);
            let profile = table_profile(next_id);
            let slot = table.insert(next_id, 0, profile, 0, &body);
            model.insert(next_id, slot);
            live.push(next_id);
            next_id += 1;
        } else {
            let id = live.swap_remove((rng >> 20) as usize % live.len());
            let slot = model.remove(&id).unwrap();
            assert_eq!(table.profile(slot), table_profile(id));
            assert_eq!(table.remove(slot), (id, table_profile(id).tube));
        }
        // Any id, live or gone, also while the index is growing (it grows
        // a few slots per call).
        let id = 1 + (rng >> 24) % next_id;
        assert_eq!(table.find(id), model.get(&id).copied(), "id {id}");
    }
    for id in 1..next_id {
        assert_eq!(table.find(id), model.get(&id).copied(), "id {id}");
        if let Some(slot) = table.find(id) {
            assert_eq!(table.body(slot), &table_body(id)[..], "body of {id}");
            assert_eq!(table.body_len(slot), table_body(id).len());
            assert_eq!(table.profile(slot), table_profile(id), "profile of {id}");
        }
    }
}

/// A profile for job `id`: hundreds of them, so unused ones are dropped
/// and made again (`profile.rs`) while others stay in use.
fn table_profile(id: JobId) -> Profile {
    Profile {
        tube: TubeIx::new((id % 3) as usize),
        ttr: 1 + (id % 2) as u32,
        delay: (id % 97) as u32,
    }
}

/// A body of its own for job `id`: lengths from empty to past the size
/// classes, contents that tell jobs apart.
fn table_body(id: JobId) -> Vec<u8> {
    let len = [0, 1, 8, 100, 250, 1024, 3000][id as usize % 7];
    (0..len).map(|i| (id as u8) ^ (i as u8)).collect()
}

#[test]
fn heaps_match_a_sorted_model() {
    // Few priorities and deadlines, so most keys tie on their first part;
    // slots are reused as jobs come and go.
    let mut table = JobTable::new();
    let mut ready: SlotHeap<ByPriority> = SlotHeap::new();
    let mut delayed: SlotHeap<ByDeadline> = SlotHeap::new();
    let mut ready_model: BTreeSet<(u32, JobId, JobSlot)> = BTreeSet::new();
    let mut delayed_model: BTreeSet<(Time, JobId, JobSlot)> = BTreeSet::new();
    let mut next_id = 1;
    let mut rng = 987_654_321u64;
    for round in 0..60_000 {
        rng = lcg(rng);
        let (pick, which, key) = ((rng >> 40) as usize, rng >> 63 == 0, (rng >> 33) % 8);
        // Grow for the first half, then shrink to nothing.
        let grow = (rng >> 20) % 8 < if round < 30_000 { 5 } else { 2 };
        if grow {
            let profile = Profile {
                tube: DEFAULT_TUBE,
                ttr: 1,
                delay: 0,
            };
            let slot = table.insert(next_id, key as u32, profile, 0, b"");
            table[slot].deadline = key;
            if which {
                ready.push(slot, &mut table);
                ready_model.insert((key as u32, next_id, slot));
            } else {
                delayed.push(slot, &mut table);
                delayed_model.insert((key, next_id, slot));
            }
            next_id += 1;
        } else if which && !ready_model.is_empty() {
            let &(pri, id, slot) = ready_model.iter().nth(pick % ready_model.len()).unwrap();
            ready.remove(slot, &mut table);
            ready_model.remove(&(pri, id, slot));
            assert_eq!(table.remove(slot).0, id);
        } else if !which && !delayed_model.is_empty() {
            // Mostly the top, as ticks take them.
            let n = if pick % 2 == 0 {
                0
            } else {
                pick % delayed_model.len()
            };
            let &(at, id, slot) = delayed_model.iter().nth(n).unwrap();
            delayed.remove(slot, &mut table);
            delayed_model.remove(&(at, id, slot));
            assert_eq!(table.remove(slot).0, id);
        }
        assert_eq!(ready.len(), ready_model.len());
        assert_eq!(delayed.len(), delayed_model.len());
        assert_eq!(
            ready.peek().map(|e| (e.pri, e.id, e.slot)),
            ready_model.first().copied()
        );
        assert_eq!(
            delayed
                .peek()
                .map(|e| (e.deadline, table[e.slot].id, e.slot)),
            delayed_model.first().copied()
        );
    }
    assert!(ready.is_empty() && delayed.is_empty());
}

#[test]
fn delayed_jobs_cost_one_timer_entry_per_tube() {
    let mut e = engine();
    let c = e.connect();
    for i in 0..10_000u64 {
        put(&mut e, c, 0, Duration::from_micros(10_000_000 - i), 60, 0);
    }
    assert_eq!(e.next_deadline(), Some(10_000_000 - 9_999));
    // Stale entries from every new minimum were compacted away.
    assert!(e.timers_len() < 100, "{}", e.timers_len());
    e.tick(10 * S);
    assert_eq!(
        server_stat(&mut e, c, "current-jobs-ready", 10 * S),
        "10000"
    );
    assert_eq!(e.next_deadline(), None);
}

#[test]
fn commands_see_timers_due_at_their_moment() {
    let mut e = engine();
    let c = e.connect();
    let id = put(&mut e, c, 0, secs(1), 60, 0);
    assert_eq!(reply(&mut e, c, C::PeekReady, S - 1), R::NotFound);
    assert_eq!(
        reply(&mut e, c, C::PeekReady, S),
        R::Found {
            id,
            body: Bytes::from_static(b"body")
        }
    );
}

#[test]
fn time_never_goes_back() {
    let mut e = engine();
    let c = e.connect();
    put(&mut e, c, 0, secs(1), 60, 0);
    e.tick(2 * S);
    // A call carrying an older clock reading still sees the job ready.
    assert_eq!(reserve(&mut e, c, S / 2), 1);
    assert_eq!(job_stat(&mut e, c, 1, "time-left", 0), "60");
}

fn clustered(role: &'static str) -> Engine {
    let mut e = engine_with(true);
    e.set_cluster(super::ClusterStats {
        name: "c".into(),
        node: role.into(),
        role,
        leader: String::new(),
        epoch: 1,
        members: Vec::new(),
    });
    e
}

fn updates(e: &mut Engine) -> Vec<super::JobImage> {
    e.take_journal()
        .into_iter()
        .filter_map(|r| match r {
            super::Record::Update(image) => Some(image),
            _ => None,
        })
        .collect()
}

#[test]
fn in_cluster_mode_reservations_are_recorded_with_their_deadline() {
    use super::Stored;
    let mut e = clustered("leader");
    let c = e.connect();
    let id = put(&mut e, c, 0, secs(0), 5, 0);
    e.take_journal();
    assert_eq!(reserve(&mut e, c, S), id);
    let image = updates(&mut e).pop().expect("a reserve record");
    assert_eq!((image.state, image.reserves), (Stored::Reserved(6 * S), 1));
    assert_eq!(reply(&mut e, c, C::Touch(id), 2 * S), R::Touched);
    assert_eq!(updates(&mut e)[0].state, Stored::Reserved(7 * S));
    // A job a closed connection gives back is recorded ready.
    e.disconnect(c, 3 * S);
    assert_eq!(updates(&mut e)[0].state, Stored::Ready);
    // A put handed straight to a waiter: the put, then the reserve.
    let w = e.connect();
    assert_eq!(reserve(&mut e, w, 4 * S), id);
    assert_eq!(reply(&mut e, w, C::Delete(id), 4 * S), R::Deleted);
    e.take_journal();
    assert_eq!(e.execute(w, C::Reserve, 4 * S), Outcome::Wait);
    let p = e.connect();
    let id2 = put(&mut e, p, 0, secs(0), 5, 4 * S);
    let journal = e.take_journal();
    assert!(
        matches!(&journal[..], [super::Record::Put(a), super::Record::Update(b)]
            if a.id == id2 && a.state == Stored::Ready && b.state == Stored::Reserved(9 * S)),
        "{journal:?}"
    );
    // Outside cluster mode a reserve writes nothing.
    let mut local = engine_with(true);
    let c = local.connect();
    put(&mut local, c, 0, secs(0), 5, 0);
    local.take_journal();
    reserve(&mut local, c, S);
    assert_eq!(local.take_journal(), []);
}

#[test]
fn a_reservation_taken_over_stays_reserved_until_its_deadline() {
    use super::Stored;
    let mut old = clustered("leader");
    let c = old.connect();
    let id = put(&mut old, c, 3, secs(0), 5, 0);
    reserve(&mut old, c, S);
    let image = updates(&mut old).pop().unwrap();

    let mut new = clustered("standby");
    new.restore(&image);
    let w = new.connect();
    assert_eq!(job_stat(&mut new, w, id, "state", 2 * S), "reserved");
    assert_eq!(job_stat(&mut new, w, id, "time-left", 2 * S), "4");
    assert_eq!(
        server_stat(&mut new, w, "current-jobs-reserved", 2 * S),
        "1"
    );
    assert_eq!(server_stat(&mut new, w, "current-connections", 2 * S), "1");
    // Nobody holds it here: no one can finish it, nor take it.
    for cmd in [
        C::Delete(id),
        C::Release {
            id,
            pri: 0,
            delay: secs(0),
        },
        C::Touch(id),
        C::Bury { id, pri: 0 },
        C::ReserveJob(id),
    ] {
        assert_eq!(reply(&mut new, w, cmd, 3 * S), R::NotFound);
    }
    assert_eq!(
        reply(&mut new, w, C::ReserveWithTimeout(secs(0)), 3 * S),
        R::TimedOut
    );
    // A waiting worker gets it when its TTR runs out, as a timeout.
    assert_eq!(new.execute(w, C::Reserve, 3 * S), Outcome::Wait);
    new.tick(6 * S - 1);
    assert!(woken_reserved(&mut new).is_empty());
    new.tick(6 * S);
    assert_eq!(woken_reserved(&mut new), [(w, id)]);
    assert_eq!(job_stat(&mut new, w, id, "timeouts", 6 * S), "1");
    assert_eq!(job_stat(&mut new, w, id, "pri", 6 * S), "3");
    // Recorded: its latest image (the waiter's reservation) says so.
    let last = updates(&mut new).pop().unwrap();
    assert_eq!(
        (last.state, last.timeouts, last.reserves),
        (Stored::Reserved(11 * S), 1, 2)
    );
    // Outside cluster mode a stored reservation comes back ready.
    let mut local = engine_with(true);
    local.restore(&image);
    let c = local.connect();
    assert_eq!(job_stat(&mut local, c, id, "state", 2 * S), "ready");
}
