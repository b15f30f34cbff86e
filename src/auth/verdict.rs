//! The access decision: may this principal run this command, given what
//! the engine knows? Pure: the grants, the command and the facts in, the
//! verdict out; the connection gathers the facts under the engine's lock
//! and acts on the verdict (`connection.rs`).
//!
//! The rule for each command (an id the engine does not know passes, so
//! the engine answers its NOT_FOUND; a refusal changes nothing):
//! - `use T`: produce, inspect or admin on T (to put, peek or kick there);
//!   `watch T`: consume on T;
//! - `ignore`, `list-tube-used`, `list-tubes-watched`, `quit`, `auth`:
//!   always;
//! - `put`: produce on the used tube;
//! - `reserve`, `reserve-with-timeout`, `reserve-batch`: consume on every
//!   watched tube. Every connection starts out watching `default`, so a
//!   worker that may not consume `default` must `ignore default` first;
//! - `reserve-job N`: consume on N's tube; `release`, `bury`, `touch` of
//!   a job this connection reserved: consume on its tube (one it did not
//!   reserve passes: the engine says NOT_FOUND);
//! - `delete N` (and each id of `delete-batch`): consume on N's tube if
//!   this connection reserved it, else admin on N's tube (audited);
//! - `peek N`, `stats-job N`: inspect on N's tube; `peek-ready`,
//!   `-delayed`, `-buried`, `-reserved`: inspect on the used tube;
//!   `stats-tube T`: inspect on T;
//! - `kick`: admin on the used tube; `kick-job N`: admin on N's tube;
//!   `pause-tube T`, `flush-tube T`: admin on T (all audited);
//! - `list-tubes`: the tubes the principal may inspect; `stats`: inspect
//!   on some tube, and without inspect on `*` its job and tube counts
//!   cover only the tubes it may inspect; `stats-group`: inspect on `*`
//!   (a group spans tubes);
//! - `fire N`: produce on the used tube, and consume on N's tube if this
//!   connection reserved N.
//!
//! A refusal tells the audit trail what was missing ([`Need`]).

use std::fmt;

use sprout_protocol::{Command, JobId};

use super::grant::{Action, Grants};

/// What the engine knows that a decision needs, for one connection.
pub trait Facts {
    /// The tube the connection uses.
    fn used(&self) -> &str;
    /// The tubes it watches.
    fn watched(&self) -> impl Iterator<Item = &str>;
    /// Job `id`, if it exists.
    fn job(&self, id: JobId) -> Option<JobFacts<'_>>;
}

/// A job, as a decision sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobFacts<'a> {
    pub tube: &'a str,
    /// This connection holds it reserved.
    pub mine: bool,
}

/// The verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allow,
    /// Run it; it is an admin action, which the audit trail records.
    Admin,
    /// Run it over the tubes the principal may inspect only (`list-tubes`,
    /// `stats`).
    Inspectable,
    /// Answer FORBIDDEN and change nothing.
    Forbidden(Need),
}

/// What a refused command needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    /// The action (or, for `use`, the actions any of which would do).
    pub action: &'static str,
    /// On this tube; `None`: on some tube; `Some("*")`: on every tube.
    pub tube: Option<String>,
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tube {
            Some(tube) => write!(f, "{} on {tube}", self.action),
            None => write!(f, "{} on some tube", self.action),
        }
    }
}

