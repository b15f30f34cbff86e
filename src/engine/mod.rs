//! The job state machine: every command's effect on jobs, tubes and
//! connections, with beanstalkd 1.13's semantics.
//!
//! Pure and synchronous: no sockets, no tasks, no clock reads (the
//! [`Clock`] the server reads is in `clock.rs`). The caller passes the
//! current [`Time`] in, holds the engine under one short lock,
//! and after each call drains [`Engine::take_wakeups`] to answer connections
//! blocked in `reserve` (their answer comes later, from another connection's
//! command or from [`Engine::tick`]).
//!
//! Timers: [`Engine::next_deadline`] is the earliest moment anything is due
//! (a delayed job, a TTR, a DEADLINE_SOON margin, a pause, a reserve
//! timeout); the server's timer thread sleeps until then and calls
//! [`Engine::tick`].
//!
//! Each beanstalk command is one function in `commands.rs` (tuber's
//! batches in `tuber_batch.rs`), picked by `dispatch.rs`. The rest, file
//! by file:
//! - `machine.rs`: [`Engine`], its config and tables; `calls.rs`: what the
//!   server calls (connect, execute, tick, restore, …);
//! - `transitions.rs`: the state transitions every command shares;
//!   `waiting.rs`: connections blocked in `reserve`, and what the timers end;
//! - `records.rs`: what a store keeps (`recording.rs`: how a change is
//!   journaled); `admission.rs`: whether the store has room for a change;
//! - `admin_ops.rs`: the admin API's changes; `browse.rs`: its reads;
//!   `stats.rs`: the `stats` documents; `ext.rs`: tuber's tags, which the
//!   core reaches only through `dialect.rs`;
//! - `table.rs`, `job.rs`, `bodies.rs`, `profile.rs`, `counts.rs`: how
//!   jobs are held; `tube.rs`, `heap.rs`, `timers.rs`, `conn.rs`: tubes,
//!   queues, timers and connections.

mod access;
mod admin_ops;
mod admission;
mod bodies;
mod browse;
mod calls;
mod clock;
mod commands;
mod conn;
mod counts;
mod dialect;
mod dispatch;
mod ext;
mod ext_tables;
mod fire;
mod heap;
mod histogram;
mod host;
mod job;
mod machine;
mod profile;
mod recording;
mod records;
mod setup;
mod stats;
mod table;
#[cfg(test)]
mod tests;
mod timers;
mod transitions;
mod tube;
mod tube_ix;
mod tuber_batch;
mod waiting;

pub use admin_ops::AdminError;
pub use admission::{
    cost, Change, Room, DELETE_ROOM, ENTRY_FIXED_BYTES, FRAME_BYTES, TOMBSTONE_BYTES,
};
pub use bodies::INLINE as INLINE_BODY;
pub use browse::{Apart, Cursor, JobInfo, Page, TubeFigures, MAX_PAGE};
pub use clock::{Clock, Time};
pub use conn::ConnId;
pub use counts::Counts;
pub use histogram::{quantile, Histogram, Latency, BOUNDS_MICROS};
pub use job::State;
pub use machine::{Engine, Outcome};
pub use records::{Extras, JobImage, Record, Stored};
pub use setup::EngineConfig;
pub use stats::{via_lines, ClusterStats, BODY_CACHE_KEYS, VIA_NODE, VIA_ROLE};
