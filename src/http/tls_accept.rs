//! `--http-tls`: the HTTP port over TLS, with the beanstalk port's
//! certificate and key (`--tls-cert`, `--tls-key`), reloaded on SIGHUP.
//! No client certificate is asked for: the port's credentials are its
//! tokens and sessions (`auth.rs`), which browsers and scrapers carry
//! more easily than certificates.
//!
//! Handshakes run in their own tasks, each holding a slot of the same
//! kind of cap as the beanstalk port's (`pending.rs`: `--max-pending`,
//! `--handshake-timeout`), and only finished ones reach axum: a client
//! that never finishes its handshake delays no one and holds at most one
//! slot for at most the timeout.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::pending::PendingLimit;
use crate::tls::{self, Certs};

/// Finished handshakes waiting for axum to take them.
const QUEUE: usize = 64;

/// The HTTP port's TLS settings.
pub struct HttpTls {
    pub certs: Arc<Certs>,
    /// `--max-pending`, `--handshake-timeout`.
    pub max_pending: usize,
    pub handshake_timeout: Duration,
}

/// A TCP listener whose connections axum gets once their handshake is
/// done.
pub struct TlsListener {
    ready: mpsc::Receiver<(tls::Stream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` and handshakes with `settings`, each connection in
    /// its own task; reloads the certificate on SIGHUP.
    pub fn spawn(tcp: TcpListener, settings: HttpTls) -> io::Result<TlsListener> {
        let addr = tcp.local_addr()?;
        let hup = signal(SignalKind::hangup())?;
        tokio::spawn(settings.certs.clone().reload_at(hup, "the HTTP port"));
        let (tx, ready) = mpsc::channel(QUEUE);
        let limit = PendingLimit::new(settings.max_pending, settings.handshake_timeout);
        tokio::spawn(accept_loop(tcp, settings.certs, limit, tx));
        Ok(TlsListener { ready, addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tls::Stream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends with the runtime.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

async fn accept_loop(
    tcp: TcpListener,
    certs: Arc<Certs>,
    limit: PendingLimit,
    ready: mpsc::Sender<(tls::Stream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, from) = match tcp.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or memory: wait rather than spin.
                tracing::warn!(error = %e, "HTTP accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(pending) = limit.admit() else {
            continue;
        };
        let config = certs.current();
        let ready = ready.clone();
        let handshake = async move {
            match tls::accept(config, stream, pending.deadline()).await {
                Ok((stream, _)) => {
                    drop(pending);
                    let _ = ready.send((stream, from)).await;
                }
                Err(e) => tracing::info!(error = %e, "HTTP TLS handshake failed"),
            }
        };
        tokio::spawn(handshake.instrument(tracing::info_span!("http", peer = %from)));
    }
}
