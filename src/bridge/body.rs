//! The two job bodies the bridge writes.
//!
//! A **timer** (internal tube) carries everything needed to fire without
//! the index: the node, the key, its exact expiry and, with `--with-value`,
//! the value captured while the key lived. Redis keys and values are binary,
//! so the timer body is a small binary-safe frame rather than JSON:
//! `T1 <node> <db> <expire_at_ms> <key_len> <V|N>\n<key>[<value>]`, where
//! `V` means the bytes after the key are the captured value.
//!
//! A **delivery** (the user's tube) is JSON `{"key", "db", "expire_at_ms",
//! "fired_at_ms"[, "uncertain"][, "value"]}`. `"uncertain": true` marks an
//! expiry the bridge cannot tell from a deletion (its deadline passed while
//! the bridge was down or not following the node, see `gaps`); the field
//! is left out otherwise. JSON strings are text: a key or value that is
//! not UTF-8 is delivered with U+FFFD in place of its invalid bytes.

use std::io::Write;

use super::keys::KeyRef;

/// One pending expiry, as stored in a timer job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timer {
    /// Index of the Redis node (position of its `--redis` URL).
    pub node: u16,
    pub db: i64,
    pub key: Vec<u8>,
    pub expire_at_ms: i64,
    pub value: Option<Vec<u8>>,
}

impl Timer {
    pub fn encode(&self) -> Vec<u8> {
        let flag = if self.value.is_some() { 'V' } else { 'N' };
        let mut out = format!(
            "T1 {} {} {} {} {flag}\n",
            self.node,
            self.db,
            self.expire_at_ms,
            self.key.len()
        )
        .into_bytes();
        out.extend_from_slice(&self.key);
        if let Some(value) = &self.value {
            out.extend_from_slice(value);
        }
        out
    }

    /// `None` for anything that is not a timer this bridge wrote.
    pub fn decode(body: &[u8]) -> Option<Timer> {
        let nl = body.iter().position(|&b| b == b'\n')?;
        let head = std::str::from_utf8(&body[..nl]).ok()?;
        let rest = &body[nl + 1..];
        let mut f = head.split(' ');
        if f.next()? != "T1" {
            return None;
        }
        let node = f.next()?.parse().ok()?;
        let db = f.next()?.parse().ok()?;
        let expire_at_ms = f.next()?.parse().ok()?;
        let key_len: usize = f.next()?.parse().ok()?;
        let has_value = match f.next()? {
            "V" => true,
            "N" => false,
            _ => return None,
        };
        if f.next().is_some() || rest.len() < key_len || (!has_value && rest.len() != key_len) {
            return None;
        }
        let (key, value) = rest.split_at(key_len);
        Some(Timer {
            node,
            db,
            key: key.to_vec(),
            expire_at_ms,
            value: has_value.then(|| value.to_vec()),
        })
    }

    /// The body of the job delivered when this timer fires. Written
    /// straight into one buffer of the right size (fields in the order a
    /// `serde_json` map prints them): at 100k expiries a second, building
    /// a `serde_json::Value` first cost a tenth of the bridge's CPU.
    pub fn delivery(&self, fired_at_ms: i64, uncertain: bool) -> Vec<u8> {
        let value_len = self.value.as_ref().map_or(0, Vec::len);
        let mut out = Vec::with_capacity(96 + self.key.len() + value_len);
        let _ = write!(
            out,
            "{{\"db\":{},\"expire_at_ms\":{},\"fired_at_ms\":{fired_at_ms},\"key\":",
            self.db, self.expire_at_ms
        );
        json_string(&mut out, &self.key);
        if uncertain {
            out.extend_from_slice(b",\"uncertain\":true");
        }
        if let Some(value) = &self.value {
            out.extend_from_slice(b",\"value\":");
            json_string(&mut out, value);
        }
        out.push(b'}');
        out
    }
}

impl Timer {
    /// The key this timer is for.
    pub fn key_ref(&self) -> KeyRef<'_> {
        KeyRef::new(self.node, &self.key)
    }
}

/// The field a delivery's firing moment follows: everything before its
/// digits depends on the timer alone.
const FIRED_AT: &[u8] = b"\"fired_at_ms\":";

/// A delivery's bytes up to its firing moment's digits (the head of
/// [`Timer::delivery_parts`]); `None` if `delivery` has no such field.
pub fn delivery_head(delivery: &[u8]) -> Option<&[u8]> {
    let at = delivery
        .windows(FIRED_AT.len())
        .position(|w| w == FIRED_AT)?;
    Some(&delivery[..at + FIRED_AT.len()])
}

