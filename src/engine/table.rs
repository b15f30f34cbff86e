//! Every live job, found by id, and its body.
//!
//! Bodies live in [`Bodies`], packed into slabs; a record holds a handle.
//! Records live in a slab (`Vec`, freed slots reused), and an open-addressing
//! index maps ids to slots. The index stores only the 4-byte slot and reads
//! the id back from the record, so it costs about 8 bytes per job at its
//! worst load, where a `HashMap<JobId, JobRow>` would pay a whole record for
//! each empty bucket. Ids are sequential, and Fibonacci hashing spreads them
//! evenly, so probes stay short. Queues refer to jobs by slot, which stays
//! put for the job's whole life.
//!
//! The index grows without a pause: when it fills, a twice-as-large one
//! takes over, and every later insert or remove also moves the jobs of a
//! few slots ([`MIGRATE_STEP`]) from the old one, in slot order, until it
//! is empty. Rebuilding it at once held the engine's lock for 16 ms at
//! 0.8M jobs and 66 ms at 3M, doubling with every growth: every client and
//! every due job waited that long.
//!
//! Beside the slab, a dense array holds each slot's position in its tube's
//! ready or delay heap (a job is in at most one). Sifting rewrites the
//! positions of every entry it moves; kept in 4 bytes per job rather than
//! in the records, those writes stay within a few cache-resident megabytes.
//!
//! What a held 100-byte job costs, measured (RSS by mapping after `load
//! fill`, 1M and 10M jobs; the big arrays are mappings of their own): its
//! body 100 (plus 16 bytes of `malloc` header per 12.8 KB page), its
//! record 40, its ready-heap entry 16 (delayed: 12), its heap position 4,
//! the id index 8.4 at 1M (2^21 buckets) and 6.7 at 10M (2^24), and about
//! 2 bytes at 1M of everything else (connections, allocator): 170 B ready,
//! 167 delayed at 1M; 167 and 163 at 10M. Issue 16's 150 is not reached:
//! without the record, the body, the heap's copied keys, the positions and
//! the index already take 128.5 (1M ready; 124.5 delayed, 126.8 and 122.8
//! at 10M). The copies and positions keep `reserve` and promotion at about
//! one miss per heap level, and the index finds a job by id in O(1); so
//! 150 at 1M ready needs a record under 20 bytes. The record's 40 are the
//! id, creation time and deadline (8 each: microseconds, for exact ages),
//! the priority and profile (4 each) and one word for the body handle,
//! state, tags flag and counts; the next candidates, the creation time as
//! 32-bit offsets from per-epoch bases and the priority interned, would
//! bring it to 32, each with costs of its own.

use std::collections::BTreeMap;
use std::ops::{Index, IndexMut};

use sprout_protocol::JobId;

use super::bodies::{Bodies, Body};
use super::clock::Time;
use super::counts::{Counter, Counts, Packed};
use super::job::JobRow;
use super::profile::{Profile, Profiles};
use super::tube_ix::TubeIx;

/// An empty bucket. Buckets hold slot + 1, so a new index is all zeroes:
/// the allocator hands those out as untouched pages, without writing the
/// whole array while the engine's lock is held.
const EMPTY: u32 = 0;
const MIN_BUCKETS_LOG2: u32 = 4;
/// Slots whose jobs move from a growing table's old index per insert or
/// remove. The new index is twice as large, so it takes about as many
/// inserts as there are jobs to fill it again; this empties the old one
/// in an eighth of that.
const MIGRATE_STEP: u32 = 8;

/// Slots an empty table keeps room for however many it held: giving back
/// less is not worth a reallocation.
const KEEP_SLOTS: usize = 4096;

/// The most jobs the table holds: 2^30 - 1, well inside `u32` slots and
/// heap positions (and the limit since positions shared a word with the
/// job's state).
const MAX_JOBS: usize = (1 << 30) - 1;

