//! tuber's `put` tags: `idp:<key>[:<ttl>]` (idempotent puts),
//! `con:<key>[:<n>]` (concurrency keys), `grp:<name>` and `aft:<name>`
//! (groups: fan-out, fan-in).
//!
//! A tagged job is an ordinary job with its `tagged` flag set and its
//! [`Tags`] kept here by slot, so an untagged job costs nothing more: the
//! flag sits in a byte the job record already had as padding, and every
//! hook below starts by testing it.
//!
//! # Idempotent puts
//!
//! While a job with key K lives in tube T, a `put … idp:K` into T answers
//! `INSERTED <id> <STATE>` with that job's id and state, and uses up no id
//! (as in tuber). A lower (more urgent) priority is taken over by the job,
//! and the answer says so (`INSERTED <id> <STATE> <pri>`); a higher one is
//! ignored. When the job is deleted the key is free again, unless the
//! put gave a TTL (`idp:K:N`): then the key keeps answering
//! `INSERTED <id> DELETED` for N seconds after the delete.
//!
//! # Concurrency keys
//!
//! At most `n` jobs with key K (in any tube, as in tuber) are reserved at
//! once: a reserve passes over a ready job whose key is at its limit
//! ([`Engine::ready_top`]), `reserve-job` answers NOT_FOUND for it, and
//! when such a reservation ends (delete, release, bury, TTR, disconnect)
//! the waiters of every tube with ready jobs are served again. Nothing of
//! it is journaled but the tag: a restart brings every job back ready, so
//! every key starts with nothing reserved.
//!
//! # Groups
//!
//! A `grp:G` job is a member of G until it is deleted (a buried member
//! still counts). An `aft:G` job never becomes ready while G has members:
//! put without a delay, or when its delay ends, it is held instead, a
//! delayed job due never ([`HELD`]), so it keeps its tube alive and
//! `reserve-job` answers NOT_FOUND for it. `kick` passes over it and over
//! a delayed `aft:` job whose group has members (it counts only the jobs
//! it moved), and `kick-job` answers NOT_FOUND for both: a kick is what
//! scripts send to retry a job, and must not break a dependency. The
//! admin API's release of a hold (`Engine::release_hold`) is the one
//! override. The delete of G's last member makes G's held jobs ready (and
//! serves waiters); a delayed one stays delayed until its delay ends.
//! Group names are global; nothing detects cycles (as in tuber).
//!
//! Only the tags are journaled: a held job's record says `Delayed(HELD)`
//! (or the delay it had), and a restart, or a standby following its
//! leader, counts the members back from their jobs and holds every `aft:`
//! job whose delay is over; its first tick, once every job is back,
//! releases those whose group has no member. A job that leaves a group
//! without a delete (`Engine::forget`, which a standby also runs before it
//! applies a job's newer record) releases nothing until that tick, so a
//! member being replaced never lets a held job through.
//!
//! # Durability
//!
//! The tags travel in the job's records ([`Extras`] in a [`JobImage`]),
//! so a restart rebuilds the keys from the jobs. A delete under a TTL is
//! not journaled as a delete: the job's record is rewritten as a *cooling*
//! image ([`Extras::cooling_until`]), which a restart turns back into the
//! key's cooldown rather than a job, and which is deleted for good when the
//! cooldown is over. Its room in the journal is set aside at the put (see
//! `admission.rs`), so a delete never fails for want of room, and the cooldown
//! is never forgotten. A deduplicated answer writes nothing (unless it
//! raises the priority) and so waits, like any answer, for the store to
//! hold everything before it, the original put included: no crash can take
//! back a job a client was told exists.

use sprout_protocol::{DupState, JobId, Response, TagName, Tags, TubeName};

use super::admission::Change;
use super::clock::{Time, MICROS_PER_SECOND};
use super::conn::ConnId;
use super::ext_tables::Key;
use super::heap::ByPriority;
use super::job::State;
use super::machine::Engine;
use super::records::Record;
use super::records::{Extras, JobImage, Stored};
use super::table::JobSlot;
use super::tube_ix::TubeIx;

/// An `aft:` job is held as a delayed job due never: it keeps its tube
/// alive, comes last in its tube's delay order, and is deleted or flushed
/// as a delayed job is.
pub(super) const HELD: Time = Time::MAX;

