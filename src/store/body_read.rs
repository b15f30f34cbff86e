//! Reading a body back from the job's page (issue 33, step 2), for a
//! reply whose body neither the engine nor the body cache holds.
//!
//! The lookup (`directory.rs`) and the read are not atomic: cleaning may
//! move the image between them, and a freed slot may hold another job's
//! page by then. So a read checks what it got before it trusts it: the
//! page's header (its version, and the sequence number the lookup named:
//! a slot given to a newer page fails there), the entry's framing, the
//! entry's job id and length, and the image's decoding. Pages carry no
//! checksum of their own: sled checks its log records' CRCs as it reads
//! them, so damage on the disk fails in sled; what is left to catch here
//! is a page that is not the one looked for, or not what it says. A body
//! is the same in every image of its job (no command changes a body), so
//! any image that checks out is the right body, even one the job has
//! since moved from.
//!
//! A read that does not check out looks again only if the page log
//! changed meanwhile (its epoch moved); otherwise the store is damaged:
//! the read fails, its job id is logged, and it never hands out a body
//! that is not the job's. Reads block (sled's own reads do): callers run
//! them on a blocking thread, never under the engine lock.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::JobId;

use super::body_cache::{BodyCache, PageKey, Settle};
use super::corrupt::Corrupt;
use super::directory::{Directory, Found};
use super::log::Log;
use super::page;
use super::page_source::{PageSource, PageValue, Source};
use super::read_ahead::{self, ReadAhead};
use super::record;
use super::slots::Slot;
use crate::binlog_stats::BinlogStats;
use crate::engine::{JobImage, Record, INLINE_BODY};

/// How many times a read whose page changed under it looks again.
const RETRIES: u32 = 16;
/// How long a read waits for the writer to finish a batch, at most.
const SETTLE: Duration = Duration::from_secs(5);

/// Why no body was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// The store holds no image of the job (deleted, or never stored).
    NotStored,
    /// What the store holds for it does not check out: a damaged store.
    /// Names the job.
    Damaged(String),
}

/// Why one attempt did not give the body.
pub(super) enum Miss {
    /// What a change of the page log between lookup and read explains.
    Stale(&'static str),
    Damaged(String),
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Stale(why) => f.write_str(why),
            Miss::Damaged(why) => f.write_str(why),
        }
    }
}

/// The other bodies a cold read's page holds, by job id (see
/// [`neighbors_in`]).
pub type Neighbors = Vec<(JobId, Bytes)>;

/// Job `id`'s body, read from its page by `read_page` (a slot's value,
/// `None` if the slot is empty) where `dir` says it is, and the page's
/// other bodies: slices of the page, whose key the cache charges.
pub fn read<V: Into<PageValue>>(
    dir: &Directory,
    read_page: impl Fn(Slot) -> io::Result<Option<V>>,
    id: JobId,
) -> Result<(Bytes, PageKey, Neighbors), Failed> {
    let damaged = |why: &str| Failed::Damaged(format!("job {id}: {why}"));
    let mut last = "";
    for _ in 0..=RETRIES {
        let epoch = dir.settled(SETTLE);
        let attempt = match dir.find(id) {
            None => Err(Miss::Stale("no place")),
            Some(found) => match read_page(found.slot) {
                Ok(Some(value)) => {
                    let (page, key) = value.into().shared();
                    shared_body_in(&page, found, id)
                        .map(|body| (body, key, neighbors_in(dir, &page, id)))
                }
                Ok(None) => Err(Miss::Stale("its page's slot is empty")),
                Err(e) => Err(Miss::Damaged(format!("reading its page: {e}"))),
            },
        };
        let why = match attempt {
            Ok(body) => return Ok(body),
            Err(Miss::Damaged(why)) => return Err(damaged(&why)),
            Err(Miss::Stale(why)) => why,
        };
        if dir.epoch() == epoch {
            return Err(match why {
                "no place" => Failed::NotStored,
                why => damaged(why),
            });
        }
        last = why;
    }
    Err(damaged(&format!("its page kept changing ({last})")))
}

