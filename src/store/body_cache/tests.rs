//! The body cache against a model: a plain map of every body put and not
//! removed, and the set of pinned ids. The cache may have evicted any
//! unpinned body, but what it returns is exactly the model's body for that
//! id, a pinned body is always there, and its bytes never exceed the bound
//! plus the pinned ones. A mark a read-ahead set is served once, on the
//! first hit of the body it was set on, and never on another body. Bodies
//! offered or shared are slices of one page, charged once while any is
//! held.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;

#[derive(Clone, Debug)]
enum Op {
    Put {
        id: JobId,
        len: usize,
        pin: bool,
    },
    Get(JobId),
    /// A page's bodies offered (kept if not held), the one at `mark`
    /// marked.
    Offer {
        bodies: Vec<(JobId, usize)>,
        mark: Option<usize>,
    },
    /// Each job unpinned, or removed if true (as sled takes records in).
    Settle(Vec<(JobId, bool)>),
    /// A page sled took in with these jobs' images (their bodies as the
    /// model has them; a byte longer if true, which must not be taken).
    Share(Vec<(JobId, bool)>),
    Remove(JobId),
    Resize(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0..40u64;
    prop_oneof![
        4 => (id.clone(), 0..600usize, any::<bool>()).prop_map(|(id, len, pin)| Op::Put { id, len, pin }),
        4 => id.clone().prop_map(Op::Get),
        2 => (proptest::collection::vec((id.clone(), 0..600usize), 0..6), proptest::option::of(0..6usize))
            .prop_map(|(bodies, mark)| Op::Offer { bodies, mark }),
        2 => proptest::collection::vec((id.clone(), any::<bool>()), 0..6).prop_map(Op::Settle),
        2 => proptest::collection::vec((id.clone(), any::<bool>()), 0..6).prop_map(Op::Share),
        2 => id.prop_map(Op::Remove),
        1 => (0..4000u64).prop_map(Op::Resize),
    ]
}

/// A body no other job's (nor an earlier body of this id) can equal: the
/// id and a serial number, then filler.
fn body(id: JobId, serial: u64, len: usize) -> Bytes {
    let mut b = Vec::with_capacity(16 + len);
    b.extend_from_slice(&id.to_le_bytes());
    b.extend_from_slice(&serial.to_le_bytes());
    b.extend((0..len).map(|i| (id as usize + i) as u8));
    Bytes::from(b)
}

#[derive(Default)]
struct Model {
    bodies: HashMap<JobId, Bytes>,
    pinned: HashSet<JobId>,
    /// Marked, and not hit since.
    marked: HashSet<JobId>,
}

impl Model {
    fn pinned_bytes(&self) -> u64 {
        self.pinned.iter().map(|id| charge(&self.bodies[id])).sum()
    }
}

fn check(cache: &BodyCache, model: &Model, max: u64) {
    let (bytes, pinned) = cache.sizes();
    assert_eq!(pinned, model.pinned_bytes(), "pinned bytes");
    assert!(bytes <= max + pinned, "{bytes} > {max} + {pinned}");
    assert_eq!(cache.stats.body_cache.bytes.load(RELAXED), bytes);
    let ring = cache.lock();
    let mut counted = 0;
    let mut pages: HashMap<PageKey, u32> = HashMap::new();
    for (id, at) in ring.index.iter() {
        let slot = ring.slots[at as usize]
            .as_ref()
            .expect("indexed slots hold");
        assert_eq!(slot.id, id);
        assert_eq!(Some(&slot.body), model.bodies.get(&id), "job {id}");
        assert!(
            !(slot.pinned && slot.page.is_some()),
            "job {id}: a pinned slice"
        );
        counted += slot.charge();
        if let Some(page) = slot.page {
            *pages.entry(page).or_default() += 1;
        }
    }
    counted += pages.keys().map(|page| u64::from(page.charge)).sum::<u64>();
    assert_eq!(counted, bytes);
    assert_eq!(pages, ring.pages.clone().into_iter().collect());
    for id in &model.pinned {
        assert!(ring.index.contains(*id), "pinned job {id} evicted");
    }
}

fn run(ops: Vec<Op>, max: u64) {
    let cache = BodyCache::new(max, Arc::default());
    let mut max = max;
    let mut model = Model::default();
    for (serial, op) in ops.into_iter().enumerate() {
        match op {
            Op::Put { id, len, pin } => {
                let b = body(id, serial as u64, len);
                cache.put(id, b.clone(), pin);
                model.bodies.insert(id, b);
                model.marked.remove(&id);
                // Pinned stays pinned until unpinned, whatever is put.
                if pin {
                    model.pinned.insert(id);
                }
            }
            Op::Get(id) => get(&cache, &mut model, id),
            Op::Offer { bodies, mark } => offer(&cache, &mut model, serial, bodies, mark),
            Op::Settle(changes) => {
                for &(id, remove) in &changes {
                    model.pinned.remove(&id);
                    if remove {
                        model.bodies.remove(&id);
                        model.marked.remove(&id);
                    }
                }
                let changes = changes.iter().map(|&(id, remove)| match remove {
                    true => Settle::Remove(id),
                    false => Settle::Unpin(id),
                });
                cache.settle(changes);
            }
            Op::Share(jobs) => share(&cache, &model, jobs),
            Op::Remove(id) => {
                cache.remove(id);
                model.bodies.remove(&id);
                model.pinned.remove(&id);
                model.marked.remove(&id);
                assert_eq!(cache.get(id), None);
            }
            Op::Resize(bytes) => {
                max = bytes;
                cache.resize(bytes);
            }
        }
        check(&cache, &model, max);
    }
}

/// A hit: the model's body, and the mark only if the model has it.
fn get(cache: &BodyCache, model: &mut Model, id: JobId) {
    let Some((got, marked)) = cache.find(id) else {
        return;
    };
    assert_eq!(Some(&got), model.bodies.get(&id), "job {id}");
    assert_eq!(marked, model.marked.remove(&id), "job {id}'s mark");
}

/// Bodies offered: those the cache says it put in are the model's now,
/// the others it held already (`check` compares them).
fn offer(
    cache: &BodyCache,
    model: &mut Model,
    serial: usize,
    bodies: Vec<(JobId, usize)>,
    mark: Option<usize>,
) {
    let mark = mark.and_then(|at| bodies.get(at)).map(|&(id, _)| id);
    // A page holds one image a job.
    let mut ids = HashSet::new();
    let offered: Vec<(JobId, Bytes)> = (bodies.iter())
        .filter(|(id, _)| ids.insert(*id))
        .map(|&(id, len)| (id, body(id, serial as u64, len)))
        .collect();
    let (page, offered) = one_page(offered);
    let new = cache.offer(page, offered.clone(), mark);
    for (id, b) in offered {
        // (One held may have been evicted by the offer's own, then put.)
        if new.contains(&id) {
            model.bodies.insert(id, b);
            model.marked.remove(&id);
        }
    }
    if let Some(id) = mark.filter(|&id| cache.peek(id).is_some()) {
        model.marked.insert(id);
    }
}

/// `bodies` copied into one page, and as slices of it.
fn one_page(bodies: Vec<(JobId, Bytes)>) -> (PageKey, Vec<(JobId, Bytes)>) {
    let page = Bytes::from(
        bodies
            .iter()
            .flat_map(|(_, b)| b.to_vec())
            .collect::<Vec<u8>>(),
    );
    let mut at = 0;
    let slices = (bodies.into_iter())
        .map(|(id, b)| {
            at += b.len();
            (id, page.slice(at - b.len()..at))
        })
        .collect();
    (PageKey::new(&page, page.len()), slices)
}

/// A page holding `jobs`' bodies: each one held, unless pinned, becomes
/// its slice (the model's check sees no difference but in the charges).
fn share(cache: &BodyCache, model: &Model, jobs: Vec<(JobId, bool)>) {
    let mut ids = HashSet::new();
    let bodies = (jobs.iter())
        .filter(|(id, _)| ids.insert(*id))
        .filter_map(|&(id, longer)| {
            let mut b = model.bodies.get(&id)?.to_vec();
            if longer {
                b.push(0);
            }
            Some((id, Bytes::from(b)))
        })
        .collect();
    let (page, bodies) = one_page(bodies);
    cache.share(page, bodies);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_another_jobs_body_and_never_over_the_bound(
        ops in proptest::collection::vec(op(), 1..300),
        max in 0..3000u64,
    ) {
        run(ops, max);
    }
}

#[test]
fn hits_misses_and_eviction_by_clock() {
    let stats = Arc::new(BinlogStats::default());
    let each = charge(&body(0, 0, 100));
    let cache = BodyCache::new(3 * each, stats.clone());
    for id in 1..=3 {
        cache.put(id, body(id, 0, 100), false);
    }
    // The hand clears every bit, then evicts the first slot it passes.
    cache.put(4, body(4, 0, 100), false);
    assert_eq!(cache.get(1), None);
    // 2 is used again: the next eviction passes it over for 3.
    assert!(cache.get(2).is_some());
    cache.put(5, body(5, 0, 100), false);
    assert_eq!(cache.get(3), None);
    assert!(cache.get(2).is_some());
    let figures = &stats.body_cache;
    assert_eq!(figures.hits.load(RELAXED), 2);
    assert_eq!(figures.misses.load(RELAXED), 2);
    assert_eq!(figures.max_bytes.load(RELAXED), 3 * each);
    assert_eq!(figures.bytes.load(RELAXED), 3 * each);
}

#[test]
fn pinned_bodies_stay_past_the_bound_until_unpinned() {
    let each = charge(&body(0, 0, 100));
    let cache = BodyCache::new(each, Arc::default());
    for id in 1..=5 {
        cache.put(id, body(id, 0, 100), true);
    }
    assert_eq!(cache.sizes(), (5 * each, 5 * each));
    // An unpinned body too large for the cache is not kept at all.
    cache.put(9, body(9, 0, 1000), false);
    assert_eq!(cache.get(9), None);
    cache.settle((1..=5).map(Settle::Unpin));
    assert_eq!(cache.sizes(), (each, 0));
    // A body put again unpinned keeps its pin.
    cache.put(7, body(7, 0, 100), true);
    cache.put(7, body(7, 1, 100), false);
    assert_eq!(cache.sizes().1, each);
}

#[test]
fn the_ring_gives_its_room_back() {
    let cache = BodyCache::new(u64::MAX, Arc::default());
    for id in 0..10_000 {
        cache.put(id, body(id, 0, 10), false);
    }
    for id in 0..9_990 {
        cache.remove(id);
    }
    let ring = cache.lock();
    assert!(ring.slots.len() < 100, "{} slots", ring.slots.len());
    assert_eq!(ring.index.len(), 10);
    for (id, at) in ring.index.iter() {
        assert_eq!(ring.slots[at as usize].as_ref().unwrap().id, id);
    }
}
