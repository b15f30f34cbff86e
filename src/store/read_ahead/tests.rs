//! Read-ahead against a real sled: a drain past the cache waits for one
//! read, not one a page; no deleted job's body enters the cache; requests
//! stay bounded. Each step waits for the reader to be done ([`ReadAhead::
//! wait_idle`]), so the counts do not depend on how fast it is.

use super::*;
use crate::store::body_read::Bodies;
use crate::store::entry::tests::image;
use crate::store::page::PageBuilder;
use crate::store::page_table::Page;
use crate::store::places::Place;

/// A body of 256 bytes that says whose it is.
fn body(id: JobId) -> Bytes {
    let mut b = format!("the body of job {id}:").into_bytes();
    b.resize(256, b'.');
    Bytes::from(b)
}

/// Jobs `ids`, packed into pages from sequence number 100 on (slot `i`
/// for page `100 + i`), in sled and in the directory, as the absorber
/// leaves them; a cache of `bound` bytes. Returns the number of pages.
fn store(ids: &[JobId], bound: u64) -> (Bodies, usize) {
    let db = ::sled::Config::new().temporary(true).open().unwrap();
    let stats = Arc::new(crate::binlog_stats::BinlogStats::default());
    let cache = Arc::new(BodyCache::new(bound, stats));
    let bodies = Bodies::new(cache, Arc::default(), Arc::new(db.clone()));
    let mut b = PageBuilder::default();
    let places: Vec<(usize, u32)> = (ids.iter())
        .map(|&id| {
            let mut job = image(id, 0);
            job.body = body(id);
            b.image(&job)
        })
        .collect();
    let pages = b.finish();
    let mut map = bodies.dir.lock();
    for (i, entries) in pages.iter().enumerate() {
        let value = page::seal(100 + i as u64, entries);
        let bytes = value.len() as u64;
        db.insert(page::page_key(i as u32), value).unwrap();
        map.pages.insert(
            100 + i as u64,
            Page {
                slot: i as u32,
                bytes,
            },
        );
    }
    for (&id, (page, len)) in ids.iter().zip(places) {
        map.jobs.insert(id, Place::new(100 + page as u64, len));
    }
    drop(map);
    (bodies, pages.len())
}

/// Reserves `ids` in order as a connection does (the cache, else a read
/// on a blocking thread), each after the reader is done; returns how many
/// had to wait for a read.
fn drain(bodies: &Bodies, ids: &[JobId]) -> usize {
    let mut reads = 0;
    for &id in ids {
        let got = bodies.cached(id).unwrap_or_else(|| {
            reads += 1;
            bodies.read(id).unwrap()
        });
        assert_eq!(got, body(id), "job {id}");
        bodies.wake_ahead();
        bodies.ahead.wait_idle();
    }
    reads
}

#[test]
fn a_drain_past_the_cache_waits_for_one_read_not_one_a_page() {
    // ~1.6x the cache's bound of bodies.
    let ids: Vec<JobId> = (1..=2400).collect();
    let (bodies, pages) = store(&ids, MIN_CACHE);
    assert!(pages > 150, "{pages} pages");
    assert_eq!(drain(&bodies, &ids), 1);
    let (bytes, _) = bodies.cache.sizes();
    assert!(bytes <= MIN_CACHE, "{bytes}");
    // Without read-ahead (a cache below MIN_CACHE): one read a page.
    let (bodies, pages) = store(&ids, MIN_CACHE - 1);
    assert_eq!(drain(&bodies, &ids), pages);
}

/// A page read ahead brings only the bodies of jobs the directory places.
#[test]
fn a_page_read_ahead_brings_no_deleted_jobs_body() {
    let ids: Vec<JobId> = (1..=60).collect();
    let (bodies, pages) = store(&ids, MIN_CACHE);
    assert!(pages >= 3, "{pages} pages");
    // The last job of page 101, the one after job 1's.
    let in_101 = |&id: &JobId| bodies.dir.find(id).unwrap().seq == 101;
    let deleted = ids.iter().copied().rfind(in_101).unwrap();
    bodies.dir.lock().jobs.remove(deleted);
    assert_eq!(bodies.read(1), Ok(body(1)));
    bodies.ahead.wait_idle();
    assert_eq!(bodies.cache.peek(deleted), None);
    assert_eq!(bodies.cache.peek(deleted - 1), Some(body(deleted - 1)));
}

