//! One group commit as one atomic batch on the stream, fenced.
//!
//! JetStream's atomic batch (2.12+, `allow_atomic` on the stream): every
//! message carries `Nats-Batch-Id` and its place (`Nats-Batch-Sequence`,
//! from 1); the last one also `Nats-Batch-Commit: 1` and is the only one
//! answered, with the sequence of the batch's last message once a quorum of
//! the stream's servers holds all of it, or an error and nothing stored.
//! The first message also carries `Nats-Expected-Last-Sequence`: the batch
//! is refused unless the stream ends where this leader last wrote; and,
//! for a leader's batches, a fence subject that must still hold this
//! leader's claim (`fence.rs`), so a deposed leader (another has claimed
//! since) cannot write at all, not even a batch it pipelined.

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::Context;
use async_nats::jetstream::ErrorCode;
use async_nats::{Client, HeaderMap};
use bytes::Bytes;

use super::fence::Fence;

/// JetStream's limit on the messages of one atomic batch.
pub const MAX_BATCH: usize = 1000;

/// Where a batch must land: right after stream sequence `after` and, for
/// a leader's batches (not its claim), while its `fence` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub after: u64,
    pub fence: Option<Fence>,
}

/// The headers of message `i` (from 0) of a batch of `n` landing on
/// `chain`: the server checks expectations on the first message only.
pub fn headers(id: &str, i: usize, n: usize, chain: &Chain) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("Nats-Batch-Id", id);
    h.insert("Nats-Batch-Sequence", (i + 1).to_string().as_str());
    if i == 0 {
        let after = chain.after.to_string();
        h.insert("Nats-Expected-Last-Sequence", after.as_str());
        if let Some(fence) = &chain.fence {
            let seq = fence.seq.to_string();
            h.insert("Nats-Expected-Last-Subject-Sequence", seq.as_str());
            let subject = fence.subject.as_str();
            h.insert("Nats-Expected-Last-Subject-Sequence-Subject", subject);
        }
    }
    if i + 1 == n {
        h.insert("Nats-Batch-Commit", "1");
    }
    h
}

/// A batch on its way: its answer, and the stream sequence it must end at.
pub struct Sent {
    ack: Pin<Box<dyn Future<Output = Result<PublishAck, PublishError>> + Send>>,
    id: String,
    want: u64,
}

/// Sends `messages` (at most [`MAX_BATCH`]) as one atomic batch landing on
/// `chain`, without waiting for the answer: batches are chained, so the
/// next may go before this one is acknowledged.
pub async fn send(
    client: &Client,
    js: &Context,
    id: String,
    messages: &[(String, Bytes)],
    chain: &Chain,
) -> Result<Sent, Refusal> {
    let n = messages.len();
    assert!((1..=MAX_BATCH).contains(&n), "a batch of {n} messages");
    for (i, (subject, payload)) in messages[..n - 1].iter().enumerate() {
        client
            .publish_with_headers(subject.clone(), headers(&id, i, n, chain), payload.clone())
            .await
            .map_err(|e| Refusal::Passing(format!("cannot send batch {id}: {e}")))?;
    }
    let (subject, payload) = &messages[n - 1];
    let commit = PublishMessage::build()
        .headers(headers(&id, n - 1, n, chain))
        .payload(payload.clone());
    let ack = js
        .send_publish(subject.clone(), commit)
        .await
        .map_err(|e| Refusal::of(&id, &e))?
        .into_future();
    Ok(Sent {
        ack,
        id,
        want: chain.after + n as u64,
    })
}

/// Why a batch was not acknowledged.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The stream could not take it now (no leader during an election, a
    /// lost connection, no answer in time): it may or may not be stored,
    /// and sending it again, fenced the same way, tells which.
    #[error("{0}")]
    Passing(String),
    /// The stream does not end where the batch was chained, or its fence
    /// subject moved, or another expectation on it is in process (a resent
    /// batch behind its first try): someone else wrote, or this very
    /// batch is already in or on its way.
    #[error("{0}")]
    Fenced(String),
    /// Anything else: stop.
    #[error("{0}")]
    Failed(String),
}

impl Refusal {
    fn of(id: &str, e: &PublishError) -> Refusal {
        let why = format!("batch {id}: {e}");
        match e.kind() {
            PublishErrorKind::StreamNotFound
            | PublishErrorKind::TimedOut
            | PublishErrorKind::BrokenPipe
            | PublishErrorKind::MaxAckPending => Refusal::Passing(why),
            PublishErrorKind::WrongLastSequence => Refusal::Fenced(why),
            _ if in_process(e) => Refusal::Fenced(why),
            _ => Refusal::Failed(why),
        }
    }
}

