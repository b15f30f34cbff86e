//! The command line: beanstalkd's own flags, so sprout can replace it in
//! scripts, containers and client test suites unchanged.
//!
//! One deliberate difference: without `-l`, sprout listens on 127.0.0.1, not
//! on every interface. A job server has no authentication; it should face the
//! network only when asked to.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser, Subcommand};
use sprout_protocol::{DEFAULT_MAX_JOB_SIZE, MAX_JOB_SIZE_LIMIT};

use crate::bridge::config::{BridgeArgs, EmbeddedArgs};
use crate::store::Policy;

/// beanstalkd's default binlog file size (`-s`), reported by `stats`.
pub const DEFAULT_BINLOG_SIZE: u64 = 10 << 20;

#[derive(Debug, Parser)]
#[command(
    name = "sprout",
    about = "A beanstalkd-compatible job server",
    version,
    disable_version_flag = true
)]
pub struct Args {
    /// Listen on ADDR (an address or host name, or unix:PATH for a unix socket).
    #[arg(
        short = 'l',
        long = "listen",
        value_name = "ADDR",
        default_value = "127.0.0.1"
    )]
    pub listen: String,

    /// Listen on PORT.
    #[arg(
        short = 'p',
        long = "port",
        value_name = "PORT",
        default_value_t = 11300
    )]
    pub port: u16,

    /// Largest job body accepted, in bytes (at most 1 GiB; larger values are lowered to it).
    #[arg(short = 'z', long = "max-job-size", value_name = "BYTES", default_value_t = DEFAULT_MAX_JOB_SIZE as u64)]
    pub max_job_size: u64,

    /// Keep jobs durably in DIR (an embedded sled database).
    #[arg(short = 'b', long = "binlog-dir", value_name = "DIR")]
    pub binlog_dir: Option<PathBuf>,

    /// Make records durable at most MS milliseconds after they are acknowledged;
    /// 0 means no reply is sent before its record is durable.
    #[arg(
        short = 'f',
        long = "fsync-ms",
        value_name = "MS",
        default_value_t = 50
    )]
    pub fsync_ms: u64,

    /// Never force records to disk.
    #[arg(short = 'F', long = "no-fsync")]
    pub no_fsync: bool,

    /// Accepted for compatibility and reported as binlog-max-size (sled sizes its own files).
    #[arg(short = 's', long = "binlog-size", value_name = "BYTES", default_value_t = DEFAULT_BINLOG_SIZE)]
    pub binlog_size: u64,

    /// Memory for the store's page cache, in bytes (with -b).
    #[arg(long = "store-cache", value_name = "BYTES", default_value_t = 64 << 20)]
    pub store_cache: u64,

    /// Start even if the store is damaged, keeping every job that can be
    /// read and logging each one skipped (with -b).
    #[arg(long = "salvage")]
    pub salvage: bool,

    /// Accepted for compatibility: the store always compacts.
    #[arg(short = 'c', long = "compact")]
    pub compact: bool,

    /// Accepted for compatibility: the store always compacts.
    #[arg(short = 'n', long = "no-compact")]
    pub no_compact: bool,

    /// Become USER (and its group) after binding the listener.
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,

    /// More logging; repeat for more (-VV logs every command).
    #[arg(short = 'V', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,

    /// Print the version and exit.
    #[arg(short = 'v', long = "version", action = ArgAction::Version)]
    pub version: Option<bool>,

    /// The Redis TTL bridge run inside the server (`--redis-bridge …`).
    #[command(flatten, next_help_heading = "Embedded Redis TTL bridge")]
    pub bridge: EmbeddedArgs,

    /// Without a subcommand, sprout serves.
    #[command(subcommand)]
    pub command: Option<Mode>,
}

/// What the binary runs instead of the server.
#[derive(Debug, Subcommand)]
pub enum Mode {
    /// Turn Redis key expiries into jobs on a beanstalk server.
    Bridge(BridgeArgs),
}

impl Args {
    /// When store records are forced to disk: `-F`, else `-f MS`.
    pub fn policy(&self) -> Policy {
        match (self.no_fsync, self.fsync_ms) {
            (true, _) => Policy::Never,
            (false, 0) => Policy::Always,
            (false, ms) => Policy::Every(Duration::from_millis(ms)),
        }
    }

    /// `-z` as beanstalkd applies it: values above 1 GiB are lowered to 1 GiB.
    pub fn effective_max_job_size(&self) -> u32 {
        self.max_job_size.min(MAX_JOB_SIZE_LIMIT as u64) as u32
    }
}
