//! Everything the bridge asks Redis: a key's expiry, its value, `SCAN
//! MATCH`, the delete-if-unchanged script of `--delete-on-fire`, `INFO`,
//! and switching keyspace notifications on.
//!
//! How a key's expiry is read depends on the node, found out once at
//! connect (`redis_caps`, [`Caps::probe`]: `INFO server` for the version, then a probe of
//! each command): `PEXPIRETIME` where it exists (Redis ≥ 7.0, Valkey), the
//! exact deadline; otherwise (Redis 6.x, 5.x, codis-server) `PTTL`, which
//! is relative, so the pipeline is bracketed by two clock readings and a
//! key expires within `[lo + pttl, hi + pttl]`: the bridge takes `hi +
//! pttl`, never early, and carries `hi - lo` along as the reading's error
//! ([`Reading`]). The clock is Redis's own (`TIME` first and last in the
//! same pipeline, which is Redis's clock as `PEXPIRETIME` is, and the
//! bracket only spans the server's work on the pipeline: 0-1 ms on
//! loopback), or the bridge's (before sending, after the answer: the
//! round trip) where `TIME` is refused.
//!
//! Commands go through a [`ConnectionManager`], which reconnects by itself;
//! a command that fails is retried by its caller after a pause. So a
//! command on a node that is down fails at once ([`manager_config`]): with
//! the crate's default reconnection (retries 1 s, then 60 s apart), it
//! waited minutes, and held up whatever waited on it (a reconciliation
//! pass, the topology read of a Redis Cluster, a batch of keys).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, RedisResult, Script};

use super::config::Node;
use super::expiry::{Expiry, Reading};
use super::redis_caps::{unreachable, Caps, Method};
use super::wall_clock::now_ms;

/// Notification classes the bridge needs: `K` keyspace channel, `g` generic
/// (del, expire, persist, rename_*, copy_to, move_*, restore), `$` string
/// (set), `x` expired, `e` evicted.
const NEEDED_FLAGS: &str = "Kg$xe";
/// `A` is Redis's alias for every event class but `n` (new key) and `m`
/// (key miss).
const ALIAS_ALL: &str = "g$lshzxetd";

/// Milliseconds of a `TIME` answer (seconds, microseconds).
fn time_ms(time: &(i64, i64)) -> i64 {
    time.0 * 1000 + time.1 / 1000
}

/// Returns `PEXPIRETIME` of `KEYS[1]`, after deleting the key if that
/// expiry is still exactly `ARGV[1]` (then it answers -2, as for a key
/// Redis expired itself).
const DELETE_IF_DUE: &str = r"
local at = redis.call('PEXPIRETIME', KEYS[1])
if at == tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return -2
end
return at
";

/// [`DELETE_IF_DUE`] where there is no `PEXPIRETIME`: deletes the key if
/// its `PTTL` is at most `ARGV[1]` ms (it was due, and was not given a new
/// TTL meanwhile); returns -2 then, else the `PTTL`.
const DELETE_IF_DUE_TTL: &str = r"
local ttl = redis.call('PTTL', KEYS[1])
if ttl >= 0 and ttl <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return -2
end
return ttl
";

/// A command connection to one node; clones share it. Where the node's
/// address can change (the master of a Sentinel deployment), a switch
/// ([`Redis::switch_to`]) moves every clone to the new address at once, and
/// tells whoever watches [`Redis::switches`].
#[derive(Clone)]
pub struct Redis(Arc<SwitchableLink>);

/// What the clones of a [`Redis`] share: the [`Link`] they all use (a
/// switch replaces it), the count of switches, and whether keyspace events
/// are asked of the node (the probe of the next link needs it).
struct SwitchableLink {
    current: std::sync::RwLock<Link>,
    switches: tokio::sync::watch::Sender<u64>,
    pubsub: bool,
}

/// A connection to one address of the node, with the script and what
/// the node there can do.
#[derive(Clone)]
struct Link {
    conn: ConnectionManager,
    delete_if_due: Script,
    caps: Arc<Caps>,
    address: redis::ConnectionInfo,
}

impl Link {
    async fn open(address: redis::ConnectionInfo, pubsub: bool) -> RedisResult<Link> {
        let client = redis::Client::open(address.clone())?;
        let caps = Caps::probe(&client, pubsub).await?;
        let conn = ConnectionManager::new_with_config(client, manager_config()).await?;
        let script = match caps.method {
            Method::ExpireTime => DELETE_IF_DUE,
            _ => DELETE_IF_DUE_TTL,
        };
        Ok(Link {
            conn,
            delete_if_due: Script::new(script),
            caps: Arc::new(caps),
            address,
        })
    }
}

/// How long connecting to a node may take: a host that is gone (no
/// refusal comes back) would otherwise hold a command for the kernel's
/// SYN retries, about 2 minutes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// One connection attempt per command that finds the connection lost, not
/// the crate's retries: the caller's own pause and retry is the one that
/// knows what else to do meanwhile (see the module docs).
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(0)
        .set_connection_timeout(CONNECT_TIMEOUT)
}

