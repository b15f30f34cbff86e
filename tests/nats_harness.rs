//! The NATS test harness (`tests/common/nats.rs`) against real nats-server
//! processes: a 3-node cluster keeps every acknowledged message of an R3
//! stream through a kill -9 of the stream's leader and takes writes again
//! afterwards; one node keeps its store across stop and start; the server
//! is new enough for sprout's cluster mode.

mod common;

use async_nats::jetstream::{self, stream};
use common::nats::{parse_version, NatsCluster, MIN_VERSION};
use std::time::{Duration, Instant};

/// Publishes `payload` to `subject` with a `Nats-Msg-Id` (so a retry after
/// a lost ack is not stored twice), retrying for up to 30 s; the sequence.
async fn publish_retrying(
    js: &jetstream::Context,
    subject: &str,
    id: &str,
    payload: Vec<u8>,
) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut failures = 0;
    loop {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        let attempt = async {
            js.publish_with_headers(subject.to_string(), headers, payload.clone().into())
                .await?
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
        };
        match attempt.await {
            Ok(ack) => {
                if failures > 0 {
                    eprintln!("publish {id}: acked after {failures} failed attempts");
                }
                return ack.sequence;
            }
            Err(e) if Instant::now() < deadline => {
                if failures == 0 {
                    eprintln!("publish {id}: {e}; retrying");
                }
                failures += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("publish {id}: no ack within 30 s: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_stream_keeps_acked_messages_through_leader_kill9() {
    let Some(mut cluster) =
        NatsCluster::start(3, "r3_stream_keeps_acked_messages_through_leader_kill9")
    else {
        return;
    };
    assert_eq!(cluster.urls().split(',').count(), 3);
    let client = async_nats::connect(cluster.url_list())
        .await
        .expect("connect");
    let version = client.server_info().version;
    let v = parse_version(&version).unwrap_or_else(|| panic!("INFO version {version:?}"));
    assert!(
        (v.0, v.1) >= MIN_VERSION,
        "server {version} is older than {MIN_VERSION:?}"
    );

    let js = jetstream::new(client);
    let config = stream::Config {
        name: "H".into(),
        subjects: vec!["h.>".into()],
        num_replicas: 3,
        storage: stream::StorageType::File,
        allow_atomic_publish: true,
        ..Default::default()
    };
    // A JetStream API request can time out while the meta group settles
    // on a loaded machine, after /healthz passed: retry for a while.
    let deadline = Instant::now() + Duration::from_secs(30);
    let created = loop {
        match js.create_stream(config.clone()).await {
            Ok(created) => break created,
            Err(e) if Instant::now() < deadline => {
                eprintln!("create stream: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("create stream: {e}"),
        }
    };
    // An older server would drop the field it does not know.
    assert!(
        created.cached_info().config.allow_atomic_publish,
        "allow_atomic not kept"
    );
    assert_eq!(created.cached_info().config.num_replicas, 3);

    let mut acked: Vec<(u64, Vec<u8>)> = Vec::new();
    // 300 in flight at once, then each ack awaited.
    let mut pending = Vec::new();
    for i in 0..300u32 {
        let payload = format!("before-{i}").into_bytes();
        let fut = js
            .publish(format!("h.{}", i % 7), payload.clone().into())
            .await
            .expect("publish");
        pending.push((fut, payload));
    }
    for (fut, payload) in pending {
        acked.push((fut.await.expect("ack").sequence, payload));
    }

    let leader = cluster
        .wait_stream_leader("H", Duration::from_secs(10))
        .expect("stream H has a leader");
    cluster.kill9(leader);
    let killed = Instant::now();
    for i in 0..100u32 {
        let payload = format!("after-{i}").into_bytes();
        let seq = publish_retrying(
            &js,
            &format!("h.{}", i % 7),
            &format!("after-{i}"),
            payload.clone(),
        )
        .await;
        if i == 0 {
            eprintln!(
                "first write acked {:?} after the leader's kill -9",
                killed.elapsed()
            );
        }
        acked.push((seq, payload));
    }
    let new_leader = cluster
        .wait_stream_leader("H", Duration::from_secs(10))
        .expect("a new leader");
    assert_ne!(new_leader, leader, "the killed node cannot lead");

    let stream = js.get_stream("H").await.expect("get stream");
    for (seq, payload) in &acked {
        let msg = stream
            .get_raw_message(*seq)
            .await
            .unwrap_or_else(|e| panic!("acked message {seq} is gone: {e}"));
        assert_eq!(&msg.payload[..], &payload[..], "message {seq}");
    }
    let seqs: std::collections::HashSet<u64> = acked.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs.len(), acked.len(), "two acks with one sequence");

    // The killed node comes back on its own store and ports and rejoins.
    cluster.start_again(leader);
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.stream_leader_seen_by(leader, "H").is_none() {
        assert!(
            Instant::now() < deadline,
            "restarted node never saw stream H"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_keeps_its_store_across_stop_and_start_again() {
    let Some(mut cluster) =
        NatsCluster::start(1, "single_node_keeps_its_store_across_stop_and_start_again")
    else {
        return;
    };
    let client = async_nats::connect(cluster.url(0)).await.expect("connect");
    let js = jetstream::new(client);
    js.create_stream(stream::Config {
        name: "S".into(),
        subjects: vec!["s".into()],
        ..Default::default()
    })
    .await
    .expect("create stream");
    let seq = js
        .publish("s", "kept".into())
        .await
        .expect("publish")
        .await
        .expect("ack")
        .sequence;
    assert_eq!(cluster.stream_leader("S"), Some(0));

    cluster.stop(0);
    assert_eq!(
        cluster.stream_leader("S"),
        None,
        "a stopped node leads nothing"
    );
    cluster.start_again(0);

    let client = async_nats::connect(cluster.url(0))
        .await
        .expect("reconnect");
    let js = jetstream::new(client);
    let stream = js.get_stream("S").await.expect("stream survives a restart");
    let msg = stream
        .get_raw_message(seq)
        .await
        .expect("message survives a restart");
    assert_eq!(&msg.payload[..], b"kept");
}

#[test]
fn server_versions_parse() {
    assert_eq!(parse_version("nats-server: v2.15.1\n"), Some((2, 15, 1)));
    assert_eq!(parse_version("2.15.1"), Some((2, 15, 1)));
    assert_eq!(parse_version("nats-server: v2.9.10"), Some((2, 9, 10)));
    assert_eq!(parse_version("nats-server: v2.12.0-RC.1"), Some((2, 12, 0)));
    assert_eq!(parse_version("garbage"), None);
    assert!((2, 9) < MIN_VERSION && (2, 15) >= MIN_VERSION);
}
