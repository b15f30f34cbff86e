//! The `sprout` binary itself: `-v`, `-h`, bad flags, the `-z` ceiling,
//! SIGTERM, SIGUSR1 (drain mode) and the default listen address.
//!
//! Flag handling is sprout's own and is skipped under `SPROUT_TEST_BINARY`;
//! the signal tests check behaviour beanstalkd shares and run against both.

mod common;

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{binary, sprout_only, Addr, TestServer};

/// Runs the binary with `args`, expecting it to exit within 5 s.
fn run(args: &[&str]) -> Output {
    let mut child = Command::new(binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(5);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running after 5 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("output")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn version_flag() {
    if !sprout_only("version_flag") {
        return;
    }
    let out = run(&["-v"]);
    assert!(
        out.status.success(),
        "-v exited {}: {}",
        out.status,
        text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(env!("CARGO_PKG_VERSION")),
        "-v should print version {}: {stdout:?}",
        env!("CARGO_PKG_VERSION")
    );
}

#[test]
fn help_flag() {
    if !sprout_only("help_flag") {
        return;
    }
    let out = run(&["-h"]);
    assert!(
        out.status.success(),
        "-h exited {}: {}",
        out.status,
        text(&out)
    );
    let help = text(&out);
    for flag in ["-l", "-p", "-z", "-b"] {
        assert!(help.contains(flag), "help does not mention {flag}: {help}");
    }
}

#[test]
fn bad_flags_are_refused() {
    if !sprout_only("bad_flags_are_refused") {
        return;
    }
    for args in [
        &["-Q"][..],
        &["-p", "notaport"],
        &["-z", "lots"],
        &["-p"],
        &["stray"],
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(!out.stderr.is_empty(), "{args:?}: no message on stderr");
    }
}

#[test]
fn job_size_above_one_gib_is_lowered_to_one_gib() {
    // beanstalkd's rule, kept for drop-in compatibility: a warning, then 1 GiB.
    let s = TestServer::start(&["-z", "1073741825"]);
    assert_eq!(s.connect().stat("max-job-size"), "1073741824");
    let s = TestServer::start(&["-z", "1073741824"]);
    assert_eq!(s.connect().stat("max-job-size"), "1073741824");
}

#[test]
fn default_listen_address_is_loopback() {
    if !sprout_only("default_listen_address_is_loopback") {
        return;
    }
    let port = TestServer::free_port();
    let port_s = port.to_string();
    let s = TestServer::spawn(&["-p", &port_s], Addr::Tcp(port)).expect("start");
    s.connect()
        .exchange(b"list-tube-used\r\n", b"USING default\r\n");
    // /proc/net/tcp lists the listening socket as 0100007F (127.0.0.1), not
    // 00000000 (0.0.0.0, beanstalkd's default).
    let tcp = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let suffix = format!(":{port:04X}");
    let listening: Vec<&str> = tcp
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[1].ends_with(&suffix) && f[3] == "0A").then_some(f[1])
        })
        .collect();
    assert_eq!(listening, [format!("0100007F{suffix}")]);
}

#[test]
fn sigterm_stops_promptly_and_frees_the_port() {
    let mut s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put(b"x");
    c.send(b"reserve\r\n"); // a reserved job and a busy connection
    c.expect(b"RESERVED 1 1\r\nx\r\n");
    let mut waiter = s.connect();
    waiter.send(b"reserve\r\n");
    let start = Instant::now();
    s.signal(libc::SIGTERM);
    let status = s
        .wait_exit(Duration::from_secs(1))
        .expect("still running 1 s after SIGTERM");
    assert!(start.elapsed() < Duration::from_secs(1));
    eprintln!("exit status after SIGTERM: {status}");
    TcpListener::bind(("127.0.0.1", s.port())).expect("port not free after exit");
}

#[test]
fn sigusr1_enters_drain_mode() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put(b"before");
    s.signal(libc::SIGUSR1);
    c.wait_stat("draining", "true");
    c.exchange(b"put 0 0 60 5\r\nafter\r\n", b"DRAINING\r\n");
    // The body was consumed; everything else still works.
    c.exchange(b"list-tube-used\r\n", b"USING default\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 1 6\r\nbefore\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    // Body checks come first: a bad body is still EXPECTED_CRLF.
    c.exchange(
        b"put 0 0 60 1\r\nxyz\r\n",
        b"EXPECTED_CRLF\r\nUNKNOWN_COMMAND\r\n",
    );
    assert_eq!(c.stat("cmd-put"), "3");
    assert_eq!(c.stat("total-jobs"), "1");
}

/// Without -V (warnings only) a server still says where it listens, what
/// it recovered, and that it shuts down, one line each; nothing else.
#[test]
fn the_default_log_level_says_what_the_server_is_doing() {
    if !sprout_only("the_default_log_level_says_what_the_server_is_doing") {
        return;
    }
    let store = common::TempDir::new();
    let mut server = TestServer::start_with_store(store.path(), &[]);
    server.connect().put(b"one");
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
    let log = server.stderr();
    let port = server.port();
    // (what, count)
    let table = [
        (format!("listening on 127.0.0.1:{port}"), 1),
        (format!("recovered from {}", store.path().display()), 1),
        ("SIGTERM: shutting down".to_owned(), 1),
    ];
    for (what, count) in &table {
        assert_eq!(log.matches(what.as_str()).count(), *count, "{what}: {log}");
    }
    assert_eq!(log.lines().count(), table.len(), "only those: {log}");
}

/// The same lines with `--log-format json`: one JSON object each, under
/// the `sprout::status` target, the recovery's figures as fields.
#[test]
fn the_default_status_lines_are_json_with_log_format_json() {
    if !sprout_only("the_default_status_lines_are_json_with_log_format_json") {
        return;
    }
    let store = common::TempDir::new();
    let mut server = TestServer::start_with_store(store.path(), &["--log-format", "json"]);
    server.connect().put(b"one");
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
    let log = server.stderr();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let messages: Vec<&str> = lines
        .iter()
        .map(|v| v["fields"]["message"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert!(
        lines
            .iter()
            .all(|v| v["target"] == "sprout::status" && v["level"] == "INFO"),
        "{log}"
    );
    let port = server.port();
    assert_eq!(
        messages[0],
        format!("listening on 127.0.0.1:{port}"),
        "{log}"
    );
    assert!(
        messages[1].starts_with(&format!("recovered from {} in ", store.path().display())),
        "{log}"
    );
    assert_eq!(lines[1]["fields"]["jobs"], 0, "{log}");
    assert_eq!(messages[2], "SIGTERM: shutting down", "{log}");
}
