//! `fire`, sprout's one-step delivery (`src/engine/fire.rs`): over the
//! wire, across a kill -9 of the server in the middle of a stream of
//! fires, and under the bridge, whose deliveries across a server crash
//! come exactly once.

mod bridge_common;
mod common;

use std::collections::BTreeMap;
use std::thread;
use std::time::Duration;

use bridge_common::{can_run, wait_timers, Bridge, Redis, Worker};
use common::{sprout_only, Client, TempDir, TestServer};

/// `fire <id> <pri> <ttr> <bytes>` + body, as bytes.
fn fire(id: u64, pri: u32, ttr: u32, body: &[u8]) -> Vec<u8> {
    let mut msg = format!("fire {id} {pri} {ttr} {}\r\n", body.len()).into_bytes();
    msg.extend_from_slice(body);
    msg.extend_from_slice(b"\r\n");
    msg
}

/// A connection that uses `uses` and watches only `watches`.
fn client(server: &TestServer, uses: &str, watches: &str) -> Client {
    let mut c = server.connect();
    c.exchange(
        format!("use {uses}\r\n").as_bytes(),
        format!("USING {uses}\r\n").as_bytes(),
    );
    c.exchange(format!("watch {watches}\r\n").as_bytes(), b"WATCHING 2\r\n");
    c.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    c
}

#[test]
fn fire_turns_a_reserved_job_into_a_ready_job_of_the_used_tube() {
    if !sprout_only("fire_turns_a_reserved_job_into_a_ready_job_of_the_used_tube") {
        return;
    }
    let server = TestServer::start(&["-z", "100"]);
    let mut c = client(&server, "timers", "timers");
    let timer = c.put_with(0, 0, 60, b"timer");
    c.send(b"reserve-with-timeout 0\r\n");
    assert_eq!(c.expect_reserved(b"timer"), timer);
    c.exchange(b"use out\r\n", b"USING out\r\n");
    // Not this connection's: another client cannot fire it.
    let mut other = client(&server, "out", "timers");
    other.exchange(&fire(timer, 5, 30, b"x"), b"NOT_FOUND\r\n");
    c.exchange(&fire(timer + 7, 5, 30, b"x"), b"NOT_FOUND\r\n");
    // Too big, and a body without its CRLF: refused, the timer stays.
    c.exchange(&fire(timer, 5, 30, &[b'a'; 101]), b"JOB_TOO_BIG\r\n");
    c.exchange(b"fire 1 2 3 1\r\nxyz", b"EXPECTED_CRLF\r\n");
    c.exchange(b"fire 1 2\r\n", b"BAD_FORMAT\r\n");
    c.send(&fire(timer, 5, 30, b"{\"key\":\"k\"}"));
    let line = c.expect_line();
    let delivery: u64 = line
        .strip_prefix("INSERTED ")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("INSERTED <id>, got {line:?}"));
    assert!(delivery > timer);
    c.exchange(format!("peek {timer}\r\n").as_bytes(), b"NOT_FOUND\r\n");
    let mut w = client(&server, "default", "out");
    w.send(b"reserve-with-timeout 0\r\n");
    assert_eq!(w.expect_reserved(b"{\"key\":\"k\"}"), delivery);
    assert_eq!(w.job_stat(delivery, "pri"), "5");
    assert_eq!(w.job_stat(delivery, "ttr"), "30");
    assert_eq!(w.job_stat(delivery, "tube"), "\"out\"");
    // Fired once only.
    c.exchange(&fire(timer, 5, 30, b"again"), b"NOT_FOUND\r\n");
}

/// Puts `n` timers (body `t<i>`) into `timers`, reserves them all on `c`,
/// then sends their fires (body `d<i>`) in one write; returns the ids.
fn fire_all(c: &mut Client, n: usize) -> Vec<u64> {
    let ids: Vec<u64> = (0..n)
        .map(|i| c.put_with(0, 0, 600, format!("t{i}").as_bytes()))
        .collect();
    for i in 0..n {
        c.send(b"reserve-with-timeout 0\r\n");
        c.expect_reserved(format!("t{i}").as_bytes());
    }
    c.exchange(b"use out\r\n", b"USING out\r\n");
    let mut fires = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        fires.extend(fire(id, 0, 60, format!("d{i}").as_bytes()));
    }
    c.send(&fires);
    ids
}

