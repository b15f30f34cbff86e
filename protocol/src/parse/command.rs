//! Reading one command line, exactly as beanstalkd's `prot.c` judges it.
//!
//! The command word is found by prefix, in beanstalkd's order, so `reserve-foo`
//! is a malformed `reserve` (`BAD_FORMAT`), not an unknown command, and
//! `quitxyz` quits. Commands without arguments must then match exactly. Each
//! argument rule below mirrors the matching `case` in `dispatch_cmd`:
//! whether text may follow a number, where spaces may go, and which refusals
//! beanstalkd still counts in `stats`.
//!
//! How the fraction extension changes the reading of a line is described in
//! the parent module.
//!
//! # tuber's extensions
//!
//! After a `put`'s size, where beanstalkd allows nothing, any number of
//! tags may follow, each after one or more spaces: `idp:<key>[:<ttl>]`,
//! `grp:<name>`, `aft:<name>`, `con:<key>[:<n>]` (names follow the tube
//! name rules; numbers are `u32`; `n` is at least 1). Trailing spaces after
//! a tag are allowed, as tuber allows them. Any other text is beanstalkd's
//! `BAD_FORMAT` (counted as a put, the body left unread), so no classic
//! line reads differently. The new command words (`reserve-batch`,
//! `delete-batch`, `flush-tube`, `flush-buried`, `peek-reserved`,
//! `stats-group`, `drain`, `undrain`) take their arguments like
//! beanstalkd's own commands (spaces before a number, none after);
//! `reserve-batch`'s optional timeout follows one space.
//!
//! # sprout's extension
//!
//! `fire <id> <pri> <ttr> <bytes>` reads like a `put` without its delay
//! (and without tags): a body and a CRLF follow; a size over the limit is
//! `JOB_TOO_BIG` (its body skipped), a missing CRLF `EXPECTED_CRLF`. The
//! word was `UNKNOWN_COMMAND`, so no classic line reads differently.
//!
//! # Authentication
//!
//! `auth <token>` is read apart ([`parse_auth_line`]), only by a server
//! with `--auth`: the token is every byte after the first space (none
//! too: that token is simply wrong), so a token may hold any byte a line
//! can. Without `--auth` the line stays `UNKNOWN_COMMAND`, as in
//! beanstalkd.

use std::time::Duration;

use bytes::Bytes;
use nom::bytes::complete::take_while1;
use nom::character::complete::char;
use nom::combinator::opt;
use nom::sequence::{preceded, tuple};

use super::number::{
    digits, kick_count, seconds, spaces, u32_field, u64_field, whole, whole_seconds,
};
use crate::{
    is_name_char, Command, JobId, Op, ProtocolError, Rejected, TagName, Tags, Token, TubeName,
    MAX_BATCH, MAX_SECONDS,
};

/// The longest `reserve-with-timeout` beanstalkd accepts: C's `INT_MAX` seconds.
const MAX_RESERVE_TIMEOUT: u64 = i32::MAX as u64;

/// The command words in the order beanstalkd tries them, and whether the word
/// must be followed by a space to match.
/// The extensions' words go before the words they start with.
const WORDS: [(Op, bool); 34] = [
    (Op::Put, true),
    (Op::Peek, true),
    (Op::PeekReady, false),
    (Op::PeekDelayed, false),
    (Op::PeekBuried, false),
    (Op::PeekReserved, false),
    (Op::ReserveWithTimeout, true),
    (Op::ReserveJob, true),
    (Op::ReserveBatch, true),
    (Op::Reserve, false),
    (Op::DeleteBatch, true),
    (Op::Delete, true),
    (Op::Release, true),
    (Op::Bury, true),
    (Op::Kick, true),
    (Op::KickJob, true),
    (Op::Touch, true),
    (Op::StatsJob, true),
    (Op::StatsTube, true),
    (Op::StatsGroup, true),
    (Op::Stats, false),
    (Op::Use, true),
    (Op::Watch, true),
    (Op::Ignore, true),
    (Op::ListTubesWatched, false),
    (Op::ListTubeUsed, false),
    (Op::ListTubes, false),
    (Op::Quit, false),
    (Op::PauseTube, false),
    (Op::FlushTube, true),
    (Op::FlushBuried, true),
    (Op::Fire, true),
    (Op::Drain, false),
    (Op::Undrain, false),
];

/// What a command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandLine {
    /// A complete command; nothing follows the line.
    Command(Command),
    /// A valid `put`: its body of `bytes` bytes and a CRLF follow the line.
    Put(PutHeader, Option<Box<Tags>>),
    /// A valid `fire` of job `id` (the header's delay is zero): its body
    /// and a CRLF follow.
    Fire(JobId, PutHeader),
    /// A `put` of more than the size limit: skip `bytes + 2` bytes, then
    /// answer `JOB_TOO_BIG` (counted as a put).
    TooBig { bytes: u32 },
    /// A refusal to answer now; no body follows.
    Rejected(Rejected),
}

