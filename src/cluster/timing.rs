//! The lease's clock (`lease.rs`): when a holder renews and when it must
//! consider itself deposed, and when a standby may take a lease over.
//! Pure decisions on monotonic instants, so wall-clock steps do nothing.
//!
//! Why these defaults: a takeover comes between TTL − `renew_every` and
//! TTL after a kill (the standby counts a whole TTL from the last renewal
//! it saw), so the TTL bounds failover; and a holder stalled for S (a
//! stopped process, a starved CPU) is deposed only once S +
//! `renew_every` + a round trip passes TTL − margin, so the TTL also bounds
//! the stall a leader survives. Measured on a loaded 2-core machine
//! (`benches/failover.sh`): TTL 800 ms gives service back p99 under a
//! second after a kill -9, and a leader stopped for 300 ms keeps its lease
//! with 300 ms to spare for the renewal's round trip.

use std::time::Duration;

use tokio::time::Instant;

/// The lease's clock: how long it lives, how often it is renewed, when a
/// holder must consider itself deposed, how soon a failed request is
/// tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The bucket's `max_age`: a key nobody rewrites is gone after it.
    pub ttl: Duration,
    /// A holder renews this long after its last successful renewal was sent.
    pub renew_every: Duration,
    /// A holder considers itself deposed this long before the TTL runs out
    /// (time to stop serving before anyone else may start).
    pub margin: Duration,
    /// A request NATS refused (an election) is tried again this soon.
    pub poll_every: Duration,
}

/// A `--cluster-lease-ms` below [`Timing::MIN_TTL`].
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("lease TTL {ttl:?} is shorter than the minimum {:?}", Timing::MIN_TTL)]
pub struct TtlTooShort {
    pub ttl: Duration,
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
    /// The default TTL (see the module docs).
    pub const DEFAULT_TTL: Duration = Duration::from_millis(800);
    /// JetStream refuses shorter `max_age`s (100 ms), and below this the
    /// margin is shorter than a round trip on a loaded machine.
    pub const MIN_TTL: Duration = Duration::from_millis(200);

    /// Renewals every TTL/8 and a margin of TTL/8: a holder survives a
    /// stall of up to 3/4 TTL less a round trip (or renewals failing that
    /// long), and is deposed on its own clock at 7/8 TTL, an eighth of the
    /// TTL before anyone may take over (clock rates would have to differ by
    /// 12%, against a few ppm; and fencing holds whatever the clocks say).
    pub fn new(ttl: Duration) -> Result<Timing, TtlTooShort> {
        if ttl < Self::MIN_TTL {
            return Err(TtlTooShort { ttl });
        }
        Ok(Timing {
            ttl,
            renew_every: ttl / 8,
            margin: ttl / 8,
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

/// A standby's view of another node's lease: the revision it last saw
/// (through its watch or a read) and since when, on its own monotonic
/// clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed {
    seen: Option<(u64, Instant)>,
}

impl Observed {
    /// Records that the key held `revision` as seen at `now`; true once
    /// that revision has stood for a whole TTL. Then the holder has
    /// deposed itself: it stops at TTL − margin after *sending* that
    /// write, which came before this node saw it, so overwriting the
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

    /// The revision seen last, and when this node may take it over.
    pub fn due(&self, timing: &Timing) -> Option<(u64, Instant)> {
        self.seen
            .map(|(revision, since)| (revision, since + timing.ttl))
    }

    /// Forgets what was seen: the key was released or is gone.
    pub fn clear(&mut self) {
        self.seen = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_ttl_too_short_is_named() {
        let e = Timing::new(ms(150)).unwrap_err().to_string();
        assert_eq!(e, "lease TTL 150ms is shorter than the minimum 200ms");
    }

    #[test]
    fn default_timing() {
        let t = Timing::default();
        assert_eq!(t.ttl, ms(800));
        assert_eq!(t.renew_every, ms(100));
        assert_eq!(t.margin, ms(100));
        assert_eq!(t.poll_every, ms(80));
    }

    #[test]
    fn standing_over_time() {
        let t = Timing::default();
        let sent = Instant::now();
        // (ms since the last successful write was sent, standing)
        let table = [
            (0, Standing::Fresh),
            (99, Standing::Fresh),
            (100, Standing::RenewDue),
            (450, Standing::RenewDue),
            (699, Standing::RenewDue),
            (700, Standing::Deposed),
            (800, Standing::Deposed),
            (60_000, Standing::Deposed),
        ];
        for (after, want) in table {
            assert_eq!(t.standing(sent, sent + ms(after)), want, "{after} ms");
        }
    }

    #[test]
    fn deposed_before_the_key_can_age_out() {
        for ttl in [200, 800, 1000, 1500, 3000, 10_000] {
            let t = Timing::new(ms(ttl)).unwrap();
            let sent = Instant::now();
            assert!(t.valid_until(sent) < sent + t.ttl, "{ttl}");
            assert!(t.next_renewal(sent) < t.valid_until(sent), "{ttl}");
            // Room for a stall of 3/4 TTL (a round trip included).
            assert!(t.next_renewal(sent) + t.ttl * 3 / 4 <= t.valid_until(sent));
        }
    }

    #[test]
    fn the_default_survives_a_300_ms_stall() {
        // Stopped just before a renewal was due, for 300 ms: on waking it
        // renews with this much left before it would depose itself.
        let t = Timing::default();
        let sent = Instant::now();
        let woken = t.next_renewal(sent) + ms(300);
        assert_eq!(t.standing(sent, woken), Standing::RenewDue);
        assert!(t.valid_until(sent) - woken >= ms(300));
    }

    #[test]
    fn a_revision_unchanged_for_a_ttl_is_stale() {
        let t = Timing::default();
        let t0 = Instant::now();
        let mut seen = Observed::default();
        // (revision seen, ms after t0, stale)
        let table = [
            (5, 0, false),
            (5, 500, false),
            (5, 799, false),
            (5, 800, true),
            (6, 900, false), // renewed: counts again from here
            (6, 1699, false),
            (7, 1700, false),
            (7, 2500, true),
            (7, 9000, true),
        ];
        for (revision, after, want) in table {
            assert_eq!(
                seen.stale(revision, t0 + ms(after), &t),
                want,
                "revision {revision} at {after} ms"
            );
        }
        assert_eq!(seen.due(&t), Some((7, t0 + ms(2500))));
        seen.clear();
        assert_eq!(seen.due(&t), None);
    }

    #[test]
    fn a_standby_takes_over_only_after_the_holder_gave_up() {
        // The holder sent its write at `sent`; the standby saw it at
        // `sent + delay` at the earliest.
        let t = Timing::default();
        let sent = Instant::now();
        for delay in [0, 1, 50, 400] {
            let mut seen = Observed::default();
            let read = sent + ms(delay);
            assert!(!seen.stale(1, read, &t));
            let (_, takeover) = seen.due(&t).unwrap();
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
}
