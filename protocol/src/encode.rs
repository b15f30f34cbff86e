//! Writing replies and commands as bytes.
//!
//! Both writers append to a caller's `BytesMut`, so a connection can queue many
//! answers and send them in one write. Nothing is allocated per message beyond
//! the buffer's own growth: numbers go through `itoa`'s stack buffer, bodies are
//! copied once into the output.
//!
//! The writers do not validate: a delay beyond [`MAX_SECONDS`](crate::MAX_SECONDS)
//! or a line beyond [`MAX_LINE_LEN`](crate::MAX_LINE_LEN) is written as is,
//! and a server answers it `BAD_FORMAT`.

use std::time::Duration;

use bytes::{BufMut, BytesMut};

use crate::{Command, Response, Tags};

/// Appends `response` to `dst`.
pub fn encode_response(response: &Response, dst: &mut BytesMut) {
    if let Some(word) = fixed_word(response) {
        dst.reserve(word.len() + 2);
        dst.put_slice(word);
        return dst.put_slice(b"\r\n");
    }
    match response {
        Response::Inserted(id) => line_with_number(dst, b"INSERTED ", *id),
        Response::BuriedId(id) => line_with_number(dst, b"BURIED ", *id),
        Response::Watching(count) => line_with_number(dst, b"WATCHING ", (*count).into()),
        Response::KickedCount(count) => line_with_number(dst, b"KICKED ", (*count).into()),
        Response::Using(tube) => {
            dst.reserve(tube.as_bytes().len() + 8);
            dst.put_slice(b"USING ");
            dst.put_slice(tube.as_bytes());
            dst.put_slice(b"\r\n");
        }
        Response::Reserved { id, body } => job(dst, b"RESERVED ", *id, body),
        Response::Found { id, body } => job(dst, b"FOUND ", *id, body),
        Response::Ok(body) => {
            dst.reserve(body.len() + 16);
            dst.put_slice(b"OK ");
            number(dst, body.len() as u64);
            with_body(dst, body);
        }
        Response::InsertedDup { id, state, pri } => {
            dst.reserve(48);
            dst.put_slice(b"INSERTED ");
            number(dst, *id);
            dst.put_u8(b' ');
            dst.put_slice(state.name().as_bytes());
            if let Some(pri) = pri {
                arg(dst, (*pri).into());
            }
            dst.put_slice(b"\r\n");
        }
        Response::ReservedBatch(jobs) => {
            line_with_number(dst, b"RESERVED_BATCH ", jobs.len() as u64);
            for (id, body) in jobs {
                job(dst, b"RESERVED ", *id, body);
            }
        }
        Response::DeletedBatch { deleted, not_found } => {
            dst.reserve(40);
            dst.put_slice(b"DELETED_BATCH ");
            number(dst, (*deleted).into());
            arg(dst, (*not_found).into());
            dst.put_slice(b"\r\n");
        }
        Response::Flushed(count) => line_with_number(dst, b"FLUSHED ", *count),
        _ => unreachable!("every other reply is a fixed word"),
    }
}

/// The text of a reply that is one fixed word, without its CRLF.
pub(crate) fn fixed_word(response: &Response) -> Option<&'static [u8]> {
    Some(match response {
        Response::Buried => b"BURIED",
        Response::ExpectedCrlf => b"EXPECTED_CRLF",
        Response::JobTooBig => b"JOB_TOO_BIG",
        Response::Draining => b"DRAINING",
        Response::NotDraining => b"NOT_DRAINING",
        Response::DeadlineSoon => b"DEADLINE_SOON",
        Response::TimedOut => b"TIMED_OUT",
        Response::Deleted => b"DELETED",
        Response::NotFound => b"NOT_FOUND",
        Response::Released => b"RELEASED",
        Response::Touched => b"TOUCHED",
        Response::NotIgnored => b"NOT_IGNORED",
        Response::Kicked => b"KICKED",
        Response::Paused => b"PAUSED",
        Response::OutOfMemory => b"OUT_OF_MEMORY",
        Response::InternalError => b"INTERNAL_ERROR",
        Response::BadFormat => b"BAD_FORMAT",
        Response::UnknownCommand => b"UNKNOWN_COMMAND",
        Response::Authenticated => b"AUTHENTICATED",
        Response::Unauthorized => b"UNAUTHORIZED",
        Response::AuthRequired => b"AUTH_REQUIRED",
        Response::Forbidden => b"FORBIDDEN",
        _ => return None,
    })
}

