//! How `sprout bridge` reaches a server on the network: its address, and
//! on a secured server the TLS it speaks (`--server-tls-ca`, and a client
//! certificate for mutual TLS) and the token it authenticates with
//! (`--server-token-file`). The embedded bridge needs none of this: its
//! connections are in-process and trusted as the server itself.
//!
//! On a server with `--auth`, the bridge's principal needs `produce`,
//! `consume` and `inspect` on the delivery tube and on its timer tube
//! (`bridge-timers.<tube>`); docs/security.md.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use sprout_protocol::{Command, Response, Token};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::server_conn::ServerConn;
use crate::client::{self, Client};

/// The flags of the link to the server.
#[derive(Clone, Debug, Default, Args)]
pub struct RemoteArgs {
    /// Speak TLS to --server, trusting the CA certificates in FILE (PEM).
    #[arg(long = "server-tls-ca", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// Show this certificate (PEM chain) to a server that asks for one
    /// (mutual TLS); with --server-tls-key.
    #[arg(long = "server-tls-cert", value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,

    /// The key of --server-tls-cert (PEM).
    #[arg(long = "server-tls-key", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Authenticate to a server with --auth with the token in FILE (its
    /// first line), kept out of `ps`.
    #[arg(long = "server-token-file", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// A server on the network, and how to talk to it.
#[derive(Clone)]
pub struct Remote {
    addr: String,
    tls: Option<Arc<ClientConfig>>,
    token: Option<Token>,
}

/// Why the flags of a secured server make no [`Remote`]; each names its
/// flag.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("--server-tls-*: {0}")]
    Tls(io::Error),
    /// What reading `--server-token-file` said.
    #[error("{0}")]
    Token(String),
    #[error("--server-token-file {}: empty", .0.display())]
    EmptyToken(PathBuf),
}

impl Remote {
    /// `addr` (HOST:PORT) as `args` say; reads the files now, so a bad one
    /// stops the bridge at start, naming its flag.
    pub fn new(addr: String, args: &RemoteArgs) -> Result<Remote, RemoteError> {
        let identity = args.tls_cert.as_deref().zip(args.tls_key.as_deref());
        let tls = match &args.tls_ca {
            None => None,
            Some(ca) => Some(crate::tls::client_config(ca, identity).map_err(RemoteError::Tls)?),
        };
        let token = match &args.token_file {
            None => None,
            Some(file) => {
                let token = crate::http::http_flags::read_token(file, "--server-token-file")
                    .map_err(RemoteError::Token)?;
                if token.is_empty() {
                    return Err(RemoteError::EmptyToken(file.clone()));
                }
                Some(Token::new(token))
            }
        };
        Ok(Remote { addr, tls, token })
    }

    /// A new connection: TCP, then TLS and `auth` if configured.
    pub async fn connect(&self) -> client::Result<ServerConn> {
        let stream = TcpStream::connect(self.addr.as_str()).await?;
        stream.set_nodelay(true)?;
        let mut conn: ServerConn = match &self.tls {
            None => Client::new(Box::new(stream)),
            Some(config) => {
                let name = server_name(&self.addr)?;
                let tls = TlsConnector::from(config.clone()).connect(name, stream);
                Client::new(Box::new(tls.await?))
            }
        };
        if let Some(token) = &self.token {
            match conn.request(&Command::Auth(token.clone())).await? {
                Response::Authenticated => {}
                other => {
                    let why = format!(
                        "the server refused the token of --server-token-file ({other:?}): \
                         is it a principal's in the server's --auth policy?"
                    );
                    return Err(io::Error::new(io::ErrorKind::PermissionDenied, why).into());
                }
            }
        }
        Ok(conn)
    }
}

/// The name a server's certificate must carry: the host of `addr`.
fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_checked_is_the_host() {
        for (addr, want) in [
            ("localhost:11300", Some("localhost")),
            ("127.0.0.1:11443", Some("127.0.0.1")),
            ("[::1]:11443", Some("::1")),
            ("jobs.internal:1", Some("jobs.internal")),
            ("bad name:1", None),
        ] {
            let got = server_name(addr).ok().map(|n| n.to_str().into_owned());
            assert_eq!(got.as_deref(), want, "{addr}");
        }
    }
}