/// May a principal with `grants` run `command`?
pub fn decide(grants: &Grants, command: &Command, facts: &impl Facts) -> Decision {
    let on = |action: Action, tube: &str| on(grants, action, tube);
    let job = |id: JobId| facts.job(id);
    match command {
        Command::Auth(_)
        | Command::Ignore(_)
        | Command::ListTubeUsed
        | Command::ListTubesWatched
        | Command::Quit => Decision::Allow,
        Command::Use(tube) => use_tube(grants, tube.as_str()),
        Command::Watch(tube) => on(Action::Consume, tube.as_str()),
        Command::Put { .. } => on(Action::Produce, facts.used()),
        Command::Reserve
        | Command::ReserveWithTimeout(_)
        | Command::ReserveBatch(_)
        | Command::ReserveBatchWait { .. } => {
            match facts.watched().find(|t| !grants.allows(Action::Consume, t)) {
                Some(tube) => forbidden(Action::Consume.name(), Some(tube)),
                None => Decision::Allow,
            }
        }
        Command::ReserveJob(id) => {
            job(*id).map_or(Decision::Allow, |j| on(Action::Consume, j.tube))
        }
        Command::Release { id, .. } | Command::Bury { id, .. } | Command::Touch(id) => {
            match job(*id) {
                Some(j) if j.mine => on(Action::Consume, j.tube),
                _ => Decision::Allow,
            }
        }
        Command::Delete(id) => delete(grants, job(*id)),
        Command::DeleteBatch(ids) => delete_batch(grants, ids, facts),
        Command::Peek(id) | Command::StatsJob(id) => {
            job(*id).map_or(Decision::Allow, |j| on(Action::Inspect, j.tube))
        }
        Command::PeekReady | Command::PeekDelayed | Command::PeekBuried | Command::PeekReserved => {
            on(Action::Inspect, facts.used())
        }
        Command::StatsTube(tube) => on(Action::Inspect, tube.as_str()),
        Command::Kick(_) => admin(grants, facts.used()),
        Command::KickJob(id) => job(*id).map_or(Decision::Allow, |j| admin(grants, j.tube)),
        Command::PauseTube { tube, .. } | Command::FlushTube(tube) | Command::FlushBuried(tube) => {
            admin(grants, tube.as_str())
        }
        Command::Drain | Command::Undrain => match grants.allows_everywhere(Action::Admin) {
            true => Decision::Admin,
            false => forbidden(Action::Admin.name(), Some("*")),
        },
        Command::ListTubes => match grants.allows_everywhere(Action::Inspect) {
            true => Decision::Allow,
            false => Decision::Inspectable,
        },
        Command::Stats => stats(grants),
        Command::StatsGroup(_) => match grants.allows_everywhere(Action::Inspect) {
            true => Decision::Allow,
            false => forbidden(Action::Inspect.name(), Some("*")),
        },
        Command::Fire { id, .. } => match on(Action::Produce, facts.used()) {
            Decision::Allow => match job(*id) {
                Some(j) if j.mine => on(Action::Consume, j.tube),
                _ => Decision::Allow,
            },
            refused => refused,
        },
    }
}

fn on(grants: &Grants, action: Action, tube: &str) -> Decision {
    match grants.allows(action, tube) {
        true => Decision::Allow,
        false => forbidden(action.name(), Some(tube)),
    }
}

fn admin(grants: &Grants, tube: &str) -> Decision {
    match on(grants, Action::Admin, tube) {
        Decision::Allow => Decision::Admin,
        refused => refused,
    }
}

fn forbidden(action: &'static str, tube: Option<&str>) -> Decision {
    Decision::Forbidden(Need {
        action,
        tube: tube.map(str::to_owned),
    })
}

/// `use T`: a tube is used to put, peek or kick there.
fn use_tube(grants: &Grants, tube: &str) -> Decision {
    let any = [Action::Produce, Action::Inspect, Action::Admin];
    match any.iter().any(|&a| grants.allows(a, tube)) {
        true => Decision::Allow,
        false => forbidden("produce, inspect or admin", Some(tube)),
    }
}

fn delete(grants: &Grants, job: Option<JobFacts<'_>>) -> Decision {
    match job {
        None => Decision::Allow,
        Some(j) if j.mine => on(grants, Action::Consume, j.tube),
        Some(j) => admin(grants, j.tube),
    }
}

/// Each id as `delete` would be; one refusal refuses the whole batch.
fn delete_batch(grants: &Grants, ids: &[JobId], facts: &impl Facts) -> Decision {
    let mut verdict = Decision::Allow;
    for &id in ids {
        match delete(grants, facts.job(id)) {
            Decision::Allow => {}
            Decision::Admin => verdict = Decision::Admin,
            refused => return refused,
        }
    }
    verdict
}

fn stats(grants: &Grants) -> Decision {
    if grants.allows_everywhere(Action::Inspect) {
        Decision::Allow
    } else if grants.allows_somewhere(Action::Inspect) {
        Decision::Inspectable
    } else {
        forbidden(Action::Inspect.name(), None)
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
