//! The beanstalk wire protocol as plain data.
//!
//! This crate knows the bytes of beanstalkd 1.13's protocol (`doc/protocol.txt`
//! plus the rules its `prot.c` applies where the text is vague) and nothing
//! about sockets, tasks or jobs. The server, the client, the Redis bridge, the
//! tests and the benches all speak through it, so there is one definition of
//! every command and every reply.
//!
//! - [`Command`]: a request, as the server receives it (a `put` carries its body).
//! - [`Response`]: a reply, as the client receives it.
//! - [`parse`]: the streaming command parser (server side) and response parser
//!   (client side), built with `nom`.
//! - [`encode`]: writers that append to a `BytesMut` without allocating.
//! - [`codec`]: `tokio-util` codecs for both ends of a connection.
//!
//! One extension over beanstalkd: the delays of `put`, `release` and
//! `pause-tube` and the timeout of `reserve-with-timeout` may be written as a
//! non-negative decimal fraction (`0.25`, `1.5`, `1.25e-1`; not `.5`), exact
//! to the nanosecond. Plain integers mean exactly what they mean to
//! beanstalkd; no line a classic client sends is read differently. (A fraction
//! after `reserve-with-timeout` is the one place beanstalkd accepted the line
//! before, reading only the whole seconds; see [`parse`].)
//!
//! The extensions of tuber's dialect (`tuberq/tuber`, `docs/protocol.md`):
//! [`Tags`] after a `put`'s size (`idp:`, `grp:`, `aft:`, `con:`), and the
//! commands `reserve-batch`, `delete-batch`, `flush-tube`, `peek-reserved`
//! and `stats-group` with their replies. A line a classic client sends
//! reads as before: only well-formed tags are accepted after a `put`'s size,
//! and the new command words were `BAD_FORMAT` or `UNKNOWN_COMMAND` there.
//!
//! sprout's own extension, for its Redis bridge: `fire <id> <pri> <ttr>
//! <bytes>` and a body, which turns a job the client holds reserved into a
//! new ready job of the tube it uses, in one step (answered `INSERTED
//! <id>` with the new job's id). The word was `UNKNOWN_COMMAND` before.
//!
//! Authentication (a server started with `--auth`): `auth <token>`,
//! beanstalkd-rs's line, answered `AUTHENTICATED` or `UNAUTHORIZED`; a
//! command before it answers `AUTH_REQUIRED`, one outside the principal's
//! grants `FORBIDDEN`. Only a decoder made with
//! [`codec::ServerCodec::with_auth`] reads the word; any other answers it
//! `UNKNOWN_COMMAND`, as beanstalkd does.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

pub mod codec;
pub mod encode;
pub mod parse;

/// Longest command line beanstalkd accepts, CRLF included.
pub const MAX_LINE_LEN: usize = 224;
/// Longest tube name, in bytes.
pub const MAX_TUBE_NAME_LEN: usize = 200;
/// beanstalkd's default `-z`: the largest job body accepted.
pub const DEFAULT_MAX_JOB_SIZE: u32 = 65_535;
/// The largest `-z` beanstalkd allows.
pub const MAX_JOB_SIZE_LIMIT: u32 = 1 << 30;
/// Jobs with a priority below this count as "urgent" in the stats.
pub const URGENT_THRESHOLD: u32 = 1024;
/// The largest delay, TTR or pause: beanstalkd reads them as `u32` seconds.
pub const MAX_SECONDS: u64 = u32::MAX as u64;

/// A job id. Ids start at 1 and are never reused.
pub type JobId = u64;

/// A valid tube name: 1–200 bytes from `A-Za-z0-9-+/;.$_()`, not starting with `-`.
///
/// Shared, so the engine, replies and store records clone it without copying.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TubeName(Arc<str>);

impl TubeName {
    /// Checks `name` against beanstalkd's rules.
    pub fn new(name: &[u8]) -> Option<TubeName> {
        let valid = !name.is_empty()
            && name.len() <= MAX_TUBE_NAME_LEN
            && name[0] != b'-'
            && name.iter().all(|&b| is_name_char(b));
        if !valid {
            return None;
        }
        // Every name char is ASCII, so the bytes are UTF-8.
        std::str::from_utf8(name).ok().map(|s| TubeName(s.into()))
    }

