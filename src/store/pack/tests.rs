//! Packing: the last word on each job, cleaning, and the bodies of
//! updates, which carry none: from the batch, the cache or the job's page.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use super::*;
use crate::engine::Stored;
use crate::store::entry::tests::image;
use crate::store::log::Replay;

type Pages = HashMap<Slot, Vec<u8>>;

/// Keeps pages in a map, as a store would; first checks that each body
/// the batch placed is where it says, in its job's image.
fn apply(store: &mut Pages, packed: Packed) {
    for placed in &packed.bodies {
        let value = &packed.pages[placed.page as usize].1;
        let (_, mut entries) = page::read(value).unwrap();
        let entry = (entries
            .find_map(|e| e.ok().filter(|e| e.id == placed.id && e.image().is_some())))
        .expect("a placed job's image is in its page");
        let job = record::decode_job(entry.image().unwrap()).unwrap();
        assert!(job.body.len() > INLINE_BODY);
        assert_eq!(&value[placed.range()], &job.body[..]);
    }
    for slot in packed.freed {
        store.remove(&slot);
    }
    for (slot, value) in packed.pages {
        store.insert(slot, value);
    }
}

/// The live jobs in `store`'s pages, decoded.
fn jobs(store: &Pages) -> BTreeMap<JobId, JobImage> {
    let mut replay = Replay::new(false);
    for (&slot, value) in store {
        replay.page(slot, value).unwrap();
    }
    let (mut log, _) = replay.finish().unwrap();
    let held = log.hold();
    let mut jobs = BTreeMap::new();
    for value in store.values() {
        let (seq, entries) = page::read(value).unwrap();
        for entry in entries.map(Result::unwrap) {
            if let Some(image) = entry.image().filter(|_| held.is_live(seq, entry.id)) {
                let job = record::decode_job(image).unwrap();
                jobs.insert(job.id, job);
            }
        }
    }
    jobs
}

fn live(store: &Pages) -> Vec<JobId> {
    jobs(store).into_keys().collect()
}

fn none(_: JobId) -> Option<Bytes> {
    None
}

/// Job `id`, `len` bytes of body that say whose it is.
fn job(id: JobId, len: usize) -> JobImage {
    let mut job = image(id, 0);
    let name = format!("job {id};");
    job.body = name.bytes().cycle().take(len).collect::<Vec<u8>>().into();
    job
}

/// Job `id`'s update: a new state, no body.
fn update(id: JobId, pri: u32) -> Record {
    let mut job = image(id, 0);
    (job.pri, job.state, job.body) = (pri, Stored::Buried(pri.into()), Bytes::new());
    Record::Update(job)
}

/// A store to pack batches into, counting the reads of each slot.
#[derive(Default)]
struct Store {
    log: Log,
    pages: Pages,
    reads: RefCell<HashMap<Slot, usize>>,
}

impl Store {
    fn pack(
        &mut self,
        records: &[Record],
        cached: impl FnMut(JobId) -> Option<Bytes>,
    ) -> io::Result<Vec<Slot>> {
        self.reads.borrow_mut().clear();
        let (pages, reads) = (&self.pages, &self.reads);
        let old = |slot: Slot| {
            *reads.borrow_mut().entry(slot).or_default() += 1;
            Ok(pages.get(&slot).cloned())
        };
        let packed = pack(&mut self.log, records, usize::MAX, cached, old)?;
        let freed = packed.freed.clone();
        apply(&mut self.pages, packed);
        Ok(freed)
    }

    /// The pages read by the last batch, and whether any twice.
    fn reads(&self) -> (usize, bool) {
        let reads = self.reads.borrow();
        (reads.len(), reads.values().any(|&n| n > 1))
    }
}

