//! The bridge's settings: the `sprout bridge` subcommand, the embedded-mode
//! flags of the server (`--redis-bridge`, `--bridge-tube`, …), and the one
//! validated [`Config`] both turn into.
//!
//! Validation happens here, once, so the running bridge never meets a tube
//! name the protocol rejects or a Redis URL it cannot parse.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use super::remote::RemoteArgs;
use sprout_protocol::{TubeName, MAX_TUBE_NAME_LEN};

/// Prefix of the internal tube that holds one delayed timer job per key.
pub const TIMER_TUBE_PREFIX: &str = "bridge-timers.";

/// `sprout bridge …`: a bridge process talking to a server over TCP.
#[derive(Clone, Debug, Args)]
pub struct BridgeArgs {
    /// A Redis node, as redis://HOST:PORT/DB; repeat for every node that
    /// holds keys (every backend of a proxy: keyspace events are per node).
    #[arg(long = "redis", value_name = "URL", required_unless_present_any = ["twemproxy", "sentinel", "cluster"])]
    pub redis: Vec<String>,

    /// Watch the Redis backends of this twemproxy (nutcracker) YAML
    /// configuration: every server of its `redis: true` pools.
    #[arg(long = "twemproxy-config", value_name = "FILE")]
    pub twemproxy: Option<PathBuf>,

    /// A master watched by Redis Sentinel, as
    /// redis://SENTINEL:PORT[,SENTINEL:PORT…]/MASTER_NAME: the bridge asks
    /// the sentinels where it is and follows its failovers; repeatable.
    #[arg(long = "redis-sentinel", value_name = "URL")]
    pub sentinel: Vec<String>,

    /// A Redis Cluster, as redis://ANY_NODE:PORT: the bridge finds its
    /// masters and follows reshardings and failovers; repeatable (one per
    /// cluster).
    #[arg(long = "redis-cluster", value_name = "URL")]
    pub cluster: Vec<String>,

    /// The beanstalk server, as HOST:PORT.
    #[arg(
        long = "server",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:11300"
    )]
    pub server: String,

    /// The tube that receives one job per expired key.
    #[arg(long = "tube", value_name = "TUBE")]
    pub tube: String,

    /// A glob-style Redis key pattern (as SCAN MATCH and PSUBSCRIBE read it); repeatable.
    #[arg(long = "match", value_name = "PATTERN", required = true)]
    pub patterns: Vec<String>,

    /// Where the bridge keeps its small durable index (the log file index.log).
    #[arg(long = "state-dir", value_name = "DIR")]
    pub state_dir: PathBuf,

    #[command(flatten)]
    pub options: BridgeOptions,

    /// Serve the bridge's Prometheus metrics on http://ADDR/metrics
    /// (HOST:PORT): its keys and the punctuality of its deliveries.
    #[arg(long = "metrics", value_name = "ADDR")]
    pub metrics: Option<String>,

    /// TLS and the token for a secured --server.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

impl BridgeArgs {
    fn sources(&self) -> Sources<'_> {
        Sources {
            redis: &self.redis,
            twemproxy: self.twemproxy.as_deref(),
            sentinels: &self.sentinel,
            clusters: &self.cluster,
        }
    }
}

/// Defaults the subcommand and embedded mode share.
const DEFAULT_SCAN_INTERVAL: f64 = 60.0;
const DEFAULT_PRI: u32 = 1024;
const DEFAULT_TTR: u32 = 60;
/// A longer lead would look at keys long before they could expire.
const MAX_PRECHECK_MS: u64 = 3_600_000;

/// The tuning flags of `sprout bridge`.
#[derive(Clone, Debug, Args)]
pub struct BridgeOptions {
    /// Learn TTLs by SCAN alone (for proxies without pub/sub: Codis, twemproxy).
    #[arg(long = "no-pubsub")]
    pub no_pubsub: bool,

    /// Seconds between two SCAN reconciliations.
    #[arg(long = "scan-interval", value_name = "SECS", default_value_t = DEFAULT_SCAN_INTERVAL)]
    pub scan_interval: f64,

    /// Capture each key's value while it lives and deliver it with the job.
    #[arg(long = "with-value")]
    pub with_value: bool,

    /// At its deadline, delete a key Redis has not removed yet (unless its
    /// expiry was extended meanwhile).
    #[arg(long = "delete-on-fire")]
    pub delete_on_fire: bool,

