//! The bridge's flags as clap reads them: `sprout bridge …`
//! ([`BridgeArgs`], its tuning in [`BridgeOptions`]) and the server's
//! embedded twins ([`EmbeddedArgs`]). Unchecked: `config` turns either
//! into the one validated `Config`.

use std::path::PathBuf;

use clap::Args;

use super::remote::RemoteArgs;
use super::sources::Sources;

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
    pub(super) fn sources(&self) -> Sources<'_> {
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
    pub(super) fn sources(&self) -> Sources<'_> {
        Sources {
            redis: &self.redis,
            twemproxy: self.twemproxy.as_deref(),
            sentinels: &self.sentinel,
            clusters: &self.redis_cluster,
        }
    }

    pub(super) fn options(&self) -> BridgeOptions {
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
