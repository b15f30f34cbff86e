//! The command line: beanstalkd's own flags, so sprout can replace it in
//! scripts, containers and client test suites unchanged.
//!
//! Deliberate differences, none of which changes what a beanstalkd command
//! line means:
//! - without `-l`, sprout listens on 127.0.0.1, not on every interface. A job
//!   server without `--auth` has no authentication; it should face the network only when asked;
//! - `-l` may be given more than once: sprout listens on every address (all TCP
//!   ones on `-p`), where beanstalkd keeps the last;
//! - with `--tls-listen` and neither `-l` nor `-p`, sprout opens no plain
//!   listener: whoever asks for TLS alone should not find the same jobs in
//!   clear text on 127.0.0.1:11300 (give `-l` to serve both);
//! - every flag can also be set by an environment variable, `SPROUT_` and its
//!   long name (`--binlog-dir` is `SPROUT_BINLOG_DIR`; a subcommand's flags
//!   add its name: `sprout bridge --redis` is `SPROUT_BRIDGE_REDIS`). A flag on
//!   the command line wins over its variable; an empty variable counts as
//!   unset; a repeatable flag's variable holds its values separated by
//!   whitespace; a switch's variable reads `1`/`0`, `true`/`false`, `yes`/`no`
//!   or `on`/`off`. [`parse`] applies the rule to every flag, so none can be
//!   declared without its variable.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::parser::ValueSource;
use clap::{
    Arg, ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches, Parser, Subcommand,
};
use sprout_protocol::{DEFAULT_MAX_JOB_SIZE, MAX_JOB_SIZE_LIMIT};

use crate::admin::AdminArgs;
use crate::auth::AuthArgs;
use crate::bridge::config::{BridgeArgs, EmbeddedArgs};
use crate::cluster::ClusterArgs;
use crate::http::HttpArgs;
use crate::store::{Policy, DEFAULT_BODY_CACHE};
use crate::tls::TlsArgs;

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
    /// Listen on ADDR (an address or host name, or unix:PATH for a unix
    /// socket); repeat to listen on several. Ignored when systemd passes
    /// listening sockets (socket activation).
    #[arg(
        short = 'l',
        long = "listen",
        value_name = "ADDR",
        default_value = "127.0.0.1"
    )]
    pub listen: Vec<String>,

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

    /// The most bytes of job bodies held at once: a put over it answers
    /// OUT_OF_MEMORY (tuber's flag; unlimited when absent).
    #[arg(long = "max-jobs-size", value_name = "BYTES")]
    pub max_jobs_size: Option<u64>,

    /// Keep jobs durably in DIR (an embedded sled database). With --cluster,
    /// where this node keeps its copy of the cluster's jobs (bodies off RAM).
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

    /// The size of each journal file (with -b; reported as binlog-max-size).
    #[arg(short = 's', long = "binlog-size", value_name = "BYTES", default_value_t = DEFAULT_BINLOG_SIZE)]
    pub binlog_size: u64,

    /// Memory for the store's page cache, in bytes (with -b).
    #[arg(long = "store-cache", value_name = "BYTES", default_value_t = 4 << 20)]
    pub store_cache: u64,

    /// Memory for recently used job bodies, in bytes (with -b): bodies the
    /// server keeps on disk only are read back through it.
    #[arg(long = "body-cache", value_name = "BYTES", default_value_t = DEFAULT_BODY_CACHE)]
    pub body_cache: u64,

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

    /// More logging on stderr: by default warnings, errors and one line
    /// each for the addresses listened on, recovery and shutdown; -V adds
    /// the rest of startup and each connection's open and close, -VV every
    /// command (RUST_LOG, if set, overrides both).
    #[arg(short = 'V', long = "verbose", action = ArgAction::Count, global = true)]
    pub verbose: u8,

    /// How log lines are written: text for people, json (one object a line) for collectors.
    #[arg(long = "log-format", value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Print the version and exit.
    #[arg(short = 'v', long = "version", action = ArgAction::Version)]
    pub version: Option<bool>,

    /// Cluster mode on NATS JetStream (`--cluster …`).
    #[command(flatten, next_help_heading = "Cluster")]
    pub cluster: ClusterArgs,

    /// The Redis TTL bridge run inside the server (`--redis-bridge …`).
    #[command(flatten, next_help_heading = "Embedded Redis TTL bridge")]
    pub bridge: EmbeddedArgs,

    /// Authentication and per-tube permissions (`--auth FILE`).
    #[command(flatten, next_help_heading = "Authentication")]
    pub auth: AuthArgs,

    /// TLS on the beanstalk port (`--tls-listen …`).
    #[command(flatten, next_help_heading = "TLS")]
    pub tls: TlsArgs,

    /// The HTTP side port (`--http …`).
    #[command(
        flatten,
        next_help_heading = "HTTP: metrics, health, admin API, dashboard"
    )]
    pub http: HttpArgs,

    /// Without a subcommand, sprout serves.
    #[command(subcommand)]
    pub command: Option<Mode>,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The prefix of every flag's environment variable.
