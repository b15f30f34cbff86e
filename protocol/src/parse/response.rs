//! Reading one reply line, on the client side.
//!
//! The client is strict: a number is plain digits that fit its field, words
//! are separated by exactly one space, and anything beanstalkd would not send
//! is [`MalformedResponse`]. Replies with a body (`RESERVED`, `FOUND`, `OK`)
//! only announce its length here; the codec splits the body off its buffer.

use std::fmt;

use bytes::Bytes;
use nom::character::complete::char;
use nom::sequence::separated_pair;

use super::number::{digits, whole};
use crate::encode::fixed_word;
use crate::{DupState, JobId, Response, TubeName};

/// Every reply that is one fixed word.
const FIXED: [Response; 22] = [
    Response::Buried,
    Response::ExpectedCrlf,
    Response::JobTooBig,
    Response::Draining,
    Response::NotDraining,
    Response::DeadlineSoon,
    Response::TimedOut,
    Response::Deleted,
    Response::NotFound,
    Response::Released,
    Response::Touched,
    Response::NotIgnored,
    Response::Kicked,
    Response::Paused,
    Response::OutOfMemory,
    Response::InternalError,
    Response::BadFormat,
    Response::UnknownCommand,
    Response::Authenticated,
    Response::Unauthorized,
    Response::AuthRequired,
    Response::Forbidden,
];

/// What a reply line says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResponseHead {
    /// The whole reply.
    Line(Response),
    /// A reply whose body of `bytes` bytes and a CRLF follow the line.
    WithBody { kind: BodyKind, bytes: u32 },
    /// `RESERVED_BATCH <n>`: `n` `RESERVED` replies follow, which make up
    /// the one [`Response::ReservedBatch`].
    Batch(u32),
}

/// Which reply a body belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    Reserved(JobId),
    Found(JobId),
    Ok,
}

impl BodyKind {
    /// The complete reply, once its body has arrived.
    pub fn with_body(self, body: Bytes) -> Response {
        match self {
            BodyKind::Reserved(id) => Response::Reserved { id, body },
            BodyKind::Found(id) => Response::Found { id, body },
            BodyKind::Ok => Response::Ok(body),
        }
    }
}

/// A reply the client cannot read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MalformedResponse;

impl fmt::Display for MalformedResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("malformed beanstalk reply")
    }
}

impl std::error::Error for MalformedResponse {}

/// Reads one reply line, without its CRLF.
pub fn parse_response_line(line: &[u8]) -> Result<ResponseHead, MalformedResponse> {
    if let Some(fixed) = FIXED.iter().find(|r| fixed_word(r) == Some(line)) {
        return Ok(ResponseHead::Line(fixed.clone()));
    }
    let at = line
        .iter()
        .position(|&b| b == b' ')
        .ok_or(MalformedResponse)?;
    let (word, args) = (&line[..at], &line[at + 1..]);
    let body = |kind: fn(JobId) -> BodyKind| {
        let (id, bytes) = whole(args, separated_pair(digits, char(' '), digits))?;
        Some(ResponseHead::WithBody {
            kind: kind(id),
            bytes: u32::try_from(bytes).ok()?,
        })
    };
    let head = match word {
        b"INSERTED" => whole(args, digits)
            .map(Response::Inserted)
            .or_else(|| inserted_dup(args)),
        b"DELETED_BATCH" => whole(args, separated_pair(digits, char(' '), digits)).and_then(
            |(deleted, not_found)| {
                Some(Response::DeletedBatch {
                    deleted: u32::try_from(deleted).ok()?,
                    not_found: u32::try_from(not_found).ok()?,
                })
            },
        ),
        b"FLUSHED" => whole(args, digits).map(Response::Flushed),
        b"RESERVED_BATCH" => {
            return count(args)
                .map(ResponseHead::Batch)
                .ok_or(MalformedResponse);
        }
        b"BURIED" => whole(args, digits).map(Response::BuriedId),
        b"WATCHING" => count(args).map(Response::Watching),
        b"KICKED" => count(args).map(Response::KickedCount),
        b"USING" => TubeName::new(args).map(Response::Using),
        b"RESERVED" => return body(BodyKind::Reserved).ok_or(MalformedResponse),
        b"FOUND" => return body(BodyKind::Found).ok_or(MalformedResponse),
        b"OK" => {
            let bytes = count(args).ok_or(MalformedResponse)?;
            return Ok(ResponseHead::WithBody {
                kind: BodyKind::Ok,
                bytes,
            });
        }
        _ => None,
    };
    head.map(ResponseHead::Line).ok_or(MalformedResponse)
}

/// `<id> <STATE>[ <pri>]`: a deduplicated put (tuber's dialect).
fn inserted_dup(args: &[u8]) -> Option<Response> {
    let mut words = args.split(|&b| b == b' ');
    let id = whole(words.next()?, digits)?;
    let state = match words.next()? {
        b"READY" => DupState::Ready,
        b"RESERVED" => DupState::Reserved,
        b"DELAYED" => DupState::Delayed,
        b"BURIED" => DupState::Buried,
        b"DELETED" => DupState::Deleted,
        _ => return None,
    };
    let pri = match words.next() {
        None => None,
        Some(pri) => Some(u32::try_from(whole(pri, digits)?).ok()?),
    };
    words
        .next()
        .is_none()
        .then_some(Response::InsertedDup { id, state, pri })
}

/// The whole of `args` as a `u32`.
fn count(args: &[u8]) -> Option<u32> {
    whole(args, digits).and_then(|n| u32::try_from(n).ok())
}
