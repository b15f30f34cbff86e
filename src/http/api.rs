//! The JSON admin API under `/api/`: the server's figures, tubes, a tube's
//! jobs by state (paged), one job, and the changes users ask for (kick,
//! delete, flush a state, move, pause/resume, put). Every change goes
//! through [`App::change`] or [`batch::run`]: the engine, then the store,
//! like a protocol command. Bad input is a 4xx with `{"error": "…"}`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sprout_protocol::{JobId, TubeName};

use crate::auth::Action;
use crate::bridge::punctuality;
use crate::engine::{Cursor, JobInfo, State as JobState, TubeFigures};

use super::app::App;
use super::auth;
use super::batch;
use super::bridge_timers;
use super::caller::Caller;
use super::error::ApiError;
use super::extract::{Json, Query};
use super::figures;
use super::metrics::BridgeFigures;

/// Job bodies up to this size are inlined in `GET /api/jobs/{id}`; larger
/// ones only through `/api/jobs/{id}/body`.
const INLINE_BODY: usize = 1 << 20;
/// Bytes of a body shown in a job list.
const PREVIEW: usize = 64;
/// A put's defaults (pheanstalk's, a common choice).
const DEFAULT_PRI: u32 = 1024;
const DEFAULT_TTR: u64 = 60;

type Reply = Result<Response, ApiError>;

pub fn routes(max_job_size: u32) -> Router<Arc<App>> {
    // Room for a base64 body of the largest job, and the JSON around it.
    let limit = (max_job_size as usize / 3 + 1) * 4 + 64 * 1024;
    Router::new()
        .route("/api/server", get(server))
        .route("/api/cluster", get(cluster))
        .route("/api/history", get(history))
        .route("/api/tubes", get(tubes))
        .route("/api/tubes/{tube}", get(tube))
        .route("/api/tubes/{tube}/jobs", get(jobs).post(put))
        .route("/api/tubes/{tube}/kick", post(kick))
        .route("/api/tubes/{tube}/flush", post(flush))
        .route("/api/tubes/{tube}/move", post(move_jobs))
        .route("/api/tubes/{tube}/pause", post(pause))
        .route("/api/tubes/{tube}/resume", post(resume))
        .route("/api/jobs/{id}", get(job).delete(delete))
        .route("/api/jobs/{id}/body", get(body))
        .route("/api/jobs/{id}/kick", post(kick_job))
        .route("/api/jobs/{id}/release-hold", post(release_hold))
        .layer(DefaultBodyLimit::max(limit))
}

fn ok(value: Value) -> Reply {
    Ok(axum::Json(value).into_response())
}

fn tube_name(raw: &str) -> Result<TubeName, ApiError> {
    TubeName::new(raw.as_bytes()).ok_or_else(|| {
        ApiError::bad_request(format!(
            "bad tube name {raw:?}: 1 to 200 of A-Z a-z 0-9 - + / ; . $ _ ( ), not starting with -"
        ))
    })
}

fn job_id(raw: &str) -> Result<JobId, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::bad_request(format!("bad job id {raw:?}")))
}

fn job_state(raw: &str) -> Result<JobState, ApiError> {
    JobState::from_name(raw).ok_or_else(|| {
        ApiError::bad_request(format!(
            "bad state {raw:?}: one of ready, delayed, reserved, buried"
        ))
    })
}

/// The state a flush or move (`operation`) takes jobs from: never
/// reserved, as those belong to the workers holding them; the refusal
/// names the operation, as the engine's own only knows of "the job".
fn batch_state(operation: &str, raw: &str) -> Result<JobState, ApiError> {
    match job_state(raw)? {
        JobState::Reserved => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "{operation} cannot take reserved jobs: the workers holding them decide \
                 ({operation} ready, delayed or buried ones)"
            ),
        )),
        state => Ok(state),
    }
}

