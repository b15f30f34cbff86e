//! TLS on the beanstalk port (`--tls-listen`), end to end against the real
//! binary: byte transcripts through a rustls client, the handshake as
//! `openssl s_client` sees it (version, chain, mutual TLS refusals), a
//! plain listener beside a TLS one, SIGHUP reloads under load, and the
//! limits on connections that never finish their handshake. How `--auth`
//! knows a TLS client (its certificate, else its listener) is in
//! `tests/auth.rs`.
//!
//! Certificates are made per test with rcgen (`common/tls.rs`). beanstalkd
//! has no TLS, so every test here is sprout-only.

mod common;
#[path = "common/tls.rs"]
mod tls_kit;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{assert_between, sprout_only, tool_answers, Client, TestServer, IO_TIMEOUT};
use sprout_testkit::status_kb;
use tls_kit::{handshake, refusal, server_cert, start_tls, tls_client, Pki};

/// Polls `check` every 20 ms until it holds or `IO_TIMEOUT` passes.
#[track_caller]
fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + IO_TIMEOUT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// How many descriptors the process `pid` has open.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// A put, reserve and delete, byte for byte.
fn transcript(client: &mut Client) {
    client.exchange(b"use tls\r\n", b"USING tls\r\n");
    client.exchange(b"watch tls\r\n", b"WATCHING 2\r\n");
    let id = client.put(b"secret");
    client.exchange(
        b"reserve-with-timeout 0\r\n",
        format!("RESERVED {id} 6\r\nsecret\r\n").as_bytes(),
    );
    client.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
}

#[test]
fn the_protocol_over_tls_alone() {
    if !sprout_only("the_protocol_over_tls_alone") {
        return;
    }
    let pki = Pki::new();
    let server = start_tls(&pki, &["-V"]);
    let mut client = tls_client(server.port(), pki.client_config(None));
    transcript(&mut client);
    client.exchange(b"quit\r\n", b"");
    client.expect_closed();

    let log = server.stderr();
    let tls = format!("listening on tls:127.0.0.1:{}", server.port());
    assert!(log.contains(&tls), "{log}");
    // --tls-listen without -l or -p opens no plain listener.
    assert_eq!(log.matches("listening on").count(), 1, "{log}");
    // The connection knows the listener that took it, as --tls-listen names it.
    let opened = format!("listener=127.0.0.1:{}", server.port());
    assert!(log.contains(&opened), "{log}");
    assert!(log.contains("version=TLSv1_3 client_cn=-"), "{log}");
}

#[test]
fn quit_ends_the_tls_session_with_close_notify() {
    if !sprout_only("quit_ends_the_tls_session_with_close_notify") {
        return;
    }
    let pki = Pki::new();
    let server = start_tls(&pki, &[]);
    let mut stream = handshake(server.port(), pki.client_config(None)).expect("handshake");
    stream.write_all(b"list-tube-used\r\nquit\r\n").unwrap();
    let mut answers = Vec::new();
    // A hang-up without close_notify would be an UnexpectedEof here.
    stream
        .read_to_end(&mut answers)
        .expect("a clean end of the session");
    assert_eq!(answers, b"USING default\r\n");
}

#[test]
fn a_plain_listener_beside_tls_serves_the_same_jobs() {
    if !sprout_only("a_plain_listener_beside_tls_serves_the_same_jobs") {
        return;
    }
    let pki = Pki::new();
    let plain_port = TestServer::free_port().to_string();
    let server = start_tls(&pki, &["-l", "127.0.0.1", "-p", &plain_port]);
    let mut plain = Client::tcp(plain_port.parse().unwrap());
    let mut tls = tls_client(server.port(), pki.client_config(None));
    let id = plain.put(b"from the plain side");
    tls.exchange(
        b"reserve-with-timeout 0\r\n",
        format!("RESERVED {id} 19\r\nfrom the plain side\r\n").as_bytes(),
    );
    tls.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    plain.exchange(b"peek-ready\r\n", b"NOT_FOUND\r\n");
    transcript(&mut plain);
}