impl Engine {
    /// A `put` with tags into tube `t`: the deduplicated answer if its
    /// `idp:` key is held, else [`Engine::put_job`] with the tags.
    pub(super) fn put_tagged(
        &mut self,
        t: TubeIx,
        pri: u32,
        delay: std::time::Duration,
        ttr: std::time::Duration,
        body: bytes::Bytes,
        tags: Box<Tags>,
    ) -> Response {
        if !self.draining {
            if let Some((key, _)) = &tags.idp {
                if let Some(reply) = self.deduplicate(t, key, pri) {
                    return reply;
                }
            }
        }
        self.put_job(t, pri, delay, ttr, body, Some(tags))
    }

    /// The answer to a put whose key `key` is held in tube `t`, if it is.
    fn deduplicate(&mut self, t: TubeIx, key: &str, pri: u32) -> Option<Response> {
        let name = &self.tubes[t].name;
        let held = *self.ext.keys.get(name)?.get(key)?;
        match held {
            Key::Cooling(id, until) if until > self.now => Some(Response::InsertedDup {
                id,
                state: DupState::Deleted,
                pri: None,
            }),
            Key::Cooling(id, until) => {
                self.end_cooling(until, id);
                None
            }
            Key::Live(id) => {
                let slot = self.jobs.find(id).expect("a held key's job lives");
                let raised = pri < self.jobs[slot].pri && self.room_to_update(slot);
                if raised {
                    self.set_pri(slot, pri);
                    self.record_update(slot);
                }
                let state = match self.jobs[slot].state() {
                    State::Ready => DupState::Ready,
                    State::Reserved => DupState::Reserved,
                    State::Delayed => DupState::Delayed,
                    State::Buried => DupState::Buried,
                };
                Some(Response::InsertedDup {
                    id,
                    state,
                    pri: raised.then_some(pri),
                })
            }
        }
    }

    /// Job `slot` takes priority `pri` (a ready job moves in its heap).
    fn set_pri(&mut self, slot: JobSlot, pri: u32) {
        if self.jobs[slot].state() == State::Ready {
            self.take_out(slot);
            self.jobs[slot].pri = pri;
            self.make_ready(slot);
        } else {
            self.jobs[slot].pri = pri;
        }
    }

    /// The new job `slot` carries `tags`: it holds their key, joins its
    /// group. Returns whether an `aft:` group holds it back (its group has
    /// members).
    pub(super) fn attach(&mut self, slot: JobSlot, tags: Box<Tags>) -> bool {
        let job = &mut self.jobs[slot];
        job.set_tagged(true);
        let id = job.id;
        if let Some(group) = &tags.grp {
            let g = self.ext.groups.entry(group.clone()).or_default();
            g.members.insert(slot);
        }
        let held = tags.aft.as_ref().is_some_and(|group| {
            self.ext
                .groups
                .get(group)
                .is_some_and(|g| !g.members.is_empty())
        });
        if let Some((key, _)) = &tags.idp {
            let name = self.tubes[self.jobs.tube(slot)].name.clone();
            let keys = self.ext.keys.entry(name).or_default();
            // A restart may find the job after an older cooldown of its
            // key: that one's record still goes when it is over.
            keys.insert(key.clone(), Key::Live(id));
        }
        self.ext.tags.insert(slot, tags);
        held
    }

    /// Holds job `slot`, in no queue, until its `aft:` group has no members.
    pub(super) fn hold(&mut self, slot: JobSlot) {
        let group = self.ext.tags[&slot].aft.clone().expect("an aft: job");
        let id = self.jobs[slot].id;
        let g = self.ext.groups.entry(group).or_default();
        g.waiting.push((slot, id));
        self.make_delayed(slot, HELD);
    }

    /// Whether job `slot` is an `aft:` job still held.
    pub(super) fn is_held(&self, slot: JobSlot) -> bool {
        let job = &self.jobs[slot];
        job.tagged() && job.state() == State::Delayed && job.deadline == HELD
    }

    /// Whether job `slot` is an `aft:` job whose group has members: it
    /// may not become ready (put, delay's end, kick).
    pub(super) fn aft_pending(&self, slot: JobSlot) -> bool {
        if !self.jobs[slot].tagged() {
            return false;
        }
        let group = self.ext.tags.get(&slot).and_then(|t| t.aft.as_ref());
        group
            .and_then(|name| self.ext.groups.get(name))
            .is_some_and(|g| !g.members.is_empty())
    }

    /// Whether a kick must leave delayed job `slot` where it is: held, or
    /// an `aft:` job whose group has members.
    pub(super) fn kick_blocked(&self, slot: JobSlot) -> bool {
        self.is_held(slot) || self.aft_pending(slot)
    }

