//! The meta subject: who leads, since when, the id ceiling, and the last
//! change the pages cover.
//!
//! Each leader's first write is a claim (a meta message with the next
//! epoch, chained on the stream's last sequence, so it fails if anyone
//! wrote after what the new leader has read); each snapshot of the pages
//! ends with one too (`changes.rs`), naming the last change message it
//! covers. The id ceiling (no job id at or above it has been handed out,
//! so a new leader starts there) rides on every change message as well,
//! and runs a block ahead of the ids in use, as it does for one node's
//! journal (`store/ids.rs`).
//!
//! Format 2 (`sprout-meta-2`) added the snapshot's change number; a node
//! that knows only format 1 cannot read it and stops, rather than skip
//! the change messages it does not know (docs/cluster.md, "Versions").

use sprout_protocol::JobId;

use super::subjects::NameError;

/// A meta message this node cannot read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    #[error("meta: not UTF-8")]
    NotUtf8,
    #[error("meta: cannot read {0:?}")]
    Unreadable(String),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Counts claims: each leader's is one more than the last.
    pub epoch: u64,
    pub ids_below: JobId,
    pub node: String,
    /// Where the leader serves the beanstalk protocol.
    pub addr: String,
    /// The last change message the stream's pages cover (0: none; a
    /// format-1 stream has pages only).
    pub snap: u64,
}

const TAG: &str = "sprout-meta-2";
const TAG_1: &str = "sprout-meta-1";

impl Meta {
    pub fn encode(&self) -> Vec<u8> {
        format!(
            "{TAG} {} {} {} {} {}",
            self.epoch, self.ids_below, self.snap, self.node, self.addr
        )
        .into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Meta, MetaError> {
        let text = std::str::from_utf8(bytes).map_err(|_| MetaError::NotUtf8)?;
        let mut words = text.split(' ');
        let bad = || MetaError::Unreadable(text.to_string());
        let format = match words.next() {
            Some(TAG) => 2,
            Some(TAG_1) => 1,
            _ => return Err(bad()),
        };
        let mut number = || words.next().and_then(|w| w.parse().ok()).ok_or_else(bad);
        let epoch = number()?;
        let ids_below = number()?;
        let snap = if format == 2 { number()? } else { 0 };
        let node = words.next().ok_or_else(bad)?.to_string();
        let addr = words.next().ok_or_else(bad)?.to_string();
        if words.next().is_some() {
            return Err(bad());
        }
        Ok(Meta {
            epoch,
            ids_below,
            node,
            addr,
            snap,
        })
    }
}

/// A node id is one word of the meta message and of the lease.
pub fn check_node_id(id: &str) -> Result<(), NameError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(NameError::Node(id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_garbage_is_refused() {
        let meta = Meta {
            epoch: 7,
            ids_below: 300_001,
            node: "n1".into(),
            addr: "10.0.0.1:11300".into(),
            snap: 41,
        };
        assert_eq!(Meta::decode(&meta.encode()), Ok(meta.clone()));
        // A format-1 stream's meta: no snapshot.
        let old = Meta::decode(b"sprout-meta-1 7 300001 n1 10.0.0.1:11300");
        assert_eq!(old, Ok(Meta { snap: 0, ..meta }));
        for bad in [
            &b""[..],
            b"sprout-meta-1 1 2 n",
            b"sprout-meta-1 x 2 n a",
            b"sprout-meta-2 1 2 n a",
            b"sprout-meta-3 1 2 3 n a",
            b"sprout-meta-1 1 2 n a extra",
            b"sprout-meta-2 1 2 3 n a extra",
            b"\xff",
        ] {
            assert!(Meta::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn node_ids() {
        assert!(check_node_id("node-1.dc_2").is_ok());
        for bad in ["", "a b", "a/b", &"n".repeat(65)] {
            assert!(check_node_id(bad).is_err(), "{bad:?}");
        }
    }
}
