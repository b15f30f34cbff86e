//! A standby's mark on the `stats` answers it passes on: the leader's
//! figures, but `cluster-via-node` and `cluster-via-role` name the node
//! the client reached, so every node does not seem to be the leader.
//!
//! Why here and not on the leader: a relay without peer TLS is a plain
//! connection to the leader's beanstalk port, which cannot tell a standby
//! from a client. So the relay reads what passes (it still passes every
//! other byte as it came): the client's requests with the server's
//! decoder, to know which answer belongs to a `stats`, and the leader's
//! answers by their head lines only, to know where each ends (every
//! request has exactly one, in order; `quit` none, and the leader closes).
//! Only a `stats` answer is held and read whole; every other answer passes
//! on as it came, without a copy: pingpong through a standby pays next to
//! nothing for the mark. Answers it cannot read (a newer leader's) it
//! passes on untouched from there on.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use sprout_protocol::codec::{ClientCodec, ServerCodec};
use sprout_protocol::parse::{parse_response_line, ResponseHead};
use sprout_protocol::{Command, Response, MAX_LINE_LEN};
use tokio_util::codec::Decoder;

use crate::engine::{via_lines, VIA_NODE, VIA_ROLE};

/// Who a standby is, for its mark.
#[derive(Clone, Debug)]
pub struct Via {
    /// Its `--node-id`.
    pub node: String,
    /// Its `-z`, for reading `put` bodies as the leader does.
    pub max_job_size: u32,
}

/// A `stats` document with the via lines naming `node`, a standby: the
/// leader's own via lines (or none, from a leader that has none) replaced.
pub fn mark(doc: &[u8], node: &str) -> Bytes {
    let ours = via_lines(node, "standby");
    let mut out = Vec::with_capacity(doc.len() + ours.len());
    let theirs = |line: &[u8]| {
        [VIA_NODE, VIA_ROLE].iter().any(|key| {
            line.strip_prefix(key.as_bytes())
                .is_some_and(|l| l.starts_with(b": "))
        })
    };
    for line in doc.split_inclusive(|&b| b == b'\n') {
        if !theirs(line) {
            out.extend_from_slice(line);
        }
    }
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend_from_slice(ours.as_bytes());
    Bytes::from(out)
}

/// For each request passed on and not yet answered: whether it is a
/// `stats`. `None` once either side could not be read.
type Pending = Arc<Mutex<Option<VecDeque<bool>>>>;

/// Builds the two readers of one relayed connection.
pub fn watch(via: &Via) -> (Requests, Answers) {
    let pending: Pending = Arc::new(Mutex::new(Some(VecDeque::new())));
    let requests = Requests {
        codec: ServerCodec::with_auth(via.max_job_size),
        buf: BytesMut::new(),
        pending: pending.clone(),
    };
    let answers = Answers {
        framing: Framing::default(),
        held: None,
        node: via.node.clone(),
        pending,
    };
    (requests, answers)
}

/// The client's side: notes each request before it goes to the leader.
pub struct Requests {
    codec: ServerCodec,
    buf: BytesMut,
    pending: Pending,
}

impl Requests {
    pub fn saw(&mut self, bytes: &[u8]) {
        let mut pending = self.pending.lock().expect("the relay's lock");
        let Some(queue) = pending.as_mut() else {
            return;
        };
        self.buf.extend_from_slice(bytes);
        loop {
            match self.codec.decode(&mut self.buf) {
                Ok(Some(request)) => queue.push_back(matches!(request, Ok(Command::Stats))),
                Ok(None) => return,
                Err(_) => {
                    *pending = None;
                    self.buf = BytesMut::new();
                    return;
                }
            }
        }
    }
}

/// What a read of the leader's answers turned into.
#[derive(Debug, PartialEq, Eq)]
pub enum Passed {
    /// Pass the read on as it came (no `stats` answer in it).
    Same,
    /// Pass on what was put in `out` instead.
    Changed,
}

/// The leader's side: finds where each answer ends by its head line
/// alone (a body is skipped by its length), so that answers pass on as
/// they came, uncopied; only a `stats` answer is held until whole, read
/// with the client's decoder and passed on marked.
pub struct Answers {
    framing: Framing,
    /// The `stats` answer being read, while it is.
    held: Option<BytesMut>,
    node: String,
    pending: Pending,
}