    /// Job `slot` leaves its group. If it was the last member, the group's
    /// held jobs become ready: at once with `release` (a delete), else at
    /// the next tick (a job forgotten: [`Engine::release_unsettled`]).
    fn leave_group(&mut self, slot: JobSlot, tags: &Tags, release: bool) {
        if let Some(name) = &tags.grp {
            let Some(g) = self.ext.groups.get_mut(name) else {
                return;
            };
            g.members.remove(&slot);
            if g.members.is_empty() && !release {
                self.ext.groups_unsettled = true;
            } else if g.members.is_empty() {
                let g = self.ext.groups.remove(name).expect("found");
                self.release_held(g.waiting);
            }
        }
        if let Some(name) = &tags.aft {
            if let Some(g) = self.ext.groups.get_mut(name) {
                g.waiting.retain(|&(s, _)| s != slot);
                if g.members.is_empty() && g.waiting.is_empty() {
                    self.ext.groups.remove(name);
                }
            }
        }
    }

    /// The jobs of `waiting` still held become ready, in the order they
    /// were held.
    fn release_held(&mut self, waiting: Vec<(JobSlot, JobId)>) {
        for (slot, id) in waiting {
            if self.jobs.find(id) == Some(slot) && self.is_held(slot) {
                self.take_out(slot);
                self.make_ready(slot);
            }
        }
    }

