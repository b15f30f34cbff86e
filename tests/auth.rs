//! `--auth` end to end, as byte transcripts against the real binary.
//!
//! One transcript per action (produce, consume, inspect, admin) runs for
//! every principal of the test policy, authenticated three ways: by
//! token over TCP, by its client certificate on a mutual-TLS listener
//! (no `auth` sent), and by its listener (a unix socket the policy gives
//! it); each expects every command's exact answer where the principal
//! has the action and FORBIDDEN (changing nothing) where it has not. The
//! same transcripts run without `--auth`, where everything is allowed;
//! that test, like `auth` being an unknown command there, also runs
//! against beanstalkd 1.13 (`SPROUT_TEST_BINARY`), to show `--auth`
//! absent changes no byte. On a TLS listener, a certificate the policy
//! knows beats the listener's principal, and one it does not know gets
//! the listener's principal or, where the listener has none, must `auth`.
//! Then what happens before `auth`, the failure limits, a 1 MiB line and
//! a 64 MiB body before `auth`, the deadline, the audit trail, the
//! metrics, `list-tubes` and `stats` as an inspector of some tubes sees
//! them, and `sprout hash-token`.
//!
//! Certificates are made per server with `common/certs.rs` (through
//! `common/tls.rs`'s `Pki`).

mod common;
mod http_client;
#[path = "common/tls.rs"]
mod tls_kit;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{foreign_binary, parse_yaml_list, sprout_only, Addr, Client, TempDir, TestServer};
use sprout_testkit::status_kb;
use tls_kit::{tls_client, Pki};

/// The test policy's principals: each has a token (`<name>-token-0123`)
/// and a client certificate ([`cert_name`]), the first four also a
/// unix-socket listener. All grants are on `jobs.*` but root's, which is
/// everything on every tube.
const PRINCIPALS: [&str; 5] = ["producer", "consumer", "inspector", "admin", "root"];

fn token(who: &str) -> String {
    format!("{who}-token-0123")
}

/// How the policy names `who`'s client certificate (common name
/// `<name>-1`, DNS name `<name>.internal`): some by the DNS name, the
/// others by the common name.
fn cert_name(who: &str) -> String {
    match who {
        "producer" | "inspector" | "root" => format!("DNS:{who}.internal"),
        _ => format!("CN={who}-1"),
    }
}

/// What a principal may do in these transcripts.
#[derive(Clone, Copy, Debug)]
struct Rights {
    produce: bool,
    consume: bool,
    inspect: bool,
    admin: bool,
    /// Inspect on every tube: `list-tubes` and `stats` show everything.
    everywhere: bool,
}

/// A server without `--auth`: everything.
const EVERYTHING: Rights = Rights {
    produce: true,
    consume: true,
    inspect: true,
    admin: true,
    everywhere: true,
};

fn rights(who: &str) -> Rights {
    let only = |action: &str| Rights {
        produce: action == "producer",
        consume: action == "consumer",
        inspect: action == "inspector",
        admin: action == "admin",
        everywhere: false,
    };
    match who {
        "root" => EVERYTHING,
        who => only(who),
    }
}

impl Rights {
    /// `use` is for putting, peeking or kicking there.
    fn may_use(self) -> bool {
        self.produce || self.inspect || self.admin
    }
}

/// `sprout hash-token` on `input`: (exit success, stdout, stderr).
fn hash_token(input: &[u8]) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .arg("hash-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sprout runs");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.success(), text(out.stdout), text(out.stderr))
}

/// The policy: each principal's grants, token and certificate, and
/// `listeners` (as `[listeners]` spells them, and whose).
fn policy(listeners: &[(String, &str)]) -> String {
    let mut text = String::new();
    for who in PRINCIPALS {
        let (ok, hash, _) = hash_token(format!("{}\n", token(who)).as_bytes());
        assert!(ok);
        let action = match who {
            "producer" => "produce",
            "consumer" => "consume",
            "inspector" => "inspect",
            "admin" => "admin",
            _ => "",
        };
        let grants = match who {
            "root" => r#"{ tubes = ["*"], actions = ["produce", "consume", "inspect", "admin"] }"#
                .to_owned(),
            _ => format!(r#"{{ tubes = ["jobs.*"], actions = ["{action}"] }}"#),
        };
        text += &format!(
            "[[principal]]\nname = \"{who}\"\ntokens = [\"{}\"]\ncerts = [\"{}\"]\n\
             grants = [{grants}]\n\n",
            hash.trim(),
            cert_name(who)
        );
    }
    text += "[listeners]\n";
    for (listener, who) in listeners {
        text += &format!("\"{listener}\" = \"{who}\"\n");
    }
    text
}

/// A sprout with `--auth`: a plain listener on 127.0.0.1, a unix socket
/// for each of the first four principals, and two mutual-TLS listeners
/// (the clients' CA is `pki`'s root): `tls`, which the policy gives no
/// principal, and `inspectors_tls`, which it gives `inspector`.
struct Secured {
    server: TestServer,
    dir: TempDir,
    pki: Pki,
    tls: u16,
    inspectors_tls: u16,
}

/// How a connection comes to act as a principal.
#[derive(Clone, Copy, Debug)]
enum Way {
    Token,
    Certificate,
    Listener,
}

impl Way {
    const ALL: [Way; 3] = [Way::Token, Way::Certificate, Way::Listener];

    fn name(self) -> &'static str {
        match self {
            Way::Token => "token",
            Way::Certificate => "cert",
            Way::Listener => "listener",
        }
    }
}

