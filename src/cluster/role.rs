//! What a node is doing now: its role, which the node's life (`node.rs`)
//! sets and the server's side (`side.rs`) reads.

/// What a node is doing now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Following; clients are passed to the leader, when one is known.
    Standby {
        leader: Option<String>,
    },
    Leader,
}