    /// After a restart or a forgotten member: the held jobs whose group
    /// has no member left become ready.
    pub(super) fn release_unsettled(&mut self) {
        self.ext.groups_unsettled = false;
        let empty: Vec<TagName> = self
            .ext
            .groups
            .iter()
            .filter(|(_, g)| g.members.is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        for name in empty {
            let g = self.ext.groups.remove(&name).expect("listed");
            self.release_held(g.waiting);
        }
    }

    /// Whether the job of `image`, restored, is held: an `aft:` job whose
    /// delay is over (or that was held). Released at the first tick if its
    /// group has no member by then.
    pub(super) fn restores_held(&self, image: &JobImage) -> bool {
        let aft = image.ext.as_ref().is_some_and(|e| e.tags.aft.is_some());
        aft && matches!(image.state, Stored::Delayed(until) if until <= self.now || until == HELD)
    }

    /// A restored job held by its `aft:` group: counted as waiting;
    /// released at the first tick if its group is empty by then.
    pub(super) fn restore_held(&mut self, slot: JobSlot) {
        self.hold(slot);
        self.ext.groups_unsettled = true;
    }

    /// Whether [`Engine::release_unsettled`] has work.
    pub(super) fn groups_unsettled(&self) -> bool {
        self.ext.groups_unsettled
    }

    /// `stats-group <name>`: tuber's document. Reads only.
    pub(super) fn stats_group(&self, name: &str) -> Response {
        let Some(g) = self.ext.groups.get(name) else {
            return Response::NotFound;
        };
        let buried = g
            .members
            .iter()
            .filter(|&&slot| self.jobs[slot].state() == State::Buried)
            .count();
        let waiting = g
            .waiting
            .iter()
            .filter(|&&(slot, id)| self.jobs.find(id) == Some(slot) && self.is_held(slot))
            .count();
        let doc = format!(
            "---\nname: \"{name}\"\npending: {}\nburied: {buried}\ncomplete: {}\nwaiting-jobs: {waiting}\n",
            g.members.len(),
            g.members.is_empty(),
        );
        Response::Ok(doc.into())
    }

    /// The tags of job `slot` (`None` for an untagged job).
    pub(super) fn tags_of(&self, slot: JobSlot) -> Option<&Tags> {
        match self.jobs[slot].tagged() {
            false => None,
            true => Some(self.ext.tags.get(&slot).expect("a tagged job's tags")),
        }
    }

    /// The records' extras of job `slot` (`None` for an untagged job).
    pub(super) fn extras(&self, slot: JobSlot) -> Option<Box<Extras>> {
        let tags = self.tags_of(slot)?;
        Some(Box::new(Extras {
            tags: tags.clone(),
            cooling_until: None,
        }))
    }

    /// The bytes job `slot`'s extras add to each of its records.
    pub(super) fn extras_len(&self, slot: JobSlot) -> usize {
        match self.jobs[slot].tagged() {
            false => 0,
            true => Extras {
                tags: (*self.ext.tags[&slot]).clone(),
                cooling_until: Some(0),
            }
            .max_len(),
        }
    }

    /// The room a put of `tags` sets aside beyond its own and its delete's:
    /// the cooling record an `idp:` TTL writes instead of the delete.
    pub(super) fn room_for_cooling(tags: Option<&Tags>, tube: usize) -> Option<Change> {
        let tags = tags?;
        tags.idp.as_ref().filter(|(_, ttl)| *ttl > 0)?;
        let extras = Extras {
            tags: tags.clone(),
            cooling_until: Some(0),
        };
        Some(Change::Update {
            tube: tube + extras.max_len(),
        })
    }

    /// A tagged job is being deleted: its key is freed, or cools down. In
    /// the second case the job's cooling record replaces its delete, and
    /// this returns `true`: the caller journals no delete.
    pub(super) fn detach(&mut self, slot: JobSlot) -> bool {
        let Some(tags) = self.ext.tags.remove(&slot) else {
            return false;
        };
        let (id, name) = (
            self.jobs[slot].id,
            self.tubes[self.jobs.tube(slot)].name.clone(),
        );
        if tags.grp.is_some() || tags.aft.is_some() {
            self.leave_group(slot, &tags, true);
        }
        let Some((key, ttl)) = &tags.idp else {
            return false;
        };
        let keys = self.ext.keys.get_mut(&name).expect("a held key's tube");
        if *ttl == 0 {
            keys.remove(key);
            if keys.is_empty() {
                self.ext.keys.remove(&name);
            }
            return false;
        }
        let until = self.now.saturating_add(u64::from(*ttl) * MICROS_PER_SECOND);
        keys.insert(key.clone(), Key::Cooling(id, until));
        self.ext
            .cooling
            .insert((until, id), (name.clone(), key.clone()));
        if self.config.journal {
            let mut image = JobImage::of(
                &self.jobs[slot],
                self.jobs.profile(slot),
                self.jobs.counts(slot),
                bytes::Bytes::new(), // an update's: no body (`Record::Update`)
                &name,
            );
            image.ext = Some(Box::new(Extras {
                tags: *tags,
                cooling_until: Some(until),
            }));
            // Its room was set aside at the put (`room_for_cooling`).
            self.journal.push(Record::Update(image));
        }
        true
    }

    /// A job whose put the store lost goes without a trace.
    pub(super) fn drop_tags(&mut self, slot: JobSlot) {
        let Some(tags) = self.ext.tags.remove(&slot) else {
            return;
        };
        if tags.grp.is_some() || tags.aft.is_some() {
            self.leave_group(slot, &tags, false);
        }
        if let Some((key, _)) = &tags.idp {
            let name = &self.tubes[self.jobs.tube(slot)].name;
            if let Some(keys) = self.ext.keys.get_mut(name) {
                keys.remove(key);
            }
        }
    }

    /// A stored cooling image comes back as its key's cooldown; `false`
    /// for any other image.
    pub(super) fn restore_cooling(&mut self, image: &JobImage) -> bool {
        let Some(Extras {
            tags,
            cooling_until: Some(until),
        }) = image.ext.as_deref()
        else {
            return false;
        };
        let Some((key, _)) = &tags.idp else {
            return true;
        };
        let keys = self.ext.keys.entry(image.tube.clone()).or_default();
        if !keys.contains_key(key) {
            keys.insert(key.clone(), Key::Cooling(image.id, *until));
        }
        // Even when a live job holds the key, the record must go in time.
        let held = (image.tube.clone(), key.clone());
        self.ext.cooling.insert((*until, image.id), held);
        true
    }

    /// Ends the cooldowns that are over (their records are deleted).
    pub(super) fn expire_cooling(&mut self) {
        while let Some((&(until, id), _)) = self.ext.cooling.first_key_value() {
            if until > self.now {
                return;
            }
            self.end_cooling(until, id);
        }
    }

    fn end_cooling(&mut self, until: Time, id: JobId) {
        let Some((name, key)) = self.ext.cooling.remove(&(until, id)) else {
            return;
        };
        if let Some(keys) = self.ext.keys.get_mut(&name) {
            if matches!(keys.get(&key), Some(Key::Cooling(held, _)) if *held == id) {
                keys.remove(&key);
            }
            if keys.is_empty() {
                self.ext.keys.remove(&name);
            }
        }
        if self.config.journal {
            // Its room is the delete room its put set aside.
            self.journal.push(Record::Delete(id));
        }
    }

    /// The most urgent ready job of tube `t` that a reserve may take: the
    /// heap's top unless its `con:` key is at its limit, then the best
    /// of the others (a scan, as in tuber, only while the top is held back).
    #[inline]
    pub(super) fn ready_top(&self, t: TubeIx) -> Option<ByPriority> {
        let top = self.tubes[t].ready.peek()?;
        if !self.jobs[top.slot].tagged() || !self.con_blocked(top.slot) {
            return Some(top);
        }
        self.tubes[t]
            .ready
            .entries()
            .iter()
            .filter(|e| !self.jobs[e.slot].tagged() || !self.con_blocked(e.slot))
            .min_by_key(|e| e.key())
            .copied()
    }

    /// Whether job `slot`'s `con:` key has as many jobs reserved as its
    /// limit allows.
    pub(super) fn con_blocked(&self, slot: JobSlot) -> bool {
        let Some((key, limit)) = self.ext.tags.get(&slot).and_then(|t| t.con.as_ref()) else {
            return false;
        };
        self.ext.con.get(key).is_some_and(|n| n >= limit)
    }

    /// A tagged job `slot` is reserved: its `con:` key counts it.
    pub(super) fn con_acquire(&mut self, slot: JobSlot) {
        if let Some((key, _)) = self.ext.tags.get(&slot).and_then(|t| t.con.as_ref()) {
            *self.ext.con.entry(key.clone()).or_default() += 1;
        }
    }

    /// A tagged job `slot` is no longer reserved.
    pub(super) fn con_release(&mut self, slot: JobSlot) {
        let Some((key, _)) = self.ext.tags.get(&slot).and_then(|t| t.con.as_ref()) else {
            return;
        };
        if let Some(n) = self.ext.con.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.ext.con.remove(key);
            }
            self.ext.con_freed = true;
        }
    }

    /// After a `con:` reservation ended, serves the waiters of every tube
    /// with ready jobs (one of them may have been held back).
    pub(super) fn con_serve_waiters(&mut self) {
        self.ext.con_freed = false;
        let tubes: Vec<TubeIx> = self.tubes.list().to_vec();
        for t in tubes {
            let tube = &self.tubes[t];
            if !tube.waiters.is_empty() && !tube.ready.is_empty() {
                self.serve_waiters(t);
            }
        }
    }

    /// Whether [`Engine::con_serve_waiters`] has work (a cheap test).
    pub(super) fn con_freed(&self) -> bool {
        self.ext.con_freed
    }

    /// Whether a new body of `len` bytes is over the budget (and counts
    /// the refusal).
    #[inline]
    pub(super) fn over_budget(&mut self, len: usize) -> bool {
        let Some(max) = self.config.jobs_budget else {
            return false;
        };
        let over = self.jobs.bodies_size() + len as u64 > max;
        self.ext.over_budget += u64::from(over);
        over
    }

    /// The `stats` lines of the budget, when there is one.
    pub(super) fn budget_stats(&self, out: &mut Vec<u8>) {
        if let Some(max) = self.config.jobs_budget {
            let lines = format!(
                "current-jobs-size: {}\nmax-jobs-size: {max}\ntotal-puts-over-budget: {}\n",
                self.jobs.bodies_size(),
                self.ext.over_budget
            );
            out.extend_from_slice(lines.as_bytes());
        }
    }

    /// Ends every cooldown of tube `name` (`flush-tube`).
    pub(super) fn end_cooling_in(&mut self, name: &TubeName) {
        let Some(keys) = self.ext.keys.get(name) else {
            return;
        };
        let ending: Vec<(Time, JobId)> = keys
            .values()
            .filter_map(|held| match *held {
                Key::Cooling(id, until) => Some((until, id)),
                Key::Live(_) => None,
            })
            .collect();
        for (until, id) in ending {
            self.end_cooling(until, id);
        }
    }

    /// What `conn`'s unfinished `flush-tube` has flushed, if it has one.
    pub(super) fn ext_flushing(&self, conn: ConnId) -> Option<u64> {
        self.ext.flushing.get(&conn).copied()
    }

    pub(super) fn ext_set_flushing(&mut self, conn: ConnId, flushed: u64) {
        self.ext.flushing.insert(conn, flushed);
    }

    /// `conn`'s `flush-tube` is over (or `conn` is gone).
    pub(super) fn ext_clear_flushing(&mut self, conn: ConnId) {
        if !self.ext.flushing.is_empty() {
            self.ext.flushing.remove(&conn);
        }
    }

    /// Whether any cooldown is running (a cheap test for `tick`).
    pub(super) fn cooling(&self) -> bool {
        !self.ext.cooling.is_empty()
    }
}
