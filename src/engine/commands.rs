//! Every beanstalk command, one function each, in protocol.txt's order
//! (`dispatch.rs` is the table from a command to its function; tuber's
//! batch commands are in `tuber_batch.rs`).
//!
//! A command's function is the whole command: what it checks, what it
//! changes, what it answers; the line after its name says what else it
//! affects. The state transitions they share (`take_out`, `make_ready`,
//! `make_reserved`, `unreserve`, ...) are in `transitions.rs` and keep
//! every queue, counter and timer in step. Where the admin API makes the
//! same change (`admin_ops.rs`), the change is an [`Engine`] method here,
//! beside its command.

use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::{JobId, Response, TubeName};

use super::admission::Change;
use super::clock::{micros, seconds, Time, MICROS_PER_SECOND};
use super::conn::ConnId;
use super::conn::Wait;
use super::counts::Counter;
use super::heap::HeapEntry;
use super::job::State;
use super::machine::{Engine, Outcome};
use super::profile::Profile;
use super::stats;
use super::table::JobSlot;
use super::timers::TimerKey;
use super::tube_ix::TubeIx;

/// `put <pri> <delay> <ttr> <bytes>` into the tube `conn` uses.
/// Also: marks `conn` a producer; see [`Engine::put_in`].
pub(super) fn put(
    e: &mut Engine,
    conn: ConnId,
    pri: u32,
    delay: Duration,
    ttr: Duration,
    body: Bytes,
) -> Response {
    e.set_producer(conn);
    e.put_in(e.used(conn), pri, delay, ttr, body)
}

impl Engine {
    /// Puts a new job in tube `t` (which must be live): `put`, and the
    /// admin API's put.
    /// Also: uses up a job id even when refused; DRAINING in drain mode;
    /// OUT_OF_MEMORY when the table is full or the store has no room
    /// (`admission.rs`); a ready job goes straight to the tube's oldest waiter
    /// (`make_ready`), a delayed one arms the tube's delay timer; the
    /// tube's and server's job counts; a put record.
    pub(super) fn put_in(
        &mut self,
        t: TubeIx,
        pri: u32,
        delay: Duration,
        ttr: Duration,
        body: Bytes,
    ) -> Response {
        self.put_job(t, pri, delay, ttr, body, None)
    }

    /// [`Engine::put_in`], with tuber's tags if any (`ext.rs`).
    pub(super) fn put_job(
        &mut self,
        t: TubeIx,
        pri: u32,
        delay: Duration,
        ttr: Duration,
        body: Bytes,
        tags: Option<Box<sprout_protocol::Tags>>,
    ) -> Response {
        let id = self.next_job_id;
        self.next_job_id += 1;
        if self.draining {
            return Response::Draining;
        }
        let change = self.put_change(t, body.len(), tags.as_deref());
        if self.jobs.is_full() || !self.room.admits(change) || self.over_budget(body.len()) {
            return Response::OutOfMemory;
        }
        let profile = Profile {
            tube: t,
            ttr: seconds(ttr).max(1),
            delay: seconds(delay),
        };
        let slot = self.jobs.insert(id, pri, profile, self.now, &body);
        let held = self.on_admitted(slot, tags);
        self.tubes[t].total_jobs += 1;
        self.stats.total_jobs += 1;
        // A ready job is recorded before a waiter may take it: in cluster
        // mode that reserve is recorded too, and must come after the put.
        match micros(delay) {
            0 if held => {
                self.hold(slot);
                self.record_put(slot, &body);
            }
            0 => {
                self.record_put(slot, &body);
                self.make_ready(slot);
            }
            delay => {
                self.make_delayed(slot, self.now.saturating_add(delay));
                self.record_put(slot, &body);
            }
        }
        Response::Inserted(id)
    }
}

impl Engine {
    /// What a put of `body` bytes with `tags` into tube `t` costs the
    /// store: a tagged job's records are longer, and an `idp:` TTL also
    /// sets aside its cooling record (`ext.rs`).
    pub(super) fn put_change(
        &self,
        t: TubeIx,
        body: usize,
        tags: Option<&sprout_protocol::Tags>,
    ) -> Change {
        let tube = self.tubes[t].name.as_bytes().len();
        let Some(tags) = tags else {
            return Change::Put { body, tube };
        };
        let extras = super::records::Extras {
            tags: tags.clone(),
            cooling_until: None,
        };
        let cooling = Engine::room_for_cooling(Some(tags), tube).map_or(0, super::admission::cost);
        Change::Put {
            body: body + cooling as usize,
            tube: tube + extras.max_len(),
        }
    }
}

