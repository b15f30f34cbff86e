//! Where the bridge finds its Redis nodes: the four kinds of source
//! ([`Sources`]), the [`Node`]s they come to (with their [`Kind`] and, for
//! a Sentinel master, its [`Sentinel`]s), and the [`Front`] whose flags an
//! error names.

use std::io;
use std::path::{Path, PathBuf};

use super::twemproxy::{self, TwemproxyError};

/// Why the sources do not give the nodes to watch; each names the flag as
/// the user typed it.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("bad Redis URL {url:?}: {error}")]
    BadUrl {
        url: String,
        error: redis::RedisError,
    },
    #[error("bad {flag} {url:?}: redis://HOST:PORT[,HOST:PORT]/MASTER_NAME")]
    BadSentinel { flag: String, url: String },
    #[error("cannot read {flag} {}: {error}", file.display())]
    ReadTwemproxy {
        flag: String,
        file: PathBuf,
        error: io::Error,
    },
    #[error("{flag} {}: {error}", file.display())]
    Twemproxy {
        flag: String,
        file: PathBuf,
        error: TwemproxyError,
    },
}

/// Where the bridge finds its Redis nodes: the four kinds of source both
/// front ends take (`--redis`, `--twemproxy-config`, `--redis-sentinel`,
/// `--redis-cluster`, or their embedded twins).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sources<'a> {
    pub redis: &'a [String],
    pub twemproxy: Option<&'a Path>,
    pub sentinels: &'a [String],
    pub clusters: &'a [String],
}

impl Sources<'_> {
    pub(super) fn is_empty(&self) -> bool {
        self.redis.is_empty()
            && self.twemproxy.is_none()
            && self.sentinels.is_empty()
            && self.clusters.is_empty()
    }

    /// The flag of the first source given, as `front` spells it.
    pub(super) fn first_flag(&self, front: Front) -> String {
        let name = if !self.redis.is_empty() {
            "redis"
        } else if self.twemproxy.is_some() {
            "twemproxy-config"
        } else if !self.sentinels.is_empty() {
            "redis-sentinel"
        } else {
            "redis-cluster"
        };
        front.flag(name)
    }

    /// The nodes, in the order timers have always named them by: the
    /// `--redis` URLs, the twemproxy backends, the clusters, the Sentinel
    /// masters.
    pub(super) fn nodes(&self, front: Front) -> Result<Vec<Node>, SourceError> {
        let mut urls: Vec<(String, Kind)> = self
            .redis
            .iter()
            .map(|u| (u.clone(), Kind::Standalone))
            .collect();
        if let Some(file) = self.twemproxy {
            let backends = twemproxy_backends(file, &front.flag("twemproxy-config"))?;
            urls.extend(backends.into_iter().map(|u| (u, Kind::Twemproxy)));
        }
        urls.extend(
            self.clusters
                .iter()
                .map(|u| (u.clone(), Kind::RedisCluster)),
        );
        let mut nodes = urls
            .into_iter()
            .map(|(url, kind)| {
                redis::IntoConnectionInfo::into_connection_info(url.as_str())
                    .map(|info| Node {
                        url: url.clone(),
                        info,
                        sentinel: None,
                        kind,
                    })
                    .map_err(|error| SourceError::BadUrl {
                        url: url.clone(),
                        error,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for url in self.sentinels {
            nodes.push(sentinel_node(url, &front.flag("redis-sentinel"))?);
        }
        Ok(nodes)
    }
}

/// The command line a configuration comes from, so that an error names
/// the flag as the user typed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Front {
    /// `sprout bridge --redis …`.
    Subcommand,
    /// `sprout --redis-bridge …`: each flag with a `bridge-` prefix.
    Embedded,
}

impl Front {
    /// The flag that is `--NAME` in `sprout bridge`.
    pub fn flag(self, name: &str) -> String {
        match (self, name) {
            (Front::Subcommand, _) => format!("--{name}"),
            (Front::Embedded, "redis") => "--redis-bridge".into(),
            (Front::Embedded, _) => format!("--bridge-{name}"),
        }
    }
}

/// One Redis node to watch.
#[derive(Clone, Debug)]
pub struct Node {
    pub url: String,
    /// Where it is; for a Sentinel master, only its database and
    /// credentials count (the sentinels say where it is).
    pub info: redis::ConnectionInfo,
    pub sentinel: Option<Sentinel>,
    pub kind: Kind,
}

/// Which flag a node came from: what the status lines call it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `--redis`.
    Standalone,
    /// A backend of `--twemproxy-config`.
    Twemproxy,
    /// `--redis-sentinel`: the master the sentinels name.
    Sentinel,
    /// `--redis-cluster`: the cluster found from this node.
    RedisCluster,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Standalone => "standalone",
            Kind::Twemproxy => "twemproxy backend",
            Kind::Sentinel => "Sentinel master",
            Kind::RedisCluster => "Redis Cluster",
        }
    }
}

impl Node {
    pub fn db(&self) -> i64 {
        self.info.redis.db
    }
}

/// The sentinels of one master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sentinel {
    /// `HOST:PORT` of each sentinel.
    pub sentinels: Vec<String>,
    pub master: String,
}

impl Sentinel {
    /// From `redis://HOST:PORT[,HOST:PORT…]/MASTER_NAME`.
    pub fn parse(url: &str) -> Result<Sentinel, SourceError> {
        Sentinel::parse_as(url, "--redis-sentinel")
    }

    /// [`Sentinel::parse`], an error naming the URL's flag as `flag`.
    fn parse_as(url: &str, flag: &str) -> Result<Sentinel, SourceError> {
        let bad = || SourceError::BadSentinel {
            flag: flag.to_owned(),
            url: url.to_owned(),
        };
        let rest = url.strip_prefix("redis://").ok_or_else(bad)?;
        let (hosts, master) = rest.split_once('/').ok_or_else(bad)?;
        let sentinels: Vec<String> = hosts.split(',').map(str::to_owned).collect();
        let valid = |h: &String| {
            h.rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        };
        if master.is_empty() || master.contains('/') || !sentinels.iter().all(valid) {
            return Err(bad());
        }
        Ok(Sentinel {
            sentinels,
            master: master.to_owned(),
        })
    }
}

/// The node of a `--redis-sentinel` URL (database 0), given as `flag`.
fn sentinel_node(url: &str, flag: &str) -> Result<Node, SourceError> {
    let sentinel = Sentinel::parse_as(url, flag)?;
    let any = "redis://127.0.0.1/0";
    let info = redis::IntoConnectionInfo::into_connection_info(any).map_err(|error| {
        SourceError::BadUrl {
            url: any.to_owned(),
            error,
        }
    })?;
    Ok(Node {
        url: url.to_owned(),
        info,
        sentinel: Some(sentinel),
        kind: Kind::Sentinel,
    })
}

/// The backends of the twemproxy configuration in `file`, given as `flag`.
fn twemproxy_backends(file: &Path, flag: &str) -> Result<Vec<String>, SourceError> {
    let yaml = std::fs::read_to_string(file).map_err(|error| SourceError::ReadTwemproxy {
        flag: flag.to_owned(),
        file: file.to_owned(),
        error,
    })?;
    twemproxy::backends(&yaml).map_err(|error| SourceError::Twemproxy {
        flag: flag.to_owned(),
        file: file.to_owned(),
        error,
    })
}
