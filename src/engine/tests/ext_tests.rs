//! The tags' unit tests (`ext.rs`), with explicit clocks: what each tag
//! does to the engine and to its journal.

use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::{Command as C, DupState, JobId, Response as R, Tags};

use super::super::{ConnId, Engine, Outcome, Record, Stored, Time};
use super::engine_with;

const S: Time = 1_000_000;

fn tags(idp: Option<(&str, u32)>, con: Option<(&str, u32)>) -> Tags {
    Tags {
        idp: idp.map(|(k, ttl)| (k.into(), ttl)),
        con: con.map(|(k, n)| (k.into(), n)),
        ..Tags::default()
    }
}

fn put(e: &mut Engine, c: ConnId, t: Option<Tags>, now: Time) -> R {
    let cmd = C::Put {
        pri: 10,
        delay: Duration::ZERO,
        ttr: Duration::from_secs(60),
        body: Bytes::from_static(b"body"),
        tags: t.map(Box::new),
    };
    reply(e, c, cmd, now)
}

fn reply(e: &mut Engine, c: ConnId, cmd: C, now: Time) -> R {
    match e.execute(c, cmd, now) {
        Outcome::Reply(r) => r,
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn dup(id: JobId, state: DupState) -> R {
    R::InsertedDup {
        id,
        state,
        pri: None,
    }
}

#[test]
fn an_untagged_put_journals_what_it_always_did() {
    let mut e = engine_with(true);
    let c = e.connect();
    assert_eq!(put(&mut e, c, None, 0), R::Inserted(1));
    let [Record::Put(image)] = &e.take_journal()[..] else {
        panic!("one put record")
    };
    assert_eq!(image.ext, None);
}

#[test]
fn an_idp_ttl_cools_down_in_the_journal_and_ends_with_a_delete() {
    let mut e = engine_with(true);
    let c = e.connect();
    let key = || Some(tags(Some(("k", 10)), None));
    assert_eq!(put(&mut e, c, key(), 0), R::Inserted(1));
    let [Record::Put(image)] = &e.take_journal()[..] else {
        panic!("one put record")
    };
    assert_eq!(image.ext.as_ref().unwrap().tags, key().unwrap());
    assert_eq!(put(&mut e, c, key(), S), dup(1, DupState::Ready));
    assert!(e.take_journal().is_empty(), "a duplicate writes nothing");
    assert_eq!(reply(&mut e, c, C::Delete(1), 2 * S), R::Deleted);
    let [Record::Update(cooling)] = &e.take_journal()[..] else {
        panic!("a cooling record instead of a delete")
    };
    let until = cooling.ext.as_ref().unwrap().cooling_until;
    assert_eq!(until, Some(12 * S));
    assert_eq!(put(&mut e, c, key(), 11 * S), dup(1, DupState::Deleted));
    // Over: the key is free, the cooling record deleted.
    e.tick(12 * S);
    assert_eq!(e.take_journal(), [Record::Delete(1)]);
    assert_eq!(put(&mut e, c, key(), 12 * S), R::Inserted(2));

    // A restart from the cooling record keeps deduplicating.
    let mut again = engine_with(true);
    again.restore(cooling);
    let c = again.connect();
    assert_eq!(put(&mut again, c, key(), 3 * S), dup(1, DupState::Deleted));
    assert_eq!(put(&mut again, c, None, 3 * S), R::Inserted(2));
    again.tick(12 * S);
    assert_eq!(again.take_journal().last(), Some(&Record::Delete(1)));
    assert_eq!(put(&mut again, c, key(), 12 * S), R::Inserted(3));
}

#[test]
fn a_restored_tagged_job_holds_its_key_again() {
    let mut e = engine_with(true);
    let c = e.connect();
    let key = || Some(tags(Some(("k", 0)), None));
    put(&mut e, c, key(), 0);
    let [Record::Put(image)] = &e.take_journal()[..] else {
        panic!("one put record")
    };
    let mut again = engine_with(true);
    again.restore(image);
    let c = again.connect();
    assert_eq!(put(&mut again, c, key(), S), dup(1, DupState::Ready));
    assert_eq!(image.state, Stored::Ready);
}

#[test]
fn con_keys_count_reservations_across_tubes() {
    let mut e = engine_with(false);
    let (p, a, b) = (e.connect(), e.connect(), e.connect());
    let con = || Some(tags(None, Some(("k", 2))));
    for _ in 0..3 {
        put(&mut e, p, con(), 0);
    }
    assert!(matches!(
        reply(&mut e, a, C::Reserve, 0),
        R::Reserved { id: 1, .. }
    ));
    assert!(matches!(
        reply(&mut e, b, C::Reserve, 0),
        R::Reserved { id: 2, .. }
    ));
    let wait = e.execute(a, C::ReserveWithTimeout(Duration::from_secs(5)), 0);
    assert_eq!(wait, Outcome::Wait);
    // A holder deletes its job: the waiter gets the one held back.
    assert_eq!(reply(&mut e, b, C::Delete(2), S), R::Deleted);
    let woken: Vec<(ConnId, R)> = e.take_wakeups().collect();
    assert!(
        matches!(&woken[..], [(conn, R::Reserved { id: 3, .. })] if *conn == a),
        "{woken:?}"
    );
}

/// A tagged job's `stats-job` ends with its tags under tuber's names; an
/// untagged one's is beanstalkd's document with nothing added.
#[test]
fn stats_job_lists_a_tagged_jobs_tags() {
    let mut e = engine_with(false);
    let c = e.connect();
    let doc = |e: &mut Engine, id| match reply(e, c, C::StatsJob(id), S) {
        R::Ok(doc) => String::from_utf8(doc.to_vec()).unwrap(),
        other => panic!("expected a document, got {other:?}"),
    };
    let plain = put(&mut e, c, None, 0);
    let R::Inserted(plain) = plain else {
        panic!("{plain:?}")
    };
    assert!(doc(&mut e, plain).ends_with("\nkicks: 0\n"));
    let all = Tags {
        grp: Some("g1".into()),
        aft: Some("g0".into()),
        ..tags(Some(("k", 30)), Some(("c", 3)))
    };
    for (t, tail) in [
        (
            all,
            "kicks: 0\nidempotency-key: k\nidempotency-ttl: 30\ngroup: g1\nafter-group: g0\n\
             concurrency-key: c\nconcurrency-limit: 3\n",
        ),
        (
            tags(None, Some(("solo", 1))),
            "kicks: 0\nidempotency-key: \nidempotency-ttl: 0\ngroup: \nafter-group: \n\
             concurrency-key: solo\nconcurrency-limit: 1\n",
        ),
    ] {
        let R::Inserted(id) = put(&mut e, c, Some(t), 0) else {
            panic!()
        };
        let d = doc(&mut e, id);
        assert!(d.ends_with(tail), "{d}");
    }
}

fn group_tags(grp: Option<&str>, aft: Option<&str>) -> Tags {
    Tags {
        grp: grp.map(Into::into),
        aft: aft.map(Into::into),
        ..Tags::default()
    }
}

/// The put records of `e`'s journal, by job id order.
fn put_images(e: &mut Engine) -> Vec<super::JobImage> {
    e.take_journal()
        .into_iter()
        .filter_map(|r| match r {
            Record::Put(image) => Some(image),
            _ => None,
        })
        .collect()
}

/// A standby applies a job's newer record by forgetting the job and
/// restoring it: when that job is its group's last member, the held
/// `aft:` job must stay held; a delete (a forget alone) releases it.
#[test]
fn a_standby_replacing_the_last_member_keeps_the_held_job_held() {
    let mut leader = engine_with(true);
    let c = leader.connect();
    put(&mut leader, c, Some(group_tags(Some("g"), None)), 0);
    put(&mut leader, c, Some(group_tags(None, Some("g"))), 0);
    let images = put_images(&mut leader);
    assert_eq!(images[1].state, Stored::Delayed(super::super::ext::HELD));
    let mut standby = engine_with(true);
    images.iter().for_each(|image| standby.restore(image));
    standby.tick(S);
    let w = standby.connect();
    standby.forget(1);
    standby.restore(&images[0]);
    standby.tick(2 * S);
    assert_eq!(reply(&mut standby, w, C::ReserveJob(2), 2 * S), R::NotFound);
    standby.forget(1);
    standby.tick(3 * S);
    let reserved = reply(&mut standby, w, C::ReserveJob(2), 3 * S);
    assert!(
        matches!(reserved, R::Reserved { id: 2, .. }),
        "{reserved:?}"
    );
}

/// A delayed `aft:` job restored after its delay ended is held while its
/// group has members, and kicks leave it.
#[test]
fn a_delayed_aft_job_restored_after_its_delay_is_held() {
    let mut e = engine_with(true);
    let c = e.connect();
    put(&mut e, c, Some(group_tags(Some("g"), None)), 0);
    let delayed = C::Put {
        pri: 10,
        delay: Duration::from_secs(5),
        ttr: Duration::from_secs(60),
        body: Bytes::from_static(b"body"),
        tags: Some(Box::new(group_tags(None, Some("g")))),
    };
    assert_eq!(reply(&mut e, c, delayed, 0), R::Inserted(2));
    let images = put_images(&mut e);
    assert_eq!(images[1].state, Stored::Delayed(5 * S));
    let mut again = engine_with(true);
    again.tick(10 * S);
    images.iter().for_each(|image| again.restore(image));
    let w = again.connect();
    assert_eq!(reply(&mut again, w, C::Kick(10), 10 * S), R::KickedCount(0));
    assert_eq!(reply(&mut again, w, C::KickJob(2), 10 * S), R::NotFound);
    assert_eq!(reply(&mut again, w, C::Delete(1), 10 * S), R::Deleted);
    let reserved = reply(&mut again, w, C::ReserveJob(2), 10 * S);
    assert!(
        matches!(reserved, R::Reserved { id: 2, .. }),
        "{reserved:?}"
    );
}
