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
    let (ok, out, _) = admin(&addr, &[&auth[..], &["job", &id.to_string()]].concat());
    assert!(ok);
    assert!(out.contains("body:\nhello there\n"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["pri", "3"]),
        "{out}"
    );

    // Refusals: the API's status and message, and a failing exit.
    // (args, part of stderr)
    let table: [(&[&str], &str); 4] = [
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
    ];
    for (args, message) in table {
        let (ok, _, err) = admin(&addr, args);
        assert!(!ok, "{args:?}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
    let (ok, _, err) = admin("127.0.0.1:1", &["tubes"]);
    assert!(!ok && err.contains("127.0.0.1:1"), "{err}");
}
