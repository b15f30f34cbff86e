//! The leadership lease against real nats-server processes: one holder at a
//! time, a standby takes over once renewals stop (and not before the TTL),
//! the old holder's late renewal is refused, a holder gives up on its own
//! clock, also when NATS does not answer, and the lease moves on soon after
//! NATS re-elects the leader of its bucket.

mod common;

use std::time::Duration;

use common::nats::NatsCluster;
use sprout::cluster::held::Held;
use sprout::cluster::lease::{self, Lease, Standing, Timing};
use sprout::cluster::version;
use tokio::time::Instant;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A node's view of the lease: its own connection, as a separate process
/// would have.
async fn open(nats: &NatsCluster, cluster: &str) -> Lease {
    let client = async_nats::connect(nats.url_list())
        .await
        .expect("connect to nats");
    version::check(&client).expect("a supported nats-server");
    let js = async_nats::jetstream::new(client);
    Lease::open(&js, cluster, Timing::default(), lease::replicas(nats.len()))
        .await
        .expect("open the lease bucket")
}

/// Takes a free lease as a standby would: NATS may refuse the first write
/// to a bucket just made ("no stream found for given subject": not every
/// server of the cluster knows the stream yet), and a node retries errors
/// at its next poll (`node.rs`); a lease someone holds is a failure here.
async fn take_free(lease: &Lease, node: &str, addr: &str) -> Held {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match lease.try_acquire(node, addr).await {
            Ok(Some(held)) => return held,
            Ok(None) => panic!("the lease was not free for {node}"),
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying the first take: {e}");
                tokio::time::sleep(lease.timing().poll_every).await;
            }
            Err(e) => panic!("no take succeeded within 10 s: {e}"),
        }
    }
}

async fn holder_node(lease: &Lease) -> Option<String> {
    lease
        .current()
        .await
        .expect("read the lease")
        .map(|h| h.node)
}

#[test]
fn the_test_server_is_supported() {
    let Some(nats) = NatsCluster::start(1, "the_test_server_is_supported") else {
        return;
    };
    runtime().block_on(async {
        let client = async_nats::connect(nats.url_list()).await.unwrap();
        let reported = client.server_info().version;
        assert!(reported.starts_with("2.1"), "{reported}");
        version::check(&client).unwrap();
    });
}

