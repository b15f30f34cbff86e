//! The leadership lease: one key in a JetStream KV bucket that at most one
//! node holds at a time.
//!
//! Why a KV key and not a consensus of our own: JetStream already
//! replicates the bucket (R = min(3, nodes)) and gives the two primitives a
//! lease needs: *create* succeeds only if the key is absent, and *update*
//! only over the revision the writer last saw. Each renewal is a new
//! revision, so a standby that sees one revision unchanged for a whole TTL
//! on its own clock ([`Observed`]) overwrites it, and a racing renewal
//! fails on the revision or wins it, never both. The bucket's `max_age` is
//! the TTL too, so a lease nobody watches still ages out on the servers.
//!
//! Clocks only ever make the holder give up *earlier* than anyone may take
//! over (`timing.rs`): it counts from when it *sent* its last successful
//! write (any reader saw that write later), and stops at TTL − margin,
//! all on monotonic clocks, so wall-clock steps do nothing; only clock
//! *rates* differing by an eighth (TTL against TTL − margin) could break
//! it. The lease alone does not fence a deposed writer that is paused past
//! the TTL mid-write; the stream's `Nats-Expected-Last-Sequence` chain
//! does. The holder's side is `held.rs`, a standby's `standby.rs`.
//!
//! Measured (3 × nats-server 2.15.1 on loopback, TTL 1.5 s, a standby
//! polling every 150 ms): a standby took over 1.62 s after the last renewal
//! was sent; waiting for `max_age` alone took 1.85 s (the servers free the
//! key ~350 ms late). A standby now watches the key and takes it at the
//! TTL on its own clock, whatever the servers' expiry.

use std::time::Duration;

use async_nats::jetstream::stream::{LastRawMessageError, LastRawMessageErrorKind};
use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::stream::Trouble;
use super::subjects::{NameError, Subjects};
pub use super::timing::{Observed, Standing, Timing};

/// The key inside the bucket.
pub(super) const KEY: &str = "leader";

/// How many copies of the bucket: every node up to three (a majority of
/// three survives one loss; more only slows each renewal).
pub fn replicas(cluster_nodes: usize) -> usize {
    cluster_nodes.clamp(1, 3)
}

/// Why the lease could not be read, taken, kept or given up.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// This node's TTL is not the bucket's.
    #[error(
        "the lease bucket {bucket} has a TTL of {} ms, this node's --cluster-lease-ms is {}: \
         every node of a cluster must use the same (to change it, stop every node and \
         delete the bucket, e.g. `nats kv del {bucket}`)",
        theirs.as_millis(),
        ours.as_millis()
    )]
    Disagree {
        bucket: String,
        theirs: Duration,
        ours: Duration,
    },
    #[error("reading the lease: {0}")]
    Reading(#[from] LastRawMessageError),
    #[error("the lease holds no holder: {0}")]
    NoHolder(#[from] serde_json::Error),
    #[error("taking the lease: {0}")]
    Taking(kv::UpdateError),
    #[error("releasing the lease: {0}")]
    Releasing(kv::DeleteError),
    #[error("watching the lease: {0}")]
    Watching(#[from] kv::WatchError),
    #[error("the lease: no answer")]
    NoAnswer,
}

/// Whether this node's lease TTL `ours` is the bucket's `theirs`.
fn agree(bucket: &str, theirs: Duration, ours: Duration) -> Result<(), LeaseError> {
    if theirs == ours {
        return Ok(());
    }
    Err(LeaseError::Disagree {
        bucket: bucket.to_string(),
        theirs,
        ours,
    })
}

/// The bucket holding cluster `cluster`'s lease (a name `subjects.rs`
/// accepts).
pub fn bucket_name(cluster: &str) -> Result<String, NameError> {
    Subjects::new(cluster).map(|s| format!("sprout-{}-lease", s.name()))
}

/// Who holds the lease (the key's value, JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's `--node-id`.
    pub node: String,
    /// Where it serves the beanstalk protocol (what a standby relays to).
    pub addr: String,
    /// The key's revision (the bucket stream's sequence) when read.
    #[serde(skip)]
    pub revision: u64,
}

/// The lease is lost: stop serving at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deposed(pub String);

impl std::fmt::Display for Deposed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "deposed: {}", self.0)
    }
}

impl std::error::Error for Deposed {}

/// A cluster's lease bucket.
#[derive(Clone, Debug)]
pub struct Lease {
    store: kv::Store,
    timing: Timing,
}

