//! The leadership lease: one key in a JetStream KV bucket that at most one
//! node holds at a time.
//!
//! Why a KV key and not a consensus of our own: JetStream already
//! replicates the bucket (R = min(3, nodes)) and gives the two primitives a
//! lease needs: *create* succeeds only if the key is absent, and *update*
//! only over the revision the writer last saw. Each renewal is a new
//! revision, so a standby that reads one revision unchanged for a whole TTL
//! on its own clock ([`Observed`](crate::cluster::lease::Observed))
//! overwrites it, and a racing renewal fails on the revision or wins it,
//! never both. The bucket's `max_age` is
//! the TTL too, so a lease nobody watches still ages out on the servers.
//!
//! Clocks only ever make the holder give up *earlier* than anyone may take
//! over: it counts from when it *sent* its last successful write (any
//! reader saw that write later), and stops at TTL − margin
//! ([`Timing`](crate::cluster::lease::Timing)), all on monotonic clocks, so
//! wall-clock steps do nothing; only clock *rates* differing by a third
//! (TTL against TTL − margin) could break it. The lease alone does not
//! fence a deposed writer that is paused past the TTL mid-write; the
//! stream's `Nats-Expected-Last-Sequence` chain does.
//!
//! Measured (3 × nats-server 2.15.1 on loopback, TTL 1.5 s, poll 150 ms):
//! a standby takes over 1.62 s after the last renewal was sent; waiting for
//! `max_age` alone took 1.85 s (the servers free the key ~350 ms late).

use std::time::Duration;

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::stream::Trouble;
use super::subjects::Subjects;

/// The key inside the bucket.
const KEY: &str = "leader";

/// The lease's clock: how long it lives, how often it is renewed, when a
/// holder must consider itself deposed, how often a standby looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The bucket's `max_age`: a key nobody rewrites is gone after it.
    pub ttl: Duration,
    /// A holder renews this long after its last successful renewal was sent.
    pub renew_every: Duration,
    /// A holder considers itself deposed this long before the TTL runs out
    /// (time to stop serving before anyone else may start).
    pub margin: Duration,
    /// A standby tries to take a held lease this often.
    pub poll_every: Duration,
}

/// Where a holder stands, `now` against its last successful renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Held, no renewal due yet.
    Fresh,
    /// Held, renew now.
    RenewDue,
    /// Not safely held any more: stop serving at once.
    Deposed,
}

impl Timing {
    /// The default TTL: short enough for a takeover within the 2 s
    /// target (TTL + a poll), long enough for a few renewals to fail first.
    pub const DEFAULT_TTL: Duration = Duration::from_millis(1500);
    /// JetStream refuses shorter `max_age`s (100 ms), and below this the
    /// margin is shorter than a round trip on a loaded machine.
    pub const MIN_TTL: Duration = Duration::from_millis(200);

    /// Renewals every TTL/4 and a margin of TTL/4: a holder survives two
    /// renewals in a row failing or being slow, and is deposed on its own
    /// clock at 3/4 TTL, a quarter TTL before the key can age out.
    pub fn new(ttl: Duration) -> Result<Timing, String> {
        if ttl < Self::MIN_TTL {
            return Err(format!(
                "lease TTL {ttl:?} is shorter than the minimum {:?}",
                Self::MIN_TTL
            ));
        }
        Ok(Timing {
            ttl,
            renew_every: ttl / 4,
            margin: ttl / 4,
            poll_every: ttl / 10,
        })
    }

    /// A lease whose last successful write was sent at `sent` is safely held
    /// until this instant.
    pub fn valid_until(&self, sent: Instant) -> Instant {
        sent + (self.ttl - self.margin)
    }

    /// When a lease last written at `sent` is next renewed.
    pub fn next_renewal(&self, sent: Instant) -> Instant {
        sent + self.renew_every
    }

    /// The pure decision: what a holder whose last successful write was
    /// sent at `sent` must do at `now`.
    pub fn standing(&self, sent: Instant, now: Instant) -> Standing {
        if now >= self.valid_until(sent) {
            Standing::Deposed
        } else if now >= self.next_renewal(sent) {
            Standing::RenewDue
        } else {
            Standing::Fresh
        }
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing::new(Self::DEFAULT_TTL).expect("the default TTL is valid")
    }
}