    /// Look at each key this many ms before its deadline too: a key gone
    /// then was deleted, and is not delivered (for deletions no event
    /// announces, e.g. with --no-pubsub; 0: off).
    #[arg(long = "precheck-ms", value_name = "MS", default_value_t = 0)]
    pub precheck_ms: u64,

    /// Priority of delivered jobs.
    #[arg(long = "pri", value_name = "N", default_value_t = DEFAULT_PRI)]
    pub pri: u32,

    /// TTR of delivered jobs, in seconds.
    #[arg(long = "ttr", value_name = "SECS", default_value_t = DEFAULT_TTR)]
    pub ttr: u32,
}

/// The clap group of the embedded bridge's sources: every other embedded
/// flag requires one of them.
const EMBEDDED_SOURCE: &str = "bridge_source";

/// The server's embedded-mode flags: `sprout -b DIR --redis-bridge URL
/// --bridge-tube TUBE --bridge-match PATTERN` runs the bridge in-process.
/// Each is the subcommand's flag with a `bridge-` prefix, so none can be
/// mistaken for a server setting; any of the four sources (`--redis-bridge`,
/// `--bridge-twemproxy-config`, `--bridge-redis-sentinel`,
/// `--bridge-redis-cluster`) turns the bridge on, and the other flags need
/// one of them.
#[derive(Clone, Debug, Args)]
#[command(group(
    clap::ArgGroup::new(EMBEDDED_SOURCE)
        .args(["redis", "twemproxy", "sentinel", "redis_cluster"])
        .multiple(true)
))]
pub struct EmbeddedArgs {
    /// Run the Redis TTL bridge inside the server, watching this Redis node;
    /// repeatable (see `sprout bridge --redis`).
    #[arg(long = "redis-bridge", value_name = "URL")]
    pub redis: Vec<String>,

    /// Run the bridge inside the server, watching the backends of this
    /// twemproxy YAML (see `sprout bridge --twemproxy-config`).
    #[arg(long = "bridge-twemproxy-config", value_name = "FILE")]
    pub twemproxy: Option<PathBuf>,

    /// Run the bridge inside the server, following this Sentinel-watched
    /// master; repeatable (see `sprout bridge --redis-sentinel`).
    #[arg(long = "bridge-redis-sentinel", value_name = "URL")]
    pub sentinel: Vec<String>,

    /// Run the bridge inside the server, watching this Redis Cluster;
    /// repeatable (see `sprout bridge --redis-cluster`).
    #[arg(long = "bridge-redis-cluster", value_name = "URL")]
    pub redis_cluster: Vec<String>,

    /// The tube the embedded bridge delivers expiries to.
    #[arg(long = "bridge-tube", value_name = "TUBE", requires = EMBEDDED_SOURCE)]
    pub tube: Option<String>,

    /// A key pattern for the embedded bridge; repeatable.
    #[arg(long = "bridge-match", value_name = "PATTERN", requires = EMBEDDED_SOURCE)]
    pub patterns: Vec<String>,

    /// The embedded bridge's index (default: DIR/bridge with -b).
    #[arg(long = "bridge-state-dir", value_name = "DIR", requires = EMBEDDED_SOURCE)]
    pub state_dir: Option<PathBuf>,

    /// See `sprout bridge --no-pubsub`.
    #[arg(long = "bridge-no-pubsub", requires = EMBEDDED_SOURCE)]
    pub no_pubsub: bool,

    /// See `sprout bridge --scan-interval`.
    #[arg(long = "bridge-scan-interval", value_name = "SECS", requires = EMBEDDED_SOURCE, default_value_t = DEFAULT_SCAN_INTERVAL)]
    pub scan_interval: f64,

    /// See `sprout bridge --with-value`.
    #[arg(long = "bridge-with-value", requires = EMBEDDED_SOURCE)]
    pub with_value: bool,

    /// See `sprout bridge --delete-on-fire`.
    #[arg(long = "bridge-delete-on-fire", requires = EMBEDDED_SOURCE)]
    pub delete_on_fire: bool,

    /// See `sprout bridge --precheck-ms`.
    #[arg(
        long = "bridge-precheck-ms",
        value_name = "MS",
        requires = EMBEDDED_SOURCE,
        default_value_t = 0
    )]
    pub precheck_ms: u64,

    /// See `sprout bridge --pri`.
    #[arg(long = "bridge-pri", value_name = "N", requires = EMBEDDED_SOURCE, default_value_t = DEFAULT_PRI)]
    pub pri: u32,

    /// See `sprout bridge --ttr`.
    #[arg(long = "bridge-ttr", value_name = "SECS", requires = EMBEDDED_SOURCE, default_value_t = DEFAULT_TTR)]
    pub ttr: u32,
}