/// `use <tube>`: where `conn`'s puts and peeks go.
/// Also: the tubes' `current-using`; the tube left may be dropped.
pub(super) fn use_tube(e: &mut Engine, conn: ConnId, name: TubeName) -> Response {
    let t = e.tubes.find_or_make(&name);
    e.tubes[t].using += 1;
    let old = std::mem::replace(&mut e.conn_mut(conn).using, t);
    e.tubes[old].using -= 1;
    e.drop_tube_ref(old);
    Response::Using(name)
}

/// `reserve`, and `reserve-with-timeout` (`timeout` in µs): the most
/// urgent ready job of the unpaused tubes `conn` watches, or a wait; with
/// `batch`, `reserve-batch <n> <timeout>`: up to `n` of them, waiting only
/// while there are none.
/// Also: marks `conn` a worker; DEADLINE_SOON when a job it holds is in
/// its safety margin and no watched tube has a ready job; the job's TTR
/// timer; a wait is ended by `serve_waiters` (a job becomes ready, a pause
/// ends), by `Engine::tick` (the timeout, the margin) or by a disconnect.
/// Writes no record but in cluster mode (see `make_reserved`).
pub(super) fn reserve(
    e: &mut Engine,
    conn: ConnId,
    timeout: Option<Time>,
    batch: Option<u32>,
) -> Outcome {
    e.set_worker(conn);
    let c = &e.conns[&conn];
    let ready = c.watch.iter().any(|&t| !e.tubes[t].ready.is_empty());
    if c.deadline_soon(e.now) && !ready {
        return Outcome::Reply(Response::DeadlineSoon);
    }
    if let Some(reply) = e.reserve_now(conn, batch) {
        return Outcome::Reply(reply);
    }
    if timeout == Some(0) {
        return Outcome::Reply(Wait::timed_out(batch));
    }
    let seq = e.next_wait_seq;
    e.next_wait_seq += 1;
    let until = timeout.map(|t| e.now.saturating_add(t));
    let c = e.conns.get_mut(&conn).expect("known connection");
    c.wait = Some(Wait { seq, until, batch });
    for &t in &c.watch {
        e.tubes[t].waiters.insert(seq, conn);
    }
    e.stats.waiting += 1;
    e.arm_conn(conn);
    Outcome::Wait
}

impl Engine {
    /// What a reserve by `conn` (a batch of up to `n` with `batch`) takes
    /// now, if any job is ready for it.
    pub(super) fn reserve_now(&mut self, conn: ConnId, batch: Option<u32>) -> Option<Response> {
        match batch {
            None => {
                let slot = self.best_ready(conn)?;
                self.take_out(slot);
                self.make_reserved(conn, slot);
                Some(self.reserved_reply(slot))
            }
            Some(n) => {
                let jobs = self.take_ready(conn, n);
                (!jobs.is_empty()).then_some(Response::ReservedBatch(jobs))
            }
        }
    }
}

/// `reserve-job <id>`: that job, from whatever queue holds it (paused or
/// not), unless someone holds it.
/// Also: marks `conn` a worker; the job's TTR timer; no record but in
/// cluster mode.
pub(super) fn reserve_job(e: &mut Engine, conn: ConnId, id: JobId) -> Response {
    match e.jobs.find(id) {
        Some(slot) if e.jobs[slot].state() != State::Reserved => {
            if !e.reservable(slot) {
                return Response::NotFound;
            }
            e.take_out(slot);
            e.set_worker(conn);
            e.make_reserved(conn, slot);
            e.reserved_reply(slot)
        }
        _ => Response::NotFound,
    }
}

