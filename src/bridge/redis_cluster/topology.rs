//! Which master holds each slot, from what several nodes say.
//!
//! One node's answer can be stale: a node not yet told of a failover (or
//! cut off from the rest of the cluster) still names the old master, and a
//! bridge that believed the first node it asked would not follow the new
//! one. So several nodes are asked, each for `CLUSTER SLOTS` (each slot
//! range's master) and `CLUSTER NODES` (the config epoch it knows each
//! node by), and each slot goes to the master claimed with the highest
//! epoch: Redis Cluster's own rule (a promoted replica takes an epoch above
//! every one it has seen; the higher epoch wins the slot). A node without
//! node ids in `CLUSTER SLOTS` (Redis < 4), or that refuses `CLUSTER
//! NODES`, gives epoch 0: then the first answer wins, as before.

use std::collections::HashMap;

use redis::Value;

/// Slots of a Redis Cluster.
const SLOTS: usize = 16384;

/// The slot of `key` (CRC16-XMODEM of its hash tag, if any, mod 16384).
fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Each slot's master, as `HOST:PORT`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Topology {
    pub(super) masters: Vec<String>,
    /// Per slot, an index into `masters` (`u16::MAX`: no owner).
    owner: Vec<u16>,
}

/// One node's answer: each slot range's master, with the config epoch the
/// node knows it by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct View(Vec<Claim>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Claim {
    first: u16,
    last: u16,
    master: String,
    epoch: u64,
}

impl View {
    /// From the `CLUSTER SLOTS` and `CLUSTER NODES` answers of the node at
    /// `asked_host` (a node that does not know its own address reports an
    /// empty one).
    pub(super) fn parse(slots: &Value, nodes: &str, asked_host: &str) -> Option<View> {
        let Value::Array(ranges) = slots else {
            return None;
        };
        let epochs = epochs(nodes);
        let mut claims = Vec::new();
        for range in ranges {
            let Value::Array(items) = range else {
                return None;
            };
            let (first, last) = (int(items.first()?)?, int(items.get(1)?)?);
            let Value::Array(master) = items.get(2)? else {
                return None;
            };
            let host = text(master.first()?)?;
            let host = if host.is_empty() { asked_host } else { &host };
            let id = master.get(2).and_then(text);
            claims.push(Claim {
                first: first.clamp(0, SLOTS as i64 - 1) as u16,
                last: last.clamp(0, SLOTS as i64 - 1) as u16,
                master: format!("{host}:{}", int(master.get(1)?)?),
                epoch: id
                    .and_then(|id| epochs.get(id.as_str()).copied())
                    .unwrap_or(0),
            });
        }
        Some(View(claims))
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// Each node's config epoch, by id, from a `CLUSTER NODES` answer (`ID
/// ADDRESS FLAGS MASTER PING PONG EPOCH LINK SLOTS…` a line).
fn epochs(nodes: &str) -> HashMap<&str, u64> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            Some((*fields.first()?, fields.get(6)?.parse().ok()?))
        })
        .collect()
}

impl Topology {
    /// Each slot's master by the highest epoch any of `views` claims it
    /// with (the earlier view on a tie); a slot no view claims has none.
    pub(super) fn newest(views: &[View]) -> Topology {
        let mut best: Vec<Option<(u64, &str)>> = vec![None; SLOTS];
        for View(claims) in views {
            for claim in claims {
                for at in &mut best[usize::from(claim.first)..=usize::from(claim.last)] {
                    if at.is_none_or(|(epoch, _)| claim.epoch > epoch) {
                        *at = Some((claim.epoch, &claim.master));
                    }
                }
            }
        }
        let mut t = Topology {
            masters: Vec::new(),
            owner: vec![u16::MAX; SLOTS],
        };
        for (s, at) in best.into_iter().enumerate() {
            let Some((_, master)) = at else { continue };
            let i = match t.masters.iter().position(|m| m == master) {
                Some(i) => i,
                None => {
                    t.masters.push(master.to_owned());
                    t.masters.len() - 1
                }
            };
            t.owner[s] = i as u16;
        }
        t
    }

