//! The embedded Redis bridge in a cluster: three nats-server 2.15.1, three
//! sprout nodes each started with `--redis-bridge` against one real
//! `redis-server`. Only the leader runs the bridge; its timers are jobs of
//! the replicated state. Keys expire in a steady stream while the leader
//! is killed with -9 (twice); every expiry must be delivered exactly once
//! (none lost, none doubled by a new leader firing what the old one had
//! delivered), never before its deadline, and within a takeover's delay.
//!
//! "Doubled" means two delivery jobs (two ids) for one expiry. The same
//! delivery job handed out twice (its consumer's connection died with the
//! leader before its delete got in, and it came back after its TTR) is the
//! consumer's at-least-once, counted apart.

mod bridge_common;
mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bridge_common::{can_run, now_ms, wait_numpat, write_keys, Delivered, Redis};
use common::nats::NatsCluster;
use common::sprouts::Sprouts;
use common::{FallibleClient, TempDir};

/// The delivery tube.
const TUBE: &str = "offline";
/// Consumer connections.
const CONSUMERS: usize = 6;
/// A delivery may be put this late (`fired_at_ms`): a takeover (1 s
/// lease), then the new leader's bridge connects and fires what came due
/// meanwhile; generous for a loaded 2-core machine. When consumers get it
/// is printed, not bounded: each reserve and delete waits for a quorum,
/// and a debug build's consumers fall behind.
const MAX_LATE_MS: i64 = 8_000;

/// One delivery job as the consumer got it, with its id.
struct Got {
    id: u64,
    delivered: Delivered,
}

/// Consumes the delivery tube through the nodes in turn (a connection to
/// a standby is relayed to the leader, and closes when the leader dies),
/// recording every job it is handed before deleting it.
fn consume(ports: Vec<u16>, stop: Arc<AtomicBool>, got: Arc<Mutex<Vec<Got>>>) {
    let mut turn = 0;
    while !stop.load(Ordering::Relaxed) {
        turn += 1;
        let port = ports[turn % ports.len()];
        let Ok(mut c) = FallibleClient::connect(port, Duration::from_secs(5)) else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        let watched = c
            .request(&format!("watch {TUBE}"))
            .and_then(|_| c.request("ignore default"));
        if watched.is_err() {
            thread::sleep(Duration::from_millis(50));
            continue;
        }
        let _ = consume_on(&mut c, &stop, &got);
    }
}

fn consume_on(
    c: &mut FallibleClient,
    stop: &AtomicBool,
    got: &Mutex<Vec<Got>>,
) -> std::io::Result<()> {
    while !stop.load(Ordering::Relaxed) {
        let line = c.request("reserve-with-timeout 1")?;
        let mut parts = line.split(' ');
        let (Some("RESERVED"), Some(id), Some(len)) = (parts.next(), parts.next(), parts.next())
        else {
            if line == "TIMED_OUT" || line == "DEADLINE_SOON" {
                continue;
            }
            return Err(std::io::Error::other(format!("reserve: {line}")));
        };
        let (id, len): (u64, usize) = (id.parse().unwrap(), len.parse().unwrap());
        let body = c.read_body(len)?;
        let received_ms = now_ms();
        let v: serde_json::Value = serde_json::from_slice(&body).expect("a JSON delivery");
        let delivered = Delivered {
            key: v["key"].as_str().expect("key").to_owned(),
            db: v["db"].as_i64().expect("db"),
            expire_at_ms: v["expire_at_ms"].as_i64().expect("expire_at_ms"),
            fired_at_ms: v["fired_at_ms"].as_i64().expect("fired_at_ms"),
            value: None,
            uncertain: v["uncertain"].as_bool().unwrap_or(false),
            received_ms,
        };
        got.lock().unwrap().push(Got { id, delivered });
        c.request(&format!("delete {id}"))?;
    }
    Ok(())
}

