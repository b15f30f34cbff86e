//! A node's claim on its `--node-id`, and what it tells the other nodes.
//!
//! Why: two nodes with one id would both be named alike in the stream's
//! meta and in `stats`, and nothing told their operator; and a node
//! without `--cluster-peer-*` beside one with them relays its clients in
//! clear text to a TLS port, where they read TLS alert bytes. So each
//! node keeps a key `node.ID` in the lease bucket: where it is reached
//! and whether it relays over mutual TLS. At start a node reads every
//! claim and refuses to run if its id is claimed from another address,
//! or if another node's peer TLS differs from its own, naming that node.
//!
//! A claim is rewritten every TTL/4 and the bucket's `max_age` is the
//! lease TTL, so a node killed by `kill -9` leaves a claim that ages out
//! within one TTL; and a claim from the node's own address is its own
//! (a restart), taken over at once. A node that stops gracefully deletes
//! its claim ([`withdraw`]).

use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::stream::Trouble;

/// Claims' keys: `node.` and the id (ids are letters, digits, `-_.`).
const PREFIX: &str = "node.";

/// What a node's claim says about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// Its `--cluster-advertise` address.
    pub addr: String,
    /// Whether it relays to, and expects relays from, other nodes over
    /// mutual TLS (`--cluster-peer-*`).
    #[serde(default)]
    pub peer_tls: bool,
}

/// Why this node's claim on its id is refused, or the claims could not be
/// read or withdrawn.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(
        "--node-id {node} is in use by the node at {addr}: give this node another id \
         (if that node is gone, its claim runs out {} ms after it stopped)",
        ttl.as_millis()
    )]
    InUse {
        node: String,
        addr: String,
        ttl: Duration,
    },
    #[error(
        "node {node} at {addr} runs {}, this node {}: its clients would be relayed to a port \
         that cannot read them. Every node of a cluster must give the same \
         --cluster-peer-* flags",
        with(*theirs),
        with(*ours)
    )]
    PeerTlsDiffers {
        node: String,
        addr: String,
        theirs: bool,
        ours: bool,
    },
    #[error("listing the node claims: {0}")]
    Listing(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("withdrawing this node's claim on --node-id {node}: {error}")]
    Withdrawing {
        node: String,
        #[source]
        error: kv::DeleteError,
    },
}

/// How a node with `tls` links to the others, for [`ClaimError`].
fn with(tls: bool) -> &'static str {
    match tls {
        true => "with --cluster-peer-* (mutual TLS between nodes)",
        false => "without --cluster-peer-* (clear text between nodes)",
    }
}

/// The pure decision on this node's id: free, or claimed from this very
/// address (this node, restarted), or taken by another node.
pub fn judge_id(
    node: &str,
    ours: &Claim,
    found: Option<&Claim>,
    ttl: Duration,
) -> Result<(), ClaimError> {
    match found {
        Some(other) if other.addr != ours.addr => Err(ClaimError::InUse {
            node: node.to_string(),
            addr: other.addr.clone(),
            ttl,
        }),
        _ => Ok(()),
    }
}

/// The pure decision on the other nodes: every one must use peer TLS if
/// this one does, and none if it does not.
pub fn judge_peers(ours: &Claim, others: &[(String, Claim)]) -> Result<(), ClaimError> {
    match others.iter().find(|(_, c)| c.peer_tls != ours.peer_tls) {
        None => Ok(()),
        Some((node, other)) => Err(ClaimError::PeerTlsDiffers {
            node: node.clone(),
            addr: other.addr.clone(),
            theirs: other.peer_tls,
            ours: ours.peer_tls,
        }),
    }
}

/// Reads the claims, judges them, and writes this node's (over what it
/// read: a node that claimed meanwhile makes this a passing trouble, and
/// the next try judges its claim).
pub async fn stake(
    store: &kv::Store,
    node: &str,
    ours: &Claim,
    ttl: Duration,
) -> Result<(), Trouble> {
    let key = format!("{PREFIX}{node}");
    let passing = |what: &str, e: &dyn std::fmt::Display| {
        Trouble::Passing(format!("{what} the node claims: {e}"))
    };
    let own = store
        .entry(&key)
        .await
        .map_err(|e| passing("reading", &e))?;
    let live = own.as_ref().filter(|e| e.operation == Operation::Put);
    let found = live.and_then(|e| serde_json::from_slice::<Claim>(&e.value).ok());
    let refused = |e: ClaimError| Trouble::Refused(e.to_string());
    judge_id(node, ours, found.as_ref(), ttl).map_err(refused)?;
    judge_peers(ours, &others(store, &key).await?).map_err(refused)?;
    let revision = own.map_or(0, |e| e.revision);
    store
        .update(&key, encode(ours), revision)
        .await
        .map_err(|e| passing("writing", &e))?;
    Ok(())
}

