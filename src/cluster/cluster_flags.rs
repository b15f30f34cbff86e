//! Cluster mode's flags, and the options they make.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::lease::Timing;
use super::link::{Link, LinkArgs, LinkError};
use super::meta::check_node_id;
use super::peers::{relay_rule, PeerArgs, PeerError, Peers};
use super::subjects::{NameError, Subjects};

/// Why the cluster flags cannot be used as given.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "--cluster needs --cluster-name NAME: the nodes with the same name share one job \
         state (the same name on every node of the cluster)"
    )]
    NoName,
    #[error("--cluster needs --node-id, unique in the cluster")]
    NoNodeId,
    #[error("-l {0} is not an address other nodes can reach: give --cluster-advertise HOST:PORT")]
    Unreachable(String),
    #[error("--cluster-replicas: 1 to 5 (JetStream's limit)")]
    Replicas,
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Peers(#[from] PeerError),
}

#[derive(Clone, Debug, Args)]
pub struct ClusterArgs {
    /// Run as a node of a replicated cluster on these NATS JetStream
    /// servers (comma-separated nats:// URLs; nats-server 2.12 or newer with
    /// `sync_interval: always`). With -b DIR, the node keeps its copy of the
    /// jobs there (bodies off RAM), rebuilt from the stream at each start.
    #[arg(long = "cluster", value_name = "URLS")]
    pub urls: Option<String>,

    /// The cluster this node belongs to: nodes with the same name share one
    /// job state. Required with --cluster: a default would let a missing or
    /// misspelled name form a second cluster without a word.
    #[arg(long = "cluster-name", value_name = "NAME", requires = "urls")]
    pub name: Option<String>,

    /// This node's name, unique in its cluster.
    #[arg(long = "node-id", value_name = "ID", requires = "urls")]
    pub node_id: Option<String>,

    /// Where other nodes reach this node (HOST:PORT): its beanstalk port
    /// (default: the first -l address and -p, which must then be a
    /// specific address), or with --cluster-peer-listen its peer listener
    /// (default: that address, if it is a specific one).
    #[arg(
        long = "cluster-advertise",
        value_name = "HOST:PORT",
        requires = "urls"
    )]
    pub advertise: Option<String>,

    /// Copies of the job state JetStream keeps (at most the number of NATS
    /// servers; 3 survives the loss of one).
    #[arg(
        long = "cluster-replicas",
        value_name = "N",
        default_value_t = 3,
        requires = "urls"
    )]
    pub replicas: usize,

    /// How long a leader's lease lasts unrenewed, in milliseconds: a dead
    /// leader's service comes back on a standby about this long after.
    #[arg(long = "cluster-lease-ms", value_name = "MS", default_value_t = Timing::DEFAULT_TTL.as_millis() as u64, requires = "urls")]
    pub lease_ms: u64,

    /// The link to NATS: credentials and TLS (`link.rs`).
    #[command(flatten)]
    pub link: LinkArgs,

    /// The links between nodes: mutual TLS (`peers.rs`).
    #[command(flatten)]
    pub peers: PeerArgs,
}

/// A node's cluster settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub link: Link,
    pub name: String,
    pub node: String,
    pub advertise: String,
    pub replicas: usize,
    pub lease_ttl: Duration,
    /// The peer links' TLS, with `--cluster-peer-*`.
    pub peers: Option<Peers>,
    /// With `-b`: where this node keeps its copy of the stream's pages.
    pub local: Option<LocalCopy>,
}

/// A node's copy of the stream's pages on its own disk (`-b DIR`,
/// `page_copy.rs`): job bodies are read back from it rather than held
/// in memory.
#[derive(Clone, Debug)]
pub struct LocalCopy {
    pub dir: PathBuf,
    /// `--body-cache`: the bytes of bodies held in memory besides.
    pub body_cache: u64,
}

impl Options {
    /// The options `args` ask for (`None` without --cluster), given the
    /// server's `-l` addresses and `-p`, the copy `-b` asks for, and the
    /// flags given that protect clients (`--auth`, `--tls-listen`: see
    /// `peers::relay_rule`).
    pub fn from_args(
        args: &ClusterArgs,
        listen: &[String],
        port: u16,
        local: Option<LocalCopy>,
        guards: &[&str],
    ) -> Result<Option<Options>, ConfigError> {
        let Some(urls) = &args.urls else {
            return Ok(None);
        };
        let name = cluster_name(args.name.as_deref())?;
        let link = Link::from_args(urls, &args.link)?;
        let node = args.node_id.clone().ok_or(ConfigError::NoNodeId)?;
        check_node_id(&node)?;
        let peers = Peers::from_args(&args.peers)?;
        relay_rule(peers.is_some(), guards, args.link.nats_insecure)?;
        let advertise = match (&args.advertise, &peers) {
            (Some(addr), _) => addr.clone(),
            (None, Some(peers)) => peers.default_advertise()?,
            (None, None) => default_advertise(listen, port)?,
        };
        if !(1..=5).contains(&args.replicas) {
            return Err(ConfigError::Replicas);
        }
        Ok(Some(Options {
            link,
            name,
            node,
            advertise,
            replicas: args.replicas,
            lease_ttl: Duration::from_millis(args.lease_ms),
            peers,
            local,
        }))
    }
}

