//! A misbehaving client cannot hurt the others: one that pipelines without
//! ever reading is held back by backpressure (the server's memory stays
//! bounded and other clients keep being served), and thousands of idle
//! connections cost little memory.
//!
//! Memory is read from /proc (VmRSS of the server process), so these tests
//! only run against sprout.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{sprout_only, TestServer};
use sprout_testkit::status_kb;

fn rss_kib(pid: u32) -> u64 {
    status_kb(pid, "VmRSS").expect("VmRSS")
}

#[test]
fn a_client_that_never_reads_is_held_back() {
    if !sprout_only("a_client_that_never_reads_is_held_back") {
        return;
    }
    let server = TestServer::start(&[]);
    let mut producer = server.connect();
    let body = vec![b'x'; 60_000];
    producer.put(&body);
    let before = rss_kib(server.pid());

    // Ask for the 60 kB job two million times (120 GB of answers; 24 MB of
    // requests, more than the kernel buffers) and never read.
    let mut abuser = TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    abuser
        .set_write_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let requests = b"peek-ready\r\n".repeat(2_000_000);
    let mut sent = 0;
    let started = Instant::now();
    while sent < requests.len() && started.elapsed() < Duration::from_secs(3) {
        match abuser.write(&requests[sent..]) {
            Ok(n) => sent += n,
            // The server stopped reading: backpressure reached us.
            Err(_) => break,
        }
    }
    assert!(
        sent < requests.len(),
        "the server kept reading although its answers were never read"
    );

    // Everyone else is still served while the abuser stays connected.
    let mut other = server.connect();
    let id = other.put(b"still served");
    other.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");

    let grown = rss_kib(server.pid()).saturating_sub(before);
    eprintln!("sent {sent} bytes before backpressure; server RSS grew {grown} KiB");
    assert!(
        grown < 32 * 1024,
        "server RSS grew by {grown} KiB for one client that never reads"
    );
    drop(abuser);
}

#[test]
fn thousands_of_idle_connections_cost_little() {
    if !sprout_only("thousands_of_idle_connections_cost_little") {
        return;
    }
    const CONNECTIONS: usize = 2000;
    let server = TestServer::start(&[]);
    let mut probe = server.connect();
    probe.put(b"warm up");
    let before = rss_kib(server.pid());

    let idle: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| TcpStream::connect(("127.0.0.1", server.port())).expect("connect"))
        .collect();
    probe.wait_stat("current-connections", &(CONNECTIONS + 1).to_string());

    // Still answered at once with all of them open.
    let id = probe.put(b"with company");
    probe.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");

    let per_connection = (rss_kib(server.pid()).saturating_sub(before)) * 1024 / CONNECTIONS as u64;
    eprintln!("{CONNECTIONS} idle connections: {per_connection} bytes each");
    assert!(
        per_connection < 16 * 1024,
        "an idle connection costs {per_connection} bytes of server memory"
    );
    drop(idle);
}
