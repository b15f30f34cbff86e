//! Room in the store's journal: the gate the engine applies before a change
//! it must record.
//!
//! With `-b`, the store writes its journal into files allocated ahead of use
//! (`store/room.rs`), so a record never meets a full disk halfway. Before
//! each batch of commands the store tells the engine how many of those bytes
//! are free ([`Room`]), and every recorded change is charged what its record
//! may cost there ([`cost`]), so the count stays exact while the engine's
//! lock is held. The rules, beanstalkd's with one more:
//! - a put also sets aside the room of its own delete, so every stored job can
//!   always be deleted: a full disk never stops a queue from draining;
//! - a put must leave [`Room::kept`] bytes free, kept for the release, bury and
//!   kick of jobs already stored; those answer OUT_OF_MEMORY (and change
//!   nothing) only once even that is used up;
//! - a put may count on what the store can still allocate ([`Room::spare`]),
//!   an update only on what is allocated: the store allocates for a put on
//!   the spot if it must (and fails it, rarely, if the disk filled up
//!   meanwhile), while an admitted update is never refused later;
//! - a TTR that runs out is never refused, it happens anyway: without room its
//!   record is skipped, and after a restart the job comes back ready all the
//!   same, with its `timeouts` count as of its last record.
//!
//! The byte figures are upper bounds on the store's encoding (the store's
//! tests hold it to them): a job's fixed fields, its tube name and body, and a
//! frame header for each command, which the store gives back once it knows
//! how many commands shared a frame.

/// What a command's records may cost, beyond their entries: the header of
/// the journal frame that carries them.
pub const FRAME_BYTES: i64 = 24;
/// A job's entry without its tube name and body: length prefix and fixed
/// fields.
pub const ENTRY_FIXED_BYTES: i64 = 4 + 59;
/// A delete's entry: length prefix, tag and id.
pub const TOMBSTONE_BYTES: i64 = 4 + 9;
/// What a put sets aside for its delete: a tombstone in a frame of its own.
pub const DELETE_ROOM: i64 = FRAME_BYTES + TOMBSTONE_BYTES;

/// A change the engine is about to record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new job: body and tube name lengths.
    Put {
        body: usize,
        tube: usize,
    },
    /// A stored job's new state (its body is already stored).
    Update {
        tube: usize,
    },
    Delete,
}

/// What `change` costs in the journal, its delete's room included for a put
/// (and so a delete costs nothing: it uses what its put set aside).
pub fn cost(change: Change) -> i64 {
    match change {
        Change::Put { body, tube } => {
            ENTRY_FIXED_BYTES + (tube + body) as i64 + FRAME_BYTES + DELETE_ROOM
        }
        Change::Update { tube } => ENTRY_FIXED_BYTES + tube as i64 + FRAME_BYTES,
        Change::Delete => TOMBSTONE_BYTES + FRAME_BYTES - DELETE_ROOM,
    }
}

/// Free room in the store's journal, as the store reported it before this
/// batch, less what the batch has recorded since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// Allocated and not yet claimed.
    pub bytes: i64,
    /// What the store can still allocate on top.
    pub spare: i64,
    /// Bytes a put must leave free.
    pub kept: i64,
}

impl Room {
    /// No store, or one that never runs out: nothing is ever refused.
    pub const UNLIMITED: Room = Room {
        bytes: i64::MAX,
        spare: 0,
        kept: 0,
    };

    /// Whether the store can take `change` now.
    pub fn admits(&self, change: Change) -> bool {
        let left = self.bytes.saturating_sub(cost(change));
        match change {
            Change::Put { .. } => left.saturating_add(self.spare) >= self.kept,
            Change::Update { .. } => left >= 0,
            Change::Delete => true,
        }
    }

    /// Charges `change`.
    pub fn charge(&mut self, change: Change) {
        self.bytes = self.bytes.saturating_sub(cost(change));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delete_costs_what_its_put_set_aside() {
        assert_eq!(cost(Change::Delete), 0);
        let put = Change::Put { body: 100, tube: 7 };
        let update = Change::Update { tube: 7 };
        assert_eq!(cost(put), cost(update) + 100 + DELETE_ROOM);
    }

    #[test]
    fn who_is_admitted() {
        let put = Change::Put { body: 100, tube: 7 };
        let update = Change::Update { tube: 7 };
        let (p, u) = (cost(put), cost(update));
        // (allocated, spare, kept, change, admitted)
        let table = [
            (p + 50, 0, 50, put, true),
            (p + 49, 0, 50, put, false),
            (p + 49, 1, 50, put, true),
            (0, p + 50, 50, put, true),
            (p + 49, 0, 50, update, true),
            (u, 0, 50, update, true),
            (u - 1, 0, 50, update, false),
            // What can be allocated does not count for an update.
            (u - 1, 1 << 20, 50, update, false),
            (0, 0, 50, Change::Delete, true),
            (-1000, 0, 50, Change::Delete, true),
            (i64::MAX, i64::MAX, 0, put, true),
            (i64::MIN, 0, 0, update, false),
        ];
        for (bytes, spare, kept, change, admitted) in table {
            let room = Room { bytes, spare, kept };
            assert_eq!(room.admits(change), admitted, "{room:?} {change:?}");
        }
        let mut room = Room::UNLIMITED;
        room.charge(put);
        assert!(room.admits(put));
    }
}
