//! The meta subject: who leads, since when, and the id ceiling.
//!
//! Each leader's first write is a claim (a meta message with the next
//! epoch, chained on the stream's last sequence, so it fails if anyone
//! wrote after what the new leader has read); a later batch ends with a
//! meta message too when it moves the id ceiling: no job id at or above it
//! has been handed out, so a new leader starts there. The ceiling runs a
//! block ahead of the ids in use, as it does for one node's journal
//! (`store/ids.rs`), so few batches carry one.

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
}

const TAG: &str = "sprout-meta-1";

impl Meta {
    pub fn encode(&self) -> Vec<u8> {
        format!(
            "{TAG} {} {} {} {}",
            self.epoch, self.ids_below, self.node, self.addr
        )
        .into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Meta, MetaError> {
        let text = std::str::from_utf8(bytes).map_err(|_| MetaError::NotUtf8)?;
        let mut words = text.split(' ');
        let bad = || MetaError::Unreadable(text.to_string());
        if words.next() != Some(TAG) {
            return Err(bad());
        }
        let mut number = || words.next().and_then(|w| w.parse().ok()).ok_or_else(bad);
        let epoch = number()?;
        let ids_below = number()?;
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
        };
        assert_eq!(Meta::decode(&meta.encode()), Ok(meta));
        for bad in [
            &b""[..],
            b"sprout-meta-1 1 2 n",
            b"sprout-meta-1 x 2 n a",
            b"sprout-meta-2 1 2 n a",
            b"sprout-meta-1 1 2 n a extra",
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