impl Redis {
    /// Connects to `node` and finds out what it can do (`pubsub`: whether
    /// keyspace events will be asked of it).
    pub async fn connect(node: &Node, pubsub: bool) -> RedisResult<Redis> {
        Redis::connect_to(node.info.clone(), pubsub).await
    }

    /// Connects to the node at `address`.
    pub async fn connect_to(address: redis::ConnectionInfo, pubsub: bool) -> RedisResult<Redis> {
        let conn = Link::open(address, pubsub).await?;
        Ok(Redis(Arc::new(SwitchableLink {
            current: std::sync::RwLock::new(conn),
            switches: tokio::sync::watch::Sender::new(0),
            pubsub,
        })))
    }

    /// Moves every clone to the node at `address` (probed first; on an
    /// error nothing changes).
    pub async fn switch_to(&self, address: redis::ConnectionInfo) -> RedisResult<()> {
        let conn = Link::open(address, self.0.pubsub).await?;
        *self.0.current.write().unwrap_or_else(|e| e.into_inner()) = conn;
        self.0.switches.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Changes each time [`Redis::switch_to`] moves the connection.
    pub fn switches(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.switches.subscribe()
    }

    fn current(&self) -> Link {
        self.0
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn conn(&self) -> ConnectionManager {
        self.current().conn
    }

    /// What the node is and can do (as found at connect).
    pub fn caps(&self) -> Arc<Caps> {
        self.current().caps
    }

    /// Where the node is now.
    pub fn address(&self) -> redis::ConnectionInfo {
        self.current().address
    }

    /// The expiry of every key in `keys`, in one pipeline (one round
    /// trip); the answers are in the same order.
    pub async fn expiries(&mut self, keys: &[&[u8]]) -> RedisResult<Vec<Reading>> {
        self.expiries_each(keys, false).await?.into_iter().collect()
    }

    /// [`Redis::expiries`], each key's answer on its own: a Redis Cluster
    /// node answers `MOVED` or `ASK` for keys it does not hold (see
    /// `cluster`). `asking`: each read preceded by `ASKING` (the keys of a
    /// slot being imported).
    pub async fn expiries_each(
        &mut self,
        keys: &[&[u8]],
        asking: bool,
    ) -> RedisResult<Vec<RedisResult<Reading>>> {
        use redis::aio::ConnectionLike;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        let mut current = self.current();
        let method = current.caps.method;
        let server_clock = method == Method::TtlServerClock;
        if server_clock {
            pipe.cmd("TIME");
        }
        for key in keys {
            if asking {
                pipe.cmd("ASKING");
            }
            match method {
                Method::ExpireTime => pipe.cmd("PEXPIRETIME").arg(*key),
                _ => pipe.cmd("PTTL").arg(*key),
            };
        }
        if server_clock {
            pipe.cmd("TIME");
        }
        let count = keys.len() * (1 + usize::from(asking)) + 2 * usize::from(server_clock);
        let sent_ms = now_ms();
        let mut replies = current.conn.req_packed_commands(&pipe, 0, count).await?;
        let (lo, hi) = match method {
            Method::ExpireTime => (0, 0),
            Method::TtlLocalClock => (sent_ms, now_ms()),
            Method::TtlServerClock => {
                let last = replies.pop().unwrap_or(redis::Value::Nil);
                let first = replies.remove(0);
                let lo: (i64, i64) = redis::from_owned_redis_value(first.extract_error()?)?;
                let hi: (i64, i64) = redis::from_owned_redis_value(last.extract_error()?)?;
                (time_ms(&lo), time_ms(&hi))
            }
        };
        let step = 1 + usize::from(asking);
        Ok(replies
            .into_iter()
            .skip(step - 1)
            .step_by(step)
            .map(|reply| {
                let n: i64 = redis::from_owned_redis_value(reply.extract_error()?)?;
                Ok(match method {
                    Method::ExpireTime => Expiry::from_reply(n).into(),
                    _ => Reading::from_ttl(n, lo, hi),
                })
            })
            .collect())
    }

    /// The key's value; `None` if it is gone or not a string.
    pub async fn value(&mut self, key: &[u8]) -> RedisResult<Option<Vec<u8>>> {
        match self.conn().get::<_, Option<Vec<u8>>>(key).await {
            Err(e) if e.code() == Some("WRONGTYPE") => Ok(None),
            other => other,
        }
    }

    /// `--delete-on-fire`: deletes the key if it still expires at
    /// `expire_at_ms` (read with `PTTL`: within `slack_ms` of it); returns
    /// the expiry Redis reports afterwards.
    pub async fn delete_if_due(
        &mut self,
        key: &[u8],
        expire_at_ms: i64,
        slack_ms: i64,
    ) -> RedisResult<Reading> {
        let current = self.current();
        let mut conn = current.conn.clone();
        let exact = current.caps.method == Method::ExpireTime;
        let sent_ms = now_ms();
        // `DELETE_IF_DUE` takes the deadline; `DELETE_IF_DUE_TTL` the most
        // TTL a due key can have left (with the slack).
        let arg = if exact {
            expire_at_ms
        } else {
            (expire_at_ms - sent_ms).max(0) + slack_ms
        };
        let answer: i64 = current
            .delete_if_due
            .key(key)
            .arg(arg)
            .invoke_async(&mut conn)
            .await?;
        Ok(if exact {
            Expiry::from_reply(answer).into()
        } else {
            Reading::from_ttl(answer, sent_ms, now_ms())
        })
    }

    /// One `SCAN cursor MATCH pattern COUNT 1000` step: the next cursor
    /// (0 when done) and the keys found.
    pub async fn scan_step(
        &mut self,
        cursor: u64,
        pattern: &str,
    ) -> RedisResult<(u64, Vec<Vec<u8>>)> {
        redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut self.conn())
            .await
    }

    /// `CLUSTER SLOTS` and `CLUSTER NODES`, as Redis answers them (read by
    /// `redis_cluster`); the second empty if refused (an ACL): it only
    /// tells which of several answers is newest.
    pub async fn cluster_view(&mut self) -> RedisResult<(redis::Value, String)> {
        let slots = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut self.conn())
            .await?;
        let nodes = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut self.conn())
            .await;
        match nodes {
            Err(e) if unreachable(&e) => Err(e),
            nodes => Ok((slots, nodes.unwrap_or_default())),
        }
    }

    /// `INFO sections` (several, space-separated), as text: in one command
    /// where Redis ≥ 7.0 takes them so, else one section a command in one
    /// pipeline.
    pub async fn info(&mut self, sections: &str) -> RedisResult<String> {
        let sections: Vec<&str> = sections.split(' ').collect();
        if self.caps().info_sections {
            return redis::cmd("INFO")
                .arg(sections)
                .query_async(&mut self.conn())
                .await;
        }
        let mut pipe = redis::pipe();
        for section in sections {
            pipe.cmd("INFO").arg(section);
        }
        let texts: Vec<String> = pipe.query_async(&mut self.conn()).await?;
        Ok(texts.concat())
    }

    /// Merges the classes the bridge needs into `notify-keyspace-events`
    /// and says what it did, for the caller to report; an error only when
    /// Redis could not be reached at all (try again later).
    pub async fn enable_notifications(&mut self) -> RedisResult<Notifications> {
        let old = match self.notify_flags().await {
            Ok(flags) => flags,
            Err(e) if unreachable(&e) => return Err(e),
            Err(e) => {
                return Ok(Notifications::Refused {
                    old: None,
                    missing: NEEDED_FLAGS.to_owned(),
                    why: format!("CONFIG GET: {e}"),
                })
            }
        };
        let missing = missing_flags(&old);
        if missing.is_empty() {
            return Ok(Notifications::On);
        }
        let wanted = format!("{old}{missing}");
        let set: RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg(&wanted)
            .query_async(&mut self.conn())
            .await;
        match set {
            Err(e) if unreachable(&e) => Err(e),
            Err(e) => Ok(Notifications::Refused {
                old: Some(old),
                missing,
                why: format!("CONFIG SET to {wanted:?}: {e}"),
            }),
            Ok(()) => {
                let new = self.notify_flags().await?;
                let missing = missing_flags(&new);
                Ok(Notifications::Changed { old, new, missing })
            }
        }
    }

    async fn notify_flags(&mut self) -> RedisResult<String> {
        let reply: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("notify-keyspace-events")
            .query_async(&mut self.conn())
            .await?;
        Ok(reply.get(1).cloned().unwrap_or_default())
    }
}

/// What [`Redis::enable_notifications`] did to `notify-keyspace-events`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notifications {
    /// Every class the bridge needs was on already: nothing changed.
    On,
    /// Changed from `old` to `new` (as Redis reads it back); `missing`:
    /// classes still off (Redis took the value but not them).
    Changed {
        old: String,
        new: String,
        missing: String,
    },
    /// Could not be changed: the value before (if it could be read), the
    /// classes missing, and why.
    Refused {
        old: Option<String>,
        missing: String,
        why: String,
    },
}

/// The needed flags `current` lacks.
fn missing_flags(current: &str) -> String {
    let all = current.contains('A');
    NEEDED_FLAGS
        .chars()
        .filter(|&f| !(current.contains(f) || all && ALIAS_ALL.contains(f)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_merged() {
        assert_eq!(missing_flags(""), "Kg$xe");
        assert_eq!(missing_flags("Ex"), "Kg$e");
        assert_eq!(missing_flags("KA"), "");
        assert_eq!(missing_flags("AKE"), "");
        assert_eq!(missing_flags("Kg$xe"), "");
    }

    #[test]
    fn time_answers_are_milliseconds() {
        assert_eq!(time_ms(&(1_700_000_000, 123_999)), 1_700_000_000_123);
    }
}
