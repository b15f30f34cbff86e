//! `--auth FILE`: who a connection is (its principal) and what it may do.
//!
//! - `policy.rs`: the TOML policy (principals, their tokens, certificate
//!   names and grants; listeners' principals), loaded and checked.
//! - `grant.rs`: the four actions and a principal's grants; `glob.rs`:
//!   the tube patterns grants use.
//! - `verdict.rs`: the decision, a pure function of the grants, the
//!   command and what the engine knows.
//! - `token.rs`: token hashes and `sprout hash-token`; `cert.rs`: naming
//!   a client certificate.
//! - `gate.rs`: what connections share (the policy, failures per address
//!   in `limit.rs`, the metrics' figures); `session.rs`: one
//!   connection's principal and what becomes of each request it sends.
//! - `audit.rs`: the audit trail (target `sprout::audit`).
//!
//! Without `--auth` none of this runs: the connection decodes with
//! beanstalkd's dialect (`auth` is an unknown command) and every byte is
//! as before.
//!
//! Decisions the issue left open, as a production server should make
//! them (each explained where it is made): the token is every byte after
//! `auth ` (`protocol`); a malformed line before authenticating answers
//! AUTH_REQUIRED like any other; a wrong `auth` on an authenticated
//! connection keeps its principal, a good one switches; the failure count
//! is per connection and never reset; rate limiting is per IPv4 address
//! or IPv6 /64 over a sliding minute (`limit.rs`); a certificate whose
//! names map to two principals is none of them; principal names are
//! label-safe and `unauthenticated`/`local` are reserved (`policy.rs`);
//! a principal nothing can act as is a load error; FORBIDDEN refusals
//! are audited too (`audit.rs`); a connection without a principal holds
//! one of the `--max-pending` slots TLS handshakes take, with the same
//! `--handshake-timeout`, until it authenticates (`session.rs`).

pub mod audit;
mod cert;
mod gate;
mod glob;
mod grant;
mod limit;
mod policy;
mod session;
mod token;
mod verdict;

use std::path::PathBuf;

pub use audit::log_directive;
pub use gate::Gate;
pub use grant::{Action, Grants};
pub use policy::{ByCert, LoadError, Policy, Principal, PrincipalId};
pub use session::{proven_principal, Session, Step};
pub use token::hash_token_command;
pub use verdict::{decide, Decision, Facts, JobFacts, Need};

/// `--auth`: the flag that turns authentication on.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct AuthArgs {
    /// Require clients to authenticate, and limit each to what the policy
    /// in FILE (TOML) grants it; see docs/security.md. Without it,
    /// every client may do everything, as in beanstalkd.
    #[arg(long = "auth", value_name = "FILE")]
    pub file: Option<PathBuf>,
}
