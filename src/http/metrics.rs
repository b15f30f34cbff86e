//! `GET /metrics`: the Prometheus (OpenMetrics text) exposition, encoded by
//! `prometheus-client` from one snapshot of the engine per scrape.
//!
//! Names follow messagebird/beanstalkd_exporter, so its users' dashboards
//! and alerts keep working: every numeric `stats` key with `-` turned into
//! `_` (`current_jobs_ready`, `cmd_put`, `job_timeouts`…) and every
//! numeric `stats-tube` key as `tube_<key>` with a `tube` label, all gauges
//! as that exporter has them (`pid`, which it skips, and text such as
//! `version` are left out; `draining` is 0 or 1). What no beanstalkd
//! exposes is under `sprout_`: per-tube latency histograms, the age of the
//! oldest ready job, the store's size, the journal's writes and syncs, the
//! body cache's figures (`stats`' `body-cache-*` keys), and with `--auth`
//! the connections by principal and the failed `auth`s.

use std::fmt;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use std::sync::atomic::Ordering;

use crate::auth::Gate;
use crate::binlog_stats::{BinlogStats, SYNC_BOUNDS_MICROS};
use crate::bridge::punctuality;
use crate::engine::{Histogram, TubeFigures, BODY_CACHE_KEYS, BOUNDS_MICROS};

use super::app::{App, Bridge};
use super::error::ApiError;
use super::figures;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `stats` keys that are not exported (as beanstalkd_exporter skips them).
const SKIPPED: [&str; 1] = ["pid"];

pub async fn metrics(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    let store_bytes = app.store_bytes().await;
    let mut snapshot = app.read(|engine, now| Snapshot {
        stats: engine.stats_at(now),
        tubes: engine.tube_figures(now),
        store_bytes,
        journal: store_bytes.map(|_| Journal::of(engine.binlog())),
        bridge: None,
        auth: None,
    })?;
    snapshot.auth = app.server()?.auth().map(|gate| AuthFigures::of(gate));
    snapshot.bridge = app.bridge().map(|b| BridgeFigures::of(b, &snapshot.tubes));
    encoded(snapshot)
}

/// The scrape of `collector`'s figures.
pub(super) fn encoded(collector: impl Collector) -> Result<Response, ApiError> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    let mut body = String::with_capacity(16 * 1024);
    prometheus_client::encoding::text::encode(&mut body, &registry)
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "metrics encoding failed"))?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response())
}

/// The figures of one scrape, taken under one lock.
struct Snapshot {
    stats: Bytes,
    tubes: Vec<TubeFigures>,
    store_bytes: Option<u64>,
    /// With `-b`: the journal's writes and syncs.
    journal: Option<Journal>,
    bridge: Option<BridgeFigures>,
    /// With `--auth`.
    auth: Option<AuthFigures>,
}

/// The access gate's figures (`auth/gate.rs`): open connections by
/// principal (a label set the policy bounds), failed `auth`s. The
/// failures are a counter, unlike the counts `stats` has (gauges, as
/// beanstalkd_exporter has them): nothing else names it, so it may be
/// what it is, and it reads `sprout_auth_failures_total` in PromQL.
struct AuthFigures {
    connections: Vec<(String, i64)>,
    failures: u64,
}

impl AuthFigures {
    fn of(gate: &Gate) -> AuthFigures {
        let connections = gate.connections().into_iter();
        AuthFigures {
            connections: connections.map(|(p, n)| (p.to_owned(), n)).collect(),
            failures: gate.failures_total(),
        }
    }

