//! Filling replies whose bodies only the store keeps (issue 33).
//!
//! With `-b` the engine keeps the length of a body longer than
//! `engine::INLINE_BODY`, not its bytes (`Engine::stored_len`), so a
//! `reserve` or `peek` naming such a job comes out of the engine with an
//! empty body. Under the engine lock the body cache fills it if it holds
//! the body (a short lock of its own, never a disk read): [`from_cache`].
//! What it does not hold is *cold*, and read from sled on a blocking
//! thread after the engine lock is released, before the reply is written:
//! [`from_disk`]. No other connection waits for that read, and a drain
//! seldom has one: the pages after a cold read's are read ahead in the
//! background (`store/read_ahead.rs`); a hit on a body so read asks for
//! more, queued under the lock, the reader woken by the flush
//! (`Bodies::wake_ahead`).
//!
//! A body that cannot be read back never goes out as another one: the
//! reply becomes NOT_FOUND for a `peek` whose job was deleted meanwhile
//! (as if the peek had come after the delete), else INTERNAL_ERROR (a
//! damaged store; the read logged the job's id). A reserved job so
//! answered comes back when its TTR runs out.

use std::sync::Arc;

use bytes::Bytes;
use sprout_protocol::{JobId, Response};

use crate::engine::Engine;
use crate::store::{Bodies, Failed};

/// A reply's jobs whose bodies are still to be read from the store: each
/// id with the body's length.
pub type Cold = Vec<(JobId, usize)>;

/// Calls `f` with each job `response` hands out and its body.
fn each_job(response: &mut Response, mut f: impl FnMut(JobId, &mut Bytes)) {
    match response {
        Response::Reserved { id, body } | Response::Found { id, body } => f(*id, body),
        Response::ReservedBatch(jobs) => {
            for (id, body) in jobs {
                f(*id, body)
            }
        }
        _ => {}
    }
}

/// Fills `response`'s bodies that only the store keeps from the body
/// cache, under the engine lock; returns those it does not hold.
pub fn from_cache(engine: &Engine, bodies: Option<&Arc<Bodies>>, response: &mut Response) -> Cold {
    let Some(bodies) = bodies else {
        return Cold::new();
    };
    let mut cold = Cold::new();
    each_job(response, |id, body| {
        if !body.is_empty() {
            return;
        }
        // Only bodies the engine left to the store enter the cache, so a
        // hit needs no word from the engine (nor the job table's lookup).
        if let Some(cached) = bodies.cached(id) {
            *body = cached;
        } else if let Some(len) = engine.stored_len(id) {
            bodies.cache.missed();
            cold.push((id, len));
        }
    });
    cold
}

/// Reads the cold bodies of `replies` from the store, off the async
/// threads, and fills them in (see the module docs for a body that cannot
/// be read).
pub async fn from_disk(bodies: &Arc<Bodies>, replies: Vec<(&mut Response, Cold)>) {
    let mut wanted: Vec<(JobId, usize)> = replies.iter().flat_map(|(_, c)| c.clone()).collect();
    // Ids go up with the order jobs were put in, which is roughly where
    // their pages are.
    wanted.sort_unstable();
    wanted.dedup();
    let ids = wanted.iter().map(|&(id, _)| id).collect();
    // Not `Bodies::body`: the cache missed these already, and said so.
    let read = match off_thread(bodies, ids, Bodies::read).await {
        Ok(read) => read,
        Err(e) => {
            tracing::error!("reading bodies back from the store failed: {e}");
            Vec::new()
        }
    };
    // In `wanted`'s order: by id.
    let read: Vec<_> = (read.into_iter().zip(&wanted))
        .map(|((id, got), &(_, len))| (id, checked(got, id, len)))
        .collect();
    for (response, cold) in replies {
        fill(response, &cold, &read);
    }
}

/// Each of `ids` with its body, as `read` gets it from `bodies`, on a
/// blocking thread (reads block, `body_read.rs`), in `ids`' order.
pub async fn off_thread(
    bodies: &Arc<Bodies>,
    ids: Vec<JobId>,
    read: fn(&Bodies, JobId) -> Result<Bytes, Failed>,
) -> Result<Vec<(JobId, Result<Bytes, Failed>)>, tokio::task::JoinError> {
    let bodies = bodies.clone();
    tokio::task::spawn_blocking(move || ids.iter().map(|&id| (id, read(&bodies, id))).collect())
        .await
}

/// The ids among `jobs` (as the engine lists them, `Engine::bodies_in`)
/// whose bodies only the store keeps: called under the engine lock.
pub fn stored_among(engine: &Engine, jobs: &[(JobId, Bytes)]) -> Vec<JobId> {
    jobs.iter()
        .filter(|(id, body)| body.is_empty() && engine.stored_len(*id).is_some())
        .map(|(id, _)| *id)
        .collect()
}

/// Fills in the bodies of `jobs` that only the store keeps (`stored`,
/// from [`stored_among`]), read off the async threads. A body that cannot
/// be read is an error naming its job.
pub async fn read_stored(
    bodies: Option<&Arc<Bodies>>,
    jobs: &mut [(JobId, Bytes)],
    stored: Vec<JobId>,
) -> Result<(), String> {
    if stored.is_empty() {
        return Ok(());
    }
    let bodies = bodies.ok_or("bodies left to a store that keeps none")?;
    let read = off_thread(bodies, stored, Bodies::body)
        .await
        .map_err(|e| e.to_string())?;
    let read: rustc_hash::FxHashMap<JobId, _> = read.into_iter().collect();
    for (id, body) in jobs {
        match read.get(id) {
            Some(Ok(got)) => *body = got.clone(),
            Some(Err(e)) => return Err(format!("job {id}'s body: {e:?}")),
            None => {}
        }
    }
    Ok(())
}

/// The body `got` for job `id`, if it is as long as the engine says.
fn checked(got: Result<Bytes, Failed>, id: JobId, len: usize) -> Result<Bytes, Failed> {
    match got {
        Ok(body) if body.len() != len => {
            let why = format!(
                "job {id}: its body read back is {} bytes, not {len}",
                body.len()
            );
            tracing::error!("{why}");
            Err(Failed::Damaged(why))
        }
        got => got,
    }
}

/// Puts the bodies `read` into `response`'s `cold` jobs, or turns it into
/// the error a body that cannot be read calls for.
fn fill(response: &mut Response, cold: &Cold, read: &[(JobId, Result<Bytes, Failed>)]) {
    // `read` is in id order (`from_disk`).
    let found = |id: JobId| {
        let at = read.binary_search_by_key(&id, |(got, _)| *got).ok()?;
        Some(&read[at].1)
    };
    let mut failed = None;
    each_job(response, |id, body| {
        if !cold.iter().any(|&(c, _)| c == id) {
            return;
        }
        match found(id) {
            Some(Ok(got)) => *body = got.clone(),
            Some(Err(e)) => failed = Some(e.clone()),
            None => failed = Some(Failed::Damaged(format!("job {id}: not read"))),
        }
    });
    if let Some(failed) = failed {
        *response = failure(response, &failed);
    }
}

/// The answer to a reply whose body could not be read.
fn failure(response: &Response, failed: &Failed) -> Response {
    match (response, failed) {
        (Response::Found { .. }, Failed::NotStored) => Response::NotFound,
        _ => Response::InternalError,
    }
}
