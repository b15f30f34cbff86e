//! Page reads: the right body, or an error naming the job, never another
//! job's body: foreign entries, moved entries, reused slots and damaged
//! pages.

use std::cell::Cell;
use std::collections::HashMap;
use std::time::Instant;

use super::*;
use crate::engine::JobImage;
use crate::store::entry::tests::image;
use crate::store::page::PageBuilder;
use crate::store::page_table::Page;
use crate::store::places::Place;

/// A job whose body says whose it is.
fn job(id: JobId) -> JobImage {
    let mut job = image(id, 0);
    job.body =
        Bytes::from(format!("the body of job {id}, longer than the engine keeps").into_bytes());
    job
}

/// One sealed page of `ids`' images, and each entry's length.
fn page_of(seq: u64, ids: &[JobId]) -> (Vec<u8>, Vec<u32>) {
    let mut b = PageBuilder::default();
    let lens = ids.iter().map(|&id| b.image(&job(id)).1).collect();
    let pages = b.finish();
    assert_eq!(pages.len(), 1);
    (page::seal(seq, &pages[0]), lens)
}

/// Pages kept by slot, as sled keeps them, and their directory.
#[derive(Default)]
struct Store {
    slots: HashMap<Slot, Vec<u8>>,
    dir: Directory,
}

impl Store {
    /// Stores page `seq` of `ids` in `slot` and files its jobs there.
    fn add(&mut self, seq: u64, slot: Slot, ids: &[JobId]) {
        let (value, lens) = page_of(seq, ids);
        let mut map = self.dir.lock();
        let bytes = value.len() as u64;
        map.pages.insert(seq, Page { slot, bytes });
        for (&id, len) in ids.iter().zip(lens) {
            map.jobs.insert(id, Place::new(seq, len));
        }
        self.slots.insert(slot, value);
    }

    fn read(&self, id: JobId) -> Result<Bytes, Failed> {
        self.read_all(id).map(|(body, _)| body)
    }

    fn read_all(&self, id: JobId) -> Result<(Bytes, Neighbors), Failed> {
        read(&self.dir, |slot| Ok(self.slots.get(&slot).cloned()), id)
            .map(|(body, _, neighbors)| (body, neighbors))
    }
}

fn body_of(id: JobId) -> Result<Bytes, Failed> {
    Ok(job(id).body)
}

#[test]
fn each_job_reads_its_own_body() {
    let mut store = Store::default();
    store.add(10, 3, &[1, 2, 3]);
    store.add(11, 0, &[4]);
    for id in 1..=4 {
        assert_eq!(store.read(id), body_of(id));
    }
    assert_eq!(store.read(9), Err(Failed::NotStored));
}

/// A read brings the other bodies of its page, each its own job's; none
/// the engine keeps itself, none of a deleted job.
#[test]
fn a_read_brings_its_pages_other_bodies() {
    let mut store = Store::default();
    store.add(10, 3, &[1, 2, 3, 6]);
    // Job 6 was deleted: its image is still in the page, but it is
    // placed nowhere.
    store.dir.lock().jobs.remove(6);
    let (_, neighbors) = store.read_all(2).unwrap();
    let want: Neighbors = [1, 3].map(|id| (id, job(id).body)).into();
    assert_eq!(neighbors, want);

    let mut short = job(5);
    short.body = Bytes::from_static(b"kept by the engine");
    let mut b = PageBuilder::default();
    let lens: Vec<u32> = [job(4), short].iter().map(|j| b.image(j).1).collect();
    let value = page::seal(11, &b.finish()[0]);
    store.slots.insert(4, value.clone());
    let mut map = store.dir.lock();
    map.pages.insert(
        11,
        Page {
            slot: 4,
            bytes: value.len() as u64,
        },
    );
    map.jobs.insert(4, Place::new(11, lens[0]));
    drop(map);
    assert_eq!(store.read_all(4).unwrap().1, Neighbors::new());
}

/// Damage names the job, and never reads as another job's body.
#[track_caller]
fn assert_damaged(got: Result<Bytes, Failed>, id: JobId) {
    match got {
        Err(Failed::Damaged(why)) => assert!(why.starts_with(&format!("job {id}: ")), "{why}"),
        other => panic!("job {id}: {other:?}"),
    }
}

#[test]
fn a_foreign_entry_is_damage_not_a_body() {
    let mut store = Store::default();
    store.add(10, 3, &[1, 2]);
    // Slot 3 holds page 10 of other jobs: job 2's place points at it, but
    // job 2 is not there.
    store.slots.insert(3, page_of(10, &[1, 5]).0);
    assert_damaged(store.read(2), 2);
    assert_eq!(store.read(1), body_of(1));
    // The slot holds a newer page, one that has job 2 in it even: not the
    // page looked for.
    store.slots.insert(3, page_of(12, &[2]).0);
    assert_damaged(store.read(2), 2);
    // An image of job 2 of another length than its place says.
    let mut longer = job(2);
    longer.body = Bytes::from_static(b"a body longer than job 2's was, by far");
    let mut b = PageBuilder::default();
    b.image(&longer);
    store.slots.insert(3, page::seal(10, &b.finish()[0]));
    assert_damaged(store.read(2), 2);
    // The slot is empty.
    store.slots.remove(&3);
    assert_damaged(store.read(2), 2);
}

