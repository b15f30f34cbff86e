//! Cluster mode end to end: real nats-server 2.15.1 processes (three, on
//! loopback, `sync_interval: always`) and real sprout binaries.
//!
//! - A killed leader is replaced while producers and a consumer keep
//!   working through every node: each acknowledged put is still there with
//!   its body unless its delete was acknowledged, no acknowledged delete
//!   comes back, ids are never handed out twice, and the service is back
//!   within the bound (the times are printed).
//! - A leader frozen (SIGSTOP) until another has taken over is fenced: once
//!   thawed it stops, and the new leader's acknowledged jobs are all there.
//! - A whole cluster of sprout nodes killed at once comes back from the
//!   stream with every acknowledged job.
//! - The NATS node leading the stream killed under load: replies wait, and
//!   nothing acknowledged is lost.
//!
//! "In flight" means sent without an answer when a node died: such a
//! command may or may not have taken effect, and the checks allow both.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::nats::NatsCluster;
use common::{Addr, FallibleClient, TestServer};

/// A bound on a takeover, generous for a loaded 2-core machine: the lease
/// (1 s in these tests) runs out, a standby polls, reads on and claims.
const TAKEOVER_BOUND: Duration = Duration::from_secs(6);
const LEASE_MS: &str = "1000";

/// Three sprout nodes of one cluster.
struct Sprouts {
    urls: String,
    name: String,
    ports: Vec<u16>,
    nodes: Vec<Option<TestServer>>,
}

impl Sprouts {
    fn start(nats: &NatsCluster, name: &str, n: usize) -> Sprouts {
        let mut s = Sprouts {
            urls: nats.urls(),
            name: name.to_string(),
            ports: (0..n).map(|_| TestServer::free_port()).collect(),
            nodes: (0..n).map(|_| None).collect(),
        };
        for i in 0..n {
            s.start_node(i);
        }
        s
    }

    fn start_node(&mut self, i: usize) {
        let port = self.ports[i].to_string();
        let node = format!("s{i}");
        let args = [
            "-l",
            "127.0.0.1",
            "-p",
            &port,
            "--cluster",
            &self.urls,
            "--cluster-name",
            &self.name,
            "--node-id",
            &node,
            "--cluster-lease-ms",
            LEASE_MS,
            "-V",
        ];
        let server = TestServer::spawn(&args, Addr::Tcp(self.ports[i]))
            .unwrap_or_else(|e| panic!("node {i}: {e}"));
        self.nodes[i] = Some(server);
    }

    fn kill9(&mut self, i: usize) {
        if let Some(mut server) = self.nodes[i].take() {
            server.signal(libc::SIGKILL);
            server.wait_exit(Duration::from_secs(5));
        }
    }

    fn alive(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_some())
            .collect()
    }

    /// The node that answers as leader (asked through `via`, which passes
    /// the question on if it is a standby).
    fn leader_via(&self, via: usize) -> Option<usize> {
        let mut c = FallibleClient::connect(self.ports[via], Duration::from_secs(2)).ok()?;
        let stats = c.request("stats").ok()?;
        let len: usize = stats.strip_prefix("OK ")?.parse().ok()?;
        let body = String::from_utf8(c.read_body(len).ok()?).ok()?;
        let role = body.lines().any(|l| l == "cluster-role: leader");
        let leader = body
            .lines()
            .find_map(|l| l.strip_prefix("cluster-leader: "))?
            .trim_matches('"')
            .rsplit(':')
            .next()?
            .parse::<u16>()
            .ok()?;
        role.then(|| self.ports.iter().position(|&p| p == leader))?
    }

    /// Waits until the alive nodes agree on a leader.
    fn wait_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let seen: Vec<Option<usize>> =
                self.alive().iter().map(|&i| self.leader_via(i)).collect();
            if let Some(Some(l)) = seen.first() {
                if seen.iter().all(|s| *s == Some(*l)) && self.nodes[*l].is_some() {
                    return *l;
                }
            }
            if Instant::now() > deadline {
                let logs = self.logs();
                panic!("no leader agreed on within {timeout:?}: {seen:?}; stderr: {logs:#?}");
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// What every live node has logged.
    fn logs(&self) -> Vec<String> {
        self.nodes.iter().flatten().map(|n| n.stderr()).collect()
    }

    /// Puts through the live nodes in turn (one may have stopped by
    /// itself) until one is acknowledged; how long that took.
    fn time_to_put(&self, bound: Duration) -> Duration {
        let start = Instant::now();
        let alive = self.alive();
        for attempt in 0.. {
            let via = alive[attempt % alive.len()];
            let put = FallibleClient::connect(self.ports[via], Duration::from_secs(3)).and_then(
                |mut c| {
                    c.send(b"put 0 0 60 5\r\nprobe\r\n")?;
                    c.read_line()
                },
            );
            if put.is_ok_and(|l| l.starts_with("INSERTED ")) {
                return start.elapsed();
            }
            if start.elapsed() > bound {
                let logs = self.logs();
                panic!("no put acknowledged within {bound:?}; stderr: {logs:#?}");
            }
            thread::sleep(Duration::from_millis(20));
        }
        unreachable!()
    }
}