/// Where a job's record sits in the job table's slab: what queues, heaps
/// and connections hold to refer to a job (it stays put for its life).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub(super) struct JobSlot(u32);

impl JobSlot {
    /// The lowest slot, where ranges over slot-keyed sets start.
    pub(super) const FIRST: JobSlot = JobSlot(0);

    /// The slot as an index into arrays kept by slot.
    pub(super) fn at(self) -> usize {
        self.0 as usize
    }
}

type Slab = Vec<Option<JobRow>>;

// The record's size is what a held job costs beside its body; keep it so.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Option<JobRow>>() == 40);

pub(super) struct JobTable {
    slab: Slab,
    bodies: Bodies,
    profiles: Profiles,
    /// By slot: the counts of jobs whose counts outgrew their record's bits.
    spilled: BTreeMap<JobSlot, Counts>,
    /// By slot: the job's position in its heap (meaningless for a job in none).
    heap_pos: Vec<u32>,
    /// By slot: the journal file its latest record went to (`stats-job`'s
    /// `file`), 0 for none; empty without a journal.
    files: Vec<u32>,
    free: Vec<JobSlot>,
    /// Where ids are found; at most 3/4 full.
    index: IdIndex,
    /// While the index grows, the one it replaced: it still holds the jobs
    /// that were in it, in slots from `moved` on, until they are moved.
    old: Option<IdIndex>,
    moved: u32,
    len: usize,
}

/// Open addressing over slots, keyed by the ids read back from the slab.
struct IdIndex {
    /// Slots + 1, or `EMPTY`; a power-of-two length.
    buckets: Vec<u32>,
    /// `64 - log2(buckets.len())`: turns a hash into a bucket.
    shift: u32,
}

impl IdIndex {
    fn with_log2(log2: u32) -> IdIndex {
        IdIndex {
            buckets: vec![EMPTY; 1 << log2],
            shift: 64 - log2,
        }
    }

