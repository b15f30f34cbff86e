//! The server's counters and the exact YAML documents of `stats`,
//! `stats-job`, `stats-tube` and the tube lists.
//!
//! Keys, order and number formats follow beanstalkd 1.13's `STATS_FMT`,
//! `STATS_JOB_FMT`, `STATS_TUBE_FMT` and `do_list_tubes`, so clients that
//! parse them (or tests that compare them) see no difference. Each document
//! is returned without the final CRLF, which the encoder appends after an
//! `OK <n>` body.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use sprout_protocol::{Op, Tags, TubeName};

use super::clock::Time;
use super::counts::Counts;
use super::host::{self, Host};
use super::job::{JobRow, State};
use super::profile::Profile;
use super::setup::EngineConfig;
use super::tube::Tube;

const SECOND: Time = 1_000_000;

/// Server-wide counters. Per-tube counters live in [`Tube`], per-job ones
/// in [`JobRow`].
#[derive(Clone, Default)]
pub(super) struct Stats {
    ops: OpCounts,
    pub(super) urgent: u64,
    pub(super) ready: u64,
    pub(super) reserved: u64,
    pub(super) delayed: u64,
    pub(super) buried: u64,
    pub(super) timeouts: u64,
    pub(super) total_jobs: u64,
    pub(super) waiting: u64,
    pub(super) connections: u32,
    pub(super) total_connections: u32,
    pub(super) producers: u32,
    pub(super) workers: u32,
}

impl Stats {
    /// Counts one command of kind `op` (`cmd-*`).
    pub(super) fn count(&mut self, op: Op) {
        self.ops.0[op as usize] += 1;
    }

    fn op(&self, op: Op) -> u64 {
        self.ops.0[op as usize]
    }
}

/// By [`Op`]: how many commands of each kind (more than the 32 an array
/// derives `Default` for).
#[derive(Clone)]
struct OpCounts([u64; Op::ALL.len()]);

impl Default for OpCounts {
    fn default() -> Self {
        OpCounts([0; Op::ALL.len()])
    }
}

/// What `stats` reports besides the counters.
pub(super) struct ServerFacts<'a> {
    pub(super) config: &'a EngineConfig,
    pub(super) host: &'a Host,
    pub(super) tubes: usize,
    pub(super) uptime: Time,
    pub(super) draining: bool,
    pub(super) cluster: Option<&'a ClusterStats>,
}

/// A cluster node's lines in `stats`, after beanstalkd's own keys, and
/// the members it sees (for `/api/cluster`, not in `stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterStats {
    pub name: String,
    pub node: String,
    /// `leader` or `standby`.
    pub role: &'static str,
    /// The leader's beanstalk address, as far as this node knows.
    pub leader: String,
    /// Counts takeovers: each leader's is one more.
    pub epoch: u64,
    /// Every node's id and advertised address, from their claims.
    pub members: Vec<(String, String)>,
}

/// The last lines of a cluster node's `stats`: the node that answered.
/// The leader's own name itself; a standby that passes a client's `stats`
/// on puts its own in their place (`cluster/via.rs`), so a client can
/// tell which node it reached while the figures stay the leader's.
pub fn via_lines(node: &str, role: &str) -> String {
    format!("{VIA_NODE}: \"{node}\"\n{VIA_ROLE}: {role}\n")
}

/// The keys of [`via_lines`].
pub const VIA_NODE: &str = "cluster-via-node";
pub const VIA_ROLE: &str = "cluster-via-role";

/// The body cache's keys (`store/body_cache.rs`), in the order `stats`
/// shows them; `/metrics` has them as `sprout_body_cache_*`.
pub const BODY_CACHE_KEYS: [&str; 5] = [
    "body-cache-bytes",
    "body-cache-max-bytes",
    "body-cache-hits",
    "body-cache-misses",
    "body-cache-read-errors",
];

