//! What a Redis node is and can do ([`Caps`]), found out once at connect:
//! its version, how it tells a key's expiry ([`Method`]), and which of the
//! commands the bridge uses it refuses (proxies refuse some).

use redis::{ErrorKind, RedisResult};

/// How a node tells a key's expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `PEXPIRETIME`: the exact deadline (Redis ≥ 7.0).
    ExpireTime,
    /// `PTTL` between two `TIME`s of the same pipeline.
    TtlServerClock,
    /// `PTTL` between two readings of the bridge's clock (the node refuses
    /// `TIME`).
    TtlLocalClock,
}

/// What a node is and can do, found out once at connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// `redis_version` of `INFO server` (empty if it would not say).
    pub version: String,
    pub method: Method,
    /// `INFO a b` with several sections (Redis ≥ 7.0); else one at a time.
    pub info_sections: bool,
    /// The commands the node refused (answered an error, or closed the
    /// connection, as proxies do), of those the bridge uses.
    pub refused: Vec<&'static str>,
}

impl Caps {
    /// Asks the node, each probe on a connection of its own (a proxy closes
    /// the connection on a command it does not forward). A refused probe is
    /// a missing capability; only a node that cannot be reached is an
    /// error (try again later). `pubsub`: probe `PSUBSCRIBE` too.
    pub(super) async fn probe(client: &redis::Client, pubsub: bool) -> RedisResult<Caps> {
        let mut refused = Vec::new();
        let info = match ask::<String>(client, redis::cmd("INFO").arg("server")).await? {
            Answer::Value(info) => Some(info),
            Answer::Redirected | Answer::Refused => None,
        };
        let version = info.as_deref().map(version_of).unwrap_or_default();
        if info.is_none() {
            refused.push("INFO");
        }
        let key = "sprout-bridge:probe";
        let mut has = async |name: &'static str, cmd: &redis::Cmd| {
            let ok = !matches!(ask::<redis::Value>(client, cmd).await?, Answer::Refused);
            if !ok {
                refused.push(name);
            }
            RedisResult::Ok(ok)
        };
        let expiretime = has("PEXPIRETIME", redis::cmd("PEXPIRETIME").arg(key)).await?;
        let time = has("TIME", &redis::cmd("TIME")).await?;
        let ttl = has("PTTL", redis::cmd("PTTL").arg(key)).await?;
        let scan = redis::cmd("SCAN")
            .arg(0)
            .arg("MATCH")
            .arg(key)
            .arg("COUNT")
            .arg(1)
            .clone();
        has("SCAN", &scan).await?;
        let config = redis::cmd("CONFIG")
            .arg("GET")
            .arg("notify-keyspace-events")
            .clone();
        has("CONFIG", &config).await?;
        if pubsub && !psubscribes(client).await? {
            refused.push("PSUBSCRIBE");
        }
        let method = match (expiretime, time, ttl) {
            (true, _, _) => Method::ExpireTime,
            (false, true, _) => Method::TtlServerClock,
            _ => Method::TtlLocalClock,
        };
        Ok(Caps {
            info_sections: major(&version) >= Some(7),
            version,
            method,
            refused,
        })
    }

    /// What keeps the bridge from working with this node at all: a way to
    /// read expiries, SCAN, and (unless `--no-pubsub`) keyspace events.
    pub fn missing_needs(&self) -> Vec<&'static str> {
        let refused = |c: &str| self.refused.contains(&c);
        let mut needs: Vec<&'static str> = Vec::new();
        if refused("PEXPIRETIME") && refused("PTTL") {
            needs.push("PEXPIRETIME or PTTL");
        }
        for c in ["SCAN", "PSUBSCRIBE"] {
            if refused(c) {
                needs.push(c);
            }
        }
        needs
    }
}

/// What a node said to a probe.
enum Answer<T> {
    Value(T),
    /// `MOVED` or `ASK`: a Redis Cluster master sending the probe's key to
    /// the master of its slot. It knows the command (a node redirects only
    /// a command it knows), so that is no refusal.
    Redirected,
    /// An error, or the connection closed while a fresh one still answers
    /// `PING` (a proxy that does not forward the command).
    Refused,
}

/// `cmd`'s answer on a connection of its own; an error only if the node
/// cannot be reached.
async fn ask<T: redis::FromRedisValue>(
    client: &redis::Client,
    cmd: &redis::Cmd,
) -> RedisResult<Answer<T>> {
    let mut conn = client.get_multiplexed_async_connection().await?;
    match cmd.query_async::<T>(&mut conn).await {
        Ok(value) => Ok(Answer::Value(value)),
        Err(e) if matches!(e.kind(), ErrorKind::Moved | ErrorKind::Ask) => Ok(Answer::Redirected),
        Err(e) if unreachable(&e) => {
            let mut fresh = client.get_multiplexed_async_connection().await?;
            let _: String = redis::cmd("PING").query_async(&mut fresh).await?;
            Ok(Answer::Refused)
        }
        Err(_) => Ok(Answer::Refused),
    }
}

/// Whether the node takes a `PSUBSCRIBE` (on a pub/sub connection of its
/// own, dropped afterwards).
async fn psubscribes(client: &redis::Client) -> RedisResult<bool> {
    let mut pubsub = client.get_async_pubsub().await?;
    match pubsub.psubscribe("sprout-bridge:probe").await {
        Ok(()) => Ok(true),
        Err(e) if unreachable(&e) => {
            let mut fresh = client.get_multiplexed_async_connection().await?;
            let _: String = redis::cmd("PING").query_async(&mut fresh).await?;
            Ok(false)
        }
        Err(_) => Ok(false),
    }
}

/// `redis_version` (or Valkey's `valkey_version`, which it also reports as
/// `redis_version` 7.2.4) from `INFO server`.
fn version_of(info: &str) -> String {
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix("redis_version:"))
        .unwrap_or_default()
        .to_owned()
}

fn major(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

/// Did the command fail for want of a connection (rather than being
/// refused by Redis)?
pub fn unreachable(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_info() {
        let info = "# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n";
        assert_eq!(version_of(info), "6.2.14");
        assert_eq!(major(&version_of(info)), Some(6));
        assert_eq!(major(""), None);
    }
}