/// Every live claim but `own_key`'s, with its node id.
async fn others(store: &kv::Store, own_key: &str) -> Result<Vec<(String, Claim)>, Trouble> {
    let mut claims = all(store)
        .await
        .map_err(|e| Trouble::Passing(e.to_string()))?;
    claims.retain(|(node, _)| format!("{PREFIX}{node}") != own_key);
    Ok(claims)
}

/// Every live claim, with its node id, in the ids' order.
pub async fn all(store: &kv::Store) -> Result<Vec<(String, Claim)>, ClaimError> {
    let failed = |e| ClaimError::Listing(Box::new(e));
    let mut keys = store.keys().await.map_err(failed)?;
    let mut claims = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(|e| ClaimError::Listing(Box::new(e)))?;
        let Some(node) = key.strip_prefix(PREFIX) else {
            continue;
        };
        let value = store.get(&key).await;
        let value = value.map_err(|e| ClaimError::Listing(Box::new(e)))?;
        if let Some(claim) = value.and_then(|v| serde_json::from_slice(&v).ok()) {
            claims.push((node.to_string(), claim));
        }
    }
    claims.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(claims)
}

/// Rewrites this node's claim every `ttl / 4` for as long as the node
/// runs, so it never ages out while the node lives.
pub async fn keep(store: kv::Store, node: String, ours: Claim, ttl: Duration) {
    let key = format!("{PREFIX}{node}");
    let value = encode(&ours);
    loop {
        tokio::time::sleep(ttl / 4).await;
        if let Err(e) = store.put(&key, value.clone()).await {
            tracing::warn!("renewing this node's claim on --node-id {node}: {e}");
        }
    }
}

/// Takes this node's claim back at a graceful stop, so the id is free at
/// once (for the same node started elsewhere); the caller has stopped
/// [`keep`] first.
pub async fn withdraw(store: &kv::Store, node: &str) -> Result<(), ClaimError> {
    store
        .delete(format!("{PREFIX}{node}"))
        .await
        .map_err(|error| ClaimError::Withdrawing {
            node: node.to_string(),
            error,
        })
}

fn encode(claim: &Claim) -> Bytes {
    Bytes::from(serde_json::to_vec(claim).expect("a claim encodes as JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(addr: &str, peer_tls: bool) -> Claim {
        Claim {
            addr: addr.into(),
            peer_tls,
        }
    }

    #[test]
    fn an_id_is_refused_only_when_claimed_from_elsewhere() {
        let ttl = Duration::from_millis(1500);
        let ours = claim("10.0.0.5:11300", false);
        // (claim found under our id, refused)
        let table = [
            (None, false),
            (Some(claim("10.0.0.5:11300", false)), false), // this node, restarted
            (Some(claim("10.0.0.5:11300", true)), false),
            (Some(claim("10.0.0.6:11300", false)), true),
        ];
        for (found, refused) in table {
            let judged = judge_id("n1", &ours, found.as_ref(), ttl);
            assert_eq!(judged.is_err(), refused, "{found:?}: {judged:?}");
        }
        let e = judge_id("n1", &ours, Some(&claim("10.0.0.6:11300", false)), ttl)
            .unwrap_err()
            .to_string();
        for part in ["--node-id n1", "node at 10.0.0.6:11300", "1500 ms"] {
            assert!(e.contains(part), "{part:?}: {e}");
        }
    }

    #[test]
    fn every_node_uses_peer_tls_or_none_does() {
        let others = |tls: &[bool]| -> Vec<(String, Claim)> {
            let each = tls.iter().enumerate();
            each.map(|(i, &t)| (format!("n{i}"), claim(&format!("h{i}:1"), t)))
                .collect()
        };
        // (this node's peer TLS, the others', refused)
        let table: [(bool, &[bool], bool); 6] = [
            (false, &[], false),
            (true, &[], false),
            (true, &[true, true], false),
            (false, &[false], false),
            (false, &[false, true], true),
            (true, &[false], true),
        ];
        for (tls, theirs, refused) in table {
            let judged = judge_peers(&claim("me:1", tls), &others(theirs));
            assert_eq!(judged.is_err(), refused, "{tls} {theirs:?}: {judged:?}");
        }
        let e = judge_peers(&claim("me:1", false), &others(&[false, true]))
            .unwrap_err()
            .to_string();
        for part in [
            "node n1 at h1:1",
            "runs with --cluster-peer-*",
            "this node without",
        ] {
            assert!(e.contains(part), "{part:?}: {e}");
        }
    }

    #[test]
    fn a_claim_without_peer_tls_reads_as_clear_text() {
        let c: Claim = serde_json::from_slice(br#"{"addr":"h:1"}"#).unwrap();
        assert_eq!(c, claim("h:1", false));
    }
}