/// The `stats` document.
pub(super) fn server(s: &Stats, server: &ServerFacts<'_>) -> Bytes {
    let ((user_s, user_us), (sys_s, sys_us)) = host::rusage();
    let mut out = String::with_capacity(1024);
    out.push_str("---\n");
    let mut line = |key: &str, value: &dyn std::fmt::Display| {
        let _ = writeln!(out, "{key}: {value}");
    };
    line("current-jobs-urgent", &s.urgent);
    line("current-jobs-ready", &s.ready);
    line("current-jobs-reserved", &s.reserved);
    line("current-jobs-delayed", &s.delayed);
    line("current-jobs-buried", &s.buried);
    for (key, op) in [
        ("cmd-put", Op::Put),
        ("cmd-peek", Op::Peek),
        ("cmd-peek-ready", Op::PeekReady),
        ("cmd-peek-delayed", Op::PeekDelayed),
        ("cmd-peek-buried", Op::PeekBuried),
        ("cmd-reserve", Op::Reserve),
        ("cmd-reserve-with-timeout", Op::ReserveWithTimeout),
        ("cmd-delete", Op::Delete),
        ("cmd-release", Op::Release),
        ("cmd-use", Op::Use),
        ("cmd-watch", Op::Watch),
        ("cmd-ignore", Op::Ignore),
        ("cmd-bury", Op::Bury),
        ("cmd-kick", Op::Kick),
        ("cmd-touch", Op::Touch),
        ("cmd-stats", Op::Stats),
        ("cmd-stats-job", Op::StatsJob),
        ("cmd-stats-tube", Op::StatsTube),
        ("cmd-list-tubes", Op::ListTubes),
        ("cmd-list-tube-used", Op::ListTubeUsed),
        ("cmd-list-tubes-watched", Op::ListTubesWatched),
        ("cmd-pause-tube", Op::PauseTube),
    ] {
        line(key, &s.op(op));
    }
    line("job-timeouts", &s.timeouts);
    line("total-jobs", &s.total_jobs);
    line("max-job-size", &server.config.max_job_size);
    line("current-tubes", &server.tubes);
    line("current-connections", &s.connections);
    line("current-producers", &s.producers);
    line("current-workers", &s.workers);
    line("current-waiting", &s.waiting);
    line("total-connections", &s.total_connections);
    line("pid", &server.host.pid);
    line("version", &Quoted(env!("CARGO_PKG_VERSION")));
    line("rusage-utime", &format_args!("{user_s}.{user_us:06}"));
    line("rusage-stime", &format_args!("{sys_s}.{sys_us:06}"));
    line("uptime", &(server.uptime / SECOND));
    let binlog = &server.config.binlog;
    let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    line("binlog-oldest-index", &read(&binlog.oldest_index));
    line("binlog-current-index", &read(&binlog.current_index));
    line("binlog-records-migrated", &read(&binlog.records_migrated));
    line("binlog-records-written", &read(&binlog.records_written));
    line("binlog-max-size", &server.config.binlog_max_size);
    line("draining", &server.draining);
    line("id", &server.host.instance);
    line("hostname", &Quoted(&server.host.hostname));
    line("os", &Quoted(&server.host.os));
    line("platform", &Quoted(&server.host.platform));
    // sprout's own, after beanstalkd's keys, and only with a body cache
    // (`-b`): memory mode's document stays beanstalkd's.
    let cache = &binlog.body_cache;
    if cache.present.load(Ordering::Relaxed) {
        line(BODY_CACHE_KEYS[0], &read(&cache.bytes));
        line(BODY_CACHE_KEYS[1], &read(&cache.max_bytes));
        line(BODY_CACHE_KEYS[2], &read(&cache.hits));
        line(BODY_CACHE_KEYS[3], &read(&cache.misses));
        line(BODY_CACHE_KEYS[4], &read(&cache.read_errors));
    }
    if let Some(c) = server.cluster {
        line("cluster-name", &Quoted(&c.name));
        line("cluster-node", &Quoted(&c.node));
        line("cluster-role", &c.role);
        line("cluster-leader", &Quoted(&c.leader));
        line("cluster-epoch", &c.epoch);
        out.push_str(&via_lines(&c.node, c.role));
    }
    finish(out)
}

