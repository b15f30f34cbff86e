//! Tests of the admin calls ([`super::admin_ops`], [`super::browse`]) against
//! explicit clock values, as in `tests.rs`.

use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::{Command as C, JobId, Response as R};

use super::super::{AdminError, ConnId, Cursor, Engine, Outcome, Record, State, Time};
use super::{engine_with, name};

const S: Time = 1_000_000;

fn engine() -> Engine {
    engine_with(true)
}

fn run(e: &mut Engine, c: ConnId, cmd: C, now: Time) -> R {
    match e.execute(c, cmd, now) {
        Outcome::Reply(r) => r,
        other => panic!("expected a reply, got {other:?}"),
    }
}

/// A connection using and watching only `tube`.
fn client(e: &mut Engine, tube: &str) -> ConnId {
    let c = e.connect();
    run(e, c, C::Use(name(tube)), 0);
    run(e, c, C::Watch(name(tube)), 0);
    if tube != "default" {
        run(e, c, C::Ignore(name("default")), 0);
    }
    c
}

fn put(e: &mut Engine, c: ConnId, pri: u32, delay: u64, now: Time) -> JobId {
    let cmd = C::Put {
        pri,
        delay: Duration::from_secs(delay),
        ttr: Duration::from_secs(60),
        body: Bytes::from_static(b"body"),
        tags: None,
    };
    match run(e, c, cmd, now) {
        R::Inserted(id) => id,
        r => panic!("expected INSERTED, got {r:?}"),
    }
}

fn reserve(e: &mut Engine, c: ConnId, now: Time) -> JobId {
    match run(e, c, C::ReserveWithTimeout(Duration::ZERO), now) {
        R::Reserved { id, .. } => id,
        r => panic!("expected RESERVED, got {r:?}"),
    }
}

fn bury(e: &mut Engine, c: ConnId, id: JobId, now: Time) {
    assert_eq!(run(e, c, C::Bury { id, pri: 0 }, now), R::Buried);
}

/// Every page of `tube` in `state`, `limit` at a time, as ids.
fn all_pages(e: &mut Engine, tube: &str, state: State, limit: usize, now: Time) -> Vec<JobId> {
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let page = e.jobs_page(&name(tube), state, after, limit, now).unwrap();
        assert!(page.jobs.len() <= limit);
        assert!(page.jobs.iter().all(|j| j.state == state));
        ids.extend(page.jobs.iter().map(|j| j.id));
        match page.next {
            Some(next) => after = Some(next),
            None => return ids,
        }
    }
}

#[test]
fn ready_jobs_page_in_reserve_order() {
    let mut e = engine();
    let c = client(&mut e, "t");
    // Pseudo-random priorities with many ties, so (pri, id) both matter.
    let mut expected: Vec<(u32, JobId)> = (0..500u32)
        .map(|i| {
            let pri = (i * 7919) % 13;
            (pri, put(&mut e, c, pri, 0, 0))
        })
        .collect();
    expected.sort_unstable();
    let expected: Vec<JobId> = expected.into_iter().map(|(_, id)| id).collect();
    for limit in [1, 7, 100, 1000] {
        assert_eq!(
            all_pages(&mut e, "t", State::Ready, limit, 0),
            expected,
            "limit {limit}"
        );
    }
    // And the first of them is what a reserve hands out.
    assert_eq!(reserve(&mut e, c, 0), expected[0]);
}

