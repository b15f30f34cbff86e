//! `sprout admin`'s command line: the server to ask, and one subcommand
//! per call of the admin API.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The server's --http address: ADDR:PORT, or https://ADDR:PORT for a
    /// server started with --http-tls. Default 127.0.0.1:11380 (the address
    /// the README's examples give `--http`), or $SPROUT_ADMIN_HTTP.
    #[arg(
        long = "http",
        value_name = "[https://]ADDR:PORT",
        env = "SPROUT_ADMIN_HTTP",
        default_value = "127.0.0.1:11380"
    )]
    pub http: String,

    /// Trust the CA certificates in FILE (PEM) for https:// instead of the
    /// usual public ones (for a server whose certificate your own CA made).
    #[arg(long = "ca", value_name = "FILE")]
    pub ca: Option<PathBuf>,

    /// The server's --http-token.
    #[arg(long = "token", value_name = "TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,

    /// Read the token from FILE (its first line).
    #[arg(long = "token-file", value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Print the API's JSON instead of a table.
    #[arg(long = "json")]
    pub json: bool,

    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// The server's `stats`.
    Server,
    /// A cluster node's view: its members with their roles, the leader
    /// and its epoch.
    Cluster,
    /// Every tube with its counts.
    Tubes,
    /// A page of a tube's jobs in one state (in that state's order).
    Jobs {
        tube: String,
        #[arg(long, default_value = "ready")]
        state: String,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Start after this cursor (the `next` a previous page printed).
        #[arg(long)]
        after: Option<String>,
    },
    /// One job: its stats and body (control characters and bytes that are
    /// not UTF-8 escaped, the first 1 KiB; `--raw` for the exact bytes).
    Job {
        id: String,
        /// Print only the body, its exact bytes (for a pipe or a file).
        #[arg(long)]
        raw: bool,
    },
    /// Kick up to N jobs of a tube (buried ones, else delayed ones).
    Kick { tube: String, bound: u32 },
    /// Kick one buried or delayed job.
    KickJob { id: String },
    /// Run an `aft:` job now although its group has members: the one way
    /// past the dependency (kicks leave it held).
    ReleaseHold { id: String },
    /// Delete one job (not a reserved one).
    Delete { id: String },
    /// Delete every job of a tube in a state (ready, delayed or buried).
    Flush {
        tube: String,
        #[arg(long)]
        state: String,
    },
    /// Move a tube's jobs in a state to another tube.
    Move {
        tube: String,
        #[arg(long)]
        state: String,
        #[arg(long)]
        to: String,
        /// At most this many.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Pause a tube for SECONDS.
    Pause { tube: String, seconds: u32 },
    /// End a tube's pause.
    Resume { tube: String },
    /// Put a job.
    Put {
        tube: String,
        body: String,
        #[arg(long, default_value_t = 1024)]
        pri: u32,
        #[arg(long, default_value_t = 0)]
        delay: u32,
        #[arg(long, default_value_t = 60)]
        ttr: u32,
    },
}
