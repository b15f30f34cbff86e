//! Where each stored job's latest image is: the page log's map from job ids
//! to their page (`log.rs`), kept small.
//!
//! Held for every stored job for the whole life of the process, it was the
//! store's largest structure: a `FxHashMap<JobId, (u64, u32)>` cost ~52 MB
//! at 1M jobs (24-byte buckets, a power-of-two table at most 7/8 full), a
//! fifth of what beanstalkd needs for the same jobs in all. Ids are handed
//! out in order, so the jobs stored at any moment are mostly runs of
//! neighbouring ids. Here ids are grouped in chunks of [`CHUNK`] by their
//! high bits; a chunk holds a bitmap of the ids it has and their places,
//! packed in id order, so a run of ids costs its 8-byte places and a
//! chunk header shared by 64 of them: ~9 MB at 1M jobs. A chunk holding a
//! single id (a job left behind among deleted neighbours: buried, long
//! delayed) keeps its place inline, with no allocation: ~40-80 bytes, no
//! more than the plain map paid per job.
//!
//! A place names its page by the low 32 bits of the page's sequence
//! number: the stored pages are always a run of consecutive sequence
//! numbers (pages are only ever removed oldest first, `log.rs`), and a run
//! of 2^32 pages is far beyond any disk, so those bits tell the stored
//! pages apart.

use rustc_hash::FxHashMap;
use sprout_protocol::JobId;

use crate::shrink::shrunk;

/// Ids per chunk: one bit each in a `u64`.
const CHUNK: u64 = 64;

/// Chunks the map keeps room for however few it holds.
const KEEP_CHUNKS: usize = 1024;

/// Where a job's latest image is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// The low 32 bits of its page's sequence number (see the module docs).
    pub page: u32,
    /// The entry's stored length.
    pub len: u32,
}

impl Place {
    pub fn new(seq: u64, len: u32) -> Place {
        Place {
            page: seq as u32,
            len,
        }
    }

    /// Whether this place is in page `seq`.
    pub fn in_page(&self, seq: u64) -> bool {
        self.page == seq as u32
    }
}

enum Chunk {
    /// One id, by its offset in the chunk.
    One(u8, Place),
    /// Bit `i` of `present`: whether offset `i` is here; `places` in
    /// offset order.
    Many { present: u64, places: Vec<Place> },
}

#[derive(Default)]
pub struct Places {
    chunks: FxHashMap<JobId, Chunk>,
    len: usize,
}

fn split(id: JobId) -> (JobId, u8) {
    (id / CHUNK, (id % CHUNK) as u8)
}

/// Where offset `at` is (or goes) in a chunk's packed places.
fn rank(present: u64, at: u8) -> usize {
    (present & ((1u64 << at) - 1)).count_ones() as usize
}

