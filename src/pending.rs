//! Connections the server does not trust yet: accepted, but still in their
//! TLS handshake (and, with `--auth`, not yet authenticated). Each one
//! holds a [`Pending`]: one of `--max-pending` slots and the deadline
//! (`--handshake-timeout` after the accept) by which it must be trusted.
//! A client that opens connections and never finishes them can hold at
//! most that many, each for at most that long, so it cannot use up the
//! server's descriptors or memory; once the slots are taken, a new
//! connection is closed at once rather than queued (a queue would only
//! move the exhaustion). A leaf: it knows no other module.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The slots for connections not yet trusted, shared by every listener.
#[derive(Debug)]
pub struct PendingLimit {
    slots: Arc<Semaphore>,
    timeout: Duration,
    refused: AtomicU64,
}

/// One connection's slot, given back when this is dropped: hold it until
/// the connection is trusted, and give up on the connection at
/// [`Pending::deadline`].
#[derive(Debug)]
pub struct Pending {
    _slot: OwnedSemaphorePermit,
    deadline: Instant,
}

impl PendingLimit {
    /// `max` slots (`--max-pending`), each for `timeout`
    /// (`--handshake-timeout`).
    pub fn new(max: usize, timeout: Duration) -> PendingLimit {
        PendingLimit {
            slots: Arc::new(Semaphore::new(max)),
            timeout,
            refused: AtomicU64::new(0),
        }
    }

    /// A slot for a connection accepted just now, or None (counted and
    /// logged at debug level) when every slot is taken: the caller then
    /// closes the connection.
    pub fn admit(&self) -> Option<Pending> {
        match self.slots.clone().try_acquire_owned() {
            Ok(slot) => Some(Pending {
                _slot: slot,
                deadline: Instant::now() + self.timeout,
            }),
            Err(_) => {
                let refused = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::debug!(refused, "too many pending connections: closed a new one");
                None
            }
        }
    }
}

impl Pending {
    /// When the connection must be trusted by: `--handshake-timeout`
    /// after it was accepted.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_are_capped_and_given_back() {
        let limit = PendingLimit::new(2, Duration::from_secs(10));
        let a = limit.admit().expect("first");
        let b = limit.admit().expect("second");
        assert!(limit.admit().is_none(), "a third while two are pending");
        assert_eq!(limit.refused.load(Ordering::Relaxed), 1);
        drop(a);
        let c = limit.admit().expect("a slot given back is free again");
        assert!(c.deadline() >= b.deadline());
        assert!(c.deadline() <= Instant::now() + Duration::from_secs(10));
    }
}
