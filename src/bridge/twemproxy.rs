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

/// The backends' URLs (`redis://[:AUTH@]HOST:PORT/DB`), in the order of
/// the file, each once; an error names the line it could not read.
pub fn backends(yaml: &str) -> Result<Vec<String>, String> {
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
                return Err(format!(
                    "line {}: expected a pool name, got {text:?}",
                    n + 1
                ));
            };
            pools.push(Pool::new(name.trim()));
            in_servers = false;
            continue;
        }
        let Some(pool) = pools.last_mut() else {
            return Err(format!("line {}: a setting outside any pool", n + 1));
        };
        if let Some(item) = text.strip_prefix('-') {
            if !in_servers {
                return Err(format!("line {}: a list item outside servers:", n + 1));
            }
            pool.servers.push(server_addr(unquote(item.trim()), n + 1)?);
            continue;
        }
        let Some((key, value)) = text.split_once(':') else {
            return Err(format!("line {}: expected key: value, got {text:?}", n + 1));
        };
        let value = unquote(value.trim());
        in_servers = key == "servers";
        match key.trim() {
            "redis" => pool.redis = value == "true",
            "redis_db" => {
                pool.db = value
                    .parse()
                    .map_err(|_| format!("line {}: bad redis_db {value:?}", n + 1))?
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
        let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "no pool with `redis: true` and servers (pools: {names:?})"
        ));
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
fn server_addr(item: &str, line: usize) -> Result<String, String> {
    let spec = item.split_whitespace().next().unwrap_or_default();
    let mut parts = spec.rsplitn(3, ':');
    let (Some(_weight), Some(port), Some(host)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!(
            "line {line}: a server is HOST:PORT:WEIGHT, not {spec:?} (unix sockets are not supported)"
        ));
    };
    if port.parse::<u16>().is_err() {
        return Err(format!("line {line}: bad port in {spec:?}"));
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
        assert!(backends("gamma:\n  servers:\n   - 127.0.0.1:11212:1\n")
            .unwrap_err()
            .contains("redis: true"));
        let unix = "a:\n  redis: true\n  servers:\n   - /tmp/redis.sock:1\n";
        assert!(backends(unix).unwrap_err().starts_with("line 4"));
        assert!(backends("  redis: true\n")
            .unwrap_err()
            .starts_with("line 1"));
        assert!(backends("a:\n   - 1.2.3.4:1:1\n").is_err());
    }
}