/// Every job's body in the tubes `timers` and `out` (each reserved and
/// released back, so the store is left as found).
fn bodies(server: &TestServer) -> Vec<String> {
    let mut out = Vec::new();
    for tube in ["timers", "out"] {
        let mut c = client(server, "default", tube);
        loop {
            c.send(b"reserve-with-timeout 0\r\n");
            let line = c.expect_line();
            if line == "TIMED_OUT" {
                break;
            }
            let len: usize = line.rsplit(' ').next().unwrap().parse().unwrap();
            let body = c.read_exact_bytes(len);
            c.expect(b"\r\n");
            out.push(String::from_utf8(body).unwrap());
        }
    }
    out
}

#[test]
fn a_fire_in_flight_at_a_kill_9_leaves_the_timer_or_its_delivery_exactly() {
    if !sprout_only("a_fire_in_flight_at_a_kill_9_leaves_the_timer_or_its_delivery_exactly") {
        return;
    }
    const N: usize = 3000;
    for (round, policy) in [&["-f", "0"][..], &[][..], &["-F"][..]].iter().enumerate() {
        let store = TempDir::new();
        let dir = store.path().join("store");
        let mut server = TestServer::start_with_store(&dir, policy);
        let mut c = client(&server, "timers", "timers");
        fire_all(&mut c, N);
        // Kill while the fires are being served: after the first answers,
        // long before the last (3000 fires take tens of ms on a fast disk
        // with -f 0; the kill lands at a different point each round).
        let line = c.expect_line();
        assert!(line.starts_with("INSERTED "), "{line}");
        thread::sleep(Duration::from_micros(300 * round as u64));
        server.kill9();
        let server = TestServer::start_with_store(&dir, policy);
        let mut seen: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for body in bodies(&server) {
            let i: usize = body[1..].parse().expect("t<i> or d<i>");
            seen.entry(i).or_default().push(body);
        }
        let fired = seen.values().filter(|b| b[0].starts_with('d')).count();
        for i in 0..N {
            let found = seen.get(&i).map_or(&[][..], Vec::as_slice);
            assert_eq!(
                found.len(),
                1,
                "{policy:?}: job {i}: {found:?} (timer or delivery, once)"
            );
        }
        eprintln!("{policy:?}: {fired} of {N} fired before the kill");
    }
}

/// The bridge on a server killed with -9 (and restarted, `-b`) while it
/// fires: every key delivered exactly once (a put-then-delete bridge could
/// deliver one twice, its delete lost with the crash).
#[test]
fn bridge_deliveries_across_a_server_crash_come_exactly_once() {
    if !can_run("bridge_deliveries_across_a_server_crash_come_exactly_once") {
        return;
    }
    let redis = Redis::start();
    let store = TempDir::new();
    let dir = store.path().join("store");
    let port = TestServer::free_port();
    let start = || {
        let dir = dir.to_str().unwrap();
        let args = ["-l", "127.0.0.1", "-p", &port.to_string(), "-b", dir];
        TestServer::spawn(&args, common::Addr::Tcp(port)).expect("server")
    };
    let mut server = start();
    let state = TempDir::new();
    let args = bridge_common::bridge_args(&redis, port, "offline", &["dev:*"], state.path());
    let mut bridge = Bridge::start(&args);
    bridge.wait_log("fires timers in one step");
    const N: usize = 2000;
    let mut worker = Worker::new(port, "offline");
    let mut want = BTreeMap::new();
    // Deadlines over 400 ms from 700 ms on: the kill lands mid-way.
    let mut pipe = redis::pipe();
    let t0 = bridge_common::now_ms() + 700;
    for i in 0..N {
        let at = t0 + (i as i64 * 400) / N as i64;
        pipe.cmd("SET")
            .arg(format!("dev:{i}"))
            .arg("x")
            .arg("PXAT")
            .arg(at)
            .ignore();
        want.insert(format!("dev:{i}"), at);
    }
    let () = pipe.query(&mut redis.conn()).expect("SET");
    wait_timers(&mut worker, N);
    drop(worker);
    let kill_at = t0 + 200;
    thread::sleep(Duration::from_millis(
        (kill_at - bridge_common::now_ms()).max(0) as u64,
    ));
    server.kill9();
    let _server = start();
    let mut worker = Worker::new(port, "offline");
    let got = worker.drain(Duration::from_millis(3_000));
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &got {
        assert_eq!(Some(&d.expire_at_ms), want.get(&d.key), "{d:?}");
        assert!(d.received_ms >= d.expire_at_ms, "early: {d:?}");
        *count.entry(d.key.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = count.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(count.len(), N, "every key delivered");
    bridge.kill9();
}
