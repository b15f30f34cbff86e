//! Where job bodies live: packed into slabs, not one allocation each.
//!
//! A body handed to `malloc` costs a chunk of its own: 112 bytes for a
//! 100-byte body (a 8-byte header, rounded to 16), plus the 32-byte `Bytes`
//! that points at it, for each of millions of held jobs. Here a body of
//! up to [`SMALL`] bytes goes into a slab of its exact size (one class per
//! length: a 100-byte body takes 100 bytes; classes in 8-byte steps took
//! 104, 4 bytes of every held 100-byte job), and a job keeps a small
//! [`Body`] handle. Each class is a list of pages of a power-of-two number
//! of entries (about 16 KiB a page), so a handle turns into an address with
//! a shift and a mask; with a class per length, a server holding bodies of
//! every length keeps at most one part-filled page per class (16 MiB at
//! worst, where 64 KiB pages would make it 64). A freed entry goes on its
//! page's free list, threaded through the freed entries themselves (no
//! memory of its own; the 1- to 3-byte classes take 4-byte entries to hold
//! the link), and the next body of that class takes it from the page that
//! last had room. A page left empty is handed back (but one per class,
//! for the next bodies), so a burst's memory goes as its jobs do: pages
//! were kept for ever, and a memory-mode cluster leader drained of 200k
//! 1 KiB jobs held 207 MB of empty pages.
//!
//! Larger bodies each get an allocation of their own (its overhead is
//! under 2% of them), found through a slab of boxes.
//!
//! Replies carry `Bytes`, so a `reserve` copies the body out (a 100-byte
//! `memcpy` into a fresh buffer), where it used to share it.
//!
//! With `-b` the store keeps every body on disk anyway, so a body longer
//! than [`INLINE`] is not kept here at all: its handle is *stored* and
//! holds only its length (issue 33, docs/durability.md "Next: bodies kept
//! only on disk"). A reply naming such a job carries an empty body that
//! the connection fills from the store's body cache or its disk
//! (`Engine::stored_len`), outside the engine lock.

/// The largest body kept in a size class.
const SMALL: usize = 1024;
/// The smallest entry: room for a free list's link.
const LINK: usize = 4;
/// About how many bytes a page of a class holds.
const PAGE_BYTES: usize = 16 * 1024;
/// The end of a free list.
const NONE: u32 = u32::MAX;

/// Where a body is: its size class and its entry in that class's slab, or
/// in the slab of large bodies (the default is the empty body). It packs
/// into [`Body::BITS`] bits of the job record (see `job.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Body {
    /// The length, for a body of up to [`SMALL`] bytes; else [`LARGE`].
    size: u16,
    at: u32,
}

/// A [`Body`]'s size for a body over [`SMALL`] bytes (its box knows how long).
const LARGE: u16 = SMALL as u16 + 1;
/// A [`Body`]'s size for a body only the store keeps: `at` is its length
/// less one (`-z` is at most 2^30, so it fits [`AT_BITS`]).
const STORED: u16 = LARGE + 1;
/// The longest body kept here when the store keeps bodies: a shorter one
/// costs less in the slab than a cache entry or a disk read would (its
/// handle and record are paid either way).
pub const INLINE: usize = 32;
/// Bits of an entry number: a slab never has more entries than there are
/// jobs at once (a freed one is always taken before a new one), under 2^30.
const AT_BITS: u32 = 30;

impl Body {
    /// The bits a record spends on a handle.
    pub(super) const BITS: u32 = AT_BITS + 11;

    /// The handle as a record stores it (below [`Body::BITS`]).
    pub(super) fn bits(self) -> u64 {
        (u64::from(self.size) << AT_BITS) | u64::from(self.at)
    }

    /// Whether only the store keeps the bytes.
    pub(super) fn is_stored(self) -> bool {
        self.size == STORED
    }

    /// The handle stored as `bits` (from [`Body::bits`]).
    pub(super) fn from_bits(bits: u64) -> Body {
        Body {
            size: (bits >> AT_BITS) as u16,
            at: (bits & ((1 << AT_BITS) - 1)) as u32,
        }
    }
}