/// `delete <id>`: a job `conn` holds, or one nobody holds.
/// Also: the reserve-to-delete histogram and the tube's `cmd-delete`; the
/// holder's TTR timer; the tube may be dropped; a delete record (its room
/// was set aside at the put).
pub(super) fn delete(e: &mut Engine, conn: ConnId, id: JobId) -> Response {
    let Some(slot) = e.jobs.find(id) else {
        return Response::NotFound;
    };
    if e.jobs[slot].state() == State::Reserved {
        if e.owned(conn, id).is_none() {
            return Response::NotFound;
        }
        let profile = e.jobs.profile(slot);
        // From the reserve, or the last touch, which restarted the TTR.
        let reserved_at = e.jobs[slot]
            .deadline
            .saturating_sub(u64::from(profile.ttr) * MICROS_PER_SECOND);
        let held = e.now.saturating_sub(reserved_at);
        e.tubes[profile.tube]
            .latency
            .reserve_to_delete
            .observe(held);
        e.unreserve(conn, slot);
    } else {
        e.take_out(slot);
    }
    e.tubes[e.jobs.tube(slot)].deletes += 1;
    e.discard(slot);
    Response::Deleted
}

/// `release <id> <pri> <delay>`: a job `conn` holds goes back, ready or
/// delayed.
/// Also: OUT_OF_MEMORY, changing nothing, without room to record it; the
/// holder's TTR timer; a ready job goes to the tube's oldest waiter, a
/// delayed one arms the delay timer; `releases`; an update record.
pub(super) fn release(
    e: &mut Engine,
    conn: ConnId,
    id: JobId,
    pri: u32,
    delay: Duration,
) -> Response {
    match e.owned(conn, id) {
        Some(slot) if !e.room_to_update(slot) => Response::OutOfMemory,
        Some(slot) => {
            e.unreserve(conn, slot);
            e.jobs[slot].pri = pri;
            let profile = e.jobs.profile(slot);
            let delay_s = seconds(delay);
            e.jobs.set_profile(
                slot,
                Profile {
                    delay: delay_s,
                    ..profile
                },
            );
            e.jobs.bump(slot, Counter::Releases);
            e.enqueue(slot, micros(delay));
            e.record_update(slot);
            Response::Released
        }
        None => Response::NotFound,
    }
}

/// `bury <id> <pri>`: a job `conn` holds goes to the end of its tube's
/// bury order.
/// Also: OUT_OF_MEMORY, changing nothing, without room to record it; the
/// holder's TTR timer; `buries`; `kick` takes the oldest buried first; an
/// update record.
pub(super) fn bury(e: &mut Engine, conn: ConnId, id: JobId, pri: u32) -> Response {
    match e.owned(conn, id) {
        Some(slot) if !e.room_to_update(slot) => Response::OutOfMemory,
        Some(slot) => {
            e.unreserve(conn, slot);
            e.jobs[slot].pri = pri;
            e.make_buried(slot);
            e.record_update(slot);
            Response::Buried
        }
        None => Response::NotFound,
    }
}

/// `touch <id>`: a job `conn` holds gets its whole TTR again.
/// Also: re-arms `conn`'s timer (TTR, DEADLINE_SOON margin); no record but
/// in cluster mode (the new deadline, for a new leader).
pub(super) fn touch(e: &mut Engine, conn: ConnId, id: JobId) -> Response {
    match e.owned(conn, id) {
        Some(slot) => {
            let deadline = e.jobs[slot].deadline;
            e.conn_mut(conn).reserved.remove(&(deadline, slot));
            e.start_ttr(conn, slot);
            e.record_for_cluster(slot);
            Response::Touched
        }
        None => Response::NotFound,
    }
}

/// `watch <tube>`: `conn`'s reserves also look there.
/// Also: the tube's `current-watching` (made if missing).
pub(super) fn watch(e: &mut Engine, conn: ConnId, name: TubeName) -> Response {
    let t = e.tubes.find_or_make(&name);
    let c = e.conns.get_mut(&conn).expect("known connection");
    if !c.watch.contains(&t) {
        c.watch.push(t);
        e.tubes[t].watching += 1;
    }
    Response::Watching(c.watch.len() as u32)
}