/// The fields of a `put` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutHeader {
    pub pri: u32,
    pub delay: Duration,
    pub ttr: Duration,
    pub bytes: u32,
}

/// Reads one command line, without its CRLF. `max_job_size` is the largest
/// body a `put` may announce (the server's `-z`).
pub fn parse_command_line(line: &[u8], max_job_size: u32) -> CommandLine {
    if line.contains(&0) {
        return reject(ProtocolError::BadFormat, None);
    }
    let Some((op, args)) = split_word(line) else {
        return reject(ProtocolError::UnknownCommand, None);
    };
    let job_id = || whole(args, u64_field);
    let tube = || TubeName::new(args);
    let exact = |command| args.is_empty().then_some(command);
    let command = match op {
        Op::Put => return put(args, max_job_size),
        Op::Fire => return fire(args, max_job_size),
        // Not in WORDS: `parse_auth_line` reads it, when the server may.
        Op::Auth => return reject(ProtocolError::UnknownCommand, None),
        Op::PauseTube => return pause_tube(args),
        Op::Peek => job_id().map(Command::Peek),
        Op::ReserveJob => job_id().map(Command::ReserveJob),
        Op::Delete => job_id().map(Command::Delete),
        Op::Touch => job_id().map(Command::Touch),
        Op::KickJob => job_id().map(Command::KickJob),
        Op::StatsJob => job_id().map(Command::StatsJob),
        Op::Use => tube().map(Command::Use),
        Op::Watch => tube().map(Command::Watch),
        Op::Ignore => tube().map(Command::Ignore),
        Op::StatsTube => tube().map(Command::StatsTube),
        // beanstalkd never looks past the number here.
        Op::ReserveWithTimeout => seconds(MAX_RESERVE_TIMEOUT)(args)
            .ok()
            .map(|(_, timeout)| Command::ReserveWithTimeout(timeout)),
        Op::Release => whole(args, tuple((u64_field, u32_field, seconds(MAX_SECONDS))))
            .map(|(id, pri, delay)| Command::Release { id, pri, delay }),
        Op::Bury => {
            whole(args, tuple((u64_field, u32_field))).map(|(id, pri)| Command::Bury { id, pri })
        }
        Op::Kick => kick_count(args).map(Command::Kick),
        Op::Quit => Some(Command::Quit),
        Op::Reserve => exact(Command::Reserve),
        Op::PeekReady => exact(Command::PeekReady),
        Op::PeekDelayed => exact(Command::PeekDelayed),
        Op::PeekBuried => exact(Command::PeekBuried),
        Op::Stats => exact(Command::Stats),
        Op::ListTubes => exact(Command::ListTubes),
        Op::ListTubeUsed => exact(Command::ListTubeUsed),
        Op::ListTubesWatched => exact(Command::ListTubesWatched),
        Op::PeekReserved => exact(Command::PeekReserved),
        Op::FlushTube => tube().map(Command::FlushTube),
        Op::FlushBuried => tube().map(Command::FlushBuried),
        Op::Drain => exact(Command::Drain),
        Op::Undrain => exact(Command::Undrain),
        Op::StatsGroup => tag_name(args).map(Command::StatsGroup),
        Op::ReserveBatch => reserve_batch(args),
        Op::DeleteBatch => whole(args, nom::multi::many1(u64_field))
            .filter(|ids| ids.len() <= MAX_BATCH)
            .map(Command::DeleteBatch),
    };
    command.map_or_else(
        || reject(ProtocolError::BadFormat, None),
        CommandLine::Command,
    )
}

/// `reserve-batch <n>[ <timeout>]`: `n` from 1 to [`MAX_BATCH`]; the
/// timeout in seconds as `reserve-with-timeout` reads it, but with nothing
/// after it.
fn reserve_batch(args: &[u8]) -> Option<Command> {
    let timeout = preceded(char(' '), seconds(MAX_RESERVE_TIMEOUT));
    let (n, timeout) = whole(args, tuple((u32_field, opt(timeout))))?;
    if !(1..=MAX_BATCH as u32).contains(&n) {
        return None;
    }
    Some(match timeout {
        None => Command::ReserveBatch(n),
        Some(timeout) => Command::ReserveBatchWait { n, timeout },
    })
}

/// `auth <token>`, if `line` (without its CRLF) is one.
pub fn parse_auth_line(line: &[u8]) -> Option<Command> {
    let token = line.strip_prefix(b"auth ")?;
    if token.contains(&0) {
        return None;
    }
    Some(Command::Auth(Token::new(Bytes::copy_from_slice(token))))
}