#[test]
fn a_node_with_another_lease_ttl_is_refused() {
    let Some(nats) = NatsCluster::start(1, "a_node_with_another_lease_ttl_is_refused") else {
        return;
    };
    runtime().block_on(async {
        let _first = open(&nats, "ttl").await;
        let client = async_nats::connect(nats.url_list()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let other = Timing::new(Duration::from_millis(3000)).unwrap();
        let refused = Lease::open(&js, "ttl", other, 1).await;
        let Err(sprout::cluster::Trouble::Refused(why)) = refused else {
            panic!("a TTL other than the bucket's was not refused");
        };
        assert!(why.contains("800 ms") && why.contains("3000"), "{why}");
        // The same TTL opens it again.
        Lease::open(&js, "ttl", Timing::default(), 1).await.unwrap();
    });
}

#[test]
fn one_holder_at_a_time() {
    let Some(nats) = NatsCluster::start(1, "one_holder_at_a_time") else {
        return;
    };
    runtime().block_on(async {
        let mut nodes = Vec::new();
        for _ in 0..6 {
            nodes.push(open(&nats, "one").await);
        }
        assert_eq!(holder_node(&nodes[0]).await, None);

        // Six nodes race for a free lease: exactly one wins.
        let tries = nodes.iter().enumerate().map(|(i, l)| {
            let l = l.clone();
            tokio::spawn(async move { l.try_acquire(&format!("n{i}"), "127.0.0.1:1").await })
        });
        let mut won: Vec<(usize, Held)> = Vec::new();
        for (i, t) in tries.enumerate() {
            if let Some(held) = t.await.unwrap().expect("try_acquire") {
                won.push((i, held));
            }
        }
        assert_eq!(
            won.len(),
            1,
            "winners: {:?}",
            won.iter().map(|w| w.0).collect::<Vec<_>>()
        );
        let (winner, mut held) = won.pop().unwrap();
        let current = nodes[0].current().await.unwrap().unwrap();
        assert_eq!(current.node, format!("n{winner}"));
        assert_eq!(current.addr, "127.0.0.1:1");
        assert_eq!(current.revision, held.revision());

        // Renewed on schedule, it stays held for twice the TTL and more,
        // also against a standby watching all along.
        let standby = {
            let lease = nodes[(winner + 1) % nodes.len()].clone();
            tokio::spawn(async move { lease.acquire("standby", "x").await })
        };
        let until = Instant::now() + 2 * Timing::default().ttl;
        while Instant::now() < until {
            tokio::time::sleep_until(Instant::now() + held.timing().renew_every).await;
            held.renew().await.expect("renew");
            assert_eq!(held.standing(), Standing::Fresh);
            for (i, l) in nodes.iter().enumerate().filter(|(i, _)| *i != winner) {
                assert!(l
                    .try_acquire(&format!("n{i}"), "x")
                    .await
                    .unwrap()
                    .is_none());
            }
        }
        assert_eq!(
            nodes[0].current().await.unwrap().unwrap().revision,
            held.revision()
        );
        assert!(!standby.is_finished(), "a standby took a renewed lease");
        standby.abort();

        // Released, it is free at once.
        held.release().await.unwrap();
        assert_eq!(holder_node(&nodes[0]).await, None);
        let other = (winner + 1) % nodes.len();
        let next = nodes[other]
            .try_acquire("next", "127.0.0.1:2")
            .await
            .unwrap();
        assert!(next.is_some(), "a released lease is free");
        assert_eq!(holder_node(&nodes[0]).await.as_deref(), Some("next"));
    });
}

#[test]
fn a_standby_takes_over_when_renewals_stop() {
    let Some(nats) = NatsCluster::start(3, "a_standby_takes_over_when_renewals_stop") else {
        return;
    };
    runtime().block_on(async {
        let ttl = Timing::default().ttl;
        let nodes = [open(&nats, "handover").await, open(&nats, "handover").await];
        let mut held = take_free(&nodes[0], "n0", "a0").await;
        let mut leader = 0;
        let mut gaps = Vec::new();
        for _round in 0..6 {
            let standby = 1 - leader;
            // The standby watches all along, as it always does; the leader
            // renews on schedule a few times, then stops (it hangs or dies).
            let name = format!("n{standby}");
            let waiting = {
                let (lease, name) = (nodes[standby].clone(), name.clone());
                tokio::spawn(async move { lease.acquire(&name, &format!("a{standby}")).await })
            };
            let mut last_renewal = Instant::now();
            for _ in 0..3 {
                tokio::time::sleep(held.timing().renew_every).await;
                last_renewal = Instant::now();
                held.renew().await.unwrap();
            }
            let took = tokio::time::timeout(Duration::from_secs(10), waiting)
                .await
                .expect("the standby takes the lease within 10 s")
                .unwrap();
            let gap = last_renewal.elapsed();
            assert!(
                gap + Duration::from_millis(20) >= ttl,
                "taken {gap:?} after the last renewal, before the TTL {ttl:?}"
            );
            gaps.push(gap);

            // The old holder's late renewal is refused, and stays so.
            assert!(held.renew().await.is_err());
            assert_eq!(held.standing(), Standing::Deposed);
            assert!(held.renew().await.is_err());
            for l in &nodes {
                let current = l.current().await.unwrap().unwrap();
                assert_eq!(current.node, name);
                assert_eq!(current.addr, format!("a{standby}"));
                assert_eq!(current.revision, took.revision());
            }
            held = took;
            leader = standby;
        }
        gaps.sort();
        let ms = |d: &Duration| d.as_millis();
        println!(
            "lease handover after the last renewal (TTL {} ms, renewed every {} ms, 3 nodes, {} rounds): \
             min {} ms, median {} ms, max {} ms",
            ms(&ttl),
            ms(&Timing::default().renew_every),
            gaps.len(),
            ms(&gaps[0]),
            ms(&gaps[gaps.len() / 2]),
            ms(gaps.last().unwrap()),
        );
        assert!(
            *gaps.last().unwrap() < Duration::from_secs(3),
            "slowest handover {:?}",
            gaps.last()
        );
    });
}

#[test]
fn a_holder_gives_up_on_its_own_clock() {
    let Some(mut nats) = NatsCluster::start(1, "a_holder_gives_up_on_its_own_clock") else {
        return;
    };
    let rt = runtime();
    let (a, b) = rt.block_on(async { (open(&nats, "clock").await, open(&nats, "clock").await) });

    // Not renewed: deposed on its clock before the key could age out, so
    // for a moment nobody serves rather than two.
    rt.block_on(async {
        let mut held = take_free(&a, "a", "a").await;
        assert_eq!(held.standing(), Standing::Fresh);
        tokio::time::sleep_until(held.valid_until()).await;
        assert_eq!(held.standing(), Standing::Deposed);
        assert!(b.try_acquire("b", "b").await.unwrap().is_none());
        assert!(held.renew().await.is_err());
        assert_eq!(holder_node(&b).await.as_deref(), Some("a"));
    });

    // NATS stops answering: the renewal gives up at the deadline, not after
    // a request timeout.
    let mut held = rt.block_on(async {
        let held = tokio::time::timeout(Duration::from_secs(5), b.acquire("b", "b"))
            .await
            .expect("b takes the lease once a's ages out");
        tokio::time::sleep(held.timing().renew_every).await;
        held
    });
    nats.sigstop(0);
    let (result, late) = rt.block_on(async {
        let result = held.renew().await;
        (
            result,
            Instant::now().saturating_duration_since(held.valid_until()),
        )
    });
    nats.sigcont(0);
    assert!(
        result.is_err(),
        "renewal against a stopped server: {result:?}"
    );
    assert!(
        late < Duration::from_millis(100),
        "gave up {late:?} past its deadline"
    );
    assert_eq!(held.standing(), Standing::Deposed);
}

#[test]
fn the_lease_moves_on_when_its_nats_leader_is_killed() {
    let test = "the_lease_moves_on_when_its_nats_leader_is_killed";
    let Some(mut nats) = NatsCluster::start(3, test) else {
        return;
    };
    let rt = runtime();
    let ttl = Timing::default().ttl;
    let (a, b) = rt.block_on(async { (open(&nats, "loss").await, open(&nats, "loss").await) });
    let mut held = rt.block_on(take_free(&a, "a", "a"));
    let keeper = rt.spawn(async move {
        let deposed = held.keep().await;
        (Instant::now(), deposed)
    });
    let standby = rt.spawn(async move {
        let held = b.acquire("b", "b").await;
        (Instant::now(), held)
    });
    std::thread::sleep(2 * ttl);
    assert!(!keeper.is_finished(), "deposed while NATS was healthy");
    assert!(!standby.is_finished(), "taken while renewed");

    let bucket_leader = nats
        .wait_stream_leader("KV_sprout-loss-lease", Duration::from_secs(5))
        .expect("the lease bucket has a leader");
    let killed = Instant::now();
    nats.kill9(bucket_leader);
    let elected = nats.wait_stream_leader("KV_sprout-loss-lease", Duration::from_secs(30));
    let elected_after = killed.elapsed();

    // The holder cannot renew through NATS's election: it gives up on its
    // clock, and only then may the standby take over.
    let (deposed_at, why) = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), keeper).await })
        .expect("the holder gives up within 30 s")
        .unwrap();
    let (taken_at, mut new) = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), standby).await })
        .expect("the standby takes over within 30 s")
        .unwrap();
    assert!(taken_at >= deposed_at, "taken before the holder gave up");
    // Not held up by requests the election left unanswered.
    assert!(
        taken_at - killed <= elected_after + ttl + Duration::from_secs(1),
        "taken {:?} after the kill, the bucket had a leader after {elected_after:?}",
        taken_at - killed
    );
    println!(
        "kill -9 of the lease bucket's NATS leader: a new one ({elected:?}) after {} ms, \
         the holder gave up after {} ms ({why}), the standby took over after {} ms",
        elected_after.as_millis(),
        (deposed_at - killed).as_millis(),
        (taken_at - killed).as_millis(),
    );
    rt.block_on(new.renew()).expect("the new holder renews");
}