/// The `stats-job` document: beanstalkd's keys, then, for a tagged job
/// only, its tags under tuber's key names (an untagged job's document
/// stays byte for byte beanstalkd's; tuber lists the tag keys empty).
pub(super) fn job(
    job: &JobRow,
    profile: Profile,
    counts: Counts,
    tube: &TubeName,
    file: u64,
    tags: Option<&Tags>,
    now: Time,
) -> Bytes {
    let time_left = match job.state() {
        State::Reserved | State::Delayed => seconds_between(now, job.deadline),
        State::Ready | State::Buried => 0,
    };
    let mut out = String::with_capacity(256);
    let _ = write!(
        out,
        "---\nid: {}\ntube: \"{}\"\nstate: {}\npri: {}\nage: {}\ndelay: {}\nttr: {}\n\
         time-left: {}\nfile: {}\nreserves: {}\ntimeouts: {}\nreleases: {}\nburies: {}\nkicks: {}\n",
        job.id,
        tube,
        job.state().name(),
        job.pri,
        seconds_between(job.created, now),
        profile.delay,
        profile.ttr,
        time_left,
        file,
        counts.reserves,
        counts.timeouts,
        counts.releases,
        counts.buries,
        counts.kicks,
    );
    if let Some(t) = tags {
        let (idp, idp_ttl) = t.idp.as_ref().map_or(("", 0), |(k, ttl)| (&**k, *ttl));
        let (con, con_limit) = t.con.as_ref().map_or(("", 0), |(k, n)| (&**k, *n));
        let _ = write!(
            out,
            "idempotency-key: {idp}\nidempotency-ttl: {idp_ttl}\ngroup: {}\nafter-group: {}\n\
             concurrency-key: {con}\nconcurrency-limit: {con_limit}\n",
            t.grp.as_ref().map_or("", |g| &**g),
            t.aft.as_ref().map_or("", |g| &**g),
        );
    }
    finish(out)
}

/// The `stats-tube` document.
pub(super) fn tube(tube: &Tube, now: Time) -> Bytes {
    let time_left = if tube.is_paused() {
        seconds_between(now, tube.unpause_at)
    } else {
        0
    };
    let mut out = String::with_capacity(512);
    let _ = write!(
        out,
        "---\nname: \"{}\"\ncurrent-jobs-urgent: {}\ncurrent-jobs-ready: {}\n\
         current-jobs-reserved: {}\ncurrent-jobs-delayed: {}\ncurrent-jobs-buried: {}\n\
         total-jobs: {}\ncurrent-using: {}\ncurrent-watching: {}\ncurrent-waiting: {}\n\
         cmd-delete: {}\ncmd-pause-tube: {}\npause: {}\npause-time-left: {}\n",
        tube.name,
        tube.urgent,
        tube.ready.len(),
        tube.reserved,
        tube.delayed.len(),
        tube.buried.len(),
        tube.total_jobs,
        tube.using,
        tube.watching,
        tube.waiters.len(),
        tube.deletes,
        tube.pauses,
        tube.pause / SECOND,
        time_left,
    );
    finish(out)
}

/// A `list-tubes` / `list-tubes-watched` document.
pub(super) fn tube_list<'a>(names: impl Iterator<Item = &'a TubeName>) -> Bytes {
    let mut out = String::from("---\n");
    for name in names {
        let _ = writeln!(out, "- {name}");
    }
    finish(out)
}

/// Whole seconds from `from` to `to`, truncated toward zero as C does.
fn seconds_between(from: Time, to: Time) -> i64 {
    (to as i64 - from as i64) / SECOND as i64
}

struct Quoted<'a>(&'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", self.0)
    }
}

fn finish(out: String) -> Bytes {
    Bytes::from(out.into_bytes())
}
