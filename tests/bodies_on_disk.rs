//! Bodies kept only on disk (issue 33, docs/durability.md "Next: bodies
//! kept only on disk"): with `-b`, the engine keeps the length of a body
//! longer than 32 bytes, and every reply naming such a job is filled from
//! the body cache or read back from sled. With `--body-cache 0` nothing
//! stays in the cache once sled holds it, so each reply below whose body
//! is longer than that is a read from the disk (`body-cache-misses` says
//! so), through every path a reply takes: a command's own answer, a
//! blocked `reserve` woken by another connection, tuber's batch, the HTTP
//! API, and after a `kill -9`.

mod common;
mod http_client;

use std::time::{Duration, Instant};

use common::{TempDir, TestServer};

/// Lengths around the inline limit (32), one of each size class's kind,
/// and large ones.
const LENGTHS: [usize; 11] = [1, 31, 32, 33, 34, 100, 1000, 1025, 4096, 65_536, 1 << 20];

/// A body of `len` bytes that no other job of the test has.
fn body(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i * 7 + seed * 13) % 26) as u8)
        .collect()
}

/// Waits until sled has taken in every change so far, and `--body-cache
/// 0` let each body go: a marker put's body stays pinned in the cache
/// until sled holds it, and sled takes changes in in order.
#[track_caller]
fn wait_cache_empty(c: &mut common::Client) {
    let marker = c.put_with(0, 3600, 60, &[b'm'; 64]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.stat("body-cache-bytes") != "0" {
        assert!(Instant::now() < deadline, "the body cache never emptied");
        std::thread::sleep(Duration::from_millis(20));
    }
    c.exchange(format!("delete {marker}\r\n").as_bytes(), b"DELETED\r\n");
}

/// Sends `cmd` and expects a job with `body`; returns its id.
#[track_caller]
fn reserve(c: &mut common::Client, cmd: &str, body: &[u8]) -> u64 {
    c.send(cmd.as_bytes());
    c.expect_reserved(body)
}

fn misses(c: &mut common::Client) -> u64 {
    c.stat("body-cache-misses").parse().unwrap()
}

#[test]
fn every_length_comes_back_from_the_disk_through_updates_and_a_kill_9() {
    if !common::sprout_only("every_length_comes_back_from_the_disk_through_updates_and_a_kill_9") {
        return;
    }
    let dir = TempDir::new();
    let store = dir.path().join("store");
    let args = ["--body-cache", "0", "-z", "2000000"];
    let mut s = TestServer::start_with_store(&store, &args);
    let mut c = s.connect();
    let jobs: Vec<(u64, Vec<u8>)> = (LENGTHS.iter().enumerate())
        .map(|(i, &len)| (c.put_with(i as u32, 0, 60, &body(len, i)), body(len, i)))
        .collect();
    wait_cache_empty(&mut c);
    let before = misses(&mut c);
    for (id, expected) in &jobs {
        assert_eq!(c.peek(*id).as_deref(), Some(&expected[..]), "peek {id}");
    }
    let stored = LENGTHS.iter().filter(|&&n| n > 32).count() as u64;
    assert_eq!(misses(&mut c) - before, stored, "one read a stored body");
    // Updates carry no body: release, bury and kick keep it.
    for (i, (id, expected)) in jobs.iter().enumerate() {
        assert_eq!(
            reserve(&mut c, &format!("reserve-job {id}\r\n"), expected),
            *id
        );
        match i % 3 {
            0 => c.exchange(format!("release {id} 5 0\r\n").as_bytes(), b"RELEASED\r\n"),
            1 => c.exchange(format!("bury {id} 7\r\n").as_bytes(), b"BURIED\r\n"),
            _ => c.exchange(
                format!("release {id} 9 3600\r\n").as_bytes(),
                b"RELEASED\r\n",
            ),
        }
    }
    c.exchange(b"kick 100\r\n", b"KICKED 4\r\n");
    wait_cache_empty(&mut c);
    for (id, expected) in &jobs {
        assert_eq!(
            c.peek(*id).as_deref(),
            Some(&expected[..]),
            "peek {id} after updates"
        );
    }
    s.kill9();
    let s = TestServer::start_with_store(&store, &args);
    let mut c = s.connect();
    for (id, expected) in &jobs {
        assert_eq!(
            c.peek(*id).as_deref(),
            Some(&expected[..]),
            "peek {id} after kill -9"
        );
    }
    for (id, expected) in &jobs {
        assert_eq!(
            reserve(&mut c, &format!("reserve-job {id}\r\n"), expected),
            *id
        );
        c.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    }
    assert_eq!(c.stat("body-cache-read-errors"), "0");
}

#[test]
fn a_reply_is_filled_before_the_next_command_of_its_connection_runs() {
    if !common::sprout_only("a_reply_is_filled_before_the_next_command_of_its_connection_runs") {
        return;
    }
    let dir = TempDir::new();
    let store = dir.path().join("store");
    let s = TestServer::start_with_store(&store, &["--body-cache", "0"]);
    let mut c = s.connect();
    let a = c.put(&body(100, 1));
    let b = c.put(&body(200, 2));
    wait_cache_empty(&mut c);
    // The delete runs right after; the reply before it still has its body.
    let mut expected = format!("RESERVED {a} 100\r\n").into_bytes();
    expected.extend_from_slice(&body(100, 1));
    expected.extend_from_slice(b"\r\nDELETED\r\n");
    c.exchange(
        format!("reserve-job {a}\r\ndelete {a}\r\n").as_bytes(),
        &expected,
    );
    let mut expected = format!("FOUND {b} 200\r\n").into_bytes();
    expected.extend_from_slice(&body(200, 2));
    expected.extend_from_slice(b"\r\nDELETED\r\nNOT_FOUND\r\n");
    c.exchange(
        format!("peek {b}\r\ndelete {b}\r\npeek {b}\r\n").as_bytes(),
        &expected,
    );
}

#[test]
fn a_blocked_reserve_and_a_batch_get_bodies_from_the_disk() {
    if !common::sprout_only("a_blocked_reserve_and_a_batch_get_bodies_from_the_disk") {
        return;
    }
    let dir = TempDir::new();
    let store = dir.path().join("store");
    let s = TestServer::start_with_store(&store, &["--body-cache", "0"]);
    let mut producer = s.connect();
    let buried = producer.put(&body(500, 3));
    assert_eq!(reserve(&mut producer, "reserve\r\n", &body(500, 3)), buried);
    producer.exchange(format!("bury {buried} 0\r\n").as_bytes(), b"BURIED\r\n");
    wait_cache_empty(&mut producer);
    let mut worker = s.connect();
    worker.send(b"reserve-with-timeout 10\r\n");
    producer.wait_stat("current-waiting", "1");
    producer.exchange(b"kick 1\r\n", b"KICKED 1\r\n");
    assert_eq!(worker.expect_reserved(&body(500, 3)), buried);

    let ids: Vec<u64> = (0..3).map(|i| producer.put(&body(40 + i, i))).collect();
    wait_cache_empty(&mut producer);
    let mut expected = b"RESERVED_BATCH 3\r\n".to_vec();
    for (i, id) in ids.iter().enumerate() {
        expected.extend_from_slice(format!("RESERVED {id} {}\r\n", 40 + i).as_bytes());
        expected.extend_from_slice(&body(40 + i, i));
        expected.extend_from_slice(b"\r\n");
    }
    producer.exchange(b"reserve-batch 5\r\n", &expected);
}

#[test]
fn the_http_api_reads_a_body_from_the_disk() {
    if !common::sprout_only("the_http_api_reads_a_body_from_the_disk") {
        return;
    }
    let dir = TempDir::new();
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    let (s, http) = http_client::start(&["-b", store, "--body-cache", "0"]);
    let mut c = s.connect();
    let id = c.put(&body(3000, 4));
    wait_cache_empty(&mut c);
    let got = http.raw("GET", &format!("/api/jobs/{id}/body"), &[], None);
    assert_eq!((got.status, got.bytes), (200, body(3000, 4)));
    let job = http.ok(&format!("/api/jobs/{id}"));
    assert_eq!(job["size"], 3000);
    let page = http.ok("/api/tubes/default/jobs?state=ready");
    let preview = page["jobs"][0]["preview"].as_str().unwrap().to_owned();
    assert!(String::from_utf8(body(3000, 4))
        .unwrap()
        .starts_with(&preview));
    assert_eq!(page["jobs"][0]["size"], 3000);
    c.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    let gone = http.raw("GET", &format!("/api/jobs/{id}/body"), &[], None);
    assert_eq!(gone.status, 404);
}

/// A drain of a backlog larger than the cache, after a restart (every
/// body cold): each cold read has the pages after its own read ahead, and
/// each page read ahead the ones after it (`store/read_ahead.rs`), so few
/// reserves wait for a read: without it, one in a page did.
#[test]
fn a_drain_past_the_cache_waits_for_few_reads() {
    if !common::sprout_only("a_drain_past_the_cache_waits_for_few_reads") {
        return;
    }
    const JOBS: usize = 6000;
    const SIZE: usize = 256;
    let dir = TempDir::new();
    let store = dir.path().join("store");
    // ~2 MB of bodies, with each entry's charge.
    let args = ["--body-cache", "1000000"];
    let mut s = TestServer::start_with_store(&store, &args);
    let mut c = s.connect();
    for i in 0..JOBS {
        c.put(&body(SIZE, i));
    }
    s.signal(libc::SIGTERM);
    s.wait_exit(Duration::from_secs(10))
        .expect("still running 10 s after SIGTERM");
    let s = TestServer::start_with_store(&store, &args);
    let mut c = s.connect();
    assert_eq!(c.stat("body-cache-bytes"), "0", "a cold start");
    for i in 0..JOBS {
        let id = reserve(&mut c, "reserve\r\n", &body(SIZE, i));
        c.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    }
    let reads = misses(&mut c);
    let hits: u64 = c.stat("body-cache-hits").parse().unwrap();
    assert_eq!(reads + hits, JOBS as u64);
    // A 4 KiB page holds 13 of these jobs: ~460 pages.
    let pages = (JOBS / 13) as u64;
    assert!(
        reads * 10 < pages,
        "{reads} reserves of {JOBS} waited for a read"
    );
    assert_eq!(c.stat("body-cache-read-errors"), "0");
}
