//! A cluster that cannot be set up wrong in silence (issue 31): each
//! configuration that can never work stops the node with one message and
//! a non-zero status within [`FAIL_FAST`], and SIGTERM during a setup
//! loop that may yet succeed (NATS not answering) stops it within
//! [`SIGTERM_BOUND`]. Real processes on free loopback ports; nats-server
//! 2.15.1 as `tests/common/nats.rs` finds it.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::nats::NatsCluster;
use common::{TempDir, TestServer};

/// How long a node may take to refuse a configuration that cannot work.
const FAIL_FAST: Duration = Duration::from_secs(10);
/// How long a node may take to stop on SIGTERM in a setup loop.
const SIGTERM_BOUND: Duration = Duration::from_secs(1);

/// A sprout process whose stderr goes to a file.
struct Node {
    child: Child,
    started: Instant,
    log: PathBuf,
    _dir: TempDir,
}

/// How a node ended: status, time since it was started or signalled, and
/// what it said.
struct Ended {
    status: ExitStatus,
    took: Duration,
    said: String,
}

impl Node {
    /// Starts `sprout -l 127.0.0.1 -p PORT --cluster URLS` with `extra`.
    fn spawn(urls: &str, extra: &[&str]) -> Node {
        let dir = TempDir::new();
        let log = dir.path().join("stderr");
        let port = TestServer::free_port();
        let p = port.to_string();
        let mut args = vec!["-l", "127.0.0.1", "-p", &p, "--cluster", urls];
        args.extend_from_slice(extra);
        let child = Command::new(common::binary())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Node {
            child,
            started: Instant::now(),
            log,
            _dir: dir,
        }
    }

    fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the exit, at most `bound` after `since` (then kills it
    /// and fails the test).
    fn ended(mut self, since: Instant, bound: Duration) -> Ended {
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let took = since.elapsed();
                return Ended {
                    status,
                    took,
                    said: self.said(),
                };
            }
            if since.elapsed() > bound + Duration::from_secs(20) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("still running after {:?}: {}", since.elapsed(), self.said());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until it leads (its `-V` log says so): its stream, lease
    /// bucket and claim are in NATS by then.
    fn wait_leading(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.said().contains("leading cluster") {
            let exited = self.child.try_wait().unwrap();
            assert!(exited.is_none(), "exited {exited:?}: {}", self.said());
            assert!(Instant::now() < deadline, "not leading: {}", self.said());
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts a node stopped with a failure, within `bound`, saying `needle`.
fn refused(node: Node, bound: Duration, needle: &str) -> Ended {
    let since = node.started;
    let ended = node.ended(since, bound);
    eprintln!(
        "exited {:?} after {:?}: {}",
        ended.status,
        ended.took,
        ended.said.lines().last().unwrap_or("")
    );
    assert!(!ended.status.success(), "{}", ended.said);
    assert!(ended.took <= bound, "took {:?}: {}", ended.took, ended.said);
    assert!(
        ended.said.contains(needle),
        "{needle:?} not in: {}",
        ended.said
    );
    ended
}

/// A URL nothing listens on.
fn nobody() -> String {
    format!("nats://127.0.0.1:{}", TestServer::free_port())
}

#[test]
fn without_a_cluster_name_the_node_is_refused() {
    let node = Node::spawn(&nobody(), &["--node-id", "s0"]);
    refused(node, FAIL_FAST, "--cluster needs --cluster-name NAME");
}

#[test]
fn an_unreachable_nats_is_named_with_its_url_and_the_os_error() {
    let url = nobody();
    let node = Node::spawn(&url, &["--cluster-name", "c", "--node-id", "s0"]);
    let ended = refused(node, FAIL_FAST, &format!("cannot reach NATS at {url}"));
    assert!(ended.said.contains("os error"), "{}", ended.said);
}

#[test]
fn sigterm_while_waiting_for_nats_stops_within_a_second() {
    let node = Node::spawn(&nobody(), &["--cluster-name", "c", "--node-id", "s0"]);
    // Well inside the link's 5 s of patience: the node is retrying.
    thread::sleep(Duration::from_millis(1500));
    sigterm_stops(node);
}

#[test]
fn sigterm_while_waiting_for_jetstream_stops_within_a_second() {
    let test = "sigterm_while_waiting_for_jetstream";
    let Some(bin) = common::nats::server_for(test) else {
        return;
    };
    // A NATS server without JetStream (yet): the node keeps asking.
    let port = TestServer::free_port();
    let mut nats = Command::new(bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("nats://127.0.0.1:{port}");
    let flags = [
        "--cluster-name",
        "c",
        "--node-id",
        "s0",
        "--cluster-replicas",
        "1",
    ];
    let node = Node::spawn(&url, &flags);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !node.said().contains("jetstream unavailable; trying again") {
        assert!(Instant::now() < deadline, "no retry seen: {}", node.said());
        thread::sleep(Duration::from_millis(50));
    }
    sigterm_stops(node);
    let _ = nats.kill();
    let _ = nats.wait();
}

/// Sends SIGTERM; the node must exit cleanly within [`SIGTERM_BOUND`].
fn sigterm_stops(node: Node) {
    let sent = Instant::now();
    unsafe { libc::kill(node.child.id() as i32, libc::SIGTERM) };
    let ended = node.ended(sent, SIGTERM_BOUND);
    eprintln!("SIGTERM to exit: {:?} ({:?})", ended.took, ended.status);
    assert!(ended.status.success(), "{:?}: {}", ended.status, ended.said);
    assert!(
        ended.took <= SIGTERM_BOUND,
        "{:?}: {}",
        ended.took,
        ended.said
    );
}

#[test]
fn more_replicas_than_nats_servers_fail_fast() {
    let Some(nats) = NatsCluster::start(3, "more_replicas_than_nats_servers") else {
        return;
    };
    let flags = ["--cluster-name", "r5", "--node-id", "s0"];
    let node = Node::spawn(
        &nats.urls(),
        &[&flags[..], &["--cluster-replicas", "5"]].concat(),
    );
    let needle = "--cluster-replicas 5 asks for more copies than the 3 NATS server(s)";
    refused(node, FAIL_FAST, needle);
}

#[test]
fn the_default_three_copies_on_one_nats_server_fail_fast() {
    let Some(nats) = NatsCluster::start(1, "the_default_three_copies_on_one") else {
        return;
    };
    let node = Node::spawn(&nats.urls(), &["--cluster-name", "r3", "--node-id", "s0"]);
    let needle = "--cluster-replicas 3 asks for more copies than the 1 NATS server(s)";
    refused(node, FAIL_FAST, needle);
}

#[test]
fn a_lease_ttl_other_than_the_buckets_is_refused_with_the_fix() {
    let Some(nats) = NatsCluster::start(1, "a_lease_ttl_other_than_the_buckets") else {
        return;
    };
    let flags = |id, ms| {
        let f = ["--cluster-name", "ttl", "--cluster-replicas", "1", "-V"];
        [&f[..], &["--node-id", id, "--cluster-lease-ms", ms]].concat()
    };
    let mut first = Node::spawn(&nats.urls(), &flags("s0", "1000"));
    first.wait_leading();
    let second = Node::spawn(&nats.urls(), &flags("s1", "2000"));
    let ended = refused(second, FAIL_FAST, "has a TTL of 1000 ms");
    assert!(
        ended.said.contains("nats kv del sprout-ttl-lease"),
        "{}",
        ended.said
    );
}

/// The flags of node `id` of cluster `name`: one NATS copy, a 1 s lease,
/// advertised on `addr` (its beanstalk port is another: the advertised
/// address is what the claim records).
fn member(name: &str, id: &str, addr: &str) -> Vec<String> {
    let flags = [
        "--cluster-name",
        name,
        "--node-id",
        id,
        "--cluster-advertise",
        addr,
    ];
    let more = [
        "--cluster-replicas",
        "1",
        "--cluster-lease-ms",
        "1000",
        "-V",
    ];
    flags.iter().chain(&more).map(|s| s.to_string()).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn a_second_node_with_the_same_id_is_refused_and_a_restart_is_not() {
    let Some(nats) = NatsCluster::start(1, "a_second_node_with_the_same_id") else {
        return;
    };
    let a = format!("127.0.0.1:{}", TestServer::free_port());
    let b = format!("127.0.0.1:{}", TestServer::free_port());
    let mut first = Node::spawn(&nats.urls(), &strs(&member("dup", "s0", &a)));
    first.wait_leading();
    let second = Node::spawn(&nats.urls(), &strs(&member("dup", "s0", &b)));
    refused(
        second,
        FAIL_FAST,
        &format!("--node-id s0 is in use by the node at {a}"),
    );
    // kill -9 leaves the claim behind: the same node, on the same
    // address, starts again at once.
    drop(first);
    let restarted = Instant::now();
    let mut again = Node::spawn(&nats.urls(), &strs(&member("dup", "s0", &a)));
    again.wait_leading();
    eprintln!(
        "restarted after kill -9, leading in {:?}",
        restarted.elapsed()
    );
}

#[test]
fn a_node_without_peer_tls_beside_one_with_it_is_refused() {
    let Some(nats) = NatsCluster::start(1, "a_node_without_peer_tls") else {
        return;
    };
    let dir = TempDir::new();
    let ca = common::certs::Ca::new("sprout node CA");
    let ca_file = ca.write(dir.path(), "peer-ca");
    let (cert, key) = ca
        .issue("node-0", &["127.0.0.1"])
        .write(dir.path(), "node0");
    let peer = format!("127.0.0.1:{}", TestServer::free_port());
    let path = |p: &PathBuf| p.to_str().unwrap().to_string();
    let mut tls = member("mixed", "s0", &peer);
    tls.extend(["--cluster-peer-listen".into(), peer.clone()]);
    tls.extend(["--cluster-peer-cert".into(), path(&cert)]);
    tls.extend(["--cluster-peer-key".into(), path(&key)]);
    tls.extend(["--cluster-peer-ca".into(), path(&ca_file)]);
    let mut first = Node::spawn(&nats.urls(), &strs(&tls));
    first.wait_leading();
    let plain = format!("127.0.0.1:{}", TestServer::free_port());
    let second = Node::spawn(&nats.urls(), &strs(&member("mixed", "s1", &plain)));
    let needle = format!("node s0 at {peer} runs with --cluster-peer-*");
    let ended = refused(second, FAIL_FAST, &needle);
    assert!(ended.said.contains("this node without"), "{}", ended.said);
}
