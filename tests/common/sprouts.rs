//! Sprout nodes of one cluster for the cluster tests (real binaries, on
//! free loopback ports, against a [`NatsCluster`]): start, kill -9, ask
//! who leads, time a takeover.

use std::thread;
use std::time::{Duration, Instant};

use super::nats::NatsCluster;
use super::{Addr, FallibleClient, TestServer};

/// A bound on a takeover, generous for a loaded 2-core machine: the lease
/// (1 s in these tests) runs out, a standby polls, reads on and claims.
pub const TAKEOVER_BOUND: Duration = Duration::from_secs(6);
/// The lease in these tests; `SPROUT_CLUSTER_LEASE_MS=1500` measures the
/// default's takeover by hand.
pub fn lease_ms() -> String {
    std::env::var("SPROUT_CLUSTER_LEASE_MS").unwrap_or_else(|_| "1000".into())
}

/// Sprout nodes of one cluster (node `i` is `s{i}` on `ports[i]`), each
/// started with the same flags plus `extra(i)`.
pub struct Sprouts {
    urls: String,
    name: String,
    pub ports: Vec<u16>,
    /// The port each node advertises (`stats`'s `cluster-leader`): its
    /// beanstalk port, or with `--cluster-peer-listen` its peer port.
    pub advertised: Vec<u16>,
    pub nodes: Vec<Option<TestServer>>,
    extra: Box<dyn Fn(usize) -> Vec<String>>,
    /// What killed nodes logged.
    pub past_logs: Vec<String>,
}

impl Sprouts {
    pub fn start(nats: &NatsCluster, name: &str, n: usize) -> Sprouts {
        Sprouts::start_with(nats, name, n, |_| Vec::new())
    }

    /// [`Sprouts::start`], node `i` with the flags `extra(i)` too.
    pub fn start_with(
        nats: &NatsCluster,
        name: &str,
        n: usize,
        extra: impl Fn(usize) -> Vec<String> + 'static,
    ) -> Sprouts {
        let ports = (0..n).map(|_| TestServer::free_port()).collect();
        Sprouts::start_on(nats, name, ports, extra)
    }

    /// [`Sprouts::start_with`] on beanstalk ports chosen beforehand (for
    /// flags that name them).
    pub fn start_on(
        nats: &NatsCluster,
        name: &str,
        ports: Vec<u16>,
        extra: impl Fn(usize) -> Vec<String> + 'static,
    ) -> Sprouts {
        let n = ports.len();
        let mut s = Sprouts {
            urls: nats.urls(),
            name: name.to_string(),
            advertised: ports.clone(),
            ports,
            nodes: (0..n).map(|_| None).collect(),
            extra: Box::new(extra),
            past_logs: Vec::new(),
        };
        for i in 0..n {
            s.start_node(i);
        }
        s
    }

    pub fn start_node(&mut self, i: usize) {
        let port = self.ports[i].to_string();
        let node = format!("s{i}");
        let lease = lease_ms();
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
            "-V",
        ];
        let extra = (self.extra)(i);
        let mut args: Vec<&str> = args.to_vec();
        // A test that names its own lease (the default's) has it.
        if !extra.iter().any(|a| a == "--cluster-lease-ms") {
            args.extend(["--cluster-lease-ms", &lease]);
        }
        args.extend(extra.iter().map(String::as_str));
        let server = TestServer::spawn(&args, Addr::Tcp(self.ports[i]))
            .unwrap_or_else(|e| panic!("node {i}: {e}"));
        self.nodes[i] = Some(server);
    }

    pub fn kill9(&mut self, i: usize) {
        if let Some(mut server) = self.nodes[i].take() {
            server.signal(libc::SIGKILL);
            server.wait_exit(Duration::from_secs(5));
            self.past_logs.push(server.stderr());
        }
    }

    pub fn alive(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_some())
            .collect()
    }

    /// The node that answers as leader (asked through `via`, which passes
    /// the question on if it is a standby).
    pub fn leader_via(&self, via: usize) -> Option<usize> {
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
        role.then(|| self.advertised.iter().position(|&p| p == leader))?
    }

    /// Waits until the alive nodes agree on a leader.
    pub fn wait_leader(&self, timeout: Duration) -> usize {
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
                let logs = self.notable_logs();
                panic!("no leader agreed on within {timeout:?}: {seen:?}; stderr:\n{logs}");
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// What every live node has logged.
    pub fn logs(&self) -> Vec<String> {
        self.nodes.iter().flatten().map(|n| n.stderr()).collect()
    }

    /// What every node, live or killed, has logged, without the lines each
    /// client connection adds (thousands under load: a CI report keeps
    /// only the start of a failure's message), for a panic message.
    pub fn notable_logs(&self) -> String {
        const ROUTINE: [&str; 3] = [
            "connection opened",
            "connection closed",
            "relay to the leader",
        ];
        let routine = |l: &&str| ROUTINE.iter().any(|s| l.contains(s));
        let mut logs = self.past_logs.clone();
        logs.extend(self.logs());
        let mut out = String::new();
        for (i, log) in logs.iter().enumerate() {
            let skipped = log.lines().filter(routine).count();
            out += &format!("--- node log {i} ({skipped} connection lines left out)\n");
            for line in log.lines().filter(|l| !routine(l)) {
                out += line;
                out.push('\n');
            }
        }
        out
    }

    /// Puts through the live nodes in turn (one may have stopped by
    /// itself) until one is acknowledged; how long that took.
    pub fn time_to_put(&self, bound: Duration) -> Duration {
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
                let logs = self.notable_logs();
                panic!("no put acknowledged within {bound:?}; stderr:\n{logs}");
            }
            thread::sleep(Duration::from_millis(20));
        }
        unreachable!()
    }
}