    /// The tube every connection uses and watches when it connects.
    pub fn default_tube() -> TubeName {
        TubeName("default".into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The characters beanstalkd allows in a tube name.
pub fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-+/;.$_()".contains(&b)
}

impl fmt::Debug for TubeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for TubeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A request from a client.
///
/// Durations are what the client asked for; the server applies beanstalkd's
/// adjustments (a TTR below one second becomes one second, a pause of zero
/// becomes the shortest possible pause).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Put {
        pri: u32,
        delay: Duration,
        ttr: Duration,
        body: Bytes,
        /// The extension tags; `None` for every classic `put`.
        tags: Option<Box<Tags>>,
    },
    Use(TubeName),
    Reserve,
    ReserveWithTimeout(Duration),
    ReserveJob(JobId),
    Delete(JobId),
    Release {
        id: JobId,
        pri: u32,
        delay: Duration,
    },
    Bury {
        id: JobId,
        pri: u32,
    },
    Touch(JobId),
    Watch(TubeName),
    Ignore(TubeName),
    Peek(JobId),
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Kick(u32),
    KickJob(JobId),
    Stats,
    StatsJob(JobId),
    StatsTube(TubeName),
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube {
        tube: TubeName,
        delay: Duration,
    },
    Quit,
    /// `reserve-batch <n>`: up to `n` (1–[`MAX_BATCH`]) ready jobs at once,
    /// without waiting.
    ReserveBatch(u32),
    /// `reserve-batch <n> <timeout>`: the same, but with no job ready it
    /// waits up to `timeout` for the first one (tuber 0.8's long poll).
    ReserveBatchWait {
        n: u32,
        timeout: Duration,
    },
    /// `delete-batch <id>...`: 1–[`MAX_BATCH`] ids.
    DeleteBatch(Vec<JobId>),
    /// `flush-tube <tube>`: deletes every job of the tube.
    FlushTube(TubeName),
    /// `flush-buried <tube>`: deletes the tube's buried jobs.
    FlushBuried(TubeName),
    /// `drain`: what SIGUSR1 does (puts answer DRAINING).
    Drain,
    /// `undrain`: puts are taken again.
    Undrain,
    /// `peek-reserved`: the reserved job of the used tube whose TTR runs
    /// out first.
    PeekReserved,
    /// `stats-group <name>`.
    StatsGroup(Box<str>),
    /// `fire <id> <pri> <ttr> <bytes>` + body (sprout's extension): job
    /// `id`, reserved by this client, is replaced in one step by a new
    /// ready job of the used tube with this body, priority and TTR.
    Fire {
        id: JobId,
        pri: u32,
        ttr: Duration,
        body: Bytes,
    },
    /// `auth <token>` (with `--auth`): the token is everything after the
    /// space, up to the CRLF.
    Auth(Token),
}

/// A secret an `auth` line carries. Its `Debug` shows no byte of it, so
/// no log line of a command can leak one.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Bytes);

impl Token {
    pub fn new(token: impl Into<Bytes>) -> Token {
        Token(token.into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// The most jobs `reserve-batch` hands out and ids `delete-batch` takes.
pub const MAX_BATCH: usize = 1000;

/// A tag's key or group name: a tube name's rules (1–200 bytes of
/// `A-Za-z0-9-+/;.$_()`, not starting with `-`), so never a `:`.
pub type TagName = Box<str>;

/// The extension tags of a `put`, in tuber's dialect. Each may appear once
/// (a repeated tag: the last one counts, as in tuber).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tags {
    /// `idp:<key>[:<ttl>]`: at most one live job with this key in the
    /// tube; after its delete the key still deduplicates for `ttl` seconds.
    pub idp: Option<(TagName, u32)>,
    /// `grp:<name>`: the job belongs to this group.
    pub grp: Option<TagName>,
    /// `aft:<name>`: the job is held until every job of this group is
    /// deleted.
    pub aft: Option<TagName>,
    /// `con:<key>[:<n>]`: at most `n` (default 1, never 0) jobs with this
    /// key reserved at once.
    pub con: Option<(TagName, u32)>,
}

/// The state a deduplicated `put` reports (`INSERTED <id> <STATE>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DupState {
    Ready,
    Reserved,
    Delayed,
    Buried,
    /// Deleted, and the key's TTL has not run out.
    Deleted,
}

impl DupState {
    pub fn name(self) -> &'static str {
        match self {
            DupState::Ready => "READY",
            DupState::Reserved => "RESERVED",
            DupState::Delayed => "DELAYED",
            DupState::Buried => "BURIED",
            DupState::Deleted => "DELETED",
        }
    }
}

