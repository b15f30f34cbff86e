//! `fire`'s unit tests, with explicit clocks: the one-step move of a
//! reserved timer to its delivery, its journal, and every refusal
//! changing nothing.

use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::{Command as C, JobId, Response as R};

use crate::engine::tests::{engine_with, name};
use crate::engine::{ConnId, Engine, Outcome, Record, Stored, Time};

const S: Time = 1_000_000;

fn reply(e: &mut Engine, c: ConnId, cmd: C, now: Time) -> R {
    match e.execute(c, cmd, now) {
        Outcome::Reply(r) => r,
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn fire(id: JobId, body: &'static str) -> C {
    C::Fire {
        id,
        pri: 7,
        ttr: Duration::from_secs(30),
        body: Bytes::from_static(body.as_bytes()),
    }
}

/// A connection using `uses` and watching only `watches`.
fn conn(e: &mut Engine, uses: &str, watches: &str) -> ConnId {
    let c = e.connect();
    reply(e, c, C::Use(name(uses)), 0);
    reply(e, c, C::Watch(name(watches)), 0);
    reply(e, c, C::Ignore(name("default")), 0);
    c
}

/// A timer put on `timers` (delayed `delay_s`), reserved by `c` at its
/// deadline.
fn reserved_timer(e: &mut Engine, c: ConnId, delay_s: u64) -> (JobId, Time) {
    let p = conn(e, "timers", "timers");
    let put = C::Put {
        pri: 0,
        delay: Duration::from_secs(delay_s),
        ttr: Duration::from_secs(300),
        body: Bytes::from_static(b"T1 timer"),
        tags: None,
    };
    let R::Inserted(id) = reply(e, p, put, 0) else {
        panic!("a timer")
    };
    let at = delay_s * S;
    assert_eq!(
        reply(e, c, C::ReserveWithTimeout(Duration::ZERO), at - 1),
        R::TimedOut,
        "not due before its deadline"
    );
    match reply(e, c, C::ReserveWithTimeout(Duration::ZERO), at) {
        R::Reserved { id: got, .. } => assert_eq!(got, id),
        other => panic!("the timer, got {other:?}"),
    }
    (id, at)
}

fn stat(e: &mut Engine, c: ConnId, cmd: C, key: &str, now: Time) -> String {
    let R::Ok(doc) = reply(e, c, cmd, now) else {
        panic!("a document")
    };
    let doc = String::from_utf8(doc.to_vec()).unwrap();
    let line = doc.lines().find(|l| l.starts_with(&format!("{key}: ")));
    line.unwrap_or_else(|| panic!("{key} in {doc}"))[key.len() + 2..].to_string()
}

#[test]
fn a_reserved_timer_becomes_its_delivery_in_one_record_group() {
    let mut e = engine_with(true);
    let c = conn(&mut e, "out", "timers");
    let (timer, at) = reserved_timer(&mut e, c, 10);
    e.take_journal();
    let now = at + 5;
    let R::Inserted(delivery) = reply(&mut e, c, fire(timer, "{\"key\":\"k\"}"), now) else {
        panic!("INSERTED")
    };
    assert!(delivery > timer, "a new id");
    // The timer's delete and the delivery's put, in one command's records
    // (one store frame), nothing else.
    let journal = e.take_journal();
    let [Record::Delete(gone), Record::Put(image)] = &journal[..] else {
        panic!("a delete and a put, got {journal:?}")
    };
    assert_eq!(*gone, timer);
    assert_eq!(image.id, delivery);
    assert_eq!(image.tube, name("out"));
    assert_eq!((image.pri, image.ttr, image.delay), (7, 30, 0));
    assert_eq!(image.state, Stored::Ready);
    assert_eq!(image.created, now);
    assert_eq!(&image.body[..], b"{\"key\":\"k\"}");
    // The timer is gone, the delivery ready in the used tube.
    assert_eq!(reply(&mut e, c, C::Peek(timer), now), R::NotFound);
    let w = conn(&mut e, "default", "out");
    match reply(&mut e, w, C::Reserve, now) {
        R::Reserved { id, body } => {
            assert_eq!(id, delivery);
            assert_eq!(&body[..], b"{\"key\":\"k\"}");
        }
        other => panic!("the delivery, got {other:?}"),
    }
    assert_eq!(
        stat(
            &mut e,
            c,
            C::StatsTube(name("timers")),
            "current-jobs-reserved",
            now
        ),
        "0"
    );
    // A fire is neither a put nor a delete in the counters.
    assert_eq!(stat(&mut e, c, C::Stats, "cmd-delete", now), "0");
    assert_eq!(stat(&mut e, c, C::Stats, "cmd-put", now), "1");
    assert_eq!(stat(&mut e, c, C::Stats, "total-jobs", now), "2");
    assert_eq!(stat(&mut e, c, C::Stats, "current-jobs-urgent", now), "0");
}

#[test]
fn a_waiting_worker_gets_the_delivery_at_once() {
    let mut e = engine_with(false);
    let w = conn(&mut e, "default", "out");
    assert_eq!(e.execute(w, C::Reserve, 0), Outcome::Wait);
    let c = conn(&mut e, "out", "timers");
    let (timer, at) = reserved_timer(&mut e, c, 3);
    let R::Inserted(delivery) = reply(&mut e, c, fire(timer, "d"), at) else {
        panic!("INSERTED")
    };
    let woken: Vec<(ConnId, R)> = e.take_wakeups().collect();
    assert_eq!(
        woken,
        [(
            w,
            R::Reserved {
                id: delivery,
                body: Bytes::from_static(b"d")
            }
        )]
    );
}

#[test]
fn refusals_change_nothing() {
    let mut e = engine_with(true);
    let c = conn(&mut e, "out", "timers");
    let other = conn(&mut e, "out", "timers");
    let (timer, at) = reserved_timer(&mut e, c, 1);
    e.take_journal();
    // Not held by the firing connection, or no such job.
    assert_eq!(reply(&mut e, other, fire(timer, "d"), at), R::NotFound);
    assert_eq!(reply(&mut e, c, fire(timer + 100, "d"), at), R::NotFound);
    // Not reserved at all (a delayed timer, a ready one).
    let p = conn(&mut e, "timers", "timers");
    let delayed = C::Put {
        pri: 0,
        delay: Duration::from_secs(60),
        ttr: Duration::from_secs(1),
        body: Bytes::from_static(b"x"),
        tags: None,
    };
    let R::Inserted(later) = reply(&mut e, p, delayed, at) else {
        panic!()
    };
    assert_eq!(reply(&mut e, c, fire(later, "d"), at), R::NotFound);
    e.take_journal();
    // Draining refuses it as it refuses a put.
    e.set_draining(true);
    assert_eq!(reply(&mut e, c, fire(timer, "d"), at), R::Draining);
    e.set_draining(false);
    assert_eq!(e.take_journal(), []);
    // The timer is still c's: it can still be fired, and no id was used up.
    assert_eq!(
        reply(&mut e, c, fire(timer, "d"), at),
        R::Inserted(later + 1)
    );
}

#[test]
fn over_the_body_budget_the_timer_stays_reserved() {
    let mut e = engine_with(false);
    e.config.jobs_budget = Some(20);
    let c = conn(&mut e, "out", "timers");
    let (timer, at) = reserved_timer(&mut e, c, 1);
    // 8 bytes of timer now; the timer's own bytes count until it goes.
    let big = "a delivery that is too big";
    assert_eq!(reply(&mut e, c, fire(timer, big), at), R::OutOfMemory);
    assert_eq!(
        reply(
            &mut e,
            c,
            C::Release {
                id: timer,
                pri: 0,
                delay: Duration::ZERO
            },
            at
        ),
        R::Released,
        "still reserved by c"
    );
}

#[test]
fn a_timer_reserved_again_after_its_ttr_is_fired_by_its_new_holder_only() {
    let mut e = engine_with(false);
    let c = conn(&mut e, "out", "timers");
    let d = conn(&mut e, "out", "timers");
    let (timer, at) = reserved_timer(&mut e, c, 1);
    // c's TTR (300 s) runs out; d takes the timer.
    let later = at + 300 * S;
    match reply(&mut e, d, C::ReserveWithTimeout(Duration::ZERO), later) {
        R::Reserved { id, .. } => assert_eq!(id, timer),
        other => panic!("the timer again, got {other:?}"),
    }
    assert_eq!(reply(&mut e, c, fire(timer, "d"), later), R::NotFound);
    assert!(matches!(
        reply(&mut e, d, fire(timer, "d"), later),
        R::Inserted(_)
    ));
    assert_eq!(
        reply(&mut e, d, fire(timer, "d"), later),
        R::NotFound,
        "once"
    );
}
