//! The encrypted stream a connection is served on, made to behave as the
//! plain socket `connection.rs` was written for:
//!
//! * A write is done when its bytes are on the socket. rustls takes
//!   plaintext into its own buffer and writes what the socket accepts; on
//!   a full socket tokio-rustls reports the plaintext written while the
//!   tail of its ciphertext still waits in rustls, to go out with the
//!   next write or flush. `connection.rs` writes answers whole and never
//!   flushes (a socket needs no flush), so the tail of a large answer
//!   could wait there forever while the client waits for it (tokio-rustls
//!   says as much: "you must manually call flush"). Here a write
//!   returns only once that ciphertext is out. The price: bytes taken
//!   before a `Pending` are reported by the next call, so a caller must
//!   call again with the same buffer, as `write_all` and `io::copy` do.
//! * A client that hangs up without TLS's `close_notify` (most do: they
//!   just close the socket) reads as an ordinary end of stream, not as an
//!   error. That is safe for the beanstalk protocol: every request and
//!   body carries its own end, so a stream cut short yields an incomplete
//!   request, never a shorter valid one (the truncation `close_notify`
//!   guards against).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;

/// A server-side TLS stream whose writes go through to the socket and
/// whose unannounced end is an end of stream.
pub struct Stream<S> {
    tls: TlsStream<S>,
    /// Plaintext rustls has taken whose ciphertext is not all out yet.
    taken: usize,
}

impl<S> Stream<S> {
    pub(super) fn new(tls: TlsStream<S>) -> Stream<S> {
        Stream { tls, taken: 0 }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.tls).poll_read(cx, buf) {
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.taken == 0 {
            this.taken = ready!(Pin::new(&mut this.tls).poll_write(cx, buf))?;
        }
        ready!(Pin::new(&mut this.tls).poll_flush(cx))?;
        Poll::Ready(Ok(std::mem::take(&mut this.taken)))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::{ClientConfig, RootCertStore, ServerConfig};
    use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    use super::*;
    use crate::tls::provider::provider;

    /// Both ends of a TLS connection over a pipe that holds `room` bytes.
    async fn pair(room: usize) -> (Stream<DuplexStream>, impl AsyncRead + AsyncWrite + Unpin) {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key = PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der());
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], PrivateKeyDer::Pkcs8(key))
            .unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert.cert.der().clone()).unwrap();
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (ours, theirs) = tokio::io::duplex(room);
        let name = ServerName::try_from("localhost").unwrap();
        let connect = tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, theirs);
        let accept = tokio_rustls::TlsAcceptor::from(Arc::new(server)).accept(ours);
        let (client, server) = tokio::join!(connect, accept);
        (Stream::new(server.unwrap()), client.unwrap())
    }

    #[tokio::test]
    async fn a_write_is_done_only_when_it_is_on_the_socket() {
        let (mut server, mut client) = pair(16 * 1024).await;
        let answer = vec![b'x'; 40 * 1024];
        // rustls takes all 40 KiB and keeps what the pipe has no room for:
        // a plain write_all would be done at once, its tail stuck there.
        let write = tokio::spawn(async move { server.write_all(&answer).await.map(|_| server) });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!write.is_finished(), "done with 24 KiB still in rustls");
        // Once the client reads, it is done.
        let mut got = vec![0; 40 * 1024];
        client.read_exact(&mut got).await.unwrap();
        let timeout = tokio::time::timeout(Duration::from_secs(5), write);
        timeout.await.expect("write done").unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_hang_up_without_close_notify_is_an_end_of_stream() {
        let (mut server, client) = pair(16 * 1024).await;
        drop(client);
        let mut buf = [0u8; 16];
        assert_eq!(server.read(&mut buf).await.unwrap(), 0);
    }
}
