//! The bridge's settings: the `sprout bridge` subcommand, the embedded-mode
//! flags of the server (`--redis-bridge`, `--bridge-tube`, …), and the one
//! validated [`Config`] both turn into.
//!
//! Validation happens here, once, so the running bridge never meets a tube
//! name the protocol rejects or a Redis URL it cannot parse.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
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

/// The server's embedded-mode flags: `sprout -b DIR --redis-bridge URL
/// --bridge-tube TUBE --bridge-match PATTERN` runs the bridge in-process.
/// Each is the subcommand's flag with a `bridge-` prefix, so none can be
/// mistaken for a server setting.
#[derive(Clone, Debug, Args)]
pub struct EmbeddedArgs {
    /// Run the Redis TTL bridge inside the server, watching this Redis node
    /// (repeat for every master of a cluster).
    #[arg(long = "redis-bridge", value_name = "URL")]
    pub redis: Vec<String>,

    /// The tube the embedded bridge delivers expiries to.
    #[arg(long = "bridge-tube", value_name = "TUBE", requires = "redis")]
    pub tube: Option<String>,

    /// A key pattern for the embedded bridge; repeatable.
    #[arg(long = "bridge-match", value_name = "PATTERN", requires = "redis")]
    pub patterns: Vec<String>,

    /// The embedded bridge's index (default: DIR/bridge with -b).
    #[arg(long = "bridge-state-dir", value_name = "DIR", requires = "redis")]
    pub state_dir: Option<PathBuf>,

    /// See `sprout bridge --no-pubsub`.
    #[arg(long = "bridge-no-pubsub", requires = "redis")]
    pub no_pubsub: bool,

    /// See `sprout bridge --scan-interval`.
    #[arg(long = "bridge-scan-interval", value_name = "SECS", requires = "redis", default_value_t = DEFAULT_SCAN_INTERVAL)]
    pub scan_interval: f64,

    /// See `sprout bridge --with-value`.
    #[arg(long = "bridge-with-value", requires = "redis")]
    pub with_value: bool,

    /// See `sprout bridge --delete-on-fire`.
    #[arg(long = "bridge-delete-on-fire", requires = "redis")]
    pub delete_on_fire: bool,

    /// See `sprout bridge --precheck-ms`.
    #[arg(
        long = "bridge-precheck-ms",
        value_name = "MS",
        requires = "redis",
        default_value_t = 0
    )]
    pub precheck_ms: u64,

    /// See `sprout bridge --pri`.
    #[arg(long = "bridge-pri", value_name = "N", requires = "redis", default_value_t = DEFAULT_PRI)]
    pub pri: u32,

    /// See `sprout bridge --ttr`.
    #[arg(long = "bridge-ttr", value_name = "SECS", requires = "redis", default_value_t = DEFAULT_TTR)]
    pub ttr: u32,
}