fn parse_cursor(raw: &str) -> Result<Cursor, ApiError> {
    let bad = || ApiError::bad_request(format!("bad cursor {raw:?}"));
    let (a, b) = raw.split_once('.').ok_or_else(bad)?;
    Ok(Cursor(
        a.parse().map_err(|_| bad())?,
        b.parse().map_err(|_| bad())?,
    ))
}

fn cursor_text(c: Cursor) -> String {
    format!("{}.{}", c.0, c.1)
}

fn seconds(micros: u64) -> f64 {
    micros as f64 / 1e6
}

/// `GET /api/cluster`: this node and its part, the leader (its address,
/// and its id as the members name it) and epoch, and every member with
/// its role. 404 on a server that is not a cluster node.
async fn cluster(State(app): State<Arc<App>>) -> Reply {
    let Some(c) = app.read(|engine, _| engine.cluster().cloned())? else {
        return Err(ApiError::not_found("not a cluster node (no --cluster)"));
    };
    let role = |addr: &str| {
        if addr == c.leader {
            "leader"
        } else {
            "standby"
        }
    };
    let members: Vec<Value> = c
        .members
        .iter()
        .map(|(node, addr)| json!({ "node": node, "addr": addr, "role": role(addr) }))
        .collect();
    let leader_node = c.members.iter().find(|(_, addr)| *addr == c.leader);
    ok(json!({
        "name": c.name,
        "node": c.node,
        "role": c.role,
        "leader": c.leader,
        "leader_node": leader_node.map(|(node, _)| node),
        "epoch": c.epoch,
        "members": members,
    }))
}

/// A stats document as a JSON object: keys with `_` for `-`, numbers as
/// numbers, the rest as text.
fn document(doc: &[u8]) -> Map<String, Value> {
    figures::pairs(doc)
        .map(|(key, value)| {
            let value = match value.parse::<f64>() {
                Ok(n) if value.bytes().all(|b| b.is_ascii_digit()) => json!(n as u64),
                Ok(n) => json!(n),
                Err(_) => match value {
                    "true" => json!(true),
                    "false" => json!(false),
                    _ => json!(value),
                },
            };
            (key.replace('-', "_"), value)
        })
        .collect()
}

fn tube_json(t: &TubeFigures) -> Value {
    let mut object = document(&t.stats);
    object.insert("paused".into(), json!(t.paused));
    object.insert(
        "oldest_ready_age".into(),
        json!(t.oldest_ready_age.map(seconds)),
    );
    for (name, h) in [
        ("reserve_wait", &t.latency.reserve_wait),
        ("age_at_reserve", &t.latency.age_at_reserve),
    ] {
        object.insert(
            format!("{name}_p50"),
            json!(h.quantile(0.5).map(|q| q / 1e6)),
        );
    }
    Value::Object(object)
}

fn job_json(j: &JobInfo) -> Map<String, Value> {
    let preview: String = String::from_utf8_lossy(&j.body[..j.body.len().min(PREVIEW)])
        .chars()
        .map(|c| if c.is_control() { '·' } else { c })
        .collect();
    let object = json!({
        "id": j.id,
        "tube": j.tube.as_str(),
        "state": j.state.name(),
        "pri": j.pri,
        "age": seconds(j.age),
        "delay": j.delay,
        "ttr": j.ttr,
        "time_left": seconds(j.time_left),
        "reserves": j.counts.reserves,
        "timeouts": j.counts.timeouts,
        "releases": j.counts.releases,
        "buries": j.counts.buries,
        "kicks": j.counts.kicks,
        "size": j.stored_len.unwrap_or(j.body.len()),
        "preview": preview,
    });
    match object {
        Value::Object(map) => map,
        _ => unreachable!("json! of an object"),
    }
}

