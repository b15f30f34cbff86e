//! The number fields of a command line, read the way beanstalkd reads them,
//! plus the sub-second extension.
//!
//! beanstalkd has two ways of reading a number. Most fields skip spaces (only
//! spaces), demand a decimal digit, and read digits until the first non-digit;
//! a value too big for the field is an error. Whether text may follow is up to
//! the command, so these parsers leave the rest of the input to the caller.
//! `kick` instead uses C's `strtoul`: any C white space, an optional sign, a
//! negative count wrapping around, the result cut to 32 bits.
//!
//! # Seconds with a fraction
//!
//! [`seconds`] reads the extension (see the parent module): digits, an
//! optional `.` and more digits, then an optional exponent (`e`/`E`, an
//! optional sign, digits); an exponent without digits is not part of the
//! number. The value is computed exactly in decimal, rounded up to whole
//! nanoseconds so a timer never fires early, and bounded exactly
//! (`4294967295.5` is over [`MAX_SECONDS`](crate::MAX_SECONDS)).

use std::time::Duration;

use nom::bytes::complete::take_while;
use nom::character::complete::{char, digit0, digit1, one_of};
use nom::combinator::{all_consuming, map_opt, opt, recognize};
use nom::sequence::{pair, preceded, tuple};
use nom::IResult;

use crate::MAX_SECONDS;

pub(super) type Res<'a, T> = IResult<&'a [u8], T>;

const NANOS_PER_SEC: u64 = 1_000_000_000;
/// Exponents are clamped to this size; a line is too short for it to matter.
const MAX_EXPONENT: i64 = 1 << 20;

/// Skips spaces (not other white space), as beanstalkd does before a field.
pub(super) fn spaces(i: &[u8]) -> Res<'_, &[u8]> {
    take_while(|b| b == b' ')(i)
}

/// The value of a run of ASCII digits, or `None` if it overflows a `u64`.
fn digits_value(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Plain digits whose value fits a `u64`.
pub(super) fn digits(i: &[u8]) -> Res<'_, u64> {
    map_opt(digit1, digits_value)(i)
}

/// Runs `parser` over all of `input`: nothing may follow.
pub(super) fn whole<'a, T>(
    input: &'a [u8],
    parser: impl FnMut(&'a [u8]) -> Res<'a, T>,
) -> Option<T> {
    all_consuming(parser)(input).ok().map(|(_, value)| value)
}

/// A `u64` field: spaces, then digits.
pub(super) fn u64_field(i: &[u8]) -> Res<'_, u64> {
    preceded(spaces, digits)(i)
}

/// A `u32` field: spaces, then digits whose value fits 32 bits.
pub(super) fn u32_field(i: &[u8]) -> Res<'_, u32> {
    map_opt(u64_field, |n| u32::try_from(n).ok())(i)
}

/// A whole-seconds field (the TTR): a `u32` field as a `Duration`.
pub(super) fn whole_seconds(i: &[u8]) -> Res<'_, Duration> {
    let (rest, secs) = u32_field(i)?;
    Ok((rest, Duration::from_secs(secs.into())))
}

/// A seconds field with the fraction extension, at most `max_secs`.
pub(super) fn seconds(max_secs: u64) -> impl Fn(&[u8]) -> Res<'_, Duration> {
    move |i| preceded(spaces, map_opt(decimal, |tok| to_duration(tok, max_secs)))(i)
}

/// Reads a whole input as seconds in the extension syntax (`5`, `0.25`,
/// `1.25e-1`), at most [`MAX_SECONDS`]. No spaces are allowed.
pub fn parse_seconds(input: &[u8]) -> Option<Duration> {
    let (_, tok) = all_consuming(decimal)(input).ok()?;
    to_duration(tok, MAX_SECONDS)
}