/// The bodies of the live jobs other than `id` whose images page `value`
/// holds (one that `body_in` found to be the page it looked for), for the
/// body cache: jobs are packed in put order, so a drain asks for them
/// next. A backlog larger than the cache drained at 0.27x the rate with
/// bodies in RAM while every reserve read its own page (issue 33). Which
/// bodies: `read_ahead::live_bodies`.
fn neighbors_in(dir: &Directory, page: &Bytes, id: JobId) -> Neighbors {
    let mut bodies = read_ahead::live_bodies(dir, page);
    bodies.retain(|&(other, _)| other != id);
    bodies
}

/// The body in page `value`, if it is the page `found` names and holds an
/// image of job `id` as long as `found` says: a copy, which keeps no page
/// alive. Packing reads an updated job's body with it too (`pack.rs`),
/// and recovery a put only sled holds.
pub(super) fn body_in(value: &[u8], found: Found, id: JobId) -> Result<Bytes, Miss> {
    image_in(value, found, id, record::decode_job)
}

/// [`body_in`], the body a slice of `page` (for the body cache).
fn shared_body_in(page: &Bytes, found: Found, id: JobId) -> Result<Bytes, Miss> {
    let mut decoder = record::Decoder::default();
    image_in(page, found, id, |image| decoder.job(page, image))
}

/// The body of job `id`'s image in `value`, decoded by `decode`, checked
/// as [`body_in`] says.
fn image_in(
    value: &[u8],
    found: Found,
    id: JobId,
    decode: impl FnOnce(&[u8]) -> Result<JobImage, Corrupt>,
) -> Result<Bytes, Miss> {
    let seq = found.seq;
    let damaged = |e: &dyn std::fmt::Display| Miss::Damaged(format!("page {seq}: {e}"));
    let (stored_seq, entries) = page::read(value).map_err(|e| damaged(&e))?;
    if stored_seq != seq {
        return Err(Miss::Stale("its page's slot holds another page"));
    }
    for entry in entries {
        let entry = entry.map_err(|e| damaged(&e))?;
        let Some(image) = entry.image().filter(|_| entry.id == id) else {
            continue;
        };
        if entry.raw.len() != found.len as usize {
            return Err(Miss::Stale("its image in the page is of another length"));
        }
        let job = decode(image).map_err(|e| damaged(&e))?;
        if job.id != id {
            return Err(damaged(&format!(
                "an image of job {} filed as {id}",
                job.id
            )));
        }
        return Ok(job.body);
    }
    Err(Miss::Stale("its page holds no image of it"))
}

/// Bodies for replies: the cache's, else read from sled and kept in the
/// cache, and the pages after a read read ahead (`read_ahead.rs`). Used
/// from a blocking thread (see the module docs).
pub struct Bodies {
    pub cache: Arc<BodyCache>,
    pub dir: Arc<Directory>,
    /// Where the pages are, until the store closes (`page_source.rs`).
    pub(super) source: Source,
    pub(super) ahead: ReadAhead,
}

impl Bodies {
    pub fn new(cache: Arc<BodyCache>, dir: Arc<Directory>, pages: Arc<dyn PageSource>) -> Bodies {
        let source: Source = Arc::new(Mutex::new(Some(pages)));
        Bodies {
            ahead: ReadAhead::start(cache.clone(), dir.clone(), source.clone()),
            cache,
            dir,
            source,
        }
    }

    /// Bodies read back from the pages of `log` that `pages` keeps
    /// (cluster mode's copy of its stream, `cluster/page_copy.rs`),
    /// through a cache of `cache_bytes` whose figures go to `stats`.
    pub fn over(
        log: &Log,
        pages: Arc<dyn PageSource>,
        cache_bytes: u64,
        stats: Arc<BinlogStats>,
    ) -> Bodies {
        let cache = Arc::new(BodyCache::new(cache_bytes, stats));
        Bodies::new(cache, log.directory(), pages)
    }