/// What the clients were told.
#[derive(Default)]
struct Told {
    /// Acknowledged puts: id → body.
    puts: HashMap<u64, Vec<u8>>,
    /// Acknowledged deletes.
    deletes: HashSet<u64>,
    /// Deletes sent without an answer.
    deletes_in_flight: HashSet<u64>,
    /// Every id any reply named.
    max_id: u64,
}

/// Producers and a consumer, each reconnecting to the next node when its
/// node dies.
struct Load {
    stop: Arc<AtomicBool>,
    told: Arc<Mutex<Told>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start(ports: &[u16], producers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let told = Arc::new(Mutex::new(Told::default()));
        let mut threads = Vec::new();
        for p in 0..producers {
            let (stop, told, ports) = (stop.clone(), told.clone(), ports.to_vec());
            threads.push(thread::spawn(move || produce(p, &ports, &stop, &told)));
        }
        let (stop2, told2, ports2) = (stop.clone(), told.clone(), ports.to_vec());
        threads.push(thread::spawn(move || consume(&ports2, &stop2, &told2)));
        Load {
            stop,
            told,
            threads,
        }
    }

    fn finish(self) -> Told {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("a load thread panicked");
        }
        Arc::try_unwrap(self.told)
            .ok()
            .expect("threads joined")
            .into_inner()
            .unwrap()
    }
}

fn produce(p: usize, ports: &[u16], stop: &AtomicBool, told: &Mutex<Told>) {
    let mut node = p;
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = FallibleClient::connect(ports[node % ports.len()], Duration::from_secs(30))
        else {
            node += 1;
            thread::sleep(Duration::from_millis(20));
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            k += 1;
            let body = format!("p{p}-{k}-{}", "x".repeat((k % 50) as usize)).into_bytes();
            let mut put = format!("put {} 0 120 {}\r\n", k % 7, body.len()).into_bytes();
            put.extend_from_slice(&body);
            put.extend_from_slice(b"\r\n");
            let reply = c.send(&put).and_then(|()| c.read_line());
            match reply.as_deref().map(|l| l.strip_prefix("INSERTED ")) {
                Ok(Some(id)) => {
                    let id: u64 = id.parse().expect("an id");
                    let mut t = told.lock().unwrap();
                    assert!(
                        t.puts.insert(id, body).is_none(),
                        "id {id} handed out twice"
                    );
                    t.max_id = t.max_id.max(id);
                }
                Ok(None) => panic!("put answered {reply:?}"),
                Err(_) => break,
            }
        }
        node += 1;
    }
}

fn consume(ports: &[u16], stop: &AtomicBool, told: &Mutex<Told>) {
    let mut node = 0;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = FallibleClient::connect(ports[node % ports.len()], Duration::from_secs(30))
        else {
            node += 1;
            thread::sleep(Duration::from_millis(20));
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let Ok(line) = c.request("reserve-with-timeout 1") else {
                break;
            };
            let Some(rest) = line.strip_prefix("RESERVED ") else {
                assert_eq!(line, "TIMED_OUT");
                continue;
            };
            let mut words = rest.split(' ');
            let id: u64 = words.next().unwrap().parse().unwrap();
            let len: usize = words.next().unwrap().parse().unwrap();
            if c.read_body(len).is_err() {
                break;
            }
            // Every other job is deleted; the rest are buried, for the check.
            let cmd = if id.is_multiple_of(2) {
                format!("delete {id}")
            } else {
                format!("bury {id} 0")
            };
            if id.is_multiple_of(2) {
                told.lock().unwrap().deletes_in_flight.insert(id);
            }
            match c.request(&cmd).as_deref() {
                Ok("DELETED") => {
                    let mut t = told.lock().unwrap();
                    t.deletes_in_flight.remove(&id);
                    t.deletes.insert(id);
                }
                Ok("BURIED") => {}
                Ok(other) => panic!("{cmd} answered {other}"),
                Err(_) => break,
            }
        }
        node += 1;
    }
}

