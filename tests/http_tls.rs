//! `--http-tls`: the HTTP port over TLS with the beanstalk port's
//! certificate, read by three real clients (rustls, curl, `sprout
//! admin`), refusing plain HTTP, reloading its certificate on SIGHUP,
//! and marking the dashboard's session cookie `Secure`.

mod common;
#[path = "common/tls.rs"]
mod tls_kit;

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use common::TestServer;
use tls_kit::{handshake, server_cert, Pki};

/// A server with `--http 127.0.0.1:PORT --http-tls` (no `--tls-listen`)
/// and `extra`; the HTTP port.
fn start(pki: &Pki, extra: &[&str]) -> (TestServer, u16) {
    let port = TestServer::free_port();
    let http = format!("127.0.0.1:{port}");
    let tls = pki.server_args();
    let mut args = vec!["--http", &http, "--http-tls"];
    args.extend(tls.iter().map(String::as_str));
    args.extend_from_slice(extra);
    let server = TestServer::start(&args);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !https(pki, port, "GET /readyz", &[], "").starts_with("HTTP/1.1 200") {
        assert!(Instant::now() < deadline, "the HTTPS port never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, port)
}

/// One request over TLS (rustls, trusting the test CA): the raw response,
/// or "" if the exchange failed.
fn https(pki: &Pki, port: u16, line: &str, headers: &[&str], body: &str) -> String {
    let Ok(mut stream) = handshake(port, pki.client_config(None)) else {
        return String::new();
    };
    let mut request = format!("{line} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for header in headers {
        request += &format!("{header}\r\n");
    }
    request += &format!("Content-Length: {}\r\n\r\n{body}", body.len());
    if stream.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

#[test]
fn the_http_port_serves_tls_with_the_beanstalk_certificate() {
    if !common::sprout_only("the_http_port_serves_tls_with_the_beanstalk_certificate") {
        return;
    }
    let pki = Pki::new();
    let (server, port) = start(&pki, &["--http-token", "s3cret"]);
    let tubes = https(
        &pki,
        port,
        "GET /api/tubes",
        &["Authorization: Bearer s3cret"],
        "",
    );
    assert!(tubes.starts_with("HTTP/1.1 200"), "{tubes}");
    assert!(tubes.contains("\"default\""), "{tubes}");

    // Plain HTTP gets no HTTP answer from a TLS port.
    let mut plain = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");

    // The dashboard's cookie only travels over TLS.
    let login = https(
        &pki,
        port,
        "POST /login",
        &["Content-Type: application/x-www-form-urlencoded"],
        "token=s3cret",
    );
    let cookie = login
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie in {login}"));
    assert!(cookie.contains("; Secure"), "{cookie}");

    // SIGHUP: new handshakes see the new certificate.
    let before = server_cert(port, pki.client_config(None));
    let renewed = pki.write_server("renewed");
    assert_ne!(before, renewed);
    server.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server_cert(port, pki.client_config(None)) != renewed {
        assert!(
            Instant::now() < deadline,
            "the HTTP port kept its old certificate"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let health = https(&pki, port, "GET /healthz", &[], "");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
}

#[test]
fn curl_and_sprout_admin_use_the_https_port() {
    if !common::sprout_only("curl_and_sprout_admin_use_the_https_port") {
        return;
    }
    let pki = Pki::new();
    let (_server, port) = start(&pki, &["--http-token", "t0ken"]);
    let ca = pki.path("ca.pem");
    if common::tool_available("curl", "curl_and_sprout_admin_use_the_https_port") {
        let out = Command::new("curl")
            .args(["--silent", "--show-error", "--cacert"])
            .arg(&ca)
            .args(["-H", "Authorization: Bearer t0ken"])
            .arg(format!("https://localhost:{port}/api/server"))
            .output()
            .unwrap();
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(body.contains("\"stats\""), "{body}");
    }
    let admin = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sprout"))
            .arg("admin")
            .args(args)
            .output()
            .unwrap()
    };
    let url = format!("https://localhost:{port}");
    let ca = ca.to_str().unwrap();
    let out = admin(&["--http", &url, "--ca", ca, "--token", "t0ken", "tubes"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.lines().any(|l| l.starts_with("default")), "{text}");
    // Without --ca the test CA is no public root: refused, and said so.
    let out = admin(&["--http", &url, "--token", "t0ken", "tubes"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sprout admin:"), "{err}");
}

#[test]
fn http_tls_flags_that_do_not_go_together_stop_the_server() {
    if !common::sprout_only("http_tls_flags_that_do_not_go_together_stop_the_server") {
        return;
    }
    let pki = Pki::new();
    let cert = pki.path("server.pem");
    let cert = cert.to_str().unwrap();
    // (flags, part of the message)
    let table: [(&[&str], &str); 3] = [
        (&["--http-tls"], "--http-tls needs --http"),
        (
            &["--http", "127.0.0.1:0", "--http-tls"],
            "--http-tls needs --tls-cert",
        ),
        (
            &["--http", "127.0.0.1:0", "--http-tls", "--tls-cert", cert],
            "--http-tls needs --tls-key",
        ),
    ];
    for (flags, message) in table {
        let out = Command::new(common::binary())
            .args(["-p", "0"])
            .args(flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?}");
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
    }
}
