//! SCAN reconciliation: walks every key matching each pattern on a node and
//! queues it for a sync. It runs at start, every `--scan-interval`, and
//! at once after a connection was lost (events sent meanwhile are gone for
//! good, and a server restarted without `-b` forgets its timers). It is
//! also what catches what no event announces (a TTL cleared by a plain
//! `SET`, `FLUSHDB`), and all the bridge has with `--no-pubsub`.

use std::time::Duration;

use super::redis_side::Redis;
use super::sync::Queue;
use super::triggers::Triggers;
use super::work::{Hint, Work};

/// How long the first pass waits for the event subscription.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(5);

/// Reconciles node `node` forever; with `after_subscribing`, starts once
/// the event subscription is up.
pub async fn run(
    node: u16,
    mut redis: Redis,
    patterns: Vec<String>,
    interval: Duration,
    queue: Queue,
    triggers: Triggers,
    after_subscribing: bool,
) {
    if after_subscribing {
        // But not forever: a node that refuses pub/sub is still scanned.
        let _ = tokio::time::timeout(SUBSCRIBE_WAIT, triggers.wait(node)).await;
    }
    // The first pass verifies that every indexed timer still exists.
    let mut verify = true;
    loop {
        let started = std::time::Instant::now();
        let mut keys = 0usize;
        for pattern in &patterns {
            keys += scan(node, &mut redis, pattern, verify, &queue).await;
        }
        tracing::info!(node, keys, verify, "reconciled in {:?}", started.elapsed());
        verify = tokio::select! {
            _ = tokio::time::sleep(interval) => false,
            _ = triggers.wait(node) => true,
        };
    }
}

/// One full SCAN for `pattern`; returns how many keys it queued. A Redis
/// error restarts the walk after a pause (SCAN guarantees nothing across
/// cursors of different connections).
async fn scan(node: u16, redis: &mut Redis, pattern: &str, verify: bool, queue: &Queue) -> usize {
    let mut queued = 0;
    let mut cursor = 0;
    loop {
        match redis.scan_step(cursor, pattern).await {
            Ok((next, keys)) => {
                for key in keys {
                    queued += 1;
                    let hint = Hint::scanned(verify);
                    queue.push(Work { node, key, hint }).await;
                }
                if next == 0 {
                    return queued;
                }
                cursor = next;
            }
            Err(e) => {
                tracing::warn!(node, error = %e, "SCAN failed; starting over");
                tokio::time::sleep(Duration::from_secs(1)).await;
                cursor = 0;
            }
        }
    }
}