/// The kind of a command, without its arguments: what `stats` counts
/// (`cmd-put`, `cmd-peek`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Put,
    Use,
    Reserve,
    ReserveWithTimeout,
    ReserveJob,
    Delete,
    Release,
    Bury,
    Touch,
    Watch,
    Ignore,
    Peek,
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Kick,
    KickJob,
    Stats,
    StatsJob,
    StatsTube,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube,
    Quit,
    ReserveBatch,
    DeleteBatch,
    FlushTube,
    PeekReserved,
    StatsGroup,
    Fire,
    Auth,
    FlushBuried,
    Drain,
    Undrain,
}

impl Op {
    /// Every kind, in a fixed order (usable as an index with `as usize`).
    pub const ALL: [Op; 35] = [
        Op::Put,
        Op::Use,
        Op::Reserve,
        Op::ReserveWithTimeout,
        Op::ReserveJob,
        Op::Delete,
        Op::Release,
        Op::Bury,
        Op::Touch,
        Op::Watch,
        Op::Ignore,
        Op::Peek,
        Op::PeekReady,
        Op::PeekDelayed,
        Op::PeekBuried,
        Op::Kick,
        Op::KickJob,
        Op::Stats,
        Op::StatsJob,
        Op::StatsTube,
        Op::ListTubes,
        Op::ListTubeUsed,
        Op::ListTubesWatched,
        Op::PauseTube,
        Op::Quit,
        Op::ReserveBatch,
        Op::DeleteBatch,
        Op::FlushTube,
        Op::PeekReserved,
        Op::StatsGroup,
        Op::Fire,
        Op::Auth,
        Op::FlushBuried,
        Op::Drain,
        Op::Undrain,
    ];
}

impl Op {
    /// The command word on the wire (`put`, `peek-ready`, …); `stats` names
    /// its counter `cmd-` followed by this word.
    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Use => "use",
            Op::Reserve => "reserve",
            Op::ReserveWithTimeout => "reserve-with-timeout",
            Op::ReserveJob => "reserve-job",
            Op::Delete => "delete",
            Op::Release => "release",
            Op::Bury => "bury",
            Op::Touch => "touch",
            Op::Watch => "watch",
            Op::Ignore => "ignore",
            Op::Peek => "peek",
            Op::PeekReady => "peek-ready",
            Op::PeekDelayed => "peek-delayed",
            Op::PeekBuried => "peek-buried",
            Op::Kick => "kick",
            Op::KickJob => "kick-job",
            Op::Stats => "stats",
            Op::StatsJob => "stats-job",
            Op::StatsTube => "stats-tube",
            Op::ListTubes => "list-tubes",
            Op::ListTubeUsed => "list-tube-used",
            Op::ListTubesWatched => "list-tubes-watched",
            Op::PauseTube => "pause-tube",
            Op::Quit => "quit",
            Op::ReserveBatch => "reserve-batch",
            Op::DeleteBatch => "delete-batch",
            Op::FlushTube => "flush-tube",
            Op::PeekReserved => "peek-reserved",
            Op::StatsGroup => "stats-group",
            Op::Fire => "fire",
            Op::Auth => "auth",
            Op::FlushBuried => "flush-buried",
            Op::Drain => "drain",
            Op::Undrain => "undrain",
        }
    }
}