#[test]
fn every_state_pages_in_its_own_order() {
    let mut e = engine();
    let c = client(&mut e, "t");
    let late = put(&mut e, c, 0, 30, 0);
    let soon = put(&mut e, c, 0, 10, 0);
    let ids: Vec<JobId> = (0..4).map(|_| put(&mut e, c, 5, 0, 0)).collect();
    // Reserve all four, then bury two in reverse order, hold two.
    let held: Vec<JobId> = (0..4).map(|i| reserve(&mut e, c, i * S)).collect();
    assert_eq!(held, ids);
    bury(&mut e, c, ids[3], 10);
    bury(&mut e, c, ids[2], 20);
    // (state, expected ids in order)
    let table: [(State, Vec<JobId>); 4] = [
        (State::Ready, vec![]),
        (State::Delayed, vec![soon, late]),
        (State::Buried, vec![ids[3], ids[2]]),
        (State::Reserved, vec![ids[0], ids[1]]),
    ];
    for (state, expected) in table {
        assert_eq!(
            all_pages(&mut e, "t", state, 1, 5 * S),
            expected,
            "{state:?}"
        );
    }
    let page = e
        .jobs_page(&name("t"), State::Delayed, None, 10, 5 * S)
        .unwrap();
    assert_eq!(page.jobs[0].time_left, 5 * S, "due at 10 s");
    assert_eq!(page.jobs[0].age, 5 * S);
    assert_eq!(e.jobs_page(&name("nope"), State::Ready, None, 10, 0), None);
}

#[test]
fn a_deep_cursor_skips_exactly_what_came_before() {
    let mut e = engine();
    let c = client(&mut e, "t");
    let ids: Vec<JobId> = (0..50).map(|i| put(&mut e, c, 100 - i, 0, 0)).collect();
    // Reserve order is by priority: the last put comes first.
    let page = e
        .jobs_page(&name("t"), State::Ready, Some(Cursor(71, ids[29])), 3, 0)
        .unwrap();
    let got: Vec<JobId> = page.jobs.iter().map(|j| j.id).collect();
    assert_eq!(got, vec![ids[28], ids[27], ids[26]]);
    assert_eq!(page.next, Some(Cursor(74, ids[26])));
}

#[test]
fn flush_deletes_in_batches_and_journals_each_delete() {
    // (state to flush, batch size)
    for (state, batch) in [(State::Ready, 3), (State::Delayed, 4), (State::Buried, 10)] {
        let mut e = engine();
        let c = client(&mut e, "t");
        let other = client(&mut e, "other");
        let keep = put(&mut e, other, 0, 0, 0);
        let mut ids = Vec::new();
        for _ in 0..10 {
            let id = put(&mut e, c, 1, u64::from(state == State::Delayed) * 60, 0);
            if state == State::Buried {
                assert_eq!(reserve(&mut e, c, 0), id);
                bury(&mut e, c, id, 0);
            }
            ids.push(id);
        }
        e.take_journal();
        let mut total = 0;
        let mut calls = 0;
        loop {
            let n = e.flush(&name("t"), state, batch, 1).unwrap();
            assert!(n <= batch as u64);
            if n == 0 {
                break;
            }
            total += n;
            calls += 1;
        }
        assert_eq!((total, calls), (10, 10usize.div_ceil(batch)), "{state:?}");
        let deletes: Vec<Record> = ids.iter().map(|&id| Record::Delete(id)).collect();
        assert_eq!(e.take_journal(), deletes, "{state:?}: in order, one each");
        assert!(e.job_info(keep, 1).is_some(), "other tubes untouched");
        // The tube is still used by `c`, so it stays, empty.
        let figures = e.tube_figures_of(&name("t"), 1).unwrap();
        assert_eq!((figures.ready, figures.delayed, figures.buried), (0, 0, 0));
    }
}

#[test]
fn flush_of_an_unused_tube_removes_it_with_its_last_job() {
    let mut e = engine();
    let c = client(&mut e, "gone");
    put(&mut e, c, 1, 0, 0);
    run(&mut e, c, C::Use(name("default")), 0);
    run(&mut e, c, C::Watch(name("default")), 0);
    run(&mut e, c, C::Ignore(name("gone")), 0);
    assert_eq!(e.flush(&name("gone"), State::Ready, 100, 0), Ok(1));
    assert!(e.tube_figures_of(&name("gone"), 0).is_none());
    assert_eq!(e.flush(&name("gone"), State::Ready, 100, 0), Ok(0));
}