/// How many copies of the bucket: every node up to three (a majority of
/// three survives one loss; more only slows each renewal).
pub fn replicas(cluster_nodes: usize) -> usize {
    cluster_nodes.clamp(1, 3)
}

/// Whether this node's lease TTL `ours` is the bucket's `theirs`.
fn agree(bucket: &str, theirs: Duration, ours: Duration) -> Result<(), String> {
    if theirs == ours {
        return Ok(());
    }
    Err(format!(
        "the lease bucket {bucket} has a TTL of {} ms, this node's --cluster-lease-ms is {}: \
         every node of a cluster must use the same (to change it, stop every node and \
         delete the bucket, e.g. `nats kv del {bucket}`)",
        theirs.as_millis(),
        ours.as_millis()
    ))
}

/// The bucket holding cluster `cluster`'s lease (a name `subjects.rs`
/// accepts).
pub fn bucket_name(cluster: &str) -> Result<String, String> {
    Subjects::new(cluster).map(|s| format!("sprout-{}-lease", s.name()))
}

/// Who holds the lease (the key's value, JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's `--node-id`.
    pub node: String,
    /// Where it serves the beanstalk protocol (what a standby relays to).
    pub addr: String,
    /// The key's revision (the bucket stream's sequence) when read.
    #[serde(skip)]
    pub revision: u64,
}

/// The lease is lost: stop serving at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deposed(pub String);

impl std::fmt::Display for Deposed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "deposed: {}", self.0)
    }
}

impl std::error::Error for Deposed {}

/// A cluster's lease bucket.
#[derive(Clone, Debug)]
pub struct Lease {
    store: kv::Store,
    timing: Timing,
}

impl Lease {
    /// Opens the lease bucket of `cluster`, creating it if absent. The
    /// TTL is the bucket's (`max_age`), and every node must judge the
    /// lease by the same one (a standby with a shorter TTL than the
    /// holder's would take a lease its holder still renews): a bucket
    /// with another TTL is refused, naming both.
    pub async fn open(
        js: &jetstream::Context,
        cluster: &str,
        timing: Timing,
        replicas: usize,
    ) -> Result<Lease, Trouble> {
        let bucket = bucket_name(cluster).map_err(Trouble::Refused)?;
        let stream = format!("KV_{bucket}");
        let ttl = match js.get_stream(&stream).await {
            Ok(mut found) => {
                let info = found.info().await.map_err(|e| {
                    Trouble::Passing(format!("cannot read the lease bucket {bucket}: {e}"))
                })?;
                Some(info.config.max_age)
            }
            Err(_) => None,
        };
        let store = match ttl {
            Some(ttl) => {
                agree(&bucket, ttl, timing.ttl).map_err(Trouble::Refused)?;
                js.get_key_value(&bucket).await.map_err(|e| {
                    Trouble::Passing(format!("opening the lease bucket {bucket}: {e}"))
                })?
            }
            // Absent (or unreadable: creating fails then, or finds the
            // bucket made meanwhile with other settings; either way the
            // next try reads it).
            None => {
                js.create_key_value(kv::Config {
                    bucket: bucket.clone(),
                    description: format!("sprout cluster {cluster}: who leads"),
                    history: 1,
                    max_age: timing.ttl,
                    num_replicas: replicas,
                    ..Default::default()
                })
                .await
                .map_err(|e| Trouble::Passing(format!("creating the lease bucket {bucket}: {e}")))?
            }
        };
        Ok(Lease { store, timing })
    }

    /// The lease's clock.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The bucket, which holds the nodes' claims too (`claim.rs`).
    pub(super) fn store(&self) -> &kv::Store {
        &self.store
    }