impl Answers {
    /// What to pass on of `bytes`: [`Passed::Same`], or what `out` now
    /// holds, a `stats` answer marked.
    pub fn pass(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Passed {
        let mut pending = self.pending.lock().expect("the relay's lock");
        let Some(queue) = pending.as_mut() else {
            return match self.held.take() {
                Some(held) => {
                    out.extend_from_slice(&held);
                    out.extend_from_slice(bytes);
                    Passed::Changed
                }
                None => Passed::Same,
            };
        };
        let mut passed = Passed::Same;
        // `bytes[from..]` is not passed on yet.
        let mut from = 0;
        let mut at = 0;
        while at < bytes.len() {
            if self.framing.between() && queue.pop_front() == Some(true) {
                out.extend_from_slice(&bytes[from..at]);
                from = at;
                self.held = Some(BytesMut::new());
            }
            let Some(ended) = self.framing.frame(&bytes[at..]) else {
                // Unreadable: from here on everything passes untouched.
                *pending = None;
                if let Some(held) = self.held.take() {
                    out.extend_from_slice(&held);
                    passed = Passed::Changed;
                }
                break;
            };
            let step = &bytes[at..at + ended.taken];
            at += ended.taken;
            let Some(held) = &mut self.held else {
                continue;
            };
            held.extend_from_slice(step);
            from = at;
            passed = Passed::Changed;
            if ended.whole {
                let held = self.held.take().expect("a held answer");
                out.extend_from_slice(&marked(held, &self.node));
            }
        }
        if passed == Passed::Changed {
            out.extend_from_slice(&bytes[from..]);
        }
        passed
    }
}

/// Where the leader's answers are.
#[derive(Default)]
struct Framing {
    /// The head line read so far (it may come in pieces).
    line: Vec<u8>,
    /// Bytes of the current body (its CRLF included) still to come.
    left: usize,
    /// `RESERVED` answers still to come of a `RESERVED_BATCH`.
    batch: u32,
}

impl Framing {
    /// Whether the next byte starts an answer.
    fn between(&self) -> bool {
        self.line.is_empty() && self.left == 0 && self.batch == 0
    }

    /// Reads the framing of the start of `bytes`: how much of it belongs
    /// to the current answer, and whether that answer ends there. `None`
    /// if it cannot be read.
    fn frame(&mut self, bytes: &[u8]) -> Option<Framed> {
        if self.left > 0 {
            let taken = self.left.min(bytes.len());
            self.left -= taken;
            let whole = self.left == 0 && self.batch == 0;
            return Some(Framed { taken, whole });
        }
        let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
            self.line.extend_from_slice(bytes);
            return (self.line.len() <= MAX_LINE_LEN).then_some(Framed {
                taken: bytes.len(),
                whole: false,
            });
        };
        self.line.extend_from_slice(&bytes[..=end]);
        let line = std::mem::take(&mut self.line);
        let head = line.strip_suffix(b"\r\n")?;
        let in_batch = self.batch > 0;
        match parse_response_line(head).ok()? {
            ResponseHead::Line(_) if in_batch => return None,
            ResponseHead::Line(_) => {}
            ResponseHead::WithBody { bytes, .. } => {
                self.left = bytes as usize + 2;
                self.batch = self.batch.saturating_sub(1);
            }
            ResponseHead::Batch(_) if in_batch => return None,
            ResponseHead::Batch(n) => self.batch = n,
        }
        let whole = self.left == 0 && self.batch == 0;
        Some(Framed {
            taken: end + 1,
            whole,
        })
    }
}

/// How far a piece of an answer went.
struct Framed {
    taken: usize,
    whole: bool,
}

