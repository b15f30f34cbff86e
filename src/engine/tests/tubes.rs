//! Tubes and connections: use, watch, ignore, a tube's life, disconnects,
//! producers and workers, drain mode and rejected requests.

use super::*;

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
