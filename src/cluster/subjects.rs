//! The names a cluster uses in JetStream: one stream per cluster name,
//! holding the store's pages, one subject per slot, and a meta subject.
//!
//! Pages go to `sprout.NAME.p.SLOT` with at most one message kept per
//! subject, so a page that replaces a slot's old page (or the empty message
//! that frees it) lets JetStream reclaim the old one: the stream stays
//! bounded by the live pages, as sled's tree does for a single node.
//! A claim also writes the fence subjects `sprout.NAME.f.K` (`fence.rs`).
//! Group commit `N`'s records go to `sprout.NAME.c.N` (`changes.rs`), one
//! subject each, purged once a snapshot of the pages covers them.

use crate::store::Slot;

/// The subjects and stream of one cluster name.
#[derive(Clone, Debug)]
pub struct Subjects {
    name: String,
}

/// A name the cluster's stream, lease and meta messages cannot carry.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("--cluster-name {0:?}: use 1 to 64 letters, digits, '-' or '_'")]
    Cluster(String),
    #[error("--node-id {0:?}: use 1 to 64 letters, digits, '-', '_' or '.'")]
    Node(String),
}

/// What a subject of the stream holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    Page(Slot),
    Meta,
    /// Fence subject `K`: written by claims, read by nobody.
    Fence(u64),
    /// Change message `N`: a group commit's records.
    Change(u64),
}

impl Subjects {
    /// A cluster name is one subject token and part of a stream name:
    /// letters, digits, `-` and `_`.
    pub fn new(name: &str) -> Result<Subjects, NameError> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(NameError::Cluster(name.to_string()));
        }
        Ok(Subjects {
            name: name.to_string(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn stream(&self) -> String {
        format!("SPROUT_{}", self.name)
    }

    /// Every subject of the stream.
    pub fn all(&self) -> String {
        format!("sprout.{}.>", self.name)
    }

    pub fn page(&self, slot: Slot) -> String {
        format!("sprout.{}.p.{slot}", self.name)
    }

    pub fn meta(&self) -> String {
        format!("sprout.{}.m", self.name)
    }

    pub fn fence(&self, k: u64) -> String {
        format!("sprout.{}.f.{k}", self.name)
    }

    pub fn change(&self, n: u64) -> String {
        format!("sprout.{}.c.{n}", self.name)
    }

    /// Every change message's subject.
    pub fn changes(&self) -> String {
        format!("sprout.{}.c.>", self.name)
    }

    pub fn parse(&self, subject: &str) -> Option<Subject> {
        let rest = subject
            .strip_prefix("sprout.")?
            .strip_prefix(self.name.as_str())?
            .strip_prefix('.')?;
        match rest {
            "m" => Some(Subject::Meta),
            _ => match rest.split_once('.')? {
                ("p", slot) => slot.parse().ok().map(Subject::Page),
                ("f", k) => k.parse().ok().map(Subject::Fence),
                ("c", n) => n.parse().ok().map(Subject::Change),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_their_subjects() {
        for bad in ["", "a.b", "a b", "a*", ">", &"x".repeat(65)] {
            assert!(Subjects::new(bad).is_err(), "{bad:?}");
        }
        let s = Subjects::new("jobs-1").unwrap();
        assert_eq!(s.stream(), "SPROUT_jobs-1");
        assert_eq!(s.all(), "sprout.jobs-1.>");
        assert_eq!(s.changes(), "sprout.jobs-1.c.>");
        let cases = [
            (s.page(0), Some(Subject::Page(0))),
            (s.page(4_000_000_000), Some(Subject::Page(4_000_000_000))),
            (s.meta(), Some(Subject::Meta)),
            (s.fence(0), Some(Subject::Fence(0))),
            (s.fence(15), Some(Subject::Fence(15))),
            (s.change(1), Some(Subject::Change(1))),
            (s.change(u64::MAX), Some(Subject::Change(u64::MAX))),
            ("sprout.jobs-1.c.-1".into(), None),
            ("sprout.jobs-1.f.x".into(), None),
            ("sprout.jobs-1.p.x".into(), None),
            ("sprout.jobs-1.q".into(), None),
            ("sprout.jobs-2.m".into(), None),
            ("sprout.jobs-1x.m".into(), None),
        ];
        for (subject, want) in cases {
            assert_eq!(s.parse(&subject), want, "{subject}");
        }
    }
}
