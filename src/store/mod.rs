//! Persistence behind one small seam.
//!
//! The engine journals every change that must survive a restart
//! ([`crate::engine::Record`]); under the engine lock, the server hands each
//! command's records to the [`Store`] and gets a sequence number back, so
//! records reach the store in engine order. Before a reply goes out, the
//! connection waits until the store has done what the reply depends on
//! ([`Progress`]): its records written to the journal (handed to the kernel),
//! under `-f 0` also synced, and any job id it names below the id ceiling the
//! disk holds. How the durable store does that is `journal.rs`; the rest of
//! this directory:
//!
//! - `journal.rs`: the append path and group commit; `journal/space.rs`:
//!   the room figures and the files made ahead;
//! - `keeper.rs`: the journal's syncs; `allocator.rs`: its files, allocated
//!   ahead; `bells.rs`: how the journal reaches both;
//! - `frame.rs`, `entry.rs`, `record.rs`: the bytes of a frame, an entry, a job
//!   (`reader.rs` reads their fields);
//! - `segment.rs`: journal files; `room.rs`: how much of them is free;
//! - `ids.rs`: job ids never handed out twice;
//! - `absorb.rs`: sled takes the journal in; `pack.rs`: records into pages;
//!   `page.rs`, `log.rs`, `places.rs`, `page_table.rs`, `slots.rs`,
//!   `blobs.rs`: how jobs are kept in sled, and kept bounded;
//! - `recover.rs`: sled (read twice, a page at a time), then the journal's
//!   tail, back at startup (its `files.rs` reads and readies the journal,
//!   `over.rs` lays it over sled);
//! - `whole.rs`: whether sled holds all it says, so recovery can trust it;
//! - `ballast.rs`: room for sled to open on a full disk;
//! - `body_cache.rs`: recently used bodies, for when the engine holds only
//!   their length (issue 33); `directory.rs`: where stored jobs are, shared
//!   with readers; `page_source.rs`: where readers find a page (sled, or a
//!   cluster node's copy); `body_read.rs`: a body read back from its page,
//!   checked;
//!   `read_ahead.rs`: the pages after it read in the background, for a drain;
//!   `share.rs`: cached bodies made slices of sled's pages, when idle;
//!   `reclaim.rs`: what sled replaced, freed when idle;
//! - `durable.rs`: opens all of it and wires the threads.
//!
//! Without `-b` there is no store at all ([`Memory`]), and the engine keeps
//! no journal, so memory mode pays nothing for this.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use sprout_protocol::JobId;

use crate::engine::{Record, Room};

mod absorb;
mod allocator;
mod ballast;
mod bells;
mod blobs;
mod body_cache;
mod body_read;
mod corrupt;
mod directory;
pub mod durable;
mod entry;
mod extras;
mod frame;
mod ids;
mod journal;
mod keeper;
mod log;
mod pack;
mod page;
mod page_source;
mod page_table;
mod places;
mod read_ahead;
mod reader;
mod reclaim;
mod record;
mod recover;
mod room;
mod segment;
mod share;
mod slots;
mod whole;

// What cluster mode (`src/cluster/`) shares with the durable store: the
// page log, kept in a stream instead of sled.
pub use body_cache::DEFAULT_BYTES as DEFAULT_BODY_CACHE;
pub(crate) use body_read::{Bodies, Failed};
pub(crate) use corrupt::Corrupt;
#[cfg(test)]
pub(crate) use entry::tests::image as test_image;
pub(crate) use entry::Kind as EntryKind;
pub(crate) use frame::{
    of as frame_of, pushed_len as frame_pushed_len, read as read_frame, records as frame_records,
    HEADER_LEN as FRAME_HEADER_LEN,
};
pub(crate) use ids::raise as raise_id_ceiling;
pub(crate) use log::Log;
pub(crate) use pack::{pack, Packed};
pub(crate) use page::{read as page_entries, PAGE_BYTES};
pub(crate) use page_source::{PageSource, PageValue};
pub(crate) use record::decode_job;
pub(crate) use slots::Slot;

