//! Every live job, found by id.
//!
//! Records live in a slab (`Vec`, freed slots reused), and an open-addressing
//! index maps ids to slots. The index stores only the 4-byte slot and reads
//! the id back from the record, so it costs about 8 bytes per job at its
//! worst load, where a `HashMap<JobId, Job>` would pay a whole record for
//! each empty bucket. Ids are sequential, and Fibonacci hashing spreads them
//! evenly, so probes stay short. Queues refer to jobs by slot, which stays
//! put for the job's whole life.
//!
//! Beside the slab, a dense array holds each slot's position in its tube's
//! ready or delay heap (a job is in at most one). Sifting rewrites the
//! positions of every entry it moves; kept in 4 bytes per job rather than
//! in the records, those writes stay within a few cache-resident megabytes.

use std::ops::{Index, IndexMut};

use sprout_protocol::JobId;

use super::job::Job;

const EMPTY: u32 = u32::MAX;
const MIN_BUCKETS_LOG2: u32 = 4;

/// The most jobs the table holds: 2^30 - 1, well inside `u32` slots and
/// heap positions (and the limit since positions shared a word with the
/// job's state).
const MAX_JOBS: usize = (1 << 30) - 1;

pub(super) struct JobTable {
    slab: Vec<Option<Job>>,
    /// By slot: the job's position in its heap (meaningless for a job in none).
    heap_pos: Vec<u32>,
    free: Vec<u32>,
    /// Slots, or `EMPTY`; a power-of-two length, at most 3/4 full.
    buckets: Vec<u32>,
    /// `64 - log2(buckets.len())`: turns a hash into a bucket.
    shift: u32,
    len: usize,
}

impl JobTable {
    pub(super) fn new() -> JobTable {
        JobTable {
            slab: Vec::new(),
            heap_pos: Vec::new(),
            free: Vec::new(),
            buckets: vec![EMPTY; 1 << MIN_BUCKETS_LOG2],
            shift: 64 - MIN_BUCKETS_LOG2,
            len: 0,
        }
    }

    pub(super) fn find(&self, id: JobId) -> Option<u32> {
        let mask = self.buckets.len() - 1;
        let mut i = self.home(id);
        loop {
            let slot = self.buckets[i];
            if slot == EMPTY {
                return None;
            }
            if self[slot].id == id {
                return Some(slot);
            }
            i = (i + 1) & mask;
        }
    }

    /// Whether another job fits: at most [`MAX_JOBS`], so a put past that
    /// answers OUT_OF_MEMORY instead of overflowing the `u32` slots and
    /// heap positions.
    pub(super) fn is_full(&self) -> bool {
        self.len >= MAX_JOBS
    }

    /// Stores `job` and returns its slot.
    pub(super) fn insert(&mut self, job: Job) -> u32 {
        if (self.len + 1) * 4 > self.buckets.len() * 3 {
            self.grow();
        }
        let id = job.id;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slab[slot as usize] = Some(job);
                slot
            }
            None => {
                let slot = u32::try_from(self.slab.len()).ok().filter(|&s| s != EMPTY);
                self.slab.push(Some(job));
                self.heap_pos.push(0);
                slot.expect("job table full")
            }
        };
        self.place(id, slot);
        self.len += 1;
        slot
    }

    /// Forgets the job in `slot` and hands it back.
    pub(super) fn remove(&mut self, slot: u32) -> Job {
        let mask = self.buckets.len() - 1;
        let mut hole = self.home(self[slot].id);
        while self.buckets[hole] != slot {
            hole = (hole + 1) & mask;
        }
        // Backward-shift deletion: pull later entries of the probe run into
        // the hole when the hole lies on their way from their home bucket.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let other = self.buckets[j];
            if other == EMPTY {
                break;
            }
            let home = self.home(self[other].id);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.buckets[hole] = other;
                hole = j;
            }
        }
        self.buckets[hole] = EMPTY;
        self.len -= 1;
        self.free.push(slot);
        self.slab[slot as usize].take().expect("live job slot")
    }

    /// Where the job in `slot` sits in its tube's ready or delay heap.
    pub(super) fn heap_pos(&self, slot: u32) -> usize {
        self.heap_pos[slot as usize] as usize
    }

    pub(super) fn set_heap_pos(&mut self, slot: u32, pos: usize) {
        debug_assert!(pos < MAX_JOBS);
        self.heap_pos[slot as usize] = pos as u32;
    }

    /// Asks the CPU to start loading the record in `slot` (the two cache
    /// lines a 96-byte record spans), for a read soon after: the heaps call
    /// this for a job that has just come to the top, which the next
    /// `reserve` or promotion reads, so that miss overlaps other work. Only
    /// a hint: it changes nothing but timing, and does nothing off x86-64.
    pub(super) fn prefetch(&self, slot: u32) {
        #[cfg(target_arch = "x86_64")]
        if let Some(record) = self.slab.get(slot as usize) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let first = (record as *const Option<Job>).cast::<i8>();
            let last = first.wrapping_add(std::mem::size_of::<Option<Job>>() - 1);
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

    fn home(&self, id: JobId) -> usize {
        (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    fn place(&mut self, id: JobId, slot: u32) {
        let mask = self.buckets.len() - 1;
        let mut i = self.home(id);
        while self.buckets[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.buckets[i] = slot;
    }

    fn grow(&mut self) {
        self.buckets = vec![EMPTY; self.buckets.len() * 2];
        self.shift -= 1;
        for slot in 0..self.slab.len() as u32 {
            if let Some(job) = &self.slab[slot as usize] {
                self.place(job.id, slot);
            }
        }
    }
}

impl Index<u32> for JobTable {
    type Output = Job;

    fn index(&self, slot: u32) -> &Job {
        self.slab[slot as usize].as_ref().expect("live job slot")
    }
}

impl IndexMut<u32> for JobTable {
    fn index_mut(&mut self, slot: u32) -> &mut Job {
        self.slab[slot as usize].as_mut().expect("live job slot")
    }
}