async fn server(State(app): State<Arc<App>>) -> Reply {
    let store_disk_bytes = app.store_bytes().await;
    let (doc, bridge, timers) = app.read(|engine, now| {
        let bridge = app.bridge().map(|bridge| {
            let tubes = [&bridge.tube, &bridge.timers]
                .into_iter()
                .filter_map(|name| engine.tube_figures_of(name, now))
                .collect::<Vec<_>>();
            let figures = BridgeFigures::of(bridge, &tubes);
            let recent = &figures.punctuality.recent_lateness;
            json!({
                "tube": bridge.tube.as_str(),
                "timer_tube": bridge.timers.as_str(),
                "keys": figures.keys,
                "timers_pending": figures.timers_pending,
                "window_s": punctuality::WINDOW_MS / 1000,
                "deliveries": recent.count,
                "lateness_p50_ms": recent.quantile_ms(0.5),
                "lateness_p99_ms": recent.quantile_ms(0.99),
            })
        });
        let timers = bridge_timers::json(&bridge_timers::apart(engine, now));
        (engine.stats_at(now), bridge, timers)
    })?;
    ok(json!({
        "stats": document(&doc),
        "store_disk_bytes": store_disk_bytes,
        "bridge": bridge,
        "timers": timers,
    }))
}

async fn history(State(app): State<Arc<App>>) -> Reply {
    app.server()?;
    ok(json!({ "samples": app.history.samples() }))
}

/// Every tube the caller may inspect.
async fn tubes(State(app): State<Arc<App>>, caller: Option<Extension<Caller>>) -> Reply {
    let caller = caller.map(|Extension(c)| c);
    let tubes = app.read(|engine, now| engine.tube_figures(now))?;
    let seen = tubes
        .iter()
        .filter(|t| auth::may(&app, caller, Action::Inspect, t.name.as_str()));
    ok(json!({ "tubes": seen.map(tube_json).collect::<Vec<_>>() }))
}

async fn tube(State(app): State<Arc<App>>, Path(raw): Path<String>) -> Reply {
    let name = tube_name(&raw)?;
    let figures = app.read(|engine, now| engine.tube_figures_of(&name, now))?;
    ok(tube_json(
        &figures.ok_or_else(|| ApiError::not_found("no such tube"))?,
    ))
}

#[derive(Deserialize)]
struct JobsQuery {
    state: Option<String>,
    limit: Option<String>,
    after: Option<String>,
}

async fn jobs(
    State(app): State<Arc<App>>,
    Path(raw): Path<String>,
    Query(query): Query<JobsQuery>,
) -> Reply {
    let name = tube_name(&raw)?;
    let state = job_state(query.state.as_deref().unwrap_or("ready"))?;
    let limit = match query.limit.as_deref() {
        None => 50,
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=crate::engine::MAX_PAGE).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "bad limit {raw:?}: 1 to {}",
                    crate::engine::MAX_PAGE
                )))
            }
        },
    };
    let after = query.after.as_deref().map(parse_cursor).transpose()?;
    let page = app.read(|engine, now| engine.jobs_page(&name, state, after, limit, now))?;
    let mut page = page.ok_or_else(|| ApiError::not_found("no such tube"))?;
    app.fill_bodies(&mut page.jobs).await?;
    let jobs: Vec<Value> = page
        .jobs
        .iter()
        .map(|j| Value::Object(job_json(j)))
        .collect();
    ok(json!({
        "tube": name.as_str(),
        "state": state.name(),
        "jobs": jobs,
        "next": page.next.map(cursor_text),
    }))
}

async fn job(State(app): State<Arc<App>>, Path(raw): Path<String>) -> Reply {
    let id = job_id(&raw)?;
    let info = app.read(|engine, now| engine.job_info(id, now))?;
    let info = info.ok_or_else(|| ApiError::not_found("no such job"))?;
    let info = filled(&app, info).await?;
    let mut object = job_json(&info);
    if info.body.len() <= INLINE_BODY {
        let text = std::str::from_utf8(&info.body).ok();
        object.insert("body_text".into(), json!(text));
        let encoded = base64::engine::general_purpose::STANDARD.encode(&info.body);
        object.insert("body_base64".into(), json!(encoded));
    } else {
        object.insert("body_truncated".into(), json!(true));
    }
    ok(Value::Object(object))
}

