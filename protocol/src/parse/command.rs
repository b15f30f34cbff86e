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

use std::time::Duration;

use nom::bytes::complete::take_while1;
use nom::sequence::{preceded, tuple};

use super::number::{kick_count, seconds, spaces, u32_field, u64_field, whole, whole_seconds};
use crate::{is_name_char, Command, Op, ProtocolError, Rejected, TubeName, MAX_SECONDS};

/// The longest `reserve-with-timeout` beanstalkd accepts: C's `INT_MAX` seconds.
const MAX_RESERVE_TIMEOUT: u64 = i32::MAX as u64;

/// The command words in the order beanstalkd tries them, and whether the word
/// must be followed by a space to match.
const WORDS: [(Op, bool); 25] = [
    (Op::Put, true),
    (Op::Peek, true),
    (Op::PeekReady, false),
    (Op::PeekDelayed, false),
    (Op::PeekBuried, false),
    (Op::ReserveWithTimeout, true),
    (Op::ReserveJob, true),
    (Op::Reserve, false),
    (Op::Delete, true),
    (Op::Release, true),
    (Op::Bury, true),
    (Op::Kick, true),
    (Op::KickJob, true),
    (Op::Touch, true),
    (Op::StatsJob, true),
    (Op::StatsTube, true),
    (Op::Stats, false),
    (Op::Use, true),
    (Op::Watch, true),
    (Op::Ignore, true),
    (Op::ListTubesWatched, false),
    (Op::ListTubeUsed, false),
    (Op::ListTubes, false),
    (Op::Quit, false),
    (Op::PauseTube, false),
];

/// What a command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandLine {
    /// A complete command; nothing follows the line.
    Command(Command),
    /// A valid `put`: its body of `bytes` bytes and a CRLF follow the line.
    Put(PutHeader),
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
    };
    command.map_or_else(
        || reject(ProtocolError::BadFormat, None),
        CommandLine::Command,
    )
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

/// `put <pri> <delay> <ttr> <bytes>`, in beanstalkd's order of checks.
fn put(args: &[u8], max_job_size: u32) -> CommandLine {
    let fields = tuple((u32_field, seconds(MAX_SECONDS), whole_seconds, u32_field))(args);
    let Ok((rest, (pri, delay, ttr, bytes))) = fields else {
        return reject(ProtocolError::BadFormat, None);
    };
    if bytes > max_job_size {
        return CommandLine::TooBig { bytes };
    }
    if !rest.is_empty() {
        return reject(ProtocolError::BadFormat, Some(Op::Put));
    }
    CommandLine::Put(PutHeader {
        pri,
        delay,
        ttr,
        bytes,
    })
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
