//! Tokens and their hashes. A policy stores `sha256:<64 hex digits>`, the
//! SHA-256 of the token, never the token; `auth <token>` is hashed and
//! looked up. A plain hash (not a slow password hash) is enough because a
//! token is a long random secret, not something a person picks: nothing
//! is gained by guessing against its hash that is not gained by guessing
//! against the server, which limits failures (see `limit.rs`). Lookups
//! are by hash, so comparing takes no time that depends on how much of a
//! guess was right.
//!
//! `sprout hash-token` reads a token on stdin and prints its hash, so
//! nobody hand-rolls one (and gets a trailing newline into it).

use std::fmt;
use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};
use sprout_protocol::MAX_LINE_LEN;

/// `sha256:` and the hex digits.
const PREFIX: &str = "sha256:";

/// The longest token an `auth` line can carry: the line limit less
/// `auth `, CRLF.
pub const MAX_TOKEN_LEN: usize = MAX_LINE_LEN - 7;

/// Shorter tokens are accepted, but `hash-token` warns about them.
const ADVISED_TOKEN_LEN: usize = 16;

/// A token's SHA-256, as a policy names it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of `token`.
    pub fn of(token: &[u8]) -> TokenHash {
        TokenHash(Sha256::digest(token).into())
    }

    /// Reads `sha256:<64 hex digits>` (either case).
    pub fn parse(text: &str) -> Result<TokenHash, String> {
        let refuse = || {
            format!(
                "token `{}` is not sha256:<64 hex digits> (make one with `sprout hash-token`; \
                 a policy never holds a token itself)",
                shorten(text)
            )
        };
        let hex = text.strip_prefix(PREFIX).ok_or_else(refuse)?;
        if hex.len() != 64 {
            return Err(refuse());
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks(2)) {
            let pair = std::str::from_utf8(pair).map_err(|_| refuse())?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| refuse())?;
        }
        Ok(TokenHash(out))
    }
}

/// Enough of a (mistaken) entry to find it, not all of it: someone may
/// have pasted a real token where its hash belongs.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(12) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

impl fmt::Display for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PREFIX)?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The token `input` holds, as `hash-token` reads it: one line (a final
/// `\n` or `\r\n` is not part of it) that an `auth` line can carry.
pub fn token_of(input: &[u8]) -> Result<&[u8], String> {
    let token = input.strip_suffix(b"\n").unwrap_or(input);
    let token = token.strip_suffix(b"\r").unwrap_or(token);
    if token.is_empty() {
        return Err("no token on stdin".into());
    }
    if token.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0)) {
        return Err("a token is one line: no CR, LF or NUL inside it".into());
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(format!(
            "a token has at most {MAX_TOKEN_LEN} bytes (the `auth` line's limit)"
        ));
    }
    Ok(token)
}

/// `sprout hash-token`: reads a token on stdin, prints its hash.
pub fn hash_token_command() -> std::process::ExitCode {
    let mut input = Vec::new();
    let read = io::stdin().lock().take(4096).read_to_end(&mut input);
    let token = match read
        .map_err(|e| e.to_string())
        .and_then(|_| token_of(&input).map(<[u8]>::to_vec))
    {
        Ok(token) => token,
        Err(e) => {
            eprintln!("sprout hash-token: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if token.len() < ADVISED_TOKEN_LEN {
        eprintln!(
            "sprout hash-token: warning: a token this short can be guessed; use a random one \
             (e.g. `head -c 32 /dev/urandom | base64`)"
        );
    }
    let mut out = io::stdout().lock();
    match writeln!(out, "{}", TokenHash::of(&token)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_print_and_parse_back() {
        // SHA-256("abc"), FIPS 180-2's example.
        let abc = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(TokenHash::of(b"abc").to_string(), abc);
        assert_eq!(TokenHash::parse(abc).unwrap(), TokenHash::of(b"abc"));
        let upper = format!("sha256:{}", abc[7..].to_uppercase());
        assert_eq!(TokenHash::parse(&upper).unwrap(), TokenHash::of(b"abc"));
    }

    #[test]
    fn malformed_hashes() {
        let digits = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        for text in [
            digits.to_owned(),
            format!("sha512:{digits}"),
            format!("sha256:{}", &digits[1..]),
            format!("sha256:{digits}0"),
            format!("sha256:{}g", &digits[1..]),
            format!("sha256:{}é", &digits[2..]),
            "sha256:".into(),
            "my-secret-token".into(),
        ] {
            let e = TokenHash::parse(&text).unwrap_err();
            assert!(e.contains("sha256:<64 hex digits>"), "{text}: {e}");
        }
        // A pasted token is not echoed whole.
        let e = TokenHash::parse("correct-horse-battery-staple").unwrap_err();
        assert!(e.contains("`correct-hors…`"), "{e}");
    }

    #[test]
    fn reading_a_token() {
        for (input, want) in [
            (&b"s3cret\n"[..], Ok(&b"s3cret"[..])),
            (b"s3cret\r\n", Ok(b"s3cret")),
            (b"s3cret", Ok(b"s3cret")),
            (b"with space\n", Ok(b"with space")),
            (b"\n", Err("no token")),
            (b"", Err("no token")),
            (b"two\nlines\n", Err("one line")),
            (b"nul\0\n", Err("one line")),
        ] {
            match (token_of(input), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want),
                (Err(e), Err(says)) => assert!(e.contains(says), "{e}"),
                (got, want) => panic!("{input:?}: {got:?}, want {want:?}"),
            }
        }
        assert!(token_of(&[b'a'; MAX_TOKEN_LEN]).is_ok());
        assert!(token_of(&[b'a'; MAX_TOKEN_LEN + 1]).is_err());
    }
}
