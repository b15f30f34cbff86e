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
    pub fn from_args(urls: &str, args: &LinkArgs) -> Result<Link, String> {
        let servers = parse_servers(urls)?;
        let credentials = credentials(args)?;
        let client_cert = match (&args.nats_tls_cert, &args.nats_tls_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            (Some(_), None) => return Err("--cluster-tls-cert needs --cluster-tls-key".into()),
            (None, Some(_)) => return Err("--cluster-tls-key needs --cluster-tls-cert".into()),
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
    pub async fn options(&self, node: &str) -> Result<ConnectOptions, String> {
        let mut options = ConnectOptions::new().name(format!("sprout {node}"));
        options = match &self.credentials {
            Credentials::None => options,
            Credentials::Creds(file) => options
                .credentials_file(file)
                .await
                .map_err(|e| format!("--cluster-creds {}: {e}", file.display()))?,
            Credentials::User {
                name,
                password_file,
            } => {
                let flag = "--cluster-password-file";
                let password = crate::http::config::read_token(password_file, flag)?;
                if password.is_empty() {
                    return Err(format!("{flag} {}: empty", password_file.display()));
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
            PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("--cluster-tls-key {}: {e}", key.display()))?;
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
fn parse_servers(urls: &str) -> Result<Vec<ServerAddr>, String> {
    let mut servers = Vec::new();
    for url in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let server = ServerAddr::from_str(url).map_err(|e| format!("{url:?}: {e}"))?;
        if server.has_user_pass() || server.password().is_some() {
            return Err("a NATS URL holds a user or password: give them with \
                        --cluster-user and --cluster-password-file (or --cluster-creds, \
                        --cluster-nkey) instead, out of `ps` and the logs"
                .into());
        }
        servers.push(server);
    }
    if servers.is_empty() {
        return Err("no NATS URL given".into());
    }
    Ok(servers)
}

/// The one kind of credentials the flags give, if any.
fn credentials(args: &LinkArgs) -> Result<Credentials, String> {
    let user = match (&args.nats_user, &args.nats_password_file) {
        (Some(name), Some(file)) => Some(Credentials::User {
            name: name.clone(),
            password_file: file.clone(),
        }),
        (None, None) => None,
        (Some(_), None) => return Err("--cluster-user needs --cluster-password-file".into()),
        (None, Some(_)) => return Err("--cluster-password-file needs --cluster-user".into()),
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
        Err(_) => Err("NATS credentials: give one of --cluster-creds, \
                       --cluster-user (with --cluster-password-file) or --cluster-nkey"
            .into()),
    }
}

/// The rule of the module docs: TLS if asked for (the flags, or a
/// `tls://`/`wss://` URL), else clear text to loopback servers, else clear
/// text only with `insecure`.
pub fn transport(
    servers: &[ServerAddr],
    tls_flags: bool,
    insecure: bool,
) -> Result<Transport, String> {
    if tls_flags || servers.iter().any(|s| matches!(s.scheme(), "tls" | "wss")) {
        return Ok(Transport::Tls);
    }
    let Some(remote) = servers.iter().find(|s| !is_loopback(s.host())) else {
        return Ok(Transport::Loopback);
    };
    if insecure {
        return Ok(Transport::Insecure);
    }
    Err(format!(
        "{} is not on this host and the link to it would be clear text, \
         so anyone on the network could read and forge the cluster's jobs: \
         turn TLS on (a tls:// URL, or --cluster-tls-ca FILE) or, on a network \
         you trust, say so with --cluster-insecure",
        remote.as_url_str()
    ))
}

/// `localhost`, or an address in 127.0.0.0/8 or `::1` (also IPv4-mapped).
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// The NKey user seed in `file` (its first line), checked.
fn read_nkey(file: &Path) -> Result<String, String> {
    let flag = "--cluster-nkey";
    let seed = crate::http::config::read_token(file, flag)?;
    let pair = nkeys::KeyPair::from_seed(&seed);
    match pair {
        Ok(pair) if pair.public_key().starts_with('U') => Ok(seed),
        // Never the seed itself in the message.
        _ => Err(format!(
            "{flag} {}: not an NKey user seed (a line starting SU)",
            file.display()
        )),
    }
}

/// Fails unless `file` holds at least one PEM certificate.
fn check_certs(file: &Path, flag: &str) -> Result<(), String> {
    let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("{flag} {}: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{flag} {}: no PEM certificate in it",
            file.display()
        ));
    }
    Ok(())
}

/// Connects to the link's servers (see the module docs for when it gives up).
pub async fn connect(link: &Link, node: &str) -> Result<Client, String> {
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
            return Err(format!("NATS at {servers} refused this node: {why}"));
        }
        if started.elapsed() >= REACH_PATIENCE {
            let tried = REACH_PATIENCE;
            return Err(format!(
                "cannot reach NATS at {servers} (tried for {tried:?}): {error}"
            ));
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
mod tests {
    use super::*;

    fn servers(urls: &str) -> Vec<ServerAddr> {
        parse_servers(urls).unwrap()
    }

    #[test]
    fn clear_text_only_on_this_host_unless_tls_or_insecure() {
        use Transport::*;
        let loopback =
            "nats://127.0.0.1:4222,localhost:4223,[::1]:4224,127.0.0.2,[::ffff:127.0.0.1]";
        let remote = "nats://10.0.0.5:4222";
        let mixed = "nats://127.0.0.1:4222,nats://nats.internal:4222";
        // (urls, TLS flags, --cluster-insecure, outcome)
        let table: [(&str, bool, bool, Result<Transport, ()>); 14] = [
            (loopback, false, false, Ok(Loopback)),
            (loopback, false, true, Ok(Loopback)),
            (loopback, true, false, Ok(Tls)),
            (remote, false, false, Err(())),
            (remote, false, true, Ok(Insecure)),
            (remote, true, false, Ok(Tls)),
            (mixed, false, false, Err(())),
            (mixed, false, true, Ok(Insecure)),
            ("tls://nats.example:4222", false, false, Ok(Tls)),
            ("tls://a:4222,nats://b:4222", false, false, Ok(Tls)),
            ("wss://nats.example", false, false, Ok(Tls)),
            ("ws://nats.example", false, false, Err(())),
            ("nats://127.0.0.1.example.com", false, false, Err(())),
            ("nats://0.0.0.0:4222", false, false, Err(())),
        ];
        for (urls, tls, insecure, want) in table {
            let got = transport(&servers(urls), tls, insecure);
            match (&got, want) {
                (Ok(t), Ok(w)) => assert_eq!(*t, w, "{urls} tls={tls} insecure={insecure}"),
                (Err(e), Err(())) => {
                    for needed in ["--cluster-tls-ca", "tls://", "--cluster-insecure"] {
                        assert!(e.contains(needed), "{urls}: {e}");
                    }
                }
                _ => panic!("{urls} tls={tls} insecure={insecure}: {got:?}"),
            }
        }
        let e = transport(&servers(mixed), false, false).unwrap_err();
        assert!(e.contains("nats://nats.internal:4222"), "{e}");
    }

    fn args() -> LinkArgs {
        LinkArgs::default()
    }

    #[test]
    fn one_kind_of_credentials_and_whole_pairs() {
        let f = |s: &str| Some(PathBuf::from(s));
        let user = |a: LinkArgs| LinkArgs {
            nats_user: Some("u".into()),
            nats_password_file: f("pw"),
            ..a
        };
        let creds = |a: LinkArgs| LinkArgs {
            nats_creds: f("c"),
            ..a
        };
        let nkey = |a: LinkArgs| LinkArgs {
            nats_nkey: f("k"),
            ..a
        };
        let ok: [(LinkArgs, Credentials); 4] = [
            (args(), Credentials::None),
            (creds(args()), Credentials::Creds("c".into())),
            (nkey(args()), Credentials::NKey("k".into())),
            (
                user(args()),
                Credentials::User {
                    name: "u".into(),
                    password_file: "pw".into(),
                },
            ),
        ];
        for (a, want) in ok {
            let link = Link::from_args("127.0.0.1", &a).unwrap();
            assert_eq!(link.credentials, want);
        }
        let one_of = "give one of --cluster-creds, --cluster-user";
        let bad: [(LinkArgs, &str, &str); 9] = [
            (creds(nkey(args())), "127.0.0.1", one_of),
            (creds(user(args())), "127.0.0.1", one_of),
            (nkey(user(args())), "127.0.0.1", one_of),
            (
                LinkArgs {
                    nats_user: Some("u".into()),
                    ..args()
                },
                "127.0.0.1",
                "--cluster-user needs --cluster-password-file",
            ),
            (
                LinkArgs {
                    nats_password_file: f("pw"),
                    ..args()
                },
                "127.0.0.1",
                "--cluster-password-file needs --cluster-user",
            ),
            (
                LinkArgs {
                    nats_tls_cert: f("c.pem"),
                    ..args()
                },
                "127.0.0.1",
                "--cluster-tls-cert needs --cluster-tls-key",
            ),
            (
                LinkArgs {
                    nats_tls_key: f("k.pem"),
                    ..args()
                },
                "127.0.0.1",
                "--cluster-tls-key needs --cluster-tls-cert",
            ),
            (
                args(),
                "nats://u:secret@127.0.0.1",
                "--cluster-password-file",
            ),
            (args(), " , ", "no NATS URL"),
        ];
        for (a, urls, why) in bad {
            let e = Link::from_args(urls, &a).unwrap_err();
            assert!(e.contains(why), "{urls} {a:?}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
        let cert = LinkArgs {
            nats_tls_cert: f("c.pem"),
            nats_tls_key: f("k.pem"),
            ..args()
        };
        let link = Link::from_args("nats://10.0.0.5", &cert).unwrap();
        assert_eq!(link.transport, Transport::Tls);
    }

    #[test]
    fn refused_credentials_are_final_silence_is_not() {
        use ConnectErrorKind::*;
        let user = Credentials::User {
            name: "u".into(),
            password_file: "pw".into(),
        };
        // (kind, credentials, final, what the message names)
        let table = [
            (
                AuthorizationViolation,
                &user,
                true,
                "--cluster-password-file",
            ),
            (
                AuthorizationViolation,
                &Credentials::None,
                true,
                "no credentials",
            ),
            (
                Authentication,
                &Credentials::NKey("k".into()),
                true,
                "--cluster-nkey",
            ),
            (Tls, &user, true, "TLS"),
            (Io, &user, false, ""),
            (TimedOut, &user, false, ""),
            (Dns, &user, false, ""),
        ];
        for (kind, credentials, last, names) in table {
            let why = refusal(&ConnectError::new(kind), credentials);
            assert_eq!(why.is_some(), last, "{kind:?}");
            assert!(why.unwrap_or_default().contains(names), "{kind:?}");
        }
    }
}
