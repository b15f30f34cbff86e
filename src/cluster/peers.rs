//! The links between a cluster's nodes, closed to strangers: a standby
//! passes each client to the leader (`relay.rs`) over mutually
//! authenticated TLS, to the leader's peer listener, and says first who
//! the client is (`vouch.rs`), so that a client has the same principal
//! whichever node it connects to.
//!
//! Why: without this the relay is clear text to the leader's beanstalk
//! port, where a relayed client is the standby's address on a plain
//! listener. A client that a standby authenticated by its certificate, or
//! that a standby's listener gives a principal, loses that principal; and
//! the leader cannot tell a standby from anyone else.
//!
//! With `--cluster-peer-listen ADDR:PORT`, `--cluster-peer-cert`,
//! `--cluster-peer-key` and `--cluster-peer-ca` (all or none):
//! - Each node has a certificate of a CA kept for the cluster's nodes.
//!   With it, the node serves its peer listener and dials the leader's, so
//!   it needs both the serverAuth and clientAuth usages, and a name (SAN)
//!   for the host it advertises. Both are checked at start and at SIGHUP
//!   ([`PeerTls::load`]): a wrong certificate is named there, not by
//!   every relay failing later on another node.
//! - The peer listener requires a client certificate of the peer CA. A
//!   stranger (no certificate, or one of the clients' CA) fails the
//!   handshake and never sends a byte the leader reads. Any certificate of
//!   the peer CA is a node: that CA must issue nothing else.
//! - After the handshake, within the same `--handshake-timeout` and
//!   `--max-pending` slot as any TLS handshake ([`accept`]), the standby's
//!   one line: the client's address and the principal the standby found,
//!   by `auth::proven_principal`, the function the leader uses for its
//!   own clients. The leader serves the rest as that client, with the
//!   vouched principal if its policy knows it (`Peer.vouched`, which
//!   nothing but this listener sets; nodes should share one policy).
//! - `--cluster-advertise` then names the peer listener (by default its
//!   address, if it is a specific one): the lease and `stats`'s
//!   `cluster-leader` carry it, and standbys dial it, checking the
//!   leader's certificate against the peer CA and that host.
//!
//! Every node of a cluster is set up alike: a node without peer TLS
//! dials the leader's beanstalk port, one with it the peer port.
//!
//! The rule ([`relay_rule`]): a node that protects its clients (`--auth`,
//! `--tls-listen`) but would pass them on in clear text, losing their
//! principal, refuses to start unless `--cluster-insecure` says so.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use clap::Args;
use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ServerConfig};
use rustls_pki_types::{ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::vouch;
use crate::peer::{Peer, Vouch};
use crate::tls;

#[derive(Clone, Debug, Default, Args)]
pub struct PeerArgs {
    /// Accept the clients other nodes pass on over mutual TLS at ADDR:PORT
    /// (with --cluster-peer-cert, --cluster-peer-key, --cluster-peer-ca);
    /// --cluster-advertise then names this listener.
    #[arg(
        id = "peer_listen",
        long = "cluster-peer-listen",
        value_name = "ADDR:PORT",
        requires = "urls"
    )]
    pub listen: Option<String>,

    /// This node's certificate chain (PEM) for the links between nodes:
    /// it serves --cluster-peer-listen and dials the leader's, so it needs
    /// the serverAuth and clientAuth usages and a name for the advertised
    /// host. Read again on SIGHUP.
    #[arg(
        id = "peer_cert",
        long = "cluster-peer-cert",
        value_name = "FILE",
        requires = "urls"
    )]
    pub cert: Option<PathBuf>,

    /// The private key of --cluster-peer-cert (PEM). Read again on SIGHUP.
    #[arg(
        id = "peer_key",
        long = "cluster-peer-key",
        value_name = "FILE",
        requires = "urls"
    )]
    pub key: Option<PathBuf>,

    /// The CA (PEM) every node's certificate chains to, and that issues
    /// nothing else: whoever holds one of its certificates is a node.
    /// Read again on SIGHUP.
    #[arg(
        id = "peer_ca",
        long = "cluster-peer-ca",
        value_name = "FILE",
        requires = "urls"
    )]
    pub ca: Option<PathBuf>,
}

