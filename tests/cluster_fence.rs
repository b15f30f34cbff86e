//! A deposed leader's pipelined batches stay out of the stream, replayed
//! step by step through sprout's own claim and batch code against real
//! nats-server processes (`cluster/fence.rs`).
//!
//! The race it pins down was seen once in CI (`cluster_stall`): a leader
//! stopped with batches in its socket buffer is replaced; continued, its
//! oldest batch is refused (the claim took its place), but the one behind
//! it expected exactly where the claim ended and was stored after it.

mod common;

use async_nats::jetstream::{self, stream::Stream, Context};
use async_nats::Client;
use bytes::Bytes;
use common::nats::NatsCluster;
use sprout::cluster::fence::{Fences, FENCES};
use sprout::cluster::publish::{self, Chain, Refusal};
use sprout::cluster::stream;
use sprout::cluster::subjects::Subjects;

/// One node's link to the stream, as a separate process would have.
async fn connect(nats: &NatsCluster) -> (Client, Context) {
    let client = async_nats::connect(nats.url_list())
        .await
        .expect("connect to nats");
    let js = jetstream::new(client.clone());
    (client, js)
}

/// A claim after stream sequence `after`, as a taking-over node makes it.
async fn claim(link: &(Client, Context), subjects: &Subjects, after: u64) -> Fences {
    let messages = Fences::claim(subjects, Bytes::from_static(b"claim"));
    let chain = Chain { after, fence: None };
    let end = publish::batch(&link.0, &link.1, "claim".into(), &messages, &chain)
        .await
        .expect("the claim is stored");
    assert_eq!(end, after + FENCES + 1);
    Fences::claimed(after)
}

/// `n` pages, as one batch of a leader's.
fn pages(subjects: &Subjects, first: u32, n: u32) -> Vec<(String, Bytes)> {
    let page = |slot| (subjects.page(slot), Bytes::from_static(b"page"));
    (first..first + n).map(page).collect()
}

async fn last_seq(stream: &mut Stream) -> u64 {
    stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence
}

#[test]
fn a_deposed_leaders_pipelined_batch_is_refused_after_a_claim() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let Some(nats) = NatsCluster::start(3, "a_deposed_leaders_pipelined_batch") else {
        return;
    };
    runtime.block_on(async {
        let subjects = Subjects::new("fenced").unwrap();
        let old = connect(&nats).await;
        let new = connect(&nats).await;
        let started = std::time::Instant::now();
        let mut stream = loop {
            match stream::ensure(&old.1, &subjects, 3).await {
                Ok(s) => break s,
                Err(e) if started.elapsed().as_secs() < 30 => eprintln!("no stream yet: {e:?}"),
                Err(e) => panic!("no stream in 30 s: {e:?}"),
            }
        };
        // The old leader claims and writes two batches.
        let fences = claim(&old, &subjects, 0).await;
        let mut end = FENCES + 1;
        for n in 0..2 {
            let chain = Chain {
                after: end,
                fence: Some(fences.of(&subjects, n)),
            };
            let batch = pages(&subjects, n as u32 * 10, 3);
            end = publish::batch(&old.0, &old.1, format!("b{n}"), &batch, &chain)
                .await
                .expect("the leader's batch is stored");
        }
        // Another node takes over: its claim lands where the old leader's
        // next batch would have.
        claim(&new, &subjects, end).await;
        let claimed = last_seq(&mut stream).await;
        // The old leader, continued, sends what it had pipelined: a batch
        // as long as the claim, then one chained on its end (= the
        // claim's end, so the sequence alone would let it in).
        let mut refused = Vec::new();
        let mut after = end;
        for n in 2..4u64 {
            let len = if n == 2 { FENCES as u32 + 1 } else { 1 };
            let chain = Chain {
                after,
                fence: Some(fences.of(&subjects, n)),
            };
            if n == 3 {
                assert_eq!(chain.after, claimed, "chained on the claim's end");
            }
            let batch = pages(&subjects, 100 + n as u32 * 20, len);
            let id = format!("b{n}");
            let mut sent = publish::send(&old.0, &old.1, id, &batch, &chain)
                .await
                .expect("sent");
            after += len as u64;
            refused.push(sent.settled().await);
        }
        for (n, answer) in refused.iter().enumerate() {
            assert!(
                matches!(answer, Err(Refusal::Fenced(_))),
                "stale batch {n}: {answer:?}"
            );
        }
        assert_eq!(
            last_seq(&mut stream).await,
            claimed,
            "nothing after the claim"
        );
    });
}