#[test]
fn reserved_jobs_are_left_to_their_holder() {
    let mut e = engine();
    let c = client(&mut e, "t");
    let id = put(&mut e, c, 1, 0, 0);
    reserve(&mut e, c, 0);
    // (call, expected)
    let results = [
        e.flush(&name("t"), State::Reserved, 10, 0).map(|_| ()),
        e.move_jobs(&name("t"), State::Reserved, &name("u"), 10, 0)
            .map(|_| ()),
        e.delete_one(id, 0),
        e.kick_one(id, 0),
    ];
    for result in results {
        assert_eq!(result, Err(AdminError::Reserved));
    }
    assert_eq!(run(&mut e, c, C::Delete(id), 0), R::Deleted);
}

#[test]
fn kick_and_delete_one_job_by_id() {
    let mut e = engine();
    let c = client(&mut e, "t");
    let ready = put(&mut e, c, 1, 0, 0);
    let delayed = put(&mut e, c, 1, 100, 0);
    // (call, expected)
    let table: [(&str, Result<(), AdminError>); 5] = [
        ("kick ready", e.kick_one(ready, 0)),
        ("kick delayed", e.kick_one(delayed, 0)),
        ("kick missing", e.kick_one(999, 0)),
        ("delete ready", e.delete_one(ready, 0)),
        ("delete missing", e.delete_one(ready, 0)),
    ];
    let expected = [
        Err(AdminError::WrongState),
        Ok(()),
        Err(AdminError::NoSuchJob),
        Ok(()),
        Err(AdminError::NoSuchJob),
    ];
    for ((what, got), want) in table.into_iter().zip(expected) {
        assert_eq!(got, want, "{what}");
    }
    assert_eq!(e.job_info(delayed, 0).unwrap().state, State::Ready);
    assert_eq!(
        e.kick_tube(&name("nope"), 1, 0),
        Err(AdminError::NoSuchTube)
    );
}

#[test]
fn move_keeps_each_jobs_state_and_feeds_waiting_workers() {
    let mut e = engine();
    let c = client(&mut e, "from");
    let delayed = put(&mut e, c, 1, 50, 0);
    let ready = put(&mut e, c, 1, 0, 0);
    let worker = e.connect();
    run(&mut e, worker, C::Watch(name("to")), 0);
    run(&mut e, worker, C::Ignore(name("default")), 0);
    assert_eq!(e.execute(worker, C::Reserve, 0), Outcome::Wait);
    e.take_journal();

    assert_eq!(
        e.move_jobs(&name("from"), State::Ready, &name("to"), 10, S),
        Ok(1)
    );
    let woken: Vec<(ConnId, R)> = e.take_wakeups().collect();
    assert_eq!(woken.len(), 1);
    assert!(matches!(woken[0], (w, R::Reserved { id, .. }) if w == worker && id == ready));

    assert_eq!(
        e.move_jobs(&name("from"), State::Delayed, &name("to"), 10, S),
        Ok(1)
    );
    let info = e.job_info(delayed, S).unwrap();
    assert_eq!(
        (info.tube, info.state, info.time_left),
        (name("to"), State::Delayed, 49 * S)
    );
    let journal = e.take_journal();
    assert_eq!(journal.len(), 2);
    for record in journal {
        let Record::Update(image) = record else {
            panic!("a move is an update");
        };
        assert_eq!(image.tube, name("to"));
    }
}

#[test]
fn buried_jobs_moved_keep_their_place_in_the_bury_order() {
    let mut e = engine();
    let a = client(&mut e, "a");
    let b = client(&mut e, "b");
    let first = put(&mut e, a, 1, 0, 0);
    let second = put(&mut e, b, 1, 0, 0);
    let third = put(&mut e, a, 1, 0, 0);
    for (conn, id) in [(a, first), (b, second), (a, third)] {
        assert_eq!(reserve(&mut e, conn, 0), id);
        bury(&mut e, conn, id, 0);
    }
    assert_eq!(
        e.move_jobs(&name("a"), State::Buried, &name("b"), 1, 0),
        Ok(1)
    );
    assert_eq!(
        all_pages(&mut e, "b", State::Buried, 10, 0),
        vec![first, second]
    );
    assert_eq!(
        e.move_jobs(&name("a"), State::Buried, &name("b"), 10, 0),
        Ok(1)
    );
    assert_eq!(
        all_pages(&mut e, "b", State::Buried, 10, 0),
        vec![first, second, third]
    );
    assert_eq!(e.kick_tube(&name("b"), 1, 0), Ok(1));
    assert_eq!(
        e.job_info(first, 0).unwrap().state,
        State::Ready,
        "oldest first"
    );
}

