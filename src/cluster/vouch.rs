//! The first line a standby sends the leader's peer listener, before the
//! client's own bytes: who the client is, as the standby found it.
//!
//! ```text
//! relay <client-address>[ <principal>]\r\n
//! ```
//!
//! `<client-address>` is the client's address as the standby's listener
//! saw it (`203.0.113.7:50122`, `[2001:db8::7]:50122`, or `unix`); the
//! leader uses it as the connection's address, so the audit trail and the
//! per-address limit on failed `auth`s see the client, not the standby.
//! `<principal>` is the principal the standby found the client to be
//! (`auth::proven_principal`); none when it found none, so the leader
//! makes the client `auth`. No placeholder word stands for "none": any
//! word could be a principal's name (`-` is a valid one).
//!
//! A line the leader cannot read whole closes the connection: it is at
//! most [`MAX_LINE`] bytes, words of visible ASCII separated by single
//! spaces, and nothing else. Only a node that proved it is one (its
//! certificate chains to the peer CA) gets to send it at all.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

/// The longest first line, `\r\n` included: a principal name is at most
/// 64 bytes, an address under 60.
pub const MAX_LINE: usize = 256;

/// What a first line says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirstLine {
    pub client: String,
    pub principal: Option<String>,
}

/// The first line for a client at `client` that the standby found to be
/// `principal`.
pub fn line(client: &str, principal: Option<&str>) -> String {
    match principal {
        Some(name) => format!("relay {client} {name}\r\n"),
        None => format!("relay {client}\r\n"),
    }
}

/// Reads a first line (`\r\n` included), or why not.
pub fn parse(line: &[u8]) -> Result<FirstLine, &'static str> {
    let text = line
        .strip_suffix(b"\r\n")
        .ok_or("no line end")
        .and_then(|l| std::str::from_utf8(l).map_err(|_| "not ASCII"))?;
    if !text.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return Err("not visible ASCII");
    }
    let mut words = text.split(' ');
    if words.next() != Some("relay") {
        return Err("not a relay line");
    }
    let client = words.next().ok_or("no client address")?;
    if client != "unix" && client.parse::<SocketAddr>().is_err() {
        return Err("not a client address");
    }
    let principal = words.next();
    if principal == Some("") || words.next().is_some() {
        return Err("more than a client and a principal");
    }
    Ok(FirstLine {
        client: client.to_owned(),
        principal: principal.map(str::to_owned),
    })
}

/// Reads the first line from `stream` by `deadline`, byte by byte so that
/// nothing after it is taken from the client's stream (over TLS a byte is
/// read from rustls's buffer, not the socket).
pub async fn read<S: AsyncRead + Unpin>(
    stream: &mut S,
    deadline: Instant,
) -> io::Result<FirstLine> {
    let read = async {
        let mut line = Vec::with_capacity(64);
        while !line.ends_with(b"\n") {
            if line.len() == MAX_LINE {
                return Err(bad("longer than a relay line"));
            }
            line.push(stream.read_u8().await?);
        }
        parse(&line).map_err(bad)
    };
    tokio::time::timeout_at(deadline, read)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no relay line in time"))?
}

fn bad(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("relay line: {why}"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use super::*;

    #[test]
    fn lines() {
        let ok = |client: &str, principal: Option<&str>| {
            Ok(FirstLine {
                client: client.into(),
                principal: principal.map(Into::into),
            })
        };
        let long = format!("relay 10.0.0.1:5 {}\r\n", "p".repeat(300));
        for (text, want) in [
            ("relay 10.0.0.1:5 ops\r\n", ok("10.0.0.1:5", Some("ops"))),
            ("relay 10.0.0.1:5\r\n", ok("10.0.0.1:5", None)),
            (
                "relay [::1]:7 a.b-c_d@e\r\n",
                ok("[::1]:7", Some("a.b-c_d@e")),
            ),
            ("relay unix -\r\n", ok("unix", Some("-"))),
            (long.as_str(), ok("10.0.0.1:5", Some(&"p".repeat(300)))),
            ("relay 10.0.0.1:5 ops\n", Err("no line end")),
            ("relay 10.0.0.1:5 ops", Err("no line end")),
            ("relay 10.0.0.1:5 o\tps\r\n", Err("not visible ASCII")),
            ("relay 10.0.0.1:5 \u{e9}\r\n", Err("not visible ASCII")),
            ("relay 10.0.0.1:5 o\rps\r\n", Err("not visible ASCII")),
            ("put 0 0 1 1\r\n", Err("not a relay line")),
            ("RELAY 10.0.0.1:5\r\n", Err("not a relay line")),
            ("\r\n", Err("not a relay line")),
            ("relay\r\n", Err("no client address")),
            ("relay ops 10.0.0.1:5\r\n", Err("not a client address")),
            ("relay 10.0.0.1 ops\r\n", Err("not a client address")),
            ("relay  10.0.0.1:5\r\n", Err("not a client address")),
            (
                "relay 10.0.0.1:5 \r\n",
                Err("more than a client and a principal"),
            ),
            (
                "relay 10.0.0.1:5  ops\r\n",
                Err("more than a client and a principal"),
            ),
            (
                "relay 10.0.0.1:5 a b\r\n",
                Err("more than a client and a principal"),
            ),
        ] {
            assert_eq!(parse(text.as_bytes()), want, "{text:?}");
        }
        for (client, principal) in [("10.0.0.1:5", Some("ops")), ("unix", None)] {
            let written = line(client, principal);
            assert_eq!(parse(written.as_bytes()), ok(client, principal));
        }
    }

    #[tokio::test]
    async fn read_takes_the_line_and_nothing_after_it() {
        let (mut ours, mut theirs) = tokio::io::duplex(1024);
        theirs
            .write_all(b"relay 10.0.0.1:5 ops\r\nput 0 0 1 1\r\n")
            .await
            .unwrap();
        let soon = Instant::now() + Duration::from_secs(5);
        let got = read(&mut ours, soon).await.unwrap();
        assert_eq!(got.principal.as_deref(), Some("ops"));
        let mut rest = [0u8; 13];
        ours.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"put 0 0 1 1\r\n");
    }

    #[tokio::test]
    async fn read_gives_up_on_a_long_line_and_at_the_deadline() {
        let (mut ours, mut theirs) = tokio::io::duplex(4096);
        theirs.write_all(&[b'x'; MAX_LINE + 10]).await.unwrap();
        let soon = Instant::now() + Duration::from_secs(5);
        let e = read(&mut ours, soon).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");

        let (mut ours, mut theirs) = tokio::io::duplex(4096);
        theirs.write_all(b"relay 10.0.0.1:5").await.unwrap();
        let soon = Instant::now() + Duration::from_millis(50);
        let e = read(&mut ours, soon).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    }
}
