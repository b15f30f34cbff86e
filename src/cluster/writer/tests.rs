use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::{Command, Response};

use crate::cluster::cluster_store::ClusterStore;
use crate::engine::{Clock, Engine, EngineConfig, Outcome};
use crate::shared::{Shared, Submission};
use crate::store::Store;

/// A put, and the submission its answer waits for.
fn put(shared: &Shared, conn: u64) -> (Response, Submission) {
    let command = Command::Put {
        pri: 0,
        delay: Duration::ZERO,
        ttr: Duration::from_secs(60),
        body: Bytes::from_static(b"x"),
        tags: None,
    };
    let mut state = shared.lock();
    match state.engine.execute(conn, command, shared.clock.now()) {
        Outcome::Reply(r) => (r, state.submit()),
        other => panic!("a put answers at once, not {other:?}"),
    }
}

#[test]
fn a_batch_is_in_if_its_last_message_is_where_it_ends_or_replaced() {
    let last = ("sprout.c.p.7", &b"page"[..]);
    // (the message at the batch's end, in)
    type Message<'a> = (&'a str, &'a [u8]);
    let table: [(Option<Message>, bool); 5] = [
        (Some(last), true),
        (None, true),
        (Some(("sprout.c.p.7", b"another page")), false),
        (Some(("sprout.c.p.8", b"page")), false),
        (Some(("sprout.c.m", b"")), false),
    ];
    for (found, in_) in table {
        assert_eq!(super::holds_last(found, last), in_, "{found:?}");
    }
}

/// Before a node claims the stream its store fails every submission
/// (what a replica's own tick writes, say). An answer that writes
/// nothing afterwards waits behind that failure but is not failed by
/// it: a new leader whose bridge hand-over had no timer to end took
/// the standby's failure for its own and exited, and so did every
/// node after it (tests/cluster_bridge.rs, 2 runs in 4 by hand).
#[test]
fn a_standby_failure_fails_only_its_own_writer() {
    let config = EngineConfig {
        max_job_size: 65_535,
        binlog_max_size: 0,
        journal: true,
        binlog: Default::default(),
        jobs_budget: None,
        bodies_in_store: false,
    };
    let clock = Clock::new();
    let store = ClusterStore::new(None);
    let shared = Shared::new(
        Engine::new(config, clock.now()),
        clock,
        Box::new(store.clone()),
    );
    let (conn, _mailbox) = shared.connect();

    let (answer, wrote) = put(&shared, conn);
    assert!(matches!(answer, Response::Inserted(_)), "{answer:?}");
    let progress = store.progress().borrow().clone();
    assert!(wrote.own && wrote.failed(&progress), "{wrote:?}");

    // Nothing journaled: the latest submission is waited behind only.
    let nothing = shared.lock().submit();
    assert_eq!(nothing.seq, wrote.seq);
    assert!(!nothing.own && !nothing.failed(&progress), "{nothing:?}");
}

#[test]
fn a_snapshot_is_due_when_its_records_fill_pages_the_log_needs_cleaning_or_the_writer_idles() {
    use super::{Due, SNAP_BYTES};
    const S: usize = SNAP_BYTES;
    // (page bytes waiting, queued, idle, records waiting, log over its
    // bound, the last snapshot freed bytes, due)
    for (bytes, queued, idle, waiting, over, freed, due) in [
        (0, false, false, false, false, false, false),
        (S - 1, false, false, true, true, false, false),
        (S, false, false, true, false, false, true),
        (10, false, true, true, false, false, true),
        (10, true, true, true, false, false, false),
        (0, false, true, false, true, false, true),
        (0, false, true, false, false, false, false),
        // Cleaning goes on while it frees bytes, after queued records.
        (0, false, false, false, true, true, true),
        (0, true, false, false, true, true, false),
        (0, false, false, false, true, false, false),
        (10, false, false, true, false, true, false),
    ] {
        let got = Due {
            bytes,
            queued,
            idle,
            waiting,
            over,
            freed,
        }
        .snapshot();
        assert_eq!(got, due, "{bytes} {queued} {idle} {waiting} {over} {freed}");
    }
}
