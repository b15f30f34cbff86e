//! `fire <id> <pri> <ttr> <bytes>` + body (a sprout extension, made for
//! the Redis bridge): a job the connection holds reserved (a due timer) is
//! replaced, in one step, by a new ready job in the tube the connection
//! uses (its delivery), with the new body, priority and TTR.
//!
//! One step means one command's records: the timer's delete and the
//! delivery's put are journaled together, so the store writes them in one
//! frame (one write, one CRC: `store/frame.rs`) and a restart finds either
//! the timer (the frame was torn or never written: it fires again) or the
//! delivery, never both and never neither. Over the protocol it replaces a
//! `put` on one connection and a `delete` on another, whose crash window
//! in between duplicated the delivery.
//!
//! Checks come before any change, so a refusal changes nothing: NOT_FOUND
//! unless `conn` holds the job reserved, DRAINING in drain mode,
//! OUT_OF_MEMORY without room for the put (table, store, `--max-jobs-size`).
//! The delivery gets a new id (ids only grow, and whoever still names the
//! timer's id, such as a bridge's index after a crash, finds it gone rather
//! than finding the delivery); the answer is `INSERTED <new id>`, as for a
//! put. The timer's delete counts neither as a `delete` nor in its tube's
//! `cmd-delete`: it is the fire's.

use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::{JobId, Response};

use super::conn::ConnId;
use super::machine::Engine;

impl Engine {
    /// The `fire` command: job `id`, reserved by `conn`, becomes a new
    /// ready job of `conn`'s used tube with `body` (see the module docs).
    pub(super) fn fire(
        &mut self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        ttr: Duration,
        body: Bytes,
    ) -> Response {
        let Some(slot) = self.owned(conn, id) else {
            return Response::NotFound;
        };
        if self.draining {
            return Response::Draining;
        }
        let t = self.used(conn);
        let change = self.put_change(t, body.len(), None);
        // A full table still fires: the timer leaves it first.
        if !self.room.admits(change) || self.over_budget(body.len()) {
            return Response::OutOfMemory;
        }
        self.set_producer(conn);
        self.unreserve(conn, slot);
        self.discard(slot);
        // Cannot be refused now: the checks above passed, and the timer's
        // slot and body bytes are free again.
        self.put_in(t, pri, Duration::ZERO, ttr, body)
    }
}

#[cfg(test)]
mod tests;
