//! tuber's batch commands: `reserve-batch`, `delete-batch`, `flush-tube`,
//! `flush-buried`, `peek-reserved`.
//!
//! `flush-tube` (and `flush-buried`) deletes a tube's jobs [`FLUSH_STEP`] at a time: after each
//! step it answers [`Outcome::Again`], and the connection runs it again
//! once it has let go of the engine's lock, so other clients are served
//! between steps however many jobs the tube holds. Jobs put into the tube
//! while it is being flushed may be flushed too; the answer counts every
//! job the flush deleted.

use bytes::Bytes;
use sprout_protocol::{Command, JobId, Response, TubeName, MAX_BATCH};

use super::commands;
use super::conn::ConnId;
use super::machine::{Engine, Outcome};
use super::table::JobSlot;
use super::tube_ix::TubeIx;

/// Jobs a `flush-tube` step deletes under one hold of the lock: about a
/// millisecond's work.
pub(super) const FLUSH_STEP: usize = 1000;

/// `reserve-batch <n>`: up to `n` ready jobs of the unpaused tubes `conn`
/// watches, most urgent first, without waiting (`RESERVED_BATCH 0` when
/// there are none). The form with a timeout is `commands::reserve`'s.
/// Also: marks `conn` a worker; each job's TTR timer; no record.
pub(super) fn reserve_batch(e: &mut Engine, conn: ConnId, n: u32) -> Response {
    e.set_worker(conn);
    Response::ReservedBatch(e.take_ready(conn, n))
}

impl Engine {
    /// Reserves for `conn` up to `n` ready jobs, most urgent first (also
    /// for a `reserve-batch` that waited, `commands::reserve`).
    pub(super) fn take_ready(&mut self, conn: ConnId, n: u32) -> Vec<(JobId, Bytes)> {
        let mut jobs = Vec::new();
        while jobs.len() < (n as usize).min(MAX_BATCH) {
            let Some(slot) = self.best_ready(conn) else {
                break;
            };
            self.take_out(slot);
            self.make_reserved(conn, slot);
            jobs.push((self.jobs[slot].id, self.jobs.body_bytes(slot)));
        }
        jobs
    }
}

/// `delete-batch <id>...`: each as `delete` would; the answer counts
/// those deleted and those not found (or held by someone else).
pub(super) fn delete_batch(e: &mut Engine, conn: ConnId, ids: &[JobId]) -> Response {
    let (mut deleted, mut not_found) = (0, 0);
    for &id in ids {
        match commands::delete(e, conn, id) {
            Response::Deleted => deleted += 1,
            _ => not_found += 1,
        }
    }
    Response::DeletedBatch { deleted, not_found }
}

/// `peek-reserved`: the reserved job with the lowest id in the tube `conn`
/// uses, whoever holds it (as tuber answers). Reads only.
pub(super) fn peek_reserved(e: &Engine, conn: ConnId) -> Response {
    let t = e.used(conn);
    if e.tubes[t].reserved == 0 {
        return Response::NotFound;
    }
    let slot = e
        .conns
        .values()
        .flat_map(|c| c.reserved.iter().map(|&(_, slot)| slot))
        .filter(|&slot| e.jobs.tube(slot) == t)
        .min_by_key(|&slot| e.jobs[slot].id);
    e.found(slot)
}

/// One step of `flush-tube <tube>`: NOT_FOUND for a tube that does not
/// exist, `FLUSHED <count>` once it holds no job, else [`Outcome::Again`].
/// Also: reserved jobs are taken from their holders; the tube's
/// `cmd-delete`; a delete record each (no `idp:` cooldown: the tube's
/// cooldowns end too); the tube may be dropped at the end.
pub(super) fn flush_tube(e: &mut Engine, conn: ConnId, name: TubeName) -> Outcome {
    let so_far = e.ext_flushing(conn);
    let Some(t) = e.tubes.find(&name) else {
        return Outcome::Reply(match so_far {
            None => Response::NotFound,
            Some(n) => Response::Flushed(n),
        });
    };
    // Held for the step, so the tube outlives its last job until the end.
    e.tubes[t].using += 1;
    let mut flushed = 0;
    while flushed < FLUSH_STEP {
        let tube = &e.tubes[t];
        let queued = tube
            .buried
            .first()
            .map(|&(_, slot)| slot)
            .or_else(|| tube.delayed.peek().map(|d| d.slot))
            .or_else(|| tube.ready.peek().map(|r| r.slot));
        if let Some(slot) = queued {
            e.take_out(slot);
            flush_job(e, t, slot);
            flushed += 1;
            continue;
        }
        if e.tubes[t].reserved == 0 {
            break;
        }
        let held: Vec<(ConnId, JobSlot)> = e
            .conns
            .iter()
            .flat_map(|(&c, held)| held.reserved.iter().map(move |&(_, slot)| (c, slot)))
            .filter(|&(_, slot)| e.jobs.tube(slot) == t)
            .take(FLUSH_STEP - flushed)
            .collect();
        for (holder, slot) in held {
            e.unreserve(holder, slot);
            flush_job(e, t, slot);
            flushed += 1;
        }
    }
    e.tubes[t].using -= 1;
    e.drop_tube_ref(t);
    let total = so_far.unwrap_or(0) + flushed as u64;
    if flushed == FLUSH_STEP {
        e.ext_set_flushing(conn, total);
        return Outcome::Again(Command::FlushTube(name));
    }
    e.end_cooling_in(&name);
    e.ext_clear_flushing(conn);
    Outcome::Reply(Response::Flushed(total))
}

/// Deletes job `slot` of tube `t`, out of every queue: a delete record,
/// never an `idp:` cooldown.
fn flush_job(e: &mut Engine, t: TubeIx, slot: JobSlot) {
    e.on_dropped(slot);
    e.tubes[t].deletes += 1;
    e.discard(slot);
}

/// One step of `flush-buried <tube>`: deletes the tube's buried jobs as
/// `delete` would (an `idp:` TTL cools down, a group's last member
/// releases its held jobs), leaving every other job; `FLUSHED <count>`
/// once none is left, `FLUSHED 0` for a tube that does not exist (tuber
/// 0.9.1), else [`Outcome::Again`].
/// Also: the tube's `cmd-delete`; a delete record each (its room set aside
/// at the put); the tube may be dropped at the end.
pub(super) fn flush_buried(e: &mut Engine, conn: ConnId, name: TubeName) -> Outcome {
    let mut flushed = 0;
    if let Some(t) = e.tubes.find(&name) {
        // Held for the step, so the tube outlives its last job until the end.
        e.tubes[t].using += 1;
        while flushed < FLUSH_STEP {
            let Some(&(_, slot)) = e.tubes[t].buried.first() else {
                break;
            };
            e.take_out(slot);
            e.tubes[t].deletes += 1;
            e.discard(slot);
            flushed += 1;
        }
        e.tubes[t].using -= 1;
        e.drop_tube_ref(t);
    }
    let total = e.ext_flushing(conn).unwrap_or(0) + flushed as u64;
    if flushed == FLUSH_STEP {
        e.ext_set_flushing(conn, total);
        return Outcome::Again(Command::FlushBuried(name));
    }
    e.ext_clear_flushing(conn);
    Outcome::Reply(Response::Flushed(total))
}
