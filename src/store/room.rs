//! Room in the journal: how much is allocated ahead, and what the engine is
//! told it may still record (the engine's side of the rules is
//! `engine/admission.rs`).
//!
//! beanstalkd keeps the queue drainable on a full disk by reserving, when it
//! writes a put, binlog space for the job's delete. sprout does the same
//! with journal files allocated ahead of use (`segment.rs`):
//!
//! `room = capacity - pending - live × DELETE_ROOM`
//!
//! where `capacity` is the unwritten space of the journal files allocated
//! so far (the current one and the spares), `pending` is what commands
//! submitted but not yet written may take (a frame header each, their
//! entries), and `live` counts stored jobs, each holding the room of its
//! delete. The keeper allocates spares while capacity is below
//! [`wanted`]; if the disk is full it cannot, room runs down, and puts get
//! OUT_OF_MEMORY until room appears again (the journal is taken into sled
//! and its old files removed, or someone frees disk space), with no
//! restart. Deletes always fit, and updates have [`kept`] to themselves.

use crate::engine::DELETE_ROOM;

/// Bytes at the end of every journal file that are not counted: small
/// records (a delete, a state) strand at most this much when they no
/// longer fit and the next file is taken.
pub const TAIL_SLACK: i64 = 512;

/// What a put must leave free: room for updates (release, bury, kick) of
/// jobs already stored once puts are refused, a sixteenth of a journal
/// file and at least 64 KiB; and room for what a put may strand at the end
/// of a file when it does not fit there (at most one body).
pub fn kept(file_size: u64, max_job_size: u32) -> i64 {
    let updates = (file_size as i64 / 16).max(64 << 10);
    let stranded = (i64::from(max_job_size) + 1024).min(file_size as i64);
    updates + stranded
}

/// The room the engine may use.
pub fn room(capacity: i64, pending: i64, live: i64) -> i64 {
    capacity - pending - live * DELETE_ROOM
}

/// The capacity the keeper allocates towards: everything claimed, what
/// puts must leave, and one spare file beyond (so a put rarely waits for
/// an allocation, and the next file is ready when the current one fills).
pub fn wanted(pending: i64, live: i64, kept: i64, file_size: u64) -> i64 {
    pending + live * DELETE_ROOM + kept + file_size as i64
}

/// The free disk space the journal leaves alone: what sled needs to take
/// in the `files` journal files in use (twice their bytes: pages and the
/// cleaning behind them) and a margin for sled's own log and snapshot.
pub fn headroom(files: u64, file_size: u64) -> i64 {
    (2 << 20) + 2 * (files * file_size) as i64
}

/// The countable space of a journal file of `size` bytes written up to
/// `offset`.
pub fn usable(size: u64, offset: u64) -> i64 {
    (size as i64 - offset as i64 - TAIL_SLACK).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figures() {
        // Defaults: -s 10 MiB, -z 65535.
        assert_eq!(kept(10 << 20, 65_535), (640 << 10) + 65_535 + 1024);
        // Small files keep at least 64 KiB for updates; a body larger than
        // a file strands at most a file.
        assert_eq!(kept(256 << 10, 1 << 30), (64 << 10) + (256 << 10));
        assert_eq!(room(1000, 100, 10), 1000 - 100 - 10 * DELETE_ROOM);
        assert!(room(0, 0, 1) < 0);
        assert_eq!(wanted(5, 2, 7, 100), 5 + 2 * DELETE_ROOM + 7 + 100);
        assert_eq!(usable(4096, 8), 4096 - 8 - TAIL_SLACK);
        assert_eq!(headroom(3, 1 << 20), (2 << 20) + (6 << 20));
        assert_eq!(usable(4096, 4000), 0);
    }
}