/// Whether `delivery` (a delivery job's body) is `timer`'s: the same db,
/// `expire_at_ms` and key, whenever it fired and however it is marked.
/// A new cluster leader uses it to tell a timer the old leader's bridge
/// had already delivered when it died (see [`crate::bridge::fired_already`]).
pub fn delivers(delivery: &[u8], head: &[u8], key: &[u8]) -> bool {
    let Some(rest) = delivery.strip_prefix(head) else {
        return false;
    };
    let digits = rest
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b'-')
        .count();
    let rest = &rest[digits..];
    rest.starts_with(key) && matches!(rest.get(key.len()), Some(b',' | b'}'))
}

impl Timer {
    /// Its delivery's bytes before the firing moment, and the key's field
    /// after it: what [`delivers`] compares.
    pub fn delivery_parts(&self) -> (Vec<u8>, Vec<u8>) {
        let mut head = format!(
            "{{\"db\":{},\"expire_at_ms\":{},",
            self.db, self.expire_at_ms
        )
        .into_bytes();
        head.extend_from_slice(FIRED_AT);
        let mut key = b",\"key\":".to_vec();
        json_string(&mut key, &self.key);
        (head, key)
    }
}

/// Appends `bytes` as a JSON string (invalid UTF-8 as U+FFFD).
fn json_string(out: &mut Vec<u8>, bytes: &[u8]) {
    // Writing a `str` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, &String::from_utf8_lossy(bytes));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer(value: Option<&[u8]>) -> Timer {
        Timer {
            node: 2,
            db: 5,
            key: b"dev\n:\"42\xff".to_vec(),
            expire_at_ms: 1_700_000_000_123,
            value: value.map(<[u8]>::to_vec),
        }
    }

    #[test]
    fn timer_round_trips_binary_keys_and_values() {
        for t in [timer(None), timer(Some(b"")), timer(Some(b"on\r\nline"))] {
            assert_eq!(Timer::decode(&t.encode()), Some(t));
        }
    }

    #[test]
    fn foreign_bodies_are_rejected() {
        for body in [
            &b""[..],
            b"hello",
            b"T1 0 0 1 3 N\nab",
            b"T1 0 0 1 1 X\na",
            b"T2 0 0 1 1 N\na",
        ] {
            assert_eq!(Timer::decode(body), None, "{body:?}");
        }
    }

    #[test]
    fn delivery_is_json() {
        let t = Timer {
            key: b"device:42".to_vec(),
            ..timer(Some(b"online"))
        };
        let v: serde_json::Value = serde_json::from_slice(&t.delivery(9, false)).unwrap();
        assert_eq!(v["key"], "device:42");
        assert_eq!(v["db"], 5);
        assert_eq!(v["expire_at_ms"], 1_700_000_000_123_i64);
        assert_eq!(v["fired_at_ms"], 9);
        assert_eq!(v["value"], "online");
        assert!(v.get("uncertain").is_none());
        let v: serde_json::Value = serde_json::from_slice(&t.delivery(9, true)).unwrap();
        assert_eq!(v["uncertain"], true);
        assert_eq!(v["value"], "online");
        // The same bytes a JSON map prints: fields in key order.
        assert_eq!(serde_json::to_vec(&v).unwrap(), t.delivery(9, true));
    }

    #[test]
    fn a_delivery_is_recognised_as_its_timers_whenever_it_fired() {
        for t in [timer(None), timer(Some(b"v"))] {
            let (head, key) = t.delivery_parts();
            for (at, uncertain) in [(1_700_000_000_999, false), (3, true)] {
                assert!(delivers(&t.delivery(at, uncertain), &head, &key));
            }
            let other_key = Timer {
                key: b"dev".to_vec(),
                ..t.clone()
            };
            let other_time = Timer {
                expire_at_ms: t.expire_at_ms + 1,
                ..t.clone()
            };
            let other_db = Timer {
                db: 50,
                ..t.clone()
            };
            for other in [other_key, other_time, other_db] {
                assert!(
                    !delivers(&other.delivery(9, false), &head, &key),
                    "{other:?}"
                );
            }
        }
    }

    #[test]
    fn a_deliverys_head_ends_at_its_firing_moment() {
        for t in [timer(None), timer(Some(b"v"))] {
            let (head, _) = t.delivery_parts();
            for uncertain in [false, true] {
                let delivery = t.delivery(1_700_000_000_999, uncertain);
                assert_eq!(delivery_head(&delivery), Some(&head[..]));
            }
        }
        assert_eq!(delivery_head(b"{\"db\":0}"), None);
        assert_eq!(delivery_head(b""), None);
    }

    #[test]
    fn delivery_escapes_and_replaces_invalid_utf8() {
        let t = timer(None);
        let v: serde_json::Value = serde_json::from_slice(&t.delivery(1, false)).unwrap();
        assert_eq!(v["key"], "dev\n:\"42\u{fffd}");
        assert!(v.get("value").is_none());
        assert_eq!(
            String::from_utf8(t.delivery(1, false)).unwrap(),
            "{\"db\":5,\"expire_at_ms\":1700000000123,\"fired_at_ms\":1,\"key\":\"dev\\n:\\\"42\u{fffd}\"}"
        );
    }
}
