//! Cluster mode end to end: real nats-server 2.15.1 processes (three, on
//! loopback, `sync_interval: always`) and real sprout binaries.
//!
//! - A killed leader is replaced while producers, consumers and a kicker
//!   keep working through every node: every acknowledged job is as the
//!   clients were told, and the service is back within the bound (the
//!   times are printed).
//! - A leader frozen (SIGSTOP) until another has taken over is fenced: once
//!   thawed it stops, and the new leader's acknowledged jobs are all there.
//! - A whole cluster of sprout nodes killed at once comes back from the
//!   stream with every acknowledged job.
//! - The NATS node leading the stream killed under load: replies wait, and
//!   nothing acknowledged is lost.
//! - A job reserved on a killed leader stays reserved on the new one until
//!   its TTR runs out, then times out and is handed out again.
//! - Starting: a NATS too old is refused; an unreachable one is named with
//!   the OS error and the node stops within seconds (SIGTERM during a
//!   setup loop, and copies NATS can never place: `cluster_setup.rs`).
//!
//! The load and the check are `common/model.rs`'s, the crash test's
//! (run through the nodes by `common/failover.rs`): after
//! each of these, every acknowledged job is checked for its state, priority,
//! tube, body, counters and buried order, and a job reserved through a
//! connection that died with its leader must still be reserved.
//!
//! "In flight" means sent without an answer when a node died: such a
//! command may or may not have taken effect, and the checks allow both.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::failover::{check, kill_leaders, Load};
use common::nats::NatsCluster;
use common::sprouts::Sprouts;
use common::{Addr, FallibleClient, TestServer};

/// Three NATS servers, three sprout nodes of cluster `name` agreed on a
/// leader, and producers and a consumer at work; `None` without a NATS
/// server (see the harness). Also the leader's index.
fn under_load(test: &str, name: &str) -> Option<(NatsCluster, Sprouts, Load, usize)> {
    let nats = NatsCluster::start(3, test)?;
    let sprouts = Sprouts::start(&nats, name, 3);
    let leader = sprouts.wait_leader(Duration::from_secs(30));
    let load = Load::start(&sprouts.ports);
    Some((nats, sprouts, load, leader))
}

#[test]
fn a_killed_leader_is_replaced_and_no_acknowledged_job_is_lost() {
    let Some((_nats, mut sprouts, load, _)) = under_load("a_killed_leader_is_replaced", "failover")
    else {
        return;
    };
    thread::sleep(Duration::from_millis(1500));
    // 2 in CI; `SPROUT_CLUSTER_KILLS=N` for a distribution by hand.
    let kills = std::env::var("SPROUT_CLUSTER_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
    kill_leaders(&mut sprouts, kills);
    let log = load.finish();
    check(&sprouts, &log);
}

#[test]
fn a_frozen_leader_is_fenced_once_another_has_taken_over() {
    let Some((_nats, mut sprouts, load, old)) = under_load("a_frozen_leader_is_fenced", "fencing")
    else {
        return;
    };
    thread::sleep(Duration::from_millis(800));
    sprouts.nodes[old].as_ref().unwrap().signal(libc::SIGSTOP);
    // Another node leads (asked through one that is not frozen).
    let deadline = Instant::now() + Duration::from_secs(30);
    let others: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let new = loop {
        if let Some(l) = sprouts.leader_via(others[0]).filter(|&l| l != old) {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "nobody took over from a frozen leader"
        );
        thread::sleep(Duration::from_millis(50));
    };
    thread::sleep(Duration::from_millis(800));
    let node = sprouts.nodes[old].as_mut().unwrap();
    node.signal(libc::SIGCONT);
    let status = node.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| !s.success()),
        "the thawed leader did not stop: {status:?}; stderr: {}",
        node.stderr()
    );
    sprouts.nodes[old] = None;
    thread::sleep(Duration::from_millis(500));
    let log = load.finish();
    assert_eq!(sprouts.wait_leader(Duration::from_secs(30)), new);
    check(&sprouts, &log);
}

#[test]
fn a_whole_cluster_killed_comes_back_from_the_stream() {
    let Some((_nats, mut sprouts, load, _)) = under_load("a_whole_cluster_killed", "coldstart")
    else {
        return;
    };
    thread::sleep(Duration::from_millis(1500));
    for i in 0..3 {
        sprouts.kill9(i);
    }
    let log = load.finish();
    for i in 0..3 {
        sprouts.start_node(i);
    }
    sprouts.wait_leader(Duration::from_secs(30));
    check(&sprouts, &log);
}

