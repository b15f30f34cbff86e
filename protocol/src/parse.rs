//! Parsers for both directions of the protocol, built with `nom`.
//!
//! Framing and meaning are split: [`find_line_end`] looks at the front of a
//! read buffer and says whether a whole line is there, whether more bytes are
//! needed, or whether the line is too long; [`parse_command_line`] and
//! [`parse_response_line`] then read one complete line. Bodies are never
//! parsed here: the caller (see [`crate::codec`]) is told how many bytes
//! follow and takes them off its buffer.
//!
//! # Line framing, and two beanstalkd bugs not copied
//!
//! A line ends at the first `\r\n` and may be [`MAX_LINE_LEN`] bytes long,
//! CRLF included. beanstalkd finds the end of a line by looking only at the
//! *first* `\r` of its 224-byte buffer, and discards that buffer in whole
//! 224-byte pieces while skipping an over-long line. That has two effects we
//! do not reproduce:
//!
//! - a CRLF whose `\r` is byte 224 and whose `\n` is byte 225 is missed, so the
//!   over-long line swallows the next command too; here that line is answered
//!   `BAD_FORMAT` at its own CRLF;
//! - a stray `\r` that is not followed by `\n` hides every later CRLF in the
//!   buffer, and the connection waits forever; here the line ends at the first
//!   `\r\n`, and the stray `\r` is just a byte of the line, which the argument
//!   rules then judge (`use a\rb` is `BAD_FORMAT`, `quit\r` is `quit`).
//!
//! # Fractions of a second
//!
//! The delays of `put`, `release` and `pause-tube` and the timeout of
//! `reserve-with-timeout` may carry a decimal fraction and an exponent
//! (`0.25`, `1.5`, `1.25e-1`), read exactly and rounded up to the nanosecond;
//! [`parse_seconds`] reads the same syntax on its own. A number must start
//! with a digit (`.5` is refused: beanstalkd needs no space before a field, so
//! `put 1.5 2 3` would otherwise read as priority 1 and a delay of 0.5 s). The
//! bounds are beanstalkd's, applied to the exact value.
//!
//! For the three delays this only makes valid what beanstalkd refused.
//! `reserve-with-timeout` is the exception: beanstalkd ignores any text after
//! its number, so it reads `reserve-with-timeout 1.5` as one second (and
//! `… 2147483647.5` as `INT_MAX`), where this parser reads the fraction (and
//! refuses the value over `INT_MAX`). Integers are read as beanstalkd reads
//! them.

mod command;
mod number;
mod response;

use nom::bytes::streaming::take_until;
use nom::error::Error;
use nom::Err::Incomplete;

use crate::MAX_LINE_LEN;

pub use command::{parse_auth_line, parse_command_line, CommandLine, PutHeader};
pub use number::parse_seconds;
pub use response::{parse_response_line, BodyKind, MalformedResponse, ResponseHead};

/// Where the line at the front of a buffer ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineEnd {
    /// The line is this many bytes long, its CRLF included.
    Found(usize),
    /// No CRLF yet, and the line may still fit: wait for more bytes.
    NeedMore,
    /// At least [`MAX_LINE_LEN`] bytes and no CRLF ending within them.
    TooLong,
}

/// The longest `delete-batch` line, CRLF included: the word, then
/// [`MAX_BATCH`](crate::MAX_BATCH) ids of up to 20 digits after a space
/// each (tuber's limit for it).
pub const MAX_BATCH_LINE_LEN: usize = 13 + crate::MAX_BATCH * 21 + 2;

/// Finds the first CRLF within the first [`MAX_LINE_LEN`] bytes of `buf`
/// ([`MAX_BATCH_LINE_LEN`] for a `delete-batch` line, the one command
/// whose arguments outgrow beanstalkd's limit).
pub fn find_line_end(buf: &[u8]) -> LineEnd {
    let limit = match buf.starts_with(b"delete-batch ") {
        true => MAX_BATCH_LINE_LEN,
        false => MAX_LINE_LEN,
    };
    let window = &buf[..buf.len().min(limit)];
    match take_until::<_, _, Error<&[u8]>>(&b"\r\n"[..])(window) {
        Ok((_, line)) => LineEnd::Found(line.len() + 2),
        Err(Incomplete(_)) if buf.len() < limit => LineEnd::NeedMore,
        Err(_) => LineEnd::TooLong,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_crlf() {
        assert_eq!(find_line_end(b"quit\r\nstats\r\n"), LineEnd::Found(6));
        assert_eq!(find_line_end(b"\r\n"), LineEnd::Found(2));
    }

    #[test]
    fn needs_more_without_crlf() {
        assert_eq!(find_line_end(b""), LineEnd::NeedMore);
        assert_eq!(find_line_end(b"quit\r"), LineEnd::NeedMore);
        assert_eq!(find_line_end(&[b'a'; MAX_LINE_LEN - 1]), LineEnd::NeedMore);
    }

    #[test]
    fn stray_cr_does_not_hide_the_crlf() {
        assert_eq!(find_line_end(b"use a\rb\r\n"), LineEnd::Found(9));
        assert_eq!(find_line_end(b"\r\r\r\n"), LineEnd::Found(4));
    }

    #[test]
    fn longest_line_fits_exactly() {
        let mut line = vec![b'a'; MAX_LINE_LEN - 2];
        line.extend_from_slice(b"\r\n");
        assert_eq!(find_line_end(&line), LineEnd::Found(MAX_LINE_LEN));
    }

    #[test]
    fn too_long_once_the_window_is_full() {
        assert_eq!(find_line_end(&[b'a'; MAX_LINE_LEN]), LineEnd::TooLong);
        // The CRLF straddles the limit: its `\n` is byte 225.
        let mut line = vec![b'a'; MAX_LINE_LEN - 1];
        line.extend_from_slice(b"\r\n");
        assert_eq!(find_line_end(&line), LineEnd::TooLong);
    }
}
