//! What every connection of a server with `--auth` shares: the policy,
//! the failed attempts per address (`limit.rs`), the `--max-pending`
//! slots a connection holds until it authenticates (`pending.rs`, shared
//! with the TLS handshakes), and the figures `/metrics` shows
//! (connections by principal, failures). A connection's
//! own state is its [`Session`](super::Session).
//!
//! The connection gauge's labels are the policy's principal names plus
//! `unauthenticated` (no principal yet) and `local` (the embedded
//! bridge's in-process connections, trusted as the server itself), so
//! the label set is bounded by the policy file, never by clients.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::limit::Failures;
use super::policy::{Policy, PrincipalId};
use crate::pending::{Pending, PendingLimit};

/// A connection's principal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Who {
    /// In-process (`Peer::local()`): trusted as the server.
    Local,
    Principal(PrincipalId),
    /// Not yet authenticated.
    Nobody,
}

/// The state connections share under `--auth`.
#[derive(Debug)]
pub struct Gate {
    policy: Policy,
    failures: Mutex<Failures>,
    /// Open connections: one per principal, then `unauthenticated`, then
    /// `local`.
    connections: Vec<AtomicI64>,
    failures_total: AtomicU64,
    /// The server's `--max-pending` slots.
    pending: Arc<PendingLimit>,
}

impl Gate {
    /// `pending`: the slots the server's TLS handshakes take too.
    pub fn new(policy: Policy, pending: Arc<PendingLimit>) -> Gate {
        let labels = policy.names().count() + 2;
        Gate {
            policy,
            pending,
            failures: Mutex::default(),
            connections: (0..labels).map(|_| AtomicI64::new(0)).collect(),
            failures_total: AtomicU64::new(0),
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// A slot for a connection that has yet to authenticate, or None when
    /// `--max-pending` connections are already waiting.
    pub(super) fn admit(&self) -> Option<Pending> {
        self.pending.admit()
    }

    /// Open connections by principal (label, count), for `/metrics`.
    pub fn connections(&self) -> Vec<(&str, i64)> {
        let labels = self
            .policy
            .names()
            .chain(super::policy::RESERVED_NAMES.iter().copied());
        labels
            .zip(&self.connections)
            .map(|(label, n)| (label, n.load(Ordering::Relaxed)))
            .collect()
    }

    /// Failed `auth` attempts since the start, for `/metrics`.
    pub fn failures_total(&self) -> u64 {
        self.failures_total.load(Ordering::Relaxed)
    }

    pub(super) fn name(&self, who: Who) -> &str {
        match who {
            Who::Principal(id) => &self.policy.principal(id).name,
            Who::Nobody => "unauthenticated",
            Who::Local => "local",
        }
    }

    /// A connection became `to` (from `from`, if it was someone).
    pub(super) fn count(&self, from: Option<Who>, to: Option<Who>) {
        let slot = |who: Who| &self.connections[self.label(who)];
        if let Some(from) = from {
            slot(from).fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(to) = to {
            slot(to).fetch_add(1, Ordering::Relaxed);
        }
    }

    fn label(&self, who: Who) -> usize {
        let principals = self.connections.len() - 2;
        match who {
            Who::Principal(id) => id,
            Who::Nobody => principals,
            Who::Local => principals + 1,
        }
    }

    /// Whose `token` is, unless `addr` failed too often lately (then
    /// `Err`, without looking at the token). A miss counts as a failure.
    pub fn check(
        &self,
        token: &[u8],
        addr: &str,
        now: Instant,
    ) -> Result<Option<PrincipalId>, Limited> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if !failures.allows(addr, now) {
            self.failures_total.fetch_add(1, Ordering::Relaxed);
            return Err(Limited);
        }
        let found = self.policy.by_token(token);
        if found.is_none() {
            failures.failed(addr, now);
            self.failures_total.fetch_add(1, Ordering::Relaxed);
        }
        Ok(found)
    }
}

/// The address failed too often lately.
#[derive(Debug)]
pub struct Limited;
