//! The Redis TTL bridge: every expiry of a watched Redis key becomes an
//! on-time, durable job in a beanstalk tube.
//!
//! Why not Redis's own `expired` notifications: they are fire-and-forget
//! (a subscriber that is away loses them for good), they fire when Redis
//! gets around to deleting the key rather than at the TTL (seconds late
//! with many volatile keys), and they must be switched on. So the bridge
//! only uses events to *learn* TTLs, and keeps each pending expiry where
//! it survives crashes: in the job server, as a delayed timer job.
//!
//! How, module by module, bottom up (every import points down the list):
//! * Leaves, the shared vocabulary: [`config`] (the flags of `flags`,
//!   validated once; the Redis nodes of `sources`, where `twemproxy`
//!   reads a proxy's backends from its YAML), `wall_clock` (the one clock
//!   read), `keys` (a key as `KeyRef`/`KeyName`; the key hash of workers
//!   and lock stripes, repeats in a batch), `work` (a key to sync and the
//!   `Hint` of why), `gaps` (when a deletion could have gone unseen),
//!   `triggers` (asking for an early reconciliation; it keeps the gaps),
//!   `body` (writing and reading the timer and delivery job bodies),
//!   `expiry` (what a reading of Redis says), `backoff` (the pause between
//!   retries of a lost connection), `index` (the small durable index, a
//!   map in memory logged under `--state-dir`: key → (expiry, current
//!   timer id)), [`punctuality`] (each delivery's lateness and distance
//!   to Redis's `expired` event, for `/metrics` and the dashboard);
//!   `sprout bridge`'s own process tunes glibc's allocator
//!   ([`crate::malloc`]).
//! * Adapters: `redis_side` and [`server_side`] (its streams in `server_conn`),
//!   the two connections and their quirks (`redis_caps` finds out at
//!   connect what each node can do; [`remote`], TLS and a token for a
//!   secured server); `failure` (why a step failed, and the retry);
//!   `sentinel` (where a Sentinel master is now, and following it);
//!   `redis_cluster` (a Redis Cluster as one node: its topology, each key
//!   read at its slot's master, and `redis_cluster::Target`, what the
//!   registry reads keys from; `src/cluster/` is sprout's own NATS
//!   cluster, unrelated).
//! * Decisions: `decide`, pure functions from (index entry, Redis's
//!   answer, hint, now) to a plan, table-tested; `report`, the status
//!   lines' text (each source, where it delivers, every Redis setting
//!   changed, old -> new) from what they report.
//! * Workers: `registry` carries the plans out under per-key locks, in
//!   pipelines and in the order that makes them safe (`registry` itself
//!   syncs keys, `settle` settles due timers, `arming` puts, cancels and
//!   verifies them); `sync` (the queue of keys and its workers), `due`
//!   (workers reserving due timers from `bridge-timers.TUBE`), `events`
//!   (keyspace events per node, each queued as a key to sync),
//!   `reconcile` (`SCAN MATCH` at start, periodically and after lost
//!   connections; the only source with `--no-pubsub`; a complete pass
//!   cancels what vanished), `flushes` (polls `INFO` for wipes no event
//!   announces).
//! * Wiring: [`run`], here.
//!
//! Guarantees: never early (a timer fires only once Redis reports the key
//! gone at or after its deadline; otherwise it moves), never a deletion
//! delivered as an expiry (gone before the deadline is cancelled), never lost (timers are durable in a server
//! run with `-b`; on sprout a due timer becomes its delivery in one step,
//! `fire`, journaled once; on a classic beanstalkd the delivery is put
//! before the timer is deleted), one pending timer per key (after a crash
//! briefly two: the superseded one is dropped when due, see `registry`).
//! Duplicates only across a crash of the bridge (or, on a classic
//! beanstalkd, of the server, or a connection lost before the answers to
//! the deliveries' puts were read), and then with the same key and
//! `expire_at_ms`: a key's delivered mark names the timer that delivered
//! it, so that timer coming back, or an older one a lost answer left on
//! the server, is dropped (`decide::claim`).
//!
//! Decisions that differ from a plain reading of the design:
//! * Work is batched, decisions are not: a sync worker takes up to
//!   `sync::BATCH` queued keys, a firing worker up to `due::BATCH` due
//!   timers, and each batch costs a few round trips (one `reserve-batch`,
//!   one pipelined expiry read, one pipeline of fires and deletes; on a
//!   classic beanstalkd puts, then deletes) instead of a few per key. It is as safe as one key at a time because every key of the
//!   batch is locked (stripes taken in increasing order, so batches never
//!   deadlock) *before* Redis is read, and stays locked until its timer and
//!   index are updated: each key's decision is made from what Redis says
//!   under its lock, exactly as alone. Within a batch the order of effects
//!   is the single-key order, step by step for all keys at once: new
//!   timers are put, then recorded, then old ones deleted; deliveries are
//!   put (answers awaited) before any timer is deleted, and the index is
//!   cleared last. A failure part-way retries the batch (every decision is
//!   re-made from Redis) or, for a lost connection, drops its reservations
//!   so the timers come back: duplicates, never losses, as before. A batch
//!   holds at most one timer per key (two timers of one key go in turn),
//!   and a key queued twice is synced once (see `sync`). Sync workers and
//!   lock stripes use the same hash, so sync workers never wait for each
//!   other; a firing worker waits at most one batch's round trips.
//! * A key that disappears before its deadline (DEL, RENAME away, MOVE,
//!   eviction) is cancelled; one that disappears at or after it (within
//!   50 ms of slack for clock skew) is left to its timer, which delivers it.
//!   That needs no interpretation of event names beyond `expired`.
//! * Deletions no event announces are found by looking, never guessed
//!   from the key being gone at its deadline: a complete SCAN pass syncs
//!   every indexed key it did not list (`reconcile`), a wipe (`FLUSHDB`,
//!   `FLUSHALL`, `SWAPDB`, a restart) seen in `INFO` starts such a pass at
//!   once (`flushes`), and `--precheck-ms` looks at each key once more
//!   shortly before its deadline. What stays undecidable (the deadline
//!   passed while the bridge could not look) is delivered marked
//!   `"uncertain": true` (`gaps`).
//! * The index is a map in memory with a write-behind log on disk, not a
//!   Redis hash: the bridge never writes to the application's keyspace
//!   (which may sit behind a read-only proxy), and the index must outlive a
//!   Redis restart. It is allowed to lag (the log is synced every 100 ms,
//!   not per write, and a torn tail is cut at the next start): Redis is
//!   asked before any decision, reconciliation re-registers every key with
//!   a TTL, a timer the index does not name is adopted and re-checked, and
//!   job ids, which only grow, tell which timer is newer.
//!
//! Embedded mode (`sprout --redis-bridge …`) runs the very same [`run`]
//! with a [`server_side::Connector::Local`]: its connections are in-process
//! pipes served by the server's own connection code, so it has the same
//! guarantees without the TCP hop.
//!
//! Works with Redis ≥ 5 (6.2 and 7.0 tested) and Valkey: each node's way
//! of reading expiries is found at connect (`PEXPIRETIME` where it exists,
//! else `PTTL` bracketed by two clock readings, see `redis_side`), and
//! decisions compare expiries within the reading's error (`decide`).