impl EmbeddedArgs {
    fn sources(&self) -> Sources<'_> {
        Sources {
            redis: &self.redis,
            twemproxy: self.twemproxy.as_deref(),
            sentinels: &self.sentinel,
            clusters: &self.redis_cluster,
        }
    }

    fn options(&self) -> BridgeOptions {
        BridgeOptions {
            no_pubsub: self.no_pubsub,
            scan_interval: self.scan_interval,
            with_value: self.with_value,
            delete_on_fire: self.delete_on_fire,
            precheck_ms: self.precheck_ms,
            pri: self.pri,
            ttr: self.ttr,
        }
    }
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
    fn is_empty(&self) -> bool {
        self.redis.is_empty()
            && self.twemproxy.is_none()
            && self.sentinels.is_empty()
            && self.clusters.is_empty()
    }

    /// The flag of the first source given, as `front` spells it.
    fn first_flag(&self, front: Front) -> String {
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
    fn nodes(&self, front: Front) -> Result<Vec<Node>, String> {
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
                    .map_err(|e| format!("bad Redis URL {url:?}: {e}"))
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
    pub fn parse(url: &str) -> Result<Sentinel, String> {
        let bad =
            || format!("bad --redis-sentinel {url:?}: redis://HOST:PORT[,HOST:PORT]/MASTER_NAME");
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

/// A validated bridge configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub nodes: Vec<Node>,
    pub tube: TubeName,
    pub timer_tube: TubeName,
    pub patterns: Vec<String>,
    pub state_dir: PathBuf,
    pub pubsub: bool,
    pub scan_interval: Duration,
    pub with_value: bool,
    pub delete_on_fire: bool,
    /// How long before each deadline a key is looked at once more (zero:
    /// never).
    pub precheck: Duration,
    pub pri: u32,
    pub ttr: Duration,
}

impl Config {
    /// Checks and assembles the parts every front end supplies: the one
    /// way from flags to a configuration; errors name `front`'s flags.
    pub fn new(
        sources: Sources<'_>,
        tube: &str,
        patterns: &[String],
        state_dir: PathBuf,
        options: &BridgeOptions,
        front: Front,
    ) -> Result<Config, String> {
        let flag = |name| front.flag(name);
        if sources.is_empty() {
            return Err(format!(
                "give at least one Redis source: {}, {}, {} or {}",
                flag("redis"),
                flag("twemproxy-config"),
                flag("redis-sentinel"),
                flag("redis-cluster")
            ));
        }
        if patterns.is_empty() {
            return Err(format!(
                "give at least one key pattern to match ({})",
                flag("match")
            ));
        }
        let nodes = sources.nodes(front)?;
        let timer_name = format!("{TIMER_TUBE_PREFIX}{tube}");
        if timer_name.len() > MAX_TUBE_NAME_LEN {
            return Err(format!(
                "tube name {tube:?} is too long: at most {} bytes",
                MAX_TUBE_NAME_LEN - TIMER_TUBE_PREFIX.len()
            ));
        }
        let valid = |name: &str| {
            TubeName::new(name.as_bytes()).ok_or_else(|| format!("invalid tube name {name:?}"))
        };
        let scan_secs = options.scan_interval;
        if !(scan_secs.is_finite() && scan_secs > 0.0) {
            return Err(format!(
                "{} must be positive, not {scan_secs}",
                flag("scan-interval")
            ));
        }
        if options.precheck_ms > MAX_PRECHECK_MS {
            return Err(format!(
                "{} is at most {MAX_PRECHECK_MS} (an hour), not {}",
                flag("precheck-ms"),
                options.precheck_ms
            ));
        }
        Ok(Config {
            nodes,
            tube: valid(tube)?,
            timer_tube: valid(&timer_name)?,
            patterns: patterns.to_vec(),
            state_dir,
            pubsub: !options.no_pubsub,
            scan_interval: Duration::from_secs_f64(scan_secs),
            with_value: options.with_value,
            delete_on_fire: options.delete_on_fire,
            precheck: Duration::from_millis(options.precheck_ms),
            pri: options.pri,
            ttr: Duration::from_secs(options.ttr.max(1).into()),
        })
    }

    /// From `sprout bridge …`.
    pub fn from_args(args: &BridgeArgs) -> Result<Config, String> {
        Config::new(
            args.sources(),
            &args.tube,
            &args.patterns,
            args.state_dir.clone(),
            &args.options,
            Front::Subcommand,
        )
    }

    /// From the server's embedded flags; `None` when none of its sources
    /// (`--redis-bridge`, `--bridge-twemproxy-config`,
    /// `--bridge-redis-sentinel`, `--bridge-redis-cluster`) was given.
    /// `binlog_dir` is the server's `-b`, the default home of the index.
    pub fn from_embedded(
        args: &EmbeddedArgs,
        binlog_dir: Option<&Path>,
    ) -> Option<Result<Config, String>> {
        let sources = args.sources();
        if sources.is_empty() {
            return None;
        }
        let source = sources.first_flag(Front::Embedded);
        let Some(tube) = &args.tube else {
            return Some(Err(format!("{source} needs --bridge-tube")));
        };
        let state_dir = match (&args.state_dir, binlog_dir) {
            (Some(dir), _) => dir.clone(),
            (None, Some(dir)) => dir.join("bridge"),
            (None, None) => {
                return Some(Err(format!(
                    "{source} needs -b DIR (or --bridge-state-dir): the bridge's \
                     pending expiries must survive a restart"
                )))
            }
        };
        Some(Config::new(
            sources,
            tube,
            &args.patterns,
            state_dir,
            &args.options(),
            Front::Embedded,
        ))
    }
}

/// The node of a `--redis-sentinel` URL (database 0), given as `flag`.
fn sentinel_node(url: &str, flag: &str) -> Result<Node, String> {
    // Sentinel::parse names the subcommand's flag.
    let sentinel = Sentinel::parse(url).map_err(|e| e.replacen("--redis-sentinel", flag, 1))?;
    let info = redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1/0")
        .map_err(|e| e.to_string())?;
    Ok(Node {
        url: url.to_owned(),
        info,
        sentinel: Some(sentinel),
        kind: Kind::Sentinel,
    })
}

/// The backends of the twemproxy configuration in `file`, given as `flag`.
fn twemproxy_backends(file: &Path, flag: &str) -> Result<Vec<String>, String> {
    let yaml = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {flag} {}: {e}", file.display()))?;
    super::twemproxy::backends(&yaml).map_err(|e| format!("{flag} {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> BridgeOptions {
        BridgeOptions {
            no_pubsub: false,
            scan_interval: 60.0,
            with_value: false,
            delete_on_fire: false,
            precheck_ms: 0,
            pri: 1024,
            ttr: 60,
        }
    }

    /// `Config::new` on plain `--redis` URLs.
    fn on_urls(
        urls: &[String],
        tube: &str,
        pats: &[String],
        options: &BridgeOptions,
    ) -> Result<Config, String> {
        let sources = Sources {
            redis: urls,
            ..Sources::default()
        };
        Config::new(sources, tube, pats, "x".into(), options, Front::Subcommand)
    }

    #[test]
    fn timer_tube_is_derived_and_bounded() {
        let urls = vec!["redis://127.0.0.1:6379/3".to_string()];
        let pats = vec!["a:*".to_string()];
        let c = on_urls(&urls, "offline", &pats, &options()).unwrap();
        assert_eq!(c.timer_tube.as_str(), "bridge-timers.offline");
        assert_eq!(c.nodes[0].db(), 3);
        let long = "t".repeat(190);
        assert!(on_urls(&urls, &long, &pats, &options()).is_err());
        assert!(on_urls(&urls, "bad tube", &pats, &options()).is_err());
        assert!(on_urls(&["nope://".into()], "t", &pats, &options()).is_err());
        let precheck = |ms| BridgeOptions {
            precheck_ms: ms,
            ..options()
        };
        let c = on_urls(&urls, "t", &pats, &precheck(500)).unwrap();
        assert_eq!(c.precheck, Duration::from_millis(500));
        assert!(on_urls(&urls, "t", &pats, &precheck(3_600_001)).is_err());
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_master() {
        let s = Sentinel::parse("redis://10.0.0.1:26379,10.0.0.2:26380/orders").unwrap();
        assert_eq!(s.sentinels, ["10.0.0.1:26379", "10.0.0.2:26380"]);
        assert_eq!(s.master, "orders");
        for bad in [
            "redis://10.0.0.1:26379",
            "redis://10.0.0.1:26379/",
            "redis://10.0.0.1/orders",
            "sentinel://10.0.0.1:26379/orders",
            "redis://10.0.0.1:26379/a/b",
        ] {
            assert!(Sentinel::parse(bad).is_err(), "{bad}");
        }
    }
}