/// A way to damage a page's value.
type Damage = Box<dyn Fn(&mut Vec<u8>)>;

#[test]
fn a_damaged_page_is_an_error_naming_the_job() {
    let mut store = Store::default();
    store.add(10, 3, &[1, 2]);
    let good = store.slots[&3].clone();
    let (_, lens) = page_of(10, &[1, 2]);
    // Where job 2's entry starts: after the header and job 1's entry.
    let second = 9 + lens[0] as usize;
    let damage: [(&str, Damage); 4] = [
        ("version", Box::new(|v| v[0] = 9)),
        ("cut", Box::new(|v| v.truncate(v.len() - 3))),
        // Job 2's entry length, past the page's end.
        ("length", Box::new(move |v| v[second] = 0xff)),
        // Job 2's state byte: an image that does not decode.
        ("state", Box::new(move |v| v[second + 4 + 9] = 0x7f)),
    ];
    for (what, damage) in damage {
        let mut bad = good.clone();
        damage(&mut bad);
        store.slots.insert(3, bad);
        let got = store.read(2);
        assert!(matches!(got, Err(Failed::Damaged(_))), "{what}: {got:?}");
        assert_damaged(got, 2);
    }
    let failing = |_| -> io::Result<Option<Vec<u8>>> { Err(io::Error::other("EIO")) };
    assert_damaged(read(&store.dir, failing, 1).map(|(body, ..)| body), 1);
}

/// Cleaning moves job 2 between its lookup and its read, and its old slot
/// goes to a newer page: the read looks again and finds it.
#[test]
fn a_moved_entry_is_looked_up_again() {
    let mut store = Store::default();
    store.add(10, 3, &[1, 2]);
    let (moved, lens) = page_of(11, &[2]);
    let reads = Cell::new(0);
    let read_page = |slot: Slot| {
        reads.set(reads.get() + 1);
        if reads.get() == 1 {
            store.dir.change(|| {
                let mut map = store.dir.lock();
                map.pages.remove(10);
                let bytes = moved.len() as u64;
                map.pages.insert(11, Page { slot: 4, bytes });
                map.jobs.insert(2, Place::new(11, lens[0]));
            });
            // Slot 3 was freed and taken by page 12.
            return Ok(Some(page_of(12, &[7]).0));
        }
        Ok(match slot {
            4 => Some(moved.clone()),
            _ => store.slots.get(&slot).cloned(),
        })
    };
    let got = read(&store.dir, read_page, 2);
    assert_eq!(got.map(|(body, ..)| body), body_of(2));
    assert_eq!(reads.get(), 2);
}

/// A read waits out a batch being written, then reads where it put the
/// job.
#[test]
fn a_read_waits_for_the_batch_in_progress() {
    let mut store = Store::default();
    store.add(10, 3, &[1]);
    let store = std::sync::Arc::new(store);
    let writer = store.clone();
    let (started_tx, started) = std::sync::mpsc::channel();
    let batch = std::thread::spawn(move || {
        writer.dir.change(|| {
            started_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        })
    });
    started.recv().unwrap();
    let at = Instant::now();
    assert_eq!(store.read(1), body_of(1));
    assert!(
        at.elapsed() >= Duration::from_millis(20),
        "{:?}",
        at.elapsed()
    );
    batch.join().unwrap();
}

#[test]
fn bodies_come_from_the_cache_then_from_sled() {
    let db = ::sled::Config::new().temporary(true).open().unwrap();
    let stats = Arc::new(crate::binlog_stats::BinlogStats::default());
    let cache = Arc::new(BodyCache::new(1 << 20, stats.clone()));
    let bodies = Bodies::new(cache, Arc::default(), Arc::new(db.clone()));
    let (value, lens) = page_of(10, &[1, 2]);
    db.insert(page::page_key(3), value).unwrap();
    {
        let mut map = bodies.dir.lock();
        map.pages.insert(
            10,
            Page {
                slot: 3,
                bytes: 100,
            },
        );
        map.jobs.insert(1, Place::new(10, lens[0]));
        map.jobs.insert(2, Place::new(10, lens[1]));
        // Job 5 is filed in page 10, which does not hold it.
        map.jobs.insert(5, Place::new(10, lens[1]));
    }
    assert_eq!(bodies.body(1), body_of(1));
    assert_eq!(bodies.body(1), body_of(1));
    assert_eq!(bodies.body(2), body_of(2));
    assert_damaged(bodies.body(5), 5);
    assert_eq!(bodies.body(6), Err(Failed::NotStored));
    let figures = &stats.body_cache;
    let read = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
    // Job 2 came in with job 1's page.
    assert_eq!(read(&figures.hits), 2);
    assert_eq!(read(&figures.misses), 3);
    assert_eq!(read(&figures.read_errors), 1);
    assert!(read(&figures.bytes) > 0);
    // Closed, it lets go of sled; what the cache holds still answers.
    bodies.close();
    assert_eq!(bodies.body(1), body_of(1));
    bodies.cache.remove(2);
    assert_damaged(bodies.body(2), 2);
}