const _: () = assert!(STORED < 1 << (Body::BITS - AT_BITS));
const _: () = assert!(sprout_protocol::MAX_JOB_SIZE_LIMIT <= 1 << AT_BITS);

pub(super) struct Bodies {
    /// By class: bodies of `class + 1` bytes.
    classes: Vec<Class>,
    /// The bytes of every body held (`--max-jobs-size` counts them).
    bytes: u64,
    /// Bodies over [`SMALL`] bytes, by `at`; freed ones are empty.
    large: Vec<Box<[u8]>>,
    large_free: Vec<u32>,
    /// With a store that keeps bodies (`-b`): bodies longer than this are
    /// left to it ([`INLINE`]).
    stored_above: Option<usize>,
}

/// One size class: fixed-size entries in pages of `1 << page_log2` each.
struct Class {
    size: usize,
    page_log2: u32,
    pages: Vec<Page>,
    /// Pages given room since they were last full, the last on top: the
    /// next entry comes from the top one with room and memory (those full
    /// again or handed back since are dropped as they come up).
    with_room: Vec<u32>,
    /// Pages handed back: allocated again once no listed page has room.
    handed_back: Vec<u32>,
    /// Pages allocated and empty: one is kept, so that a body put and
    /// deleted again and again across a page's edge does not allocate it
    /// each time.
    empty: u32,
}

/// A page of a class: its entries, or none while handed back.
struct Page {
    bytes: Box<[u8]>,
    /// Entries holding a body.
    live: u32,
    /// Entries handed out since the page was allocated; those at or past
    /// it are unused.
    fresh: u32,
    /// The first freed entry (its number in the page); each holds the next
    /// in its first 4 bytes.
    free: u32,
    /// In `with_room` (once).
    listed: bool,
}

impl Class {
    fn new(size: usize) -> Class {
        Class {
            size,
            page_log2: (PAGE_BYTES / size).ilog2(),
            pages: Vec::new(),
            with_room: Vec::new(),
            handed_back: Vec::new(),
            empty: 0,
        }
    }

    fn entry(&self, at: u32) -> &[u8] {
        let (page, offset) = self.locate(at);
        &self.pages[page].bytes[offset..offset + self.size]
    }

    fn locate(&self, at: u32) -> (usize, usize) {
        let page = (at >> self.page_log2) as usize;
        let offset = (at & ((1 << self.page_log2) - 1)) as usize * self.size;
        (page, offset)
    }

    /// Copies `body` into entry `at`.
    fn fill(&mut self, at: u32, body: &[u8]) {
        let (page, offset) = self.locate(at);
        self.pages[page].bytes[offset..offset + body.len()].copy_from_slice(body);
    }

    /// A free entry: the last freed in the page on top of `with_room`, or
    /// a page's first never used.
    fn take(&mut self) -> u32 {
        let per_page = 1u32 << self.page_log2;
        let p = loop {
            match self.with_room.last() {
                None => break self.allocate(),
                Some(&p) => {
                    let page = &mut self.pages[p as usize];
                    if !page.bytes.is_empty() && page.live < per_page {
                        if page.live == 0 {
                            self.empty -= 1;
                        }
                        break p;
                    }
                    page.listed = false;
                    self.with_room.pop();
                }
            }
        };
        let page = &mut self.pages[p as usize];
        let local = match page.free {
            NONE => {
                page.fresh += 1;
                page.fresh - 1
            }
            local => {
                let offset = local as usize * self.size;
                page.free = link(&page.bytes[offset..]);
                local
            }
        };
        page.live += 1;
        p << self.page_log2 | local
    }

