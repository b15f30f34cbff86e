//! Failed `auth` attempts, limited per client address: after [`LIMIT`]
//! failures within [`WINDOW`] from one address, its `auth` is answered
//! UNAUTHORIZED without looking at the token until the oldest of them is
//! older than the window. Guessing thus runs at 10 a minute per address
//! however many connections it opens (each closes after 3 failures
//! anyway). A good token from that address is refused too meanwhile:
//! the price of not telling a guesser when it guessed right.
//!
//! An address is an IPv4 address, or an IPv6 /64 (one host usually has
//! a whole /64 to pick from); unix-socket clients share one entry, as
//! their peers have no address. The table is bounded: past
//! [`MAX_ADDRESSES`] it forgets the addresses with no failure within the
//! window, and if still full does not track new ones (they are checked
//! normally: memory stays bounded, and the per-connection limit of 3
//! still holds).
//!
//! Time is passed in, so the rules are tested without waiting.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Failures an address may have within [`WINDOW`].
pub const LIMIT: usize = 10;
/// The window failures are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at most (each holds up to [`LIMIT`] instants).
pub const MAX_ADDRESSES: usize = 16_384;

/// Recent failures per address.
#[derive(Debug, Default)]
pub struct Failures {
    recent: HashMap<String, VecDeque<Instant>>,
}

impl Failures {
    /// May a token from `addr` be checked now?
    pub fn allows(&self, addr: &str, now: Instant) -> bool {
        self.recent
            .get(&key(addr))
            .is_none_or(|times| within(times, now) < LIMIT)
    }

    /// A failure from `addr`.
    pub fn failed(&mut self, addr: &str, now: Instant) {
        let key = key(addr);
        if !self.recent.contains_key(&key) && self.recent.len() >= MAX_ADDRESSES {
            self.recent.retain(|_, times| within(times, now) > 0);
            if self.recent.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let times = self.recent.entry(key).or_default();
        if times.len() == LIMIT {
            times.pop_front();
        }
        times.push_back(now);
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.recent.len()
    }
}

/// How many of `times` are within the window before `now`.
fn within(times: &VecDeque<Instant>, now: Instant) -> usize {
    times
        .iter()
        .filter(|&&t| now.saturating_duration_since(t) < WINDOW)
        .count()
}

/// What failures from `addr` (`Peer.addr`) count against.
fn key(addr: &str) -> String {
    match addr.parse::<SocketAddr>().map(|a| a.ip()) {
        Ok(IpAddr::V4(ip)) => ip.to_string(),
        Ok(IpAddr::V6(ip)) => match ip.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = ip.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
        Err(_) => addr.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        for (addr, want) in [
            ("203.0.113.7:50122", "203.0.113.7"),
            ("[2001:db8:1:2:aaaa::1]:4000", "2001:db8:1:2::/64"),
            ("[2001:db8:1:2:bbbb::9]:4001", "2001:db8:1:2::/64"),
            ("[::ffff:10.0.0.1]:5", "10.0.0.1"),
            ("unix", "unix"),
        ] {
            assert_eq!(key(addr), want, "{addr}");
        }
    }

    #[test]
    fn ten_failures_in_a_minute_then_wait() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut f = Failures::default();
        let a = "203.0.113.7:1000";
        for i in 0..LIMIT as u64 {
            assert!(f.allows(a, at(i * 5)), "failure {i}");
            f.failed(a, at(i * 5));
        }
        // 10 within 45 s.
        assert!(!f.allows(a, at(45)));
        // Another port of the same host: the same address.
        assert!(!f.allows("203.0.113.7:2000", at(45)));
        // Another address is not affected.
        assert!(f.allows("203.0.113.8:1000", at(45)));
        // Until the first failure (at 0 s) is a minute old.
        assert!(!f.allows(a, at(59)));
        assert!(f.allows(a, at(60)));
        // One more failure: refused again until the second is a minute old.
        f.failed(a, at(60));
        assert!(!f.allows(a, at(64)));
        assert!(f.allows(a, at(65)));
        // Failures spread out never add up.
        let b = "203.0.113.9:1";
        for i in 0..100 {
            assert!(f.allows(b, at(i * 7)));
            f.failed(b, at(i * 7));
        }
    }

    #[test]
    fn the_table_is_bounded() {
        let t0 = Instant::now();
        let mut f = Failures::default();
        for i in 0..MAX_ADDRESSES as u32 {
            f.failed(&std::net::Ipv4Addr::from(i).to_string(), t0);
        }
        assert_eq!(f.tracked(), MAX_ADDRESSES);
        // Full, and every entry recent: a new address is not tracked.
        f.failed("198.51.100.1:1", t0);
        assert_eq!(f.tracked(), MAX_ADDRESSES);
        assert!(f.allows("198.51.100.1:1", t0));
        // A minute on, the old ones have aged out and make room.
        f.failed("198.51.100.1:1", t0 + WINDOW);
        assert_eq!(f.tracked(), 1);
    }
}
