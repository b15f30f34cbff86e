//! What every HTTP handler shares: the server (once recovery is over), the
//! access token, the history of recent figures, and the one way handlers
//! change the queue.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use sprout_protocol::{JobId, TubeName};

use crate::bridge;
use crate::engine::{AdminError, Engine, JobInfo};
use crate::fill;
use crate::shared::{Shared, Submission};
use crate::store::{self, Bodies, Failed};

use super::caller::Caller;
use super::error::ApiError;
use super::history::History;
use super::sign_in::Sessions;

pub struct App {
    /// Set when the server has recovered and starts serving.
    server: OnceLock<Arc<Shared>>,
    pub token: Option<String>,
    pub token_metrics: bool,
    /// `--auth`: the policy's principals may use this port too.
    pub auth: bool,
    /// Served over TLS (`--http-tls`): the session cookie is `Secure`.
    pub tls: bool,
    pub history: Arc<History>,
    /// The dashboard's sign-ins.
    pub sessions: Sessions<Caller>,
    /// `-b DIR`, if any.
    pub store_dir: Option<PathBuf>,
    bridge: OnceLock<Bridge>,
}

/// The embedded Redis bridge, as the HTTP port shows it.
pub struct Bridge {
    /// Where deliveries go.
    pub tube: TubeName,
    /// Where its pending timers wait.
    pub timers: TubeName,
    pub status: bridge::Status,
}

impl App {
    pub fn new(token: Option<String>, token_metrics: bool) -> App {
        App {
            server: OnceLock::new(),
            token,
            token_metrics,
            auth: false,
            tls: false,
            history: Arc::default(),
            sessions: Sessions::default(),
            store_dir: None,
            bridge: OnceLock::new(),
        }
    }

    pub fn show_bridge(&self, bridge: Bridge) {
        let _ = self.bridge.set(bridge);
    }

    /// The embedded bridge, when one runs.
    pub fn bridge(&self) -> Option<&Bridge> {
        self.bridge.get()
    }

    /// Bytes under `-b DIR` (files, recursively); `None` without a store.
    pub async fn store_bytes(&self) -> Option<u64> {
        let dir = self.store_dir.clone()?;
        tokio::task::spawn_blocking(move || disk_usage(&dir))
            .await
            .ok()
    }

    /// Hands the recovered server over; until then every call but the
    /// health checks answers 503.
    pub fn attach(&self, shared: Arc<Shared>) {
        let _ = self.server.set(shared);
    }

    /// The server, or 503 while it is still recovering.
    pub fn server(&self) -> Result<&Arc<Shared>, ApiError> {
        self.server
            .get()
            .ok_or_else(|| ApiError::unavailable("recovering"))
    }

    /// Reads the engine under its lock.
    pub fn read<T>(&self, f: impl FnOnce(&mut Engine, u64) -> T) -> Result<T, ApiError> {
        let shared = self.server()?;
        let now = shared.clock.now();
        let mut state = shared.lock();
        Ok(f(&mut state.engine, now))
    }

    /// Changes the engine under its lock, as a protocol command does: the
    /// records go to the store, and under `-f 0` the answer waits until
    /// they are durable. Returns what `f` returned and whether the store
    /// failed to keep it.
    pub async fn change<T>(
        &self,
        f: impl FnOnce(&mut Engine, u64) -> T,
    ) -> Result<(T, bool), ApiError> {
        let shared = self.server()?;
        let (value, submission) = apply(shared, f);
        let failed = !stored(shared, submission, 0).await?;
        Ok((value, failed))
    }

    /// [`App::change`] for a change that hands out a job id: the answer
    /// also waits until the disk's id ceiling is above it.
    pub async fn change_naming(
        &self,
        f: impl FnOnce(&mut Engine, u64) -> Result<JobId, AdminError>,
    ) -> Result<(Result<JobId, AdminError>, bool), ApiError> {
        let shared = self.server()?;
        let (value, submission) = apply(shared, f);
        let id_bound = value.as_ref().map_or(0, |id| id + 1);
        let failed = !stored(shared, submission, id_bound).await?;
        Ok((value, failed))
    }
}

impl App {
    /// Fills the bodies of `jobs` that the engine leaves to the store
    /// (`JobInfo::stored_len`), read off the async threads. A job deleted
    /// since it was listed keeps an empty body; one whose body cannot be
    /// read (a damaged store, logged with its id) fails the request.
    pub async fn fill_bodies(&self, jobs: &mut [JobInfo]) -> Result<(), ApiError> {
        let shared = self.server()?;
        let cold: Vec<JobId> = (jobs.iter())
            .filter(|j| j.stored_len.is_some() && j.body.is_empty())
            .map(|j| j.id)
            .collect();
        let (Some(bodies), false) = (shared.store.bodies(), cold.is_empty()) else {
            return Ok(());
        };
        let read = fill::off_thread(bodies, cold, Bodies::body).await;
        let read = read.map_err(|e| ApiError::internal(e.to_string()))?;
        for (id, got) in read {
            let job = jobs.iter_mut().find(|j| j.id == id).expect("a listed job");
            match got {
                Ok(body) => job.body = body,
                Err(Failed::NotStored) => {}
                Err(Failed::Damaged(why)) => return Err(ApiError::internal(why)),
            }
        }
        Ok(())
    }
}

/// Runs `f` on the engine under the lock, with the time now, and submits
/// the records it made: what it returned, and the submission to wait for.
fn apply<T>(shared: &Shared, f: impl FnOnce(&mut Engine, u64) -> T) -> (T, Submission) {
    let now = shared.clock.now();
    let mut state = shared.lock();
    let value = f(&mut state.engine, now);
    (value, state.submit())
}

/// Waits until an answer that depends on `submission` and names no job
/// id at or above `id_bound` may go out, as a protocol reply does
/// ([`store::acknowledged`]); false if the store failed to keep what the
/// change wrote.
pub async fn stored(
    shared: &Shared,
    submission: Submission,
    id_bound: JobId,
) -> Result<bool, ApiError> {
    if submission.seq == 0 {
        return Ok(true);
    }
    let mut progress = shared.store.progress();
    let progress = store::acknowledged(&*shared.store, &mut progress, submission.seq, id_bound)
        .await
        .map_err(|_| ApiError::unavailable("the store stopped"))?;
    Ok(!submission.failed(&progress))
}

/// The sizes of the files under `dir`, added up (what `du -b` would say of
/// the store: its data files, whatever the store's layout).
fn disk_usage(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => disk_usage(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}