/// `ignore <tube>`: NOT_IGNORED for the last tube `conn` watches.
/// Also: the tube's `current-watching`; the tube may be dropped.
pub(super) fn ignore(e: &mut Engine, conn: ConnId, name: &TubeName) -> Response {
    let tube = e.tubes.find(name);
    let c = e.conns.get_mut(&conn).expect("known connection");
    if let Some(at) = c.watch.iter().position(|&t| Some(t) == tube) {
        if c.watch.len() < 2 {
            return Response::NotIgnored;
        }
        let t = c.watch.swap_remove(at);
        let watching = c.watch.len() as u32;
        e.tubes[t].watching -= 1;
        e.drop_tube_ref(t);
        return Response::Watching(watching);
    }
    Response::Watching(c.watch.len() as u32)
}

/// `peek <id>`, in any tube and state. Reads only.
pub(super) fn peek(e: &Engine, id: JobId) -> Response {
    e.found(e.jobs.find(id))
}

/// `peek-ready`: the next job a reserve would take from the tube `conn`
/// uses (paused or not). Reads only.
pub(super) fn peek_ready(e: &Engine, conn: ConnId) -> Response {
    e.found(e.tubes[e.used(conn)].ready.peek().map(|entry| entry.slot))
}

/// `peek-delayed`: the used tube's soonest delayed job. Reads only.
pub(super) fn peek_delayed(e: &Engine, conn: ConnId) -> Response {
    e.found(e.tubes[e.used(conn)].delayed.peek().map(|entry| entry.slot))
}

/// `peek-buried`: the used tube's oldest buried job. Reads only.
pub(super) fn peek_buried(e: &Engine, conn: ConnId) -> Response {
    e.found(e.tubes[e.used(conn)].buried.first().map(|&(_, slot)| slot))
}

/// `kick <bound>` on the tube `conn` uses; see [`Engine::kick`].
pub(super) fn kick(e: &mut Engine, conn: ConnId, bound: u32) -> Response {
    Response::KickedCount(e.kick(e.used(conn), bound))
}

impl Engine {
    /// `kick <bound>` on tube `t` (also the admin API's): buried jobs if
    /// there are any (oldest first), else delayed jobs (soonest first),
    /// passing over the `aft:` jobs a kick must leave (`ext.rs`).
    /// Also: stops at the first job the store has no room to record;
    /// kicked jobs go to the tube's waiters; `kicks`; update records.
    pub(super) fn kick(&mut self, t: TubeIx, bound: u32) -> u32 {
        let from_buried = !self.tubes[t].buried.is_empty();
        let mut kicked = 0;
        while kicked < bound {
            let next = if from_buried {
                self.tubes[t].buried.first().map(|&(_, slot)| slot)
            } else {
                self.next_kickable_delayed(t)
            };
            let Some(slot) = next else { break };
            if !self.room_to_update(slot) {
                break;
            }
            self.kick_job(slot);
            kicked += 1;
        }
        kicked
    }

    /// Tube `t`'s soonest delayed job a kick may move: the heap's top
    /// unless a kick must leave it, then the soonest of the others (a
    /// scan, only while such a job is on top).
    fn next_kickable_delayed(&self, t: TubeIx) -> Option<JobSlot> {
        let top = self.tubes[t].delayed.peek()?;
        if self.kickable(top.slot) {
            return Some(top.slot);
        }
        self.tubes[t]
            .delayed
            .entries()
            .iter()
            .map(|e| e.slot())
            .filter(|&slot| self.kickable(slot))
            .min_by_key(|&slot| (self.jobs[slot].deadline, self.jobs[slot].id))
    }

    /// A buried or delayed job becomes ready (`kick`, `kick-job`, the
    /// admin API's kicks).
    pub(super) fn kick_job(&mut self, slot: JobSlot) {
        self.take_out(slot);
        self.jobs.bump(slot, Counter::Kicks);
        self.make_ready(slot);
        self.record_update(slot);
    }
}

/// `kick-job <id>`: a buried or delayed job, in any tube; NOT_FOUND for an
/// `aft:` job a kick must leave (`ext.rs`), as `reserve-job` answers.
/// Also: OUT_OF_MEMORY, changing nothing, without room to record it; see
/// [`Engine::kick_job`].
pub(super) fn kick_job(e: &mut Engine, id: JobId) -> Response {
    match e.jobs.find(id) {
        Some(slot) if e.jobs[slot].state() == State::Delayed && e.kick_blocked(slot) => {
            Response::NotFound
        }
        Some(slot) if matches!(e.jobs[slot].state(), State::Buried | State::Delayed) => {
            if !e.room_to_update(slot) {
                return Response::OutOfMemory;
            }
            e.kick_job(slot);
            Response::Kicked
        }
        _ => Response::NotFound,
    }
}