    /// A page with memory and no entry used, listed in `with_room`, which
    /// was empty (so no page is listed twice): one handed back, or a new
    /// one.
    fn allocate(&mut self) -> u32 {
        let page = Page {
            bytes: vec![0; self.size << self.page_log2].into_boxed_slice(),
            live: 0,
            fresh: 0,
            free: NONE,
            listed: true,
        };
        let p = match self.handed_back.pop() {
            Some(p) => {
                self.pages[p as usize] = page;
                p
            }
            None => {
                let p = self.pages.len() as u32;
                let entries = u64::from(p + 1) << self.page_log2;
                assert!(entries <= 1 << AT_BITS, "body slab full");
                self.pages.push(page);
                p
            }
        };
        self.with_room.push(p);
        p
    }

    /// Frees entry `at`; a page left empty is handed back, but for one.
    fn give_back(&mut self, at: u32) {
        let (p, offset) = self.locate(at);
        let page = &mut self.pages[p];
        page.bytes[offset..offset + LINK].copy_from_slice(&page.free.to_ne_bytes());
        page.free = at & ((1 << self.page_log2) - 1);
        page.live -= 1;
        if !page.listed {
            page.listed = true;
            self.with_room.push(p as u32);
        }
        if page.live == 0 {
            match self.empty {
                0 => self.empty = 1,
                _ => {
                    page.bytes = Box::default();
                    self.handed_back.push(p as u32);
                }
            }
        }
    }
}

fn link(entry: &[u8]) -> u32 {
    u32::from_ne_bytes(entry[..4].try_into().expect("4 bytes"))
}

/// The class of a body of `len` bytes (1 ..= SMALL).
fn class_of(len: usize) -> usize {
    len - 1
}

impl Bodies {
    pub(super) fn new() -> Bodies {
        Bodies {
            classes: (1..=SMALL).map(|len| Class::new(len.max(LINK))).collect(),
            large: Vec::new(),
            large_free: Vec::new(),
            bytes: 0,
            stored_above: None,
        }
    }

    /// From now on, bodies longer than `inline` bytes are left to the
    /// store: [`Bodies::put`] keeps only their length.
    pub(super) fn leave_to_store(&mut self, inline: usize) {
        self.stored_above = Some(inline);
    }

    /// The bytes of every body held.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Keeps a copy of `body`, or only its length if the store keeps it
    /// ([`Bodies::leave_to_store`]).
    pub(super) fn put(&mut self, body: &[u8]) -> Body {
        self.bytes += body.len() as u64;
        if self.stored_above.is_some_and(|inline| body.len() > inline) {
            return Body {
                size: STORED,
                at: (body.len() - 1) as u32,
            };
        }
        let at = match body.len() {
            0 => 0,
            n if n <= SMALL => {
                let class = &mut self.classes[class_of(n)];
                let at = class.take();
                class.fill(at, body);
                at
            }
            _ => {
                let boxed = Box::<[u8]>::from(body);
                match self.large_free.pop() {
                    Some(at) => {
                        self.large[at as usize] = boxed;
                        at
                    }
                    None => {
                        self.large.push(boxed);
                        (self.large.len() - 1) as u32
                    }
                }
            }
        };
        debug_assert!(at < 1 << AT_BITS);
        let size = u16::try_from(body.len()).map_or(LARGE, |n| n.min(LARGE));
        Body { size, at }
    }

    /// The length of `body`.
    pub(super) fn len(&self, body: Body) -> usize {
        match body.size {
            LARGE => self.large[body.at as usize].len(),
            STORED => body.at as usize + 1,
            n => usize::from(n),
        }
    }

    /// The bytes of `body`; `None` if only the store keeps them.
    pub(super) fn get(&self, body: Body) -> Option<&[u8]> {
        match usize::from(body.size) {
            0 => Some(&[]),
            n if n <= SMALL => Some(&self.classes[class_of(n)].entry(body.at)[..n]),
            _ if body.is_stored() => None,
            _ => Some(&self.large[body.at as usize]),
        }
    }