impl Command {
    pub fn op(&self) -> Op {
        match self {
            Command::Put { .. } => Op::Put,
            Command::Use(_) => Op::Use,
            Command::Reserve => Op::Reserve,
            Command::ReserveWithTimeout(_) => Op::ReserveWithTimeout,
            Command::ReserveJob(_) => Op::ReserveJob,
            Command::Delete(_) => Op::Delete,
            Command::Release { .. } => Op::Release,
            Command::Bury { .. } => Op::Bury,
            Command::Touch(_) => Op::Touch,
            Command::Watch(_) => Op::Watch,
            Command::Ignore(_) => Op::Ignore,
            Command::Peek(_) => Op::Peek,
            Command::PeekReady => Op::PeekReady,
            Command::PeekDelayed => Op::PeekDelayed,
            Command::PeekBuried => Op::PeekBuried,
            Command::Kick(_) => Op::Kick,
            Command::KickJob(_) => Op::KickJob,
            Command::Stats => Op::Stats,
            Command::StatsJob(_) => Op::StatsJob,
            Command::StatsTube(_) => Op::StatsTube,
            Command::ListTubes => Op::ListTubes,
            Command::ListTubeUsed => Op::ListTubeUsed,
            Command::ListTubesWatched => Op::ListTubesWatched,
            Command::PauseTube { .. } => Op::PauseTube,
            Command::Quit => Op::Quit,
            Command::ReserveBatch(_) | Command::ReserveBatchWait { .. } => Op::ReserveBatch,
            Command::DeleteBatch(_) => Op::DeleteBatch,
            Command::FlushTube(_) => Op::FlushTube,
            Command::PeekReserved => Op::PeekReserved,
            Command::StatsGroup(_) => Op::StatsGroup,
            Command::Fire { .. } => Op::Fire,
            Command::Auth(_) => Op::Auth,
            Command::FlushBuried(_) => Op::FlushBuried,
            Command::Drain => Op::Drain,
            Command::Undrain => Op::Undrain,
        }
    }
}

/// The error replies the parser itself decides on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    BadFormat,
    UnknownCommand,
    ExpectedCrlf,
    JobTooBig,
}

impl From<ProtocolError> for Response {
    fn from(e: ProtocolError) -> Response {
        match e {
            ProtocolError::BadFormat => Response::BadFormat,
            ProtocolError::UnknownCommand => Response::UnknownCommand,
            ProtocolError::ExpectedCrlf => Response::ExpectedCrlf,
            ProtocolError::JobTooBig => Response::JobTooBig,
        }
    }
}

/// A request the server must refuse, and the stats it still touches.
///
/// beanstalkd counts some commands before it finds them wrong: a `put` whose
/// body is too big, lacks its CRLF or has trailing garbage after the size still
/// counts in `cmd-put`, and a `pause-tube` with an invalid name still counts
/// in `cmd-pause-tube`. `counted` carries that so `stats` reads the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub error: ProtocolError,
    pub counted: Option<Op>,
}

/// What the server-side decoder yields for each request on the wire.
pub type Request = Result<Command, Rejected>;

/// A reply from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// `INSERTED <id>`
    Inserted(JobId),
    /// `INSERTED <id> <STATE>[ <pri>]`: an `idp:` put found job `id`
    /// already there (`pri`: the priority it raised the job to).
    InsertedDup {
        id: JobId,
        state: DupState,
        pri: Option<u32>,
    },
    /// `BURIED <id>`: a put that the server could not queue, so buried at once.
    BuriedId(JobId),
    /// `BURIED`: the answer to `bury` (and to a `release` the server could not queue).
    Buried,
    ExpectedCrlf,
    JobTooBig,
    Draining,
    /// `NOT_DRAINING`: the answer to `undrain`.
    NotDraining,
    /// `USING <tube>`
    Using(TubeName),
    /// `RESERVED <id> <bytes>` + body
    Reserved {
        id: JobId,
        body: Bytes,
    },
    DeadlineSoon,
    TimedOut,
    Deleted,
    NotFound,
    Released,
    Touched,
    /// `WATCHING <count>`
    Watching(u32),
    NotIgnored,
    /// `FOUND <id> <bytes>` + body
    Found {
        id: JobId,
        body: Bytes,
    },
    /// `KICKED`: the answer to `kick-job`.
    Kicked,
    /// `KICKED <count>`: the answer to `kick`.
    KickedCount(u32),
    /// `OK <bytes>` + a YAML document (stats and lists).
    Ok(Bytes),
    Paused,
    OutOfMemory,
    InternalError,
    BadFormat,
    UnknownCommand,
    /// `RESERVED_BATCH <n>`, then `RESERVED <id> <bytes>` and the body for
    /// each job.
    ReservedBatch(Vec<(JobId, Bytes)>),
    /// `DELETED_BATCH <deleted> <not_found>`
    DeletedBatch {
        deleted: u32,
        not_found: u32,
    },
    /// `FLUSHED <count>`
    Flushed(u64),
    /// `AUTHENTICATED`: the token of an `auth` was good.
    Authenticated,
    /// `UNAUTHORIZED`: it was not (or this address failed too often).
    Unauthorized,
    /// `AUTH_REQUIRED`: the connection must `auth` first.
    AuthRequired,
    /// `FORBIDDEN`: outside the principal's grants; nothing changed.
    Forbidden,
}