/// Why the `--cluster-peer-*` flags cannot be used as given.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    #[error(
        "--cluster-peer-listen, --cluster-peer-cert, --cluster-peer-key and \
         --cluster-peer-ca go together: missing {}",
        .0.join(", ")
    )]
    Missing(Vec<&'static str>),
    #[error(
        "--cluster-peer-listen {0} is not an address other nodes can reach: \
         give --cluster-advertise HOST:PORT"
    )]
    Unreachable(String),
    #[error(
        "this node protects its clients ({}), but a standby would pass them to the \
         leader in clear text, where they lose their principal: give \
         --cluster-peer-listen, --cluster-peer-cert, --cluster-peer-key and \
         --cluster-peer-ca (mutual TLS between the nodes), or --cluster-insecure to \
         accept that",
        .0.join(", ")
    )]
    ClearRelay(Vec<String>),
}

/// Peer TLS, as the flags ask for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peers {
    pub listen: String,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl Peers {
    /// None without the flags; all four or an error naming the missing.
    pub fn from_args(args: &PeerArgs) -> Result<Option<Peers>, PeerError> {
        let named = [
            ("--cluster-peer-listen", args.listen.is_some()),
            ("--cluster-peer-cert", args.cert.is_some()),
            ("--cluster-peer-key", args.key.is_some()),
            ("--cluster-peer-ca", args.ca.is_some()),
        ];
        let missing: Vec<&'static str> = named.iter().filter(|f| !f.1).map(|f| f.0).collect();
        match (&args.listen, &args.cert, &args.key, &args.ca) {
            (Some(listen), Some(cert), Some(key), Some(ca)) => Ok(Some(Peers {
                listen: listen.clone(),
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            })),
            _ if missing.len() == named.len() => Ok(None),
            _ => Err(PeerError::Missing(missing)),
        }
    }

    /// Where other nodes reach this one by default: the peer listener's
    /// address, unless it names no one host.
    pub fn default_advertise(&self) -> Result<String, PeerError> {
        let specific = match self.listen.parse::<SocketAddr>() {
            Ok(addr) => !addr.ip().is_unspecified(),
            Err(_) => self
                .listen
                .rsplit_once(':')
                .is_some_and(|(h, _)| !h.is_empty()),
        };
        match specific {
            true => Ok(self.listen.clone()),
            false => Err(PeerError::Unreachable(self.listen.clone())),
        }
    }
}

/// Whether a node may pass its clients on as it is set up: `peer_tls`
/// (the `--cluster-peer-*` flags), `guards` (the flags given that protect
/// clients: `--auth`, `--tls-listen`), `insecure` (`--cluster-insecure`).
pub fn relay_rule(peer_tls: bool, guards: &[&str], insecure: bool) -> Result<(), PeerError> {
    if peer_tls || guards.is_empty() || insecure {
        return Ok(());
    }
    Err(PeerError::ClearRelay(
        guards.iter().map(|g| g.to_string()).collect(),
    ))
}

/// The TLS configurations of a node's peer links: the listener's and the
/// dialler's, from the same files, rebuilt together on SIGHUP.
pub struct PeerTls {
    peers: Peers,
    /// The host other nodes dial this one by (its certificate must name it).
    host: String,
    server: tls::Certs,
    client: RwLock<Arc<ClientConfig>>,
}

impl PeerTls {
    /// Reads the files of `peers` for a node advertised at `advertise`
    /// (`HOST:PORT`), checking that the other nodes will take its
    /// certificate (see the module docs).
    pub fn load(peers: &Peers, advertise: &str) -> io::Result<PeerTls> {
        let host = host_of(advertise)?;
        let client = check_and_build(peers, &host)?;
        let server = tls::Certs::load(files(peers))?;
        Ok(PeerTls {
            peers: peers.clone(),
            host,
            server,
            client: RwLock::new(client),
        })
    }

    /// The listener's configuration for a handshake starting now.
    pub fn server(&self) -> Arc<ServerConfig> {
        self.server.current()
    }

