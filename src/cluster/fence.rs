//! What keeps a deposed leader's batches out of the stream.
//!
//! Each batch is chained on the stream sequence the one before it ends at
//! (`Nats-Expected-Last-Sequence`), which keeps a leader's own batches in
//! order. Alone it does not fence a leader that pipelines: if a claim takes
//! the place of its oldest batch in flight and is exactly as long, the
//! batch behind it expects the very sequence the claim ends at, and is
//! stored after the claim (`tests/nats_facts.rs`, seen once in CI: a
//! leader stopped with batches in its socket buffer, continued after a
//! takeover). The new leader then failed on its first batch, and the
//! stream held a batch whose predecessor was never written.
//!
//! So a claim also writes every one of [`FENCES`] fence subjects, and a
//! batch sent while another is in flight also expects one of them to
//! still hold what its own leader's claim wrote there
//! (`Nats-Expected-Last-Subject-Sequence` with `-Subject`): any later claim
//! rewrites them all, and every such batch of the leader before is
//! refused, whatever its sequence. A batch sent with none in flight needs
//! no more than its sequence: it expects where the stream is known to end
//! (every batch before it acknowledged), which a claim can only move past;
//! it spares the servers a lookup per batch where batches are small and
//! one at a time (compare.sh's cluster pingpong, 5 rounds against no
//! fence subject: with one on every batch 0.92x the jobs/s and 1.13x the
//! NATS servers' CPU a job; only behind another, 1.02x and 0.99x). Fenced batches take the fence subjects in turn: the server
//! refuses an expectation on a subject while another one on it is still
//! in process, and with at most [`FENCES`] batches in flight, fenced batch
//! `n + FENCES` is sent only once fenced batch `n` is answered.

use bytes::Bytes;

use super::subjects::Subjects;

/// Fence subjects a claim writes; also the most batches a leader may have
/// in flight.
pub const FENCES: u64 = 16;

/// The fence subjects as this leader's claim wrote them: fence `k` at
/// stream sequence `first + k`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fences {
    first: u64,
}

/// What one batch is fenced on: `subject` must still hold `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub subject: String,
    pub seq: u64,
}

impl Fences {
    /// A claim's messages, to follow stream sequence `after`: every fence
    /// subject (empty), then the meta message, so that the claim is whole
    /// once its meta message is read.
    pub fn claim(subjects: &Subjects, meta: Bytes) -> Vec<(String, Bytes)> {
        let fences = (0..FENCES).map(|k| (subjects.fence(k), Bytes::new()));
        fences.chain([(subjects.meta(), meta)]).collect()
    }

    /// The fences of a claim stored right after stream sequence `after`.
    pub fn claimed(after: u64) -> Fences {
        Fences { first: after + 1 }
    }

    /// What this leader's fenced batch number `n` (counted from 0) is
    /// fenced on.
    pub fn of(&self, subjects: &Subjects, n: u64) -> Fence {
        let k = n % FENCES;
        Fence {
            subject: subjects.fence(k),
            seq: self.first + k,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_writes_every_fence_then_its_meta_message() {
        let s = Subjects::new("jobs").unwrap();
        let claim = Fences::claim(&s, Bytes::from_static(b"meta"));
        assert_eq!(claim.len() as u64, FENCES + 1);
        assert_eq!(claim[0], ("sprout.jobs.f.0".into(), Bytes::new()));
        assert_eq!(claim[15].0, "sprout.jobs.f.15");
        assert_eq!(
            claim[16],
            ("sprout.jobs.m".into(), Bytes::from_static(b"meta"))
        );
    }

    #[test]
    fn batches_take_the_fences_in_turn_at_their_claimed_sequences() {
        let s = Subjects::new("jobs").unwrap();
        // A claim after stream sequence 40: fence k at 41 + k.
        let fences = Fences::claimed(40);
        // (batch number, fence subject, its sequence)
        let table = [
            (0, "sprout.jobs.f.0", 41),
            (1, "sprout.jobs.f.1", 42),
            (15, "sprout.jobs.f.15", 56),
            (16, "sprout.jobs.f.0", 41),
            (33, "sprout.jobs.f.1", 42),
        ];
        for (n, subject, seq) in table {
            let want = Fence {
                subject: subject.into(),
                seq,
            };
            assert_eq!(fences.of(&s, n), want, "batch {n}");
        }
    }
}
