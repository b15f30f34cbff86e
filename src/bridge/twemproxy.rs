//! `--twemproxy-config FILE`: the Redis backends of a twemproxy
//! (nutcracker) configuration, as the nodes the bridge watches.
//!
//! Why the backends and not the proxy: twemproxy forwards key commands
//! only; it closes the connection on `SCAN`, `PSUBSCRIBE`, `CONFIG`,
//! `INFO` and `PEXPIRETIME` (nutcracker 0.5.0, tried), so through it the
//! bridge could neither learn TTLs nor reconcile. Each backend holds the
//! keys the proxy hashed to it, with their TTLs and keyspace events, so
//! watching every backend sees every key written through the proxy.
//!
//! The file is YAML, but of a fixed and simple shape (nutcracker's own
//! parser takes only this much): top-level pool names, each with
//! `key: value` settings and a `servers:` list of `- HOST:PORT:WEIGHT
//! [NAME]` items. Pools with `redis: true` count (the others are
//! memcached); `redis_db` and `redis_auth` go into each backend's URL.

use crate::percent;

/// Why a twemproxy configuration gives no backends; a line-numbered
/// variant names the line (from 1) it could not read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TwemproxyError {
    #[error("line {0}: expected a pool name, got {1:?}")]
    PoolName(usize, String),
    #[error("line {0}: a setting outside any pool")]
    OutsidePool(usize),
    #[error("line {0}: a list item outside servers:")]
    OutsideServers(usize),
    #[error("line {0}: expected key: value, got {1:?}")]
    NotKeyValue(usize, String),
    #[error("line {0}: bad redis_db {1:?}")]
    BadDb(usize, String),
    #[error("line {0}: a server is HOST:PORT:WEIGHT, not {1:?} (unix sockets are not supported)")]
    BadServer(usize, String),
    #[error("line {0}: bad port in {1:?}")]
    BadPort(usize, String),
    #[error("no pool with `redis: true` and servers (pools: {0:?})")]
    NoRedisPool(Vec<String>),
}

/// The backends' URLs (`redis://[:AUTH@]HOST:PORT/DB`), in the order of
/// the file, each once; an error names the line it could not read.
pub fn backends(yaml: &str) -> Result<Vec<String>, TwemproxyError> {
    let mut pools: Vec<Pool> = Vec::new();
    let mut in_servers = false;
    for (n, raw) in yaml.lines().enumerate() {
        let line = strip_comment(raw).trim_end();
        if line.trim().is_empty() {
            continue;
        }
        let indented = line.starts_with([' ', '\t']);
        let text = line.trim();
        if !indented {
            let Some(name) = text.strip_suffix(':') else {
                return Err(TwemproxyError::PoolName(n + 1, text.to_owned()));
            };
            pools.push(Pool::new(name.trim()));
            in_servers = false;
            continue;
        }
        let Some(pool) = pools.last_mut() else {
            return Err(TwemproxyError::OutsidePool(n + 1));
        };
        if let Some(item) = text.strip_prefix('-') {
            if !in_servers {
                return Err(TwemproxyError::OutsideServers(n + 1));
            }
            pool.servers.push(server_addr(unquote(item.trim()), n + 1)?);
            continue;
        }
        let Some((key, value)) = text.split_once(':') else {
            return Err(TwemproxyError::NotKeyValue(n + 1, text.to_owned()));
        };
        let value = unquote(value.trim());
        in_servers = key == "servers";
        match key.trim() {
            "redis" => pool.redis = value == "true",
            "redis_db" => {
                pool.db = value
                    .parse()
                    .map_err(|_| TwemproxyError::BadDb(n + 1, value.to_owned()))?
            }
            "redis_auth" => pool.auth = Some(value.to_owned()),
            _ => {}
        }
    }
    let mut urls: Vec<String> = Vec::new();
    for pool in pools.iter().filter(|p| p.redis) {
        for addr in &pool.servers {
            let auth = pool
                .auth
                .as_ref()
                .map(|a| format!(":{}@", percent::encode(a)))
                .unwrap_or_default();
            let url = format!("redis://{auth}{addr}/{}", pool.db);
            if !urls.contains(&url) {
                urls.push(url);
            }
        }
    }
    if urls.is_empty() {
        let names = pools.into_iter().map(|p| p.name).collect();
        return Err(TwemproxyError::NoRedisPool(names));
    }
    Ok(urls)
}

