//! A standby passes a beanstalk client's connection through to the leader,
//! byte for byte, so clients may connect to any node with no protocol change;
//! only a `stats` answer gets the standby's name in its via lines
//! (`via.rs`), given a [`Via`].
//!
//! Why not plain `tokio::io::copy_bidirectional`: it turns the leader's
//! close into a half-close of the client and then waits for the client to
//! close too, so an idle consumer of a dead leader would sit on a
//! half-open connection. Here the leader's close (or error) closes the
//! client at once, so it reconnects (and finds the new leader); the
//! client's half-close is still passed on, so a client that shuts down its
//! writing side still gets every reply.
//!
//! With peer TLS (`peers.rs`), [`relay_tls`] dials the leader's peer
//! listener instead, shows this node's certificate, checks the leader's
//! against the peer CA and the host it advertises, and sends the line that
//! says who the client is (`vouch.rs`) before the client's bytes.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::peers::server_name;
use super::via::{self, Passed, Via};

/// How long connecting to the leader may take before the client is closed.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Bytes passed each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relayed {
    pub to_leader: u64,
    pub to_client: u64,
}

/// Connects to the leader at `leader` (`host:port`) and passes bytes both
/// ways until the leader closes, or the client closes and the leader has
/// answered everything. The client is closed when this returns (it is
/// dropped), also when the leader cannot be reached. With `via`, `stats`
/// answers name this node.
pub async fn relay<C>(
    client: C,
    leader: &str,
    connect_timeout: Duration,
    via: Option<&Via>,
) -> io::Result<Relayed>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let upstream = within(connect_timeout, leader, TcpStream::connect(leader)).await?;
    upstream.set_nodelay(true)?;
    let (leader_rx, leader_tx) = upstream.into_split();
    pass(client, leader_rx, leader_tx, via).await
}

/// [`relay`] to the leader's peer listener at `leader` over TLS with
/// `config` (this node's certificate, the peer CA), saying `first` (the
/// line `vouch.rs` writes) before the client's bytes. Connecting and the
/// handshake take at most `connect_timeout`.
pub async fn relay_tls<C>(
    client: C,
    leader: &str,
    config: Arc<ClientConfig>,
    first: &[u8],
    connect_timeout: Duration,
    via: Option<&Via>,
) -> io::Result<Relayed>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let name = server_name(leader)?;
    let dial = async {
        let tcp = TcpStream::connect(leader).await?;
        tcp.set_nodelay(true)?;
        TlsConnector::from(config).connect(name, tcp).await
    };
    let mut upstream = within(connect_timeout, leader, dial).await?;
    // Out now, not with the client's first bytes: the leader waits for
    // it only until its handshake deadline.
    upstream.write_all(first).await?;
    upstream.flush().await?;
    let (leader_rx, leader_tx) = tokio::io::split(upstream);
    pass(client, leader_rx, leader_tx, via).await
}

/// `connect` to the leader at `leader`, unless it takes longer than `timeout`.
async fn within<T>(
    timeout: Duration,
    leader: &str,
    connect: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    tokio::time::timeout(timeout, connect).await.map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connecting to the leader {leader}: timed out"),
        )
    })?
}

/// The two copies: client → leader ends with a half-close of the leader
/// (which then finishes its replies and closes); leader → client ending
/// ends everything.
async fn pass<C, R, W>(
    client: C,
    mut leader_rx: R,
    mut leader_tx: W,
    via: Option<&Via>,
) -> io::Result<Relayed>
where
    C: AsyncRead + AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (mut client_rx, mut client_tx) = tokio::io::split(client);
    let (mut requests, mut answers) = match via.map(via::watch) {
        Some((requests, answers)) => (Some(requests), Some(answers)),
        None => (None, None),
    };
    let mut to_leader = 0;
    let to_client = {
        // Never finishes but with an error: once the client is done, the
        // leader's close (below) ends the relay.
        let up = async {
            let done = async {
                let note = |bytes: &[u8], _: &mut Vec<u8>| {
                    if let Some(requests) = &mut requests {
                        requests.saw(bytes);
                    }
                    Passed::Same
                };
                copy(&mut client_rx, &mut leader_tx, &mut to_leader, note).await?;
                leader_tx.shutdown().await
            };
            match done.await {
                Err(e) => e,
                Ok(()) => std::future::pending().await,
            }
        };
        let down = async {
            let mut n = 0;
            let mark = |bytes: &[u8], out: &mut Vec<u8>| match &mut answers {
                Some(answers) => answers.pass(bytes, out),
                None => Passed::Same,
            };
            copy(&mut leader_rx, &mut client_tx, &mut n, mark).await?;
            client_tx.shutdown().await?;
            Ok::<u64, io::Error>(n)
        };
        tokio::select! {
            n = down => n?,
            e = up => return Err(e),
        }
    };
    Ok(Relayed {
        to_leader,
        to_client,
    })
}

/// Copies until end of file, counting as it goes (so a relay ended from the
/// other side still knows how much passed). `each(read, out)` sees each
/// read before it goes on: it goes as it came, or what `each` put in `out`
/// goes instead.
async fn copy<R, W, F>(from: &mut R, to: &mut W, count: &mut u64, mut each: F) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    F: FnMut(&[u8], &mut Vec<u8>) -> Passed,
{
    let mut buf = vec![0; 16 * 1024];
    let mut out = Vec::new();
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        out.clear();
        let data = match each(&buf[..n], &mut out) {
            Passed::Same => &buf[..n],
            Passed::Changed => &out[..],
        };
        if !data.is_empty() {
            to.write_all(data).await?;
            to.flush().await?;
        }
        *count += n as u64;
    }
}
