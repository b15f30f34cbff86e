//! A cluster's links to NATS closed to strangers: real nats-server 2.15.1
//! processes with TLS for clients and routes and an account per sprout
//! cluster (`common/secure_nats.rs`, the README's setup), and real sprout
//! nodes with credentials.
//!
//! - Over TLS with credentials (two nodes with a password, one with an
//!   NKey), clients work through every node and a killed leader is
//!   replaced under load with every acknowledged job as the clients were
//!   told (`common/failover.rs`, as in `cluster.rs`).
//! - Strangers: without a client certificate no one gets past TLS; with
//!   one but without credentials NATS refuses the connection; a user of
//!   another account can neither see the cluster's stream nor add to it,
//!   nor hear what the leader writes; a sprout node with a wrong password
//!   stops at once and says which flags to check. The cluster's own user
//!   reads the stream (so the refusals are not the test's blindness) but
//!   may not publish to another cluster's subjects; in the failover test
//!   NATS refuses the nodes nothing, so those permissions suffice.
//! - A NATS URL off this host without TLS is refused at start, before any
//!   connection, naming the way out; `--cluster-insecure` accepts it.

mod common;

use std::net::{IpAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use async_nats::{jetstream, ConnectErrorKind};
use common::failover::{check, kill_leaders, Load};
use common::secure_nats::{SecureNats, Who};
use common::sprouts::Sprouts;
use common::{FallibleClient, TempDir, TestServer};
use futures_util::StreamExt;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `n` sprout nodes of `nats`'s cluster: node 2 with the NKey, the others
/// with the password.
fn nodes(nats: &SecureNats, n: usize) -> Sprouts {
    let flags: Vec<Vec<String>> = (0..n).map(|i| nats.node_flags(i == 2)).collect();
    Sprouts::start_with(&nats.nats, &nats.name, n, move |i| flags[i].clone())
}

#[test]
fn over_tls_with_credentials_a_killed_leader_is_replaced_and_nothing_is_lost() {
    let Some(nats) = SecureNats::start("over_tls_a_killed_leader", "tlsfailover") else {
        return;
    };
    let mut sprouts = nodes(&nats, 3);
    let leader = sprouts.wait_leader(Duration::from_secs(30));
    // Through every node: the leader, and the standbys passing it on.
    for port in &sprouts.ports {
        let mut c = FallibleClient::connect(*port, Duration::from_secs(5)).unwrap();
        c.send(b"put 0 0 60 2\r\nhi\r\n").unwrap();
        let line = c.read_line().unwrap();
        assert!(line.starts_with("INSERTED "), "{line}");
        let id = line.strip_prefix("INSERTED ").unwrap();
        assert_eq!(c.request("reserve").unwrap(), format!("RESERVED {id} 2"));
        assert_eq!(c.read_body(2).unwrap(), b"hi");
        assert_eq!(c.request(&format!("delete {id}")).unwrap(), "DELETED");
    }
    eprintln!("node {leader} leads; put, reserve, delete through every node");
    let load = Load::start(&sprouts.ports);
    thread::sleep(Duration::from_millis(1500));
    kill_leaders(&mut sprouts, 1);
    let log = load.finish();
    check(&sprouts, &log);
    // The README's permissions are all a node needs.
    for i in 0..nats.nats.len() {
        let log = nats.nats.log(i);
        let denied: Vec<&str> = log.lines().filter(|l| l.contains("Violation")).collect();
        assert!(denied.is_empty(), "NATS n{i} refused a node: {denied:?}");
    }
}

#[test]
fn strangers_cannot_reach_publish_to_or_read_the_clusters_stream() {
    let Some(nats) = SecureNats::start("strangers_cannot_touch_the_stream", "closed") else {
        return;
    };
    let sprouts = nodes(&nats, 1);
    let leader = sprouts.ports[sprouts.wait_leader(Duration::from_secs(30))];
    let id = put(leader, "real");
    runtime().block_on(async {
        // The cluster's own user reads the stream: the reads below would
        // see it if they could.
        let node = nats.connect(Who::Node, true).await.unwrap();
        let js = jetstream::new(node.clone());
        assert!(
            last_seq(&js, &nats.stream()).await >= 1,
            "the put is in the stream"
        );
        held_to_its_clusters_subjects(&nats, &node).await;
        no_entry_without_a_certificate_and_credentials(&nats).await;
        another_account_sees_and_adds_nothing(&nats, &js, leader).await;
    });
    // The job put before the strangers came is as it was.
    let mut c = FallibleClient::connect(leader, Duration::from_secs(5)).unwrap();
    assert_eq!(c.request("reserve").unwrap(), format!("RESERVED {id} 4"));
    assert_eq!(c.read_body(4).unwrap(), b"real");
    a_wrong_password_stops_a_node(&nats);
}

/// Puts `body` through the node on `port`; the job's id.
fn put(port: u16, body: &str) -> String {
    let mut c = FallibleClient::connect(port, Duration::from_secs(5)).unwrap();
    c.send(format!("put 0 0 60 {}\r\n{body}\r\n", body.len()).as_bytes())
        .unwrap();
    let line = c.read_line().unwrap();
    line.strip_prefix("INSERTED ").expect(&line).to_string()
}

/// The cluster's user may not publish to another cluster's subjects (and
/// NATS logs the refusal, which the failover test looks for).
async fn held_to_its_clusters_subjects(nats: &SecureNats, node: &async_nats::Client) {
    node.publish("sprout.elsewhere.m", "x".into())
        .await
        .unwrap();
    node.flush().await.unwrap();
    let refused = |i| {
        let log = nats.nats.log(i);
        log.lines()
            .any(|l| l.contains("Publish Violation") && l.contains("\"sprout.elsewhere.m\""))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(0..3).any(refused) {
        assert!(
            Instant::now() < deadline,
            "no NATS refused sprout.elsewhere.m"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Without a client certificate no one gets past TLS, whatever the
/// credentials; with one but without credentials NATS refuses.
async fn no_entry_without_a_certificate_and_credentials(nats: &SecureNats) {
    for who in [Who::Anonymous, Who::Other, Who::Node] {
        let refused = nats.connect(who, false).await;
        assert!(
            refused.is_err(),
            "{who:?} without a client certificate got in"
        );
    }
    let anonymous = nats.connect(Who::Anonymous, true).await;
    assert_eq!(
        anonymous.err().map(|e| e.kind()),
        Some(ConnectErrorKind::AuthorizationViolation)
    );
}

/// A user of another account: the stream is not found, a page it
/// publishes is not stored, and it hears nothing of what the leader (on
/// `leader`) writes; `js` is the cluster's own user's view.
async fn another_account_sees_and_adds_nothing(
    nats: &SecureNats,
    js: &jetstream::Context,
    leader: u16,
) {
    let stream = nats.stream();
    let meta = format!("sprout.{}.m", nats.name);
    let last = last_seq(js, &stream).await;
    let other = nats.connect(Who::Other, true).await.unwrap();
    let theirs = jetstream::new(other.clone());
    let seen = theirs.get_stream(&stream).await;
    eprintln!(
        "another account asking for {stream}: {:?}",
        seen.as_ref().err()
    );
    assert!(seen.is_err(), "another account sees the stream");
    let acked = match theirs.publish(meta.clone(), "forged".into()).await {
        Ok(ack) => ack.await.map(|a| a.sequence),
        Err(e) => Err(e),
    };
    eprintln!("another account's page for {meta}: {acked:?}");
    assert!(acked.is_err(), "another account's page was stored");
    other.publish(meta.clone(), "forged".into()).await.unwrap();
    let mut heard = other
        .subscribe(format!("sprout.{}.>", nats.name))
        .await
        .unwrap();
    other.flush().await.unwrap();
    put(leader, "later");
    let overheard = tokio::time::timeout(Duration::from_secs(1), heard.next()).await;
    assert!(overheard.is_err(), "another account heard {overheard:?}");
    assert!(
        last_seq(js, &stream).await > last,
        "the second put is in the stream"
    );
    let pages = js.get_stream(&stream).await.unwrap();
    let meta_now = pages.get_last_raw_message_by_subject(&meta).await.unwrap();
    assert_ne!(&meta_now.payload[..], b"forged");
}

/// A node with a wrong password stops at once, naming what to check and
/// not the password.
fn a_wrong_password_stops_a_node(nats: &SecureNats) {
    let dir = TempDir::new();
    let wrong = dir.path().join("password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let mut flags = nats.node_flags(false);
    let at = flags
        .iter()
        .position(|f| f == "--cluster-password-file")
        .unwrap();
    flags[at + 1] = wrong.display().to_string();
    let (status, said, took) = run(&node_args(&nats.nats.urls(), &nats.name, &flags));
    eprintln!(
        "a wrong password: {status} after {took:?}: {}",
        last_line(&said)
    );
    assert!(!status.success());
    assert!(said.contains("authorization violation"), "{said}");
    assert!(said.contains("--cluster-password-file"), "{said}");
    assert!(!said.contains("not-the-password"), "{said}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[test]
fn a_nats_url_off_this_host_needs_tls_or_cluster_insecure() {
    let url = format!("nats://{}:{}", own_address(), TestServer::free_port());
    let (status, said, took) = run(&node_args(&url, "offhost", &[]));
    eprintln!(
        "{url} in clear text: {status} after {took:?}: {}",
        last_line(&said)
    );
    assert!(!status.success());
    for needed in [
        url.as_str(),
        "not on this host",
        "--cluster-tls-ca",
        "--cluster-insecure",
    ] {
        assert!(said.contains(needed), "{needed}: {said}");
    }
    assert!(
        !said.contains("cannot reach"),
        "it tried to connect: {said}"
    );

    let insecure = ["--cluster-insecure".to_string()];
    let (status, said, took) = run(&node_args(&url, "offhost", &insecure));
    eprintln!(
        "with --cluster-insecure: {status} after {took:?}: {}",
        last_line(&said)
    );
    assert!(!status.success(), "nobody serves NATS there");
    assert!(!said.contains("not on this host"), "{said}");
    assert!(
        said.contains(&format!("cannot reach NATS at {url}")),
        "{said}"
    );
}

/// An address of this host that is not loopback (the one it would reach
/// the world from), else one of TEST-NET-1's.
fn own_address() -> IpAddr {
    let fallback = IpAddr::from([192, 0, 2, 1]);
    let Ok(socket) = UdpSocket::bind("0.0.0.0:0") else {
        return fallback;
    };
    // A UDP "connect" sends nothing: it picks the route and the address.
    match socket
        .connect("192.0.2.1:9")
        .and_then(|()| socket.local_addr())
    {
        Ok(addr) if !addr.ip().is_loopback() && !addr.ip().is_unspecified() => addr.ip(),
        _ => fallback,
    }
}

/// A one-node cluster's arguments on `urls`, plus `extra`.
fn node_args(urls: &str, name: &str, extra: &[String]) -> Vec<String> {
    let port = TestServer::free_port().to_string();
    let args = [
        "-l",
        "127.0.0.1",
        "-p",
        &port,
        "--cluster",
        urls,
        "--cluster-name",
        name,
    ];
    let mut args: Vec<String> = args.map(String::from).to_vec();
    args.extend(["--node-id", "s0", "--cluster-replicas", "1"].map(String::from));
    args.extend(extra.iter().cloned());
    args
}

/// Runs sprout with `args` until it exits (killed after 20 s): its status,
/// its stderr and how long it ran.
fn run(args: &[String]) -> (std::process::ExitStatus, String, Duration) {
    let dir = TempDir::new();
    let stderr = dir.path().join("stderr");
    let started = Instant::now();
    let mut child = Command::new(common::binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!(
                "still running after 20 s: {}",
                std::fs::read_to_string(&stderr).unwrap()
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    (status, std::fs::read_to_string(&stderr).unwrap(), took)
}

/// The last sequence number of `stream`, as `js`'s user sees it.
async fn last_seq(js: &jetstream::Context, stream: &str) -> u64 {
    let stream = js.get_stream(stream).await.unwrap();
    stream.get_info().await.unwrap().state.last_sequence
}

fn last_line(text: &str) -> &str {
    text.lines().last().unwrap_or("")
}