    /// Takes the lease if nobody holds it: `None` when someone does. (Not
    /// the crate's `create`: it reads through any replica, and a lagging
    /// one turns a lost race into an error.)
    pub async fn try_acquire(&self, node: &str, addr: &str) -> Result<Option<Held>, String> {
        let value = encode(node, addr);
        // Revision 0: only if the key has no message at all.
        if let Some(held) = self.take(&value, 0).await? {
            return Ok(Some(held));
        }
        match self.latest().await? {
            // Released (a delete marker): take it over that revision.
            Some((revision, None)) => self.take(&value, revision).await,
            _ => Ok(None),
        }
    }

    /// Waits until this node holds the lease: what a standby runs. Every
    /// `poll_every` it reads the key, and takes it when it is absent,
    /// released, or unchanged for a whole TTL on this node's clock
    /// ([`Observed`]); polling because an aged-out key announces nothing a
    /// watch would see. NATS errors and silences (TTL/2) are retried the
    /// same way.
    pub async fn acquire(&self, node: &str, addr: &str) -> Held {
        let value = encode(node, addr);
        let mut observed = Observed::default();
        loop {
            let attempt = async {
                match self.latest().await? {
                    None => self.take(&value, 0).await,
                    Some((revision, None)) => self.take(&value, revision).await,
                    Some((revision, Some(_))) => {
                        if observed.stale(revision, Instant::now(), &self.timing) {
                            self.take(&value, revision).await
                        } else {
                            Ok(None)
                        }
                    }
                }
            };
            // A request NATS does not answer (an election) would wait out
            // the client's 5 s timeout; try again sooner.
            let attempt = tokio::time::timeout(self.timing.ttl / 2, attempt);
            match attempt.await.unwrap_or_else(|_| Err("no answer".into())) {
                Ok(Some(held)) => return held,
                Ok(None) => {}
                Err(e) => tracing::warn!("lease: {e}"),
            }
            tokio::time::sleep(self.timing.poll_every).await;
        }
    }

    /// Writes this node's value over `revision` (0: over nothing); `None`
    /// if the key moved on meanwhile.
    async fn take(&self, value: &Bytes, revision: u64) -> Result<Option<Held>, String> {
        let sent = Instant::now();
        match self.store.update(KEY, value.clone(), revision).await {
            Ok(revision) => Ok(Some(Held {
                store: self.store.clone(),
                timing: self.timing,
                value: value.clone(),
                revision,
                sent,
                deposed: None,
            })),
            Err(e) if lost_race(&e) => Ok(None),
            Err(e) => Err(format!("taking the lease: {e}")),
        }
    }

    /// Who holds the lease now, if anyone.
    pub async fn current(&self) -> Result<Option<Holder>, String> {
        Ok(self.latest().await?.and_then(|(_, holder)| holder))
    }

    /// The key's last message, read from the bucket's stream leader (not a
    /// replica, which may lag): its revision, and the holder unless it is a
    /// release's delete marker.
    async fn latest(&self) -> Result<Option<(u64, Option<Holder>)>, String> {
        let subject = format!("{}{KEY}", self.store.prefix);
        let message = match self
            .store
            .stream
            .get_last_raw_message_by_subject(&subject)
            .await
        {
            Ok(message) => message,
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
            Err(e) => return Err(format!("reading the lease: {e}")),
        };
        let marker = message
            .headers
            .get("KV-Operation")
            .is_some_and(|op| op.as_str() == "DEL" || op.as_str() == "PURGE");
        if marker {
            return Ok(Some((message.sequence, None)));
        }
        let mut holder: Holder = serde_json::from_slice(&message.payload)
            .map_err(|e| format!("the lease holds no holder: {e}"))?;
        holder.revision = message.sequence;
        Ok(Some((message.sequence, Some(holder))))
    }
}

/// A standby's view of another node's lease: the revision it last read
/// and since when (its own monotonic clock).
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed {
    seen: Option<(u64, Instant)>,
}

impl Observed {
    /// Records that the key held `revision` when a read returned at `now`;
    /// true once that revision has stood for a whole TTL. Then the holder
    /// has deposed itself: it stops at TTL − margin after *sending* that
    /// write, which came before this read returned, so overwriting the
    /// revision cannot make two leaders (and a renewal racing us wins or
    /// loses on the revision, never both).
    pub fn stale(&mut self, revision: u64, now: Instant, timing: &Timing) -> bool {
        match self.seen {
            Some((seen, since)) if seen == revision => now >= since + timing.ttl,
            _ => {
                self.seen = Some((revision, now));
                false
            }
        }
    }
}