/// `kick`'s count, read like `strtoul(s, &end, 10)` and cut to 32 bits.
/// Text after the digits is allowed.
pub(super) fn kick_count(i: &[u8]) -> Option<u32> {
    let is_c_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let signed = pair(opt(one_of("+-")), digits);
    let (_, (sign, n)) = preceded(take_while(is_c_space), signed)(i).ok()?;
    let n = if sign == Some('-') {
        n.wrapping_neg()
    } else {
        n
    };
    // Truncation is the point: beanstalkd stores the `unsigned long` in a `uint`.
    Some(n as u32)
}

/// Recognizes a decimal number in the extension syntax.
fn decimal(i: &[u8]) -> Res<'_, &[u8]> {
    let mantissa = pair(digit1, opt(pair(char('.'), digit0)));
    let exponent = tuple((one_of("eE"), opt(one_of("+-")), digit1));
    recognize(pair(mantissa, opt(exponent)))(i)
}

/// The exact value of a token [`decimal`] recognized, rounded up to whole
/// nanoseconds, if it is at most `max_secs` seconds.
fn to_duration(tok: &[u8], max_secs: u64) -> Option<Duration> {
    let (mantissa, exponent) = match tok.iter().position(|&b| b == b'e' || b == b'E') {
        Some(at) => (&tok[..at], exponent_value(&tok[at + 1..])),
        None => (tok, 0),
    };
    let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
        Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
        None => (mantissa, &[][..]),
    };
    // The value is `digits × 10^(scale - 9)` seconds, i.e. `digits × 10^scale` ns.
    let digits = || int.iter().chain(frac).map(|&d| u64::from(d - b'0'));
    let count = (int.len() + frac.len()) as i64;
    let scale = exponent + 9 - frac.len() as i64;
    let limit = max_secs * NANOS_PER_SEC;
    let within = |n: u64| (n <= limit).then_some(n);

    let whole = (count + scale).clamp(0, count) as usize;
    let mut nanos = digits()
        .take(whole)
        .try_fold(0u64, |n, d| within(n.checked_mul(10)?.checked_add(d)?))?;
    for _ in 0..scale.max(0) {
        if nanos == 0 {
            break;
        }
        nanos = within(nanos.checked_mul(10)?)?;
    }
    if digits().skip(whole).any(|d| d != 0) {
        nanos = within(nanos + 1)?;
    }
    Some(Duration::from_nanos(nanos))
}

