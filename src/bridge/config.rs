//! The bridge's settings: the `sprout bridge` subcommand, the embedded-mode
//! flags of the server (`--redis-bridge`, `--bridge-tube`, …), and the one
//! validated [`Config`] both turn into. The flags themselves are in
//! `flags`, the Redis sources and nodes in `sources` (re-exported here).
//!
//! Validation happens here, once, so the running bridge never meets a tube
//! name the protocol rejects or a Redis URL it cannot parse.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sprout_protocol::{TubeName, MAX_TUBE_NAME_LEN};

pub use super::flags::{BridgeArgs, BridgeOptions, EmbeddedArgs};
pub use super::sources::{Front, Kind, Node, Sentinel, SourceError, Sources};

/// Prefix of the internal tube that holds one delayed timer job per key.
pub const TIMER_TUBE_PREFIX: &str = "bridge-timers.";

/// A longer lead would look at keys long before they could expire.
const MAX_PRECHECK_MS: u64 = 3_600_000;

/// Why flags make no configuration; each names the flags as the user
/// typed them.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The four source flags, as the front end spells them.
    #[error("give at least one Redis source: {}, {}, {} or {}", .0[0], .0[1], .0[2], .0[3])]
    NoSource([String; 4]),
    #[error("give at least one key pattern to match ({0})")]
    NoPattern(String),
    #[error("tube name {tube:?} is too long: at most {max} bytes")]
    TubeTooLong { tube: String, max: usize },
    #[error("invalid tube name {0:?}")]
    BadTube(String),
    #[error("{flag} must be positive, not {value}")]
    ScanInterval { flag: String, value: f64 },
    #[error("{flag} is at most {max} (an hour), not {value}", max = MAX_PRECHECK_MS)]
    Precheck { flag: String, value: u64 },
    /// The embedded bridge's first source flag given.
    #[error("{0} needs --bridge-tube")]
    NeedsTube(String),
    #[error(
        "{0} needs -b DIR (or --bridge-state-dir): the bridge's pending expiries must \
         survive a restart"
    )]
    NeedsStateDir(String),
    #[error(transparent)]
    Source(#[from] SourceError),
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
    ) -> Result<Config, ConfigError> {
        let flag = |name| front.flag(name);
        if sources.is_empty() {
            return Err(ConfigError::NoSource([
                flag("redis"),
                flag("twemproxy-config"),
                flag("redis-sentinel"),
                flag("redis-cluster"),
            ]));
        }
        if patterns.is_empty() {
            return Err(ConfigError::NoPattern(flag("match")));
        }
        let nodes = sources.nodes(front)?;
        let timer_name = format!("{TIMER_TUBE_PREFIX}{tube}");
        if timer_name.len() > MAX_TUBE_NAME_LEN {
            return Err(ConfigError::TubeTooLong {
                tube: tube.to_owned(),
                max: MAX_TUBE_NAME_LEN - TIMER_TUBE_PREFIX.len(),
            });
        }
        let valid = |name: &str| {
            TubeName::new(name.as_bytes()).ok_or_else(|| ConfigError::BadTube(name.to_owned()))
        };
        let scan_secs = options.scan_interval;
        if !(scan_secs.is_finite() && scan_secs > 0.0) {
            return Err(ConfigError::ScanInterval {
                flag: flag("scan-interval"),
                value: scan_secs,
            });
        }
        if options.precheck_ms > MAX_PRECHECK_MS {
            return Err(ConfigError::Precheck {
                flag: flag("precheck-ms"),
                value: options.precheck_ms,
            });
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
    pub fn from_args(args: &BridgeArgs) -> Result<Config, ConfigError> {
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
    ) -> Option<Result<Config, ConfigError>> {
        let sources = args.sources();
        if sources.is_empty() {
            return None;
        }
        let source = sources.first_flag(Front::Embedded);
        let Some(tube) = &args.tube else {
            return Some(Err(ConfigError::NeedsTube(source)));
        };
        let state_dir = match (&args.state_dir, binlog_dir) {
            (Some(dir), _) => dir.clone(),
            (None, Some(dir)) => dir.join("bridge"),
            (None, None) => return Some(Err(ConfigError::NeedsStateDir(source))),
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
    ) -> Result<Config, ConfigError> {
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
