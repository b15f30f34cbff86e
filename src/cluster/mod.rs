//! Cluster mode: sprout nodes sharing one replicated job state on NATS
//! JetStream (issue 13).

/// Leadership: who may write, held as a short-lived key in a KV bucket.
pub mod lease;
/// A standby passes its clients' connections through to the leader.
pub mod relay;
/// The oldest nats-server whose guarantees the cluster relies on.
pub mod version;