#[test]
fn the_bridge_runs_on_the_leader_and_a_killed_leader_neither_loses_nor_doubles_an_expiry() {
    let test = "cluster_bridge";
    if !can_run(test) {
        return;
    }
    let Some(nats) = NatsCluster::start(3, test) else {
        return;
    };
    let redis = Redis::start();
    let states: Vec<TempDir> = (0..3).map(|_| TempDir::new()).collect();
    let dirs: Vec<String> = states
        .iter()
        .map(|d| d.path().display().to_string())
        .collect();
    let url = redis.url();
    let mut sprouts = Sprouts::start_with(&nats, "bridged", 3, move |i| {
        [
            "--redis-bridge",
            &url,
            "--bridge-tube",
            TUBE,
            "--bridge-match",
            "dev:*",
            "--bridge-ttr",
            "1",
            "--bridge-state-dir",
            &dirs[i],
        ]
        .map(String::from)
        .to_vec()
    });
    let first = sprouts.wait_leader(Duration::from_secs(30));
    // One bridge, the leader's, follows the key pattern.
    wait_numpat(&redis, 1);
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        redis.run::<i64>(&["PUBSUB", "NUMPAT"]),
        1,
        "only the leader runs the bridge"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(Mutex::new(Vec::new()));
    // A reserve and a delete each wait for a quorum: several consumers
    // keep up with the expiries.
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|c| {
            let (mut ports, stop, got) = (sprouts.ports.clone(), stop.clone(), got.clone());
            let n = ports.len();
            ports.rotate_left(c % n);
            thread::spawn(move || consume(ports, stop, got))
        })
        .collect();
    // 2,400 keys due evenly over 12 s from 1 s on: ~200 expiries a second
    // through both kills.
    let keys = std::env::var("SPROUT_CLUSTER_BRIDGE_KEYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_400);
    let want: BTreeMap<String, i64> = write_keys(&mut redis.conn(), "c", keys, 1_000, 12_000);
    let last = *want.values().max().unwrap();
    let mut leaders = vec![first];
    let mut takeovers = Vec::new();
    // Two kills; `SPROUT_CLUSTER_BRIDGE_KILLS=0` for the bridge alone.
    let kills = std::env::var("SPROUT_CLUSTER_BRIDGE_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
    for pause in [3_000, 4_000].into_iter().take(kills) {
        thread::sleep(Duration::from_millis(pause));
        let leader = sprouts.wait_leader(Duration::from_secs(30));
        sprouts.kill9(leader);
        takeovers.push(sprouts.time_to_put(Duration::from_secs(30)));
        sprouts.start_node(leader);
        leaders.push(sprouts.wait_leader(Duration::from_secs(30)));
    }
    // Every expiry has had its chance, then nothing more comes.
    let until = last + MAX_LATE_MS;
    while now_ms() < until {
        thread::sleep(Duration::from_millis(200));
    }
    let (mut seen, mut since) = (usize::MAX, Instant::now());
    while since.elapsed() < Duration::from_secs(3) {
        let now = got.lock().unwrap().len();
        if now != seen {
            (seen, since) = (now, Instant::now());
        }
        thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        c.join().unwrap();
    }
    let got = std::mem::take(&mut *got.lock().unwrap());

    let logs = sprouts.logs();
    if let Ok(dir) = std::env::var("SPROUT_CLUSTER_BRIDGE_LOGS") {
        for (i, log) in logs.iter().chain(&sprouts.past_logs).enumerate() {
            std::fs::write(format!("{dir}/node{i}.log"), log).unwrap();
        }
    }
    let handed: Vec<&str> = logs
        .iter()
        .chain(&sprouts.past_logs)
        .flat_map(|l| l.lines())
        .filter(|l| l.contains("took over the old leader's bridge"))
        .collect();
    eprintln!("leaders {leaders:?}, takeovers {takeovers:?}; hand-overs: {handed:#?}");
    assert!(
        leaders.windows(2).all(|w| w[0] != w[1]),
        "each kill moved the lead: {leaders:?}"
    );
    check_each_once(&got, &want);
    assert_eq!(
        redis.run::<i64>(&["PUBSUB", "NUMPAT"]),
        1,
        "one bridge, the last leader's, follows the keys"
    );
}

/// Every key of `want` delivered by exactly one delivery job, at its
/// expiry (`expire_at_ms` exact: Redis 7's `PEXPIRETIME`), never before
/// it and put at most [`MAX_LATE_MS`] after.
fn check_each_once(got: &[Got], want: &BTreeMap<String, i64>) {
    let mut jobs: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut handed_again = 0;
    for g in got {
        let ids = jobs.entry(g.delivered.key.as_str()).or_default();
        if ids.contains(&g.id) {
            handed_again += 1;
        } else {
            ids.push(g.id);
        }
    }
    let lost: Vec<&String> = want
        .keys()
        .filter(|k| !jobs.contains_key(k.as_str()))
        .collect();
    let doubled: Vec<(&&str, &Vec<u64>)> = jobs.iter().filter(|(_, ids)| ids.len() > 1).collect();
    let stray: Vec<&&str> = jobs.keys().filter(|k| !want.contains_key(**k)).collect();
    let late = |of: fn(&Delivered) -> i64| {
        let mut late: Vec<i64> = got
            .iter()
            .map(|g| of(&g.delivered) - want.get(&g.delivered.key).copied().unwrap_or(0))
            .collect();
        late.sort_unstable();
        let at = |q: f64| late[((late.len() - 1) as f64 * q).round() as usize];
        format!(
            "p50 {} ms, p99 {} ms, max {} ms",
            at(0.5),
            at(0.99),
            at(1.0)
        )
    };
    let uncertain = got.iter().filter(|g| g.delivered.uncertain).count();
    eprintln!(
        "cluster bridge: {} keys, {} jobs received, lost {}, doubled {}, handed out again {handed_again}, \
         marked uncertain {uncertain}; put after the expiry {}; received {}",
        want.len(),
        got.len(),
        lost.len(),
        doubled.len(),
        late(|d| d.fired_at_ms),
        late(|d| d.received_ms),
    );
    assert!(lost.is_empty(), "lost {}: {lost:?}", lost.len());
    if let Some((key, _)) = doubled.first() {
        for g in got.iter().filter(|g| g.delivered.key == **key) {
            eprintln!("doubled: job {} {:?}", g.id, g.delivered);
        }
    }
    assert!(doubled.is_empty(), "doubled {}: {doubled:?}", doubled.len());
    assert!(stray.is_empty(), "not written: {stray:?}");
    for g in got {
        let d = &g.delivered;
        let at = want[&d.key];
        assert_eq!(d.expire_at_ms, at, "the expiry delivered is Redis's: {d:?}");
        assert!(d.fired_at_ms >= at && d.received_ms >= at, "early: {d:?}");
        assert!(
            d.fired_at_ms - at <= MAX_LATE_MS,
            "{} ms late: {d:?}",
            d.fired_at_ms - at
        );
    }
}
