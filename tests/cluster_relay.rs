//! The standby's relay against real sprout servers: a client talking
//! through it gets the very bytes it would get from the leader directly
//! (over TCP and a unix socket, pipelined or not, half-closed or not), and
//! sees its connection close when the leader goes away. A relay that
//! marks `stats` answers (`cluster/via.rs`) passes every other byte the
//! same.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use common::{Client, TempDir, TestServer};
use sprout::cluster::relay::{relay, Relayed, CONNECT_TIMEOUT};
use sprout::cluster::via::Via;
use tokio::sync::mpsc;

/// A relay listening on loopback TCP and a unix socket, passing every
/// connection to `leader`; each finished relay reports on `done`.
struct TestRelay {
    port: u16,
    sock: PathBuf,
    done: mpsc::UnboundedReceiver<std::io::Result<Relayed>>,
    rt: tokio::runtime::Runtime,
    _dir: TempDir,
}

impl TestRelay {
    fn start(leader: String) -> TestRelay {
        TestRelay::marking(leader, None)
    }

    /// A relay that marks `stats` answers as `via`'s, given one.
    fn marking(leader: String, via: Option<Via>) -> TestRelay {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = TempDir::new();
        let sock = dir.path().join("relay.sock");
        let (tx, done) = mpsc::unbounded_channel();
        let (tcp, unix) = rt.block_on(async {
            (
                tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
                tokio::net::UnixListener::bind(&sock).unwrap(),
            )
        });
        let port = tcp.local_addr().unwrap().port();
        let (leader2, tx2, via2) = (leader.clone(), tx.clone(), via.clone());
        rt.spawn(async move {
            loop {
                let (client, _) = tcp.accept().await.unwrap();
                client.set_nodelay(true).unwrap();
                let (leader, tx, via) = (leader.clone(), tx.clone(), via.clone());
                tokio::spawn(async move {
                    let relayed = relay(client, &leader, CONNECT_TIMEOUT, via.as_ref());
                    let _ = tx.send(relayed.await);
                });
            }
        });
        rt.spawn(async move {
            loop {
                let (client, _) = unix.accept().await.unwrap();
                let (leader, tx, via) = (leader2.clone(), tx2.clone(), via2.clone());
                tokio::spawn(async move {
                    let relayed = relay(client, &leader, CONNECT_TIMEOUT, via.as_ref());
                    let _ = tx.send(relayed.await);
                });
            }
        });
        TestRelay {
            port,
            sock,
            done,
            rt,
            _dir: dir,
        }
    }

    /// The next finished relay's result.
    fn finished(&mut self) -> std::io::Result<Relayed> {
        let next = self.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), self.done.recv()).await
        });
        next.expect("a relay finishes within 5 s")
            .expect("relay reports")
    }
}

fn leader_of(s: &TestServer) -> String {
    format!("127.0.0.1:{}", s.port())
}

/// Commands whose replies depend only on the server's state (no pids,
/// uptimes or wall clocks), to run on two fresh servers.
fn script() -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(b"use jobs\r\nput 5 0 60 5\r\nhello\r\n");
    s.extend_from_slice(b"put 1 0 60 7\r\nab\r\ncd\n\r\n");
    let big = vec![b'x'; 60_000];
    s.extend_from_slice(format!("put 9 0 60 {}\r\n", big.len()).as_bytes());
    s.extend_from_slice(&big);
    s.extend_from_slice(b"\r\n");
    s.extend_from_slice(b"watch jobs\r\nreserve\r\nstats-job 2\r\ndelete 2\r\n");
    s.extend_from_slice(b"reserve-with-timeout 0\r\nbury 1 3\r\nreserve-with-timeout 0\r\n");
    s.extend_from_slice(b"stats-job 3\r\nkick 1\r\npeek-ready\r\nstats-tube jobs\r\n");
    s.extend_from_slice(b"list-tubes\r\ndelete 2\r\nput 1 0 1\r\nbogus\r\n");
    s
}

/// Sends `input` at once on `stream`, then either `quit` or a half-close,
/// and reads until the server closes.
fn transcript<S: Read + Write>(
    mut stream: S,
    input: &[u8],
    half_close: impl FnOnce(&S),
) -> Vec<u8> {
    stream.write_all(input).unwrap();
    half_close(&stream);
    let mut out = Vec::new();
    stream.read_to_end(&mut out).unwrap();
    out
}