#[test]
fn the_last_word_on_each_job_is_packed_and_old_pages_are_cleaned() {
    let mut log = Log::default();
    let mut store = HashMap::new();
    let none_page = |_: Slot| Ok(None);
    // A job put and deleted in one batch leaves nothing at all.
    let records = [Record::Put(image(1, 10)), Record::Delete(1)];
    let packed = pack(&mut log, &records, usize::MAX, none, none_page).unwrap();
    assert!(packed.pages.is_empty() && packed.freed.is_empty());
    // 300 jobs of 10 KB, then all but two deleted, batch by batch:
    // the log goes over its bound and cleaning frees old slots.
    for id in 1..=300 {
        let records = [Record::Put(image(id, 10_000))];
        let packed = pack(&mut log, &records, usize::MAX, none, none_page).unwrap();
        assert_eq!(packed.bodies.iter().map(|b| b.id).collect::<Vec<_>>(), [id]);
        apply(&mut store, packed);
    }
    let mut freed = 0;
    for id in 3..=300 {
        let copy = store.clone();
        let old = |slot: Slot| Ok(copy.get(&slot).cloned());
        let packed = pack(&mut log, &[Record::Delete(id)], usize::MAX, none, old).unwrap();
        freed += packed.freed.len();
        apply(&mut store, packed);
    }
    // With nothing to write, cleaning goes on by itself (as the store
    // does when idle) until the log is within its bound.
    for _ in 0..10 {
        if !log.over_bound() {
            break;
        }
        let copy = store.clone();
        let old = |slot: Slot| Ok(copy.get(&slot).cloned());
        let packed = pack(&mut log, &[], usize::MAX, none, old).unwrap();
        freed += packed.freed.len();
        apply(&mut store, packed);
    }
    assert_eq!(live(&store), [1, 2]);
    assert!(freed > 150, "only {freed} slots freed");
    let (stored, live_bytes) = log.sizes();
    assert!(
        stored <= 2 * live_bytes + log::SLACK,
        "{stored} for {live_bytes}"
    );
    // A store that cannot read an old page now only stops cleaning.
    let records = [Record::Put(image(400, 10))];
    let packed = pack(&mut log, &records, usize::MAX, none, none_page).unwrap();
    assert!(packed.freed.is_empty());
    apply(&mut store, packed);
    assert_eq!(live(&store), [1, 2, 400]);
}

/// The jobs whose last word in `batch` is an update with no put before.
fn model_last(batch: &[Record]) -> Vec<JobId> {
    let mut last: BTreeMap<JobId, bool> = BTreeMap::new();
    for record in batch {
        match record {
            Record::Put(image) => _ = last.insert(image.id, false),
            Record::Update(image) => _ = last.entry(image.id).or_insert(true),
            Record::Delete(id) => _ = last.insert(*id, false),
        }
    }
    last.into_iter()
        .filter(|&(_, bare)| bare)
        .map(|(id, _)| id)
        .collect()
}

/// One case: batches packed before, the batch, the jobs the cache holds,
/// and the pages the batch reads.
struct Case {
    name: &'static str,
    before: Vec<Vec<Record>>,
    batch: Vec<Record>,
    cached: &'static [JobId],
    pages_read: usize,
}

#[test]
fn an_update_takes_its_body_from_the_batch_the_cache_or_its_page() {
    let puts = |ids: &[JobId]| ids.iter().map(|&id| Record::Put(job(id, 40))).collect();
    let cases = [
        Case {
            name: "after its put in the same batch",
            before: vec![],
            batch: vec![Record::Put(job(1, 40)), update(1, 5)],
            cached: &[],
            pages_read: 0,
        },
        Case {
            name: "twice, after its put in the same batch",
            before: vec![],
            batch: vec![Record::Put(job(1, 40)), update(1, 5), update(1, 6)],
            cached: &[],
            pages_read: 0,
        },
        Case {
            name: "stored by an earlier batch: read from its page",
            before: vec![puts(&[1])],
            batch: vec![update(1, 5)],
            cached: &[],
            pages_read: 1,
        },
        Case {
            name: "several on one page: the page is read once",
            before: vec![puts(&[1, 2, 3, 4])],
            batch: vec![update(3, 5), update(1, 5), update(4, 6), update(1, 7)],
            cached: &[],
            pages_read: 1,
        },
        Case {
            name: "on two pages, with a job of neither updated",
            before: vec![puts(&[1, 2]), puts(&[3])],
            batch: vec![update(3, 5), update(1, 5), Record::Put(job(9, 40))],
            cached: &[],
            pages_read: 2,
        },
        Case {
            name: "the cache gives it: no page read",
            before: vec![puts(&[1, 2])],
            batch: vec![update(2, 5), update(1, 5)],
            cached: &[1, 2],
            pages_read: 0,
        },
        Case {
            name: "the cache gives one of two on a page",
            before: vec![puts(&[1, 2])],
            batch: vec![update(2, 5), update(1, 5)],
            cached: &[2],
            pages_read: 1,
        },
        Case {
            name: "updated, then deleted: no body needed",
            before: vec![puts(&[1])],
            batch: vec![update(1, 5), Record::Delete(1)],
            cached: &[],
            pages_read: 0,
        },
        Case {
            name: "updated before, and again",
            before: vec![puts(&[1]), vec![update(1, 4)]],
            batch: vec![update(1, 5)],
            cached: &[],
            pages_read: 1,
        },
    ];
    for case in cases {
        let name = case.name;
        let mut store = Store::default();
        let mut model = BTreeMap::new();
        let mut all = case.before.iter().collect::<Vec<_>>();
        all.push(&case.batch);
        for record in all.iter().copied().flatten() {
            match record {
                Record::Put(image) => _ = model.insert(image.id, image.clone()),
                Record::Update(image) => {
                    let body = model[&image.id].body.clone();
                    model.insert(
                        image.id,
                        JobImage {
                            body,
                            ..image.clone()
                        },
                    );
                }
                Record::Delete(id) => _ = model.remove(id),
            }
        }
        for records in &case.before {
            store.pack(records, none).unwrap();
        }
        let asked = RefCell::new(Vec::new());
        let cached = |id: JobId| {
            asked.borrow_mut().push(id);
            case.cached.contains(&id).then(|| job(id, 40).body)
        };
        store.pack(&case.batch, cached).unwrap();
        assert_eq!(store.reads(), (case.pages_read, false), "{name}");
        assert_eq!(jobs(&store.pages), model, "{name}");
        // The cache is asked only for updates the batch has no put for.
        let mut bare: Vec<JobId> = model_last(&case.batch);
        bare.sort_unstable();
        let mut asked = asked.take();
        asked.sort_unstable();
        assert_eq!(asked, bare, "{name}");
    }
}

