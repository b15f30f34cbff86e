//! SCAN reconciliation: walks every key matching each pattern on a node and
//! queues it for a sync. It runs at start, every `--scan-interval`, and
//! at once when a trigger asks (a resubscribed event connection: events
//! sent meanwhile are gone for good; a lost job server connection: a
//! server restarted without `-b` forgets its timers; a wipe no event
//! announces, see `flushes`). It is also what catches a TTL cleared by a
//! plain `SET` where the `$` class is off, and all the bridge has with
//! `--no-pubsub`.
//!
//! A complete pass also finds what vanished: SCAN lists every key that
//! existed throughout the pass, so an indexed key of the node that no
//! pattern's walk listed, and whose deadline lies after the pass began,
//! was deleted, renamed away or flushed (or is back under a new TTL) since
//! the bridge last looked. It is synced too, nearest deadline first: Redis
//! says it is gone before its deadline and its timer is cancelled (or its
//! new TTL armed). A walk that fails part-way starts over from cursor 0
//! (the whole pass, over the masters of now, if it was of a Redis Cluster
//! master failed over meanwhile), and only complete walks end a pass; a
//! key wrongly taken for vanished would cost one expiry read, never a
//! wrong decision, since every sync reads Redis. Once the pass's syncs are done (a queue barrier), the
//! window its trigger opened closes (see `gaps`).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

use rustc_hash::FxHashSet;

use super::index::Index;
use super::redis_cluster::Target;
use super::redis_side::Redis;
use super::sync::Queue;
use super::triggers::Triggers;
use super::wall_clock::now_ms;
use super::work::{Hint, Work};

/// How long the first pass waits for the event subscription.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(5);

/// What node `node`'s reconciliation works with.
pub struct Node {
    pub node: u16,
    /// The node, or a whole cluster (all its masters are scanned).
    pub redis: Target,
    pub patterns: Vec<String>,
    pub interval: Duration,
    pub queue: Queue,
    pub triggers: Triggers,
    pub index: Index,
}

impl Node {
    /// Queues `key` for a sync, as a pass (`verify`ing or not) does.
    async fn sync(&self, key: Vec<u8>, verify: bool) {
        let hint = Hint::scanned(verify);
        let node = self.node;
        self.queue.push(Work { node, key, hint }).await;
    }
}

/// The keys one pass listed, as hashes keyed afresh each pass (the keys
/// come from the application, which must not be able to make one key pass
/// for another): 8 bytes a key while the pass runs. Two keys sharing a
/// hash (about one pass in 10^7 with a million keys) can only leave a
/// vanished key to its timer, as before this check existed.
struct Listed {
    hasher: RandomState,
    seen: FxHashSet<u64>,
}

impl Listed {
    fn new() -> Listed {
        Listed {
            hasher: RandomState::new(),
            seen: FxHashSet::default(),
        }
    }

    fn insert(&mut self, key: &[u8]) {
        self.seen.insert(self.hasher.hash_one(key));
    }

    fn contains(&self, key: &[u8]) -> bool {
        self.seen.contains(&self.hasher.hash_one(key))
    }
}

/// Reconciles node `n.node` forever; with `after_subscribing`, starts once
/// the event subscription is up.
pub async fn run(n: Node, after_subscribing: bool) {
    if after_subscribing {
        // But not forever: a node that refuses pub/sub is still scanned.
        let _ = tokio::time::timeout(SUBSCRIBE_WAIT, n.triggers.wait(n.node)).await;
    }
    // The first pass verifies that every indexed timer still exists.
    let mut verify = true;
    loop {
        let started = std::time::Instant::now();
        let (started_ms, listed) = walk(&n, verify).await;
        let keys = listed.seen.len();
        let mut vanished = n.index.select(n.node, |key, entry| {
            entry.expire_at_ms > started_ms && !listed.contains(key)
        });
        drop(listed);
        vanished.sort_unstable_by_key(|(_, entry)| entry.expire_at_ms);
        let gone = vanished.len();
        for (key, _) in vanished {
            n.sync(key, verify).await;
        }
        n.queue.barrier().await;
        n.triggers.passed(n.node, started_ms);
        tracing::info!(
            node = n.node,
            keys,
            vanished = gone,
            verify,
            "reconciled in {:?}",
            started.elapsed()
        );
        verify = tokio::select! {
            _ = tokio::time::sleep(n.interval) => false,
            _ = n.triggers.wait(n.node) => true,
        };
    }
}

/// Walks every node to scan, for each pattern: the keys listed, and
/// when the walks began. A cluster's master failed over during the walks
/// (it cannot be scanned, and its replica holds its keys now) starts them
/// over with the masters of now: waiting for it would hold up every pass,
/// while keys written to the new master before the bridge subscribed there
/// have nothing but a pass to find them.
async fn walk(n: &Node, verify: bool) -> (i64, Listed) {
    'over: loop {
        let started_ms = now_ms();
        let mut listed = Listed::new();
        for mut redis in scan_nodes(n).await {
            for pattern in &n.patterns {
                if !scan(n, &mut redis, pattern, verify, &mut listed).await {
                    tracing::info!(
                        node = n.node,
                        "a master failed over; scanning the masters of now"
                    );
                    continue 'over;
                }
            }
        }
        return (started_ms, listed);
    }
}

/// The nodes to scan now (every master of a cluster), retried until they
/// are known.
async fn scan_nodes(n: &Node) -> Vec<Redis> {
    loop {
        match n.redis.scan_nodes().await {
            Ok(nodes) => return nodes,
            Err(e) => {
                tracing::warn!(node = n.node, error = %e, "cannot list the cluster's masters");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// One complete SCAN walk of `redis` for `pattern`, each key queued and
/// listed; false if `redis` is no longer to be scanned (see [`walk`]). A
/// Redis error starts the walk over after a pause (SCAN guarantees nothing
/// across cursors of different connections).
async fn scan(
    n: &Node,
    redis: &mut Redis,
    pattern: &str,
    verify: bool,
    listed: &mut Listed,
) -> bool {
    let mut cursor = 0;
    loop {
        match redis.scan_step(cursor, pattern).await {
            Ok((next, keys)) => {
                for key in keys {
                    listed.insert(&key);
                    n.sync(key, verify).await;
                }
                if next == 0 {
                    return true;
                }
                cursor = next;
            }
            Err(e) => {
                tracing::warn!(node = n.node, error = %e, "SCAN failed; starting over");
                tokio::time::sleep(Duration::from_secs(1)).await;
                if !n.redis.scans(redis) {
                    return false;
                }
                cursor = 0;
            }
        }
    }
}