fn tcp(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

#[test]
fn replies_through_the_relay_are_byte_identical() {
    let mut input = script();
    input.extend_from_slice(b"quit\r\n");

    let direct = TestServer::start(&[]);
    let want = transcript(tcp(direct.port()), &input, |_| {});
    assert!(
        want.starts_with(b"USING jobs\r\nINSERTED 1\r\n"),
        "{}",
        common::show(&want)
    );
    assert!(
        want.ends_with(b"UNKNOWN_COMMAND\r\n"),
        "{}",
        common::show(&want)
    );

    // A fresh leader for each client, so the job ids match; relays that
    // mark `stats` answers and relays that do not.
    let kinds = ["tcp", "tcp half-closed", "unix", "unix half-closed"];
    for (via, marks) in kinds.iter().flat_map(|k| [(*k, false), (*k, true)]) {
        let leader = TestServer::start(&[]);
        let mark = marks.then(standby);
        let mut relay = TestRelay::marking(leader_of(&leader), mark);
        let got = match via {
            "tcp" => transcript(tcp(relay.port), &input, |_| {}),
            "tcp half-closed" => transcript(tcp(relay.port), &script(), |s| {
                s.shutdown(Shutdown::Write).unwrap()
            }),
            "unix" => transcript(UnixStream::connect(&relay.sock).unwrap(), &input, |_| {}),
            _ => transcript(UnixStream::connect(&relay.sock).unwrap(), &script(), |s| {
                s.shutdown(Shutdown::Write).unwrap()
            }),
        };
        assert!(got == want, "{via} {marks}: got \"{}\"", common::show(&got));
        let counts = relay.finished().unwrap();
        assert_eq!(counts.to_client, want.len() as u64, "{via}");
        let sent = if via.contains("half") {
            script().len()
        } else {
            input.len()
        };
        assert_eq!(counts.to_leader, sent as u64, "{via}");
    }
}

/// Who a marking relay says it is.
fn standby() -> Via {
    Via {
        node: "n2".into(),
        max_job_size: 65_535,
    }
}

#[test]
fn a_stats_answer_names_the_relaying_node() {
    let leader = TestServer::start(&[]);
    let mut direct = Client::tcp(leader.port());
    let relay = TestRelay::marking(leader_of(&leader), Some(standby()));
    let mut c = Client::tcp(relay.port);
    // `ok_body` checks the byte count; `stats_of` the YAML's form.
    let stats = c.stats_of("stats");
    let tail: Vec<&(String, String)> = stats.iter().rev().take(2).collect();
    let want = [
        ("cluster-via-role", "standby"),
        ("cluster-via-node", "\"n2\""),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(tail, want.iter().collect::<Vec<_>>(), "{stats:?}");
    // The leader's own keys, all of them, before.
    let own = direct.stats_of("stats");
    let keys = |s: &[(String, String)]| s.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&stats)[..stats.len() - 2], keys(&own)[..]);
    // Other answers with YAML in them are not touched.
    let list = c.ok_body(b"list-tubes\r\n");
    assert_eq!(list, "---\n- default\n");
}

#[test]
fn a_conversation_through_the_relay() {
    let leader = TestServer::start(&[]);
    let relay = TestRelay::start(leader_of(&leader));
    let mut c = Client::tcp(relay.port);
    let mut worker = Client::tcp(relay.port);
    worker.send(b"reserve\r\n");
    c.wait_stat("current-waiting", "1");
    let id = c.put(b"through");
    worker.expect(format!("RESERVED {id} 7\r\nthrough\r\n").as_bytes());
    assert_eq!(c.job_stat(id, "state"), "reserved");
    worker.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
    c.exchange(format!("stats-job {id}\r\n").as_bytes(), b"NOT_FOUND\r\n");
}

#[test]
fn the_client_is_closed_when_the_leader_goes_away() {
    let leader = TestServer::start(&[]);
    let mut relay = TestRelay::start(leader_of(&leader));
    let mut idle = Client::tcp(relay.port);
    idle.put(b"x");
    let mut waiting = Client::tcp(relay.port);
    waiting.exchange(b"watch empty\r\n", b"WATCHING 2\r\n");
    waiting.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    waiting.send(b"reserve\r\n");
    let mut unix = Client::unix(&relay.sock);
    unix.exchange(b"use u\r\n", b"USING u\r\n");
    idle.wait_stat("current-waiting", "1");

    drop(leader); // SIGKILL
    idle.expect_closed();
    waiting.expect_closed();
    unix.expect_closed();
    for _ in 0..3 {
        // Ended by the leader's close (or reset), not by the clients.
        let _ = relay.finished();
    }
}

#[test]
fn a_leader_that_cannot_be_reached_closes_the_client() {
    let port = TestServer::free_port(); // nobody listens
    let mut relay = TestRelay::start(format!("127.0.0.1:{port}"));
    let mut c = Client::tcp(relay.port);
    c.send(b"stats\r\n");
    c.expect_closed();
    let err = relay.finished().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
}
