//! A node's link to NATS, closed to strangers: who the node is to the NATS
//! servers (credentials), how it knows them (TLS), and the rule that keeps
//! the job state off the network in clear text.
//!
//! Why it matters: the stream *is* the job state. Whoever may publish to
//! `sprout.NAME.>` or call its account's JetStream API can forge, delete
//! or read every job. So each cluster gets a NATS account of its own (see
//! docs/security.md), and a node proves it is that account's user
//! with one of: a creds file (`--cluster-creds`: a user JWT and its NKey
//! seed, as `nsc` writes them), a user and password (`--cluster-user`,
//! `--cluster-password-file`: never on the command line, where `ps` and
//! the environment show it), or an NKey seed (`--cluster-nkey`). One kind
//! at most: NATS would take one and ignore the others without a word. A
//! user and password in a URL is refused for the same reason as a password
//! flag; the secrets' files are read when the node connects (after `-u`),
//! and no secret reaches a log line.
//!
//! TLS: `--cluster-tls-ca` verifies the servers (without it, a `tls://`
//! URL is checked against the system's roots); `--cluster-tls-cert` and
//! `--cluster-tls-key` are this node's certificate for servers that verify
//! clients (NATS's `tls { verify: true }`). async-nats reads these files
//! again at every reconnection, so a renewed certificate is taken up
//! without a restart. TLS is on for every server or for none: a NATS
//! cluster has one TLS setup.
//!
//! The rule ([`transport`]): clear text only to NATS on this host. A URL
//! whose host is not loopback needs TLS (a `tls://` URL or the TLS flags),
//! or `--cluster-insecure` to say that clear text is meant (a network the
//! operator trusts). Without TLS a node connects only to the servers it
//! was given, not to those the NATS cluster announces, which may be on
//! other hosts.
//!
//! Connecting ([`connect`]): credentials NATS refuses stop the node at
//! once (they will not improve by waiting); servers that do not answer are
//! tried again for [`REACH_PATIENCE`], for a NATS started alongside the
//! node, and then the node stops naming them and the last error, so a
//! supervisor's restart and its log take over.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use async_nats::{Client, ConnectError, ConnectErrorKind, ConnectOptions, ServerAddr};
use clap::Args;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// How long a node tries servers that do not answer before it stops.
pub const REACH_PATIENCE: Duration = Duration::from_secs(5);

/// How soon an unanswered round of servers is tried again.
const REACH_RETRY: Duration = Duration::from_millis(250);

#[derive(Clone, Debug, Default, Args)]
pub struct LinkArgs {
    /// NATS credentials: a creds FILE (user JWT and NKey seed, as `nsc`
    /// writes them).
    #[arg(long = "cluster-creds", value_name = "FILE", requires = "urls")]
    pub nats_creds: Option<PathBuf>,

    /// NATS user name (with --cluster-password-file).
    #[arg(long = "cluster-user", value_name = "NAME", requires = "urls")]
    pub nats_user: Option<String>,

    /// The NATS user's password: the first line of FILE (kept out of `ps`).
    #[arg(long = "cluster-password-file", value_name = "FILE", requires = "urls")]
    pub nats_password_file: Option<PathBuf>,

    /// NATS credentials: an NKey user seed (`SU...`) in FILE.
    #[arg(long = "cluster-nkey", value_name = "FILE", requires = "urls")]
    pub nats_nkey: Option<PathBuf>,

    /// Verify the NATS servers against the CA certificates in FILE (PEM);
    /// turns TLS on.
    #[arg(long = "cluster-tls-ca", value_name = "FILE", requires = "urls")]
    pub nats_tls_ca: Option<PathBuf>,

    /// This node's client certificate chain for NATS (PEM; with
    /// --cluster-tls-key); turns TLS on.
    #[arg(long = "cluster-tls-cert", value_name = "FILE", requires = "urls")]
    pub nats_tls_cert: Option<PathBuf>,