#[test]
fn an_update_finds_its_body_where_cleaning_moved_it_even_in_its_own_batch() {
    let mut store = Store::default();
    // Jobs 1 and 2 of 10 KB among 300, the others deleted one batch at
    // a time: cleaning moves 1 and 2 to new pages, and frees the old.
    for id in 1..=300 {
        store.pack(&[Record::Put(job(id, 10_000))], none).unwrap();
    }
    let two_put_in = store.log.directory().find(2).unwrap().seq;
    let mut freed = Vec::new();
    let mut in_its_own_batch = false;
    for id in (3..=300).rev() {
        let mut batch = vec![Record::Delete(id)];
        let dir = store.log.directory();
        let (stored, live) = store.log.sizes();
        let live = live - u64::from(dir.find(id).unwrap().len);
        let first_to_clean = stored > 2 * live + log::SLACK;
        let oldest = dir.lock().pages.first().map(|(seq, _)| seq);
        let one = dir.find(1).unwrap();
        if first_to_clean && oldest == Some(one.seq) {
            // The batch that cleans 1's page, the oldest, updates 1: its
            // body is read before the page goes.
            batch.push(update(1, 9));
            let now = store.pack(&batch, none).unwrap();
            assert!(now.contains(&one.slot), "{now:?} freed, not {}", one.slot);
            assert_eq!(jobs(&store.pages)[&1].pri, 9);
            in_its_own_batch = true;
            freed.extend(now);
            continue;
        }
        freed.extend(store.pack(&batch, none).unwrap());
    }
    assert!(
        in_its_own_batch && freed.len() > 50,
        "{} freed",
        freed.len()
    );
    // 2 was never updated, but cleaning moved it.
    assert_ne!(store.log.directory().find(2).unwrap().seq, two_put_in);
    for (id, pri) in [(1, 10), (2, 11)] {
        let slot = store.log.directory().find(id).unwrap().slot;
        store.pack(&[update(id, pri)], none).unwrap();
        assert!(store.reads.borrow().contains_key(&slot));
    }
    let back = jobs(&store.pages);
    assert_eq!(back.keys().copied().collect::<Vec<_>>(), [1, 2]);
    for (id, pri) in [(1, 10), (2, 11)] {
        assert_eq!(
            (back[&id].pri, &back[&id].body),
            (pri, &job(id, 10_000).body)
        );
    }
}

#[test]
fn an_update_of_a_job_not_stored_is_an_error_naming_it() {
    let mut store = Store::default();
    store.pack(&[Record::Put(job(1, 40))], none).unwrap();
    for batch in [
        vec![update(77, 1)],
        vec![Record::Put(job(2, 40)), update(77, 1), update(1, 3)],
        vec![Record::Delete(1), update(77, 1)],
    ] {
        let e = store.pack(&batch, none).unwrap_err();
        assert!(e.to_string().contains("job 77 "), "{e}");
    }
    // Nothing changed: 1 is still there, as it was.
    assert_eq!(jobs(&store.pages)[&1], job(1, 40));
    // A page the store says it holds but cannot give is an error too.
    let mut gone = Store::default();
    gone.pack(&[Record::Put(job(1, 40))], none).unwrap();
    gone.pages.clear();
    let e = gone.pack(&[update(1, 3)], none).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}