impl Lease {
    /// Opens the lease bucket of `cluster`, creating it if absent. The
    /// TTL is the bucket's (`max_age`), and every node must judge the
    /// lease by the same one (a standby with a shorter TTL than the
    /// holder's would take a lease its holder still renews): a bucket
    /// with another TTL is refused, naming both.
    pub async fn open(
        js: &jetstream::Context,
        cluster: &str,
        timing: Timing,
        replicas: usize,
    ) -> Result<Lease, Trouble> {
        let refused = |e: &dyn std::fmt::Display| Trouble::Refused(e.to_string());
        let bucket = bucket_name(cluster).map_err(|e| refused(&e))?;
        let stream = format!("KV_{bucket}");
        let ttl = match js.get_stream(&stream).await {
            Ok(mut found) => {
                let info = found.info().await.map_err(|e| {
                    Trouble::Passing(format!("cannot read the lease bucket {bucket}: {e}"))
                })?;
                Some(info.config.max_age)
            }
            Err(_) => None,
        };
        let store = match ttl {
            Some(ttl) => {
                agree(&bucket, ttl, timing.ttl).map_err(|e| refused(&e))?;
                js.get_key_value(&bucket).await.map_err(|e| {
                    Trouble::Passing(format!("opening the lease bucket {bucket}: {e}"))
                })?
            }
            // Absent (or unreadable: creating fails then, or finds the
            // bucket made meanwhile with other settings; either way the
            // next try reads it).
            None => {
                js.create_key_value(kv::Config {
                    bucket: bucket.clone(),
                    description: format!("sprout cluster {cluster}: who leads"),
                    history: 1,
                    max_age: timing.ttl,
                    num_replicas: replicas,
                    // Nothing in it outlives its TTL, and a renewal must
                    // not wait for a busy disk's fsync (`sync_interval:
                    // always`): a quorum's memory holds it.
                    storage: jetstream::stream::StorageType::Memory,
                    ..Default::default()
                })
                .await
                .map_err(|e| Trouble::Passing(format!("creating the lease bucket {bucket}: {e}")))?
            }
        };
        Ok(Lease { store, timing })
    }

    /// The lease's clock.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The bucket, which holds the nodes' claims too (`claim.rs`).
    pub(super) fn store(&self) -> &kv::Store {
        &self.store
    }

    /// Who holds the lease now, if anyone.
    pub async fn current(&self) -> Result<Option<Holder>, LeaseError> {
        Ok(self.latest().await?.and_then(|(_, holder)| holder))
    }

    /// The key's last message, read from the bucket's stream leader (not a
    /// replica, which may lag): its revision, and the holder unless it is a
    /// release's delete marker.
    pub(super) async fn latest(&self) -> Result<Option<(u64, Option<Holder>)>, LeaseError> {
        let subject = format!("{}{KEY}", self.store.prefix);
        let message = match self
            .store
            .stream
            .get_last_raw_message_by_subject(&subject)
            .await
        {
            Ok(message) => message,
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let marker = message
            .headers
            .get("KV-Operation")
            .is_some_and(|op| op.as_str() == "DEL" || op.as_str() == "PURGE");
        if marker {
            return Ok(Some((message.sequence, None)));
        }
        let mut holder: Holder = serde_json::from_slice(&message.payload)?;
        holder.revision = message.sequence;
        Ok(Some((message.sequence, Some(holder))))
    }
}

pub(super) fn encode(node: &str, addr: &str) -> Bytes {
    let holder = Holder {
        node: node.to_string(),
        addr: addr.to_string(),
        revision: 0,
    };
    Bytes::from(serde_json::to_vec(&holder).expect("two strings encode as JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_by_cluster_size() {
        let table = [(0, 1), (1, 1), (2, 2), (3, 3), (5, 3), (9, 3)];
        for (nodes, want) in table {
            assert_eq!(replicas(nodes), want, "{nodes} nodes");
        }
    }

    #[test]
    fn nodes_must_agree_on_the_ttl() {
        let ms = Duration::from_millis;
        assert!(agree("b", ms(1500), ms(1500)).is_ok());
        let err = agree("sprout-c-lease", ms(1500), ms(3000))
            .unwrap_err()
            .to_string();
        for part in ["1500 ms", "is 3000", "sprout-c-lease"] {
            assert!(err.contains(part), "{err}");
        }
    }

    #[test]
    fn bucket_names() {
        assert_eq!(bucket_name("prod").unwrap(), "sprout-prod-lease");
        assert_eq!(bucket_name("a_B-9").unwrap(), "sprout-a_B-9-lease");
        for bad in ["", "a.b", "a b", "a*", "a>", "ü"] {
            assert!(bucket_name(bad).is_err(), "{bad:?}");
        }
    }
}
