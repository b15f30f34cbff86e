//! One connection under `--auth`: who it is, and what becomes of each
//! request it sends ([`Session::screen`]).
//!
//! Who it is at the start: the embedded bridge's in-process connections
//! are trusted as the server itself; a client another node of the cluster
//! passed on is the principal that node vouched for, if this policy knows
//! it (that node found it by [`proven_principal`], as this one would have);
//! else the principal its verified client certificate names; else the one
//! its listener gives connections without a credential; else nobody yet:
//! then it holds one of the `--max-pending` slots (the one its TLS
//! handshake held, or a new one; with none free it is not served) until
//! it authenticates, and is closed at that slot's deadline if it has not
//! (`pending.rs`). So strangers that connect and never authenticate are
//! bounded in number and time exactly as TLS handshakes are.
//!
//! Before it is someone, every request but `auth` and `quit` (a line the
//! parser refused too) answers AUTH_REQUIRED and changes nothing, not
//! even a counter of `stats`; the connection reads a `put`'s body with a
//! size limit of 0, so it is skipped as it arrives, never held.
//!
//! `auth` answers AUTHENTICATED or UNAUTHORIZED. On a connection that
//! already is someone, a good token switches it to that token's
//! principal (a client may hold several credentials); a wrong one leaves
//! it as it was. The third failure on a connection (successes between do
//! not reset the count) answers UNAUTHORIZED and closes it; an address
//! that failed too often lately is refused without a look at the token
//! (`limit.rs`).

use std::sync::Arc;
use std::time::Instant;

use sprout_protocol::{Command, Request, Response, Token};

use super::audit::{self, Actor};
use super::gate::{Gate, Who};
use super::grant::Action;
use super::policy::{ByCert, PrincipalId};
use super::verdict::{decide, Decision, Facts};
use crate::peer::Peer;
use crate::pending::Pending;

/// Failed `auth`s a connection may make; the last closes it.
pub const MAX_FAILURES: u8 = 3;

/// What to do with one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Run it as a server without `--auth` would.
    Run(Request),
    /// Run it over the tubes the principal may inspect
    /// ([`Session::may_inspect`]).
    Seeing(Command),
    /// Run it, then [`Session::audit_admin`] its answer.
    Audited(Command),
    /// Answer this; run nothing.
    Answer(Response),
    /// Answer this, then close the connection.
    Last(Response),
    /// Close without an answer (`quit` before authenticating).
    Close,
}

/// One connection's standing.
#[derive(Debug)]
pub struct Session {
    gate: Arc<Gate>,
    peer: Peer,
    who: Who,
    failures: u8,
    /// While nobody: its `--max-pending` slot and deadline.
    slot: Option<Pending>,
}

impl Session {
    /// A new connection from `peer`, holding `slot` if its TLS handshake
    /// took one (see the module docs for who it is); None if it has to
    /// authenticate but every slot is taken: close it.
    pub fn open(gate: Arc<Gate>, peer: Peer, slot: Option<Pending>) -> Option<Session> {
        let who = first_principal(&gate, &peer);
        let slot = match who {
            Who::Nobody => Some(slot.or_else(|| gate.admit())?),
            _ => None,
        };
        gate.count(None, Some(who));
        Some(Session {
            slot,
            gate,
            peer,
            who,
            failures: 0,
        })
    }

    /// Whether the connection has a principal (or is trusted).
    pub fn authenticated(&self) -> bool {
        self.who != Who::Nobody
    }

    /// When the connection is closed unless it authenticates first.
    pub fn deadline(&self) -> Option<Instant> {
        self.slot.as_ref().map(|slot| slot.deadline().into_std())
    }

    /// May the principal inspect `tube`? (What `list-tubes` and `stats`
    /// show of it, after [`Step::Seeing`].)
    pub fn may_inspect(&self, tube: &str) -> bool {
        match self.who {
            Who::Local => true,
            Who::Principal(id) => self
                .gate
                .policy()
                .principal(id)
                .grants
                .allows(Action::Inspect, tube),
            Who::Nobody => false,
        }
    }

