//! Cluster mode with `-b DIR` on each node (issue 33, step 4): a node
//! keeps its copy of the stream's pages on its own disk, and the engine
//! keeps only the length of a body longer than 32 bytes, read back from
//! that copy through a body cache (64 KiB here, far below the load's
//! bodies, so most reads go to the disk).
//!
//! - Under the failover load of `cluster.rs` (producers, consumers and a
//!   kicker through every node, the leader killed twice and started again
//!   on its directory), every acknowledged job comes back from the last
//!   leader with its body, and that leader read bodies from its disk.
//! - A node given another node's directory is refused with a sentence
//!   that says so.

mod common;

use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use common::failover::{check, kill_leaders, Load};
use common::nats::NatsCluster;
use common::sprouts::{lease_ms, Sprouts};
use common::{Addr, Client, TestServer};

/// `n` NATS servers and `n` sprout nodes of cluster `name`, node `i`
/// with `-b dirs[i]`, a leader agreed on; `None` without a NATS server
/// (see the harness).
struct OnDisk {
    nats: NatsCluster,
    sprouts: Sprouts,
    base: PathBuf,
    dirs: Vec<PathBuf>,
}

impl OnDisk {
    fn start(test: &str, name: &str, n: usize) -> Option<OnDisk> {
        let nats = NatsCluster::start(n, test)?;
        let base = std::env::temp_dir().join(format!("sprout-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dirs: Vec<PathBuf> = (0..n).map(|i| base.join(format!("s{i}"))).collect();
        let sprouts = Sprouts::start_with(&nats, name, n, with_dir(dirs.clone(), n));
        sprouts.wait_leader(Duration::from_secs(30));
        Some(OnDisk {
            nats,
            sprouts,
            base,
            dirs,
        })
    }

    /// Stops the nodes, then removes their directories.
    fn finish(self) {
        drop(self.sprouts);
        std::fs::remove_dir_all(&self.base).unwrap();
    }
}

/// Node `i`'s flags: its directory, a small body cache, and as many
/// copies of the stream as there are NATS servers (`nats`).
fn with_dir(dirs: Vec<PathBuf>, nats: usize) -> impl Fn(usize) -> Vec<String> + 'static {
    move |i| {
        let dir = dirs[i].display().to_string();
        let (cache, replicas) = ("65536".into(), nats.to_string());
        let flags = ["-b".into(), dir, "--body-cache".into(), cache];
        let flags = flags
            .into_iter()
            .chain(["--cluster-replicas".into(), replicas]);
        flags.collect()
    }
}

#[test]
fn with_bodies_on_the_nodes_disks_a_killed_leader_loses_no_job_and_no_body() {
    let Some(mut cluster) = OnDisk::start("cluster_bodies", "bodies", 3) else {
        return;
    };
    let sprouts = &mut cluster.sprouts;
    let load = Load::start(&sprouts.ports);
    thread::sleep(Duration::from_millis(1500));
    kill_leaders(sprouts, 2);
    let log = load.finish();
    check(sprouts, &log);
    // The check peeked every job: through a 64 KiB cache, most bodies
    // were read back from the leader's copy on disk.
    let leader = sprouts.wait_leader(Duration::from_secs(30));
    let mut c = Client::tcp(sprouts.ports[leader]);
    let misses: u64 = c.stat("body-cache-misses").parse().unwrap();
    let errors = c.stat("body-cache-read-errors");
    eprintln!("the last leader's body cache: {misses} misses, {errors} read errors");
    assert!(misses > 0, "no body was read from the disk");
    assert_eq!(errors, "0");
    for dir in &cluster.dirs {
        let copy = dir.join("cluster-pages");
        assert!(copy.is_dir(), "{} has no copy", copy.display());
    }
    cluster.finish();
}

#[test]
fn a_node_given_another_nodes_directory_is_refused() {
    let Some(cluster) = OnDisk::start("cluster_bodies_shared_dir", "shared", 1) else {
        return;
    };
    let (urls, first) = (cluster.nats.urls(), cluster.dirs[0].clone());
    let port = TestServer::free_port();
    let lease = lease_ms();
    let args = [
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "--cluster",
        &urls,
        "--cluster-name",
        "shared",
        "--node-id",
        "s1",
        "-b",
        &first.display().to_string(),
        "--cluster-replicas",
        "1",
        "--cluster-lease-ms",
        &lease,
    ];
    // It may bind its port before it finds the directory taken.
    let refused = match TestServer::spawn(&args, Addr::Tcp(port)) {
        Err(refused) => refused,
        Ok(mut node) => {
            let status = node.wait_exit(Duration::from_secs(10));
            assert!(
                status.is_some_and(|s| !s.success()),
                "a second node on the same -b serves: {status:?}"
            );
            node.stderr()
        }
    };
    assert!(
        refused.contains("in use by another cluster node"),
        "{refused}"
    );
    cluster.finish();
}
