//! Reserving, waiting and timeouts, DEADLINE_SOON, and paused tubes.

use super::*;

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
