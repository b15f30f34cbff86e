//! Recovery semantics of the durable store (`-b DIR`), deterministically:
//! each test builds a known state against the real binary, stops it (SIGKILL
//! under `-f 0` or once `-f 200` has passed, or SIGTERM under the default
//! `-f 50`), restarts it on the
//! same directory and checks what comes back:
//!
//! - ready jobs with their priority, TTR, body and tube; tubes listed again
//!   with the right `stats-tube` counts;
//! - a job reserved at the crash comes back ready, with the counters of its
//!   last record: that reserve is not counted (a reserve writes nothing, as
//!   in beanstalkd);
//! - buried jobs stay buried and kick out in their bury order (not id order);
//! - every `stats-job` counter (reserves, timeouts, releases, buries, kicks)
//!   is the same, across two restarts (beanstalkd bumps `buries` on every
//!   replay: its issue #668), and a release with delay 0 keeps its new
//!   priority (beanstalkd #597);
//! - a delayed job keeps its absolute deadline (neither restarted from
//!   scratch nor dropped), and one due during the downtime is ready at once;
//! - new ids continue above every id issued, even deleted ones;
//! - a damaged `db` file stops the server at startup with a clear message,
//!   and `--salvage` is the documented way past it.
//!
//! All sprout-only: beanstalkd's binlog is another format and other flags.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{parse_yaml_list, sprout_only, Client, TempDir, TestServer};

/// `stats-job` keys that change with time alone.
const VOLATILE: [&str; 2] = ["age", "time-left"];

/// `stats-job <id>` without the time-dependent keys.
fn job_stats(c: &mut Client, id: u64) -> BTreeMap<String, String> {
    c.stats_of(&format!("stats-job {id}"))
        .into_iter()
        .filter(|(k, _)| !VOLATILE.contains(&k.as_str()))
        .collect()
}

/// `list-tubes`, sorted.
fn tubes(c: &mut Client) -> Vec<String> {
    let mut list = parse_yaml_list(&c.ok_body(b"list-tubes\r\n"));
    list.sort();
    list
}

/// The job counts of `stats-tube <tube>`.
fn tube_counts(c: &mut Client, tube: &str) -> BTreeMap<String, String> {
    c.stats_of(&format!("stats-tube {tube}"))
        .into_iter()
        .filter(|(k, _)| k.starts_with("current-jobs-") || k == "name")
        .collect()
}