/// The first command word `line` starts with, and the text after it.
fn split_word(line: &[u8]) -> Option<(Op, &[u8])> {
    WORDS.iter().find_map(|&(op, spaced)| {
        let rest = line.strip_prefix(op.name().as_bytes())?;
        if spaced {
            rest.strip_prefix(b" ").map(|args| (op, args))
        } else {
            Some((op, rest))
        }
    })
}

fn reject(error: ProtocolError, counted: Option<Op>) -> CommandLine {
    CommandLine::Rejected(Rejected { error, counted })
}

/// `fire <id> <pri> <ttr> <bytes>`: a `put`'s checks, without delay or tags.
fn fire(args: &[u8], max_job_size: u32) -> CommandLine {
    let Some((id, pri, ttr, bytes)) = whole(
        args,
        tuple((u64_field, u32_field, whole_seconds, u32_field)),
    ) else {
        return reject(ProtocolError::BadFormat, None);
    };
    if bytes > max_job_size {
        return CommandLine::TooBig { bytes };
    }
    let header = PutHeader {
        pri,
        delay: Duration::ZERO,
        ttr,
        bytes,
    };
    CommandLine::Fire(id, header)
}

/// `put <pri> <delay> <ttr> <bytes>`, in beanstalkd's order of checks.
fn put(args: &[u8], max_job_size: u32) -> CommandLine {
    let fields = tuple((u32_field, seconds(MAX_SECONDS), whole_seconds, u32_field))(args);
    let Ok((rest, (pri, delay, ttr, bytes))) = fields else {
        return reject(ProtocolError::BadFormat, None);
    };
    if bytes > max_job_size {
        return CommandLine::TooBig { bytes };
    }
    let tags = match rest {
        [] => None,
        _ => match put_tags(rest) {
            Some(tags) => Some(Box::new(tags)),
            None => return reject(ProtocolError::BadFormat, Some(Op::Put)),
        },
    };
    CommandLine::Put(
        PutHeader {
            pri,
            delay,
            ttr,
            bytes,
        },
        tags,
    )
}

/// The tags after a `put`'s size: at least one, each after spaces, and
/// nothing else but trailing spaces.
fn put_tags(mut rest: &[u8]) -> Option<Tags> {
    let mut tags = Tags::default();
    let mut first = true;
    loop {
        let trimmed = rest.strip_prefix(b" ")?;
        let start = trimmed.iter().position(|&b| b != b' ');
        let Some(start) = start else {
            // Trailing spaces, after at least one tag.
            return (!first).then_some(tags);
        };
        first = false;
        let token = &trimmed[start..];
        let end = token.iter().position(|&b| b == b' ').unwrap_or(token.len());
        put_tag(&token[..end], &mut tags)?;
        rest = &token[end..];
        if rest.is_empty() {
            return Some(tags);
        }
    }
}

/// One `name:value` tag into `tags`.
fn put_tag(tag: &[u8], tags: &mut Tags) -> Option<()> {
    let (name, value) = (tag.get(..4)?, &tag[4..]);
    match name {
        b"idp:" => tags.idp = Some(name_and_number(value, 0)?),
        b"grp:" => tags.grp = Some(tag_name(value)?),
        b"aft:" => tags.aft = Some(tag_name(value)?),
        b"con:" => tags.con = Some(name_and_number(value, 1).filter(|(_, n)| *n > 0)?),
        _ => return None,
    }
    Some(())
}

/// `<name>[:<u32>]`, the number `default` when absent.
fn name_and_number(value: &[u8], default: u32) -> Option<(TagName, u32)> {
    match value.iter().position(|&b| b == b':') {
        None => Some((tag_name(value)?, default)),
        Some(at) => {
            let n = whole(&value[at + 1..], digits)?;
            Some((tag_name(&value[..at])?, u32::try_from(n).ok()?))
        }
    }
}

/// A key or group name: the tube name rules.
fn tag_name(value: &[u8]) -> Option<TagName> {
    TubeName::new(value).map(|name| name.as_str().into())
}

/// `pause-tube <tube> <delay>`: the name is a run of name characters after
/// optional spaces (even with no space after the command word); an invalid
/// name found that way is refused but still counted.
fn pause_tube(args: &[u8]) -> CommandLine {
    let name = preceded(spaces, take_while1(is_name_char));
    let Some((name, delay)) = whole(args, tuple((name, seconds(MAX_SECONDS)))) else {
        return reject(ProtocolError::BadFormat, None);
    };
    match TubeName::new(name) {
        Some(tube) => CommandLine::Command(Command::PauseTube { tube, delay }),
        None => reject(ProtocolError::BadFormat, Some(Op::PauseTube)),
    }
}
