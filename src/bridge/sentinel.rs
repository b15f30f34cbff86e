//! `--redis-sentinel redis://SENTINEL[,SENTINEL…]/MASTER_NAME`: a node
//! whose address is wherever Redis Sentinel says the master is.
//!
//! At start the sentinels are asked in turn (`SENTINEL
//! get-master-addr-by-name`); afterwards [`follow`] listens for
//! `+switch-master` on one of them, and asks again every [`POLL`] too (a
//! lost sentinel connection, or a switch announced while it was down). When
//! the master moved, the node's connection moves with it
//! ([`Redis::switch_to`]): the event subscription follows (see `events`),
//! and the new master is reconciled at once, so keys deleted on the old
//! master and not replicated are cancelled, and timers are checked. A
//! promoted replica holds the keys with their TTLs (replicated as absolute
//! times since Redis 7.0), so pending timers stay as they are: nothing is
//! delivered twice, and a timer due during the failover asks whichever node
//! answers (a replica reports an expired key gone, as its master does).

use std::time::Duration;

use futures_util::StreamExt;
use redis::{ConnectionAddr, ConnectionInfo, RedisResult};

use super::config::Sentinel;
use super::redis_side::Redis;
use super::triggers::Triggers;
use super::wall_clock::now_ms;

/// How often the sentinels are asked besides `+switch-master`.
pub const POLL: Duration = Duration::from_secs(1);

/// The master's address now, from the first sentinel that knows it.
pub async fn master_addr(sentinel: &Sentinel) -> RedisResult<(String, u16)> {
    let mut last = None;
    for s in &sentinel.sentinels {
        match ask(s, &sentinel.master).await {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => {
                last = Some(redis::RedisError::from((
                    redis::ErrorKind::ResponseError,
                    "the sentinel does not know the master",
                    format!("{} at {s}", sentinel.master),
                )))
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| (redis::ErrorKind::ClientError, "no sentinel").into()))
}

async fn ask(sentinel: &str, master: &str) -> RedisResult<Option<(String, u16)>> {
    let client = redis::Client::open(format!("redis://{sentinel}"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(master)
        .query_async(&mut conn)
        .await?;
    Ok(reply)
}

/// `template` (database, credentials) at `host:port`.
pub fn at(template: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    ConnectionInfo {
        addr: ConnectionAddr::Tcp(host.to_owned(), port),
        redis: template.redis.clone(),
    }
}

fn same_addr(info: &ConnectionInfo, host: &str, port: u16) -> bool {
    matches!(&info.addr, ConnectionAddr::Tcp(h, p) if h == host && *p == port)
}

/// Keeps node `node`'s connection on the master `sentinel` names, forever.
/// Without keyspace events (`pubsub` off), a switch pulls the node's
/// reconciliation trigger itself (the event subscription does otherwise).
pub async fn follow(node: u16, sentinel: Sentinel, redis: Redis, triggers: Triggers, pubsub: bool) {
    let template = redis.address();
    for turn in 0.. {
        // Listen on one sentinel (the next one when it is lost), and ask
        // every POLL as well.
        let s = &sentinel.sentinels[turn % sentinel.sentinels.len()];
        let mut messages = match switch_messages(s).await {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(sentinel = %s, error = %e, "cannot subscribe to +switch-master");
                None
            }
        };
        loop {
            let listening = match &mut messages {
                Some(m) => tokio::select! {
                    msg = m.next() => msg.is_some(),
                    _ = tokio::time::sleep(POLL) => true,
                },
                None => {
                    tokio::time::sleep(POLL).await;
                    false
                }
            };
            check(node, &sentinel, &redis, &template, &triggers, pubsub).await;
            if !listening {
                break;
            }
        }
    }
}

/// Asks the sentinels where the master is, and moves `redis` there if it
/// moved.
async fn check(
    node: u16,
    sentinel: &Sentinel,
    redis: &Redis,
    template: &ConnectionInfo,
    triggers: &Triggers,
    pubsub: bool,
) {
    let (host, port) = match master_addr(sentinel).await {
        Ok(addr) => addr,
        Err(e) => {
            tracing::warn!(master = %sentinel.master, error = %e, "cannot ask the sentinels");
            return;
        }
    };
    if same_addr(&redis.address(), &host, port) {
        return;
    }
    let switched_ms = now_ms();
    match redis.switch_to(at(template, &host, port)).await {
        Ok(()) => {
            tracing::info!(
                target: crate::STATUS,
                master = %sentinel.master,
                "the master moved to {host}:{port} (Sentinel); following it and reconciling"
            );
            if !pubsub {
                triggers.missed(node, switched_ms);
            }
        }
        Err(e) => tracing::warn!(
            master = %sentinel.master,
            error = %e,
            "cannot connect to the new master {host}:{port}; retrying"
        ),
    }
}

/// `+switch-master` messages of the sentinel at `addr`.
async fn switch_messages(
    addr: &str,
) -> RedisResult<impl futures_util::Stream<Item = redis::Msg> + Unpin> {
    let client = redis::Client::open(format!("redis://{addr}"))?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe("+switch-master").await?;
    Ok(pubsub.into_on_message())
}
