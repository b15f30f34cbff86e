//! `sprout admin` against a real server's `--http` port.

mod common;
mod http_client;

use std::process::Command;

use http_client::start;
use serde_json::Value;

/// Runs `sprout admin --http ADDR ARGS…`: (success, stdout, stderr).
fn admin(addr: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["admin", "--http", addr])
        .args(args)
        .output()
        .expect("sprout admin runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn admin_lists_kicks_flushes_and_reports_errors() {
    if !common::sprout_only("admin_lists_kicks_flushes_and_reports_errors") {
        return;
    }
    let (server, http) = start(&["--http-token", "t0ken"]);
    let addr = http.base.trim_start_matches("http://").to_owned();
    let mut c = server.connect();
    assert_eq!(c.line("use mail"), "USING mail");
    c.line("watch mail");
    for body in ["a", "b", "c"] {
        c.put(body.as_bytes());
    }
    for _ in 0..2 {
        c.send(b"reserve\r\n");
        let line = c.expect_line();
        let id = line.split(' ').nth(1).unwrap().to_owned();
        c.read_exact_bytes(3);
        assert_eq!(c.line(&format!("bury {id} 0")), "BURIED");
    }
    let auth = ["--token", "t0ken"];

    let (ok, out, err) = admin(&addr, &[&auth[..], &["tubes"]].concat());
    assert!(ok, "{err}");
    let mail = out
        .lines()
        .find(|l| l.starts_with("mail"))
        .expect("mail listed");
    let cells: Vec<&str> = mail.split_whitespace().collect();
    assert_eq!(&cells[..5], ["mail", "1", "0", "0", "2"], "{out}");

    let (ok, out, _) = admin(
        &addr,
        &[&auth[..], &["--json", "jobs", "mail", "--state", "buried"]].concat(),
    );
    assert!(ok);
    let page: Value = serde_json::from_str(&out).expect("--json prints JSON");
    let buried: Vec<u64> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(buried.len(), 2);

    let (ok, out, _) = admin(
        &addr,
        &[&auth[..], &["kick-job", &buried[0].to_string()]].concat(),
    );
    assert!(ok);
    assert_eq!(out, format!("kicked {}\n", buried[0]));
    let (ok, out, _) = admin(
        &addr,
        &[&auth[..], &["flush", "mail", "--state", "buried"]].concat(),
    );
    assert!(ok);
    assert_eq!(out, "deleted 1\n");
    assert_eq!(c.tube_stat("mail", "current-jobs-buried"), "0");
    assert_eq!(c.tube_stat("mail", "current-jobs-ready"), "2");

    let (ok, out, _) = admin(
        &addr,
        &[&auth[..], &["put", "mail", "hello there", "--pri", "3"]].concat(),
    );
    assert!(ok);
    let id: u64 = out.trim().strip_prefix("id ").unwrap().parse().unwrap();
    let ready_id = id.to_string();
    let (ok, out, _) = admin(&addr, &[&auth[..], &["job", &id.to_string()]].concat());
    assert!(ok);
    assert!(out.contains("body:\nhello there\n"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["pri", "3"]),
        "{out}"
    );

    // A body that would drive a terminal is shown escaped, --raw gives
    // its bytes; ages read in human units.
    c.line("use bin");
    let raw_body = b"\x1b[2J\xff\x00end";
    let id = c.put(raw_body);
    let (ok, out, err) = admin(&addr, &[&auth[..], &["job", &id.to_string()]].concat());
    assert!(ok, "{err}");
    assert!(out.contains("body:\n\\u{1b}[2J\\xff\\u{0}end\n"), "{out}");
    assert!(!out.contains('\x1b'), "{out}");
    let age = out.lines().find(|l| l.starts_with("age ")).expect("age");
    assert!(
        age.trim_end().ends_with("ms") || age.trim_end().ends_with('s'),
        "{age}"
    );
    assert!(!age.contains("0.0000"), "{age}");
    let raw = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["admin", "--token", "t0ken", "job", "--raw", &id.to_string()])
        .env("SPROUT_ADMIN_HTTP", &addr)
        .output()
        .expect("sprout admin runs");
    assert!(raw.status.success(), "{raw:?}");
    assert_eq!(
        raw.stdout, raw_body,
        "--raw, address from SPROUT_ADMIN_HTTP"
    );

    // Refusals: the API's status and message, and a failing exit.
    // (args, part of stderr)
    let table: [(&[&str], &str); 7] = [
        (&["tubes"], "401"),
        (
            &["--token", "t0ken", "flush", "mail", "--state", "later"],
            "400 Bad Request: bad state",
        ),
        (
            &["--token", "t0ken", "delete", "999999"],
            "404 Not Found: no such job",
        ),
        (&["--token", "t0ken", "kick", "nope", "1"], "no such tube"),
        (
            &["--token", "t0ken", "flush", "nosuch", "--state", "ready"],
            "404 Not Found: no such tube",
        ),
        (
            &["--token", "t0ken", "flush", "mail", "--state", "reserved"],
            "409 Conflict: flush cannot take reserved jobs",
        ),
        (
            &["--token", "t0ken", "kick-job", &ready_id],
            "409 Conflict: the job is ready: only buried or delayed jobs can be kicked",
        ),
    ];
    for (args, message) in table {
        let (ok, _, err) = admin(&addr, args);
        assert!(!ok, "{args:?}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
    let help = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["admin", "--help"])
        .env_remove("SPROUT_ADMIN_HTTP")
        .output()
        .expect("sprout admin --help runs");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("127.0.0.1:11380"), "{help}");
    assert!(help.contains("SPROUT_ADMIN_HTTP"), "{help}");
    let log = server.stderr();
    assert!(
        log.contains(&format!("HTTP API and dashboard on http://{addr}")),
        "said without -V: {log}"
    );
    let (ok, _, err) = admin("127.0.0.1:1", &["tubes"]);
    assert!(!ok && err.contains("127.0.0.1:1"), "{err}");
}
