//! Cluster mode: sprout nodes sharing one replicated job state on NATS
//! JetStream (issue 13).

/// The oldest nats-server whose guarantees the cluster relies on.
pub mod version;