async fn body(State(app): State<Arc<App>>, Path(raw): Path<String>) -> Reply {
    let id = job_id(&raw)?;
    let info = app.read(|engine, now| engine.job_info(id, now))?;
    let info = info.ok_or_else(|| ApiError::not_found("no such job"))?;
    let info = filled(&app, info).await?;
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        info.body,
    )
        .into_response())
}

/// `info` with its body, read from the store if the engine left it there;
/// 404 if the job was deleted meanwhile.
async fn filled(app: &App, mut info: JobInfo) -> Result<JobInfo, ApiError> {
    app.fill_bodies(std::slice::from_mut(&mut info)).await?;
    match info.stored_len {
        Some(len) if info.body.len() != len => Err(ApiError::not_found("no such job")),
        _ => Ok(info),
    }
}

/// The answer to a change: `value` unless the store failed to keep it.
fn changed(value: Value, unstored: bool) -> Reply {
    if unstored {
        return Err(ApiError::unstored());
    }
    ok(value)
}

async fn delete(State(app): State<Arc<App>>, Path(raw): Path<String>) -> Reply {
    let id = job_id(&raw)?;
    let (result, unstored) = app.change(|engine, now| engine.delete_one(id, now)).await?;
    result?;
    changed(json!({ "deleted": id }), unstored)
}

async fn kick_job(State(app): State<Arc<App>>, Path(raw): Path<String>) -> Reply {
    let id = job_id(&raw)?;
    let (result, unstored) = app.change(|engine, now| engine.kick_one(id, now)).await?;
    result?;
    changed(json!({ "kicked": id }), unstored)
}