pub const ENV_PREFIX: &str = "SPROUT_";

/// Reads the command line and the `SPROUT_*` environment (see the module
/// doc); on a bad flag, prints the error and exits as clap does.
pub fn parse() -> Args {
    parse_from(std::env::args_os().collect())
}

fn parse_from(argv: Vec<OsString>) -> Args {
    let matches = command().get_matches_from(argv.clone());
    // clap hands a repeatable flag's variable over as one value: give its
    // words back as flags and parse again (those now count as given).
    let argv = with_env_lists(argv, &command(), &matches);
    let matches = match argv {
        Some(argv) => command().get_matches_from(argv),
        None => matches,
    };
    let mut args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let given = |id| {
        matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    if !args.tls.listen.is_empty() && !given("listen") && !given("port") {
        args.listen.clear();
    }
    args
}

/// The command sprout parses: [`Args`] with a variable on every flag.
pub fn command() -> Command {
    with_env(Args::command(), ENV_PREFIX)
}

fn with_env(cmd: Command, prefix: &str) -> Command {
    cmd.mut_args(|arg| {
        let Some(name) = env_name(prefix, &arg) else {
            return arg;
        };
        let arg = match arg.get_action() {
            ArgAction::SetTrue => arg.value_parser(BoolishValueParser::new()),
            _ => arg,
        };
        // Arg::env reads the variable now: an empty one is left unset.
        match std::env::var_os(&name) {
            Some(value) if value.is_empty() => arg,
            _ => arg.env(name).hide_env_values(true),
        }
    })
    .mut_subcommands(|sub| {
        let prefix = format!("{prefix}{}_", upper_snake(sub.get_name()));
        with_env(sub, &prefix)
    })
}

/// The variable that sets `arg`: the prefix and the long name, or none for
/// `-h` and `-v`.
fn env_name(prefix: &str, arg: &Arg) -> Option<String> {
    match arg.get_action() {
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version => None,
        _ => Some(format!("{prefix}{}", upper_snake(arg.get_long()?))),
    }
}

fn upper_snake(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

/// `argv` with the words of every repeatable flag's variable that was used
/// given as flags (top-level ones first, a subcommand's at the end), or
/// None when no such variable was used.
fn with_env_lists(
    argv: Vec<OsString>,
    cmd: &Command,
    matches: &ArgMatches,
) -> Option<Vec<OsString>> {
    let mut top = env_list_flags(cmd, matches);
    let mut sub = Vec::new();
    if let Some((name, sub_matches)) = matches.subcommand() {
        if let Some(sub_cmd) = cmd.find_subcommand(name) {
            sub = env_list_flags(sub_cmd, sub_matches);
        }
    }
    if top.is_empty() && sub.is_empty() {
        return None;
    }
    let mut argv = argv.into_iter();
    let mut out: Vec<OsString> = argv.next().into_iter().collect();
    out.append(&mut top);
    out.extend(argv);
    out.append(&mut sub);
    Some(out)
}

/// `--long=WORD` for each word of each repeatable flag of `cmd` whose value
/// came from its variable.
fn env_list_flags(cmd: &Command, matches: &ArgMatches) -> Vec<OsString> {
    let mut flags = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if !matches!(arg.get_action(), ArgAction::Append)
            || matches.value_source(id) != Some(ValueSource::EnvVariable)
        {
            continue;
        }
        let (Some(long), Some(value)) = (arg.get_long(), arg.get_env().and_then(std::env::var_os))
        else {
            continue;
        };
        for word in split_list(&value) {
            let mut flag = OsString::from(format!("--{long}="));
            flag.push(word);
            flags.push(flag);
        }
    }
    flags
}

/// The values a repeatable flag's variable holds: its words, split at ASCII
/// whitespace (bytes, so a path that is not UTF-8 survives).
fn split_list(value: &OsStr) -> Vec<&OsStr> {
    value
        .as_bytes()
        .split(u8::is_ascii_whitespace)
        .filter(|word| !word.is_empty())
        .map(OsStr::from_bytes)
        .collect()
}

/// What the binary runs instead of the server.
#[derive(Debug, Subcommand)]
pub enum Mode {
    /// Turn Redis key expiries into jobs on a beanstalk server.
    Bridge(BridgeArgs),
    /// See and steer a server started with --http (its admin API).
    Admin(AdminArgs),
    /// Read a token on stdin and print the hash an --auth policy lists
    /// it by (sha256:<hex>).
    HashToken,
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

#[cfg(test)]
#[path = "cli_bridge_tests.rs"]
mod bridge_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn every_flag_has_its_variable() {
        fn check(cmd: &Command, prefix: &str) {
            let mut seen = std::collections::HashSet::new();
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                match arg.get_action() {
                    ArgAction::Help | ArgAction::Version => assert_eq!(arg.get_env(), None),
                    _ => {
                        let env = arg
                            .get_env()
                            .unwrap_or_else(|| panic!("--{long}: no variable"));
                        let env = env.to_str().unwrap();
                        assert!(env.starts_with(prefix), "--{long}: {env}");
                        assert!(seen.insert(env.to_owned()), "{env} twice");
                    }
                }
            }
            for sub in cmd.get_subcommands() {
                check(sub, &format!("{prefix}{}_", upper_snake(sub.get_name())));
            }
        }
        check(&command(), ENV_PREFIX);
    }

    #[test]
    fn variable_names() {
        let cmd = command();
        let env = |cmd: &Command, id: &str| {
            let arg = cmd.get_arguments().find(|a| a.get_id() == id).unwrap();
            arg.get_env().map(|e| e.to_str().unwrap().to_owned())
        };
        for (id, want) in [
            ("listen", Some("SPROUT_LISTEN")),
            ("port", Some("SPROUT_PORT")),
            ("binlog_dir", Some("SPROUT_BINLOG_DIR")),
            ("fsync_ms", Some("SPROUT_FSYNC_MS")),
            ("no_fsync", Some("SPROUT_NO_FSYNC")),
            ("verbose", Some("SPROUT_VERBOSE")),
            ("version", None),
        ] {
            assert_eq!(env(&cmd, id).as_deref(), want, "{id}");
        }
        let bridge = cmd.find_subcommand("bridge").unwrap();
        assert_eq!(env(bridge, "redis").as_deref(), Some("SPROUT_BRIDGE_REDIS"));
        assert_eq!(
            env(bridge, "state_dir").as_deref(),
            Some("SPROUT_BRIDGE_STATE_DIR")
        );
    }

    #[test]
    fn tls_alone_opens_no_plain_listener() {
        let parse = |line: &str| {
            let argv = line.split_whitespace().map(OsString::from).collect();
            parse_from(argv).listen
        };
        let tls = "--tls-listen 127.0.0.1:11443";
        for (line, want) in [
            ("sprout".to_string(), &["127.0.0.1"][..]),
            (format!("sprout {tls}"), &[]),
            (format!("sprout {tls} -l 0.0.0.0"), &["0.0.0.0"]),
            (format!("sprout {tls} -p 11300"), &["127.0.0.1"]),
            (format!("sprout -l 127.0.0.1 {tls}"), &["127.0.0.1"]),
        ] {
            assert_eq!(parse(&line), want, "{line}");
        }
    }

    #[test]
    fn list_variables_split_at_whitespace() {
        for (value, want) in [
            ("127.0.0.1", &["127.0.0.1"][..]),
            (
                "127.0.0.1 unix:/run/sprout/sock",
                &["127.0.0.1", "unix:/run/sprout/sock"],
            ),
            ("  a\tb\n c  ", &["a", "b", "c"]),
            ("", &[]),
            ("   ", &[]),
        ] {
            let words: Vec<&str> = split_list(OsStr::new(value))
                .iter()
                .map(|w| w.to_str().unwrap())
                .collect();
            assert_eq!(words, want, "{value:?}");
        }
    }
}