impl Sent {
    /// The stream sequence this batch ends at, once acknowledged.
    pub fn end(&self) -> u64 {
        self.want
    }

    /// Waits for the stream's answer: the batch is stored where it was
    /// chained, or this is why not.
    pub async fn settled(&mut self) -> Result<(), Refusal> {
        let ack = (&mut self.ack)
            .await
            .map_err(|e| Refusal::of(&self.id, &e))?;
        if ack.sequence != self.want {
            return Err(Refusal::Failed(format!(
                "batch {} ended at stream sequence {}, not {}: someone else writes to the stream",
                self.id, ack.sequence, self.want
            )));
        }
        Ok(())
    }
}

/// Whether the server refused an expectation on a fence subject because
/// another one on it is in process (10164, which async-nats does not name).
fn in_process(e: &PublishError) -> bool {
    let source = std::error::Error::source(e);
    let api = source.and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>());
    api.is_some_and(|api| api.error_code() == ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT)
}

/// Sends one batch and waits for it.
pub async fn batch(
    client: &Client,
    js: &Context,
    id: String,
    messages: &[(String, Bytes)],
    chain: &Chain,
) -> Result<u64, Refusal> {
    let mut sent = send(client, js, id, messages, chain).await?;
    sent.settled().await?;
    Ok(sent.end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(h: &HeaderMap) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = h
            .iter()
            .map(|(k, vs)| (k.to_string(), vs[0].to_string()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_first_message_is_fenced_and_the_last_commits() {
        let chain = Chain {
            after: 41,
            fence: None,
        };
        let h = |i, n| names(&headers("b1", i, n, &chain));
        let s = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            h(0, 1),
            [
                s("Nats-Batch-Commit", "1"),
                s("Nats-Batch-Id", "b1"),
                s("Nats-Batch-Sequence", "1"),
                s("Nats-Expected-Last-Sequence", "41"),
            ]
        );
        assert_eq!(
            h(0, 3),
            [
                s("Nats-Batch-Id", "b1"),
                s("Nats-Batch-Sequence", "1"),
                s("Nats-Expected-Last-Sequence", "41"),
            ]
        );
        assert_eq!(
            h(1, 3),
            [s("Nats-Batch-Id", "b1"), s("Nats-Batch-Sequence", "2")]
        );
        assert_eq!(
            h(2, 3),
            [
                s("Nats-Batch-Commit", "1"),
                s("Nats-Batch-Id", "b1"),
                s("Nats-Batch-Sequence", "3"),
            ]
        );
    }

    #[test]
    fn a_leaders_batch_is_also_fenced_on_its_fence_subject() {
        let chain = Chain {
            after: 41,
            fence: Some(Fence {
                subject: "sprout.jobs.f.3".into(),
                seq: 20,
            }),
        };
        let s = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            names(&headers("b1", 0, 2, &chain)),
            [
                s("Nats-Batch-Id", "b1"),
                s("Nats-Batch-Sequence", "1"),
                s("Nats-Expected-Last-Sequence", "41"),
                s("Nats-Expected-Last-Subject-Sequence", "20"),
                s(
                    "Nats-Expected-Last-Subject-Sequence-Subject",
                    "sprout.jobs.f.3"
                ),
            ]
        );
        assert_eq!(
            names(&headers("b1", 1, 2, &chain)),
            [
                s("Nats-Batch-Commit", "1"),
                s("Nats-Batch-Id", "b1"),
                s("Nats-Batch-Sequence", "2"),
            ]
        );
    }

    #[test]
    fn refusals_by_what_the_server_said() {
        let api = |code: u64| {
            let text = format!(r#"{{"code":400,"err_code":{code},"description":"d"}}"#);
            serde_json::from_str::<async_nats::jetstream::Error>(&text).unwrap()
        };
        let fenced = |r: &Refusal| matches!(r, Refusal::Fenced(_));
        let passing = |r: &Refusal| matches!(r, Refusal::Passing(_));
        let failed = |r: &Refusal| matches!(r, Refusal::Failed(_));
        type Is = fn(&Refusal) -> bool;
        let table: [(PublishError, Is); 5] = [
            (
                PublishError::with_source(PublishErrorKind::WrongLastSequence, api(10071)),
                fenced,
            ),
            (
                PublishError::with_source(PublishErrorKind::Other, api(10164)),
                fenced,
            ),
            (
                PublishError::with_source(PublishErrorKind::Other, api(10199)),
                failed,
            ),
            (PublishError::new(PublishErrorKind::TimedOut), passing),
            (PublishError::new(PublishErrorKind::StreamNotFound), passing),
        ];
        for (error, is) in table {
            let refusal = Refusal::of("b1", &error);
            assert!(is(&refusal), "{error:?}: {refusal:?}");
        }
    }
}
