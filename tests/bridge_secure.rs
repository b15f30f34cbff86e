//! `sprout bridge` against a secured server: TLS to its `--tls-listen`
//! port and a principal's token from its `--auth` policy, with only the
//! grants the README says a bridge needs. A real redis-server, a real
//! sprout, a real bridge process; a worker on a plain listener the policy
//! gives a principal of its own.

mod bridge_common;
mod common;
#[path = "common/tls.rs"]
mod tls_kit;

use std::process::{Command, Stdio};
use std::time::Duration;

use bridge_common::{bridge_args, can_run, Bridge, Redis, Worker};
use common::{Addr, TempDir, TestServer};
use tls_kit::Pki;

/// `sprout hash-token` of `token`.
fn hash(token: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .arg("hash-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(token.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A server with `--auth` (the bridge by token, the worker by its
/// listener), TLS on one port and plain on another: (server, TLS port).
fn secured(pki: &Pki, dir: &TempDir, plain: u16) -> (TestServer, u16) {
    let policy = format!(
        r#"[[principal]]
name = "bridge"
tokens = ["{}"]
grants = [{{ tubes = ["expired", "bridge-timers.expired"], actions = ["produce", "consume", "inspect"] }}]

[[principal]]
name = "worker"
grants = [{{ tubes = ["expired", "default"], actions = ["consume"] }}]

[listeners]
"127.0.0.1:{plain}" = "worker"
"#,
        hash("bridge-token")
    );
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, policy).unwrap();
    let tls_port = TestServer::free_port();
    let tls_listen = format!("127.0.0.1:{tls_port}");
    let mut args = vec![
        "--auth".to_owned(),
        file.display().to_string(),
        "--tls-listen".into(),
        tls_listen,
        "-l".into(),
        "127.0.0.1".into(),
        "-p".into(),
        plain.to_string(),
    ];
    args.extend(pki.server_args());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = TestServer::spawn(&args, Addr::Tcp(plain)).expect("server starts");
    (server, tls_port)
}

/// `args` pointed at the TLS port by name, with the CA and `token`.
fn secure(
    mut args: Vec<String>,
    pki: &Pki,
    dir: &TempDir,
    tls_port: u16,
    token: &str,
) -> Vec<String> {
    let token_file = dir.path().join(format!("{token}.txt"));
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let server = args.iter().position(|a| a == "--server").unwrap() + 1;
    args[server] = format!("localhost:{tls_port}");
    args.extend([
        "--server-tls-ca".into(),
        pki.path("ca.pem").display().to_string(),
        "--server-token-file".into(),
        token_file.display().to_string(),
    ]);
    args
}

#[test]
fn the_bridge_delivers_through_tls_and_a_token() {
    if !can_run("the_bridge_delivers_through_tls_and_a_token") {
        return;
    }
    let pki = Pki::new();
    let dir = TempDir::new();
    let redis = Redis::start();
    let plain = TestServer::free_port();
    let (_server, tls_port) = secured(&pki, &dir, plain);
    let state = dir.path().join("state");
    let args = bridge_args(&redis, plain, "expired", &["device:*"], &state);
    let args = secure(args, &pki, &dir, tls_port, "bridge-token");
    let _bridge = Bridge::start(&args);
    let mut worker = Worker::new(plain, "expired");
    redis.set_px("device:7", "x", 300);
    let got = worker.next(Duration::from_secs(10)).expect("a delivery");
    assert_eq!(got.key, "device:7");
}

#[test]
fn a_bridge_with_a_wrong_token_is_refused_and_says_so() {
    if !can_run("a_bridge_with_a_wrong_token_is_refused_and_says_so") {
        return;
    }
    let pki = Pki::new();
    let dir = TempDir::new();
    let redis = Redis::start();
    let plain = TestServer::free_port();
    let (server, tls_port) = secured(&pki, &dir, plain);
    let state = dir.path().join("state");
    let args = bridge_args(&redis, plain, "expired", &["device:*"], &state);
    let args = secure(args, &pki, &dir, tls_port, "not-the-token");
    let mut bridge = Bridge::spawn(&args);
    bridge.wait_log("refused the token of --server-token-file (Unauthorized)");
    let log = std::fs::read_to_string(server.stderr_path()).unwrap_or_default();
    assert!(
        !log.contains("not-the-token"),
        "a token in the server's log"
    );
}