    fn home(&self, id: JobId) -> usize {
        (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The slot in `bucket`, which is not empty.
    fn slot(&self, bucket: usize) -> JobSlot {
        JobSlot(self.buckets[bucket] - 1)
    }

    /// The bucket holding job `id`.
    fn find(&self, slab: &Slab, id: JobId) -> Option<usize> {
        let mask = self.buckets.len() - 1;
        let mut i = self.home(id);
        loop {
            if self.buckets[i] == EMPTY {
                return None;
            }
            if record(slab, self.slot(i)).id == id {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    fn place(&mut self, id: JobId, slot: JobSlot) {
        let mask = self.buckets.len() - 1;
        let mut i = self.home(id);
        while self.buckets[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.buckets[i] = slot.0 + 1;
    }

    /// Empties `bucket` by backward-shift deletion: later entries of the
    /// probe run move into the hole when it lies on their way from their
    /// home bucket, so no tombstones are needed.
    fn remove_at(&mut self, slab: &Slab, bucket: usize) {
        let mask = self.buckets.len() - 1;
        let mut hole = bucket;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if self.buckets[j] == EMPTY {
                break;
            }
            let home = self.home(record(slab, self.slot(j)).id);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.buckets[hole] = self.buckets[j];
                hole = j;
            }
        }
        self.buckets[hole] = EMPTY;
    }

    /// Whether `jobs` entries would fill it past 3/4.
    fn overfull(&self, jobs: usize) -> bool {
        jobs * 4 > self.buckets.len() * 3
    }
}

fn record(slab: &Slab, slot: JobSlot) -> &JobRow {
    slab[slot.at()].as_ref().expect("live job slot")
}

impl JobTable {
    pub(super) fn new() -> JobTable {
        JobTable {
            slab: Vec::new(),
            bodies: Bodies::new(),
            profiles: Profiles::default(),
            spilled: BTreeMap::new(),
            heap_pos: Vec::new(),
            files: Vec::new(),
            free: Vec::new(),
            index: IdIndex::with_log2(MIN_BUCKETS_LOG2),
            old: None,
            moved: 0,
            len: 0,
        }
    }

    pub(super) fn find(&self, id: JobId) -> Option<JobSlot> {
        if let Some(bucket) = self.index.find(&self.slab, id) {
            return Some(self.index.slot(bucket));
        }
        let old = self.old.as_ref()?;
        old.find(&self.slab, id).map(|bucket| old.slot(bucket))
    }

    /// Whether another job fits: at most [`MAX_JOBS`], so a put past that
    /// answers OUT_OF_MEMORY instead of overflowing the `u32` slots and
    /// heap positions.
    pub(super) fn is_full(&self) -> bool {
        self.len >= MAX_JOBS
    }

    /// Makes room for `more` jobs (recovery knows how many come): the slab
    /// and positions grow once, and an empty table's index starts at the
    /// size they need (restoring 1M jobs otherwise grew it 16 times).
    pub(super) fn reserve(&mut self, more: usize) {
        self.slab.reserve(more);
        self.heap_pos.reserve(more);
        if self.len == 0 && self.old.is_none() {
            // The fewest buckets `more` jobs leave at most 3/4 full.
            let buckets = (more * 4).div_ceil(3).next_power_of_two();
            self.index = IdIndex::with_log2(buckets.trailing_zeros().max(MIN_BUCKETS_LOG2));
        }
    }

    /// Stores a new ready job with a copy of `body` and returns its slot.
    pub(super) fn insert(
        &mut self,
        id: JobId,
        pri: u32,
        profile: Profile,
        created: Time,
        body: &[u8],
    ) -> JobSlot {
        let body = self.bodies.put(body);
        self.insert_with(id, pri, profile, created, body)
    }

    /// Stores a new ready job whose body is `body`, a handle taken from
    /// the job's record before it was replaced ([`JobTable::take_body`]).
    pub(super) fn insert_with(
        &mut self,
        id: JobId,
        pri: u32,
        profile: Profile,
        created: Time,
        body: Body,
    ) -> JobSlot {
        if self.index.overfull(self.len + 1) {
            self.grow();
        }
        let mut job = JobRow::new(id, pri, self.profiles.acquire(profile), created);
        job.set_body(body);
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slab[slot.at()] = Some(job);
                slot
            }
            None => {
                let slot = u32::try_from(self.slab.len())
                    .ok()
                    .filter(|&s| s != u32::MAX);
                self.slab.push(Some(job));
                self.heap_pos.push(0);
                JobSlot(slot.expect("job table full"))
            }
        };
        self.index.place(id, slot);
        self.len += 1;
        self.migrate(MIGRATE_STEP);
        slot
    }

    /// The body of the job in `slot`, whose record keeps an empty one from
    /// now on: for a record about to be replaced by a newer one of the same
    /// job, which takes the handle ([`JobTable::insert_with`]) rather than
    /// a copy of the bytes (a standby's update carries none).
    pub(super) fn take_body(&mut self, slot: JobSlot) -> Body {
        let body = self[slot].body();
        self[slot].set_body(Body::default());
        body
    }

    /// Frees a body taken with [`JobTable::take_body`] that no record took.
    pub(super) fn free_body(&mut self, body: Body) {
        self.bodies.free(body);
    }

    /// From now on, bodies longer than `inline` bytes are left to the store
    /// (`bodies.rs`).
    pub(super) fn leave_bodies_to_store(&mut self, inline: usize) {
        self.bodies.leave_to_store(inline);
    }

    /// The length of the body of the job in `slot` if only the store keeps
    /// it: a reply naming the job is filled outside the engine.
    pub(super) fn stored_len(&self, slot: JobSlot) -> Option<usize> {
        let body = self[slot].body();
        body.is_stored().then(|| self.bodies.len(body))
    }

    /// The length of the body of the job in `slot`.
    pub(super) fn body_len(&self, slot: JobSlot) -> usize {
        self.bodies.len(self[slot].body())
    }

    /// The tube, TTR and delay of the job in `slot`.
    pub(super) fn profile(&self, slot: JobSlot) -> Profile {
        self.profiles.get(self[slot].profile)
    }

    /// The tube of the job in `slot`.
    pub(super) fn tube(&self, slot: JobSlot) -> TubeIx {
        self.profile(slot).tube
    }

    /// Gives the job in `slot` another profile (a new delay, another tube).
    pub(super) fn set_profile(&mut self, slot: JobSlot, profile: Profile) {
        let old = self[slot].profile;
        if self.profiles.get(old) == profile {
            return;
        }
        let new = self.profiles.acquire(profile);
        self.profiles.release(old);
        self[slot].profile = new;
    }

    /// The bytes of every body held.
    pub(super) fn bodies_size(&self) -> u64 {
        self.bodies.bytes()
    }

    /// A copy of the body of the job in `slot`, for a reply or a record;
    /// empty if only the store keeps it ([`JobTable::stored_len`]).
    pub(super) fn body_bytes(&self, slot: JobSlot) -> bytes::Bytes {
        let body = self.bodies.get(self[slot].body());
        body.map_or_else(bytes::Bytes::new, bytes::Bytes::copy_from_slice)
    }

    /// The `stats-job` counters of the job in `slot`.
    pub(super) fn counts(&self, slot: JobSlot) -> Counts {
        let packed = self[slot].counts();
        if packed.is_spilled() {
            return self.spilled[&slot];
        }
        packed.unpack()
    }

    /// Counts one more of `counter` for the job in `slot`.
    pub(super) fn bump(&mut self, slot: JobSlot, counter: Counter) {
        let packed = self[slot].counts();
        match packed.bumped(counter) {
            Some(packed) => self[slot].set_counts(packed),
            None => {
                let counts = self.counts(slot).bumped(counter);
                self.set_counts(slot, counts);
            }
        }
    }

    /// Sets the counters of the job in `slot` (a restored job's).
    pub(super) fn set_counts(&mut self, slot: JobSlot, counts: Counts) {
        match counts.pack() {
            Some(packed) => {
                self.spilled.remove(&slot);
                self[slot].set_counts(packed);
            }
            None => {
                self.spilled.insert(slot, counts);
                self[slot].set_counts(Packed::SPILLED);
            }
        }
    }

    /// Forgets the job in `slot` and its body; hands back its id and tube.
    pub(super) fn remove(&mut self, slot: JobSlot) -> (JobId, TubeIx) {
        let id = self[slot].id;
        let (index, bucket) = match self.index.find(&self.slab, id) {
            Some(bucket) => (&mut self.index, bucket),
            None => {
                let old = self.old.as_mut().expect("a live job is indexed");
                let bucket = old.find(&self.slab, id).expect("a live job is indexed");
                (old, bucket)
            }
        };
        index.remove_at(&self.slab, bucket);
        self.len -= 1;
        self.free.push(slot);
        let job = self.slab[slot.at()].take().expect("live job slot");
        let tube = self.profiles.get(job.profile).tube;
        self.bodies.free(job.body());
        self.profiles.release(job.profile);
        if job.counts().is_spilled() {
            self.spilled.remove(&slot);
        }
        self.migrate(MIGRATE_STEP);
        if self.len == 0 {
            self.empty_out();
        }
        (id, tube)
    }

    /// Once the last job is gone, gives back the room a burst grew: the
    /// slab, the positions, the journal files, the free list and the index
    /// keep their peak size while any job is left (slots stay put): a `-b`
    /// server drained of 1M 100-byte jobs held 112 MB, 54 MB with this.
    /// (The heaps and the body slabs give theirs back as they empty.)
    fn empty_out(&mut self) {
        if self.slab.capacity() <= KEEP_SLOTS {
            return;
        }
        self.slab = Vec::new();
        self.heap_pos = Vec::new();
        self.files = Vec::new();
        self.free = Vec::new();
        self.index = IdIndex::with_log2(MIN_BUCKETS_LOG2);
        self.old = None;
        self.moved = 0;
    }

    /// The slots the slab has room for, the index's buckets and the slots
    /// journal files are kept for.
    #[cfg(test)]
    pub(super) fn room(&self) -> (usize, usize, usize) {
        (
            self.slab.capacity(),
            self.index.buckets.len(),
            self.files.capacity(),
        )
    }

    /// The journal file job `slot`'s latest record went to (0: none).
    pub(super) fn file(&self, slot: JobSlot) -> u32 {
        self.files.get(slot.at()).copied().unwrap_or(0)
    }

    /// Job `slot`'s latest record went to journal file `file`.
    pub(super) fn set_file(&mut self, slot: JobSlot, file: u32) {
        let at = slot.at();
        if self.files.len() <= at {
            self.files.resize(at + 1, 0);
        }
        self.files[at] = file;
    }

    /// Where the job in `slot` sits in its tube's ready or delay heap.
    pub(super) fn heap_pos(&self, slot: JobSlot) -> usize {
        self.heap_pos[slot.at()] as usize
    }

    pub(super) fn set_heap_pos(&mut self, slot: JobSlot, pos: usize) {
        debug_assert!(pos < MAX_JOBS);
        self.heap_pos[slot.at()] = pos as u32;
    }

    /// Asks the CPU to start loading the record in `slot` (the cache lines
    /// a 40-byte record spans), for a read soon after: the heaps call
    /// this for a job that has just come to the top, which the next
    /// `reserve` or promotion reads, so that miss overlaps other work. Only
    /// a hint: it changes nothing but timing, and does nothing off x86-64.
    pub(super) fn prefetch(&self, slot: JobSlot) {
        #[cfg(target_arch = "x86_64")]
        if let Some(record) = self.slab.get(slot.at()) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let first = (record as *const Option<JobRow>).cast::<i8>();
            let last = first.wrapping_add(std::mem::size_of::<Option<JobRow>>() - 1);
            // SAFETY: a prefetch never faults and has no architectural
            // effect; both addresses lie within `record` anyway.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(first);
                _mm_prefetch::<_MM_HINT_T0>(last);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    /// Starts a twice-as-large index (after finishing a growth still under
    /// way, which [`MIGRATE_STEP`] makes all but impossible).
    fn grow(&mut self) {
        self.migrate(u32::MAX);
        let log2 = 64 - self.index.shift + 1;
        self.old = Some(std::mem::replace(&mut self.index, IdIndex::with_log2(log2)));
        self.moved = 0;
    }

    /// Moves the jobs of up to `slots` more slots from the old index to the
    /// new one; drops the old one once every slot has been seen.
    fn migrate(&mut self, slots: u32) {
        let Some(old) = &mut self.old else { return };
        for _ in 0..slots {
            let slot = JobSlot(self.moved);
            let Some(entry) = self.slab.get(slot.at()) else {
                self.old = None;
                return;
            };
            self.moved += 1;
            // A job stored after the growth began is in the new index.
            if let Some(job) = entry {
                if let Some(bucket) = old.find(&self.slab, job.id) {
                    let id = job.id;
                    old.remove_at(&self.slab, bucket);
                    self.index.place(id, slot);
                }
            }
        }
    }
}

impl Index<JobSlot> for JobTable {
    type Output = JobRow;

    fn index(&self, slot: JobSlot) -> &JobRow {
        self.slab[slot.at()].as_ref().expect("live job slot")
    }
}

impl IndexMut<JobSlot> for JobTable {
    fn index_mut(&mut self, slot: JobSlot) -> &mut JobRow {
        self.slab[slot.at()].as_mut().expect("live job slot")
    }
}
