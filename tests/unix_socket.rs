//! Listening on a unix socket (`-l unix:PATH`): the basic commands, several
//! clients, and a stale socket file left by a previous run being replaced.

mod common;

use std::os::unix::fs::FileTypeExt;

use common::{TempDir, TestServer};

#[test]
fn basic_commands_over_a_unix_socket() {
    let s = TestServer::start_unix(&[]);
    let mut c = s.connect();
    c.exchange(b"put 3 0 60 5\r\nhello\r\n", b"INSERTED 1\r\n");
    c.exchange(b"peek-ready\r\n", b"FOUND 1 5\r\nhello\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 1 5\r\nhello\r\n");
    c.exchange(b"release 1 0 0\r\n", b"RELEASED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 5\r\nhello\r\n");
    c.exchange(b"bury 1 0\r\n", b"BURIED\r\n");
    c.exchange(b"kick 1\r\n", b"KICKED 1\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"use u\r\n", b"USING u\r\n");
    c.exchange(b"list-tubes\r\n", b"OK 18\r\n---\n- default\n- u\n\r\n");
    c.exchange(b"bogus\r\n", b"UNKNOWN_COMMAND\r\n");
    let st = c.stats_of("stats");
    assert_eq!(common::lookup(&st, "pid"), s.pid().to_string());
    assert_eq!(common::lookup(&st, "cmd-put"), "1");
    c.exchange(b"quit\r\n", b"");
    c.expect_closed();
}

#[test]
fn several_clients_over_a_unix_socket() {
    let s = TestServer::start_unix(&[]);
    let mut worker = s.connect();
    let mut producer = s.connect();
    worker.send(b"reserve\r\n");
    producer.wait_stat("current-waiting", "1");
    producer.put(b"x");
    worker.expect(b"RESERVED 1 1\r\nx\r\n");
    drop(worker);
    producer.exchange(b"reserve-with-timeout 2\r\n", b"RESERVED 1 1\r\nx\r\n");
}

#[test]
fn a_stale_socket_file_is_replaced() {
    let dir = TempDir::new();
    let sock = dir.path().join("sock");
    // A socket file nobody listens on, as a killed server leaves behind.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(std::fs::metadata(&sock).unwrap().file_type().is_socket());
    let s = TestServer::start_unix_at(dir, &sock, &[]);
    let mut c = s.connect();
    c.exchange(b"list-tube-used\r\n", b"USING default\r\n");
}

#[test]
fn a_regular_file_in_the_way_is_not_replaced() {
    let dir = TempDir::new();
    let path = dir.path().join("sock");
    std::fs::write(&path, b"precious").unwrap();
    let mut child = std::process::Command::new(common::binary())
        .arg("-l")
        .arg(format!("unix:{}", path.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("server started over a regular file");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(!status.success());
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
}