mod arming;
mod backoff;
mod body;
pub mod config;
mod decide;
mod due;
mod events;
mod expiry;
mod failure;
mod flags;
mod flushes;
mod gaps;
mod index;
mod keys;
pub mod punctuality;
mod reconcile;
mod redis_caps;
mod redis_cluster;
mod redis_side;
mod registry;
pub mod remote;
mod report;
mod sentinel;
mod server_conn;
pub mod server_side;
mod settle;
mod sources;
mod sync;
mod triggers;
mod twemproxy;
mod wall_clock;
mod work;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use backoff::Backoff;
use config::Config;
use index::Index;
use keys::KeyName;
use punctuality::Punctuality;
use redis_cluster::{RedisCluster, Target};
use redis_side::Redis;
use registry::Registry;
use server_side::{Connector, Flavour, Session};
use triggers::Triggers;
pub use wall_clock::now_ms;

/// For a new cluster leader, before its embedded bridge starts
/// (`cluster/bridge.rs`): which of `timers` (id and body of each timer the
/// old leader's bridge held reserved when it died) have their delivery
/// among `deliveries` (bodies in the delivery tube) already. Those were
/// fired but not yet deleted: deleting them instead of firing them again
/// is what keeps a failover from doubling a delivery.
pub fn fired_already(timers: &[(u64, bytes::Bytes)], deliveries: &[bytes::Bytes]) -> Vec<u64> {
    let mut by_head: std::collections::HashMap<Vec<u8>, Vec<(u64, Vec<u8>)>> =
        std::collections::HashMap::new();
    for (id, body) in timers {
        if let Some(timer) = body::Timer::decode(body) {
            let (head, key) = timer.delivery_parts();
            by_head.entry(head).or_default().push((*id, key));
        }
    }
    let mut fired = Vec::new();
    if by_head.is_empty() {
        return fired;
    }
    for delivery in deliveries {
        let Some(head) = body::delivery_head(delivery) else {
            continue;
        };
        let Some(candidates) = by_head.get(head) else {
            continue;
        };
        for (id, key) in candidates {
            if body::delivers(delivery, head, key) && !fired.contains(id) {
                fired.push(*id);
            }
        }
    }
    fired
}