struct Pool {
    name: String,
    redis: bool,
    db: i64,
    auth: Option<String>,
    servers: Vec<String>,
}

impl Pool {
    fn new(name: &str) -> Pool {
        Pool {
            name: name.to_owned(),
            redis: false,
            db: 0,
            auth: None,
            servers: Vec::new(),
        }
    }
}

/// `HOST:PORT` of a `HOST:PORT:WEIGHT [NAME]` item. A unix socket path
/// (`/path:WEIGHT`) is refused: the bridge takes TCP URLs.
fn server_addr(item: &str, line: usize) -> Result<String, TwemproxyError> {
    let spec = item.split_whitespace().next().unwrap_or_default();
    let mut parts = spec.rsplitn(3, ':');
    let (Some(_weight), Some(port), Some(host)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(TwemproxyError::BadServer(line, spec.to_owned()));
    };
    if port.parse::<u16>().is_err() {
        return Err(TwemproxyError::BadPort(line, spec.to_owned()));
    }
    Ok(format!("{host}:{port}"))
}

fn strip_comment(line: &str) -> &str {
    match line.find(" #") {
        Some(i) => &line[..i],
        None if line.trim_start().starts_with('#') => "",
        None => line,
    }
}

fn unquote(value: &str) -> &str {
    let quoted = |q: char| value.len() >= 2 && value.starts_with(q) && value.ends_with(q);
    if quoted('"') || quoted('\'') {
        &value[1..value.len() - 1]
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's example file (`/usr/share/doc/nutcracker/examples`), cut
    /// down: two redis pools, a memcached one.
    const EXAMPLE: &str = "\
alpha:
  listen: 127.0.0.1:22121
  hash: fnv1a_64
  redis: true
  servers:
   - 127.0.0.1:6379:1

beta:
  listen: 127.0.0.1:22122
  hash_tag: \"{}\"   # keys hashed by their {tag}
  redis: true
  redis_db: 2
  redis_auth: s3cr#t
  servers:
   - 127.0.0.1:6380:1 server1
   - '127.0.0.1:6381:1 server2'

gamma:
  listen: 127.0.0.1:22123
  servers:
   - 127.0.0.1:11212:1
";

    #[test]
    fn redis_pools_become_backend_urls() {
        assert_eq!(
            backends(EXAMPLE).unwrap(),
            [
                "redis://127.0.0.1:6379/0",
                "redis://:s3cr%23t@127.0.0.1:6380/2",
                "redis://:s3cr%23t@127.0.0.1:6381/2",
            ]
        );
    }

    #[test]
    fn what_cannot_be_watched_is_refused_with_its_line() {
        let no_redis = backends("gamma:\n  servers:\n   - 127.0.0.1:11212:1\n").unwrap_err();
        assert_eq!(no_redis, TwemproxyError::NoRedisPool(vec!["gamma".into()]));
        assert!(no_redis.to_string().contains("redis: true"));
        let unix = "a:\n  redis: true\n  servers:\n   - /tmp/redis.sock:1\n";
        let e = backends(unix).unwrap_err();
        assert_eq!(e, TwemproxyError::BadServer(4, "/tmp/redis.sock:1".into()));
        assert!(e.to_string().starts_with("line 4"));
        assert_eq!(
            backends("  redis: true\n").unwrap_err(),
            TwemproxyError::OutsidePool(1)
        );
        assert_eq!(
            backends("a:\n   - 1.2.3.4:1:1\n").unwrap_err(),
            TwemproxyError::OutsideServers(2)
        );
    }
}