/// A delete settled between the read's look at the directory and its
/// insert: the body is taken out again.
#[test]
fn a_body_whose_job_was_deleted_meanwhile_is_not_kept() {
    let ids: Vec<JobId> = (1..=10).collect();
    let (bodies, _) = store(&ids, MIN_CACHE);
    let found = bodies.dir.find(5).unwrap();
    let source = bodies.source.lock().unwrap().clone().unwrap();
    let (value, page) = source.page(found.slot).unwrap().unwrap().shared();
    let since = bodies.dir.epoch();
    let read = live_bodies(&bodies.dir, &value);
    assert_eq!(read.len(), 10);
    // The delete of job 5 is taken in, as the absorber does: out of the
    // directory in a batch, then out of the cache (which does not hold it
    // yet).
    bodies.dir.change(|| bodies.dir.lock().jobs.remove(5));
    bodies.cache.settle([Settle::Remove(5)]);
    keep(&bodies.cache, &bodies.dir, page, read, Some(1), since);
    assert_eq!(bodies.cache.peek(5), None);
    assert_eq!(bodies.cache.peek(4), Some(body(4)));
    assert_eq!(bodies.cache.find(1).map(|(_, marked)| marked), Some(true));
    // A delete whose batch comes after the insert (the epoch had not
    // moved: no second look): its settle takes the body out. (Job 6 out
    // of the cache first, for the keep to put it in.)
    bodies.cache.settle([Settle::Remove(6)]);
    let since = bodies.dir.epoch();
    let read = live_bodies(&bodies.dir, &value);
    keep(&bodies.cache, &bodies.dir, page, read, None, since);
    assert_eq!(bodies.cache.peek(6), Some(body(6)));
    bodies.dir.change(|| bodies.dir.lock().jobs.remove(6));
    bodies.cache.settle([Settle::Remove(6)]);
    assert_eq!(bodies.cache.peek(6), None);
}

/// A reader held up (here by the directory's lock) queues at most
/// [`QUEUE`] requests, the latest.
#[test]
fn requests_past_a_full_queue_are_dropped() {
    let ids: Vec<JobId> = (1..=10).collect();
    let (bodies, _) = store(&ids, MIN_CACHE);
    let held = bodies.dir.lock();
    for id in 1..=10 {
        bodies.ahead.ask(id, true);
        bodies.wake_ahead();
    }
    let queued: Vec<JobId> = bodies.ahead.state.lock().ids.iter().map(|r| r.id).collect();
    assert!(
        queued.len() <= QUEUE && queued.ends_with(&[9, 10]),
        "{queued:?}"
    );
    drop(held);
    bodies.ahead.wait_idle();
    bodies.close();
    bodies.ahead.ask(1, false);
    assert!(bodies.ahead.state.lock().ids.is_empty());
}

/// A drain's lead grows to [`LEAD`] pages after the page it is at, and no
/// further.
#[test]
fn a_drain_is_kept_lead_pages_ahead() {
    let ids: Vec<JobId> = (1..=2400).collect();
    let (bodies, pages) = store(&ids, MIN_CACHE);
    let seq = |id: JobId| bodies.dir.find(id).unwrap().seq;
    let first_of = |page: u64| ids.iter().copied().find(|&id| seq(id) == page).unwrap();
    assert!(pages > 40 + LEAD as usize, "{pages} pages");
    // Up to and with the first job of page 140.
    let at = first_of(140);
    assert_eq!(drain(&bodies, &ids[..at as usize]), 1);
    let cached = |page: u64| bodies.cache.peek(first_of(page)).is_some();
    assert!((141..=140 + LEAD).all(cached));
    assert!(!cached(141 + LEAD));
}
