//! `/metrics` on a live server: checked by Debian's `promtool`, named as
//! beanstalkd_exporter names them, with the values `stats` reports.

mod bridge_common;
mod common;
mod http_client;

use common::Client;
use http_client::{program, promtool, sample, start};

fn busy(c: &mut Client) {
    assert_eq!(c.line("use emails"), "USING emails");
    c.line("watch emails");
    for i in 0..5 {
        c.put_with(i, 0, 60, b"hello");
    }
    c.put_with(0, 100, 60, b"later");
    c.send(b"reserve\r\n");
    let id = c.expect_reserved(b"hello");
    assert_eq!(c.line(&format!("delete {id}")), "DELETED");
    c.send(b"reserve\r\n");
    let id = c.expect_reserved(b"hello");
    assert_eq!(c.line(&format!("bury {id} 0")), "BURIED");
}

#[test]
fn a_live_scrape_passes_promtool_and_matches_stats() {
    if !common::sprout_only("a_live_scrape_passes_promtool_and_matches_stats") {
        return;
    }
    let Some(promtool_path) = program("promtool") else {
        return;
    };
    let (server, http) = start(&[]);
    let mut c = server.connect();
    busy(&mut c);
    let response = http.raw("GET", "/metrics", &[], None);
    assert_eq!(response.status, 200);
    assert!(response
        .content_type
        .starts_with("application/openmetrics-text"));
    let scrape = response.text;
    let (ok, report) = promtool(&promtool_path, &scrape);
    assert!(ok, "promtool check metrics: {report}\n{scrape}");
    // promtool does reject what is wrong (so the check above can fail).
    assert!(!promtool(&promtool_path, "# TYPE x counter\nx 1\n").0);

    // Every numeric `stats` key but pid, under the exporter's name.
    let stats = common::parse_yaml_map(&c.ok_body(b"stats\r\n"));
    let mut exported = 0;
    for (key, value) in &stats {
        let Ok(number) = value.parse::<f64>() else {
            continue;
        };
        let name = key.replace('-', "_");
        if key == "pid" {
            assert_eq!(sample(&scrape, &name), None);
            continue;
        }
        let got = sample(&scrape, &name).unwrap_or_else(|| panic!("{name} missing"));
        // Counters the scrape itself moves, or that run on, may differ.
        let moving = [
            "uptime",
            "rusage_utime",
            "rusage_stime",
            "cmd_stats",
            "total_connections",
            "current_connections",
        ];
        if !moving.contains(&name.as_str()) {
            assert_eq!(got, number, "{name}");
        }
        exported += 1;
    }
    assert!(exported >= 44, "{exported} stats figures");
    assert_eq!(sample(&scrape, "draining"), Some(0.0));
    for (name, value) in [
        ("cmd_put", 6.0),
        ("current_jobs_ready", 3.0),
        ("current_jobs_delayed", 1.0),
        ("current_jobs_buried", 1.0),
        ("tube_current_jobs_ready{tube=\"emails\"}", 3.0),
        ("tube_current_jobs_buried{tube=\"emails\"}", 1.0),
        ("tube_cmd_delete{tube=\"emails\"}", 1.0),
        ("tube_total_jobs{tube=\"emails\"}", 6.0),
        ("tube_current_watching{tube=\"default\"}", 1.0),
        (
            "sprout_tube_reserve_wait_seconds_count{tube=\"emails\"}",
            2.0,
        ),
        (
            "sprout_tube_age_at_reserve_seconds_count{tube=\"emails\"}",
            2.0,
        ),
        (
            "sprout_tube_reserve_to_delete_seconds_count{tube=\"emails\"}",
            1.0,
        ),
        (
            "sprout_tube_reserve_wait_seconds_bucket{le=\"+Inf\",tube=\"emails\"}",
            2.0,
        ),
    ] {
        assert_eq!(sample(&scrape, name), Some(value), "{name}");
    }
    let oldest = sample(
        &scrape,
        "sprout_tube_oldest_ready_age_seconds{tube=\"emails\"}",
    );
    assert!(
        oldest.is_some_and(|age| (0.0..60.0).contains(&age)),
        "{oldest:?}"
    );
    assert_eq!(
        sample(&scrape, "tube_name{tube=\"emails\"}"),
        None,
        "text is left out"
    );
}

#[test]
fn store_and_embedded_bridge_figures() {
    if !bridge_common::can_run("store_and_embedded_bridge_figures") {
        return;
    }
    let redis = bridge_common::Redis::start();
    let dir = common::TempDir::new();
    let store = dir.path().join("store");
    let url = redis.url();
    let args = [
        "-b",
        store.to_str().unwrap(),
        "--redis-bridge",
        &url,
        "--bridge-tube",
        "expired",
        "--bridge-match",
        "session:*",
    ];
    let (_server, http) = start(&args);
    redis.set_px("session:1", "x", 600_000);
    redis.set_px("session:2", "x", 600_000);
    // The bridge learns the keys from Redis's events or its first scan.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let scrape = loop {
        let scrape = http.raw("GET", "/metrics", &[], None).text;
        let done = sample(&scrape, "sprout_bridge_timers_pending") == Some(2.0)
            && sample(&scrape, "sprout_bridge_keys") == Some(2.0);
        if done || std::time::Instant::now() > deadline {
            break scrape;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(sample(&scrape, "sprout_bridge_keys"), Some(2.0), "{scrape}");
    assert_eq!(sample(&scrape, "sprout_bridge_timers_pending"), Some(2.0));
    let on_disk = sample(&scrape, "sprout_store_disk_bytes").expect("with -b");
    assert!(on_disk > 0.0, "{on_disk}");
    let server = http.ok("/api/server");
    assert_eq!(server["bridge"]["tube"], "expired");
    assert_eq!(server["bridge"]["keys"], 2);
    assert_eq!(server["bridge"]["timers_pending"], 2);
    assert!(server["store_disk_bytes"].as_u64().unwrap() > 0);
    if let Some(promtool_path) = program("promtool") {
        let (ok, report) = promtool(&promtool_path, &scrape);
        assert!(ok, "{report}");
    }
}

#[test]
fn the_journal_figures_count_its_writes_and_syncs() {
    if !common::sprout_only("the_journal_figures_count_its_writes_and_syncs") {
        return;
    }
    let dir = common::TempDir::new();
    let store = dir.path().join("store");
    let (server, http) = start(&["-b", store.to_str().unwrap(), "-f", "0"]);
    let before = http.raw("GET", "/metrics", &[], None).text;
    let count = |scrape: &str, name: &str| sample(scrape, name).unwrap_or_else(|| panic!("{name}"));
    let (frames, syncs) = (
        count(&before, "sprout_journal_frames"),
        count(&before, "sprout_journal_sync_seconds_count"),
    );
    // One client, one put at a time: under -f 0 each is written and synced
    // on its own.
    let mut c = server.connect();
    for _ in 0..20 {
        c.put(b"counted");
    }
    let after = http.raw("GET", "/metrics", &[], None).text;
    assert!(
        count(&after, "sprout_journal_frames") >= frames + 20.0,
        "{after}"
    );
    assert!(count(&after, "sprout_journal_records") >= 20.0);
    assert!(count(&after, "sprout_journal_sync_seconds_count") >= syncs + 20.0);
    assert!(count(&after, "sprout_journal_sync_seconds_sum") > 0.0);
    if let Some(promtool_path) = program("promtool") {
        let (ok, report) = promtool(&promtool_path, &after);
        assert!(ok, "{report}");
    }
}
