//! The lease as its holder keeps it (`lease.rs`): taken by one write over
//! the revision seen, renewed on schedule over the revision it last wrote,
//! so a renewal fails once anyone else wrote or the key aged out; given up
//! on its own clock before anyone may take it over (`timing.rs`).

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use tokio::time::Instant;

use super::lease::{encode, Deposed, Lease, LeaseError, KEY};
use super::timing::{Standing, Timing};

impl Lease {
    /// Takes the lease if nobody holds it: `None` when someone does. (Not
    /// the crate's `create`: it reads through any replica, and a lagging
    /// one turns a lost race into an error.)
    pub async fn try_acquire(&self, node: &str, addr: &str) -> Result<Option<Held>, LeaseError> {
        let value = encode(node, addr);
        // Revision 0: only if the key has no message at all.
        if let Some(held) = self.take(&value, 0).await? {
            return Ok(Some(held));
        }
        match self.latest().await? {
            // Released (a delete marker): take it over that revision.
            Some((revision, None)) => self.take(&value, revision).await,
            _ => Ok(None),
        }
    }

    /// Writes this node's value over `revision` (0: over nothing); `None`
    /// if the key moved on meanwhile.
    pub(super) async fn take(
        &self,
        value: &Bytes,
        revision: u64,
    ) -> Result<Option<Held>, LeaseError> {
        let sent = Instant::now();
        match self.store().update(KEY, value.clone(), revision).await {
            Ok(revision) => Ok(Some(Held {
                store: self.store().clone(),
                timing: self.timing(),
                value: value.clone(),
                revision,
                sent,
                deposed: None,
            })),
            Err(e) if lost_race(&e) => Ok(None),
            Err(e) => Err(LeaseError::Taking(e)),
        }
    }
}

/// The lease, held by this node.
#[derive(Debug)]
pub struct Held {
    store: kv::Store,
    timing: Timing,
    value: Bytes,
    revision: u64,
    /// When the last successful write was sent.
    sent: Instant,
    /// Set once a write was refused: no later renewal is tried.
    deposed: Option<Deposed>,
}

impl Held {
    /// The lease's clock.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The key's revision as this node last wrote it.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Until when the lease is safely held (then [`Held::renew`] fails).
    pub fn valid_until(&self) -> Instant {
        self.timing.valid_until(self.sent)
    }

    /// Where the holder stands now.
    pub fn standing(&self) -> Standing {
        match self.deposed {
            Some(_) => Standing::Deposed,
            None => self.timing.standing(self.sent, Instant::now()),
        }
    }

    /// Rewrites the key with the revision last written, so it fails if
    /// anyone else wrote or the key aged out. Transient NATS errors are
    /// retried until [`Held::valid_until`]; `Err` means stop serving at once
    /// (and it stays so: a deposed holder must acquire anew).
    pub async fn renew(&mut self) -> Result<(), Deposed> {
        if let Some(deposed) = &self.deposed {
            return Err(deposed.clone());
        }
        let deadline = self.valid_until();
        loop {
            let sent = Instant::now();
            if sent >= deadline {
                return Err(Deposed("no renewal succeeded within the lease".into()));
            }
            let update = self.store.update(KEY, self.value.clone(), self.revision);
            match tokio::time::timeout_at(deadline, update).await {
                Ok(Ok(revision)) => {
                    self.revision = revision;
                    self.sent = sent;
                    return Ok(());
                }
                Ok(Err(e)) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    let deposed = Deposed("the lease was taken over or aged out".into());
                    self.deposed = Some(deposed.clone());
                    return Err(deposed);
                }
                Ok(Err(e)) => {
                    tracing::warn!("lease renewal failed, retrying: {e}");
                    let left = deadline.saturating_duration_since(Instant::now());
                    let pause = self.timing.poll_every.min(left);
                    tokio::time::sleep(pause).await;
                }
                Err(_elapsed) => {
                    return Err(Deposed("no renewal succeeded within the lease".into()))
                }
            }
        }
    }

    /// Renews on schedule until deposed: run it beside the serving, and
    /// stop serving when it returns.
    pub async fn keep(&mut self) -> Deposed {
        loop {
            tokio::time::sleep_until(self.timing.next_renewal(self.sent)).await;
            if let Err(deposed) = self.renew().await {
                return deposed;
            }
        }
    }

    /// Gives the lease up (a graceful stop), so a standby need not wait out
    /// the TTL. Does nothing to a lease someone else holds by now.
    pub async fn release(self) -> Result<(), LeaseError> {
        self.store
            .delete_expect_revision(KEY, Some(self.revision))
            .await
            .map_err(LeaseError::Releasing)
    }
}

/// Whether a refused write lost a race to another writer: a stale
/// revision, or (a routine takeover race in a NATS cluster) the "wrong
/// last sequence" without a number, code 10164, that async-nats does not
/// name as such.
fn lost_race(e: &kv::UpdateError) -> bool {
    if e.kind() == kv::UpdateErrorKind::WrongLastRevision {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(js) = cause.downcast_ref::<jetstream::Error>() {
            return js.error_code() == jetstream::ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT;
        }
        source = cause.source();
    }
    false
}