    /// The private key of --cluster-tls-cert (PEM).
    #[arg(long = "cluster-tls-key", value_name = "FILE", requires = "urls")]
    pub nats_tls_key: Option<PathBuf>,

    /// Allow clear text on the cluster's links: to NATS servers on other
    /// hosts (without it, a non-loopback URL needs tls:// or
    /// --cluster-tls-ca), and between nodes with --auth or --tls-listen
    /// but no --cluster-peer-* flags.
    #[arg(long = "cluster-insecure", requires = "urls")]
    pub nats_insecure: bool,
}

/// Why the link's flags cannot be used, or NATS was not reached.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("{url:?}: {error}")]
    Url {
        url: String,
        #[source]
        error: std::io::Error,
    },
    #[error(
        "a NATS URL holds a user or password: give them with \
         --cluster-user and --cluster-password-file (or --cluster-creds, \
         --cluster-nkey) instead, out of `ps` and the logs"
    )]
    SecretInUrl,
    #[error("no NATS URL given")]
    NoUrl,
    /// A flag given without the one it goes with.
    #[error("{flag} needs {needs}")]
    Alone {
        flag: &'static str,
        needs: &'static str,
    },
    #[error(
        "NATS credentials: give one of --cluster-creds, \
         --cluster-user (with --cluster-password-file) or --cluster-nkey"
    )]
    TwoKinds,
    #[error(
        "{server} is not on this host and the link to it would be clear text, \
         so anyone on the network could read and forge the cluster's jobs: \
         turn TLS on (a tls:// URL, or --cluster-tls-ca FILE) or, on a network \
         you trust, say so with --cluster-insecure"
    )]
    ClearText { server: String },
    #[error("--cluster-creds {}: {error}", file.display())]
    Creds {
        file: PathBuf,
        #[source]
        error: std::io::Error,
    },
    /// A secret's file that could not be read (`http::config::read_token`
    /// words it).
    #[error("{0}")]
    Unread(String),
    #[error("{flag} {}: empty", file.display())]
    Empty { flag: &'static str, file: PathBuf },
    #[error("--cluster-nkey {}: not an NKey user seed (a line starting SU)", .0.display())]
    NotNKey(PathBuf),
    #[error("{flag} {}: {error}", file.display())]
    Pem {
        flag: &'static str,
        file: PathBuf,
        #[source]
        error: rustls_pki_types::pem::Error,
    },
    #[error("{flag} {}: no PEM certificate in it", file.display())]
    NoCert { flag: &'static str, file: PathBuf },
    #[error("NATS at {servers} refused this node: {why}")]
    Refused { servers: String, why: String },
    #[error("cannot reach NATS at {servers} (tried for {tried:?}): {error}")]
    Unreachable {
        servers: String,
        tried: Duration,
        #[source]
        error: ConnectError,
    },
}

/// How a node proves who it is to NATS (file names: no secret is held).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    None,
    Creds(PathBuf),
    User {
        name: String,
        password_file: PathBuf,
    },
    NKey(PathBuf),
}

/// What the link's bytes travel as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// TLS to every server.
    Tls,
    /// Clear text, to servers on this host only.
    Loopback,
    /// Clear text across the network, as `--cluster-insecure` allows.
    Insecure,
}

/// The link's settings, checked.
#[derive(Clone, Debug)]
pub struct Link {
    pub servers: Vec<ServerAddr>,
    pub credentials: Credentials,
    pub ca: Option<PathBuf>,
    /// Certificate chain and key.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    pub transport: Transport,
}

impl Link {
    /// The link to the comma-separated `urls` that `args` ask for.
    pub fn from_args(urls: &str, args: &LinkArgs) -> Result<Link, LinkError> {
        let servers = parse_servers(urls)?;
        let credentials = credentials(args)?;
        let client_cert = match (&args.nats_tls_cert, &args.nats_tls_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            (Some(_), None) => return Err(alone("--cluster-tls-cert", "--cluster-tls-key")),
            (None, Some(_)) => return Err(alone("--cluster-tls-key", "--cluster-tls-cert")),
        };
        let tls_flags = args.nats_tls_ca.is_some() || client_cert.is_some();
        let transport = transport(&servers, tls_flags, args.nats_insecure)?;
        Ok(Link {
            servers,
            credentials,
            ca: args.nats_tls_ca.clone(),
            client_cert,
            transport,
        })
    }