/// Polls `stats-job <id>` (up to 5 s) until `key` is `value`.
#[track_caller]
fn wait_job_stat(c: &mut Client, id: u64, key: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = c.job_stat(id, key);
        if got == value {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "job {id}: {key} still {got:?}, wanted {value:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// The state the recovery tests build, and what it should look like.
struct Scenario {
    /// Every live job: id and body.
    bodies: Vec<(u64, Vec<u8>)>,
    /// `stats-job` of every live job before the stop (volatile keys out).
    stats: BTreeMap<u64, BTreeMap<String, String>>,
    /// Reserved when the server stopped: comes back ready.
    reserved: u64,
    /// Buried in tube `grave`, in bury order.
    buried: Vec<u64>,
    /// Deleted before the stop; the highest ids issued.
    deleted: Vec<u64>,
    /// `stats-tube` counts before the stop (with the reserved job counted
    /// as ready, as it must come back).
    tube_counts: BTreeMap<String, BTreeMap<String, String>>,
    /// Connections kept open until the stop (a reserved job stays reserved).
    _conns: Vec<Client>,
}

const TUBES: [&str; 5] = ["alpha", "counted", "default", "grave", "held"];

/// Builds the scenario on `s`: jobs in every state, in several tubes, with
/// non-trivial counters.
fn build(s: &TestServer) -> Scenario {
    let mut bodies = Vec::new();
    // Ready jobs with distinct priorities and TTRs in tube alpha.
    let mut a = s.connect();
    a.exchange(b"use alpha\r\n", b"USING alpha\r\n");
    for (pri, ttr, body) in [
        (10, 30, &b"alpha-one"[..]),
        (20, 40, b"alpha-two"),
        (4_000_000_000, 7, b"alpha three: \x00\xff binary\r\n too"),
    ] {
        let id = a.put_with(pri, 0, ttr, body);
        bodies.push((id, body.to_vec()));
    }
    // A job reserved at the stop, in tube held.
    let mut b = s.connect();
    b.exchange(b"use held\r\n", b"USING held\r\n");
    let reserved = b.put_with(5, 0, 100, b"reserved at the crash");
    bodies.push((reserved, b"reserved at the crash".to_vec()));
    b.exchange(b"watch held\r\n", b"WATCHING 2\r\n");
    b.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    b.send(b"reserve-with-timeout 0\r\n");
    assert_eq!(b.expect_reserved(b"reserved at the crash"), reserved);

    // Three jobs buried in tube grave in another order than their ids.
    let mut c = s.connect();
    c.exchange(b"use grave\r\n", b"USING grave\r\n");
    c.exchange(b"watch grave\r\n", b"WATCHING 2\r\n");
    c.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    let g: Vec<u64> = (1..=3)
        .map(|n| {
            let body = format!("grave-{n}").into_bytes();
            let id = c.put_with(7, 0, 60, &body);
            bodies.push((id, body));
            id
        })
        .collect();
    for (n, &id) in g.iter().enumerate() {
        c.send(b"reserve-with-timeout 0\r\n");
        assert_eq!(c.expect_reserved(format!("grave-{}", n + 1).as_bytes()), id);
    }
    let buried = vec![g[1], g[2], g[0]];
    for (pri, id) in [50, 60, 70].into_iter().zip(&buried) {
        c.exchange(format!("bury {id} {pri}\r\n").as_bytes(), b"BURIED\r\n");
    }

    // One job through every counter, in tube counted, with a 1 s TTR:
    // reserve, release (delay 0, new priority), reserve, bury, kick-job,
    // reserve and let the TTR run out, reserve, release (delay 0) again.
    let mut d = s.connect();
    d.exchange(b"use counted\r\n", b"USING counted\r\n");
    d.exchange(b"watch counted\r\n", b"WATCHING 2\r\n");
    d.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    let counted = d.put_with(1000, 0, 1, b"counted");
    bodies.push((counted, b"counted".to_vec()));
    let reserve = |d: &mut Client| {
        d.send(b"reserve-with-timeout 0\r\n");
        assert_eq!(d.expect_reserved(b"counted"), counted);
    };
    reserve(&mut d);
    d.exchange(
        format!("release {counted} 99 0\r\n").as_bytes(),
        b"RELEASED\r\n",
    );
    reserve(&mut d);
    d.exchange(format!("bury {counted} 77\r\n").as_bytes(), b"BURIED\r\n");
    d.exchange(format!("kick-job {counted}\r\n").as_bytes(), b"KICKED\r\n");
    reserve(&mut d);
    // The TTR (1 s) runs out: back to ready with timeouts 1.
    wait_job_stat(&mut d, counted, "timeouts", "1");
    wait_job_stat(&mut d, counted, "state", "ready");
    reserve(&mut d);
    d.exchange(
        format!("release {counted} 33 0\r\n").as_bytes(),
        b"RELEASED\r\n",
    );

    // The newest jobs are deleted: ids must still continue above them.
    let e1 = a.put(b"deleted one");
    let e2 = a.put(b"deleted two");
    for id in [e1, e2] {
        a.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    }

    let mut stats = BTreeMap::new();
    for (id, _) in &bodies {
        stats.insert(*id, job_stats(&mut a, *id));
    }
    // What the counters must read: the point of the scenario.
    let counted_stats = &stats[&counted];
    for (key, value) in [
        ("state", "ready"),
        ("pri", "33"),
        ("reserves", "4"),
        ("timeouts", "1"),
        ("releases", "2"),
        ("buries", "1"),
        ("kicks", "1"),
    ] {
        assert_eq!(counted_stats[key], value, "before the stop: {key}");
    }
    assert_eq!(stats[&reserved]["state"], "reserved");
    for id in &buried {
        assert_eq!(stats[id]["state"], "buried");
        assert_eq!(stats[id]["buries"], "1");
    }
    let mut tube_counts = BTreeMap::new();
    for tube in TUBES {
        let mut counts = tube_counts_of(&mut a, tube);
        if tube == "held" {
            // The reserved job comes back ready.
            counts.insert("current-jobs-reserved".into(), "0".into());
            counts.insert("current-jobs-ready".into(), "1".into());
            counts.insert("current-jobs-urgent".into(), "1".into());
        }
        tube_counts.insert(tube.to_string(), counts);
    }
    Scenario {
        bodies,
        stats,
        reserved,
        buried,
        deleted: vec![e1, e2],
        tube_counts,
        _conns: vec![a, b, c, d],
    }
}

fn tube_counts_of(c: &mut Client, tube: &str) -> BTreeMap<String, String> {
    tube_counts(c, tube)
}

/// Checks a restarted server against the scenario (without changing it).
fn verify(s: &TestServer, sc: &Scenario) {
    let mut c = s.connect();
    assert_eq!(tubes(&mut c), TUBES, "list-tubes after the restart");
    for (tube, counts) in &sc.tube_counts {
        assert_eq!(
            &tube_counts(&mut c, tube),
            counts,
            "stats-tube {tube} after the restart"
        );
    }
    for (id, body) in &sc.bodies {
        assert_eq!(
            c.peek(*id).as_deref(),
            Some(&body[..]),
            "job {id}: body after the restart"
        );
        let mut want = sc.stats[id].clone();
        if *id == sc.reserved {
            want.insert("state".into(), "ready".into());
            let reserves: u32 = want["reserves"].parse().unwrap();
            want.insert("reserves".into(), (reserves - 1).to_string());
        }
        assert_eq!(
            job_stats(&mut c, *id),
            want,
            "job {id}: stats-job after the restart"
        );
    }
    for id in &sc.deleted {
        assert_eq!(c.peek(*id), None, "deleted job {id} came back");
    }
}

/// Kicks tube grave's buried jobs one at a time; returns them in the order
/// they came out.
fn kick_order(s: &TestServer) -> Vec<u64> {
    let mut c = s.connect();
    c.exchange(b"use grave\r\n", b"USING grave\r\n");
    let mut order = Vec::new();
    while let Some((id, _)) = c.peek_cmd("peek-buried") {
        c.exchange(b"kick 1\r\n", b"KICKED 1\r\n");
        order.push(id);
        assert!(order.len() <= 3, "kicked more buried jobs than buried");
    }
    order
}

/// The next id the server issues (puts and deletes a job).
fn next_id(s: &TestServer) -> u64 {
    let mut c = s.connect();
    let id = c.put(b"probe");
    c.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    id
}

/// The fsync policies: every one must keep what it acknowledged through a
/// kill -9 (only a power loss tells them apart).
const POLICIES: [&[&str]; 4] = [&["-f", "0"], &[], &["-f", "200"], &["-F"]];

#[test]
fn everything_survives_sigkill_under_every_policy() {
    if !sprout_only("everything_survives_sigkill_under_every_policy") {
        return;
    }
    for policy in POLICIES {
        let store = TempDir::new();
        let dir = store.path().join("store");
        let mut s = TestServer::start_with_store(&dir, policy);
        let sc = build(&s);
        let highest = *sc.deleted.iter().max().unwrap();
        // At once: nothing has had time to be synced.
        s.kill9();

        // Twice: recovery must not change what it recovers (beanstalkd #668
        // bumps `buries` on every replay).
        for round in 1..=2 {
            let mut s = TestServer::start_with_store(&dir, policy);
            verify(&s, &sc);
            if round == 2 {
                assert_eq!(
                    kick_order(&s),
                    sc.buried,
                    "{policy:?}: bury order after restart"
                );
                assert!(
                    next_id(&s) > highest,
                    "{policy:?}: ids must continue above {highest}"
                );
            }
            s.kill9();
        }
    }
}

#[test]
fn a_put_answered_just_before_a_kill_is_kept() {
    if !sprout_only("a_put_answered_just_before_a_kill_is_kept") {
        return;
    }
    // A binary body of 1 KB: every byte value, CR and LF among them.
    let body: Vec<u8> = (0..1024).map(|i| (i * 7 % 256) as u8).collect();
    for policy in POLICIES {
        let store = TempDir::new();
        let dir = store.path().join("store");
        let mut s = TestServer::start_with_store(&dir, policy);
        let mut c = s.connect();
        let put = c.put(&body);
        s.kill9();
        let mut s = TestServer::start_with_store(&dir, policy);
        let mut c = s.connect();
        assert_eq!(c.peek(put), Some(body.clone()), "{policy:?}: put lost");
        // Reserved at the kill: back, and ready.
        let reserved = c.put(b"taken");
        c.send(b"reserve-with-timeout 0\r\n");
        let line = c.expect_line();
        assert!(line.starts_with(&format!("RESERVED {put} ")), "{line}");
        c.read_exact_bytes(body.len() + 2);
        s.kill9();
        let s = TestServer::start_with_store(&dir, policy);
        let mut c = s.connect();
        assert_eq!(c.job_stat(put, "state"), "ready", "{policy:?}");
        assert_eq!(c.peek(reserved), Some(b"taken".to_vec()), "{policy:?}");
    }
}

/// The journal files' names in `dir`.
fn journal_files(dir: &Path) -> Vec<String> {
    let files = std::fs::read_dir(dir.join("journal")).expect("journal dir");
    let names = files.map(|f| f.expect("entry").file_name().to_string_lossy().into_owned());
    names.filter(|n| n.parse::<u64>().is_ok()).collect()
}

/// A release whose job's put is in sled alone (its journal file gone):
/// recovery lays the journal's state over the image it reads from sled's
/// page, so the job comes back delayed, with its body.
#[test]
fn a_state_in_the_journal_over_a_put_only_sled_holds() {
    if !sprout_only("a_state_in_the_journal_over_a_put_only_sled_holds") {
        return;
    }
    let store = TempDir::new();
    let dir = store.path().join("store");
    // Small journal files, so the puts' file is removed once sled has
    // them; every reply synced.
    let args = ["-f", "0", "-s", "20000"];
    let mut s = TestServer::start_with_store(&dir, &args);
    let mut c = s.connect();
    let jobs: Vec<(u64, Vec<u8>)> = (0..20u8)
        .map(|i| {
            let body = vec![b'a' + i; 1000];
            (c.put(&body), body)
        })
        .collect();
    let with_puts = journal_files(&dir);
    let deadline = Instant::now() + Duration::from_secs(20);
    while journal_files(&dir).iter().any(|f| with_puts.contains(f)) {
        assert!(Instant::now() < deadline, "the puts' journal file stayed");
        let id = c.put(b"churn");
        c.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    }
    for _ in &jobs {
        c.send(b"reserve-with-timeout 0\r\n");
        let line = c.expect_line();
        let id: u64 = line
            .split(' ')
            .nth(1)
            .and_then(|n| n.parse().ok())
            .expect(&line);
        c.read_exact_bytes(1002);
        c.exchange(
            format!("release {id} 7 3600\r\n").as_bytes(),
            b"RELEASED\r\n",
        );
    }
    s.kill9();
    let s = TestServer::start_with_store(&dir, &args);
    let mut c = s.connect();
    for (id, body) in &jobs {
        assert_eq!(c.peek(*id).as_ref(), Some(body), "job {id}'s body");
        assert_eq!(c.job_stat(*id, "state"), "delayed", "job {id}");
        assert_eq!(c.job_stat(*id, "pri"), "7", "job {id}");
    }
}

#[test]
fn everything_survives_sigterm_under_default_policy() {
    if !sprout_only("everything_survives_sigterm_under_default_policy") {
        return;
    }
    let store = TempDir::new();
    let dir = store.path().join("store");
    let mut s = TestServer::start_with_store(&dir, &[]);
    let sc = build(&s);
    let highest = *sc.deleted.iter().max().unwrap();
    s.terminate();

    let s = TestServer::start_with_store(&dir, &[]);
    verify(&s, &sc);
    assert_eq!(kick_order(&s), sc.buried, "bury order after restart");
    assert!(next_id(&s) > highest, "ids must continue above {highest}");
}

#[test]
fn delayed_job_keeps_its_absolute_deadline() {
    if !sprout_only("delayed_job_keeps_its_absolute_deadline") {
        return;
    }
    const DELAY: Duration = Duration::from_secs(4);
    let store = TempDir::new();
    let dir = store.path().join("store");
    let mut s = TestServer::start_with_store(&dir, &["-f", "0"]);
    let mut c = s.connect();
    c.exchange(b"use later\r\n", b"USING later\r\n");
    let put_at = Instant::now();
    let id = c.put_with(3, DELAY.as_secs() as u32, 60, b"later");
    // Down 1 s after the put: a restarted delay would end at >= 5 s.
    thread::sleep(Duration::from_secs(1));
    s.kill9();

    let s = TestServer::start_with_store(&dir, &["-f", "0"]);
    let mut c = s.connect();
    let stats = c.stats_of(&format!("stats-job {id}"));
    assert_eq!(common::lookup(&stats, "state"), "delayed");
    assert_eq!(common::lookup(&stats, "delay"), "4");
    assert_eq!(common::lookup(&stats, "tube"), "\"later\"");
    // Under 3 s remain (truncated: at most 2); a fresh 4 s delay would
    // read 3.
    let left: u64 = common::lookup(&stats, "time-left").parse().unwrap();
    assert!(left <= 2, "time-left {left}: the delay restarted");
    c.exchange(b"use later\r\n", b"USING later\r\n");
    assert_eq!(c.peek_cmd("peek-ready"), None, "ready too early");
    assert_eq!(c.peek_cmd("peek-delayed").map(|(i, _)| i), Some(id));

    c.exchange(b"watch later\r\n", b"WATCHING 2\r\n");
    c.send(b"reserve-with-timeout 10\r\n");
    assert_eq!(
        c.expect_reserved_within(b"later", Duration::from_secs(10)),
        id
    );
    let at = put_at.elapsed();
    common::assert_between(
        at,
        DELAY - Duration::from_millis(50),
        DELAY + Duration::from_millis(700),
    );
}

#[test]
fn delayed_job_due_during_downtime_is_ready_at_once() {
    if !sprout_only("delayed_job_due_during_downtime_is_ready_at_once") {
        return;
    }
    let store = TempDir::new();
    let dir = store.path().join("store");
    let mut s = TestServer::start_with_store(&dir, &["-f", "0"]);
    let mut c = s.connect();
    let id = c.put_with(0, 1, 60, b"due");
    s.kill9();
    thread::sleep(Duration::from_millis(1200));

    let s = TestServer::start_with_store(&dir, &["-f", "0"]);
    let mut c = s.connect();
    assert_eq!(c.job_stat(id, "state"), "ready");
    assert_eq!(c.peek_cmd("peek-ready").map(|(i, _)| i), Some(id));
}

#[test]
fn ids_continue_above_deleted_jobs_across_restarts() {
    if !sprout_only("ids_continue_above_deleted_jobs_across_restarts") {
        return;
    }
    let store = TempDir::new();
    let dir = store.path().join("store");
    let mut s = TestServer::start_with_store(&dir, &["-f", "0"]);
    let mut c = s.connect();
    let ids: Vec<u64> = (0..5).map(|_| c.put(b"x")).collect();
    for id in &ids {
        c.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    }
    let mut highest = ids[4];
    drop(c);
    s.kill9();
    // An empty store still remembers the ids it issued, through a crash
    // and through a clean stop.
    for graceful in [false, true, false] {
        let mut s = TestServer::start_with_store(&dir, &["-f", "0"]);
        let mut c = s.connect();
        assert_eq!(c.stat("current-jobs-ready"), "0");
        let id = c.put(b"y");
        assert!(id > highest, "new id {id} not above {highest}");
        highest = id;
        c.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
        if graceful {
            s.terminate();
        } else {
            s.kill9();
        }
    }
}

/// Runs the binary on `store`, expecting it to stop on its own within 3 s:
/// returns its exit code and stderr, or, if it kept running (it is then
/// killed), its stderr as the error.
fn run_to_exit(store: &Path, extra: &[&str]) -> Result<(Option<i32>, String), String> {
    let port = TestServer::free_port().to_string();
    let scratch = TempDir::new();
    let err_path = scratch.path().join("stderr");
    let err = std::fs::File::create(&err_path).unwrap();
    let mut args = vec![
        "-l",
        "127.0.0.1",
        "-p",
        &port,
        "-b",
        store.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut child = Command::new(common::binary())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Ok((status.code(), std::fs::read_to_string(&err_path).unwrap()));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::fs::read_to_string(&err_path).unwrap());
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Puts `jobs` jobs of ~220 bytes with journal files of `file_size`, stops
/// cleanly, and damages sled's data file: overwrites 4 KiB in its middle,
/// and if `truncate`, cuts off everything after that. Returns the store,
/// its parent and the ids.
fn damaged_store(
    file_size: &str,
    jobs: usize,
    truncate: bool,
) -> (TempDir, std::path::PathBuf, Vec<u64>) {
    let store = TempDir::new();
    let dir = store.path().join("store");
    let mut s = TestServer::start_with_store(&dir, &["-f", "0", "-s", file_size]);
    let mut c = s.connect();
    let mut ids = Vec::new();
    for n in 0..jobs {
        ids.push(c.put(format!("job number {n} {}", "z".repeat(200)).as_bytes()));
    }
    drop(c);
    s.terminate();
    let db = dir.join("db");
    let mut bytes = std::fs::read(&db).expect("read db");
    let len = bytes.len();
    assert!(len > 16 * 1024, "db file only {len} bytes");
    for (i, b) in bytes[len / 2 - 2048..len / 2 + 2048].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31) ^ 0x5a;
    }
    if truncate {
        bytes.truncate(len / 2 + 2048);
    }
    std::fs::write(&db, &bytes).expect("write db");
    (store, dir, ids)
}

fn body_of(n: usize) -> Vec<u8> {
    format!("job number {n} {}", "z".repeat(200)).into_bytes()
}

#[test]
fn damage_the_journal_covers_loses_nothing() {
    if !sprout_only("damage_the_journal_covers_loses_nothing") {
        return;
    }
    // Journal files large enough to hold every frame since the start: the
    // journal alone can rebuild the store.
    let (_store, dir, ids) = damaged_store("10485760", 200, true);
    match run_to_exit(&dir, &[]) {
        Ok((code, stderr)) => {
            // sled could not open its damaged file: a refusal that says so.
            eprintln!("refused: {}", stderr.trim());
            assert_ne!(code, Some(0));
            assert!(stderr.contains("cannot open"), "stderr: {stderr}");
        }
        Err(_) => {
            eprintln!("started: the journal made the damage good");
            let s = TestServer::start_with_store(&dir, &[]);
            let mut c = s.connect();
            for (n, &id) in ids.iter().enumerate() {
                assert_eq!(c.peek(id), Some(body_of(n)), "job {id} after the damage");
            }
        }
    }
}

#[test]
fn damaged_store_refuses_to_start() {
    if !sprout_only("damaged_store_refuses_to_start") {
        return;
    }
    // Small journal files, taken into sled and removed as they fill: the
    // journal holds only the last jobs, and sled's damage cannot be made
    // good from it.
    let (store, dir, ids) = damaged_store("65536", 2000, true);
    // sled may rewrite the log when it opens it: every run gets its own
    // copy of the damaged store.
    let copy = |name: &str| {
        let to = store.path().join(name);
        common::copy_dir(&dir, &to);
        to
    };
    let (plain, salvage, inspect) = (copy("plain"), copy("salvage"), copy("inspect"));

    match run_to_exit(&plain, &[]) {
        Ok((code, stderr)) => {
            eprintln!("refused: {}", stderr.trim());
            assert_ne!(code, Some(0), "exit status on a damaged store");
            assert!(
                stderr.contains("damaged") || stderr.contains("cannot open"),
                "stderr should explain the damage: {stderr}"
            );
        }
        Err(stderr) => {
            // It started: then every job must be there, or it dropped
            // jobs silently.
            let s = TestServer::start_with_store(&inspect, &[]);
            let mut c = s.connect();
            let missing: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|&id| c.peek(id).is_none())
                .collect();
            panic!(
                "the server started on a damaged store (stderr: {stderr:?}); {} of {} jobs \
                 missing: {missing:?}",
                missing.len(),
                ids.len()
            );
        }
    }

    // --salvage: either the server starts and serves what it could read,
    // intact, or sled cannot open the file at all and the message says so.
    match run_to_exit(&salvage, &["--salvage"]) {
        Ok((code, stderr)) => {
            assert_ne!(code, Some(0));
            assert!(
                stderr.contains("cannot open") && stderr.contains("salvage"),
                "with --salvage, stderr should say sled cannot open the store: {stderr}"
            );
        }
        Err(_) => {
            let s = TestServer::start_with_store(&salvage, &["--salvage"]);
            let mut c = s.connect();
            let mut kept = 0;
            for (n, id) in ids.iter().enumerate() {
                if let Some(body) = c.peek(*id) {
                    kept += 1;
                    assert_eq!(body, body_of(n), "job {id} salvaged with another body");
                }
            }
            eprintln!("--salvage kept {kept} of {} jobs", ids.len());
        }
    }
}

