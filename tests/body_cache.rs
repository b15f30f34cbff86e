//! The body cache's figures (issue 33, docs/durability.md "Next: bodies
//! kept only on disk"): with `-b`, `stats` ends with the `body-cache-*`
//! keys after beanstalkd's, `/metrics` has them as `sprout_body_cache_*`,
//! `--body-cache` sets the bound; memory mode's `stats` has none of them.

mod common;
mod http_client;

use common::{lookup, TempDir, TestServer};
use http_client::{sample, start};

const KEYS: [&str; 5] = [
    "body-cache-bytes",
    "body-cache-max-bytes",
    "body-cache-hits",
    "body-cache-misses",
    "body-cache-read-errors",
];

#[test]
fn stats_end_with_the_body_cache_keys_with_b_only() {
    if !common::sprout_only("stats_end_with_the_body_cache_keys_with_b_only") {
        return;
    }
    let dir = TempDir::new();
    let store = dir.path().join("store");
    let s = TestServer::start(&["-b", store.to_str().unwrap()]);
    let mut c = s.connect();
    c.put(b"a body");
    let stats = c.stats_of("stats");
    let last: Vec<&str> = stats[stats.len() - 5..]
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(last, KEYS);
    // beanstalkd's keys come first, unchanged: the last of them is just
    // before.
    assert_eq!(stats[stats.len() - 6].0, "platform");
    assert_eq!(lookup(&stats, "body-cache-max-bytes"), "67108864");
    // A body this short stays in the engine: the cache holds none of it.
    for key in ["body-cache-bytes", "body-cache-hits", "body-cache-misses"] {
        assert_eq!(lookup(&stats, key), "0", "{key}");
    }
    assert_eq!(lookup(&stats, "body-cache-read-errors"), "0");

    let memory = TestServer::start(&[]);
    let stats = memory.connect().stats_of("stats");
    assert!(
        stats.iter().all(|(k, _)| !k.starts_with("body-cache-")),
        "{stats:?}"
    );
    assert_eq!(stats.last().unwrap().0, "platform");
}

#[test]
fn body_cache_sets_the_bound_and_metrics_show_it() {
    if !common::sprout_only("body_cache_sets_the_bound_and_metrics_show_it") {
        return;
    }
    let dir = TempDir::new();
    let store = dir.path().join("store");
    let (server, http) = start(&["-b", store.to_str().unwrap(), "--body-cache", "1000000"]);
    assert_eq!(server.connect().stat("body-cache-max-bytes"), "1000000");
    let scrape = http.raw("GET", "/metrics", &[], None).text;
    assert_eq!(
        sample(&scrape, "sprout_body_cache_max_bytes"),
        Some(1_000_000.0)
    );
    for name in [
        "sprout_body_cache_bytes",
        "sprout_body_cache_hits",
        "sprout_body_cache_misses",
        "sprout_body_cache_read_errors",
    ] {
        assert_eq!(sample(&scrape, name), Some(0.0), "{name}");
    }
    // Not also under beanstalkd_exporter's names: they are not its keys.
    assert_eq!(sample(&scrape, "body_cache_max_bytes"), None);
    drop(server);

    // No cache at all is a cache of 0 bytes: its keys stay.
    let store = dir.path().join("other");
    let s = TestServer::start(&["-b", store.to_str().unwrap(), "--body-cache", "0"]);
    let stats = s.connect().stats_of("stats");
    assert_eq!(lookup(&stats, "body-cache-max-bytes"), "0");
    assert_eq!(stats.last().unwrap().0, "body-cache-read-errors");
}

#[test]
fn help_lists_body_cache() {
    if !common::sprout_only("help_lists_body_cache") {
        return;
    }
    let out = std::process::Command::new(common::binary())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--body-cache <BYTES>"), "{help}");
}