/// The lease, held by this node.
#[derive(Debug)]
pub struct Held {
    store: kv::Store,
    timing: Timing,
    value: Bytes,
    revision: u64,
    /// When the last successful write was sent.
    sent: Instant,
    /// Set once a write was refused: no later renewal is tried.
    deposed: Option<Deposed>,
}

impl Held {
    /// The lease's clock.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The key's revision as this node last wrote it.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Until when the lease is safely held (then [`Held::renew`] fails).
    pub fn valid_until(&self) -> Instant {
        self.timing.valid_until(self.sent)
    }

    /// Where the holder stands now.
    pub fn standing(&self) -> Standing {
        match self.deposed {
            Some(_) => Standing::Deposed,
            None => self.timing.standing(self.sent, Instant::now()),
        }
    }

    /// Rewrites the key with the revision last written, so it fails if
    /// anyone else wrote or the key aged out. Transient NATS errors are
    /// retried until [`Held::valid_until`]; `Err` means stop serving at once
    /// (and it stays so: a deposed holder must acquire anew).
    pub async fn renew(&mut self) -> Result<(), Deposed> {
        if let Some(deposed) = &self.deposed {
            return Err(deposed.clone());
        }
        let deadline = self.valid_until();
        loop {
            let sent = Instant::now();
            if sent >= deadline {
                return Err(Deposed("no renewal succeeded within the lease".into()));
            }
            let update = self.store.update(KEY, self.value.clone(), self.revision);
            match tokio::time::timeout_at(deadline, update).await {
                Ok(Ok(revision)) => {
                    self.revision = revision;
                    self.sent = sent;
                    return Ok(());
                }
                Ok(Err(e)) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    let deposed = Deposed("the lease was taken over or aged out".into());
                    self.deposed = Some(deposed.clone());
                    return Err(deposed);
                }
                Ok(Err(e)) => {
                    tracing::warn!("lease renewal failed, retrying: {e}");
                    let left = deadline.saturating_duration_since(Instant::now());
                    let pause = self.timing.poll_every.min(left);
                    tokio::time::sleep(pause).await;
                }
                Err(_elapsed) => {
                    return Err(Deposed("no renewal succeeded within the lease".into()))
                }
            }
        }
    }

    /// Renews on schedule until deposed: run it beside the serving, and
    /// stop serving when it returns.
    pub async fn keep(&mut self) -> Deposed {
        loop {
            tokio::time::sleep_until(self.timing.next_renewal(self.sent)).await;
            if let Err(deposed) = self.renew().await {
                return deposed;
            }
        }
    }

    /// Gives the lease up (a graceful stop), so a standby need not wait out
    /// the TTL. Does nothing to a lease someone else holds by now.
    pub async fn release(self) -> Result<(), String> {
        self.store
            .delete_expect_revision(KEY, Some(self.revision))
            .await
            .map_err(|e| format!("releasing the lease: {e}"))
    }
}

/// Whether a refused write lost a race to another writer: a stale
/// revision, or (a routine takeover race in a NATS cluster) the "wrong
/// last sequence" without a number, code 10164, that async-nats does not
/// name as such.
fn lost_race(e: &kv::UpdateError) -> bool {
    if e.kind() == kv::UpdateErrorKind::WrongLastRevision {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(js) = cause.downcast_ref::<jetstream::Error>() {
            return js.error_code() == jetstream::ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT;
        }
        source = cause.source();
    }
    false
}