    fn encode(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        encoder
            .encode_descriptor(
                "sprout_auth_failures",
                "Failed auth commands (wrong token, or refused for the address's recent failures)",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<NoLabelSet, _, u64>(&self.failures, None)?;
        let mut metric = encoder.encode_descriptor(
            "sprout_connections",
            "Open beanstalk connections by principal (unauthenticated: none yet; local: the embedded bridge)",
            None,
            MetricType::Gauge,
        )?;
        for (principal, n) in &self.connections {
            metric
                .encode_family(&[("principal", principal.as_str())])?
                .encode_gauge(n)?;
        }
        Ok(())
    }
}

/// The journal's figures (`store/journal.rs`).
struct Journal {
    frames: u64,
    records: u64,
    sync_buckets: Vec<(f64, u64)>,
    sync_seconds: f64,
    syncs: u64,
}

impl Journal {
    fn of(binlog: &BinlogStats) -> Journal {
        let read = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
        let counts: Vec<u64> = binlog.syncs.buckets.iter().map(read).collect();
        let bounds = SYNC_BOUNDS_MICROS.iter().map(|&b| b as f64 / 1e6);
        let bounds = bounds.chain(std::iter::once(f64::MAX));
        Journal {
            frames: read(&binlog.frames_written),
            records: read(&binlog.records_written),
            syncs: counts.iter().sum(),
            sync_buckets: bounds.zip(counts).collect(),
            sync_seconds: read(&binlog.syncs.sum_micros) as f64 / 1e6,
        }
    }
}

/// The bridge's figures: the embedded one's, or `sprout bridge
/// --metrics`'s (`bridge_port.rs`).
#[derive(Debug)]
pub struct BridgeFigures {
    /// Keys its index tracks (`None` until it has opened the index).
    pub keys: Option<usize>,
    /// Timer jobs waiting in its timer tube (delayed, ready or being
    /// fired): the server's figure, `None` in `sprout bridge`.
    pub timers_pending: Option<u64>,
    pub punctuality: punctuality::Figures,
}

impl BridgeFigures {
    pub fn of(bridge: &Bridge, tubes: &[TubeFigures]) -> BridgeFigures {
        let timers = tubes.iter().find(|t| t.name == bridge.timers);
        BridgeFigures {
            keys: bridge.status.keys(),
            timers_pending: Some(timers.map_or(0, |t| t.ready + t.delayed + t.reserved)),
            punctuality: bridge.status.punctuality(),
        }
    }

    /// Its families: the gauges, and the punctuality histograms.
    pub(super) fn encode(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let mut gauge = |name: &str, help: &str, value: f64| -> fmt::Result {
            encoder
                .encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&value)
        };
        if let Some(keys) = self.keys {
            gauge(
                "sprout_bridge_keys",
                "Redis keys the bridge tracks",
                keys as f64,
            )?;
        }
        if let Some(timers) = self.timers_pending {
            gauge(
                "sprout_bridge_timers_pending",
                "Timer jobs of the embedded bridge not yet fired",
                timers as f64,
            )?;
        }
        let p = &self.punctuality;
        for (name, help, counts) in [
            (
                "sprout_bridge_delivery_lateness_seconds",
                "Each delivery's lateness: its fired_at_ms minus the key's expiry",
                &p.lateness,
            ),
            (
                "sprout_bridge_event_to_delivery_seconds",
                "From Redis's expired event reaching the bridge to the delivery being put (0 when the delivery came first)",
                &p.event_to_delivery,
            ),
        ] {
            encoder
                .encode_descriptor(name, help, None, MetricType::Histogram)?
                .encode_histogram::<NoLabelSet>(
                    counts.sum_micros as f64 / 1e6,
                    counts.count,
                    &buckets(&punctuality::BOUNDS_MICROS, &counts.buckets),
                    None,
                )?;
        }
        Ok(())
    }
}

impl Collector for BridgeFigures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        BridgeFigures::encode(self, &mut encoder)
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("tubes", &self.tubes.len())
            .finish()
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        for (key, value) in figures::numeric(&self.stats) {
            if SKIPPED.contains(&key) {
                continue;
            }
            let (name, help) = match BODY_CACHE_KEYS.contains(&key) {
                // sprout's own (with -b): under sprout_, as the rest.
                true => (
                    format!("sprout_{}", key.replace('-', "_")),
                    format!("sprout stats: {key} (the body cache, docs/durability.md)"),
                ),
                false => (key.replace('-', "_"), format!("beanstalkd stats: {key}")),
            };
            let mut metric = encoder.encode_descriptor(&name, &help, None, MetricType::Gauge)?;
            metric.encode_gauge(&value)?;
        }
        self.encode_tube_stats(&mut encoder)?;
        encode_cluster_role(&self.stats, &mut encoder)?;
        self.encode_latency(&mut encoder)?;
        self.encode_journal(&mut encoder)?;
        if let Some(auth) = &self.auth {
            auth.encode(&mut encoder)?;
        }
        let oldest: Vec<(&TubeFigures, f64)> = self
            .tubes
            .iter()
            .filter_map(|t| Some((t, t.oldest_ready_age? as f64 / 1e6)))
            .collect();
        let mut metric = encoder.encode_descriptor(
            "sprout_tube_oldest_ready_age_seconds",
            "Age of the oldest ready job in the tube (since its put)",
            None,
            MetricType::Gauge,
        )?;
        for (tube, age) in oldest {
            metric.encode_family(&label(tube))?.encode_gauge(&age)?;
        }
        if let Some(bytes) = self.store_bytes {
            encoder
                .encode_descriptor(
                    "sprout_store_disk_bytes",
                    "Bytes of the files under -b DIR",
                    None,
                    MetricType::Gauge,
                )?
                .encode_gauge(&(bytes as f64))?;
        }
        if let Some(bridge) = &self.bridge {
            bridge.encode(&mut encoder)?;
        }
        Ok(())
    }
}

