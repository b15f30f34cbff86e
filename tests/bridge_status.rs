//! What the bridge tells its operator without being asked: the status
//! lines at the default log level (each source and how it reads expiries,
//! where it delivers, every Redis setting it changes, old -> new), in
//! text and JSON; and the punctuality of its deliveries, on `sprout bridge
//! --metrics` and on the server's `/metrics` and dashboard JSON with the
//! embedded bridge. Real redis-server, real sprout, real promtool.

mod bridge_common;
mod common;
mod http_client;

use std::time::{Duration, Instant};

use bridge_common::{
    bridge_args, can_run, can_run_on, wait_for_log, wait_numpat, Bridge, Delivered, Redis, Version,
    Worker,
};
use common::{TempDir, TestServer};
use http_client::{program, promtool, sample, Http};
use serde_json::Value;

const KEYS: usize = 20;
const LATENESS: &str = "sprout_bridge_delivery_lateness_seconds";
const EVENT_TO_DELIVERY: &str = "sprout_bridge_event_to_delivery_seconds";

/// What Redis holds for `notify-keyspace-events`.
fn notify_flags(redis: &Redis) -> String {
    let reply: Vec<String> = redis.run(&["CONFIG", "GET", "notify-keyspace-events"]);
    reply[1].clone()
}

/// The line of the bridge's change of `notify-keyspace-events` from `old`
/// to what Redis holds now (which must have every class it needs).
fn change_line(redis: &Redis, old: &str) -> String {
    let new = notify_flags(redis);
    for class in ['K', 'g', '$', 'x', 'e'] {
        assert!(new.contains(class), "{new:?} lacks {class}");
    }
    format!(
        "notify-keyspace-events on 127.0.0.1:{}: {old:?} -> {new:?}",
        redis.port
    )
}

#[track_caller]
fn assert_lines(log: &str, lines: &[String]) {
    for line in lines {
        assert!(log.contains(line.as_str()), "no {line:?} in:\n{log}");
    }
}

/// `KEYS` keys due within a few hundred ms, delivered to `worker`.
fn deliveries(redis: &Redis, worker: &mut Worker) -> Vec<Delivered> {
    for i in 0..KEYS {
        redis.set_px(&format!("dev:{i}"), "x", 300 + 10 * i as u64);
    }
    (0..KEYS)
        .map(|_| worker.next(Duration::from_secs(10)).expect("a delivery"))
        .collect()
}