    /// The servers, for messages (a URL holds no secret: see `parse_servers`).
    pub fn describe(&self) -> String {
        let urls: Vec<&str> = self.servers.iter().map(|s| s.as_url_str()).collect();
        urls.join(",")
    }

    /// async-nats's options for this link, reading the secrets' files and
    /// checking the certificates' (so a wrong file is named now, not as a
    /// handshake failure later).
    pub async fn options(&self, node: &str) -> Result<ConnectOptions, LinkError> {
        let mut options = ConnectOptions::new().name(format!("sprout {node}"));
        options = match &self.credentials {
            Credentials::None => options,
            Credentials::Creds(file) => {
                options
                    .credentials_file(file)
                    .await
                    .map_err(|error| LinkError::Creds {
                        file: file.clone(),
                        error,
                    })?
            }
            Credentials::User {
                name,
                password_file,
            } => {
                let flag = "--cluster-password-file";
                let password = crate::http::http_flags::read_token(password_file, flag)
                    .map_err(LinkError::Unread)?;
                if password.is_empty() {
                    return Err(LinkError::Empty {
                        flag,
                        file: password_file.clone(),
                    });
                }
                options.user_and_password(name.clone(), password)
            }
            Credentials::NKey(file) => options.nkey(read_nkey(file)?),
        };
        if let Some(ca) = &self.ca {
            check_certs(ca, "--cluster-tls-ca")?;
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.client_cert {
            check_certs(cert, "--cluster-tls-cert")?;
            PrivateKeyDer::from_pem_file(key).map_err(|error| LinkError::Pem {
                flag: "--cluster-tls-key",
                file: key.clone(),
                error,
            })?;
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(match self.transport {
            Transport::Tls => options.require_tls(true),
            Transport::Loopback | Transport::Insecure => options.ignore_discovered_servers(),
        })
    }
}

/// The `--cluster` URLs. A user or password in one is refused: it would
/// show in `ps`, the environment and every message that names the URL.
fn parse_servers(urls: &str) -> Result<Vec<ServerAddr>, LinkError> {
    let mut servers = Vec::new();
    for url in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let server = ServerAddr::from_str(url).map_err(|error| LinkError::Url {
            url: url.to_string(),
            error,
        })?;
        if server.has_user_pass() || server.password().is_some() {
            return Err(LinkError::SecretInUrl);
        }
        servers.push(server);
    }
    if servers.is_empty() {
        return Err(LinkError::NoUrl);
    }
    Ok(servers)
}

/// The one kind of credentials the flags give, if any.
fn credentials(args: &LinkArgs) -> Result<Credentials, LinkError> {
    let user = match (&args.nats_user, &args.nats_password_file) {
        (Some(name), Some(file)) => Some(Credentials::User {
            name: name.clone(),
            password_file: file.clone(),
        }),
        (None, None) => None,
        (Some(_), None) => return Err(alone("--cluster-user", "--cluster-password-file")),
        (None, Some(_)) => return Err(alone("--cluster-password-file", "--cluster-user")),
    };
    let given: Vec<Credentials> = [
        args.nats_creds.clone().map(Credentials::Creds),
        user,
        args.nats_nkey.clone().map(Credentials::NKey),
    ]
    .into_iter()
    .flatten()
    .collect();
    match <[Credentials; 1]>::try_from(given) {
        Ok([one]) => Ok(one),
        Err(none) if none.is_empty() => Ok(Credentials::None),
        Err(_) => Err(LinkError::TwoKinds),
    }
}

fn alone(flag: &'static str, needs: &'static str) -> LinkError {
    LinkError::Alone { flag, needs }
}

/// The rule of the module docs: TLS if asked for (the flags, or a
/// `tls://`/`wss://` URL), else clear text to loopback servers, else clear
/// text only with `insecure`.
pub fn transport(
    servers: &[ServerAddr],
    tls_flags: bool,
    insecure: bool,
) -> Result<Transport, LinkError> {
    if tls_flags || servers.iter().any(|s| matches!(s.scheme(), "tls" | "wss")) {
        return Ok(Transport::Tls);
    }
    let Some(remote) = servers.iter().find(|s| !is_loopback(s.host())) else {
        return Ok(Transport::Loopback);
    };
    if insecure {
        return Ok(Transport::Insecure);
    }
    Err(LinkError::ClearText {
        server: remote.as_url_str().to_string(),
    })
}

/// `localhost`, or an address in 127.0.0.0/8 or `::1` (also IPv4-mapped).
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// The NKey user seed in `file` (its first line), checked.
fn read_nkey(file: &Path) -> Result<String, LinkError> {
    let seed =
        crate::http::http_flags::read_token(file, "--cluster-nkey").map_err(LinkError::Unread)?;
    let pair = nkeys::KeyPair::from_seed(&seed);
    match pair {
        Ok(pair) if pair.public_key().starts_with('U') => Ok(seed),
        // Never the seed itself in the message.
        _ => Err(LinkError::NotNKey(file.to_path_buf())),
    }
}

/// Fails unless `file` holds at least one PEM certificate.
fn check_certs(file: &Path, flag: &'static str) -> Result<(), LinkError> {
    let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect())
        .map_err(|error| LinkError::Pem {
            flag,
            file: file.to_path_buf(),
            error,
        })?;
    if certs.is_empty() {
        return Err(LinkError::NoCert {
            flag,
            file: file.to_path_buf(),
        });
    }
    Ok(())
}