/// An exponent (`[+-]digits`), clamped to ±[`MAX_EXPONENT`].
fn exponent_value(exp: &[u8]) -> i64 {
    let (negative, digits) = match exp.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, exp),
    };
    let magnitude = digits.iter().fold(0i64, |n, &d| {
        (n * 10 + i64::from(d - b'0')).min(MAX_EXPONENT)
    });
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn integer_fields_skip_spaces_only() {
        assert_eq!(u64_field(b"  42 x"), Ok((&b" x"[..], 42)));
        assert!(u64_field(b"\t42").is_err());
        assert!(u64_field(b"+42").is_err());
        assert!(u64_field(b"").is_err());
        assert_eq!(u64_field(b"0007"), Ok((&b""[..], 7)));
    }

    #[test]
    fn integer_fields_reject_overflow() {
        assert_eq!(u64_field(b"18446744073709551615"), Ok((&b""[..], u64::MAX)));
        assert!(u64_field(b"18446744073709551616").is_err());
        assert_eq!(u32_field(b"4294967295"), Ok((&b""[..], u32::MAX)));
        assert!(u32_field(b"4294967296").is_err());
    }

    #[test]
    fn kick_reads_like_strtoul() {
        assert_eq!(kick_count(b"5"), Some(5));
        assert_eq!(kick_count(b" \t\r\n\x0b\x0c7"), Some(7));
        assert_eq!(kick_count(b"+3"), Some(3));
        assert_eq!(kick_count(b"12abc"), Some(12));
        assert_eq!(kick_count(b"-1"), Some(u32::MAX));
        assert_eq!(kick_count(b"-0"), Some(0));
        assert_eq!(kick_count(b"4294967296"), Some(0));
        assert_eq!(kick_count(b"4294967297"), Some(1));
        assert_eq!(kick_count(b"18446744073709551615"), Some(u32::MAX));
        assert_eq!(kick_count(b"18446744073709551616"), None);
        assert_eq!(kick_count(b""), None);
        assert_eq!(kick_count(b"+"), None);
        assert_eq!(kick_count(b"- 1"), None);
        assert_eq!(kick_count(b"x1"), None);
    }

    #[test]
    fn seconds_accept_integers_and_fractions() {
        assert_eq!(parse_seconds(b"0"), Some(Duration::ZERO));
        assert_eq!(parse_seconds(b"5"), Some(Duration::from_secs(5)));
        assert_eq!(parse_seconds(b"0.25"), Some(ms(250)));
        assert_eq!(parse_seconds(b"1.5"), Some(ms(1500)));
        assert_eq!(parse_seconds(b"1.25e-1"), Some(ms(125)));
        assert_eq!(parse_seconds(b"1.25E+1"), Some(ms(12_500)));
        assert_eq!(parse_seconds(b"2e3"), Some(Duration::from_secs(2000)));
        assert_eq!(parse_seconds(b"1."), Some(Duration::from_secs(1)));
        assert_eq!(parse_seconds(b"0.000000001"), Some(Duration::from_nanos(1)));
        assert_eq!(parse_seconds(b"000.1000"), Some(ms(100)));
    }

    #[test]
    fn seconds_reject_other_syntax() {
        for bad in [
            &b""[..],
            b".",
            b"-1",
            b"+1",
            b" 1",
            b"1 ",
            b"1e",
            b"1e+",
            b"e5",
            b"1.2.3",
            b"0x10",
            b"1,5",
            b"inf",
            b"NaN",
        ] {
            assert_eq!(
                parse_seconds(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn sub_nanosecond_parts_round_up() {
        assert_eq!(
            parse_seconds(b"0.0000000001"),
            Some(Duration::from_nanos(1))
        );
        assert_eq!(parse_seconds(b"1.0000000000001"), Some(Duration::new(1, 1)));
        assert_eq!(
            parse_seconds(b"1e-999999999999"),
            Some(Duration::from_nanos(1))
        );
        assert_eq!(parse_seconds(b"0.1000000000"), Some(ms(100)));
    }

    #[test]
    fn fractions_are_exact() {
        // 0.1 + 0.2 style surprises are impossible: the digits are the value.
        assert_eq!(parse_seconds(b"0.3"), Some(ms(300)));
        assert_eq!(
            parse_seconds(b"4294967294.999999999"),
            Some(Duration::new(4294967294, 999_999_999))
        );
        assert_eq!(
            parse_seconds(b"123456789e-9"),
            Some(Duration::from_nanos(123456789))
        );
    }

    #[test]
    fn seconds_have_the_integer_bound() {
        assert_eq!(
            parse_seconds(b"4294967295"),
            Some(Duration::from_secs(MAX_SECONDS))
        );
        assert_eq!(
            parse_seconds(b"4294967295.0"),
            Some(Duration::from_secs(MAX_SECONDS))
        );
        assert_eq!(parse_seconds(b"4294967295.0000000001"), None);
        assert_eq!(parse_seconds(b"4294967296"), None);
        assert_eq!(parse_seconds(b"4.294967296e9"), None);
        assert_eq!(parse_seconds(b"1e999999999999"), None);
        assert_eq!(parse_seconds(b"0e999999999999"), Some(Duration::ZERO));
        assert_eq!(parse_seconds(b"99999999999999999999999999"), None);
    }

    #[test]
    fn seconds_field_leaves_the_rest() {
        let field = seconds(i32::MAX as u64);
        assert_eq!(field(b" 1.5 60"), Ok((&b" 60"[..], ms(1500))));
        // An exponent without digits is not part of the number.
        assert_eq!(field(b"5e"), Ok((&b"e"[..], Duration::from_secs(5))));
        assert_eq!(
            field(b"2147483647"),
            Ok((&b""[..], Duration::from_secs(2147483647)))
        );
        assert!(field(b"2147483648").is_err());
        assert!(field(b"2147483647.5").is_err());
    }
}
