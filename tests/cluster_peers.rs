//! The standby→leader relay closed to strangers (issue 29): three real
//! nats-server 2.15.1 processes and three sprout nodes with `--auth`, TLS
//! listeners for their clients and node certificates for the links between
//! them (`--cluster-peer-*`, one CA for the nodes, another for clients).
//!
//! - Whichever node a client connects to, it has the same rights: a token
//!   client's transcript (AUTH_REQUIRED, then FORBIDDEN outside its grants)
//!   is byte for byte the same through every node, and a client whose
//!   certificate names a principal has its rights through a standby with
//!   no `auth`, as on the leader. The leader's audit trail shows the relay;
//!   a client's half-close still passes over the TLS link.
//! - A stranger on a peer port gets no further than the handshake: not in
//!   clear text, not over TLS without a certificate, not with a
//!   certificate of the clients' CA. A node's certificate gets through (so
//!   the refusals are not the test's blindness).
//! - The failover shape of `cluster.rs` (the leader killed -9 under load,
//!   every acknowledged job as the clients were told) holds with the relay
//!   over TLS, the load's clients relayed with their listener's principal.
//! - A node with `--auth` or `--tls-listen` and no peer TLS refuses to
//!   start, naming the flags, unless `--cluster-insecure`; peer flags come
//!   all four or none.

mod common;
#[path = "common/tls.rs"]
mod tls_kit;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::certs::Ca;
use common::failover::{check, kill_leaders, Load};
use common::nats::NatsCluster;
use common::sprouts::Sprouts;
use common::{Client, TempDir, TestServer};
use rustls::ClientConfig;
use sha2::{Digest, Sha256};
use tls_kit::{handshake, tls_client};

const TOKEN: &str = "producer-token-1";

/// A cluster as the README sets one up: every node with the same policy,
/// a TLS listener for clients (mutual TLS with the clients' CA) beside a
/// plain one whose connections act as `ops`, and a node certificate.
struct Secured {
    // Dropped first: the nodes go before NATS and the files.
    sprouts: Sprouts,
    _nats: NatsCluster,
    tls_ports: Vec<u16>,
    peer_ports: Vec<u16>,
    dir: TempDir,
}

