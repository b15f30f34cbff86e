//! Cluster mode: reservations recorded with their deadline and taken
//! over by a new leader.

use super::*;

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
    assert_eq!(
        (image.state, image.counts.reserves),
        (Stored::Reserved(6 * S), 1)
    );
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
        (last.state, last.counts.timeouts, last.counts.reserves),
        (Stored::Reserved(11 * S), 1, 2)
    );
    // Outside cluster mode a stored reservation comes back ready.
    let mut local = engine_with(true);
    local.restore(&image);
    let c = local.connect();
    assert_eq!(job_stat(&mut local, c, id, "state", 2 * S), "ready");
}

#[test]
fn an_update_keeps_the_body_the_replica_has() {
    use super::Stored;
    // (body length, the engine stores bodies): a short body and a long
    // one, each held by the engine or left to the store.
    for (len, storing) in [(5, false), (5000, false), (5, true), (5000, true)] {
        let mut leader = clustered("leader");
        let c = leader.connect();
        let body = Bytes::from(vec![b'b'; len]);
        let cmd = C::Put {
            pri: 3,
            delay: secs(0),
            ttr: secs(5),
            body: body.clone(),
            tags: None,
        };
        let R::Inserted(id) = reply(&mut leader, c, cmd, 0) else {
            panic!("no INSERTED");
        };
        let put = match leader.take_journal().pop() {
            Some(super::Record::Put(image)) => image,
            other => panic!("{len}: expected a put, got {other:?}"),
        };
        reserve(&mut leader, c, S);
        let reserved = updates(&mut leader).pop().expect("a reserve record");
        assert!(reserved.body.is_empty(), "an update carries no body");

        let mut standby = clustered("standby");
        if storing {
            standby.jobs = JobTable::new();
            standby
                .jobs
                .leave_bodies_to_store(crate::engine::INLINE_BODY);
        }
        standby.restore(&put);
        let before = standby.jobs.bodies_size();
        assert!(standby.update(&reserved), "{len}");
        assert!(!standby.update(&JobImage {
            id: id + 1,
            ..reserved.clone()
        }));
        let w = standby.connect();
        assert_eq!(job_stat(&mut standby, w, id, "state", 2 * S), "reserved");
        assert_eq!(job_stat(&mut standby, w, id, "reserves", 2 * S), "1");
        assert_eq!(standby.jobs.bodies_size(), before, "{len}: counted once");
        let stored = storing && len > crate::engine::INLINE_BODY;
        assert_eq!(standby.stored_len(id), stored.then_some(len), "{len}");
        // Released: the job's body is what the put gave it.
        let ready = JobImage {
            state: Stored::Ready,
            ..reserved
        };
        assert!(standby.update(&ready));
        let expected = if stored { Bytes::new() } else { body };
        assert_eq!(
            reply(&mut standby, w, C::Peek(id), 2 * S),
            R::Found { id, body: expected },
            "{len}, storing {storing}"
        );
        assert_eq!(standby.jobs.bodies_size(), before);
    }
}
