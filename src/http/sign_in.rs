//! The dashboard's sign-ins: the cookie holds a random session id, and who
//! signed in is kept here, on the server. The token itself never leaves the
//! login form: a stolen cookie ends with its session (logout, expiry, or a
//! restart), and cannot be turned back into the token.
//!
//! A session lasts [`LIFETIME`] from sign-in and ends sooner when unused for
//! [`IDLE`] (the open dashboard polls every second, so only a closed one
//! idles). At most [`MAX_SESSIONS`] are kept; signing in beyond that ends
//! the session least recently used, so a flood of logins costs bounded
//! memory.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a session lasts after sign-in, however busy.
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// How long an unused session lasts.
pub const IDLE: Duration = Duration::from_secs(3600);
/// Sessions kept at once, at most.
pub const MAX_SESSIONS: usize = 4096;

/// A session id: 256 random bits, as 64 hex digits in the cookie.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId([u8; 32]);

impl SessionId {
    /// A fresh id from the operating system's random source.
    fn random() -> SessionId {
        let mut bytes = [0; 32];
        getrandom::getrandom(&mut bytes).expect("the OS random source");
        SessionId(bytes)
    }

    /// The id a cookie value spells, if it is one (64 hex digits).
    pub fn parse(hex: &str) -> Option<SessionId> {
        if hex.len() != 64 {
            return None;
        }
        let mut bytes = [0; 32];
        for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks(2)) {
            let pair = std::str::from_utf8(pair).ok()?;
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(SessionId(bytes))
    }

    /// The cookie value.
    pub fn to_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

struct Entry<W> {
    who: W,
    started: Instant,
    used: Instant,
}

/// The live sessions, each standing for `W` (who signed in).
pub struct Sessions<W> {
    live: Mutex<HashMap<SessionId, Entry<W>>>,
}

impl<W: Clone> Default for Sessions<W> {
    fn default() -> Self {
        Sessions {
            live: Mutex::new(HashMap::new()),
        }
    }
}

impl<W: Clone> Sessions<W> {
    /// Starts a session for `who` at `now`; its id goes in the cookie.
    pub fn start(&self, who: W, now: Instant) -> SessionId {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|_, e| alive(e.started, e.used, now));
        if live.len() >= MAX_SESSIONS {
            let stalest = live.iter().min_by_key(|(_, e)| e.used).map(|(id, _)| *id);
            if let Some(id) = stalest {
                live.remove(&id);
            }
        }
        let id = SessionId::random();
        let entry = Entry {
            who,
            started: now,
            used: now,
        };
        live.insert(id, entry);
        id
    }

    /// Who `id` stands for at `now`, if it is a live session (which counts
    /// as a use).
    pub fn find(&self, id: SessionId, now: Instant) -> Option<W> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let entry = live.get_mut(&id)?;
        if !alive(entry.started, entry.used, now) {
            live.remove(&id);
            return None;
        }
        entry.used = now;
        Some(entry.who.clone())
    }

    /// Ends `id` (logout).
    pub fn end(&self, id: SessionId) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// Sessions kept now (live or not yet swept).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Whether a session started at `started` and last used at `used` is still
/// good at `now`.
fn alive(started: Instant, used: Instant, now: Instant) -> bool {
    now.saturating_duration_since(started) < LIFETIME && now.saturating_duration_since(used) < IDLE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_ends_at_its_lifetime_or_when_idle() {
        let t0 = Instant::now();
        let min = Duration::from_secs(60);
        // (since start, since last use, alive)
        let table = [
            (Duration::ZERO, Duration::ZERO, true),
            (IDLE - min, IDLE - min, true),
            (IDLE, IDLE, false),
            (LIFETIME - min, Duration::ZERO, true),
            (LIFETIME, Duration::ZERO, false),
            (LIFETIME + IDLE, IDLE, false),
        ];
        for (since_start, since_use, expected) in table {
            let now = t0 + since_start;
            let used = now - since_use;
            assert_eq!(
                alive(t0, used, now),
                expected,
                "{since_start:?} {since_use:?}"
            );
        }
    }

    #[test]
    fn ids_are_random_and_round_trip_as_hex() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let (a, b) = (sessions.start("a", now), sessions.start("b", now));
        assert!(a != b);
        // No Debug on ids (they are secrets): compare with ==.
        assert!(SessionId::parse(&a.to_hex()) == Some(a));
        for bad in ["", "zz", &"0".repeat(63), &"g".repeat(64), &"0".repeat(65)] {
            assert!(SessionId::parse(bad).is_none(), "{bad}");
        }
        assert_eq!(sessions.find(a, now), Some("a"));
        assert_eq!(sessions.find(b, now), Some("b"));
    }

    #[test]
    fn use_keeps_a_session_until_its_lifetime_and_logout_ends_it() {
        let sessions = Sessions::default();
        let t0 = Instant::now();
        let id = sessions.start(1, t0);
        let mut now = t0;
        while now < t0 + LIFETIME - IDLE {
            now += IDLE / 2;
            assert_eq!(sessions.find(id, now), Some(1), "{:?}", now - t0);
        }
        assert_eq!(sessions.find(id, t0 + LIFETIME), None);
        let id = sessions.start(2, t0);
        sessions.end(id);
        assert_eq!(sessions.find(id, t0), None);
    }

    #[test]
    fn sessions_are_bounded_and_the_stalest_goes_first() {
        let sessions = Sessions::default();
        let t0 = Instant::now();
        let first = sessions.start(0, t0);
        let second = sessions.start(1, t0 + Duration::from_secs(1));
        // Using the first makes the second the stalest.
        sessions.find(first, t0 + Duration::from_secs(2));
        for i in 2..MAX_SESSIONS + 1 {
            sessions.start(i, t0 + Duration::from_secs(3));
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        let now = t0 + Duration::from_secs(4);
        assert_eq!(sessions.find(first, now), Some(0));
        assert_eq!(sessions.find(second, now), None);
    }
}