/// An `aft:` job runs now although its group has members: the one way
/// past a dependency (`engine/ext.rs`); audited as every change is.
async fn release_hold(State(app): State<Arc<App>>, Path(raw): Path<String>) -> Reply {
    let id = job_id(&raw)?;
    let (result, unstored) = app
        .change(|engine, now| engine.release_hold(id, now))
        .await?;
    result?;
    changed(json!({ "released": id }), unstored)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Kick {
    bound: u32,
}

async fn kick(
    State(app): State<Arc<App>>,
    Path(raw): Path<String>,
    Json(kick): Json<Kick>,
) -> Reply {
    let name = tube_name(&raw)?;
    let (result, unstored) = app
        .change(|engine, now| engine.kick_tube(&name, kick.bound, now))
        .await?;
    changed(json!({ "kicked": result? }), unstored)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Flush {
    state: String,
}

async fn flush(
    State(app): State<Arc<App>>,
    Path(raw): Path<String>,
    Json(flush): Json<Flush>,
) -> Reply {
    let name = tube_name(&raw)?;
    let state = batch_state("flush", &flush.state)?;
    let shared = app.server()?;
    let exists = app.read(|engine, now| engine.tube_figures_of(&name, now).is_some())?;
    if !exists {
        return Err(ApiError::not_found("no such tube"));
    }
    let done = batch::run(shared, None, |engine, n, now| {
        engine.flush(&name, state, n, now)
    })
    .await?;
    changed(json!({ "deleted": done.jobs }), done.unstored)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Move {
    state: String,
    to: String,
    /// At most this many (all of them without).
    limit: Option<u64>,
}

/// Moves jobs; the caller needs `admin` on both tubes.
async fn move_jobs(
    State(app): State<Arc<App>>,
    caller: Option<Extension<Caller>>,
    Path(raw): Path<String>,
    Json(request): Json<Move>,
) -> Reply {
    let from = tube_name(&raw)?;
    let to = tube_name(&request.to)?;
    if !auth::may(
        &app,
        caller.map(|Extension(c)| c),
        Action::Admin,
        to.as_str(),
    ) {
        let message = format!("forbidden: this needs admin on tube {to}");
        return Err(ApiError::new(StatusCode::FORBIDDEN, message));
    }
    let state = batch_state("move", &request.state)?;
    let shared = app.server()?;
    let exists = app.read(|engine, now| engine.tube_figures_of(&from, now).is_some())?;
    if !exists {
        return Err(ApiError::not_found("no such tube"));
    }
    let done = batch::run(shared, request.limit, |engine, n, now| {
        engine.move_jobs(&from, state, &to, n, now)
    })
    .await?;
    changed(json!({ "moved": done.jobs }), done.unstored)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Pause {
    /// Seconds.
    delay: u32,
}

async fn pause(
    State(app): State<Arc<App>>,
    Path(raw): Path<String>,
    Json(pause): Json<Pause>,
) -> Reply {
    let name = tube_name(&raw)?;
    let delay = Duration::from_secs(pause.delay.into());
    let (result, _) = app
        .change(|engine, now| engine.pause_tube(&name, delay, now))
        .await?;
    result?;
    ok(json!({ "paused": name.as_str(), "delay": pause.delay }))
}

async fn resume(State(app): State<Arc<App>>, Path(raw): Path<String>) -> Reply {
    let name = tube_name(&raw)?;
    let (result, _) = app
        .change(|engine, now| engine.resume_tube(&name, now))
        .await?;
    result?;
    ok(json!({ "resumed": name.as_str() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Put {
    /// The body as text…
    body: Option<String>,
    /// …or as base64, for bytes that are not UTF-8.
    body_base64: Option<String>,
    pri: Option<u32>,
    /// Seconds.
    delay: Option<u32>,
    /// Seconds.
    ttr: Option<u32>,
}

async fn put(State(app): State<Arc<App>>, Path(raw): Path<String>, Json(put): Json<Put>) -> Reply {
    let name = tube_name(&raw)?;
    let body = match (put.body, put.body_base64) {
        (Some(text), None) => Bytes::from(text),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map(Bytes::from)
            .map_err(|e| ApiError::bad_request(format!("bad body_base64: {e}")))?,
        _ => {
            return Err(ApiError::bad_request(
                "give the body as exactly one of body, body_base64",
            ))
        }
    };
    let max = app.read(|engine, _| engine.max_job_size())?;
    if body.len() > max as usize {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body has {} bytes; the most is {max} (-z)", body.len()),
        ));
    }
    let pri = put.pri.unwrap_or(DEFAULT_PRI);
    let delay = Duration::from_secs(put.delay.unwrap_or(0).into());
    let ttr = Duration::from_secs(put.ttr.map_or(DEFAULT_TTR, u64::from));
    let (result, unstored) = app
        .change_naming(|engine, now| engine.put_into(&name, pri, delay, ttr, body, now))
        .await?;
    let id = result?;
    if unstored {
        // Never acknowledged: take it back, as a put on the port would be.
        app.server()?.forget(id);
        return Err(ApiError::unstored());
    }
    Ok((StatusCode::CREATED, axum::Json(json!({ "id": id }))).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_and_move_refuse_reserved_jobs_by_name() {
        // (operation, state, status or None for accepted, part of the message)
        let table = [
            ("flush", "buried", None, ""),
            ("move", "ready", None, ""),
            (
                "flush",
                "reserved",
                Some(409),
                "flush cannot take reserved jobs",
            ),
            (
                "move",
                "reserved",
                Some(409),
                "move cannot take reserved jobs",
            ),
            ("flush", "later", Some(400), "bad state"),
        ];
        for (operation, state, status, message) in table {
            match batch_state(operation, state) {
                Ok(_) => assert_eq!(status, None, "{operation} {state}"),
                Err(e) => {
                    assert_eq!(Some(e.status.as_u16()), status, "{operation} {state}");
                    assert!(e.message.contains(message), "{}", e.message);
                }
            }
        }
    }
}