/// `stats-job <id>`: the document is `stats.rs`'s. Reads only.
pub(super) fn stats_job(e: &Engine, id: JobId) -> Response {
    match e.jobs.find(id) {
        Some(slot) => {
            let profile = e.jobs.profile(slot);
            let file = e.file_of(slot);
            let counts = e.jobs.counts(slot);
            Response::Ok(stats::job(
                &e.jobs[slot],
                profile,
                counts,
                &e.tubes[profile.tube].name,
                file,
                e.tags_of(slot),
                e.now,
            ))
        }
        None => Response::NotFound,
    }
}

/// `stats-tube <tube>`: the document is `stats.rs`'s. Reads only.
pub(super) fn stats_tube(e: &Engine, name: &TubeName) -> Response {
    match e.tubes.find(name) {
        Some(t) => Response::Ok(stats::tube(&e.tubes[t], e.now)),
        None => Response::NotFound,
    }
}

impl Engine {
    /// The `stats` document (also `/metrics`' source, through `browse.rs`).
    /// Reads only.
    pub(super) fn stats_document(&self) -> Bytes {
        self.stats_document_of(&self.stats, self.tubes.list().len())
    }

    /// The `stats` document with these counters and this many tubes
    /// (`access.rs` shows a principal the tubes it may inspect).
    pub(super) fn stats_document_of(&self, counters: &stats::Stats, tubes: usize) -> Bytes {
        let document = stats::server(
            counters,
            &stats::ServerFacts {
                config: &self.config,
                host: &self.host,
                tubes,
                uptime: self.now - self.started,
                draining: self.draining,
                cluster: self.cluster.as_ref(),
            },
        );
        let mut out = Vec::new();
        self.budget_stats(&mut out);
        if out.is_empty() {
            return document;
        }
        // Appended after beanstalkd's keys, and only under the flag.
        let mut whole = document.to_vec();
        whole.extend_from_slice(&out);
        Bytes::from(whole)
    }
}

/// `list-tubes`: every tube, in beanstalkd's order. Reads only.
pub(super) fn list_tubes(e: &Engine) -> Response {
    Response::Ok(stats::tube_list(
        e.tubes.list().iter().map(|&t| &e.tubes[t].name),
    ))
}

/// `list-tube-used`. Reads only.
pub(super) fn list_tube_used(e: &Engine, conn: ConnId) -> Response {
    Response::Using(e.tubes[e.used(conn)].name.clone())
}

/// `list-tubes-watched`, in the order `conn` watched them. Reads only.
pub(super) fn list_tubes_watched(e: &Engine, conn: ConnId) -> Response {
    Response::Ok(stats::tube_list(
        e.conns[&conn].watch.iter().map(|&t| &e.tubes[t].name),
    ))
}

/// `pause-tube <tube> <delay>`; see [`Engine::pause`].
pub(super) fn pause_tube(e: &mut Engine, name: &TubeName, delay: Duration) -> Response {
    match e.tubes.find(name) {
        Some(t) => {
            e.pause(t, delay);
            Response::Paused
        }
        None => Response::NotFound,
    }
}

impl Engine {
    /// Pauses tube `t` for `delay` (at least 1 µs, as beanstalkd does):
    /// `pause-tube`, and the admin API's pause.
    /// Also: `reserve` skips the tube and its waiters wait (`serve_waiters`
    /// checks); the pause ends in `Engine::tick`'s `Unpause` arm, which
    /// serves them; a tube dropped meanwhile disarms it (`drop_tube_ref`);
    /// the tube's `pause`, `pause-time-left` and `cmd-pause-tube`; no
    /// record (a pause does not survive a restart, as in beanstalkd).
    pub(super) fn pause(&mut self, t: TubeIx, delay: Duration) {
        let pause = micros(delay).max(1);
        let tube = &mut self.tubes[t];
        tube.pause = pause;
        tube.unpause_at = self.now.saturating_add(pause);
        tube.pauses += 1;
        self.timers.set(TimerKey::Unpause(t), Some(tube.unpause_at));
    }
}