#[test]
fn mutual_tls_serves_only_certificates_of_its_ca() {
    if !sprout_only("mutual_tls_serves_only_certificates_of_its_ca") {
        return;
    }
    let pki = Pki::new();
    pki.client("producer", "producer-1", &["producer.internal"]);
    pki.expired_client("expired");
    pki.foreign_client("foreign");
    let ca = pki.path("ca.pem").display().to_string();
    let server = start_tls(&pki, &["--tls-client-ca", &ca, "-V"]);
    let port = server.port();

    let mut client = tls_client(port, pki.client_config(Some("producer")));
    transcript(&mut client);
    let log = server.stderr();
    assert!(log.contains("client_cn=producer-1"), "{log}");

    for (who, alert) in [
        (None, "CertificateRequired"),
        (Some("expired"), "CertificateExpired"),
        (Some("foreign"), "UnknownCA"),
    ] {
        let error = refusal(port, pki.client_config(who)).to_string();
        assert!(error.contains(alert), "{who:?}: {error}");
    }
    // The refused never reached the protocol: one connection in all.
    assert_eq!(client.stat("total-connections"), "1");
}

/// What `openssl s_client` prints for a session with the server on
/// `port` that sends `list-tubes` and `quit` (`extra`: more flags).
fn s_client(port: u16, pki: &Pki, extra: &[&str]) -> String {
    let connect = format!("127.0.0.1:{port}");
    let ca = pki.path("ca.pem");
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &connect, "-servername", "localhost"])
        .args(["-verify_return_error", "-CAfile"])
        .arg(&ca)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl");
    let pid = child.id() as libc::pid_t;
    let watchdog = thread::spawn(move || {
        thread::sleep(2 * IO_TIMEOUT);
        // SAFETY: kill only sends a signal (to a process gone by now, mostly).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    // stdin stays open until s_client is done: at its end s_client would
    // hang up before the answers (or the server's alert) arrive.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"list-tubes\r\nquit\r\n").unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    drop(stdin);
    child.wait().unwrap();
    drop(watchdog);
    out
}

#[test]
fn openssl_sees_tls_1_3_and_the_chain() {
    if !sprout_only("openssl_sees_tls_1_3_and_the_chain")
        || !tool_answers("openssl", "version", "openssl_sees_tls_1_3_and_the_chain")
    {
        return;
    }
    let pki = Pki::new();
    let server = start_tls(&pki, &[]);
    let out = s_client(server.port(), &pki, &["-tls1_3", "-showcerts"]);
    for fact in [
        "New, TLSv1.3, Cipher is",
        // The leaf, then the intermediate from --tls-cert's file.
        " 0 s:CN=localhost",
        "   i:CN=sprout test intermediate",
        " 1 s:CN=sprout test intermediate",
        "   i:CN=sprout test CA",
        "Verify return code: 0 (ok)",
        "OK 14\r\n---\n- default\n",
    ] {
        assert!(
            out.replace(" = ", "=").contains(fact),
            "no {fact:?} in:\n{out}"
        );
    }
    let out = s_client(server.port(), &pki, &["-tls1_2"]);
    assert!(out.contains("New, TLSv1.2, Cipher is"), "{out}");
    assert!(out.contains("OK 14\r\n"), "{out}");
}

#[test]
fn openssl_without_a_good_certificate_is_refused_on_mutual_tls() {
    let test = "openssl_without_a_good_certificate_is_refused_on_mutual_tls";
    if !sprout_only(test) || !tool_answers("openssl", "version", test) {
        return;
    }
    let pki = Pki::new();
    pki.client("worker", "worker-1", &[]);
    pki.expired_client("expired");
    pki.foreign_client("foreign");
    let ca = pki.path("ca.pem").display().to_string();
    let server = start_tls(&pki, &["--tls-client-ca", &ca]);
    let with = |name: &str| {
        let cert = pki.path(&format!("{name}.pem")).display().to_string();
        let key = pki.path(&format!("{name}.key")).display().to_string();
        s_client(
            server.port(),
            &pki,
            &["-tls1_3", "-cert", &cert, "-key", &key],
        )
    };
    let out = with("worker");
    assert!(out.contains("OK 14\r\n"), "{out}");
    for (out, alert) in [
        (
            s_client(server.port(), &pki, &["-tls1_3"]),
            "alert certificate required",
        ),
        (with("expired"), "alert certificate expired"),
        (with("foreign"), "alert unknown ca"),
    ] {
        assert!(out.contains(alert), "no {alert:?} in:\n{out}");
        assert!(!out.contains("OK 14"), "served:\n{out}");
    }
}

#[test]
fn sighup_reloads_the_certificate_under_load() {
    if !sprout_only("sighup_reloads_the_certificate_under_load") {
        return;
    }
    let pki = Pki::new();
    let server = start_tls(&pki, &[]);
    let port = server.port();
    let config = pki.client_config(None);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    // Clients connected before the reload keep putting and deleting.
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let mut client = tls_client(port, config.clone());
            let (stop, done) = (stop.clone(), done.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let id = client.put(b"under load");
                    client.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let served_by = |n: u64| wait_for("work", || done.load(Ordering::Relaxed) >= n);
    served_by(50);
    let first = server_cert(port, config.clone());

    let second = pki.write_server("sprout-b");
    assert_ne!(first, second);
    server.signal(libc::SIGHUP);
    wait_for("the new certificate", || {
        server_cert(port, config.clone()) == second
    });
    served_by(done.load(Ordering::Relaxed) + 50);

    // A bad file is refused, the certificate in use stays.
    std::fs::write(pki.path("server.pem"), b"not a certificate").unwrap();
    server.signal(libc::SIGHUP);
    wait_for("the refusal in the log", || {
        server.stderr().contains("TLS files refused")
    });
    assert_eq!(server_cert(port, config.clone()), second);
    served_by(done.load(Ordering::Relaxed) + 50);

    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker
            .join()
            .expect("a client connected before the reloads failed");
    }
    let log = server.stderr();
    let refused = log
        .lines()
        .find(|l| l.contains("TLS files refused"))
        .unwrap();
    let file = pki.path("server.pem").display().to_string();
    assert!(
        refused.contains("ERROR") && refused.contains(&file),
        "{log}"
    );
}

#[test]
fn sighup_without_tls_ends_the_process_as_before() {
    if !sprout_only("sighup_without_tls_ends_the_process_as_before") {
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let mut server = TestServer::start(&[]);
    server.signal(libc::SIGHUP);
    let status = server.wait_exit(IO_TIMEOUT).expect("still running");
    assert_eq!(status.signal(), Some(libc::SIGHUP), "{status:?}");
}

#[test]
fn a_thousand_silent_connections_leave_the_server_responsive_and_small() {
    if !sprout_only("a_thousand_silent_connections_leave_the_server_responsive_and_small") {
        return;
    }
    const SILENT: usize = 1000;
    let pki = Pki::new();
    pki.client("worker", "worker-1", &[]);
    let ca = pki.path("ca.pem").display().to_string();
    let server = start_tls(&pki, &["--tls-client-ca", &ca]);
    let mut client = tls_client(server.port(), pki.client_config(Some("worker")));
    transcript(&mut client);
    let fds = open_fds(server.pid());
    let before = status_kb(server.pid(), "VmRSS").expect("VmRSS");

    let silent: Vec<TcpStream> = (0..SILENT)
        .map(|_| TcpStream::connect(("127.0.0.1", server.port())).expect("connect"))
        .collect();
    wait_for("the server to accept them all", || {
        open_fds(server.pid()) >= fds + SILENT
    });

    // The authenticated client is still answered, and a new one served.
    transcript(&mut client);
    transcript(&mut tls_client(
        server.port(),
        pki.client_config(Some("worker")),
    ));
    let grown = status_kb(server.pid(), "VmRSS")
        .unwrap()
        .saturating_sub(before);
    eprintln!("{SILENT} connections in their handshake: server RSS grew {grown} KiB");
    assert!(
        grown * 1024 / (SILENT as u64) < 16 * 1024,
        "{SILENT} pending handshakes grew the server by {grown} KiB"
    );
    drop(silent);
}

#[test]
fn past_max_pending_a_new_connection_is_closed_at_once() {
    if !sprout_only("past_max_pending_a_new_connection_is_closed_at_once") {
        return;
    }
    let pki = Pki::new();
    let server = start_tls(&pki, &["--max-pending", "4"]);
    // Served, so start_tls's probe (a connection that never handshakes)
    // has long given its slot back.
    let idle = open_fds(server.pid());
    let mut served = tls_client(server.port(), pki.client_config(None));
    transcript(&mut served);
    served.exchange(b"quit\r\n", b"");
    served.expect_closed();
    // The server closes its socket just after its close_notify.
    wait_for("the served connection closed", || {
        open_fds(server.pid()) <= idle
    });
    let fds = open_fds(server.pid());
    let mut silent: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(("127.0.0.1", server.port())).expect("connect"))
        .collect();
    wait_for("four pending", || open_fds(server.pid()) >= fds + 4);

    Client::tcp(server.port()).expect_closed();
    let error = refusal(server.port(), pki.client_config(None));
    let closed = [
        std::io::ErrorKind::UnexpectedEof,
        std::io::ErrorKind::ConnectionReset,
    ];
    assert!(closed.contains(&error.kind()), "{error}");

    // A slot given back is taken by the next handshake.
    silent.pop();
    wait_for("a free slot", || {
        tls_kit::list_tubes(server.port(), pki.client_config(None)).is_ok()
    });
    transcript(&mut tls_client(server.port(), pki.client_config(None)));
}

#[test]
fn the_handshake_timeout_closes_a_silent_client_and_only_that() {
    if !sprout_only("the_handshake_timeout_closes_a_silent_client_and_only_that") {
        return;
    }
    let pki = Pki::new();
    let server = start_tls(&pki, &["--handshake-timeout", "0.5"]);
    let mut done = tls_client(server.port(), pki.client_config(None));
    let started = Instant::now();
    let mut silent = Client::tcp(server.port());
    silent.expect_closed();
    assert_between(started.elapsed(), Duration::from_millis(400), IO_TIMEOUT);
    // A client whose handshake is done may idle past it.
    transcript(&mut done);
}

#[test]
fn bad_tls_flags_and_files_stop_startup_with_the_reason() {
    if !sprout_only("bad_tls_flags_and_files_stop_startup_with_the_reason") {
        return;
    }
    let pki = Pki::new();
    let port = TestServer::free_port();
    let listen = format!("127.0.0.1:{port}");
    let file = |f: &str| pki.path(f).display().to_string();
    std::fs::write(pki.path("garbage.pem"), "not PEM at all").unwrap();
    let missing = file("missing.pem");
    let (cert, key, garbage) = (file("server.pem"), file("server.key"), file("garbage.pem"));
    for (args, reason) in [
        (
            vec!["--tls-listen", &listen],
            "--tls-listen needs --tls-cert".to_string(),
        ),
        (
            vec!["--tls-cert", &cert, "--tls-key", &key],
            "--tls-cert is given but no --tls-listen uses it".into(),
        ),
        (
            vec![
                "--tls-listen",
                &listen,
                "--tls-cert",
                &missing,
                "--tls-key",
                &key,
            ],
            format!("{missing}: No such file"),
        ),
        (
            vec![
                "--tls-listen",
                &listen,
                "--tls-cert",
                &garbage,
                "--tls-key",
                &key,
            ],
            format!("{garbage}: no CERTIFICATE in it"),
        ),
        (
            vec![
                "--tls-listen",
                &listen,
                "--tls-cert",
                &cert,
                "--tls-key",
                &garbage,
            ],
            format!("{garbage}: no PRIVATE KEY in it"),
        ),
        (
            vec![
                "--tls-listen",
                &listen,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--tls-client-ca",
                &garbage,
            ],
            format!("{garbage}: no CERTIFICATE in it"),
        ),
    ] {
        let error = match TestServer::spawn(&args, common::Addr::Tcp(port)) {
            Ok(_) => panic!("started with {args:?}"),
            Err(e) => e,
        };
        assert!(error.contains(&reason), "{args:?}: {error}");
    }
}

#[test]
fn a_large_answer_arrives_whole() {
    if !sprout_only("a_large_answer_arrives_whole") {
        return;
    }
    let pki = Pki::new();
    let server = start_tls(&pki, &["-z", "10000000"]);
    // The socket holds 256 KiB on this side (and a few MiB on the
    // server's): a reader slower than the server keeps it full, so the
    // server's writes meet a full socket, where rustls holds ciphertext
    // back (src/tls/tls_stream.rs).
    let mut client =
        tls_kit::tls_client_with_window(server.port(), pki.client_config(None), 256 * 1024);
    let body: Vec<u8> = (0..6_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let id = client.put(&body);
    client.send(format!("peek {id}\r\n").repeat(2).as_bytes());
    for _ in 0..2 {
        assert_eq!(client.expect_line(), format!("FOUND {id} {}", body.len()));
        for piece in body.chunks(64 * 1024) {
            thread::sleep(Duration::from_millis(2));
            assert!(
                client.read_exact_bytes(piece.len()) == piece,
                "a different body"
            );
        }
        client.expect(b"\r\n");
    }
}