/// Kills the NATS node that leads `stream` under load, then checks that
/// puts are acknowledged again and nothing acknowledged is lost.
fn lose_the_nats_node_leading(test: &str, name: &str, stream: &str) {
    let Some((mut nats, sprouts, load, _)) = under_load(test, name) else {
        return;
    };
    thread::sleep(Duration::from_millis(1000));
    let leader = nats
        .wait_stream_leader(stream, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{stream} has a leader"));
    nats.kill9(leader);
    thread::sleep(Duration::from_secs(3));
    // Writes come back after NATS's own election: the same sprout leader
    // waits for it, or (when the lease's leader went) a standby takes over.
    let back = sprouts.time_to_put(Duration::from_secs(60));
    eprintln!("{test}: puts acknowledged again {back:?} after the kill -9 (+3 s)");
    for (i, log) in sprouts.logs().iter().enumerate() {
        for line in log
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("leading") || l.contains("given up"))
        {
            eprintln!("node {i}: {line}");
        }
    }
    thread::sleep(Duration::from_millis(1000));
    let log = load.finish();
    check(&sprouts, &log);
}

#[test]
fn losing_the_nats_node_that_leads_the_stream_loses_nothing() {
    lose_the_nats_node_leading(
        "losing_the_nats_node_that_leads_the_stream_loses_nothing",
        "natsloss",
        "SPROUT_natsloss",
    );
}

#[test]
fn losing_the_nats_node_that_leads_the_lease_loses_nothing() {
    lose_the_nats_node_leading(
        "losing_the_nats_node_that_leads_the_lease_loses_nothing",
        "leaseloss",
        "KV_sprout-leaseloss-lease",
    );
}

/// Waits for `stats-job id`'s reply through `c` and returns `key`.
fn job_stat(c: &mut FallibleClient, id: u64, key: &str) -> String {
    let line = c.request(&format!("stats-job {id}")).unwrap();
    let len: usize = line.strip_prefix("OK ").expect(&line).parse().unwrap();
    let body = String::from_utf8(c.read_body(len).unwrap()).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in {body}"))
        .to_string()
}

#[test]
fn a_job_reserved_on_a_killed_leader_stays_reserved_until_its_ttr_runs_out() {
    let test = "a_job_reserved_on_a_killed_leader_stays_reserved";
    let Some(nats) = NatsCluster::start(3, test) else {
        return;
    };
    let mut sprouts = Sprouts::start(&nats, "ttr", 3);
    let old = sprouts.wait_leader(Duration::from_secs(30));
    let mut worker = FallibleClient::connect(sprouts.ports[old], Duration::from_secs(5)).unwrap();
    worker.send(b"put 7 0 5 4\r\nwork\r\n").unwrap();
    let line = worker.read_line().unwrap();
    let id: u64 = line
        .strip_prefix("INSERTED ")
        .expect(&line)
        .parse()
        .unwrap();
    let sent = Instant::now();
    assert_eq!(
        worker.request("reserve").unwrap(),
        format!("RESERVED {id} 4")
    );
    worker.read_body(4).unwrap();
    sprouts.kill9(old);
    let new = sprouts.wait_leader(Duration::from_secs(30));
    let taken_over = sent.elapsed();
    let mut c = FallibleClient::connect(sprouts.ports[new], Duration::from_secs(10)).unwrap();
    assert_eq!(job_stat(&mut c, id, "state"), "reserved");
    // The worker's connection is gone: nobody can finish the job, and it
    // is not handed out again before its TTR (5 s from the reserve) ends.
    for cmd in [
        format!("delete {id}"),
        format!("release {id} 0 0"),
        format!("touch {id}"),
    ] {
        assert_eq!(c.request(&cmd).unwrap(), "NOT_FOUND", "{cmd}");
    }
    let mut polls = 0;
    while sent.elapsed() < Duration::from_millis(4800) {
        let reply = c.request("reserve-with-timeout 0").unwrap();
        assert_eq!(
            reply,
            "TIMED_OUT",
            "at {:?} after the reserve",
            sent.elapsed()
        );
        polls += 1;
        thread::sleep(Duration::from_millis(100));
    }
    let line = c.request("reserve-with-timeout 10").unwrap();
    let back = sent.elapsed();
    assert_eq!(line, format!("RESERVED {id} 4"));
    assert_eq!(c.read_body(4).unwrap(), b"work");
    eprintln!(
        "taken over {taken_over:?} after the reserve; {polls} reserves refused; \
         handed out again {back:?} after the reserve (TTR 5 s)"
    );
    assert!(back >= Duration::from_millis(4950), "back after {back:?}");
    assert!(back < Duration::from_millis(6500), "back after {back:?}");
    assert_eq!(job_stat(&mut c, id, "timeouts"), "1");
    assert_eq!(job_stat(&mut c, id, "reserves"), "2");
    assert_eq!(job_stat(&mut c, id, "pri"), "7");
}