    /// The dialler's configuration for a connection starting now.
    pub fn client(&self) -> Arc<ClientConfig> {
        self.client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reloads at every `hup` (SIGHUP) until the signal stream ends.
    pub async fn reload_at(self: Arc<Self>, hup: tokio::signal::unix::Signal) {
        tls::on_sighup(hup, "the cluster's peer links", || self.reload()).await
    }

    /// Reads the files again; on an error the configurations in use stay.
    pub fn reload(&self) -> io::Result<()> {
        let client = check_and_build(&self.peers, &self.host)?;
        self.server.reload()?;
        *self.client.write().unwrap_or_else(|e| e.into_inner()) = client;
        Ok(())
    }
}

/// The listener's files: the node's certificate, clients of the peer CA.
fn files(peers: &Peers) -> tls::Files {
    tls::Files {
        cert: peers.cert.clone(),
        key: peers.key.clone(),
        client_ca: Some(peers.ca.clone()),
    }
}

/// Checks the node's certificate as the other nodes will (as a server
/// for `host`, as a client), and builds the dialler's configuration.
fn check_and_build(peers: &Peers, host: &str) -> io::Result<Arc<ClientConfig>> {
    let chain = tls::pem::certs(&peers.cert)?;
    let roots = Arc::new(tls::pem::roots(&peers.ca)?);
    let refused = |role: &str, e: &dyn std::fmt::Display| {
        let cert = peers.cert.display();
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{cert}: the other nodes would refuse it as a {role}: {e}"),
        )
    };
    let (leaf, intermediates) = chain.split_first().expect("pem::certs: at least one");
    let name = ServerName::try_from(host.to_owned()).map_err(|e| refused("server", &e))?;
    let now = UnixTime::now();
    let as_server = WebPkiServerVerifier::builder_with_provider(roots.clone(), tls::provider())
        .build()
        .map_err(|e| refused("server", &e))?;
    as_server
        .verify_server_cert(leaf, intermediates, &name, &[], now)
        .map_err(|e| refused(&format!("server for {host}"), &e))?;
    let as_client = WebPkiClientVerifier::builder_with_provider(roots, tls::provider())
        .build()
        .map_err(|e| refused("client", &e))?;
    as_client
        .verify_client_cert(leaf, intermediates, now)
        .map_err(|e| refused("client", &e))?;
    tls::client_config(&peers.ca, Some((&peers.cert, &peers.key)))
}

/// The host of `HOST:PORT` (`[v6]:PORT` too), as a certificate names it.
pub fn host_of(addr: &str) -> io::Result<String> {
    if let Ok(socket) = addr.parse::<SocketAddr>() {
        return Ok(socket.ip().to_string());
    }
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(host.into()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{addr:?} is not HOST:PORT"),
        )),
    }
}

/// The server name to check a node's certificate against when dialling
/// `addr` (`HOST:PORT`).
pub fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    ServerName::try_from(host_of(addr)?).map_err(io::Error::other)
}

/// One connection to the peer listener, accepted as `peer` (its address
/// the node's, its listener the peer listener's): the TLS handshake with
/// `config` (a node's certificate required), then the node's first line,
/// both by `deadline`. Yields the stream to serve, and `peer` as the
/// client the node passed on.
pub async fn accept<S>(
    config: Arc<ServerConfig>,
    stream: S,
    mut peer: Peer,
    deadline: Instant,
) -> io::Result<(impl AsyncRead + AsyncWrite + Unpin + Send, Peer)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (mut stream, cert) = tls::accept(config, stream, deadline).await?;
    let node = cert.ok_or_else(|| io::Error::other("no node certificate"))?;
    let relayed = vouch::read(&mut stream, deadline).await?;
    let by = match node.common_name {
        Some(cn) => cn,
        None => peer.addr.clone(),
    };
    peer.addr = relayed.client;
    peer.vouched = Some(Vouch {
        by,
        principal: relayed.principal,
    });
    Ok((stream, peer))
}

#[cfg(test)]
#[path = "peers_tests.rs"]
mod tests;