/// A submission's place in the store's order. 0 means "nothing to wait for".
pub type Seq = u64;

/// When records are forced to disk (beanstalkd's `-f`/`-F`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// `-f 0`: before the reply is sent.
    Always,
    /// `-f MS`: at most this long after the reply.
    Every(Duration),
    /// `-F`: never forced (the store's own background writes only).
    Never,
}

/// How far the store has got.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Every submission up to here is written (handed to the kernel), or
    /// failed.
    pub written: Seq,
    /// Every submission up to here is synced, or failed.
    pub synced: Seq,
    /// No job id at or above this was handed out, as far as the disk knows:
    /// no reply may name one.
    pub ids_below: JobId,
    /// Every submission up to here is in the store of record.
    pub absorbed: Seq,
    /// The store of record is not taking submissions in (a low disk): then
    /// nobody waits for it to catch up.
    pub absorb_paused: bool,
    /// Recent submissions the store failed to write, as inclusive ranges.
    failed: Arc<Vec<(Seq, Seq)>>,
}

/// How many failed ranges [`Progress`] remembers; a reply waiting on an
/// older one has long been answered.
const FAILURES_KEPT: usize = 64;

impl Progress {
    /// Whether submission `seq` failed to be stored.
    pub fn failed(&self, seq: Seq) -> bool {
        self.failed.iter().any(|&(a, b)| (a..=b).contains(&seq))
    }

    /// Marks submissions `from..=to` failed: written and synced as far as
    /// anyone waiting on them is concerned.
    pub fn fail(&mut self, from: Seq, to: Seq) {
        self.written = self.written.max(to);
        self.synced = self.synced.max(to);
        let list = Arc::make_mut(&mut self.failed);
        if list.len() == FAILURES_KEPT {
            list.remove(0);
        }
        list.push((from, to));
    }

    /// Whether a reply that waits for submission `seq` (synced if `sync`)
    /// and names no job id at or above `id_bound` may go out.
    pub fn allows(&self, seq: Seq, sync: bool, id_bound: JobId) -> bool {
        let done = if sync { self.synced } else { self.written };
        done >= seq && id_bound <= self.ids_below
    }
}

/// What the server needs from a store.
pub trait Store: Send + Sync {
    /// Queues one command's records; called under the engine lock so
    /// sequence numbers follow engine order.
    fn submit(&self, records: Vec<Record>) -> Seq;

    /// Follows the store's progress.
    fn progress(&self) -> watch::Receiver<Progress>;

    /// Whether replies wait until their records are synced (`-f 0`).
    fn replies_wait_for_sync(&self) -> bool;

    /// Writes what is queued now, for the caller's reply; true if it wrote
    /// and reported something, false if someone else is writing or has
    /// written (their progress report follows: wait for it).
    fn write_out(&self) -> bool;

    /// Asks for a sync soon.
    fn request_sync(&self);

    /// What the engine may still record (see `engine/admission.rs`).
    fn room(&self) -> Room;

    /// The journal file being written (`stats-job`'s `file`), 0 if none.
    fn file(&self) -> u32;

    /// The oldest journal file kept (`stats-job`'s `file` for a job whose
    /// file the store has taken in), 0 if none.
    fn oldest_file(&self) -> u64 {
        0
    }

    /// False while the store cannot take new jobs (its writes failed, or
    /// the disk has no room): `/readyz` says so.
    fn healthy(&self) -> bool {
        let room = self.room();
        room.bytes.saturating_add(room.spare) >= room.kept
    }

    /// Where job `id`'s put is: `Some(seq)` if it is still on its way
    /// (submission `seq`), `Some(0)` if it is stored; `None` if this store
    /// does not tell (then an answer naming the job waits for everything).
    fn put_of(&self, _id: JobId) -> Option<Seq> {
        None
    }

    /// Where replies find the bodies the engine leaves to this store
    /// (`Engine::stored_len`): `None` unless it keeps them (`-b`).
    fn bodies(&self) -> Option<&Arc<Bodies>> {
        None
    }