    /// Frees `body`'s room for another; the handle must not be used again.
    pub(super) fn free(&mut self, body: Body) {
        self.bytes -= self.len(body) as u64;
        match usize::from(body.size) {
            0 => {}
            n if n <= SMALL => self.classes[class_of(n)].give_back(body.at),
            _ if body.is_stored() => {}
            _ => {
                self.large[body.at as usize] = Box::default();
                self.large_free.push(body.at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    #[test]
    fn every_size_reads_back_as_put() {
        let mut bodies = Bodies::new();
        let sizes = [0, 1, 2, 3, 4, 7, 8, 9, 100, 1023, 1024, 1025, 70_000];
        let kept: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (bodies.put(&body(n, i as u8)), body(n, i as u8)))
            .collect();
        for &(handle, ref expected) in &kept {
            assert_eq!(bodies.get(handle).unwrap(), &expected[..]);
            assert_eq!(bodies.len(handle), expected.len());
            assert!(handle.bits() < 1 << Body::BITS);
            assert_eq!(Body::from_bits(handle.bits()), handle);
        }
    }

    #[test]
    fn bodies_left_to_the_store_keep_their_length_only() {
        let mut bodies = Bodies::new();
        bodies.leave_to_store(INLINE);
        let sizes = [0, 1, INLINE, INLINE + 1, 1025, 1 << 20];
        for (i, &n) in sizes.iter().enumerate() {
            let handle = bodies.put(&body(n, i as u8));
            let stored = n > INLINE;
            assert_eq!(handle.is_stored(), stored, "{n} bytes");
            assert_eq!(bodies.len(handle), n);
            assert_eq!(Body::from_bits(handle.bits()), handle);
            match bodies.get(handle) {
                Some(got) => assert_eq!((got, stored), (&body(n, i as u8)[..], false)),
                None => assert!(stored, "{n} bytes"),
            }
        }
        // `--max-jobs-size` counts what the store keeps too.
        let total: usize = sizes.iter().sum();
        assert_eq!(bodies.bytes(), total as u64);
        // The longest `-z` allows fits the handle's bits.
        let longest = Body {
            size: STORED,
            at: (1 << 30) - 1,
        };
        assert_eq!(Body::from_bits(longest.bits()), longest);
        assert_eq!(bodies.len(longest), 1 << 30);
    }

    #[test]
    fn freed_room_is_reused_and_others_are_untouched() {
        let mut bodies = Bodies::new();
        let a = bodies.put(&body(100, 1));
        let b = bodies.put(&body(100, 2));
        let big = bodies.put(&body(5000, 3));
        bodies.free(a);
        bodies.free(big);
        let c = bodies.put(&body(100, 4));
        let big2 = bodies.put(&body(6000, 5));
        assert_eq!(c.at, a.at, "the freed entry of the class is taken again");
        assert_eq!(big2.at, big.at);
        assert_eq!(bodies.get(b).unwrap(), &body(100, 2)[..]);
        assert_eq!(bodies.get(c).unwrap(), &body(100, 4)[..]);
        assert_eq!(bodies.get(big2).unwrap(), &body(6000, 5)[..]);
    }

    #[test]
    fn each_length_has_its_own_class() {
        let mut bodies = Bodies::new();
        let a = bodies.put(&body(100, 1));
        bodies.free(a);
        let shorter = bodies.put(&body(99, 2));
        let same = bodies.put(&body(100, 3));
        assert_eq!(same.at, a.at);
        assert_eq!(bodies.get(shorter).unwrap(), &body(99, 2)[..]);
        assert_eq!(bodies.get(same).unwrap(), &body(100, 3)[..]);
        // Entries shorter than a link still chain their free list.
        let tiny: Vec<_> = (0..3).map(|i| bodies.put(&body(1, i))).collect();
        for &h in &tiny {
            bodies.free(h);
        }
        let again: Vec<_> = (0..3).map(|i| bodies.put(&body(1, 10 + i))).collect();
        let mut ats: Vec<_> = again.iter().map(|h| h.at).collect();
        ats.sort_unstable();
        assert_eq!(ats, [0, 1, 2]);
        for (i, &h) in again.iter().enumerate() {
            assert_eq!(bodies.get(h).unwrap(), &body(1, 10 + i as u8)[..]);
        }
    }

    #[test]
    fn pages_fill_and_free_lists_chain() {
        let mut bodies = Bodies::new();
        // More than a page of 100-byte bodies (128 entries a page).
        let handles: Vec<_> = (0..1500).map(|i| bodies.put(&body(100, i as u8))).collect();
        for &h in handles.iter().step_by(3) {
            bodies.free(h);
        }
        let again: Vec<_> = (0..500)
            .map(|i| bodies.put(&body(100, !(i as u8))))
            .collect();
        let mut reused: Vec<_> = again.iter().map(|h| h.at).collect();
        reused.sort_unstable();
        let mut freed: Vec<_> = handles.iter().step_by(3).map(|h| h.at).collect();
        freed.sort_unstable();
        assert_eq!(reused, freed, "every freed entry, and only those");
        for (i, &h) in handles.iter().enumerate().filter(|(i, _)| i % 3 != 0) {
            assert_eq!(bodies.get(h).unwrap(), &body(100, i as u8)[..]);
        }
        for (i, &h) in again.iter().enumerate() {
            assert_eq!(bodies.get(h).unwrap(), &body(100, !(i as u8))[..]);
        }
    }

    /// Pages holding memory, over every class.
    fn allocated(bodies: &Bodies) -> usize {
        let pages = bodies.classes.iter().flat_map(|c| &c.pages);
        pages.filter(|p| !p.bytes.is_empty()).count()
    }

    #[test]
    fn empty_pages_are_handed_back_but_one_a_class() {
        let mut bodies = Bodies::new();
        // 12 pages of 128 100-byte entries, and a few 7-byte ones.
        let hundreds: Vec<_> = (0..1536).map(|i| bodies.put(&body(100, i as u8))).collect();
        let sevens: Vec<_> = (0..10).map(|i| bodies.put(&body(7, i as u8))).collect();
        assert_eq!(allocated(&bodies), 13);
        // Every other page emptied: each goes back but the first.
        for &h in hundreds.iter().filter(|h| h.at >> 7 & 1 == 1) {
            bodies.free(h);
        }
        assert_eq!(allocated(&bodies), 8);
        for &h in hundreds.iter().filter(|h| h.at >> 7 & 1 == 0) {
            bodies.free(h);
        }
        for &h in &sevens {
            bodies.free(h);
        }
        assert_eq!((allocated(&bodies), bodies.bytes()), (2, 0));
        // Taken again: the page kept, then handed-back ones anew.
        let again: Vec<_> = (0..300)
            .map(|i| bodies.put(&body(100, !(i as u8))))
            .collect();
        assert_eq!(allocated(&bodies), 4);
        for (i, &h) in again.iter().enumerate() {
            assert_eq!(bodies.get(h).unwrap(), &body(100, !(i as u8))[..]);
        }
        let pages = again.iter().map(|h| h.at >> 7).max().unwrap();
        assert!(pages < 12, "pages are reused, not added: {pages}");
    }

    #[test]
    fn random_puts_and_frees_read_back_as_a_model_says() {
        let mut bodies = Bodies::new();
        let mut model: Vec<(Body, Vec<u8>)> = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..60_000u32 {
            let r = next();
            // Grows for a while, then shrinks to nothing.
            let put = match round < 40_000 {
                true => r % 3 != 0 || model.is_empty(),
                false => r % 4 == 0 && !model.is_empty(),
            };
            if put {
                let len = [1, 3, 4, 100, 1024, 2000][(r >> 8) as usize % 6];
                let bytes = body(len, (r >> 16) as u8);
                model.push((bodies.put(&bytes), bytes));
            } else if !model.is_empty() {
                let (handle, _) = model.swap_remove((r >> 24) as usize % model.len());
                bodies.free(handle);
            }
            if round % 997 == 0 {
                for (handle, bytes) in &model {
                    assert_eq!(bodies.get(*handle).unwrap(), &bytes[..], "round {round}");
                }
            }
        }
        for (handle, _) in model.drain(..) {
            bodies.free(handle);
        }
        assert_eq!(bodies.bytes(), 0);
        // One empty page kept by each class used (1, 3, 4, 100, 1024).
        assert_eq!(allocated(&bodies), 5);
    }
}
