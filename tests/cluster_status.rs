//! A cluster node says what it is (issue 31), at the default log level:
//! the cluster it joined and its role, each role change, the members it
//! sees; `stats` through a standby names the node that answered;
//! `/metrics` has a role gauge; `sprout admin cluster` lists the members;
//! a graceful stop withdraws the node's claim on its id. Real processes:
//! nats-server 2.15.1 (`tests/common/nats.rs`) and sprout nodes on free
//! loopback ports.

mod common;
mod http_client;

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::nats::{http_get, NatsCluster};
use common::{lookup, parse_yaml_map, Addr, Client, TestServer};

/// How long a line may take to appear (a takeover included).
const PATIENCE: Duration = Duration::from_secs(20);

/// A sprout node of cluster `name`: its beanstalk and HTTP ports.
struct Node {
    server: TestServer,
    port: u16,
    http: u16,
}

impl Node {
    /// Starts node `id` at the default log level, plus `extra` flags
    /// (`--cluster-lease-ms` and `--cluster-replicas` among them).
    fn start(nats: &NatsCluster, name: &str, id: &str, extra: &[&str]) -> Node {
        let (port, http) = (TestServer::free_port(), TestServer::free_port());
        let (p, h) = (port.to_string(), format!("127.0.0.1:{http}"));
        let mut args = vec!["-l", "127.0.0.1", "-p", &p, "--http", &h];
        let urls = nats.urls();
        args.extend(["--cluster", &urls, "--cluster-name", name, "--node-id", id]);
        args.extend_from_slice(extra);
        let server = TestServer::spawn(&args, Addr::Tcp(port)).unwrap();
        Node { server, port, http }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Waits until its stderr has `line`; returns all of it.
    #[track_caller]
    fn wait_said(&self, line: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let said = self.server.stderr();
            if said.contains(line) {
                return said;
            }
            assert!(Instant::now() < deadline, "{line:?} not said:\n{said}");
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn stats(&self) -> Vec<(String, String)> {
        let mut c = Client::tcp(self.port);
        // `ok_body` checks the byte count against the body.
        parse_yaml_map(&c.ok_body(b"stats\r\n"))
    }

    fn metrics(&self) -> String {
        let (status, body) = http_get(self.http, "/metrics").expect("/metrics answers");
        assert_eq!(status, 200, "{body}");
        body
    }

    /// `sprout admin --http ADDR cluster`'s output.
    fn admin_cluster(&self) -> String {
        let out = Command::new(common::binary())
            .args([
                "admin",
                "--http",
                &format!("127.0.0.1:{}", self.http),
                "cluster",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }
}

/// The role gauges' samples in a scrape, e.g. `{role="leader"} 1`.
fn role_samples(scrape: &str) -> Vec<&str> {
    let samples = scrape.lines();
    samples
        .filter_map(|l| l.strip_prefix("sprout_cluster_role"))
        .collect()
}

/// `promtool check metrics` on `scrape` (skipped without promtool,
/// unless under CI).
fn promtool_passes(scrape: &str) {
    let Some(promtool) = http_client::program("promtool") else {
        return;
    };
    let (ok, report) = http_client::promtool(&promtool, scrape);
    assert!(ok, "promtool: {report}\n{scrape}");
}

/// Waits until `admin cluster` through `node` lists `n` members.
fn admin_lists(node: &Node, n: usize) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = node.admin_cluster();
        let rows = out.lines().filter(|l| l.contains("127.0.0.1:")).count();
        // The leader line names an address too.
        if rows == n + 1 {
            return out;
        }
        assert!(Instant::now() < deadline, "not {n} members:\n{out}");
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_node_says_its_role_and_members_and_a_standby_names_itself_in_stats() {
    // Three NATS servers: a takeover's races are those of a real cluster.
    let Some(nats) = NatsCluster::start(3, "a_node_says_its_role") else {
        return;
    };
    let lease = ["--cluster-lease-ms", "1000"];
    let s0 = Node::start(&nats, "st", "s0", &lease);
    s0.wait_said("joined cluster st as node s0 (role leader, epoch 1)");
    let s1 = Node::start(&nats, "st", "s1", &lease);
    let (a0, a1) = (s0.addr(), s1.addr());
    s1.wait_said(&format!(
        "joined cluster st as node s1 (role standby following s0 at {a0}, epoch 1)"
    ));
    let s2 = Node::start(&nats, "st", "s2", &lease);
    let a2 = s2.addr();
    let all = format!("cluster members (3): s0 at {a0}, s1 at {a1}, s2 at {a2}");
    for node in [&s0, &s1, &s2] {
        node.wait_said(&all);
    }

    // stats: the leader's figures, the answering node's name.
    for (node, via, role) in [(&s0, "s0", "leader"), (&s1, "s1", "standby")] {
        let stats = node.stats();
        assert_eq!(lookup(&stats, "cluster-node"), "\"s0\"");
        assert_eq!(lookup(&stats, "cluster-role"), "leader");
        assert_eq!(lookup(&stats, "cluster-via-node"), format!("\"{via}\""));
        assert_eq!(lookup(&stats, "cluster-via-role"), role);
        let via_keys = stats.iter().filter(|(k, _)| k.starts_with("cluster-via-"));
        assert_eq!(via_keys.count(), 2, "{stats:?}");
    }
    // Pipelined around other answers, through the standby.
    let mut c = Client::tcp(s1.port);
    c.send(b"put 0 0 60 5\r\nstats\r\nstats\r\nreserve\r\n");
    assert!(c.expect_line().starts_with("INSERTED "));
    let n: usize = c
        .expect_line()
        .strip_prefix("OK ")
        .unwrap()
        .parse()
        .unwrap();
    let doc = String::from_utf8(c.read_exact_bytes(n)).unwrap();
    assert!(
        doc.ends_with("cluster-via-node: \"s1\"\ncluster-via-role: standby\n"),
        "{doc}"
    );
    c.expect(b"\r\n");
    assert!(c.expect_line().starts_with("RESERVED "));
    c.expect(b"stats\r\n");

    // The role gauge on every node.
    let gauges = [(&s0, ["{role=\"leader\"} 1", "{role=\"standby\"} 0"])];
    let gauges = gauges
        .into_iter()
        .chain([(&s1, ["{role=\"leader\"} 0", "{role=\"standby\"} 1"])]);
    for (node, want) in gauges {
        let scrape = node.metrics();
        assert_eq!(role_samples(&scrape), want, "{scrape}");
        promtool_passes(&scrape);
    }

    // `sprout admin cluster`, asked through the standby.
    let out = admin_lists(&s1, 3);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for row in [
        vec!["cluster", "st"],
        vec!["leader", "s0", "at", &a0],
        vec!["epoch", "1"],
        vec!["asked", "s1", "(standby)"],
        vec!["node", "address", "role"],
        vec!["s0", &a0, "leader"],
        vec!["s1", &a1, "standby"],
    ] {
        assert!(rows.contains(&row), "{row:?} not in:\n{out}");
    }

    // A takeover: two standbys race for it, one line each, and the race
    // is no warning.
    let mut s0 = s0;
    s0.server.signal(libc::SIGKILL);
    s0.server.wait_exit(Duration::from_secs(5));
    let deadline = Instant::now() + PATIENCE;
    let (winner, loser) = loop {
        let led = |n: &Node| n.server.stderr().contains("became leader at epoch 2");
        match (led(&s1), led(&s2)) {
            (true, false) => break ((&s1, "s1", &a1), &s2),
            (false, true) => break ((&s2, "s2", &a2), &s1),
            (false, false) => assert!(Instant::now() < deadline, "no takeover"),
            (true, true) => panic!("two leaders at epoch 2"),
        }
        thread::sleep(Duration::from_millis(50));
    };
    let (leader, id, addr) = winner;
    loser.wait_said(&format!("following {id} at {addr} (epoch 2)"));
    for node in [leader, loser] {
        let said = node.wait_said("cluster members (2)");
        assert!(!said.contains("wrong last sequence"), "{said}");
        assert!(said.matches("became leader").count() <= 1, "{said}");
        assert!(said.matches("(epoch 2)").count() <= 1, "{said}");
    }
    let scrape = leader.metrics();
    let want = ["{role=\"leader\"} 1", "{role=\"standby\"} 0"];
    assert_eq!(role_samples(&scrape), want);
    eprintln!("the new leader's log:\n{}", leader.server.stderr());
    eprintln!("the other standby's log:\n{}", loser.server.stderr());
}

#[test]
fn json_status_lines_and_a_graceful_stop_frees_the_node_id() {
    let Some(nats) = NatsCluster::start(1, "json_status_lines") else {
        return;
    };
    // A lease long enough that a claim left behind would still be there
    // when the same id starts again.
    let json = ["--log-format", "json", "--cluster-lease-ms", "5000"];
    let json = [&json[..], &["--cluster-replicas", "1"]].concat();
    let s0 = Node::start(&nats, "sj", "s0", &json);
    let said = s0.wait_said("joined cluster sj as node s0");
    let line = said.lines().find(|l| l.contains("joined cluster")).unwrap();
    let v: serde_json::Value = serde_json::from_str(line).expect(line);
    assert_eq!(v["target"], "sprout::status", "{line}");
    assert_eq!(v["level"], "INFO", "{line}");
    let fields = &v["fields"];
    assert_eq!(
        fields["message"],
        "joined cluster sj as node s0 (role leader, epoch 1)"
    );
    assert_eq!(
        (&fields["role"], &fields["epoch"]),
        (&"leader".into(), &1.into())
    );

    // SIGTERM of a standby: its id is free at once, from another address.
    let s1 = Node::start(&nats, "sj", "s1", &json);
    s1.wait_said("joined cluster sj as node s1");
    s0.wait_said("cluster members (2)");
    let mut s1 = s1;
    s1.server.signal(libc::SIGTERM);
    let status = s1.server.wait_exit(Duration::from_secs(5)).expect("exits");
    assert!(status.success(), "{status:?}: {}", s1.server.stderr());
    let again = Node::start(&nats, "sj", "s1", &json);
    assert_ne!(again.port, s1.port);
    again.wait_said("joined cluster sj as node s1 (role standby following s0");

    // And a leader's, which gives up its lease too.
    let mut s0 = s0;
    s0.server.signal(libc::SIGTERM);
    assert!(s0
        .server
        .wait_exit(Duration::from_secs(5))
        .is_some_and(|s| s.success()));
    again.wait_said("became leader at epoch 2");
    let moved = Node::start(&nats, "sj", "s0", &json);
    moved.wait_said("joined cluster sj as node s0 (role standby following s1");
}

#[test]
fn api_cluster_is_guarded_and_absent_without_a_cluster() {
    let (_server, mut http) = http_client::start(&["--http-token", "secret"]);
    assert_eq!(http.get("/api/cluster").0, 401);
    http.token = Some("secret".into());
    let (status, body) = http.get("/api/cluster");
    assert_eq!(
        (status, &body["error"]),
        (404, &"not a cluster node (no --cluster)".into())
    );
}