/// A whole `stats` answer as it is to be passed on: its document marked,
/// or as it came if it is not a document.
fn marked(mut held: BytesMut, node: &str) -> Bytes {
    let whole = held.clone().freeze();
    match ClientCodec::new().decode(&mut held) {
        Ok(Some(Response::Ok(doc))) => {
            let doc = mark(&doc, node);
            let mut out = format!("OK {}\r\n", doc.len()).into_bytes();
            out.extend_from_slice(&doc);
            out.extend_from_slice(b"\r\n");
            Bytes::from(out)
        }
        _ => whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standby_names_itself_in_place_of_the_leader() {
        let leader = format!(
            "---\nid: x\ncluster-node: \"n1\"\n{}",
            via_lines("n1", "leader")
        );
        // (document from the leader, marked by n2)
        let table = [
            (leader.as_str(), "---\nid: x\ncluster-node: \"n1\"\n"),
            // A leader without via lines.
            ("---\nid: x\n", "---\nid: x\n"),
            // A key that only starts alike stays.
            ("---\ncluster-via-nodes: 3\n", "---\ncluster-via-nodes: 3\n"),
            ("---", "---\n"),
        ];
        for (doc, kept) in table {
            let want = format!("{kept}cluster-via-node: \"n2\"\ncluster-via-role: standby\n");
            assert_eq!(mark(doc.as_bytes(), "n2"), want.as_bytes(), "{doc:?}");
        }
    }

    /// Passes `answers` through in chunks of `step` bytes after the
    /// client sent `requests`.
    fn relayed(requests: &[u8], answers: &[u8], step: usize) -> Vec<u8> {
        let via = Via {
            node: "n2".into(),
            max_job_size: 100,
        };
        let (mut up, mut down) = watch(&via);
        for chunk in requests.chunks(step) {
            up.saw(chunk);
        }
        let mut out = Vec::new();
        for chunk in answers.chunks(step) {
            let mut changed = Vec::new();
            match down.pass(chunk, &mut changed) {
                Passed::Same => out.extend_from_slice(chunk),
                Passed::Changed => out.extend_from_slice(&changed),
            }
        }
        out
    }

    #[test]
    fn only_the_answers_to_stats_are_marked() {
        // A body that reads like a command is a body.
        let requests = b"put 0 0 1 5\r\nstats\r\nstats\r\nreserve\r\nlist-tubes\r\nstats\r\n";
        let doc = "---\ncluster-via-node: \"n1\"\ncluster-via-role: leader\n";
        let answers = format!(
            "INSERTED 1\r\nOK {}\r\n{doc}\r\nRESERVED 1 5\r\nstats\r\nOK 8\r\n---\n- x\n\r\nOK {}\r\n{doc}\r\n",
            doc.len(),
            doc.len()
        );
        let marked = "---\ncluster-via-node: \"n2\"\ncluster-via-role: standby\n";
        let want = format!(
            "INSERTED 1\r\nOK {}\r\n{marked}\r\nRESERVED 1 5\r\nstats\r\nOK 8\r\n---\n- x\n\r\nOK {}\r\n{marked}\r\n",
            marked.len(),
            marked.len()
        );
        for step in [1, 3, 7, 1000] {
            let out = relayed(requests, answers.as_bytes(), step);
            assert_eq!(String::from_utf8_lossy(&out), want, "chunks of {step}");
        }
    }

    #[test]
    fn bodies_and_batches_are_skipped_by_their_length() {
        // Bodies that read like answers, a batch of two, then a stats.
        let requests = b"reserve-batch 2\r\npeek 1\r\nreserve-batch 5 0\r\nstats\r\n";
        let answers = "RESERVED_BATCH 2\r\nRESERVED 1 6\r\nOK 3\r\n\r\nRESERVED 2 2\r\nOK\r\n\
                       FOUND 1 6\r\nOK 3\r\n\r\nRESERVED_BATCH 0\r\nOK 4\r\n---\n\r\n";
        let kept = answers.strip_suffix("OK 4\r\n---\n\r\n").unwrap();
        let marked = "---\ncluster-via-node: \"n2\"\ncluster-via-role: standby\n";
        let want = format!("{kept}OK {}\r\n{marked}\r\n", marked.len());
        for step in [1, 2, 5, 1000] {
            let out = relayed(requests, answers.as_bytes(), step);
            assert_eq!(String::from_utf8_lossy(&out), want, "chunks of {step}");
        }
    }

    #[test]
    fn what_cannot_be_read_passes_untouched() {
        let answers = b"INSERTED 1\r\nNEW_THING 5\r\nOK 4\r\n---\n\r\n";
        let out = relayed(b"put 0 0 1 1\r\nx\r\nnew-thing\r\nstats\r\n", answers, 4);
        assert_eq!(out, answers);
    }
}
