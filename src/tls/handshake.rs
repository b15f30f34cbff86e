//! The server's side of one handshake on an accepted connection, bounded
//! by the connection's deadline (`pending::Pending`), and what it proved:
//! the client's verified certificate, if it showed one.

use std::io;
use std::sync::Arc;

use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::identity;
use super::tls_stream::Stream;
use crate::peer::CertIdentity;

/// Completes the handshake on `stream` with `config` by `deadline`; the
/// encrypted stream and the identity in the client's certificate (which
/// rustls has verified against `--tls-client-ca` if it was given).
pub async fn accept<S>(
    config: Arc<ServerConfig>,
    stream: S,
    deadline: Instant,
) -> io::Result<(Stream<S>, Option<CertIdentity>)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let handshake = TlsAcceptor::from(config).accept(stream);
    let stream = tokio::time::timeout_at(deadline, handshake)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    let tls = stream.get_ref().1;
    let cert = match tls.peer_certificates().and_then(|c| c.first()) {
        None => None,
        Some(der) => Some(identity::of(der).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("client certificate: {e}"),
            )
        })?),
    };
    let client_cn = cert.as_ref().and_then(|c| c.common_name.as_deref());
    tracing::info!(
        version = %tls.protocol_version().and_then(|v| v.as_str()).unwrap_or("?"),
        client_cn = %client_cn.unwrap_or("-"),
        "TLS handshake done"
    );
    Ok((Stream::new(stream), cert))
}
