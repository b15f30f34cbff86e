//! sprout: a beanstalkd-compatible job server.
//!
//! The crate is the server as a library, for the `sprout` binary
//! (`src/main.rs`), the benchmarks (`benches/engine.rs` drives the
//! [`engine`] directly) and the examples, plus the small async [`client`]
//! they share. The end-to-end tests in `tests/` do not link it: they start
//! the real binary as a child process on a free port (`tests/common/mod.rs`),
//! which is what lets the same transcripts run against beanstalkd.
//!
//! # Layout
//!
//! Bottom up; every import points down the list.
//! * Leaves: the `protocol/` crate (`sprout_protocol`: commands and
//!   answers, the codec, the exact beanstalkd errors for bad input),
//!   `alarm` (what wakes the timer thread early), `binlog_stats` (the
//!   store's counters, which the engine's `stats` and `/metrics` read),
//!   `peer` (who is at the other end of a connection: address, listener,
//!   client certificate, what a node that passed it on vouched for),
//!   [`auth`] (`--auth`: the policy, the access
//!   decision, a connection's session, the audit trail; it knows only the
//!   protocol and `peer`), `pending` (the slots and deadline of connections
//!   not yet trusted: `--max-pending`, `--handshake-timeout`), `percent`
//!   (URL encoding), `shrink` (when a collection a burst grew gives its
//!   room back: the engine's heaps, the store's page table and places),
//!   [`service`] (systemd readiness and socket activation), [`user`]
//!   (`-u`).
//! * [`tls`]: TLS on the beanstalk port: its flags, certificates reloaded
//!   on SIGHUP, the handshake and the identity a client certificate
//!   proves; and the client side for sprout's own TLS clients.
//! * [`engine`]: the job state machine, pure and synchronous: every
//!   command's effect on jobs, tubes and connections, given the time.
//!   No sockets, no threads, no clock reads; table-tested with explicit
//!   times in `engine/tests/`.
//! * `store`: persistence behind one small trait: no store without `-b`
//!   (`store::Memory`); with it, a journal of our own in front of sled
//!   (`store::durable`). Its module docs explain the journal, group commit
//!   and `store::acknowledged`; `docs/durability.md` the rest.
//! * [`client`]: an async beanstalk client (benches, examples, the bridge).
//! * `shared`: the engine under one short lock, with the store its records
//!   go to and the mailboxes of connections blocked in `reserve`; `timer`:
//!   the one thread that fires what is due.
//! * `connection`: one client, from bytes in to bytes out; `fill`: the
//!   bodies its replies need that, with `-b`, only the store keeps.
//! * [`http`]: the `--http` side port (metrics, health, admin API,
//!   dashboard). [`bridge`]: the Redis TTL bridge, embedded or its own
//!   process (`sprout bridge`).
//! * [`cluster`]: `--cluster`, the job state replicated on NATS JetStream:
//!   the leader's group commits go to a stream instead of the journal
//!   (`cluster/writer.rs`, a `store::Store`), standbys follow it and pass
//!   their clients to the leader (with `--cluster-peer-*` over mutual TLS
//!   to its peer listener, saying who each client is:
//!   `cluster/peers.rs`); its map opens `cluster/mod.rs`.
//! * [`cli`]: beanstalkd's flags and sprout's own. [`server`]: listeners,
//!   the accept loop, signals, recovery at startup, shutdown; and the one
//!   place the parts are wired together, `server/start.rs` (flags checked
//!   before anything is bound, then ports, store or cluster, the embedded
//!   bridge; `sprout bridge` too), which only `main.rs` calls. [`admin`]:
//!   `sprout admin`, a shell client of the HTTP API. [`malloc`]: glibc's
//!   allocator kept lean in `sprout bridge` and a server with `-b`.
//!
//! # Life of a request
//!
//! 1. **Accept**: `server::Server::accept_on` takes a TCP or unix
//!    connection and spawns `connection::serve` for it in its own task (on
//!    a TLS listener, after the handshake in that task, [`tls`]; the
//!    embedded bridge gets the same through an in-process pipe,
//!    [`connection::LocalConnector`]).
//! 2. **Connection**: `connection.rs` reads into a buffer and decodes every
//!    complete request (`sprout_protocol::codec::ServerCodec`); a request
//!    the parser refuses is already its beanstalkd error, which
//!    `Engine::reject` counts as beanstalkd does. With `--auth`, the
//!    connection's `auth::Session` screens each request first: `auth`
//!    itself, AUTH_REQUIRED before it, FORBIDDEN outside the grants
//!    (`auth/verdict.rs`, from facts the engine reads out in
//!    `engine/access.rs`), the audit trail for admin actions.
//! 3. **Engine**: under one lock (`shared::Shared::lock`) the connection
//!    runs all it decoded, each with a fresh clock reading, through
//!    [`engine::Engine::execute`], which fires what is due and dispatches
//!    the command (`engine/commands.rs`). A change the store
//!    has no room for is refused there, before it happens, with
//!    `OUT_OF_MEMORY` (`engine/admission.rs`).
//! 4. **Journal and store**: after each command, `shared::Locked::submit`
//!    hands its [`engine::Record`]s to the store and gets the sequence
//!    number the answer must wait for. Before writing answers, the
//!    connection awaits `store::acknowledged`: with `-b`, until their
//!    records are written to the journal (and under `-f 0` synced),
//!    writing the journal itself if no other connection is at it (group
//!    commit, `store/journal.rs`); with `--cluster`, until a quorum of
//!    NATS servers holds them. Without either it returns at once.
//! 5. **Wakeups and the timer**: when the lock guard (`shared::Locked`)
//!    drops, its `Drop` submits what is left, posts the answers the engine
//!    made for connections blocked in `reserve` (`Engine::take_wakeups`)
//!    to their mailboxes, and rings the `alarm` if `Engine::next_deadline`
//!    moved closer. The `timer` thread sleeps until that deadline and calls
//!    `Engine::tick` under the same lock, so what it wakes goes out the
//!    same way; a parked connection writes its letter (`Connection::park`)
//!    once the store allows it.
//! 6. **Write**: `Connection::flush` encodes all the answers and writes
//!    them at once. Just before, `Connection::fail_unstored` turns the
//!    answers whose records the store failed to write into errors:
//!    `INSERTED` becomes `OUT_OF_MEMORY` (the job is dropped,
//!    `Engine::forget`); a delete, bury, release or kick becomes
//!    `INTERNAL_ERROR`. With `-b` a body longer than 32 bytes is the
//!    store's alone: the body cache filled it under the lock, or `fill.rs`
//!    reads it back from sled now (issue 33).
//!
//! # Where things are decided
//!
//! * A beanstalk command: `engine/commands.rs`, one function a command in
//!   protocol.txt's order (`engine/dispatch.rs` is the table that picks
//!   it, tuber's batch commands are in `engine/tuber_batch.rs`); the
//!   line after each name says what else it affects. `put`: `put_in`;
//!   `kick`: `Engine::kick`; `pause-tube`: `Engine::pause` (its end is
//!   `Engine::tick`'s `Unpause` arm, in `engine/calls.rs`); `stats-tube`:
//!   `stats_tube`, its document in `engine/stats.rs`. What every command
//!   shares: the state transitions (`make_ready`, `make_reserved`, …) in
//!   `engine/transitions.rs`, waiters and timers in `engine/waiting.rs`,
//!   the records for the store in `engine/recording.rs`.
//! * tuber's dialect (docs/extensions.md): the rules of `put`'s tags in
//!   `engine/ext.rs`, reached through `put_tagged` and through the one
//!   seam the core calls, `engine/dialect.rs` (`on_admitted`,
//!   `on_reserved`, `on_unreserved`, `on_deleted`, `on_delay_ended`,
//!   `kickable`, …, each a test of the job's `tagged` flag first); the
//!   batch commands in `engine/tuber_batch.rs`, the tags' bytes in the
//!   store in `store/extras.rs`.
//! * Who may run a command (`--auth`): `auth/verdict.rs`, one pure
//!   function over the principal's grants; who a connection is and what
//!   it may do before `auth`: `auth/session.rs`.
//! * The admin API's changes: `engine/admin_ops.rs`; its reads:
//!   `engine/browse.rs`; the HTTP around them: [`http`].
//! * The bridge settling a due timer (deliver, drop, release or re-arm):
//!   `bridge/decide.rs`'s `claim` and `settle` (pure), carried out by
//!   `Registry::settle` in `bridge/registry.rs` for the workers of
//!   `bridge/due.rs`; on the server, the `fire` command (`engine/fire.rs`)
//!   turns the timer into its delivery in one record.

pub mod admin;

/// The log target of the few lines that say what the server is doing
/// (where it listens, what it recovered, that it shuts down): shown at
/// info level even without `-V`, whose default is warnings only, so a
/// server started by hand is not silent.
pub const STATUS: &str = "sprout::status";
mod alarm;
pub mod auth;
mod binlog_stats;
pub mod bridge;
pub mod cli;
pub mod client;
pub mod cluster;
mod connection;
pub mod engine;
mod fill;
pub mod http;
pub mod malloc;
mod peer;
mod pending;
mod percent;
pub mod server;
pub mod service;
mod shared;
mod shrink;
mod store;
mod timer;
pub mod tls;
pub mod user;
