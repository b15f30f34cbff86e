//! Everything the bridge asks Redis: a key's exact expiry (`PEXPIRETIME`,
//! Redis ≥ 7.0), its value, `SCAN MATCH`, the delete-if-unchanged script
//! of `--delete-on-fire`, `INFO`, and switching keyspace notifications on.
//!
//! Commands go through a [`ConnectionManager`], which reconnects by itself;
//! a command that fails is retried by its caller after a pause.

use redis::aio::ConnectionManager;
use redis::{AsyncCommands, RedisResult, Script};

use super::config::Node;

/// Notification classes the bridge needs: `K` keyspace channel, `g` generic
/// (del, expire, persist, rename_*, copy_to, move_*, restore), `$` string
/// (set), `x` expired, `e` evicted.
const NEEDED_FLAGS: &str = "Kg$xe";
/// `A` is Redis's alias for every event class but `n` (new key) and `m`
/// (key miss).
const ALIAS_ALL: &str = "g$lshzxetd";

/// What Redis says about a key's expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// The key does not exist (`PEXPIRETIME` answered -2).
    Gone,
    /// The key exists without a TTL (-1).
    Persistent,
    /// The key expires at this Unix time in milliseconds.
    At(i64),
}

impl Expiry {
    fn from_reply(ms: i64) -> Expiry {
        match ms {
            -2 => Expiry::Gone,
            ms if ms < 0 => Expiry::Persistent,
            ms => Expiry::At(ms),
        }
    }
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

/// A command connection to one node.
#[derive(Clone)]
pub struct Redis {
    conn: ConnectionManager,
    delete_if_due: Script,
}

impl Redis {
    pub async fn connect(node: &Node) -> RedisResult<Redis> {
        let client = redis::Client::open(node.info.clone())?;
        Ok(Redis {
            conn: ConnectionManager::new(client).await?,
            delete_if_due: Script::new(DELETE_IF_DUE),
        })
    }

    /// `PEXPIRETIME` of every key in `keys`, in one pipeline (one round
    /// trip); the answers are in the same order.
    pub async fn expiries(&mut self, keys: &[&[u8]]) -> RedisResult<Vec<Expiry>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("PEXPIRETIME").arg(*key);
        }
        let ms: Vec<i64> = pipe.query_async(&mut self.conn).await?;
        Ok(ms.into_iter().map(Expiry::from_reply).collect())
    }

    /// The key's value; `None` if it is gone or not a string.
    pub async fn value(&mut self, key: &[u8]) -> RedisResult<Option<Vec<u8>>> {
        match self.conn.get::<_, Option<Vec<u8>>>(key).await {
            Err(e) if e.code() == Some("WRONGTYPE") => Ok(None),
            other => other,
        }
    }

    /// `--delete-on-fire`: deletes the key if it still expires at
    /// `expire_at_ms`; returns the expiry Redis reports afterwards.
    pub async fn delete_if_due(&mut self, key: &[u8], expire_at_ms: i64) -> RedisResult<Expiry> {
        let ms: i64 = self
            .delete_if_due
            .key(key)
            .arg(expire_at_ms)
            .invoke_async(&mut self.conn)
            .await?;
        Ok(Expiry::from_reply(ms))
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
            .query_async(&mut self.conn)
            .await
    }

    /// `INFO sections` (several, space-separated, as Redis ≥ 7.0 takes
    /// them), as text.
    pub async fn info(&mut self, sections: &str) -> RedisResult<String> {
        redis::cmd("INFO")
            .arg(sections.split(' ').collect::<Vec<_>>())
            .query_async(&mut self.conn)
            .await
    }

    /// Merges the classes the bridge needs into `notify-keyspace-events`.
    /// Returns the flags that are still missing afterwards (empty when all
    /// is well), so the caller can say what could not be enabled; an error
    /// only when Redis could not be reached at all (try again later).
    pub async fn enable_notifications(&mut self) -> RedisResult<String> {
        let current = match self.notify_flags().await {
            Ok(flags) => flags,
            Err(e) if unreachable(&e) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read notify-keyspace-events (CONFIG GET)");
                return Ok(NEEDED_FLAGS.to_owned());
            }
        };
        let missing = missing_flags(&current);
        if missing.is_empty() {
            return Ok(missing);
        }
        let wanted = format!("{current}{missing}");
        let set: RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg(&wanted)
            .query_async(&mut self.conn)
            .await;
        match set {
            Err(e) if unreachable(&e) => Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "cannot set notify-keyspace-events to {wanted:?}");
                Ok(missing)
            }
            Ok(()) => Ok(missing_flags(&self.notify_flags().await?)),
        }
    }

    async fn notify_flags(&mut self) -> RedisResult<String> {
        let reply: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("notify-keyspace-events")
            .query_async(&mut self.conn)
            .await?;
        Ok(reply.get(1).cloned().unwrap_or_default())
    }
}

/// Did the command fail for want of a connection (rather than being
/// refused by Redis)?
fn unreachable(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
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
}
