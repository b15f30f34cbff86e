//! Cluster mode (`--cluster`): sprout nodes sharing one replicated job
//! state on NATS JetStream, so losing a machine loses neither the service
//! nor an acknowledged job.
//!
//! The leader's group commits go to a JetStream stream instead of the
//! local journal and sled (the same seam, `store/mod.rs`): a reply waits
//! until a quorum of NATS servers holds its batch. Standbys follow the
//! stream into their own engine, take over when the leader's lease runs
//! out, and pass their clients through to the leader meanwhile.
//!
//! How, module by module:
//! - `cluster_flags.rs`: the flags;
//! - `link.rs`: the link to NATS: credentials, TLS, clear text only on
//!   this host;
//! - `version.rs`: refuse NATS servers too old for these guarantees;
//! - `subjects.rs`, `stream.rs`: the stream, one subject per page slot and
//!   per change message;
//! - `meta.rs`: who leads, the epoch, the id ceiling;
//! - `placement.rs`: refuse more copies than NATS has servers;
//! - `publish.rs`: a group commit as one fenced atomic batch; `fence.rs`:
//!   why a claim also writes fence subjects that a leader's batches expect;
//! - `changes.rs`: a group commit's records as change messages, and why
//!   the pages are snapshots now;
//! - `cluster_store.rs`: the store seam, the leader's submissions
//!   queued; `writer.rs`: the writer sending them; `purges.rs`: when the changes a
//!   snapshot covers go;
//! - `follow.rs`: the stream applied to pages and the engine replica;
//!   `page_copy.rs`: where a node keeps the pages (on disk with `-b`);
//! - `lease.rs`: leadership as a short-lived key in a KV bucket;
//!   `timing.rs`: its clock; `held.rs`: the holder renewing it;
//!   `standby.rs`: a standby watching it, taking it when it runs out;
//! - `claim.rs`: each node's claim on its id in that bucket, refusing a
//!   duplicate id and peer TLS on some nodes only;
//! - `node.rs`: a node's life: follow, claim, lead, stop; `role.rs`:
//!   what it is doing now;
//! - `side.rs`: the server's side: joining, where each client goes, the
//!   graceful stop;
//! - `status.rs`: what it says of its part at the default log level;
//!   `members.rs`: the members it sees (their claims);
//! - `relay.rs`: a standby's client connections passed to the leader;
//!   `via.rs`: its name on the `stats` answers it passes on;
//! - `peers.rs`: with `--cluster-peer-*`, over mutual TLS to the leader's
//!   peer listener, which serves each as the client it is (`vouch.rs`:
//!   the line that says so);
//! - `bridge.rs`: the embedded Redis bridge, on the leader only.

mod bridge;
mod changes;
mod claim;
pub mod cluster_flags;
mod cluster_store;
pub mod fence;
mod follow;
pub mod held;
pub mod lease;
pub mod link;
mod members;
mod meta;
pub mod node;
mod page_copy;
pub mod peers;
mod placement;
pub mod publish;
mod purges;
pub mod relay;
mod role;
mod side;
mod standby;
mod status;
pub mod stream;
pub mod subjects;
mod timing;
pub mod version;
pub mod via;
mod vouch;
pub mod writer;

pub use bridge::SteppedDown;
pub use cluster_flags::{ClusterArgs, ConfigError, LocalCopy, Options};
pub use peers::PeerTls;
pub use role::Role;
pub use side::{start, Side};
pub use stream::Trouble;
