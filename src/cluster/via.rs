//! A standby's mark on the `stats` answers it passes on: the leader's
//! figures, but `cluster-via-node` and `cluster-via-role` name the node
//! the client reached, so every node does not seem to be the leader.
//!
//! Why here and not on the leader: a relay without peer TLS is a plain
//! connection to the leader's beanstalk port, which cannot tell a standby
//! from a client. So the relay reads what passes (it still passes every
//! other byte as it came): the client's requests with the server's
//! decoder, to know which answer belongs to a `stats`, and the leader's
//! answers with the client's decoder, one whole answer at a time (every
//! request has exactly one, in order; `quit` none, and the leader closes).
//! Answers it cannot read (a newer leader's) it passes on untouched from
//! there on.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use sprout_protocol::codec::{ClientCodec, ServerCodec};
use sprout_protocol::{Command, Response};
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
        codec: ClientCodec::new(),
        raw: BytesMut::new(),
        buf: BytesMut::new(),
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

/// The leader's side: what to pass on of each read.
pub struct Answers {
    codec: ClientCodec,
    /// The bytes of the answer being read, as they came.
    raw: BytesMut,
    /// The same bytes, for the decoder (which takes them apart).
    buf: BytesMut,
    node: String,
    pending: Pending,
}

impl Answers {
    /// Adds `bytes` to what is to go to the client: each whole answer, a
    /// `stats` answer marked.
    pub fn pass(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        let mut pending = self.pending.lock().expect("the relay's lock");
        let Some(queue) = pending.as_mut() else {
            out.extend_from_slice(&self.raw.split());
            out.extend_from_slice(bytes);
            return;
        };
        self.raw.extend_from_slice(bytes);
        self.buf.extend_from_slice(bytes);
        loop {
            match self.codec.decode(&mut self.buf) {
                Ok(Some(answer)) => {
                    // What the decoder took since the answer began.
                    let whole = self.raw.split_to(self.raw.len() - self.buf.len());
                    match (queue.pop_front(), answer) {
                        (Some(true), Response::Ok(doc)) => {
                            let doc = mark(&doc, &self.node);
                            out.extend_from_slice(format!("OK {}\r\n", doc.len()).as_bytes());
                            out.extend_from_slice(&doc);
                            out.extend_from_slice(b"\r\n");
                        }
                        _ => out.extend_from_slice(&whole),
                    }
                }
                Ok(None) => return,
                Err(_) => {
                    *pending = None;
                    out.extend_from_slice(&self.raw.split());
                    self.buf = BytesMut::new();
                    return;
                }
            }
        }
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
            down.pass(chunk, &mut out);
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
    fn what_cannot_be_read_passes_untouched() {
        let answers = b"INSERTED 1\r\nNEW_THING 5\r\nOK 4\r\n---\n\r\n";
        let out = relayed(b"put 0 0 1 1\r\nx\r\nnew-thing\r\nstats\r\n", answers, 4);
        assert_eq!(out, answers);
    }
}