/// Connects to the link's servers (see the module docs for when it gives up).
pub async fn connect(link: &Link, node: &str) -> Result<Client, LinkError> {
    let started = Instant::now();
    loop {
        let options = link.options(node).await?;
        let error = match options.connect(link.servers.clone()).await {
            Ok(client) => {
                if link.transport == Transport::Insecure {
                    tracing::warn!("the link to NATS is clear text (--cluster-insecure)");
                }
                return Ok(client);
            }
            Err(e) => e,
        };
        let servers = link.describe();
        if let Some(why) = refusal(&error, &link.credentials) {
            return Err(LinkError::Refused { servers, why });
        }
        if started.elapsed() >= REACH_PATIENCE {
            return Err(LinkError::Unreachable {
                servers,
                tried: REACH_PATIENCE,
                error,
            });
        }
        tracing::warn!("cannot reach NATS at {servers}: {error}; trying again");
        tokio::time::sleep(REACH_RETRY).await;
    }
}

/// Why a failed connection is final (waiting will not change it), with
/// what to check; `None` if the servers did not answer (yet).
fn refusal(error: &ConnectError, credentials: &Credentials) -> Option<String> {
    match error.kind() {
        // Its source repeats the kind.
        ConnectErrorKind::AuthorizationViolation => {
            Some(format!("{}; {}", error.kind(), hint(credentials)))
        }
        ConnectErrorKind::Authentication => Some(format!("{error}; {}", hint(credentials))),
        ConnectErrorKind::Tls | ConnectErrorKind::ServerParse => Some(error.to_string()),
        ConnectErrorKind::Dns
        | ConnectErrorKind::TimedOut
        | ConnectErrorKind::Io
        | ConnectErrorKind::MaxReconnects => None,
    }
}

/// What to check when NATS refuses `credentials`.
fn hint(credentials: &Credentials) -> &'static str {
    match credentials {
        Credentials::None => {
            "this node gave no credentials (--cluster-creds, --cluster-user or --cluster-nkey)"
        }
        Credentials::Creds(_) => "check the --cluster-creds file",
        Credentials::User { .. } => "check --cluster-user and --cluster-password-file",
        Credentials::NKey(_) => "check the --cluster-nkey seed",
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