    /// What becomes of `request`; `facts` is what the engine knows.
    pub fn screen(&mut self, request: Request, facts: &impl Facts, now: Instant) -> Step {
        let command = match request {
            Ok(Command::Auth(token)) => return self.authenticate(&token, now),
            Ok(command) => command,
            Err(_) if self.who == Who::Nobody => return Step::Answer(Response::AuthRequired),
            Err(rejected) => return Step::Run(Err(rejected)),
        };
        let id = match self.who {
            Who::Local => return Step::Run(Ok(command)),
            Who::Nobody if command == Command::Quit => return Step::Close,
            Who::Nobody => return Step::Answer(Response::AuthRequired),
            Who::Principal(id) => id,
        };
        match decide(&self.gate.policy().principal(id).grants, &command, facts) {
            Decision::Allow => Step::Run(Ok(command)),
            Decision::Admin => Step::Audited(command),
            Decision::Inspectable => Step::Seeing(command),
            Decision::Forbidden(need) => {
                audit::forbidden(&self.actor(), &command, &need);
                Step::Answer(Response::Forbidden)
            }
        }
    }

    /// Records an admin action and its answer.
    pub fn audit_admin(&self, command: &Command, answer: &Response) {
        audit::admin(&self.actor(), command, answer);
    }

    fn authenticate(&mut self, token: &Token, now: Instant) -> Step {
        let outcome = match self.gate.check(token.as_bytes(), &self.peer.addr, now) {
            Ok(Some(id)) => {
                self.become_(Who::Principal(id));
                audit::auth(&self.actor(), "authenticated");
                return Step::Answer(Response::Authenticated);
            }
            Ok(None) => "unauthorized",
            Err(_) => "rate-limited",
        };
        self.failures += 1;
        if self.failures >= MAX_FAILURES {
            audit::auth(&self.actor(), "closed");
            return Step::Last(Response::Unauthorized);
        }
        audit::auth(&self.actor(), outcome);
        Step::Answer(Response::Unauthorized)
    }

    fn become_(&mut self, who: Who) {
        self.gate.count(Some(self.who), Some(who));
        self.who = who;
        self.slot = None;
    }

    fn actor(&self) -> Actor<'_> {
        Actor {
            principal: self.gate.name(self.who),
            peer: &self.peer,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.gate.count(Some(self.who), None);
    }
}

/// Who a new connection from `peer` is (see the module docs).
fn first_principal(gate: &Gate, peer: &Peer) -> Who {
    if *peer == Peer::local() {
        return Who::Local;
    }
    // Only the cluster's peer listener vouches; its listener names no one.
    if let Some(vouch) = &peer.vouched {
        let Some(name) = &vouch.principal else {
            return Who::Nobody;
        };
        let who = gate
            .policy()
            .by_name(name)
            .map_or(Who::Nobody, Who::Principal);
        let actor = Actor {
            principal: gate.name(who),
            peer,
        };
        audit::relayed(
            &actor,
            vouch,
            if who == Who::Nobody {
                "unknown"
            } else {
                "relayed"
            },
        );
        return who;
    }
    match proven_principal(gate, peer) {
        Some(id) => Who::Principal(id),
        None => Who::Nobody,
    }
}

/// The principal the transport proves a new connection from `peer` is:
/// the one its verified client certificate names (audited), else its
/// listener's. A standby names the same to the leader for a client it
/// passes on (`cluster/relay.rs`), so a client has the same rights
/// whichever node it connects to.
pub fn proven_principal(gate: &Gate, peer: &Peer) -> Option<PrincipalId> {
    if let Some(cert) = &peer.cert {
        match gate.policy().by_cert(cert) {
            ByCert::One(id) => {
                let actor = Actor {
                    principal: gate.name(Who::Principal(id)),
                    peer,
                };
                audit::certificate(&actor, "authenticated");
                return Some(id);
            }
            ByCert::Ambiguous => {
                let actor = Actor {
                    principal: gate.name(Who::Nobody),
                    peer,
                };
                audit::certificate(&actor, "ambiguous");
            }
            ByCert::None => {}
        }
    }
    gate.policy().for_listener(&peer.listener)
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