/// A stand-in for a NATS server too old for cluster mode: its INFO says
/// 2.9.10, and it answers pings, nothing more. Until armed it hangs up on
/// every connection, so a client connects to the real server first.
struct OldNats {
    port: u16,
    armed: Arc<AtomicBool>,
}

impl OldNats {
    fn start() -> OldNats {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let on = armed.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if on.load(Ordering::SeqCst) {
                    thread::spawn(move || serve_as_old_nats(stream, port));
                }
            }
        });
        OldNats { port, armed }
    }
}

fn serve_as_old_nats(mut s: TcpStream, port: u16) {
    let info = format!(
        "INFO {{\"server_id\":\"OLDNATS\",\"server_name\":\"old\",\"version\":\"2.9.10\",\
         \"proto\":1,\"go\":\"go1.19\",\"host\":\"127.0.0.1\",\"port\":{port},\
         \"headers\":true,\"max_payload\":1048576,\"jetstream\":true}}\r\n"
    );
    if s.write_all(info.as_bytes()).is_err() {
        return;
    }
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = Vec::new();
    while r.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
        if line.starts_with(b"PING") && s.write_all(b"PONG\r\n").is_err() {
            return;
        }
        line.clear();
    }
}

/// The arguments of a one-node cluster `name` on `urls`, serving on
/// `port` (one NATS copy, a 10 s lease: in these tests only the version
/// check stops it).
fn one_node(port: &str, urls: &str, name: &str) -> Vec<String> {
    [
        "-l",
        "127.0.0.1",
        "-p",
        port,
        "--cluster",
        urls,
        "--cluster-name",
        name,
        "--node-id",
        "s0",
        "--cluster-replicas",
        "1",
        "--cluster-lease-ms",
        "10000",
        "-V",
    ]
    .map(String::from)
    .to_vec()
}

/// Spawns a node; what it logged once it stopped, non-zero, within 20 s.
fn stopped(args: &[String], then: impl FnOnce(&TestServer)) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let port = args[3].parse().unwrap();
    let mut node = match TestServer::spawn(&args, Addr::Tcp(port)) {
        // Stopped before it listened.
        Err(why) => return why,
        Ok(node) => node,
    };
    then(&node);
    let status = node.wait_exit(Duration::from_secs(20));
    let said = node.stderr();
    assert!(
        status.is_some_and(|s| !s.success()),
        "still serving ({status:?}); stderr: {said}"
    );
    said
}

#[test]
fn a_node_refuses_an_old_nats_server_at_startup_and_on_reconnect() {
    let test = "a_node_refuses_an_old_nats_server";
    let old = OldNats::start();
    old.armed.store(true, Ordering::SeqCst);
    let port = TestServer::free_port().to_string();
    let only_old = format!("nats://127.0.0.1:{}", old.port);
    let said = stopped(&one_node(&port, &only_old, "oldnats"), |_| {});
    assert!(said.contains("2.9.10"), "{said}");

    let Some(mut nats) = NatsCluster::start(1, test) else {
        return;
    };
    old.armed.store(false, Ordering::SeqCst);
    let port = TestServer::free_port().to_string();
    let urls = format!("{},nats://127.0.0.1:{}", nats.url(0), old.port);
    let mut killed = None;
    let said = stopped(&one_node(&port, &urls, "reconnect"), |node| {
        let mut c = FallibleClient::connect(node.port(), Duration::from_secs(20)).unwrap();
        c.send(b"put 0 0 60 1\r\nx\r\n").unwrap();
        let line = c.read_line().unwrap();
        assert!(line.starts_with("INSERTED "), "{line}: {}", node.stderr());
        // The real server goes; the client's reconnect finds the old one.
        old.armed.store(true, Ordering::SeqCst);
        killed = Some(Instant::now());
        nats.kill9(0);
    });
    assert!(said.contains("reconnected to NATS server old"), "{said}");
    assert!(said.contains("2.9.10"), "{said}");
    eprintln!(
        "stopped within {:?} of the kill: {}",
        killed.unwrap().elapsed(),
        said.lines().last().unwrap_or("")
    );
}

#[test]
fn an_unreachable_nats_is_named_and_the_node_stops() {
    let port = TestServer::free_port().to_string();
    let nobody = format!("nats://127.0.0.1:{}", TestServer::free_port());
    let started = Instant::now();
    let said = stopped(&one_node(&port, &nobody, "unreachable"), |_| {});
    let took = started.elapsed();
    eprintln!(
        "stopped after {took:?}: {}",
        said.lines().last().unwrap_or("")
    );
    assert!(
        said.contains(&format!("cannot reach NATS at {nobody}")),
        "{said}"
    );
    assert!(said.contains("Connection refused"), "{said}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}
