//! The table from a command to the function that is the whole command:
//! beanstalkd's in `commands.rs`, tuber's batches in `tuber_batch.rs`, the
//! rest of the dialect on [`Engine`] (`ext.rs`, `fire.rs`).

use sprout_protocol::{Command, Response};

use super::clock::micros;
use super::commands::{
    bury, delete, ignore, kick, kick_job, list_tube_used, list_tubes, list_tubes_watched,
    pause_tube, peek, peek_buried, peek_delayed, peek_ready, put, release, reserve, reserve_job,
    stats_job, stats_tube, touch, use_tube, watch,
};
use super::conn::ConnId;
use super::machine::{Engine, Outcome};
use super::tuber_batch::{delete_batch, flush_buried, flush_tube, peek_reserved, reserve_batch};

/// Runs `cmd` for `conn`, a known connection that is not waiting.
pub(super) fn dispatch(e: &mut Engine, conn: ConnId, cmd: Command) -> Outcome {
    let reply = match cmd {
        Command::Put {
            pri,
            delay,
            ttr,
            body,
            tags: None,
        } => put(e, conn, pri, delay, ttr, body),
        Command::Put {
            pri,
            delay,
            ttr,
            body,
            tags: Some(tags),
        } => {
            e.set_producer(conn);
            e.put_tagged(e.used(conn), pri, delay, ttr, body, tags)
        }
        Command::Use(name) => use_tube(e, conn, name),
        Command::Reserve => return reserve(e, conn, None, None),
        Command::ReserveWithTimeout(timeout) => {
            return reserve(e, conn, Some(micros(timeout)), None)
        }
        Command::ReserveJob(id) => reserve_job(e, conn, id),
        Command::Delete(id) => delete(e, conn, id),
        Command::Release { id, pri, delay } => release(e, conn, id, pri, delay),
        Command::Bury { id, pri } => bury(e, conn, id, pri),
        Command::Touch(id) => touch(e, conn, id),
        Command::Watch(name) => watch(e, conn, name),
        Command::Ignore(name) => ignore(e, conn, &name),
        Command::Peek(id) => peek(e, id),
        Command::PeekReady => peek_ready(e, conn),
        Command::PeekDelayed => peek_delayed(e, conn),
        Command::PeekBuried => peek_buried(e, conn),
        Command::Kick(bound) => kick(e, conn, bound),
        Command::KickJob(id) => kick_job(e, id),
        Command::StatsJob(id) => stats_job(e, id),
        Command::StatsTube(name) => stats_tube(e, &name),
        Command::Stats => Response::Ok(e.stats_document()),
        Command::ListTubes => list_tubes(e),
        Command::ListTubeUsed => list_tube_used(e, conn),
        Command::ListTubesWatched => list_tubes_watched(e, conn),
        Command::Quit => return Outcome::Close,
        Command::PauseTube { tube, delay } => pause_tube(e, &tube, delay),
        Command::ReserveBatch(n) => reserve_batch(e, conn, n),
        // tuber: a timeout of 0 is the form without one.
        Command::ReserveBatchWait { n, timeout } if timeout.is_zero() => reserve_batch(e, conn, n),
        Command::ReserveBatchWait { n, timeout } => {
            return reserve(e, conn, Some(micros(timeout)), Some(n))
        }
        Command::DeleteBatch(ids) => delete_batch(e, conn, &ids),
        Command::FlushTube(tube) => return flush_tube(e, conn, tube),
        Command::FlushBuried(tube) => return flush_buried(e, conn, tube),
        Command::Drain => {
            e.set_draining(true);
            Response::Draining
        }
        Command::Undrain => {
            e.set_draining(false);
            Response::NotDraining
        }
        Command::PeekReserved => peek_reserved(e, conn),
        Command::StatsGroup(name) => e.stats_group(&name),
        Command::Fire { id, pri, ttr, body } => e.fire(conn, id, pri, ttr, body),
        // The connection answers `auth` (`auth/`); a server without
        // `--auth` never reads one.
        Command::Auth(_) => Response::UnknownCommand,
    };
    Outcome::Reply(reply)
}