/// Every acknowledged put is there with its body unless its delete was
/// acknowledged (or in flight); no acknowledged delete is back; a new put
/// gets an id above every id seen.
fn check(sprouts: &Sprouts, told: &Told) {
    // Through any node still running (a leader that stepped down exited).
    let mut c = sprouts
        .alive()
        .into_iter()
        .find_map(|i| FallibleClient::connect(sprouts.ports[i], Duration::from_secs(10)).ok())
        .expect("a node to ask");
    let mut present = 0;
    for (&id, body) in &told.puts {
        let reply = c.request(&format!("peek {id}")).unwrap();
        if told.deletes.contains(&id) {
            assert_eq!(reply, "NOT_FOUND", "job {id}: its delete was acknowledged");
            continue;
        }
        if reply == "NOT_FOUND" {
            assert!(
                told.deletes_in_flight.contains(&id),
                "acknowledged job {id} is gone"
            );
            continue;
        }
        let want = format!("FOUND {id} {}", body.len());
        assert_eq!(reply, want, "job {id}");
        assert_eq!(&c.read_body(body.len()).unwrap(), body, "job {id}'s body");
        present += 1;
    }
    c.send(b"put 0 0 60 3\r\nnew\r\n").unwrap();
    let line = c.read_line().unwrap();
    let id: u64 = line
        .strip_prefix("INSERTED ")
        .expect(&line)
        .parse()
        .unwrap();
    assert!(id > told.max_id, "new id {id} not above {}", told.max_id);
    eprintln!(
        "checked {} acknowledged puts ({present} present, {} deleted)",
        told.puts.len(),
        told.deletes.len()
    );
}

/// Three NATS servers, three sprout nodes of cluster `name` agreed on a
/// leader, and producers and a consumer at work; `None` without a NATS
/// server (see the harness). Also the leader's index.
fn under_load(test: &str, name: &str) -> Option<(NatsCluster, Sprouts, Load, usize)> {
    let nats = NatsCluster::start(3, test)?;
    let sprouts = Sprouts::start(&nats, name, 3);
    let leader = sprouts.wait_leader(Duration::from_secs(30));
    let load = Load::start(&sprouts.ports, 2);
    Some((nats, sprouts, load, leader))
}

#[test]
fn a_killed_leader_is_replaced_and_no_acknowledged_job_is_lost() {
    let Some((_nats, mut sprouts, load, _)) = under_load("a_killed_leader_is_replaced", "failover")
    else {
        return;
    };
    thread::sleep(Duration::from_millis(1500));
    let mut times = Vec::new();
    // 2 in CI; `SPROUT_CLUSTER_KILLS=N` for a distribution by hand.
    let kills = std::env::var("SPROUT_CLUSTER_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
    for _ in 0..kills {
        let leader = sprouts.wait_leader(Duration::from_secs(30));
        sprouts.kill9(leader);
        times.push(sprouts.time_to_put(Duration::from_secs(30)));
        sprouts.start_node(leader);
        thread::sleep(Duration::from_millis(1500));
    }
    let told = load.finish();
    let mut sorted = times.clone();
    sorted.sort();
    eprintln!(
        "service back after a leader's kill -9 ({kills} kills): min {:?}, median {:?}, max {:?}: {times:?}",
        sorted[0],
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    assert!(
        told.puts.len() > 100,
        "only {} puts acknowledged",
        told.puts.len()
    );
    for t in &times {
        assert!(*t < TAKEOVER_BOUND, "takeovers took {times:?}");
    }
    check(&sprouts, &told);
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
    let told = load.finish();
    assert_eq!(sprouts.wait_leader(Duration::from_secs(30)), new);
    check(&sprouts, &told);
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
    let told = load.finish();
    for i in 0..3 {
        sprouts.start_node(i);
    }
    sprouts.wait_leader(Duration::from_secs(30));
    check(&sprouts, &told);
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
    let told = load.finish();
    check(&sprouts, &told);
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