fn encode(node: &str, addr: &str) -> Bytes {
    let holder = Holder {
        node: node.to_string(),
        addr: addr.to_string(),
        revision: 0,
    };
    Bytes::from(serde_json::to_vec(&holder).expect("two strings encode as JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn default_timing() {
        let t = Timing::default();
        assert_eq!(t.ttl, ms(1500));
        assert_eq!(t.renew_every, ms(375));
        assert_eq!(t.margin, ms(375));
        assert_eq!(t.poll_every, ms(150));
    }

    #[test]
    fn standing_over_time() {
        let t = Timing::default();
        let sent = Instant::now();
        // (ms since the last successful write was sent, standing)
        let table = [
            (0, Standing::Fresh),
            (374, Standing::Fresh),
            (375, Standing::RenewDue),
            (800, Standing::RenewDue),
            (1124, Standing::RenewDue),
            (1125, Standing::Deposed),
            (1500, Standing::Deposed),
            (60_000, Standing::Deposed),
        ];
        for (after, want) in table {
            assert_eq!(t.standing(sent, sent + ms(after)), want, "{after} ms");
        }
    }

    #[test]
    fn deposed_before_the_key_can_age_out() {
        for ttl in [200, 1000, 1500, 3000, 10_000] {
            let t = Timing::new(ms(ttl)).unwrap();
            let sent = Instant::now();
            assert!(t.valid_until(sent) < sent + t.ttl, "{ttl}");
            assert!(t.next_renewal(sent) < t.valid_until(sent), "{ttl}");
            // Room for two renewals to fail before the holder is deposed.
            assert!(t.next_renewal(sent) + 2 * t.renew_every <= t.valid_until(sent));
        }
    }

    #[test]
    fn a_revision_unchanged_for_a_ttl_is_stale() {
        let t = Timing::default();
        let t0 = Instant::now();
        let mut seen = Observed::default();
        // (revision read, ms after t0, stale)
        let table = [
            (5, 0, false),
            (5, 1000, false),
            (5, 1499, false),
            (5, 1500, true),
            (6, 1600, false), // renewed: counts again from here
            (6, 3099, false),
            (7, 3100, false),
            (7, 4600, true),
            (7, 9000, true),
        ];
        for (revision, after, want) in table {
            assert_eq!(
                seen.stale(revision, t0 + ms(after), &t),
                want,
                "revision {revision} at {after} ms"
            );
        }
    }

    #[test]
    fn a_standby_takes_over_only_after_the_holder_gave_up() {
        // The holder sent its write at `sent`; the standby's read saw it
        // at `sent + delay` at the earliest.
        let t = Timing::default();
        let sent = Instant::now();
        for delay in [0, 1, 50, 400] {
            let mut seen = Observed::default();
            let read = sent + ms(delay);
            assert!(!seen.stale(1, read, &t));
            let takeover = read + t.ttl;
            assert!(seen.stale(1, takeover, &t));
            assert_eq!(t.standing(sent, takeover), Standing::Deposed);
            assert!(t.valid_until(sent) + t.margin <= takeover, "{delay}");
        }
    }

    #[test]
    fn ttl_too_short_is_refused() {
        assert!(Timing::new(ms(199)).is_err());
        assert!(Timing::new(ms(0)).is_err());
        assert!(Timing::new(ms(200)).is_ok());
    }

    #[test]
    fn replicas_by_cluster_size() {
        let table = [(0, 1), (1, 1), (2, 2), (3, 3), (5, 3), (9, 3)];
        for (nodes, want) in table {
            assert_eq!(replicas(nodes), want, "{nodes} nodes");
        }
    }

    #[test]
    fn nodes_must_agree_on_the_ttl() {
        let ms = Duration::from_millis;
        assert_eq!(agree("b", ms(1500), ms(1500)), Ok(()));
        let err = agree("sprout-c-lease", ms(1500), ms(3000)).unwrap_err();
        for part in ["1500 ms", "is 3000", "sprout-c-lease"] {
            assert!(err.contains(part), "{err}");
        }
    }

    #[test]
    fn bucket_names() {
        assert_eq!(bucket_name("prod").unwrap(), "sprout-prod-lease");
        assert_eq!(bucket_name("a_B-9").unwrap(), "sprout-a_B-9-lease");
        for bad in ["", "a.b", "a b", "a*", "a>", "ü"] {
            assert!(bucket_name(bad).is_err(), "{bad:?}");
        }
    }
}