    /// Cluster mode's [`Bodies::absorbed`]: jobs whose image a page this
    /// node keeps now holds (`true`: their bodies may leave the cache), or
    /// that were deleted (`false`: their bodies go).
    pub fn paged(&self, jobs: impl IntoIterator<Item = (JobId, bool)>) {
        self.cache
            .settle(jobs.into_iter().map(|(id, kept)| match kept {
                true => Settle::Unpin(id),
                false => Settle::Remove(id),
            }));
    }

    /// Records submitted to the store, in order (under the engine lock):
    /// the body of each put the engine leaves to the store is held, pinned,
    /// until sled takes it in ([`Bodies::absorbed`]).
    pub fn submitted(&self, records: &[Record]) {
        self.cache
            .pin(records.iter().filter_map(|record| match record {
                Record::Put(image) if image.body.len() > INLINE_BODY => {
                    Some((image.id, image.body.clone()))
                }
                _ => None,
            }));
    }

    /// Records sled now holds: their bodies may leave the cache, and a
    /// deleted job's body goes. Deletes are settled here, on the store's
    /// thread, not when submitted: letting go of a body (two frees) under
    /// the engine lock made every delete hold up every connection
    /// (issue 33: drain 0.90x). Until then the cache may hold a deleted
    /// job's body, which nothing asks for: the engine answers for a
    /// deleted job without it, and ids are never reused.
    pub fn absorbed<'a>(&self, records: impl IntoIterator<Item = &'a Record>) {
        let changes = records.into_iter().filter_map(|record| match record {
            Record::Put(image) if image.body.len() > INLINE_BODY => Some(Settle::Unpin(image.id)),
            Record::Delete(id) => Some(Settle::Remove(*id)),
            Record::Put(_) | Record::Update(_) => None,
        });
        self.cache.settle(changes);
    }

    /// Lets go of sled (the store is closing): reads fail from now on.
    pub fn close(&self) {
        self.ahead.stop();
        self.source.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Job `id`'s body. A damaged store's failure is counted
    /// (`body-cache-read-errors`) and logged with the job's id.
    pub fn body(&self, id: JobId) -> Result<Bytes, Failed> {
        match self.cached(id) {
            Some(body) => {
                self.ahead.wake();
                Ok(body)
            }
            None => {
                self.cache.missed();
                self.read(id)
            }
        }
    }

    /// Job `id`'s body if the cache holds it (a hit counted; a miss is
    /// the caller's to count, `BodyCache::missed`). The first body of a
    /// page read ahead asks for the pages after it (queued only: this
    /// runs under the engine lock; [`Bodies::wake_ahead`] wakes the
    /// reader).
    pub fn cached(&self, id: JobId) -> Option<Bytes> {
        let (body, marked) = self.cache.find(id)?;
        if marked {
            self.ahead.ask(id, true);
        }
        Some(body)
    }

    /// Wakes the read-ahead if a hit asked it for pages: called by a
    /// connection with no lock held, before it writes its replies.
    pub fn wake_ahead(&self) {
        self.ahead.wake();
    }

    /// Job `id`'s body read from its page (blocks; see the module docs),
    /// then held in the cache with the page's other bodies, and the pages
    /// after it read ahead. Failures as [`Bodies::body`]'s. A body an
    /// earlier read of its page brought in is taken from the cache (a
    /// reply's miss was counted already).
    pub fn read(&self, id: JobId) -> Result<Bytes, Failed> {
        if let Some(body) = self.cache.peek(id) {
            return Ok(body);
        }
        let source = self
            .source
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let read_page = |slot| match &source {
            Some(source) => source.page(slot),
            None => Err(io::Error::other("the store is closed")),
        };
        let since = self.dir.epoch();
        let got = read(&self.dir, read_page, id).map(|(body, page, neighbors)| {
            let read = std::iter::once((id, body.clone())).chain(neighbors);
            read_ahead::keep(&self.cache, &self.dir, page, read, None, since);
            self.ahead.ask(id, false);
            self.ahead.wake();
            body
        });
        if let Err(Failed::Damaged(why)) = &got {
            self.cache.read_failed();
            tracing::error!(job = id, "a body cannot be read back from the store: {why}");
        }
        got
    }
}

#[cfg(test)]
mod tests;