/// Appends `command` to `dst`. A TTR with a fraction of a second is rounded up
/// to whole seconds, the only form the protocol has for it.
pub fn encode_command(command: &Command, dst: &mut BytesMut) {
    dst.reserve(64);
    dst.put_slice(command.op().name().as_bytes());
    match command {
        Command::Put {
            pri,
            delay,
            ttr,
            body,
            tags,
        } => {
            arg(dst, (*pri).into());
            seconds_arg(dst, *delay);
            ttr_arg(dst, *ttr);
            arg(dst, body.len() as u64);
            if let Some(tags) = tags {
                put_tags(dst, tags);
            }
            line_then_body(dst, body);
        }
        Command::Fire { id, pri, ttr, body } => {
            arg(dst, *id);
            arg(dst, (*pri).into());
            ttr_arg(dst, *ttr);
            arg(dst, body.len() as u64);
            line_then_body(dst, body);
        }
        Command::Use(tube)
        | Command::Watch(tube)
        | Command::Ignore(tube)
        | Command::StatsTube(tube)
        | Command::FlushTube(tube)
        | Command::FlushBuried(tube) => word_arg(dst, tube.as_bytes()),
        Command::PauseTube { tube, delay } => {
            word_arg(dst, tube.as_bytes());
            seconds_arg(dst, *delay);
        }
        Command::ReserveWithTimeout(timeout) => seconds_arg(dst, *timeout),
        Command::ReserveJob(id)
        | Command::Delete(id)
        | Command::Touch(id)
        | Command::Peek(id)
        | Command::KickJob(id)
        | Command::StatsJob(id) => arg(dst, *id),
        Command::Release { id, pri, delay } => {
            arg(dst, *id);
            arg(dst, (*pri).into());
            seconds_arg(dst, *delay);
        }
        Command::Bury { id, pri } => {
            arg(dst, *id);
            arg(dst, (*pri).into());
        }
        Command::Kick(count) | Command::ReserveBatch(count) => arg(dst, (*count).into()),
        Command::ReserveBatchWait { n, timeout } => {
            arg(dst, (*n).into());
            seconds_arg(dst, *timeout);
        }
        Command::DeleteBatch(ids) => {
            dst.reserve(ids.len() * 21);
            ids.iter().for_each(|&id| arg(dst, id));
        }
        Command::StatsGroup(name) => word_arg(dst, name.as_bytes()),
        Command::Auth(token) => {
            dst.reserve(token.as_bytes().len() + 3);
            word_arg(dst, token.as_bytes());
        }
        Command::Reserve
        | Command::PeekReady
        | Command::PeekDelayed
        | Command::PeekBuried
        | Command::Stats
        | Command::ListTubes
        | Command::ListTubeUsed
        | Command::ListTubesWatched
        | Command::PeekReserved
        | Command::Drain
        | Command::Undrain
        | Command::Quit => {}
    }
    dst.put_slice(b"\r\n");
}

/// ` idp:<key>:<ttl> grp:<name> aft:<name> con:<key>:<n>`, those present.
fn put_tags(dst: &mut BytesMut, tags: &Tags) {
    let mut tag = |name: &[u8], value: &str, n: Option<u32>| {
        dst.put_u8(b' ');
        dst.put_slice(name);
        dst.put_slice(value.as_bytes());
        if let Some(n) = n {
            dst.put_u8(b':');
            number(dst, n.into());
        }
    };
    if let Some((key, ttl)) = &tags.idp {
        tag(b"idp:", key, Some(*ttl));
    }
    if let Some(name) = &tags.grp {
        tag(b"grp:", name, None);
    }
    if let Some(name) = &tags.aft {
        tag(b"aft:", name, None);
    }
    if let Some((key, n)) = &tags.con {
        tag(b"con:", key, Some(*n));
    }
}

fn number(dst: &mut BytesMut, n: u64) {
    dst.put_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// A space, then `n`.
fn arg(dst: &mut BytesMut, n: u64) {
    dst.put_u8(b' ');
    number(dst, n);
}

/// A space, then `d` in seconds (see [`seconds`]).
fn seconds_arg(dst: &mut BytesMut, d: Duration) {
    dst.put_u8(b' ');
    seconds(dst, d);
}

/// A TTR in whole seconds, a fraction rounded up (the protocol has no
/// fractional TTR; a shorter one would give a worker less time).
fn ttr_arg(dst: &mut BytesMut, ttr: Duration) {
    arg(dst, ttr.as_secs() + u64::from(ttr.subsec_nanos() > 0));
}

/// A space, then `word` (a tube, a group, a token).
fn word_arg(dst: &mut BytesMut, word: &[u8]) {
    dst.put_u8(b' ');
    dst.put_slice(word);
}

/// The CRLF ending a command's line, then its body (whose own CRLF
/// ends the command).
fn line_then_body(dst: &mut BytesMut, body: &[u8]) {
    dst.reserve(body.len() + 4);
    dst.put_slice(b"\r\n");
    dst.put_slice(body);
}

/// Whole seconds as an integer, anything else as a decimal fraction with
/// no trailing zeros (`1.5`, `0.000000001`), which the parser reads back exactly.
fn seconds(dst: &mut BytesMut, d: Duration) {
    number(dst, d.as_secs());
    let nanos = d.subsec_nanos();
    if nanos > 0 {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(nanos);
        dst.put_u8(b'.');
        dst.put_bytes(b'0', 9 - digits.len());
        dst.put_slice(digits.trim_end_matches('0').as_bytes());
    }
}

fn line_with_number(dst: &mut BytesMut, word: &[u8], n: u64) {
    dst.reserve(word.len() + 22);
    dst.put_slice(word);
    number(dst, n);
    dst.put_slice(b"\r\n");
}

/// `RESERVED`/`FOUND`: the word, the id, the body length, the body.
fn job(dst: &mut BytesMut, word: &[u8], id: u64, body: &[u8]) {
    dst.reserve(word.len() + body.len() + 44);
    dst.put_slice(word);
    number(dst, id);
    arg(dst, body.len() as u64);
    with_body(dst, body);
}

/// The CRLF ending a line, the body, and the CRLF ending the body.
fn with_body(dst: &mut BytesMut, body: &[u8]) {
    dst.put_slice(b"\r\n");
    dst.put_slice(body);
    dst.put_slice(b"\r\n");
}
