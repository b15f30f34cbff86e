//! The engine's state: [`Engine`] and its tables, what it is given at
//! start, and the small lookups every command shares.

use rustc_hash::FxHashMap;
use sprout_protocol::{Command, JobId, Response};

use super::admission::Room;
use super::bodies::INLINE;
use super::clock::Time;
use super::conn::{Conn, ConnId};
use super::ext_tables::Ext;
use super::host::Host;
use super::job::State;
use super::records::Record;
use super::setup::EngineConfig;
use super::stats::{ClusterStats, Stats};
use super::table::{JobSlot, JobTable};
use super::timers::{TimerKey, Timers};
use super::tube::Tubes;
use super::tube_ix::TubeIx;

/// What a command does to the connection that sent it.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answer at once.
    Reply(Response),
    /// The connection is now blocked in `reserve`: its answer will come
    /// through [`Engine::take_wakeups`].
    Wait,
    /// `quit`: close the connection without an answer.
    Close,
    /// Not finished: run this command again once others have had the
    /// lock (`flush-tube`'s steps, `tuber_batch.rs`).
    Again(Command),
}

/// The whole in-memory state of the server.
pub struct Engine {
    pub(super) config: EngineConfig,
    pub(super) host: Host,
    pub(super) started: Time,
    /// The latest moment any call has passed in (calls may race to the lock
    /// with slightly older clock readings; time never goes back here).
    pub(super) now: Time,
    pub(super) jobs: JobTable,
    pub(super) tubes: Tubes,
    /// By id. Looked up several times per command; ids are handed out
    /// here in sequence, never chosen by a client, so the fast unkeyed
    /// FxHash is safe.
    pub(super) conns: FxHashMap<ConnId, Conn>,
    pub(super) timers: Timers,
    pub(super) stats: Stats,
    pub(super) wakeups: Vec<(ConnId, Response)>,
    pub(super) journal: Vec<Record>,
    pub(super) next_job_id: JobId,
    pub(super) next_conn: ConnId,
    pub(super) next_wait_seq: u64,
    pub(super) next_bury_seq: u64,
    pub(super) draining: bool,
    /// What the store can still take (see `admission.rs`).
    pub(super) room: Room,
    /// The store's current journal file (by slot, the file each job's
    /// latest record went to is in the job table).
    pub(super) file: u32,
    /// The oldest journal file the store still keeps, as it last said.
    pub(super) oldest_file: u64,
    /// In cluster mode, this node's part in it (`stats` shows it).
    pub(super) cluster: Option<ClusterStats>,
    /// tuber's tags of tagged jobs (`ext.rs`).
    pub(super) ext: Ext,
}

impl Engine {
    pub fn new(config: EngineConfig, now: Time) -> Engine {
        let mut jobs = JobTable::new();
        if config.bodies_in_store {
            jobs.leave_bodies_to_store(INLINE);
        }
        Engine {
            config,
            host: Host::read(),
            started: now,
            now,
            jobs,
            tubes: Tubes::new(),
            conns: FxHashMap::default(),
            timers: Timers::default(),
            stats: Stats::default(),
            wakeups: Vec::new(),
            journal: Vec::new(),
            next_job_id: 1,
            next_conn: 1,
            next_wait_seq: 0,
            next_bury_seq: 0,
            draining: false,
            room: Room::UNLIMITED,
            file: 0,
            oldest_file: 0,
            cluster: None,
            ext: Ext::default(),
        }
    }

    #[cfg(test)]
    pub(super) fn timers_len(&self) -> usize {
        self.timers.len()
    }

    pub(super) fn conn_mut(&mut self, conn: ConnId) -> &mut Conn {
        self.conns.get_mut(&conn).expect("known connection")
    }

    /// The tube `conn` uses.
    pub(super) fn used(&self, conn: ConnId) -> TubeIx {
        self.conns[&conn].using
    }

    /// The slot of job `id` if `conn` holds it reserved.
    pub(super) fn owned(&self, conn: ConnId, id: JobId) -> Option<JobSlot> {
        let slot = self.jobs.find(id)?;
        let job = &self.jobs[slot];
        let holds = job.state() == State::Reserved && self.conns[&conn].holds(job.deadline, slot);
        holds.then_some(slot)
    }

    pub(super) fn found(&self, slot: Option<JobSlot>) -> Response {
        match slot {
            Some(slot) => Response::Found {
                id: self.jobs[slot].id,
                body: self.jobs.body_bytes(slot),
            },
            None => Response::NotFound,
        }
    }

    pub(super) fn reserved_reply(&self, slot: JobSlot) -> Response {
        Response::Reserved {
            id: self.jobs[slot].id,
            body: self.jobs.body_bytes(slot),
        }
    }

    pub(super) fn set_producer(&mut self, conn: ConnId) {
        let c = self.conn_mut(conn);
        if !std::mem::replace(&mut c.producer, true) {
            self.stats.producers += 1;
        }
    }

    pub(super) fn set_worker(&mut self, conn: ConnId) {
        let c = self.conn_mut(conn);
        if !std::mem::replace(&mut c.worker, true) {
            self.stats.workers += 1;
        }
    }

    pub(super) fn drop_tube_ref(&mut self, t: TubeIx) {
        if self.tubes.remove_if_unused(t) {
            self.timers.set(TimerKey::Unpause(t), None);
        }
    }
}