#[test]
fn a_store_in_use_is_refused_in_one_sentence_naming_the_holder() {
    if !sprout_only("a_store_in_use_is_refused_in_one_sentence_naming_the_holder") {
        return;
    }
    let scratch = TempDir::new();
    let store = scratch.path().join("store");
    let first = TestServer::start_with_store(&store, &[]);
    let (code, stderr) = run_to_exit(&store, &[]).expect("the second server exits");
    assert_ne!(code, Some(0), "{stderr}");
    let sentence = format!(
        "-b {} is in use by another sprout (pid {})",
        store.display(),
        first.pid()
    );
    assert!(stderr.contains(&sentence), "{stderr}");
    assert!(!stderr.contains("Os {"), "no Rust debug text: {stderr}");
}

#[test]
fn an_unwritable_store_dir_is_named_not_writable() {
    if !sprout_only("an_unwritable_store_dir_is_named_not_writable") {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("skipping: root may write to a mode 0555 directory");
        return;
    }
    let scratch = TempDir::new();
    let store = scratch.path().join("store");
    std::fs::create_dir(&store).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o555)).unwrap();
    let (code, stderr) = run_to_exit(&store, &[]).expect("the server exits");
    assert_ne!(code, Some(0), "{stderr}");
    let sentence = format!("-b {} is not writable: ", store.display());
    assert!(stderr.contains(&sentence), "{stderr}");
    assert!(!stderr.contains("cannot create"), "{stderr}");
}