impl Secured {
    fn start(test: &str, name: &str) -> Option<Secured> {
        let nats = NatsCluster::start(3, test)?;
        let dir = TempDir::new();
        let d = dir.path();
        let peer_ca = Ca::new("sprout node CA");
        peer_ca.write(d, "peer-ca");
        let client_ca = Ca::new("sprout client CA");
        client_ca.write(d, "client-ca");
        client_ca
            .issue("sprout", &["127.0.0.1", "localhost"])
            .write(d, "server");
        client_ca.issue("worker-1", &[]).write(d, "worker");
        client_ca.issue("nobody-1", &[]).write(d, "nobody");
        for i in 0..3 {
            let node = peer_ca.issue(&format!("node-{i}"), &["127.0.0.1", "localhost"]);
            node.write(d, &format!("node{i}"));
        }
        let free = |_| TestServer::free_port();
        let ports: Vec<u16> = (0..3).map(free).collect();
        let tls_ports: Vec<u16> = (0..3).map(free).collect();
        let peer_ports: Vec<u16> = (0..3).map(free).collect();
        std::fs::write(d.join("policy.toml"), policy(&ports)).unwrap();
        let flags = |i: usize| node_flags(&dir, tls_ports[i], peer_ports[i], i);
        let flags: Vec<Vec<String>> = (0..3).map(flags).collect();
        let mut sprouts = Sprouts::start_on(&nats, name, ports, move |i| flags[i].clone());
        sprouts.advertised = peer_ports.clone();
        // A fresh R3 stream may refuse its first writes for a moment.
        sprouts.wait_leader(Duration::from_secs(30));
        sprouts.time_to_put(Duration::from_secs(30));
        Some(Secured {
            sprouts,
            _nats: nats,
            tls_ports,
            peer_ports,
            dir,
        })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A client configuration trusting `ca` (a file of the scratch
    /// directory), showing the certificate `identity` if given.
    fn config(&self, ca: &str, identity: Option<&str>) -> Arc<ClientConfig> {
        let files = identity.map(|n| {
            (
                self.file(&format!("{n}.pem")),
                self.file(&format!("{n}.key")),
            )
        });
        let files = files.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        sprout::tls::client_config(&self.file(ca), files).expect("client config")
    }

    fn leader(&self) -> usize {
        self.sprouts.wait_leader(Duration::from_secs(30))
    }
}

/// One policy for every node: `producer` by token, `worker` by
/// certificate, and the plain listeners' connections as `ops`.
fn policy(plain_ports: &[u16]) -> String {
    let hash = format!("sha256:{:x}", Sha256::digest(TOKEN.as_bytes()));
    let mut text = format!(
        r#"
[[principal]]
name = "ops"
grants = [{{ tubes = ["*"], actions = ["produce", "consume", "inspect", "admin"] }}]

[[principal]]
name = "producer"
tokens = ["{hash}"]
grants = [{{ tubes = ["orders.*"], actions = ["produce"] }}]

[[principal]]
name = "worker"
certs = ["CN=worker-1"]
grants = [{{ tubes = ["orders.*"], actions = ["consume"] }}]

[listeners]
"#
    );
    for port in plain_ports {
        text += &format!("\"127.0.0.1:{port}\" = \"ops\"\n");
    }
    text
}

/// Node `i`'s flags besides those `Sprouts` gives every node.
fn node_flags(dir: &TempDir, tls_port: u16, peer_port: u16, i: usize) -> Vec<String> {
    let file = |name: &str| dir.path().join(name).display().to_string();
    [
        "--auth",
        &file("policy.toml"),
        "--tls-listen",
        &format!("127.0.0.1:{tls_port}"),
        "--tls-cert",
        &file("server.pem"),
        "--tls-key",
        &file("server.key"),
        "--tls-client-ca",
        &file("client-ca.pem"),
        "--cluster-peer-listen",
        &format!("127.0.0.1:{peer_port}"),
        "--cluster-peer-cert",
        &file(&format!("node{i}.pem")),
        "--cluster-peer-key",
        &file(&format!("node{i}.key")),
        "--cluster-peer-ca",
        &file("peer-ca.pem"),
    ]
    .map(String::from)
    .to_vec()
}

/// Sends each request and reads one line of answer; the answers, job ids
/// as `<id>` (each node's transcript puts and takes its own job).
fn transcript(c: &mut Client, requests: &[&str]) -> String {
    let mut said = String::new();
    let mut id = String::new();
    for request in requests {
        c.send(request.replace("<id>", &id).as_bytes());
        let line = c.expect_line();
        let mut words: Vec<&str> = line.split(' ').collect();
        if matches!(words[0], "INSERTED" | "RESERVED") {
            id = words[1].to_string();
            words[1] = "<id>";
        }
        said += &words.join(" ");
        said += "\n";
        if words[0] == "RESERVED" {
            let len: usize = words[2].parse().unwrap();
            said += &String::from_utf8_lossy(&c.read_exact_bytes(len + 2));
        }
    }
    said
}

const PRODUCER: [&str; 9] = [
    "use orders.eu\r\n",
    "auth producer-token-1\r\n",
    "use orders.eu\r\n",
    "put 0 0 60 2\r\nhi\r\n",
    "use default\r\n",
    "watch orders.eu\r\n",
    "peek-ready\r\n",
    "kick 1\r\n",
    "pause-tube orders.eu 1\r\n",
];

const PRODUCER_SAYS: &str = "AUTH_REQUIRED\nAUTHENTICATED\nUSING orders.eu\nINSERTED <id>\n\
                             FORBIDDEN\nFORBIDDEN\nFORBIDDEN\nFORBIDDEN\nFORBIDDEN\n";

const WORKER: [&str; 7] = [
    "watch orders.eu\r\n",
    "ignore default\r\n",
    "reserve-with-timeout 5\r\n",
    "use orders.eu\r\n",
    "stats-job <id>\r\n",
    "kick 1\r\n",
    "delete <id>\r\n",
];

const WORKER_SAYS: &str = "WATCHING 2\nWATCHING 1\nRESERVED <id> 2\nhi\r\n\
                           FORBIDDEN\nFORBIDDEN\nFORBIDDEN\nDELETED\n";

#[test]
fn through_every_node_a_client_has_its_rights_and_strangers_stay_out() {
    let Some(cluster) = Secured::start("through_every_node_a_client_has_its_rights", "peers")
    else {
        return;
    };
    let leader = cluster.leader();
    // The leader first: what the others must match.
    let order: Vec<usize> = std::iter::once(leader)
        .chain((0..3).filter(|&i| i != leader))
        .collect();
    for &i in &order {
        let port = cluster.tls_ports[i];
        let nobody = cluster.config("client-ca.pem", Some("nobody"));
        let said = transcript(&mut tls_client(port, nobody), &PRODUCER);
        assert_eq!(
            said, PRODUCER_SAYS,
            "a token client through node {i} (leader {leader})"
        );
        let worker = cluster.config("client-ca.pem", Some("worker"));
        let said = transcript(&mut tls_client(port, worker), &WORKER);
        assert_eq!(
            said, WORKER_SAYS,
            "a certificate client through node {i} (leader {leader})"
        );
    }
    eprintln!("node {leader} leads; the same bytes through every node");
    // A client that shuts its writing side still gets every answer: the
    // standby passes the half-close on over TLS.
    let standby = order[1];
    let mut c = Client::tcp(cluster.sprouts.ports[standby]);
    c.send(b"use halfclosed\r\nput 0 0 60 2\r\nhi\r\n");
    c.shutdown_write();
    assert_eq!(c.expect_line(), "USING halfclosed");
    assert!(c.expect_line().starts_with("INSERTED "));
    c.expect_closed();
    let log = cluster.sprouts.nodes[leader].as_ref().unwrap().stderr();
    let relayed = |l: &&str| l.contains("relayed") && l.contains("principal=\"worker\"");
    assert_eq!(
        log.lines().filter(relayed).count(),
        2,
        "the leader's audit trail:\n{log}"
    );
    strangers_on_the_peer_port(&cluster, leader);
}

/// No certificate, or one of the clients' CA: refused at the handshake on
/// the leader's peer port and a standby's; a node's certificate is served.
fn strangers_on_the_peer_port(cluster: &Secured, leader: usize) {
    let standby = (leader + 1) % 3;
    let vouch = b"relay 192.0.2.1:7 ops\r\nkick 1000\r\n";
    for i in [leader, standby] {
        let port = cluster.peer_ports[i];
        assert_eq!(
            in_clear(port, vouch),
            b"",
            "clear text on node {i}'s peer port"
        );
        for (who, config) in [
            ("no certificate", cluster.config("peer-ca.pem", None)),
            (
                "a client's certificate",
                cluster.config("peer-ca.pem", Some("worker")),
            ),
        ] {
            let e = relay_over_tls(port, config, vouch).expect_err(who);
            eprintln!("node {i}'s peer port, {who}: {e}");
        }
    }
    let node = cluster.config("peer-ca.pem", Some(&format!("node{standby}")));
    let answer = relay_over_tls(cluster.peer_ports[leader], node, vouch).unwrap();
    assert_eq!(answer, b"KICKED 0\r\n", "a node vouching for ops");
    let log = cluster.sprouts.nodes[leader].as_ref().unwrap().stderr();
    let refused = log
        .lines()
        .filter(|l| l.contains("refused a relay"))
        .count();
    assert!(refused >= 3, "the leader logged {refused} refusals:\n{log}");
}

/// What the peer listener on `port` answers `bytes` sent in clear text
/// before it closes (or resets) the connection; TLS alerts left out.
fn in_clear(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sock.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let _ = sock.read_to_end(&mut got);
    // A TLS alert record (content type 21) is all a stranger may get.
    if got.first() == Some(&21) {
        got.clear();
    }
    got
}

/// A handshake with the peer listener on `port` as `config`, `bytes` sent
/// after it; the first answer, or why there was none.
fn relay_over_tls(port: u16, config: Arc<ClientConfig>, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = handshake(port, config)?;
    stream.write_all(bytes)?;
    let mut answer = vec![0u8; 64];
    let n = stream.read(&mut answer)?;
    if n == 0 {
        return Err(std::io::Error::other("closed without an alert"));
    }
    answer.truncate(n);
    Ok(answer)
}

#[test]
fn with_peer_tls_a_killed_leader_is_replaced_and_nothing_is_lost() {
    let Some(mut cluster) = Secured::start("with_peer_tls_a_killed_leader", "peerfail") else {
        return;
    };
    let load = Load::start(&cluster.sprouts.ports);
    thread::sleep(Duration::from_millis(1500));
    kill_leaders(&mut cluster.sprouts, 1);
    let log = load.finish();
    check(&cluster.sprouts, &log);
    // The load's standbys passed it on over the peer links, as `ops`.
    let mut logs = cluster.sprouts.past_logs.clone();
    logs.extend(cluster.sprouts.logs());
    let relayed = |l: &&str| l.contains("relayed") && l.contains("principal=\"ops\"");
    let relays: usize = logs.iter().map(|l| l.lines().filter(relayed).count()).sum();
    eprintln!("{relays} clients relayed as ops");
    assert!(relays > 0, "no client went through a standby");
}

#[test]
fn a_protected_node_without_peer_tls_refuses_to_start() {
    let dir = TempDir::new();
    let file = dir.path().join("policy.toml");
    // Its listener is never bound: only so that `ops` is someone's.
    std::fs::write(&file, policy(&[11300])).unwrap();
    let policy = file.display().to_string();
    let insecure = ["--auth", &policy, "--cluster-insecure"];
    let half = [
        "--cluster-peer-listen",
        "127.0.0.1:1",
        "--cluster-peer-ca",
        &policy,
    ];
    for (extra, wanted) in [
        (
            &["--auth", &policy][..],
            &[
                "protects its clients (--auth)",
                "--cluster-peer-listen",
                "--cluster-peer-cert",
                "--cluster-insecure",
            ][..],
        ),
        (&insecure[..], &["cannot reach NATS"][..]),
        (
            &half[..],
            &["go together: missing --cluster-peer-cert, --cluster-peer-key"][..],
        ),
    ] {
        let (ok, said) = run(dir.path(), extra);
        eprintln!("{extra:?}: {}", said.lines().last().unwrap_or(""));
        assert!(!ok);
        for w in wanted {
            assert!(said.contains(w), "{w}: {said}");
        }
    }
}

/// A one-node cluster on a NATS URL nobody serves, with `extra`: whether
/// it exited well, and its stderr.
fn run(dir: &Path, extra: &[&str]) -> (bool, String) {
    let url = format!("nats://127.0.0.1:{}", TestServer::free_port());
    let port = TestServer::free_port().to_string();
    let mut args = vec![
        "-l",
        "127.0.0.1",
        "-p",
        &port,
        "--cluster",
        &url,
        "--cluster-name",
        "peers",
        "--node-id",
        "s0",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(common::binary())
        .args(&args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