#[test]
fn put_into_names_the_tube_and_respects_drain_mode() {
    let mut e = engine();
    let body = Bytes::from_static(b"hello");
    let id = e
        .put_into(
            &name("new"),
            3,
            Duration::ZERO,
            Duration::from_secs(5),
            body.clone(),
            0,
        )
        .unwrap();
    let info = e.job_info(id, 0).unwrap();
    assert_eq!(
        (info.tube, info.pri, info.ttr, info.body),
        (name("new"), 3, 5, body.clone())
    );
    e.set_draining(true);
    let refused = e.put_into(&name("x"), 0, Duration::ZERO, Duration::ZERO, body, 0);
    assert_eq!(refused, Err(AdminError::Draining));
    assert!(
        e.tube_figures_of(&name("x"), 0).is_none(),
        "no tube left behind"
    );
}

#[test]
fn pause_and_resume_a_tube() {
    let mut e = engine();
    let c = client(&mut e, "t");
    let id = put(&mut e, c, 1, 0, 0);
    let worker = client(&mut e, "default");
    run(&mut e, worker, C::Watch(name("t")), 0);
    e.pause_tube(&name("t"), Duration::from_secs(60), 0)
        .unwrap();
    assert_eq!(e.execute(worker, C::Reserve, 0), Outcome::Wait);
    assert!(e.tube_figures_of(&name("t"), 0).unwrap().paused);
    e.resume_tube(&name("t"), S).unwrap();
    let woken: Vec<(ConnId, R)> = e.take_wakeups().collect();
    assert!(matches!(woken[..], [(w, R::Reserved { id: got, .. })] if w == worker && got == id));
    assert_eq!(e.resume_tube(&name("nope"), S), Err(AdminError::NoSuchTube));
}

#[test]
fn latency_histograms_and_the_oldest_ready_job() {
    let mut e = engine();
    let c = client(&mut e, "t");
    let old = put(&mut e, c, 9, 0, 0);
    put(&mut e, c, 1, 0, 2 * S);
    let figures = e.tube_figures_of(&name("t"), 10 * S).unwrap();
    assert_eq!(
        figures.oldest_ready_age,
        Some(10 * S),
        "job {old}, though not first"
    );
    // Reserved at 10 s: waited 8 s, aged 8 s; deleted 3 s later.
    let id = reserve(&mut e, c, 10 * S);
    assert_eq!(run(&mut e, c, C::Delete(id), 13 * S), R::Deleted);
    // Released with a delay: its wait starts when the delay ends (at 25 s).
    let again = reserve(&mut e, c, 20 * S);
    assert_eq!(again, old);
    let release = C::Release {
        id: old,
        pri: 0,
        delay: Duration::from_secs(5),
    };
    assert_eq!(run(&mut e, c, release, 20 * S), R::Released);
    e.tick(25 * S);
    reserve(&mut e, c, 26 * S);
    let latency = e.tube_figures_of(&name("t"), 26 * S).unwrap().latency;
    assert_eq!(latency.reserve_wait.count, 3);
    assert_eq!(latency.reserve_wait.sum_micros, 8 * S + 20 * S + S);
    assert_eq!(latency.age_at_reserve.sum_micros, 8 * S + 20 * S + 26 * S);
    assert_eq!(latency.reserve_to_delete.count, 1);
    assert_eq!(latency.reserve_to_delete.sum_micros, 3 * S);
    assert_eq!(
        e.tube_figures_of(&name("t"), 26 * S)
            .unwrap()
            .oldest_ready_age,
        None
    );
}
