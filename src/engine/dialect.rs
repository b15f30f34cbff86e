//! The seam between beanstalkd's state machine and tuber's dialect: the
//! core (`transitions.rs`, `waiting.rs`, `calls.rs`, `commands.rs`) calls
//! only these, each named for what just happened to a job or what the
//! core asks of it, and the dialect's rules stay in `ext.rs`.
//!
//! An untagged job costs one test of its `tagged` flag at each hook; the
//! flag sits in a byte the job record already had (`job.rs`), so the
//! seam adds no memory and, inlined, no call.

use sprout_protocol::Tags;

use super::conn::ConnId;
use super::machine::Engine;
use super::records::JobImage;
use super::table::JobSlot;

impl Engine {
    /// A new job `slot` was admitted with `tags` (`put`): whether an
    /// `aft:` tag holds it now, before it is ever ready.
    #[inline]
    pub(super) fn on_admitted(&mut self, slot: JobSlot, tags: Option<Box<Tags>>) -> bool {
        match tags {
            None => false,
            Some(tags) => self.attach(slot, tags),
        }
    }

    /// Job `slot` was restored from the store with its tags: whether it
    /// was held (and so placed already). A restored `idp:` cooldown is
    /// not a job at all: [`Engine::on_restoring`].
    pub(super) fn on_restored(&mut self, slot: JobSlot, image: &JobImage) -> bool {
        let Some(extras) = &image.ext else {
            return false;
        };
        self.attach(slot, Box::new(extras.tags.clone()));
        let held = self.restores_held(image);
        if held {
            self.restore_held(slot);
        }
        held
    }

    /// Before a stored job is restored: true if its image is an `idp:`
    /// key's cooldown, which this took back, so there is no job to make.
    #[inline]
    pub(super) fn on_restoring(&mut self, image: &JobImage) -> bool {
        image.ext.is_some() && self.restore_cooling(image)
    }

    /// Job `slot` was just reserved: a `con:` key counts it.
    #[inline]
    pub(super) fn on_reserved(&mut self, slot: JobSlot) {
        if self.jobs[slot].tagged() {
            self.con_acquire(slot);
        }
    }

    /// Job `slot`'s reservation ended (delete, release, bury, TTR,
    /// disconnect): its `con:` key counts it no more.
    #[inline]
    pub(super) fn on_unreserved(&mut self, slot: JobSlot) {
        if self.jobs[slot].tagged() {
            self.con_release(slot);
        }
    }

    /// Job `slot` is being deleted: true if an `idp:` TTL keeps its key
    /// cooling down instead (its cooling record replaces the delete).
    #[inline]
    pub(super) fn on_deleted(&mut self, slot: JobSlot) -> bool {
        self.jobs[slot].tagged() && self.detach(slot)
    }

    /// Job `slot` goes without a delete of its own (the store failed its
    /// put, a flush): its tags go, no cooldown, no release of held jobs
    /// until the next tick.
    #[inline]
    pub(super) fn on_dropped(&mut self, slot: JobSlot) {
        if self.jobs[slot].tagged() {
            self.drop_tags(slot);
        }
    }

    /// Job `slot`'s delay ended (it is out of its queue): true if an
    /// `aft:` group holds it, which this did; else it is to be made ready.
    #[inline]
    pub(super) fn on_delay_ended(&mut self, slot: JobSlot) -> bool {
        let held = self.aft_pending(slot);
        if held {
            self.hold(slot);
        }
        held
    }

    /// Whether `reserve-job` may take job `slot` (not a job held by its
    /// `aft:` group, nor one whose `con:` key is at its limit).
    #[inline]
    pub(super) fn reservable(&self, slot: JobSlot) -> bool {
        !self.jobs[slot].tagged() || !(self.con_blocked(slot) || self.is_held(slot))
    }

    /// Whether a kick may move job `slot` (not an `aft:` job whose group
    /// has members).
    #[inline]
    pub(super) fn kickable(&self, slot: JobSlot) -> bool {
        !self.kick_blocked(slot)
    }

    /// Connection `conn` is gone: it is flushing nothing any more.
    #[inline]
    pub(super) fn on_disconnected(&mut self, conn: ConnId) {
        self.ext_clear_flushing(conn);
    }

    /// A tick starts: `idp:` cooldowns that are over end, and held jobs
    /// whose group emptied without a delete are released.
    #[inline]
    pub(super) fn on_tick(&mut self) {
        if self.cooling() {
            self.expire_cooling();
        }
        if self.groups_unsettled() {
            self.release_unsettled();
        }
    }

    /// After a change that may have ended `con:` reservations: waiters
    /// passed over for a key at its limit are served again.
    #[inline]
    pub(super) fn on_settled(&mut self) {
        if self.con_freed() {
            self.con_serve_waiters();
        }
    }
}
