//! The engine's unit tests: every command against explicit clock values, so
//! timing is exact and nothing sleeps; the helpers they share are here, the
//! tests in a file per part of the engine.

mod admin;
mod cluster;
mod commands_tests;
mod ext_tests;
mod internals;
mod reserving;
mod stats_tests;
mod stored_bodies;
mod tubes;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::{Command as C, JobId, Op, ProtocolError, Rejected, Response as R, TubeName};

use super::heap::{ByDeadline, ByPriority, SlotHeap};
use super::job::JobRow;
use super::profile::Profile;
use super::table::{JobSlot, JobTable};
use super::tube_ix::{TubeIx, DEFAULT_TUBE};
use super::{ClusterStats, ConnId, Engine, EngineConfig, JobImage, Outcome, Record, Stored, Time};

const S: Time = 1_000_000;

fn engine() -> Engine {
    engine_with(false)
}

/// An engine at time 0 with beanstalkd's default limits, journaling or not.
pub(super) fn engine_with(journal: bool) -> Engine {
    Engine::new(
        EngineConfig {
            max_job_size: 65_535,
            binlog_max_size: 10_485_760,
            journal,
            binlog: Default::default(),
            jobs_budget: None,
            bodies_in_store: false,
        },
        0,
    )
}

pub(super) fn name(s: &str) -> TubeName {
    TubeName::new(s.as_bytes()).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub(super) fn put_cmd(pri: u32, delay: Duration, ttr: u64, body: &'static str) -> C {
    C::Put {
        pri,
        delay,
        ttr: secs(ttr),
        body: Bytes::from_static(body.as_bytes()),
        tags: None,
    }
}

pub(super) fn reply(e: &mut Engine, c: ConnId, cmd: C, now: Time) -> R {
    match e.execute(c, cmd, now) {
        Outcome::Reply(r) => r,
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn put(e: &mut Engine, c: ConnId, pri: u32, delay: Duration, ttr: u64, now: Time) -> JobId {
    match reply(e, c, put_cmd(pri, delay, ttr, "body"), now) {
        R::Inserted(id) => id,
        r => panic!("expected INSERTED, got {r:?}"),
    }
}

fn put_ready(e: &mut Engine, c: ConnId, pri: u32, now: Time) -> JobId {
    put(e, c, pri, Duration::ZERO, 60, now)
}

fn reserved(r: R) -> JobId {
    match r {
        R::Reserved { id, .. } => id,
        r => panic!("expected RESERVED, got {r:?}"),
    }
}

fn reserve(e: &mut Engine, c: ConnId, now: Time) -> JobId {
    reserved(reply(e, c, C::Reserve, now))
}

fn wakeups(e: &mut Engine) -> Vec<(ConnId, R)> {
    e.take_wakeups().collect()
}

fn woken_reserved(e: &mut Engine) -> Vec<(ConnId, JobId)> {
    wakeups(e)
        .into_iter()
        .map(|(c, r)| (c, reserved(r)))
        .collect()
}

fn yaml(r: R) -> String {
    match r {
        R::Ok(body) => String::from_utf8(body.to_vec()).unwrap(),
        r => panic!("expected OK, got {r:?}"),
    }
}

fn field(doc: &str, key: &str) -> String {
    let prefix = format!("{key}: ");
    doc.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {key} in {doc}"))
        .to_string()
}

fn server_stat(e: &mut Engine, c: ConnId, key: &str, now: Time) -> String {
    field(&yaml(reply(e, c, C::Stats, now)), key)
}

fn job_stat(e: &mut Engine, c: ConnId, id: JobId, key: &str, now: Time) -> String {
    field(&yaml(reply(e, c, C::StatsJob(id), now)), key)
}

fn tube_stat(e: &mut Engine, c: ConnId, tube: &str, key: &str, now: Time) -> String {
    field(&yaml(reply(e, c, C::StatsTube(name(tube)), now)), key)
}

fn use_tube(e: &mut Engine, c: ConnId, tube: &str) {
    assert_eq!(reply(e, c, C::Use(name(tube)), 0), R::Using(name(tube)));
}

fn watch_only(e: &mut Engine, c: ConnId, tubes: &[&str]) {
    for t in tubes {
        reply(e, c, C::Watch(name(t)), 0);
    }
    if !tubes.contains(&"default") {
        reply(e, c, C::Ignore(name("default")), 0);
    }
}

fn list(e: &mut Engine, c: ConnId, cmd: C) -> String {
    yaml(reply(e, c, cmd, 0))
}