impl Snapshot {
    /// `tube_<key>{tube="…"}` for every numeric `stats-tube` key, in the
    /// document's order (every tube's document has the same keys).
    fn encode_tube_stats(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let Some(first) = self.tubes.first() else {
            return Ok(());
        };
        let keys: Vec<&str> = figures::numeric(&first.stats).map(|(k, _)| k).collect();
        for (i, key) in keys.iter().enumerate() {
            let name = format!("tube_{}", key.replace('-', "_"));
            let help = format!("beanstalkd stats-tube: {key}");
            let mut metric = encoder.encode_descriptor(&name, &help, None, MetricType::Gauge)?;
            for tube in &self.tubes {
                if let Some((_, value)) = figures::numeric(&tube.stats).nth(i) {
                    metric.encode_family(&label(tube))?.encode_gauge(&value)?;
                }
            }
        }
        Ok(())
    }

    fn encode_journal(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        for (name, help, value) in [
            (
                "sprout_journal_frames",
                "Journal writes since startup (one per group commit)",
                journal.frames,
            ),
            (
                "sprout_journal_records",
                "Records written to the journal since startup (over frames: the mean group size)",
                journal.records,
            ),
        ] {
            // Gauges, as every count from `stats` is (beanstalkd_exporter's
            // way, and what promtool reads in the text format).
            encoder
                .encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&(value as i64))?;
        }
        encoder
            .encode_descriptor(
                "sprout_journal_sync_seconds",
                "Time each sync of the journal took (fdatasync: before replies under -f 0, every MS under -f MS)",
                None,
                MetricType::Histogram,
            )?
            .encode_histogram::<NoLabelSet>(
                journal.sync_seconds,
                journal.syncs,
                &journal.sync_buckets,
                None,
            )?;
        Ok(())
    }

    fn encode_latency(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        type Pick = fn(&TubeFigures) -> &Histogram;
        let families: [(&str, &str, Pick); 3] = [
            (
                "sprout_tube_reserve_wait_seconds",
                "Time jobs were ready before a reserve took them (from put, delay end, release, kick or TTR timeout)",
                |t| &t.latency.reserve_wait,
            ),
            (
                "sprout_tube_age_at_reserve_seconds",
                "Age of jobs (since their put) at each reserve",
                |t| &t.latency.age_at_reserve,
            ),
            (
                "sprout_tube_reserve_to_delete_seconds",
                "Time from a reserve (or the last touch) to the holder's delete",
                |t| &t.latency.reserve_to_delete,
            ),
        ];
        for (name, help, pick) in families {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
            for tube in &self.tubes {
                let h = pick(tube);
                metric
                    .encode_family(&label(tube))?
                    .encode_histogram::<NoLabelSet>(
                        h.sum_micros as f64 / 1e6,
                        h.count,
                        &buckets(&BOUNDS_MICROS, &h.buckets),
                        None,
                    )?;
            }
        }
        Ok(())
    }
}

/// On a cluster node, `sprout_cluster_role{role="leader"}` and
/// `{role="standby"}`: 1 for the part it has (`stats`'s `cluster-role`),
/// 0 for the other, so `sum` over the nodes counts leaders.
fn encode_cluster_role(stats: &[u8], encoder: &mut DescriptorEncoder) -> fmt::Result {
    let Some((_, role)) = figures::pairs(stats).find(|(key, _)| *key == "cluster-role") else {
        return Ok(());
    };
    let mut metric = encoder.encode_descriptor(
        "sprout_cluster_role",
        "This node's part in its cluster: 1 for the one it has",
        None,
        MetricType::Gauge,
    )?;
    for part in ["leader", "standby"] {
        metric
            .encode_family(&[("role", part)])?
            .encode_gauge(&i64::from(role == part))?;
    }
    Ok(())
}

fn label(tube: &TubeFigures) -> [(&'static str, &str); 1] {
    [("tube", tube.name.as_str())]
}

/// (upper bound in seconds, count in that bucket) of per-bucket `counts`
/// over `bounds_micros`, +Inf last.
fn buckets(bounds_micros: &[u64], counts: &[u64]) -> Vec<(f64, u64)> {
    let bounds = bounds_micros.iter().map(|&b| b as f64 / 1e6);
    let bounds = bounds.chain(std::iter::once(f64::MAX));
    bounds.zip(counts.iter().copied()).collect()
}