/// For a new cluster leader, before [`run`] (`cluster/bridge.rs`): makes
/// the index in `config.state_dir` name exactly the newest (highest id)
/// timer of each key among `timers` (id and body of every timer job the
/// replicated state holds), and nothing else; returns how many keys. This
/// node's index is its own, written (if ever) when it last led, and other
/// leaders' bridges have put and deleted timers since: a stale or empty
/// index would let a superseded timer fire after its successor, a second
/// delivery of one expiry. Delivered marks are not carried over.
pub fn adopt_timers(config: &Config, timers: &[(u64, bytes::Bytes)]) -> io::Result<usize> {
    match std::fs::remove_file(config.state_dir.join(index::LOG)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut newest: std::collections::HashMap<KeyName, index::KeyEntry> =
        std::collections::HashMap::new();
    for (id, body) in timers {
        let Some(timer) = body::Timer::decode(body) else {
            continue;
        };
        let entry = index::KeyEntry {
            expire_at_ms: timer.expire_at_ms,
            timer: *id,
        };
        newest
            .entry(timer.key_ref().to_name())
            .and_modify(|e| {
                if e.timer < *id {
                    *e = entry;
                }
            })
            .or_insert(entry);
    }
    let index = Index::open(&config.state_dir)?;
    for (key, entry) in &newest {
        index.set(key.node, &key.bytes, *entry);
    }
    index.flush()?;
    Ok(newest.len())
}

/// What a running bridge shows its host, read-only (the HTTP port's
/// metrics and dashboard): how many keys its index tracks, how punctual
/// its deliveries are.
#[derive(Clone, Default)]
pub struct Status {
    index: Arc<std::sync::OnceLock<Index>>,
    punctuality: Arc<Punctuality>,
}

impl Status {
    /// Keys in the index; `None` until the bridge has opened it.
    pub fn keys(&self) -> Option<usize> {
        self.index.get().map(Index::len)
    }

    /// The punctuality figures now.
    pub fn punctuality(&self) -> punctuality::Figures {
        self.punctuality.figures(now_ms())
    }
}

/// Runs the bridge until `shutdown` completes (or forever), showing its
/// figures in `status`. Fails only if its index cannot be opened; lost
/// connections are retried.
pub async fn run(
    config: Config,
    connector: Connector,
    shutdown: impl Future<Output = ()>,
    status: &Status,
) -> io::Result<()> {
    let index = Index::open(&config.state_dir)?;
    let _ = status.index.set(index.clone());
    tracing::info!(
        target: crate::STATUS,
        "bridge index in {}: {} keys pending",
        config.state_dir.display(),
        index.len(),
    );
    // Starting waits for the job server and every node: a shutdown
    // meanwhile ends it.
    tokio::pin!(shutdown);
    tokio::select! {
        started = start(&config, &connector, &index, &status.punctuality) => started?,
        () = &mut shutdown => return index.flush(),
    }
    shutdown.await;
    index.flush()
}

/// Connects to the job server and the nodes, and spawns every task.
async fn start(
    config: &Config,
    connector: &Connector,
    index: &Index,
    punctuality: &Arc<Punctuality>,
) -> io::Result<()> {
    let triggers = Triggers::new(config.nodes.len());
    let timer_tube = config.timer_tube.as_str();
    let session = |uses: &str, watches: Option<&str>| {
        Session::new(connector.clone(), uses, watches, triggers.clone())
    };
    let mut probe = session(timer_tube, None);
    let flavour = detect_flavour(&mut probe).await;
    let fires = flavour == Flavour::Sprout && detect_fire(&mut probe).await;
    drop(probe);
    let mut targets = Vec::new();
    for node in &config.nodes {
        targets.push(match node.kind {
            config::Kind::RedisCluster => {
                Target::RedisCluster(connect_redis_cluster(node, config).await)
            }
            _ => Target::One(connect_redis(node, config).await?),
        });
    }
    let registry = Arc::new(Registry::new(
        config,
        index.clone(),
        targets.clone(),
        flavour,
        fires,
        triggers.clone(),
        punctuality.clone(),
    ));
    let queue = sync::Queue::start(registry.clone(), || session(timer_tube, None));
    for _ in 0..due::WORKERS {
        let timers = session(config.tube.as_str(), Some(timer_tube));
        let arms = session(timer_tube, None);
        tokio::spawn(due::work(registry.clone(), timers, arms));
    }
    let sinks = events::Sinks {
        queue: queue.clone(),
        triggers: triggers.clone(),
        punctuality: punctuality.clone(),
    };
    for (i, (node, target)) in config.nodes.iter().zip(targets).enumerate() {
        let i = i as u16;
        let reconcile = reconcile::Node {
            node: i,
            redis: target.clone(),
            patterns: config.patterns.clone(),
            interval: config.scan_interval,
            queue: queue.clone(),
            triggers: triggers.clone(),
            index: index.clone(),
        };
        tokio::spawn(reconcile::run(reconcile, config.pubsub));
        let redis = match target {
            Target::One(redis) => redis,
            Target::RedisCluster(cluster) => {
                tokio::spawn(watch_redis_cluster(
                    i,
                    node.clone(),
                    cluster,
                    config,
                    sinks.clone(),
                ));
                continue;
            }
        };
        if config.pubsub {
            let patterns = config.patterns.clone();
            tokio::spawn(events::run(
                i,
                node.clone(),
                redis.clone(),
                patterns,
                sinks.clone(),
            ));
        }
        if let Some(s) = &node.sentinel {
            let follow =
                sentinel::follow(i, s.clone(), redis.clone(), triggers.clone(), config.pubsub);
            tokio::spawn(follow);
        }
        tokio::spawn(flushes::run(i, redis.clone(), triggers.clone()));
    }
    tokio::spawn(sweep_marks(index.clone()));
    tracing::info!(target: crate::STATUS, "{}", report::delivering(config));
    Ok(())
}

/// Finds the cluster of `node` (retrying until a node answers).
async fn connect_redis_cluster(node: &config::Node, config: &Config) -> RedisCluster {
    let mut backoff = Backoff::redis();
    loop {
        match RedisCluster::discover(node.info.clone(), config.pubsub).await {
            Ok(cluster) => {
                tracing::info!(target: crate::STATUS, "{}", report::redis_cluster(node, config));
                return cluster;
            }
            Err(e) => {
                tracing::warn!(node = %node.url, error = %e, "cannot read the cluster's topology; retrying");
                backoff.wait().await;
            }
        }
    }
}

/// Follows the masters of cluster node `i` forever: every master met gets
/// its keyspace events and wipe watch (a new one, after a failover or an
/// added master, is subscribed within a [`redis_cluster::REFRESH`], which
/// reconciles the cluster); the topology is read again every refresh.
fn watch_redis_cluster(
    i: u16,
    node: config::Node,
    cluster: RedisCluster,
    config: &Config,
    sinks: events::Sinks,
) -> impl Future<Output = ()> + use<> {
    let (pubsub, patterns) = (config.pubsub, config.patterns.clone());
    async move {
        let mut watched = std::collections::HashSet::new();
        loop {
            match cluster.masters().await {
                Ok(masters) => {
                    for (addr, redis) in masters {
                        if !watched.insert(addr.clone()) {
                            continue;
                        }
                        let line = report::master(&node, &addr, &redis.caps());
                        tracing::info!(target: crate::STATUS, "{line}");
                        let mut master = node.clone();
                        master.url = format!("redis://{addr}");
                        if pubsub {
                            let (p, s) = (patterns.clone(), sinks.clone());
                            tokio::spawn(events::run(i, master, redis.clone(), p, s));
                        } else if watched.len() > 1 {
                            sinks.triggers.missed(i, now_ms());
                        }
                        tokio::spawn(flushes::run(i, redis, sinks.triggers.clone()));
                    }
                }
                Err(e) => tracing::warn!(cluster = %node.url, error = %e, "cannot reach a master"),
            }
            tokio::time::sleep(redis_cluster::REFRESH).await;
            if let Err(e) = cluster.refresh().await {
                tracing::warn!(cluster = %node.url, error = %e, "cannot read the cluster's topology");
            }
        }
    }
}

/// What the bridge does without the optional commands in `refused`.
fn refusal_costs(refused: &[&str]) -> String {
    let mut costs = Vec::new();
    if refused.contains(&"CONFIG") {
        costs.push(
            "notify-keyspace-events cannot be switched on by the bridge (set Kg$xe on the node)",
        );
    }
    if refused.contains(&"INFO") {
        costs.push("FLUSHDB, FLUSHALL and restarts are only noticed every --scan-interval");
    }
    if refused.contains(&"TIME") {
        costs.push("PTTL readings are timed by the bridge's clock (deadlines rounded up by the round trip)");
    }
    costs.join("; ")
}

/// Removes old delivered marks from the index, once a minute.
async fn sweep_marks(index: Index) {
    loop {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let swept = index.sweep_delivered(now_ms() - index::MARK_KEEP_MS);
        if swept > 0 {
            tracing::debug!(marks = swept, "swept delivered marks");
        }
    }
}

/// Whether the server fires timers in one step (see `server_side`).
async fn detect_fire(session: &mut Session) -> bool {
    loop {
        match server_side::detect_fire(session.conn().await).await {
            Ok(fires) => {
                match fires {
                    true => tracing::info!("the job server fires timers in one step (fire)"),
                    false => tracing::info!(
                        "the job server has no fire command: each delivery is a put, then \
                         its timer's delete"
                    ),
                }
                return fires;
            }
            Err(e) => {
                session.failed(&e);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn detect_flavour(session: &mut Session) -> Flavour {
    loop {
        match Flavour::detect(session.conn().await).await {
            Ok(Flavour::Sprout) => {
                tracing::info!("the job server takes fractional delays: timers to the millisecond");
                return Flavour::Sprout;
            }
            Ok(Flavour::Classic) => {
                tracing::warn!(
                    "the job server takes whole seconds only (classic beanstalkd): \
                     timer delays are rounded up, so jobs arrive up to 1 s after the expiry"
                );
                return Flavour::Classic;
            }
            Err(e) => {
                session.failed(&e);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Connects to `node` (retrying while it cannot be reached) and says what
/// it is; an error if it refuses what the bridge cannot do without.
async fn connect_redis(node: &config::Node, config: &Config) -> io::Result<Redis> {
    let (pubsub, mut backoff) = (config.pubsub, Backoff::redis());
    loop {
        let mut at = None;
        let connected = match &node.sentinel {
            None => Redis::connect(node, pubsub).await,
            Some(s) => match sentinel::master_addr(s).await {
                Ok((host, port)) => {
                    at = Some(format!("{host}:{port}"));
                    Redis::connect_to(sentinel::at(&node.info, &host, port), pubsub).await
                }
                Err(e) => Err(e),
            },
        };
        match connected {
            Ok(redis) => {
                let caps = redis.caps();
                let needs = caps.missing_needs();
                if !needs.is_empty() {
                    let why = format!(
                        "{} refuses {} (of the commands the bridge uses, it refused {}): \
                         the bridge needs {} on every node it watches. Behind a proxy \
                         (twemproxy, Codis), point the bridge at the backends: --redis \
                         for each, or --twemproxy-config FILE{}",
                        node.url,
                        needs.join(", "),
                        caps.refused.join(", "),
                        needs.join(" and "),
                        if needs == ["PSUBSCRIBE"] {
                            "; or learn TTLs by SCAN alone, --no-pubsub"
                        } else {
                            ""
                        },
                    );
                    return Err(io::Error::other(why));
                }
                // A missing PEXPIRETIME is said below, with what replaces it.
                let refused: Vec<&str> = caps
                    .refused
                    .iter()
                    .copied()
                    .filter(|&c| c != "PEXPIRETIME")
                    .collect();
                if !refused.is_empty() {
                    tracing::warn!(
                        node = %node.url,
                        "the node refuses {}: {}",
                        refused.join(", "),
                        refusal_costs(&refused)
                    );
                }
                let line = report::source(node, at.as_deref(), &caps, config);
                tracing::info!(target: crate::STATUS, "{line}");
                return Ok(redis);
            }
            Err(e) => {
                tracing::warn!(node = %node.url, error = %e, "cannot connect to Redis; retrying");
                backoff.wait().await;
            }
        }
    }
}