/// A scrape of `http`'s `/metrics` once every delivery met its event.
fn scrape_after(http: &Http, got: &[Delivered]) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    let scrape = loop {
        let scrape = http.raw("GET", "/metrics", &[], None).text;
        let count = sample(&scrape, &format!("{EVENT_TO_DELIVERY}_count"));
        if count == Some(KEYS as f64) || Instant::now() > deadline {
            break scrape;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let count = |name: &str| sample(&scrape, &format!("{name}_count"));
    assert_eq!(count(LATENESS), Some(KEYS as f64), "{scrape}");
    assert_eq!(count(EVENT_TO_DELIVERY), Some(KEYS as f64), "{scrape}");
    // The lateness is each delivery's own: fired_at_ms - expire_at_ms.
    let late_ms: i64 = got.iter().map(|d| d.fired_at_ms - d.expire_at_ms).sum();
    let sum = sample(&scrape, &format!("{LATENESS}_sum")).expect("a sum");
    assert!(
        (sum - late_ms as f64 / 1e3).abs() < 1e-6,
        "{sum} vs {late_ms} ms"
    );
    let le = format!("{LATENESS}_bucket{{le=\"0.001\"}}");
    assert!(sample(&scrape, &le).is_some(), "ms buckets: {scrape}");
    if let Some(path) = program("promtool") {
        let (ok, report) = promtool(&path, &scrape);
        assert!(ok, "promtool check metrics: {report}\n{scrape}");
    }
    scrape
}

/// Kills the bridge's event connection and waits until it is back
/// (`lost` times lost by then).
fn resubscribe(redis: &Redis, bridge: &mut Bridge, lost: usize) {
    let _: i64 = redis.run(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while bridge
        .log()
        .matches("lost the keyspace event connection")
        .count()
        < lost
    {
        assert!(Instant::now() < deadline, "{}", bridge.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_numpat(redis, 1);
}

#[test]
fn sprout_bridge_says_what_it_does_and_how_punctual_it_is() {
    if !can_run("sprout_bridge_says_what_it_does_and_how_punctual_it_is") {
        return;
    }
    let redis = Redis::start();
    let _: () = redis.run(&["CONFIG", "SET", "notify-keyspace-events", ""]);
    let server = TestServer::start(&[]);
    let state = TempDir::new();
    let metrics = format!("127.0.0.1:{}", TestServer::free_port());
    let mut args = bridge_args(&redis, server.port(), "offline", &["dev:*"], state.path());
    args.extend(["--metrics".to_string(), metrics.clone()]);
    let mut bridge = Bridge::spawn_logging(&args, None);
    bridge.wait_log("notify-keyspace-events on");
    wait_numpat(&redis, 1);
    let change = change_line(&redis, "");
    let log = bridge.log();
    assert_lines(
        &log,
        &[
            format!("bridge metrics on http://{metrics}/metrics"),
            format!("bridge index in {}: 0 keys pending", state.path().display()),
            format!("bridge source {} (standalone): Redis 7.", redis.url()),
            "expiries read with PEXPIRETIME (exact), TTLs learnt from keyspace events, and \
             SCAN every 60 s"
                .into(),
            "bridge delivering expiries of keys matching dev:* to the tube offline (timers \
             in bridge-timers.offline), from 1 source"
                .into(),
            change.clone(),
        ],
    );
    // The default level is status lines and warnings, nothing else.
    for line in log.lines() {
        assert!(
            line.contains("INFO sprout::status:") || line.contains("WARN"),
            "{line}"
        );
    }
    // Resubscribed with nothing to change: nothing said.
    resubscribe(&redis, &mut bridge, 1);
    assert_eq!(bridge.log().matches(&change).count(), 1, "{}", bridge.log());
    // A Redis that lost the setting is changed, and it says so again.
    let _: () = redis.run(&["CONFIG", "SET", "notify-keyspace-events", ""]);
    resubscribe(&redis, &mut bridge, 2);
    assert_eq!(bridge.log().matches(&change).count(), 2, "{}", bridge.log());

    let mut worker = Worker::new(server.port(), "offline");
    let got = deliveries(&redis, &mut worker);
    let scrape = scrape_after(&Http::at(&format!("http://{metrics}")), &got);
    assert_eq!(sample(&scrape, "sprout_bridge_keys"), Some(KEYS as f64));
    assert!(!scrape.contains("sprout_bridge_timers_pending"), "{scrape}");
}

#[test]
fn json_status_lines_on_redis_6() {
    if !can_run_on(Version::V6_2, "json_status_lines_on_redis_6") {
        return;
    }
    let redis = Redis::start_version(Version::V6_2);
    let _: () = redis.run(&["CONFIG", "SET", "notify-keyspace-events", "Ex"]);
    let old = notify_flags(&redis);
    let server = TestServer::start(&[]);
    let state = TempDir::new();
    let mut args = bridge_args(&redis, server.port(), "offline", &["dev:*"], state.path());
    args.extend(["--log-format".to_string(), "json".into()]);
    let mut bridge = Bridge::spawn_logging(&args, None);
    bridge.wait_log("notify-keyspace-events on");
    let change = change_line(&redis, &old);
    let status: Vec<String> = bridge
        .log()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
        .filter(|v| v["target"] == "sprout::status" && v["level"] == "INFO")
        .map(|v| {
            v["fields"]["message"]
                .as_str()
                .expect("a message")
                .to_owned()
        })
        .collect();
    assert!(status.contains(&change), "no {change:?} in {status:#?}");
    let source = format!("bridge source {} (standalone): Redis 6.2", redis.url());
    let ttl = "expiries read with PTTL between two TIMEs of one pipeline (no PEXPIRETIME)";
    assert!(
        status
            .iter()
            .any(|m| m.starts_with(&source) && m.contains(ttl)),
        "{status:#?}"
    );
}

#[test]
fn the_embedded_bridge_on_the_servers_metrics_and_dashboard() {
    if !can_run("the_embedded_bridge_on_the_servers_metrics_and_dashboard") {
        return;
    }
    let redis = Redis::start();
    let dir = TempDir::new();
    let store = dir.path().join("store");
    let url = redis.url();
    let (server, http) = http_client::start(&[
        "-b",
        store.to_str().unwrap(),
        "--redis-bridge",
        &url,
        "--bridge-tube",
        "offline",
        "--bridge-match",
        "dev:*",
    ]);
    wait_for_log(&server.stderr_path(), "notify-keyspace-events on", || None);
    wait_numpat(&redis, 1);
    assert_lines(
        &server.stderr(),
        &[
            format!("bridge source {url} (standalone): Redis 7."),
            "bridge delivering expiries of keys matching dev:* to the tube offline".into(),
            change_line(&redis, ""),
        ],
    );
    let bridge = &http.ok("/api/server")["bridge"];
    assert_eq!(bridge["deliveries"], 0, "{bridge}");
    assert_eq!(bridge["lateness_p50_ms"], Value::Null, "{bridge}");

    let mut worker = Worker::new(server.port(), "offline");
    let got = deliveries(&redis, &mut worker);
    scrape_after(&http, &got);
    let bridge = &http.ok("/api/server")["bridge"];
    assert_eq!(bridge["deliveries"], KEYS, "{bridge}");
    assert_eq!(bridge["window_s"], 300, "{bridge}");
    let p50 = bridge["lateness_p50_ms"].as_f64().expect("a p50");
    let p99 = bridge["lateness_p99_ms"].as_f64().expect("a p99");
    let worst = got.iter().map(|d| d.fired_at_ms - d.expire_at_ms).max();
    // Interpolated within buckets: at most the bound above the worst.
    assert!((0.0..=p99).contains(&p50), "{bridge}");
    assert!(
        p99 <= (3 * worst.unwrap_or(0)).max(1) as f64,
        "{bridge} {worst:?}"
    );
}

#[test]
fn a_setting_it_cannot_change_is_said_once() {
    if !can_run("a_setting_it_cannot_change_is_said_once") {
        return;
    }
    let hidden = ["--rename-command", "CONFIG", "sprout-test-config"];
    let redis = Redis::spawn(TestServer::free_port(), Version::V7_0, &hidden);
    let server = TestServer::start(&[]);
    let state = TempDir::new();
    let args = bridge_args(&redis, server.port(), "offline", &["dev:*"], state.path());
    let mut bridge = Bridge::spawn_logging(&args, None);
    let refused = format!(
        "WARN sprout::status: cannot change notify-keyspace-events on 127.0.0.1:{} \
         (unreadable) to add the classes \"Kg$xe\": CONFIG GET: ",
        redis.port
    );
    bridge.wait_log(&refused);
    wait_numpat(&redis, 1);
    resubscribe(&redis, &mut bridge, 1);
    let log = bridge.log();
    assert_eq!(log.matches(&refused).count(), 1, "{log}");
    assert!(log.contains("the node refuses CONFIG"), "{log}");
}
