//! `--auth FILE`: who a connection is (its principal) and what it may do.
//!
//! - `policy.rs`: the TOML policy (principals, their tokens, certificate
//!   names and grants; listeners' principals), loaded and checked.
//! - `grant.rs`: the four actions and a principal's grants; `glob.rs`:
//!   the tube patterns grants use.
//! - `decide.rs`: the decision, a pure function of the grants, the
//!   command and what the engine knows.
//! - `token.rs`: token hashes and `sprout hash-token`; `cert.rs`: naming
//!   a client certificate.

mod cert;
mod decide;
mod glob;
mod grant;
mod policy;
mod token;

use std::path::PathBuf;

pub use decide::{decide, Decision, Facts, JobFacts, Need};
pub use grant::{Action, Grants};
pub use policy::{ByCert, LoadError, Policy, Principal, PrincipalId};
pub use token::hash_token_command;

/// `--auth`: the flag that turns authentication on.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct AuthArgs {
    /// Require clients to authenticate, and limit each to what the policy
    /// in FILE (TOML) grants it; see the README's "Security". Without it,
    /// every client may do everything, as in beanstalkd.
    #[arg(long = "auth", value_name = "FILE")]
    pub file: Option<PathBuf>,
}