    pub(super) fn master_of(&self, key: &[u8]) -> Option<&str> {
        let i = *self.owner.get(usize::from(slot(key)))?;
        self.masters.get(usize::from(i)).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(id.as_bytes().to_vec()),
        ])
    }

    fn range(first: i64, last: i64, nodes: Vec<Value>) -> Value {
        let mut items = vec![Value::Int(first), Value::Int(last)];
        items.extend(nodes);
        Value::Array(items)
    }

    #[test]
    fn slots_are_redis_clusters() {
        // As `CLUSTER KEYSLOT` answers.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn cluster_slots_give_each_slots_master() {
        let reply = Value::Array(vec![
            range(
                0,
                8191,
                vec![node("10.0.0.1", 7000, "a"), node("10.0.0.2", 7003, "b")],
            ),
            range(8192, 16383, vec![node("", 7001, "c")]),
        ]);
        let view = View::parse(&reply, "", "10.0.0.9").unwrap();
        let t = Topology::newest(&[view]);
        assert_eq!(t.masters, ["10.0.0.1:7000", "10.0.0.9:7001"]);
        assert_eq!(t.master_of(b"123456789"), Some("10.0.0.9:7001"));
        assert_eq!(t.master_of(b"bar"), Some("10.0.0.1:7000")); // slot 5061
        assert!(View::parse(&Value::Nil, "", "x").is_none());
    }

    #[test]
    fn cluster_nodes_give_each_nodes_epoch() {
        let nodes = "a 10.0.0.1:7000@17000 myself,master - 0 0 7 connected 0-8191\n\
                     b 10.0.0.2:7003@17003,h2 slave a 0 1700 7 connected\n\
                     c :7001@17001 master,fail - 0 0 12 disconnected 8192-16383\n\
                     garbled\n";
        let e = epochs(nodes);
        assert_eq!((e["a"], e["b"], e["c"]), (7, 7, 12));
        assert_eq!(e.len(), 3);
    }

    /// A view of masters `(first slot, last slot, address, epoch)`.
    fn view(claims: &[(u16, u16, &str, u64)]) -> View {
        View(
            claims
                .iter()
                .map(|&(first, last, master, epoch)| Claim {
                    first,
                    last,
                    master: master.to_owned(),
                    epoch,
                })
                .collect(),
        )
    }

    /// A case, the views in the order asked, and the masters of slots 0,
    /// 100 and 9000.
    type Row<'a> = (&'a str, Vec<View>, [Option<&'a str>; 3]);

    #[test]
    fn each_slot_goes_to_the_newest_claim() {
        let old = view(&[(0, 8191, "a:1", 1), (8192, 16383, "b:1", 2)]);
        let failed_over = view(&[(0, 8191, "a:1", 1), (8192, 16383, "b2:1", 3)]);
        let migrated = view(&[(0, 99, "b:1", 4), (100, 8191, "a:1", 1)]);
        let unknown = view(&[(0, 16383, "z:1", 0)]);
        #[rustfmt::skip]
        let rows: &[Row] = &[
            ("one view", vec![old.clone()], [Some("a:1"), Some("a:1"), Some("b:1")]),
            ("a stale node asked first", vec![old.clone(), failed_over.clone()], [Some("a:1"), Some("a:1"), Some("b2:1")]),
            ("a stale node asked last", vec![failed_over.clone(), old.clone()], [Some("a:1"), Some("a:1"), Some("b2:1")]),
            ("ranges merged across views", vec![failed_over.clone(), migrated.clone()], [Some("b:1"), Some("a:1"), Some("b2:1")]),
            ("no epochs (Redis < 4): the first answer", vec![unknown.clone(), view(&[(0, 16383, "y:1", 0)])], [Some("z:1"), Some("z:1"), Some("z:1")]),
            ("a view without epochs loses to one with", vec![unknown.clone(), old.clone()], [Some("a:1"), Some("a:1"), Some("b:1")]),
            ("a slot nobody claims", vec![view(&[(0, 99, "a:1", 1)])], [Some("a:1"), None, None]),
            ("no view", vec![], [None, None, None]),
        ];
        for (case, views, want) in rows {
            let t = Topology::newest(views);
            let got = [0usize, 100, 9000].map(|s| {
                let i = t.owner[s];
                t.masters.get(usize::from(i)).map(String::as_str)
            });
            assert_eq!(&got, want, "{case}");
        }
    }
}