impl Secured {
    fn start(extra: &[&str]) -> Secured {
        let dir = TempDir::new();
        let pki = Pki::new();
        for who in PRINCIPALS.iter().chain(&["stranger"]) {
            pki.client(who, &format!("{who}-1"), &[&format!("{who}.internal")]);
        }
        let socket = |who: &str| dir.path().join(format!("{who}.sock"));
        let (tls, inspectors_tls) = (TestServer::free_port(), TestServer::free_port());
        let mut listeners: Vec<(String, &str)> = PRINCIPALS[..4]
            .iter()
            .map(|who| (format!("unix:{}", socket(who).display()), *who))
            .collect();
        // As --tls-listen binds it.
        listeners.push((format!("127.0.0.1:{inspectors_tls}"), "inspector"));
        let file = dir.path().join("policy.toml");
        std::fs::write(&file, policy(&listeners)).unwrap();
        let port = TestServer::free_port().to_string();
        let mut args = vec!["-l".to_owned(), "127.0.0.1".to_owned()];
        for who in &PRINCIPALS[..4] {
            args.extend(["-l".to_owned(), format!("unix:{}", socket(who).display())]);
        }
        args.extend(["-p".into(), port.clone()]);
        for tls_port in [tls, inspectors_tls] {
            args.extend(["--tls-listen".into(), format!("127.0.0.1:{tls_port}")]);
        }
        args.extend(pki.server_args());
        args.extend([
            "--tls-client-ca".into(),
            pki.path("ca.pem").display().to_string(),
        ]);
        args.extend(["--auth".into(), file.display().to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = TestServer::spawn(&args, Addr::Tcp(port.parse().unwrap()))
            .unwrap_or_else(|e| panic!("{e}"));
        Secured {
            server,
            dir,
            pki,
            tls,
            inspectors_tls,
        }
    }

    /// A TCP connection that has authenticated as `who`.
    fn as_(&self, who: &str) -> Client {
        let mut c = self.server.connect();
        c.exchange(
            format!("auth {}\r\n", token(who)).as_bytes(),
            b"AUTHENTICATED\r\n",
        );
        c
    }

    /// A connection on `who`'s unix socket: `who` without a credential.
    fn listener_of(&self, who: &str) -> Client {
        Client::unix(&self.dir.path().join(format!("{who}.sock")))
    }

    /// A connection to the TLS listener on `port` showing `cert`'s
    /// certificate (a principal's, or `stranger`'s, which the policy does
    /// not know).
    fn showing(&self, port: u16, cert: &str) -> Client {
        tls_client(port, self.pki.client_config(Some(cert)))
    }

    /// A connection acting as `who`, made the `way` given.
    fn connect_as(&self, who: &str, way: Way) -> Client {
        match way {
            Way::Token => self.as_(who),
            Way::Certificate => self.showing(self.tls, who),
            Way::Listener => self.listener_of(who),
        }
    }
}

/// `root` puts `body` into `tube`; the job's id.
fn put_into(root: &mut Client, tube: &str, body: &[u8]) -> u64 {
    root.exchange(
        format!("use {tube}\r\n").as_bytes(),
        format!("USING {tube}\r\n").as_bytes(),
    );
    root.put(body)
}

fn forbidden_or(allowed: bool, answer: &[u8]) -> Vec<u8> {
    match allowed {
        true => answer.to_vec(),
        false => b"FORBIDDEN\r\n".to_vec(),
    }
}

/// `use`, `put`: produce (a refused put changes no counter).
fn produce(c: &mut Client, root: &mut Client, tube: &str, r: Rights, _ext: bool) {
    let using = format!("USING {tube}\r\n");
    c.exchange(
        format!("use {tube}\r\n").as_bytes(),
        &forbidden_or(r.may_use(), using.as_bytes()),
    );
    let puts = root.stat("cmd-put");
    if r.produce {
        let id = c.put(b"hello");
        assert_eq!(root.peek(id).as_deref(), Some(&b"hello"[..]));
        root.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    } else {
        c.exchange(b"put 0 0 60 5\r\nhello\r\n", b"FORBIDDEN\r\n");
        assert_eq!(root.stat("cmd-put"), puts, "a refused put counts nothing");
        assert_eq!(root.stat("current-jobs-ready"), "0");
    }
}

/// `watch`, `reserve*`, `touch`, `release`, `bury`, `delete` of its job:
/// consume.
fn consume(c: &mut Client, root: &mut Client, tube: &str, r: Rights, ext: bool) {
    let id = put_into(root, tube, b"work");
    let reserved = format!("RESERVED {id} 4\r\nwork\r\n");
    let reserved = reserved.as_bytes();
    c.exchange(
        format!("watch {tube}\r\n").as_bytes(),
        &forbidden_or(r.consume, b"WATCHING 2\r\n"),
    );
    let ignored: &[u8] = if r.consume {
        b"WATCHING 1\r\n"
    } else {
        b"NOT_IGNORED\r\n"
    };
    c.exchange(b"ignore default\r\n", ignored);
    let with_id = |cmd: &str| format!("{cmd}\r\n").replace("ID", &id.to_string());
    if r.consume {
        c.exchange(b"reserve-with-timeout 0\r\n", reserved);
        c.exchange(with_id("touch ID").as_bytes(), b"TOUCHED\r\n");
        c.exchange(with_id("release ID 0 0").as_bytes(), b"RELEASED\r\n");
        c.exchange(with_id("reserve-job ID").as_bytes(), reserved);
        c.exchange(with_id("bury ID 0").as_bytes(), b"BURIED\r\n");
        root.exchange(with_id("kick-job ID").as_bytes(), b"KICKED\r\n");
        match ext {
            true => c.exchange(
                b"reserve-batch 5\r\n",
                &[b"RESERVED_BATCH 1\r\n", reserved].concat(),
            ),
            false => c.exchange(b"reserve\r\n", reserved),
        }
        c.exchange(with_id("delete ID").as_bytes(), b"DELETED\r\n");
        return;
    }
    // Watching `default`, which it may not consume.
    c.exchange(b"reserve-with-timeout 0\r\n", b"FORBIDDEN\r\n");
    c.exchange(b"reserve\r\n", b"FORBIDDEN\r\n");
    c.exchange(with_id("reserve-job ID").as_bytes(), b"FORBIDDEN\r\n");
    if ext {
        c.exchange(b"reserve-batch 5\r\n", b"FORBIDDEN\r\n");
    }
    assert_eq!(root.tube_stat(tube, "current-jobs-ready"), "1");
    // Someone else's job: the engine's NOT_FOUND, as ever.
    root.exchange(with_id("reserve-job ID").as_bytes(), reserved);
    for cmd in ["touch ID", "release ID 0 0", "bury ID 0"] {
        c.exchange(with_id(cmd).as_bytes(), b"NOT_FOUND\r\n");
    }
    root.exchange(with_id("delete ID").as_bytes(), b"DELETED\r\n");
}

/// `peek*`, `stats*`, `list-tubes`: inspect.
fn inspect(c: &mut Client, root: &mut Client, tube: &str, r: Rights, ext: bool) {
    let id = put_into(root, tube, b"seen");
    let found = format!("FOUND {id} 4\r\nseen\r\n");
    let found = found.as_bytes();
    c.exchange(
        format!("peek {id}\r\n").as_bytes(),
        &forbidden_or(r.inspect, found),
    );
    if r.inspect {
        let job = c.ok_body(format!("stats-job {id}\r\n").as_bytes());
        assert!(job.contains(&format!("tube: \"{tube}\"\n")), "{job}");
        let figures = c.ok_body(format!("stats-tube {tube}\r\n").as_bytes());
        assert!(figures.contains("current-jobs-ready: 1\n"), "{figures}");
    } else {
        c.exchange(format!("stats-job {id}\r\n").as_bytes(), b"FORBIDDEN\r\n");
        c.exchange(
            format!("stats-tube {tube}\r\n").as_bytes(),
            b"FORBIDDEN\r\n",
        );
    }
    let using = format!("USING {tube}\r\n");
    c.exchange(
        format!("use {tube}\r\n").as_bytes(),
        &forbidden_or(r.may_use(), using.as_bytes()),
    );
    c.exchange(b"peek-ready\r\n", &forbidden_or(r.inspect, found));
    c.exchange(
        b"peek-delayed\r\n",
        &forbidden_or(r.inspect, b"NOT_FOUND\r\n"),
    );
    c.exchange(
        b"peek-buried\r\n",
        &forbidden_or(r.inspect, b"NOT_FOUND\r\n"),
    );
    if ext {
        c.exchange(
            b"peek-reserved\r\n",
            &forbidden_or(r.inspect, b"NOT_FOUND\r\n"),
        );
    }
    let tubes = parse_yaml_list(&c.ok_body(b"list-tubes\r\n"));
    let listed = |t: &str| tubes.iter().any(|listed| listed == t);
    assert_eq!(listed(tube), r.inspect, "{tubes:?}");
    assert_eq!(listed("default"), r.everywhere, "{tubes:?}");
    if r.inspect {
        let stats = c.ok_body(b"stats\r\n");
        assert!(stats.contains("current-jobs-ready: "), "{stats}");
    } else {
        c.exchange(b"stats\r\n", b"FORBIDDEN\r\n");
    }
    if ext {
        let unknown_group = forbidden_or(r.everywhere, b"NOT_FOUND\r\n");
        c.exchange(b"stats-group g\r\n", &unknown_group);
    }
    root.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
}

/// `kick-job`, `kick`, `pause-tube`, `delete` of another's job,
/// `flush-tube`: admin.
fn admin(c: &mut Client, root: &mut Client, tube: &str, r: Rights, ext: bool) {
    let id = put_into(root, tube, b"stuck");
    root.exchange(
        format!("reserve-job {id}\r\n").as_bytes(),
        format!("RESERVED {id} 5\r\nstuck\r\n").as_bytes(),
    );
    root.exchange(format!("bury {id} 0\r\n").as_bytes(), b"BURIED\r\n");
    c.exchange(
        format!("kick-job {id}\r\n").as_bytes(),
        &forbidden_or(r.admin, b"KICKED\r\n"),
    );
    assert_eq!(
        root.job_stat(id, "state"),
        if r.admin { "ready" } else { "buried" }
    );
    if !r.admin {
        root.exchange(format!("kick-job {id}\r\n").as_bytes(), b"KICKED\r\n");
    }
    let using = format!("USING {tube}\r\n");
    c.exchange(
        format!("use {tube}\r\n").as_bytes(),
        &forbidden_or(r.may_use(), using.as_bytes()),
    );
    c.exchange(b"kick 5\r\n", &forbidden_or(r.admin, b"KICKED 0\r\n"));
    c.exchange(
        format!("pause-tube {tube} 0\r\n").as_bytes(),
        &forbidden_or(r.admin, b"PAUSED\r\n"),
    );
    c.exchange(
        format!("delete {id}\r\n").as_bytes(),
        &forbidden_or(r.admin, b"DELETED\r\n"),
    );
    if !r.admin {
        assert_eq!(root.tube_stat(tube, "pause"), "0");
        root.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    }
    if ext {
        let id = put_into(root, tube, b"more");
        c.exchange(
            format!("flush-tube {tube}\r\n").as_bytes(),
            &forbidden_or(r.admin, b"FLUSHED 1\r\n"),
        );
        if !r.admin {
            root.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
        }
    }
}

type Transcript = fn(&mut Client, &mut Client, &str, Rights, bool);

const ACTIONS: [(&str, Transcript); 4] = [
    ("produce", produce),
    ("consume", consume),
    ("inspect", inspect),
    ("admin", admin),
];

#[test]
fn every_action_allowed_and_forbidden_by_token_certificate_and_listener() {
    if !sprout_only("every_action_allowed_and_forbidden_by_token_certificate_and_listener") {
        return;
    }
    let s = Secured::start(&[]);
    let mut root = s.as_("root");
    for who in PRINCIPALS {
        for way in Way::ALL {
            if matches!(way, Way::Listener) && who == "root" {
                continue;
            }
            for (action, transcript) in ACTIONS {
                let mut c = s.connect_as(who, way);
                let tube = format!("jobs.{who}.{action}.{}", way.name());
                eprintln!("{who} ({}) {action}", way.name());
                transcript(&mut c, &mut root, &tube, rights(who), true);
            }
        }
    }
}

#[test]
fn on_a_tls_listener_the_certificates_principal_else_the_listeners_else_auth() {
    let test = "on_a_tls_listener_the_certificates_principal_else_the_listeners_else_auth";
    if !sprout_only(test) {
        return;
    }
    let s = Secured::start(&[]);
    // A certificate the policy does not know, on a listener that gives
    // no principal: like any connection without one, it must `auth`.
    let mut c = s.showing(s.tls, "stranger");
    c.exchange(b"use jobs.a\r\n", b"AUTH_REQUIRED\r\n");
    c.exchange(
        format!("auth {}\r\n", token("producer")).as_bytes(),
        b"AUTHENTICATED\r\n",
    );
    c.exchange(b"use jobs.a\r\n", b"USING jobs.a\r\n");
    let id = c.put(b"order");
    c.exchange(format!("peek {id}\r\n").as_bytes(), b"FORBIDDEN\r\n");
    // The same certificate on the listener the policy names (as
    // `127.0.0.1:PORT`): the listener's principal, `inspector`.
    let mut c = s.showing(s.inspectors_tls, "stranger");
    c.exchange(
        format!("peek {id}\r\n").as_bytes(),
        format!("FOUND {id} 5\r\norder\r\n").as_bytes(),
    );
    c.exchange(b"use jobs.a\r\n", b"USING jobs.a\r\n");
    c.exchange(b"put 0 0 60 1\r\nx\r\n", b"FORBIDDEN\r\n");
    // A certificate the policy knows beats the listener's principal.
    let mut c = s.showing(s.inspectors_tls, "producer");
    c.exchange(b"use jobs.a\r\n", b"USING jobs.a\r\n");
    c.put(b"more");
    c.exchange(format!("peek {id}\r\n").as_bytes(), b"FORBIDDEN\r\n");
    let log = s.server.stderr();
    assert!(!log.contains("does not have"), "{log}");
}

#[test]
fn the_same_transcripts_without_auth() {
    // Also against beanstalkd (SPROUT_TEST_BINARY): tuber's commands only
    // against sprout.
    let s = TestServer::start(&[]);
    let ext = !foreign_binary();
    let mut root = s.connect();
    for (action, transcript) in ACTIONS {
        let mut c = s.connect();
        transcript(
            &mut c,
            &mut root,
            &format!("jobs.{action}"),
            EVERYTHING,
            ext,
        );
    }
}

#[test]
fn auth_is_an_unknown_command_without_auth() {
    // Also against beanstalkd: counted nowhere, changes nothing.
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let before = c.stats_of("stats");
    for line in [
        &b"auth s3cret\r\n"[..],
        b"auth\r\n",
        b"auth \r\n",
        b"authx y\r\n",
    ] {
        c.exchange(line, b"UNKNOWN_COMMAND\r\n");
    }
    let after = c.stats_of("stats");
    let moved: Vec<_> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(b, _)| b.0.as_str())
        .filter(|key| !["cmd-stats", "rusage-utime", "rusage-stime", "uptime"].contains(key))
        .collect();
    assert!(moved.is_empty(), "{moved:?}");
    c.exchange(b"list-tube-used\r\n", b"USING default\r\n");
}

#[test]
fn before_auth_every_command_answers_auth_required_and_changes_nothing() {
    if !sprout_only("before_auth_every_command_answers_auth_required_and_changes_nothing") {
        return;
    }
    let s = Secured::start(&[]);
    let mut c = s.server.connect();
    let mut long = vec![b'x'; 300];
    long.extend_from_slice(b"\r\n");
    for line in [
        &b"stats\r\n"[..],
        b"use jobs.a\r\n",
        b"watch jobs.a\r\n",
        b"put 0 0 60 3\r\nabc\r\n",
        b"put 0 0 60 3 grp:g\r\nabc\r\n",
        b"reserve\r\n",
        b"peek 1\r\n",
        b"kick 10\r\n",
        b"pause-tube default 10\r\n",
        b"list-tubes\r\n",
        b"list-tube-used\r\n",
        // Lines the parser refuses too: nothing about the server leaks.
        b"foo\r\n",
        b"put 0 0 60\r\n",
        &long,
    ] {
        c.exchange(line, b"AUTH_REQUIRED\r\n");
    }
    // Pipelined: the body after an `auth` is read under its outcome.
    c.send(format!("auth {}\r\nput 0 0 60 2\r\nhi\r\n", token("root")).as_bytes());
    c.expect(b"AUTHENTICATED\r\nINSERTED 1\r\n");
    let stats = c.stats_of("stats");
    for (key, want) in [
        ("cmd-put", "1"),
        ("cmd-use", "0"),
        ("cmd-watch", "0"),
        ("cmd-reserve", "0"),
        ("cmd-peek", "0"),
        ("cmd-kick", "0"),
        ("cmd-pause-tube", "0"),
        ("cmd-list-tubes", "0"),
        ("cmd-list-tube-used", "0"),
        ("total-jobs", "1"),
        ("current-tubes", "1"),
        ("current-producers", "1"),
    ] {
        assert_eq!(common::lookup(&stats, key), want, "{key}");
    }
    // `quit` is answered by closing, as ever.
    let mut d = s.server.connect();
    d.send(b"quit\r\n");
    d.expect_closed();
}

#[test]
fn three_failures_close_the_connection() {
    if !sprout_only("three_failures_close_the_connection") {
        return;
    }
    let s = Secured::start(&[]);
    let mut c = s.server.connect();
    c.exchange(b"auth wrong\r\n", b"UNAUTHORIZED\r\n");
    c.exchange(b"auth \r\n", b"UNAUTHORIZED\r\n");
    c.exchange(b"stats\r\n", b"AUTH_REQUIRED\r\n");
    c.exchange(b"auth also-wrong\r\n", b"UNAUTHORIZED\r\n");
    c.expect_closed();
    // A wrong token on an authenticated connection keeps its principal.
    let mut c = s.as_("producer");
    c.exchange(b"auth wrong\r\n", b"UNAUTHORIZED\r\n");
    c.exchange(b"use jobs.a\r\n", b"USING jobs.a\r\n");
    // A good one switches it.
    c.exchange(
        format!("auth {}\r\n", token("consumer")).as_bytes(),
        b"AUTHENTICATED\r\n",
    );
    c.exchange(b"put 0 0 60 1\r\nx\r\n", b"FORBIDDEN\r\n");
    c.exchange(b"watch jobs.a\r\n", b"WATCHING 2\r\n");
}

#[test]
fn wrong_tokens_are_rate_limited_per_address_while_others_are_served() {
    if !sprout_only("wrong_tokens_are_rate_limited_per_address_while_others_are_served") {
        return;
    }
    let s = Secured::start(&[]);
    let mut good = s.as_("root");
    good.exchange(b"use jobs.a\r\n", b"USING jobs.a\r\n");
    good.exchange(b"watch jobs.a\r\n", b"WATCHING 2\r\n");
    let mut wrong = 0;
    while wrong < 10 {
        let mut bad = s.server.connect();
        for _ in 0..3.min(10 - wrong) {
            bad.exchange(
                format!("auth guess-{wrong}\r\n").as_bytes(),
                b"UNAUTHORIZED\r\n",
            );
            wrong += 1;
            // The good client is served between the guesses.
            let id = good.put(b"job");
            good.exchange(
                b"reserve-with-timeout 0\r\n",
                format!("RESERVED {id} 3\r\njob\r\n").as_bytes(),
            );
            good.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
        }
    }
    // From this address, even the right token is refused now, unread.
    let mut late = s.server.connect();
    late.exchange(
        format!("auth {}\r\n", token("root")).as_bytes(),
        b"UNAUTHORIZED\r\n",
    );
    late.exchange(b"stats\r\n", b"AUTH_REQUIRED\r\n");
    // Another address (the unix sockets') is not affected.
    let mut other = s.listener_of("producer");
    other.exchange(
        format!("auth {}\r\n", token("root")).as_bytes(),
        b"AUTHENTICATED\r\n",
    );
    // And the good client goes on.
    good.put(b"still here");
}

/// The server's resident memory, in KiB.
fn rss(server: &TestServer) -> u64 {
    status_kb(server.pid(), "VmRSS").expect("VmRSS")
}

#[test]
fn big_input_before_auth_is_not_held() {
    if !sprout_only("big_input_before_auth_is_not_held") {
        return;
    }
    // A server that takes 128 MiB bodies from those who may put.
    let s = Secured::start(&["-z", "134217728"]);
    let mut root = s.as_("root");
    let mut c = s.server.connect();
    // A 1 MiB line.
    let mut line = vec![b'x'; 1 << 20];
    line.extend_from_slice(b"\r\n");
    c.exchange(&line, b"AUTH_REQUIRED\r\n");
    // A 64 MiB body, sent while the memory is watched.
    let before = rss(&s.server);
    let size = 64 << 20;
    c.send(format!("put 0 0 60 {size}\r\n").as_bytes());
    let chunk = vec![b'y'; 1 << 20];
    let mut peak = before;
    for _ in 0..64 {
        c.send(&chunk);
        peak = peak.max(rss(&s.server));
    }
    c.send(b"\r\n");
    c.expect(b"AUTH_REQUIRED\r\n");
    let grew = peak.saturating_sub(before);
    assert!(
        grew < 16 << 10,
        "RSS grew {grew} KiB while a 64 MiB body was skipped"
    );
    // Served all along, and the connection still works once it may.
    root.exchange(b"list-tube-used\r\n", b"USING default\r\n");
    c.exchange(
        format!("auth {}\r\n", token("producer")).as_bytes(),
        b"AUTHENTICATED\r\n",
    );
    c.exchange(
        b"use jobs.a\r\nput 0 0 60 2\r\nok\r\n",
        b"USING jobs.a\r\nINSERTED 1\r\n",
    );
}

#[test]
fn a_connection_must_authenticate_within_the_deadline() {
    if !sprout_only("a_connection_must_authenticate_within_the_deadline") {
        return;
    }
    // The TLS handshake's time limit is the one to authenticate in.
    let s = Secured::start(&["--handshake-timeout", "3"]);
    let started = Instant::now();
    let mut silent = s.server.connect();
    let mut chatty = s.server.connect();
    let mut authed = s.as_("root");
    let mut by_cert = s.showing(s.tls, "producer");
    let mut stranger = s.showing(s.tls, "stranger");
    let mut by_listener = s.listener_of("producer");
    while started.elapsed() < Duration::from_millis(2300) {
        chatty.exchange(b"stats\r\n", b"AUTH_REQUIRED\r\n");
        std::thread::sleep(Duration::from_millis(300));
    }
    // 3 s after they connected, all three are closed; talking kept none
    // open, nor did a certificate the policy does not know.
    silent.expect_closed();
    chatty.expect_closed();
    stranger.expect_closed();
    assert!(started.elapsed() >= Duration::from_millis(2900));
    // Those with a principal are not on a clock.
    authed.exchange(b"list-tube-used\r\n", b"USING default\r\n");
    by_cert.exchange(b"use jobs.a\r\n", b"USING jobs.a\r\n");
    by_listener.exchange(b"use jobs.a\r\n", b"USING jobs.a\r\n");
}

#[test]
fn strangers_are_capped_by_max_pending_and_others_are_served() {
    if !sprout_only("strangers_are_capped_by_max_pending_and_others_are_served") {
        return;
    }
    let s = Secured::start(&["--max-pending", "3", "--handshake-timeout", "4"]);
    let mut root = s.as_("root");
    // Each is served (it has its session, and holds a slot) before the
    // next: the third one's TLS handshake is done, yet it holds the slot
    // the handshake took, for a certificate the policy does not know.
    let mut strangers: Vec<Client> = (0..3)
        .map(|i| {
            let mut c = match i {
                2 => s.showing(s.tls, "stranger"),
                _ => s.server.connect(),
            };
            c.exchange(b"stats\r\n", b"AUTH_REQUIRED\r\n");
            c
        })
        .collect();
    // A fourth is closed at once, unanswered.
    let started = Instant::now();
    let mut fourth = s.server.connect();
    fourth.send(b"stats\r\n");
    fourth.expect_closed();
    assert!(started.elapsed() < Duration::from_secs(2));
    // Who has a principal is served meanwhile: already authenticated, or
    // by a listener, which needs no slot.
    root.exchange(b"list-tube-used\r\n", b"USING default\r\n");
    s.listener_of("producer")
        .exchange(b"use jobs.a\r\n", b"USING jobs.a\r\n");
    // One that authenticates gives its slot to the next stranger.
    strangers[0].exchange(
        format!("auth {}\r\n", token("consumer")).as_bytes(),
        b"AUTHENTICATED\r\n",
    );
    let mut next = s.server.connect();
    next.exchange(b"stats\r\n", b"AUTH_REQUIRED\r\n");
    // At the deadline the strangers are gone; the authenticated one stays.
    for c in strangers.iter_mut().skip(1) {
        c.expect_closed();
    }
    strangers[0].exchange(b"watch jobs.a\r\n", b"WATCHING 2\r\n");
    let mut late = s.server.connect();
    late.exchange(
        format!("auth {}\r\n", token("producer")).as_bytes(),
        b"AUTHENTICATED\r\n",
    );
}

#[test]
fn the_audit_trail() {
    if !sprout_only("the_audit_trail") {
        return;
    }
    let s = Secured::start(&["--log-format", "json"]);
    let mut c = s.server.connect();
    c.exchange(b"auth not-the-token-xyzzy\r\n", b"UNAUTHORIZED\r\n");
    c.exchange(
        format!("auth {}\r\n", token("admin")).as_bytes(),
        b"AUTHENTICATED\r\n",
    );
    c.exchange(b"use jobs.a\r\n", b"USING jobs.a\r\n");
    c.exchange(b"kick 3\r\n", b"KICKED 0\r\n");
    c.exchange(b"pause-tube jobs.b 0\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"put 0 0 60 1\r\nx\r\n", b"FORBIDDEN\r\n");
    // The events are written as they happen; wait for the last.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.server.stderr().contains("\"forbidden\"") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = s.server.stderr();
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|e: &serde_json::Value| e["target"] == "sprout::audit")
        .collect();
    let shown: Vec<String> = events
        .iter()
        .map(|e| {
            let f = &e["fields"];
            assert!(f["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{e}");
            assert!(
                f["listener"].as_str().unwrap().starts_with("127.0.0.1:"),
                "{e}"
            );
            assert_eq!(e["level"], "INFO");
            format!(
                "{} {} {} {}",
                f["message"].as_str().unwrap(),
                f["principal"].as_str().unwrap(),
                f["command"].as_str().unwrap(),
                f["outcome"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            "auth unauthenticated auth unauthorized",
            "auth admin auth authenticated",
            "admin admin kick 3 KICKED 0",
            "admin admin pause-tube jobs.b 0 NOT_FOUND",
            "forbidden admin put (1 bytes) forbidden",
        ]
    );
    assert_eq!(events[4]["fields"]["needs"], "produce on jobs.a");
    // No token, wrong or right, and (without -V) nothing but the trail
    // and the status lines (where it listens).
    assert!(
        !log.contains("xyzzy") && !log.contains(&token("admin")),
        "{log}"
    );
    let status = log
        .lines()
        .filter(|l| l.contains(r#""target":"sprout::status""#));
    assert_eq!(log.lines().count(), events.len() + status.count(), "{log}");
}

#[test]
fn metrics_count_connections_by_principal_and_failures() {
    if !sprout_only("metrics_count_connections_by_principal_and_failures") {
        return;
    }
    let port = TestServer::free_port();
    let addr = format!("127.0.0.1:{port}");
    let s = Secured::start(&["--http", &addr]);
    let mut http = http_client::Http::at(&format!("http://{addr}"));
    http.wait_ready();
    // Under --auth, /metrics needs inspect on every tube.
    http.token = Some(token("root"));
    let _root = s.as_("root");
    let _anonymous = s.server.connect();
    let _inspectors = [s.listener_of("inspector"), s.listener_of("inspector")];
    // TLS 1.3: the client is through the handshake before the server has
    // read its certificate; an answer shows the server has.
    let mut admin = s.showing(s.tls, "admin");
    admin.exchange(b"list-tube-used\r\n", b"USING default\r\n");
    let mut failing = s.server.connect();
    failing.exchange(b"auth nope\r\n", b"UNAUTHORIZED\r\n");
    let scrape = http.raw("GET", "/metrics", &[], None).text;
    for (line, want) in [
        ("sprout_auth_failures_total", 1),
        ("sprout_connections{principal=\"root\"}", 1),
        ("sprout_connections{principal=\"inspector\"}", 2),
        ("sprout_connections{principal=\"admin\"}", 1),
        ("sprout_connections{principal=\"producer\"}", 0),
        ("sprout_connections{principal=\"unauthenticated\"}", 2),
        ("sprout_connections{principal=\"local\"}", 0),
    ] {
        let value = scrape
            .lines()
            .find_map(|l| l.strip_prefix(line)?.strip_prefix(' ')?.parse::<i64>().ok());
        assert_eq!(value, Some(want), "{line} in\n{scrape}");
    }
    if let Some(promtool) = http_client::program("promtool") {
        // The one counter is OpenMetrics' (HELP and TYPE name the family
        // `sprout_auth_failures`, the sample adds `_total`), which
        // promtool, reading the Prometheus text format, calls help-less;
        // it finds nothing else to say.
        let (_, said) = http_client::promtool(&promtool, &scrape);
        let other: Vec<&str> = said
            .lines()
            .filter(|l| *l != "sprout_auth_failures_total no help text")
            .collect();
        assert!(other.is_empty(), "{said}");
    }
}

#[test]
fn an_inspector_of_some_tubes_sees_only_those() {
    if !sprout_only("an_inspector_of_some_tubes_sees_only_those") {
        return;
    }
    let s = Secured::start(&[]);
    let mut root = s.as_("root");
    // jobs.a: 2 ready, 1 delayed; jobs.b: 1 ready, 1 buried; other: 3 ready.
    put_into(&mut root, "jobs.a", b"x");
    root.put(b"x");
    root.put_with(0, 100, 60, b"x");
    put_into(&mut root, "jobs.b", b"x");
    let id = root.put(b"x");
    root.exchange(
        format!("reserve-job {id}\r\n").as_bytes(),
        format!("RESERVED {id} 1\r\nx\r\n").as_bytes(),
    );
    root.exchange(format!("bury {id} 0\r\n").as_bytes(), b"BURIED\r\n");
    for _ in 0..3 {
        put_into(&mut root, "other", b"x");
    }
    // Keeps jobs.b listed once its jobs are gone (as `watch` does).
    root.exchange(b"watch jobs.b\r\n", b"WATCHING 2\r\n");
    let mut c = s.as_("inspector");
    assert_eq!(c.ok_body(b"list-tubes\r\n"), "---\n- jobs.a\n- jobs.b\n");
    let seen = c.stats_of("stats");
    let all = root.stats_of("stats");
    for (key, theirs, everything) in [
        ("current-jobs-ready", "3", "6"),
        ("current-jobs-delayed", "1", "1"),
        ("current-jobs-buried", "1", "1"),
        ("current-jobs-reserved", "0", "0"),
        ("total-jobs", "5", "8"),
        ("current-tubes", "2", "4"),
        // The server's own figures are whole for everyone.
        ("cmd-put", "8", "8"),
        ("current-connections", "2", "2"),
    ] {
        assert_eq!(common::lookup(&seen, key), theirs, "inspector's {key}");
        assert_eq!(common::lookup(&all, key), everything, "root's {key}");
    }
    // A worker must `ignore default` before it may reserve.
    let mut w = s.as_("consumer");
    w.exchange(b"watch jobs.a\r\n", b"WATCHING 2\r\n");
    w.exchange(b"reserve-with-timeout 0\r\n", b"FORBIDDEN\r\n");
    w.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    w.send(b"reserve-with-timeout 0\r\n");
    assert!(w.expect_line().starts_with("RESERVED "));
}

#[test]
fn a_bad_policy_stops_the_server_with_its_line() {
    if !sprout_only("a_bad_policy_stops_the_server_with_its_line") {
        return;
    }
    let dir = TempDir::new();
    let file = dir.path().join("policy.toml");
    std::fs::write(
        &file,
        "[[principal]]\nname = \"w\"\ntokens = [\"s3cret\"]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["-p", &TestServer::free_port().to_string(), "--auth"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "sprout: --auth: {}:3:11: token `s3cret` is not sha256:",
        file.display()
    );
    assert!(said.starts_with(&want), "{said}");
}

#[test]
fn hash_token_prints_what_a_policy_lists() {
    // SHA-256("abc").
    let abc = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n";
    for input in [&b"abc"[..], b"abc\n", b"abc\r\n"] {
        let (ok, out, _) = hash_token(input);
        assert!(ok);
        assert_eq!(out, abc);
    }
    let (ok, _, warned) = hash_token(b"abc\n");
    assert!(ok && warned.contains("short"), "{warned}");
    let (ok, _, warned) = hash_token(b"a-long-enough-random-token-0123456789\n");
    assert!(ok && warned.is_empty(), "{warned}");
    for bad in [&b""[..], b"\n", b"two\nlines\n"] {
        let (ok, out, said) = hash_token(bad);
        assert!(!ok && out.is_empty(), "{said}");
    }
}