    /// Job `id`, whose put this store failed to keep, is forgotten.
    fn forget(&self, _id: JobId) {}

    /// Writes and makes durable everything submitted (at shutdown).
    fn close(&self);
}

/// A store shared with the task that writes it (cluster mode's writer).
impl<T: Store + ?Sized> Store for Arc<T> {
    fn submit(&self, records: Vec<Record>) -> Seq {
        (**self).submit(records)
    }

    fn progress(&self) -> watch::Receiver<Progress> {
        (**self).progress()
    }

    fn replies_wait_for_sync(&self) -> bool {
        (**self).replies_wait_for_sync()
    }

    fn write_out(&self) -> bool {
        (**self).write_out()
    }

    fn request_sync(&self) {
        (**self).request_sync()
    }

    fn room(&self) -> Room {
        (**self).room()
    }

    fn file(&self) -> u32 {
        (**self).file()
    }

    fn oldest_file(&self) -> u64 {
        (**self).oldest_file()
    }

    fn healthy(&self) -> bool {
        (**self).healthy()
    }

    fn put_of(&self, id: JobId) -> Option<Seq> {
        (**self).put_of(id)
    }

    fn bodies(&self) -> Option<&Arc<Bodies>> {
        (**self).bodies()
    }

    fn forget(&self, id: JobId) {
        (**self).forget(id)
    }

    fn close(&self) {
        (**self).close()
    }
}

/// How many commands' records may wait to be taken into the store of
/// record (sled) before replies wait for it to catch up: records held in
/// memory stay bounded (a few of its batches), unless it waits for room on
/// the disk (then the journal's own room bounds them).
const MAX_ABSORB_LAG: Seq = 16 * 1024;

/// Waits until a reply that depends on submission `seq` and names no job id
/// at or above `id_bound` may go out ([`Progress::allows`]), writing the
/// journal itself when nobody else is at it (so one write answers every
/// connection waiting: group commit). Returns the progress that allowed it,
/// to tell which submissions failed.
pub async fn acknowledged(
    store: &dyn Store,
    progress: &mut watch::Receiver<Progress>,
    seq: Seq,
    id_bound: JobId,
) -> std::io::Result<Progress> {
    let sync = store.replies_wait_for_sync();
    loop {
        let (allowed, lagging, written, ids_below) = {
            let p = progress.borrow_and_update();
            let lagging = !p.absorb_paused && seq > p.absorbed.saturating_add(MAX_ABSORB_LAG);
            (
                p.allows(seq, sync, id_bound),
                lagging,
                p.written,
                p.ids_below,
            )
        };
        if allowed && !lagging {
            return Ok(progress.borrow().clone());
        }
        if !allowed {
            if sync || id_bound > ids_below {
                store.request_sync();
            } else if written < seq && store.write_out() {
                continue;
            }
        }
        progress
            .changed()
            .await
            .map_err(|_| std::io::Error::other("the store stopped"))?;
    }
}

/// No persistence: beanstalkd without `-b`.
pub struct Memory {
    progress: watch::Sender<Progress>,
}

impl Memory {
    pub fn new() -> Memory {
        Memory {
            progress: watch::Sender::new(Progress {
                written: Seq::MAX,
                synced: Seq::MAX,
                ids_below: JobId::MAX,
                absorbed: Seq::MAX,
                ..Progress::default()
            }),
        }
    }
}

impl Default for Memory {
    fn default() -> Self {
        Memory::new()
    }
}

impl Store for Memory {
    fn submit(&self, _records: Vec<Record>) -> Seq {
        0
    }

    fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    fn replies_wait_for_sync(&self) -> bool {
        false
    }

    fn write_out(&self) -> bool {
        true
    }

    fn request_sync(&self) {}

    fn room(&self) -> Room {
        Room::UNLIMITED
    }

    fn file(&self) -> u32 {
        0
    }

    fn close(&self) {}
}
