//! The audit trail: `tracing` events with the target `sprout::audit`, so
//! a `RUST_LOG` directive can route or silence them (`sprout::audit=off`)
//! apart from the rest, and `--log-format json` makes them one object a
//! line. Each carries `principal`, `peer` (address), `listener` and
//! `command`. Recorded: every `auth` (success, failure, and the
//! connection closed after 3 failures), a certificate that authenticated
//! a connection (or named two principals), a client another node of the
//! cluster vouched for (`relayed`), every admin action with its
//! answer, and every command refused FORBIDDEN with what it needed.
//!
//! With `--auth` they are on at info level whatever `-V` says, since they
//! are a record, not a diagnostic ([`log_directive`]); `RUST_LOG` still
//! decides if it names the target. A token is never in any of them: an
//! `auth` is shown as the word alone.

use sprout_protocol::encode::encode_command;
use sprout_protocol::{Command, Response};

use crate::peer::{Peer, Vouch};

/// The events' target.
pub const TARGET: &str = "sprout::audit";

/// The longest command shown (a `delete-batch` can be 21 KB).
const MAX_SHOWN: usize = 200;

/// The filter directive the server adds with `--auth`: none if `rust_log`
/// (the `RUST_LOG` variable) says what to do with the audit target.
pub fn log_directive(rust_log: Option<&str>) -> Option<String> {
    match rust_log {
        Some(directives) if directives.contains(TARGET) => None,
        _ => Some(format!("{TARGET}=info")),
    }
}

/// Who did it, from where.
pub struct Actor<'a> {
    pub principal: &'a str,
    pub peer: &'a Peer,
}

/// An `auth`: `outcome` is `authenticated`, `unauthorized`,
/// `rate-limited` or `closed` (the third failure); `principal` is the
/// one it authenticated as, or the connection's until then.
pub fn auth(actor: &Actor<'_>, outcome: &str) {
    tracing::info!(
        target: TARGET,
        principal = actor.principal,
        peer = %actor.peer.addr,
        listener = %actor.peer.listener,
        command = "auth",
        outcome,
        "auth"
    );
}

/// A client certificate made the connection `principal`'s (`outcome`:
/// `authenticated`), or named two principals (`ambiguous`: it is none).
pub fn certificate(actor: &Actor<'_>, outcome: &str) {
    tracing::info!(
        target: TARGET,
        principal = actor.principal,
        peer = %actor.peer.addr,
        listener = %actor.peer.listener,
        command = "tls-handshake",
        outcome,
        "certificate"
    );
}

/// A client another node passed on (`vouch`) became the principal that
/// node found (`outcome`: `relayed`), or named one this policy does not
/// know (`unknown`: it is none).
pub fn relayed(actor: &Actor<'_>, vouch: &Vouch, outcome: &str) {
    tracing::info!(
        target: TARGET,
        principal = actor.principal,
        peer = %actor.peer.addr,
        listener = %actor.peer.listener,
        command = "relay",
        by = %vouch.by,
        vouched = vouch.principal.as_deref().unwrap_or("-"),
        outcome,
        "relayed"
    );
}

/// An admin action and what it answered.
pub fn admin(actor: &Actor<'_>, command: &Command, answer: &Response) {
    tracing::info!(
        target: TARGET,
        principal = actor.principal,
        peer = %actor.peer.addr,
        listener = %actor.peer.listener,
        command = %shown(command),
        outcome = %answer_word(answer),
        "admin"
    );
}

/// A command refused FORBIDDEN, and what it needed.
pub fn forbidden(actor: &Actor<'_>, command: &Command, need: &dyn std::fmt::Display) {
    tracing::info!(
        target: TARGET,
        principal = actor.principal,
        peer = %actor.peer.addr,
        listener = %actor.peer.listener,
        command = %shown(command),
        outcome = "forbidden",
        needs = %need,
        "forbidden"
    );
}

/// A request to the HTTP port (`request`: its method and path) that
/// changed something or was refused, and its `outcome` (the status, or
/// `forbidden`).
pub fn http(actor: &Actor<'_>, request: &str, outcome: &str) {
    tracing::info!(
        target: TARGET,
        principal = actor.principal,
        peer = %actor.peer.addr,
        listener = %actor.peer.listener,
        command = request,
        outcome,
        "http"
    );
}

/// `command` as a log line shows it: its line without a body, and never
/// a token.
fn shown(command: &Command) -> String {
    match command {
        Command::Auth(_) => "auth".into(),
        Command::Put { body, .. } => format!("put ({} bytes)", body.len()),
        Command::Fire { id, body, .. } => format!("fire {id} ({} bytes)", body.len()),
        command => {
            let mut line = bytes::BytesMut::new();
            encode_command(command, &mut line);
            let line = String::from_utf8_lossy(&line[..line.len() - 2]);
            match line.char_indices().nth(MAX_SHOWN) {
                Some((at, _)) => format!("{}…", &line[..at]),
                None => line.into_owned(),
            }
        }
    }
}

/// The first line of `answer` (`KICKED 3`, `NOT_FOUND`).
fn answer_word(answer: &Response) -> String {
    let mut out = bytes::BytesMut::new();
    sprout_protocol::encode::encode_response(answer, &mut out);
    let end = out
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(out.len());
    String::from_utf8_lossy(&out[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use sprout_protocol::{Token, TubeName};

    use super::*;

    #[test]
    fn directive() {
        for (rust_log, want) in [
            (None, Some("sprout::audit=info")),
            (Some("debug"), Some("sprout::audit=info")),
            (Some("sprout=warn"), Some("sprout::audit=info")),
            (Some("warn,sprout::audit=off"), None),
            (Some("sprout::audit=debug"), None),
        ] {
            assert_eq!(log_directive(rust_log).as_deref(), want, "{rust_log:?}");
        }
    }

    #[test]
    fn commands_as_shown() {
        let tube = TubeName::new(b"orders").unwrap();
        for (command, want) in [
            (Command::Auth(Token::new("hunter2")), "auth".to_owned()),
            (
                Command::Put {
                    pri: 1,
                    delay: Duration::ZERO,
                    ttr: Duration::from_secs(5),
                    body: Bytes::from_static(b"secret body"),
                    tags: None,
                },
                "put (11 bytes)".into(),
            ),
            (Command::Kick(10), "kick 10".into()),
            (
                Command::PauseTube {
                    tube: tube.clone(),
                    delay: Duration::from_millis(1500),
                },
                "pause-tube orders 1.5".into(),
            ),
            (Command::FlushTube(tube), "flush-tube orders".into()),
            (
                Command::DeleteBatch((1..=1000).collect()),
                format!("{}…", &"delete-batch 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66"[..200]),
            ),
        ] {
            assert_eq!(shown(&command), want);
        }
        assert_eq!(answer_word(&Response::KickedCount(3)), "KICKED 3");
        assert_eq!(answer_word(&Response::Ok(Bytes::from_static(b"x"))), "OK 1");
    }
}