/// `--cluster-name`, which has no default: a node started without it, or
/// with a misspelling, would otherwise form a cluster of its own in
/// silence (its own stream and lease), and serve jobs nobody else sees.
fn cluster_name(name: Option<&str>) -> Result<String, ConfigError> {
    let name = name.ok_or(ConfigError::NoName)?;
    Subjects::new(name)?;
    Ok(name.to_string())
}

/// The first `-l` address with `-p`, unless it names no one host.
fn default_advertise(listen: &[String], port: u16) -> Result<String, ConfigError> {
    let first = listen.first().map(String::as_str).unwrap_or("127.0.0.1");
    if first.starts_with("unix:") || first == "0.0.0.0" || first == "::" || first.is_empty() {
        return Err(ConfigError::Unreachable(first.to_string()));
    }
    Ok(if first.contains(':') {
        format!("[{first}]:{port}")
    } else {
        format!("{first}:{port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(node: Option<&str>, advertise: Option<&str>) -> ClusterArgs {
        ClusterArgs {
            urls: Some("nats://127.0.0.1:4222".into()),
            name: Some("sprout".into()),
            node_id: node.map(Into::into),
            advertise: advertise.map(Into::into),
            replicas: 3,
            lease_ms: 1500,
            link: LinkArgs::default(),
            peers: PeerArgs::default(),
        }
    }

    #[test]
    fn what_the_flags_make() {
        let l = |a: &str| vec![a.to_string()];
        let ok = Options::from_args(&args(Some("n1"), None), &l("10.0.0.5"), 11300, None, &[])
            .unwrap()
            .unwrap();
        assert_eq!(ok.advertise, "10.0.0.5:11300");
        let v6 = Options::from_args(&args(Some("n1"), None), &l("::1"), 7, None, &[])
            .unwrap()
            .unwrap();
        assert_eq!(v6.advertise, "[::1]:7");
        let given = Options::from_args(&args(Some("n1"), Some("h:1")), &l("0.0.0.0"), 7, None, &[]);
        assert_eq!(given.unwrap().unwrap().advertise, "h:1");
        let none = ClusterArgs {
            urls: None,
            ..args(None, None)
        };
        assert!(Options::from_args(&none, &l("x"), 1, None, &[])
            .unwrap()
            .is_none());
        for (a, listen, why) in [
            (args(Some("n1"), None), "0.0.0.0", "--cluster-advertise"),
            (args(Some("n1"), None), "unix:/tmp/s", "--cluster-advertise"),
            (args(None, None), "10.0.0.5", "--node-id"),
            (args(Some("a b"), None), "10.0.0.5", "--node-id"),
            (
                ClusterArgs {
                    name: None,
                    ..args(Some("n1"), None)
                },
                "10.0.0.5",
                "--cluster needs --cluster-name",
            ),
        ] {
            let err = Options::from_args(&a, &l(listen), 1, None, &[])
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn with_peer_tls_the_peer_listener_is_advertised() {
        let l = |a: &str| vec![a.to_string()];
        let peers = |advertise: Option<&str>, listen: &str| ClusterArgs {
            peers: PeerArgs {
                listen: Some(listen.into()),
                cert: Some("node.pem".into()),
                key: Some("node.key".into()),
                ca: Some("ca.pem".into()),
            },
            ..args(Some("n1"), advertise)
        };
        let guards = ["--auth", "--tls-listen"];
        let options = |a: &ClusterArgs, guards: &[&str]| {
            Options::from_args(a, &l("0.0.0.0"), 11300, None, guards)
                .map(Option::unwrap)
                .map_err(|e| e.to_string())
        };
        let ok = options(&peers(None, "10.0.0.5:11400"), &guards).unwrap();
        assert_eq!(ok.advertise, "10.0.0.5:11400");
        assert_eq!(ok.peers.unwrap().listen, "10.0.0.5:11400");
        let given = options(&peers(Some("n1.internal:11400"), "0.0.0.0:11400"), &guards);
        assert_eq!(given.unwrap().advertise, "n1.internal:11400");
        let e = options(&peers(None, "0.0.0.0:11400"), &guards).unwrap_err();
        assert!(e.contains("--cluster-advertise"), "{e}");
        let plain = args(Some("n1"), Some("10.0.0.5:11300"));
        let e = options(&plain, &guards).unwrap_err();
        assert!(
            e.contains("protects its clients (--auth, --tls-listen)"),
            "{e}"
        );
        assert!(options(&plain, &[]).unwrap().peers.is_none());
        let insecure = ClusterArgs {
            link: LinkArgs {
                nats_insecure: true,
                ..LinkArgs::default()
            },
            ..plain
        };
        assert!(options(&insecure, &guards).is_ok());
    }
}