impl Places {
    /// How many jobs have a place.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, id: JobId) -> Option<Place> {
        let (key, at) = split(id);
        match self.chunks.get(&key)? {
            Chunk::One(only, place) => (*only == at).then_some(*place),
            Chunk::Many { present, places } => {
                (present & (1 << at) != 0).then(|| places[rank(*present, at)])
            }
        }
    }

    /// Sets the place of `id`; returns the one it replaces.
    pub fn insert(&mut self, id: JobId, place: Place) -> Option<Place> {
        let (key, at) = split(id);
        let chunk = match self.chunks.get_mut(&key) {
            Some(chunk) => chunk,
            None => {
                self.chunks.insert(key, Chunk::One(at, place));
                self.len += 1;
                return None;
            }
        };
        if let Chunk::One(only, old) = *chunk {
            if only == at {
                *chunk = Chunk::One(at, place);
                return Some(old);
            }
            let mut places = Vec::with_capacity(2);
            places.push(old);
            *chunk = Chunk::Many {
                present: 1 << only,
                places,
            };
        }
        let Chunk::Many { present, places } = chunk else {
            unreachable!("made Many above")
        };
        let i = rank(*present, at);
        if *present & (1 << at) != 0 {
            return Some(std::mem::replace(&mut places[i], place));
        }
        *present |= 1 << at;
        places.insert(i, place);
        self.len += 1;
        None
    }

    /// Drops the place of `id`; returns it.
    pub fn remove(&mut self, id: JobId) -> Option<Place> {
        let (key, at) = split(id);
        let chunk = self.chunks.get_mut(&key)?;
        let removed = match chunk {
            Chunk::One(only, place) if *only == at => {
                let place = *place;
                self.chunks.remove(&key);
                self.give_room_back();
                place
            }
            Chunk::One(..) => return None,
            Chunk::Many { present, places } => {
                if *present & (1 << at) == 0 {
                    return None;
                }
                let place = places.remove(rank(*present, at));
                *present &= !(1 << at);
                if places.len() == 1 {
                    *chunk = Chunk::One(present.trailing_zeros() as u8, places[0]);
                } else if places.capacity() >= 4 * places.len() {
                    places.shrink_to(2 * places.len());
                }
                place
            }
        };
        self.len -= 1;
        Some(removed)
    }

    /// Gives the chunk map's room back as `shrink.rs` says: a burst's
    /// chunks leave and their buckets stayed (1.3 MB after 1M jobs, 64 MB
    /// after 50M). The map rounds a capacity up to its buckets' (7/8 of a
    /// power of two), so near the floor a shrink may change nothing.
    fn give_room_back(&mut self) {
        let (len, room) = (self.chunks.len(), self.chunks.capacity());
        if let Some(capacity) = shrunk(len, room, KEEP_CHUNKS) {
            self.chunks.shrink_to(capacity);
        }
    }

    /// The chunks the map has room for.
    #[cfg(test)]
    fn room(&self) -> usize {
        self.chunks.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn pages_are_told_apart_by_their_low_bits() {
        let table: &[(u64, u64, bool)] = &[
            (7, 7, true),
            (7, 8, false),
            ((1 << 32) + 7, 7, true),
            ((1 << 32) + 7, (1 << 33) + 7, true),
            (u64::MAX, u64::MAX, true),
            (u64::MAX, u64::MAX - 1, false),
        ];
        for &(placed, asked, want) in table {
            assert_eq!(
                Place::new(placed, 1).in_page(asked),
                want,
                "{placed} {asked}"
            );
        }
    }

    #[test]
    fn offsets_rank_among_those_present() {
        let table: &[(u64, u8, usize)] = &[
            (0, 0, 0),
            (0, 63, 0),
            (0b1, 0, 0),
            (0b1, 1, 1),
            (0b1011, 2, 2),
            (0b1011, 3, 2),
            (u64::MAX, 63, 63),
        ];
        for &(present, at, want) in table {
            assert_eq!(rank(present, at), want, "{present:b} at {at}");
        }
    }

    /// Inserts and removes as a plain map would, through every shape a
    /// chunk takes: one id, many, back to one, none.
    #[test]
    fn a_drained_burst_gives_its_chunks_room_back() {
        let mut places = Places::default();
        for id in 1..=640_000 {
            places.insert(id, Place::new(id / 30, 100));
        }
        let room = places.room();
        assert!(room >= 10_000, "{room}");
        // One job left in every 1,000 chunks: the rest of the room goes.
        for id in (1..=640_000).filter(|id| id % 64_000 != 0) {
            assert_eq!(places.remove(id), Some(Place::new(id / 30, 100)));
        }
        assert!(places.room() < 2 * KEEP_CHUNKS, "{}", places.room());
        assert_eq!(places.len(), 10);
        for id in (64_000..=640_000).step_by(64_000) {
            assert_eq!(places.get(id), Some(Place::new(id / 30, 100)));
        }
    }

    #[test]
    fn behaves_as_a_map() {
        let mut places = Places::default();
        let mut want = BTreeMap::new();
        let mut x = 11u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        for step in 0..200_000u64 {
            // Ids in a few hundred chunks, dense near a moving front, with
            // some far apart and the largest ids.
            let id = match next() % 8 {
                0 => next() << 20,
                1 => u64::MAX - next() % 100,
                _ => step / 4 + next() % 300,
            };
            let place = Place::new(next(), next() as u32);
            if next() % 3 == 0 {
                assert_eq!(places.remove(id), want.remove(&id), "remove {id}");
            } else {
                assert_eq!(
                    places.insert(id, place),
                    want.insert(id, place),
                    "insert {id}"
                );
            }
            assert_eq!(places.len(), want.len());
            if step % 1000 == 0 {
                for (&id, &place) in &want {
                    assert_eq!(places.get(id), Some(place), "{id}");
                }
            }
            assert_eq!(places.get(id), want.get(&id).copied());
        }
        for id in want.keys().copied().collect::<Vec<_>>() {
            assert_eq!(places.remove(id), want.remove(&id));
        }
        assert_eq!(places.len(), 0);
        assert!(places.chunks.is_empty());
    }
}
