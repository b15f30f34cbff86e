//! Keyspace events: one pub/sub connection per node, subscribed with
//! `PSUBSCRIBE __keyspace@DB__:PATTERN` for each `--match` (Redis filters
//! the keys), every event queued as a sync of its key. The event name only
//! matters for `expired` (the timer delivers); everything else is re-read
//! from Redis (`PEXPIRETIME`, or `PTTL`), so events need no interpretation.
//!
//! The subscription goes wherever the node's connection is: when it moves
//! (a Sentinel failover, see `sentinel`), the old one is dropped and the
//! new master subscribed, which reconciles it.
//!
//! Before each (re)subscription the needed `notify-keyspace-events` classes
//! are switched on (a restarted Redis forgets them), each change said at
//! the default log level, old -> new (a refusal once, until it changes).
//! An `expired` event's arrival is noted for the punctuality figures. After a lost
//! connection the node is reconciled, since events sent meanwhile are lost
//! (deliveries due meanwhile are marked uncertain, see `gaps`); so is it
//! after the first subscription (reconciliation waits for it).

use std::sync::Arc;

use futures_util::StreamExt;

use super::backoff::Backoff;
use super::config::Node;
use super::keys::KeyRef;
use super::punctuality::Punctuality;
use super::redis_side::{Notifications, Redis};
use super::report;
use super::sync::Queue;
use super::triggers::Triggers;
use super::wall_clock::now_ms;
use super::work::{Hint, Work};

/// Where node `index`'s events go: the sync queue, the triggers, the
/// punctuality figures.
#[derive(Clone)]
pub struct Sinks {
    pub queue: Queue,
    pub triggers: Triggers,
    pub punctuality: Arc<Punctuality>,
}

/// Follows node `node`'s events forever.
pub async fn run(index: u16, node: Node, mut redis: Redis, patterns: Vec<String>, sinks: Sinks) {
    let Sinks {
        queue,
        triggers,
        punctuality,
    } = sinks;
    let prefix = format!("__keyspace@{}__:", node.db());
    let mut backoff = Backoff::redis();
    let mut first = true;
    let mut switches = redis.switches();
    let mut said = Notifications::On;
    loop {
        // Seen before subscribing: a switch from now on ends the
        // subscription below.
        switches.borrow_and_update();
        let subscribed = match redis.enable_notifications().await {
            Ok(outcome) => {
                say(&redis, &outcome, &mut said);
                subscribe(redis.address(), &prefix, &patterns).await
            }
            Err(e) => Err(e),
        };
        match subscribed {
            Ok(pubsub) => {
                // Reconcile once subscribed, so no change falls between the
                // SCAN and the first event.
                if !first {
                    tracing::info!(node = %node.url, "resubscribed; reconciling");
                }
                first = false;
                triggers.subscribed(index);
                backoff.reset();
                let mut messages = pubsub.into_on_message();
                loop {
                    let msg = tokio::select! {
                        msg = messages.next() => msg,
                        _ = switches.changed() => {
                            tracing::info!(node = %node.url, "the node moved; subscribing there");
                            None
                        }
                    };
                    let Some(msg) = msg else { break };
                    let channel: Vec<u8> = msg.get_channel().unwrap_or_default();
                    let Some(key) = channel.strip_prefix(prefix.as_bytes()) else {
                        continue;
                    };
                    let event: Vec<u8> = msg.get_payload().unwrap_or_default();
                    if event == b"expired" {
                        punctuality.expired_event(KeyRef::new(index, key), now_ms());
                    }
                    let work = Work {
                        node: index,
                        key: key.to_vec(),
                        hint: Hint::event(&event),
                    };
                    queue.push(work).await;
                }
                triggers.events_lost(index);
                tracing::warn!(node = %node.url, "lost the keyspace event connection");
            }
            Err(e) => {
                tracing::warn!(node = %node.url, error = %e, "cannot subscribe to keyspace events")
            }
        }
        backoff.wait().await;
    }
}

/// Logs what switching notifications on did: every change, and a
/// refusal when it differs from the last one `said`.
fn say(redis: &Redis, outcome: &Notifications, said: &mut Notifications) {
    let changed = matches!(outcome, Notifications::Changed { .. });
    if !changed && outcome == said {
        return;
    }
    *said = outcome.clone();
    let addr = redis.address().addr.to_string();
    match report::notifications(&addr, outcome) {
        Some((false, line)) => tracing::info!(target: crate::STATUS, "{line}"),
        Some((true, line)) => tracing::warn!(target: crate::STATUS, "{line}"),
        None => {}
    }
}

async fn subscribe(
    address: redis::ConnectionInfo,
    prefix: &str,
    patterns: &[String],
) -> redis::RedisResult<redis::aio::PubSub> {
    let client = redis::Client::open(address)?;
    let mut pubsub = client.get_async_pubsub().await?;
    for pattern in patterns {
        pubsub.psubscribe(format!("{prefix}{pattern}")).await?;
    }
    Ok(pubsub)
}