impl EmbeddedArgs {
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

/// One Redis node to watch.
#[derive(Clone, Debug)]
pub struct Node {
    pub url: String,
    /// Where it is; for a Sentinel master, only its database and
    /// credentials count (the sentinels say where it is).
    pub info: redis::ConnectionInfo,
    pub sentinel: Option<super::sentinel::Sentinel>,
    /// A Redis Cluster, found from this node.
    pub cluster: bool,
}

impl Node {
    pub fn db(&self) -> i64 {
        self.info.redis.db
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
    /// Checks and assembles the parts every front end supplies.
    pub fn new(
        urls: &[String],
        tube: &str,
        patterns: &[String],
        state_dir: PathBuf,
        options: &BridgeOptions,
    ) -> Result<Config, String> {
        if urls.is_empty() {
            return Err("give at least one Redis URL".into());
        }
        if patterns.is_empty() {
            return Err("give at least one key pattern to match".into());
        }
        let nodes = urls
            .iter()
            .map(|url| {
                redis::IntoConnectionInfo::into_connection_info(url.as_str())
                    .map(|info| Node {
                        url: url.clone(),
                        info,
                        sentinel: None,
                        cluster: false,
                    })
                    .map_err(|e| format!("bad Redis URL {url:?}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
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
            return Err(format!("--scan-interval must be positive, not {scan_secs}"));
        }
        if options.precheck_ms > MAX_PRECHECK_MS {
            return Err(format!(
                "--precheck-ms is at most {MAX_PRECHECK_MS} (an hour), not {}",
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
        let mut urls = args.redis.clone();
        if let Some(file) = &args.twemproxy {
            urls.extend(twemproxy_backends(file)?);
        }
        let clusters = args.cluster.len();
        urls.extend(args.cluster.iter().cloned());
        let sentinels = args
            .sentinel
            .iter()
            .map(|url| sentinel_node(url))
            .collect::<Result<Vec<_>, _>>()?;
        // Config::new checks the URLs; Sentinel masters join afterwards.
        let placeholder = ["redis://127.0.0.1/0".to_string()];
        let mut config = Config::new(
            if urls.is_empty() { &placeholder } else { &urls },
            &args.tube,
            &args.patterns,
            args.state_dir.clone(),
            &args.options,
        )?;
        if urls.is_empty() {
            config.nodes.clear();
        }
        let first_cluster = config.nodes.len() - clusters;
        for node in &mut config.nodes[first_cluster..] {
            node.cluster = true;
        }
        config.nodes.extend(sentinels);
        Ok(config)
    }

    /// From the server's embedded flags; `None` when no `--redis-bridge`
    /// was given. `binlog_dir` is the server's `-b`, the default home of
    /// the index.
    pub fn from_embedded(
        args: &EmbeddedArgs,
        binlog_dir: Option<&std::path::Path>,
    ) -> Option<Result<Config, String>> {
        if args.redis.is_empty() {
            return None;
        }
        let Some(tube) = &args.tube else {
            return Some(Err("--redis-bridge needs --bridge-tube".into()));
        };
        let state_dir = match (&args.state_dir, binlog_dir) {
            (Some(dir), _) => dir.clone(),
            (None, Some(dir)) => dir.join("bridge"),
            (None, None) => {
                return Some(Err(
                    "--redis-bridge needs -b DIR (or --bridge-state-dir): the bridge's \
                     pending expiries must survive a restart"
                        .into(),
                ))
            }
        };
        Some(Config::new(
            &args.redis,
            tube,
            &args.patterns,
            state_dir,
            &args.options(),
        ))
    }
}

/// The node of a `--redis-sentinel` URL (database 0).
fn sentinel_node(url: &str) -> Result<Node, String> {
    let sentinel = super::sentinel::Sentinel::parse(url)?;
    let info = redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1/0")
        .map_err(|e| e.to_string())?;
    Ok(Node {
        url: url.to_owned(),
        info,
        sentinel: Some(sentinel),
        cluster: false,
    })
}

/// The backends of the twemproxy configuration in `file`.
fn twemproxy_backends(file: &std::path::Path) -> Result<Vec<String>, String> {
    let yaml = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read --twemproxy-config {}: {e}", file.display()))?;
    super::twemproxy::backends(&yaml)
        .map_err(|e| format!("--twemproxy-config {}: {e}", file.display()))
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

    #[test]
    fn timer_tube_is_derived_and_bounded() {
        let urls = vec!["redis://127.0.0.1:6379/3".to_string()];
        let pats = vec!["a:*".to_string()];
        let c = Config::new(&urls, "offline", &pats, "x".into(), &options()).unwrap();
        assert_eq!(c.timer_tube.as_str(), "bridge-timers.offline");
        assert_eq!(c.nodes[0].db(), 3);
        let long = "t".repeat(190);
        assert!(Config::new(&urls, &long, &pats, "x".into(), &options()).is_err());
        assert!(Config::new(&urls, "bad tube", &pats, "x".into(), &options()).is_err());
        assert!(Config::new(&["nope://".into()], "t", &pats, "x".into(), &options()).is_err());
        let precheck = |ms| BridgeOptions {
            precheck_ms: ms,
            ..options()
        };
        let c = Config::new(&urls, "t", &pats, "x".into(), &precheck(500)).unwrap();
        assert_eq!(c.precheck, Duration::from_millis(500));
        assert!(Config::new(&urls, "t", &pats, "x".into(), &precheck(3_600_001)).is_err());
    }
}
