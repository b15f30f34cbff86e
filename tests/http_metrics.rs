//! `/metrics` on a live server: checked by Debian's `promtool`, named as
//! beanstalkd_exporter names them, with the values `stats` reports.

mod common;
mod http_client;

use std::io::Write;
use std::process::{Command, Stdio};

use common::Client;
use http_client::{program, start};

/// Runs `promtool check metrics` on `scrape`: (success, its output).
fn promtool(promtool: &std::path::Path, scrape: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text.into_owned())
}

/// The value of the sample line `name` (labels included) in `scrape`.
fn sample(scrape: &str, name: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

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
