//! The peer links' flags, the rule, the certificate checks, and the
//! accept path over an in-memory pipe.

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer,
    KeyPair, KeyUsagePurpose,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use super::*;

fn args(listen: bool, cert: bool, key: bool, ca: bool) -> PeerArgs {
    let f = |on: bool, name: &str| on.then(|| PathBuf::from(name));
    PeerArgs {
        listen: listen.then(|| "10.0.0.5:11400".into()),
        cert: f(cert, "node.pem"),
        key: f(key, "node.key"),
        ca: f(ca, "ca.pem"),
    }
}

#[test]
fn all_four_flags_or_none() {
    let all = Peers::from_args(&args(true, true, true, true))
        .unwrap()
        .unwrap();
    assert_eq!(all.listen, "10.0.0.5:11400");
    assert_eq!(all.ca, PathBuf::from("ca.pem"));
    assert_eq!(
        Peers::from_args(&args(false, false, false, false)),
        Ok(None)
    );
    for (a, missing) in [
        (
            args(true, false, false, false),
            "missing --cluster-peer-cert, --cluster-peer-key, --cluster-peer-ca",
        ),
        (
            args(false, true, true, true),
            "missing --cluster-peer-listen",
        ),
        (args(true, true, false, true), "missing --cluster-peer-key"),
        (args(true, true, true, false), "missing --cluster-peer-ca"),
    ] {
        let e = Peers::from_args(&a).unwrap_err().to_string();
        assert!(e.ends_with(missing), "{a:?}: {e}");
        assert!(e.contains("go together"), "{e}");
    }
}

#[test]
fn advertised_by_default_only_when_specific() {
    let peers = |listen: &str| Peers {
        listen: listen.into(),
        ..Peers::from_args(&args(true, true, true, true))
            .unwrap()
            .unwrap()
    };
    for (listen, ok) in [
        ("10.0.0.5:11400", true),
        ("[2001:db8::5]:11400", true),
        ("node-1.internal:11400", true),
        ("0.0.0.0:11400", false),
        ("[::]:11400", false),
        (":11400", false),
    ] {
        match peers(listen).default_advertise() {
            Ok(addr) => assert!(ok && addr == listen, "{listen}: {addr}"),
            Err(e) => {
                let e = e.to_string();
                assert!(!ok && e.contains("--cluster-advertise"), "{listen}: {e}")
            }
        }
    }
}

#[test]
fn clear_text_relays_only_where_nothing_is_protected_or_insecure_says_so() {
    // (peer TLS, guards, --cluster-insecure, allowed)
    let table: [(bool, &[&str], bool, bool); 8] = [
        (false, &[], false, true),
        (false, &["--auth"], false, false),
        (false, &["--tls-listen"], false, false),
        (false, &["--auth", "--tls-listen"], false, false),
        (false, &["--auth", "--tls-listen"], true, true),
        (true, &["--auth", "--tls-listen"], false, true),
        (true, &[], false, true),
        (true, &["--auth"], true, true),
    ];
    for (peer_tls, guards, insecure, allowed) in table {
        match relay_rule(peer_tls, guards, insecure) {
            Ok(()) => assert!(allowed, "{peer_tls} {guards:?} {insecure}"),
            Err(e) => {
                let e = e.to_string();
                assert!(!allowed, "{peer_tls} {guards:?} {insecure}: {e}");
                let needed = [
                    "--cluster-peer-listen",
                    "--cluster-peer-ca",
                    "--cluster-insecure",
                ];
                for flag in guards.iter().chain(&needed) {
                    assert!(e.contains(flag), "{flag}: {e}");
                }
            }
        }
    }
}

#[test]
fn hosts_of_addresses() {
    for (addr, want) in [
        ("10.0.0.5:11400", Some("10.0.0.5")),
        ("[::1]:7", Some("::1")),
        ("node-1.internal:7", Some("node-1.internal")),
        ("node-1.internal", None),
        (":7", None),
        ("h:port", None),
    ] {
        assert_eq!(host_of(addr).ok().as_deref(), want, "{addr}");
    }
}

/// A CA and the node certificates it issues, in a scratch directory.
struct Pki {
    dir: PathBuf,
    ca: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("sprout-peers-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        std::fs::write(dir.join("ca.pem"), pem).unwrap();
        Pki {
            dir,
            ca: Issuer::new(params, key),
        }
    }

    /// `NAME.pem` and `NAME.key`: a certificate for `cn`, 127.0.0.1 and
    /// `localhost` with `usages`.
    fn issue(&self, name: &str, cn: &str, usages: Vec<Eku>) -> Peers {
        let sans = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = usages;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let file = |ext: &str| self.dir.join(format!("{name}.{ext}"));
        std::fs::write(file("pem"), cert.pem()).unwrap();
        std::fs::write(file("key"), key.serialize_pem()).unwrap();
        Peers {
            listen: "127.0.0.1:0".into(),
            cert: file("pem"),
            key: file("key"),
            ca: self.dir.join("ca.pem"),
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn both() -> Vec<Eku> {
    vec![Eku::ServerAuth, Eku::ClientAuth]
}

#[test]
fn a_node_certificate_is_checked_as_the_other_nodes_will() {
    let pki = Pki::new("load");
    let other = Pki::new("load-other");
    let node = pki.issue("node", "n1", both());
    assert!(PeerTls::load(&node, "127.0.0.1:11400").is_ok());
    assert!(PeerTls::load(&node, "localhost:11400").is_ok());
    let foreign = Peers {
        ca: pki.dir.join("ca.pem"),
        ..other.issue("foreign", "n1", both())
    };
    for (peers, advertise, says) in [
        (
            &node,
            "10.9.9.9:11400",
            "refuse it as a server for 10.9.9.9",
        ),
        (
            &node,
            "elsewhere:11400",
            "refuse it as a server for elsewhere",
        ),
        (
            &pki.issue("server", "n1", vec![Eku::ServerAuth]),
            "127.0.0.1:1",
            "as a client",
        ),
        (
            &pki.issue("client", "n1", vec![Eku::ClientAuth]),
            "127.0.0.1:1",
            "as a server",
        ),
        (&foreign, "127.0.0.1:1", "as a server"),
    ] {
        let e = PeerTls::load(peers, advertise)
            .err()
            .expect(advertise)
            .to_string();
        assert!(e.contains(says), "{advertise}: {e}");
        assert!(e.contains(&peers.cert.display().to_string()), "{e}");
    }
    let e = PeerTls::load(&node, "no-port").err().unwrap().to_string();
    assert!(e.contains("HOST:PORT"), "{e}");
}

/// A node's listener (`peers`) and a dialler with `client`, over a pipe:
/// what `accept` makes of a dialler that sends `first`.
async fn accepted(
    peers: &Peers,
    client: Arc<ClientConfig>,
    first: &[u8],
) -> io::Result<(Peer, Vec<u8>)> {
    let tls = PeerTls::load(peers, "127.0.0.1:11400").unwrap();
    let (ours, theirs) = tokio::io::duplex(16 * 1024);
    let first = first.to_vec();
    let dialler = async move {
        let name = server_name("127.0.0.1:11400").unwrap();
        let mut stream = TlsConnector::from(client).connect(name, theirs).await?;
        stream.write_all(&first).await?;
        stream.write_all(b"list-tubes\r\n").await?;
        stream.flush().await?;
        // Held open until the listener is done with it.
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink).await;
        Ok::<_, io::Error>(())
    };
    let node = Peer {
        addr: "127.0.0.1:40000".into(),
        listener: "peer:127.0.0.1:11400".into(),
        cert: None,
        vouched: None,
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let listener = async {
        let (mut stream, peer) = accept(tls.server(), ours, node, deadline).await?;
        let mut rest = vec![0; 12];
        stream.read_exact(&mut rest).await?;
        Ok((peer, rest))
    };
    tokio::select! {
        accepted = listener => accepted,
        Err(e) = dialler => Err(e),
    }
}

#[tokio::test]
async fn only_a_node_gets_to_say_who_its_client_is() {
    let pki = Pki::new("accept");
    let other = Pki::new("accept-other");
    let node = pki.issue("node", "n2", both());
    let config = |peers: &Peers, identity: bool| {
        let id = identity.then_some((peers.cert.as_path(), peers.key.as_path()));
        tls::client_config(&pki.dir.join("ca.pem"), id).unwrap()
    };
    let line = b"relay 203.0.113.7:50122 worker\r\n";
    let (peer, rest) = accepted(&node, config(&node, true), line).await.unwrap();
    assert_eq!(rest, b"list-tubes\r\n");
    assert_eq!(
        peer,
        Peer {
            addr: "203.0.113.7:50122".into(),
            listener: "peer:127.0.0.1:11400".into(),
            cert: None,
            vouched: Some(Vouch {
                by: "n2".into(),
                principal: Some("worker".into()),
            }),
        }
    );
    let (peer, _) = accepted(&node, config(&node, true), b"relay unix\r\n")
        .await
        .unwrap();
    assert_eq!(peer.vouched.unwrap().principal, None);

    let stranger = other.issue("stranger", "n2", both());
    for (client, first, why) in [
        (config(&node, false), &line[..], "NoCertificatesPresented"),
        (config(&stranger, true), &line[..], "UnknownIssuer"),
        (
            config(&node, true),
            &b"put 0 0 1 1\r\n"[..],
            "not a relay line",
        ),
    ] {
        let e = accepted(&node, client, first).await.unwrap_err();
        assert!(format!("{e:?}").contains(why), "{why}: {e:?}");
    }
}

#[test]
fn server_names_of_advertised_addresses() {
    assert!(matches!(
        server_name("[::1]:7"),
        Ok(ServerName::IpAddress(_))
    ));
    assert!(matches!(
        server_name("n1.internal:7"),
        Ok(ServerName::DnsName(_))
    ));
    assert!(server_name("n1.internal").is_err());
}

#[test]
fn sighup_takes_a_good_certificate_and_keeps_the_old_for_a_bad_one() {
    let pki = Pki::new("reload");
    let node = pki.issue("node", "n1", both());
    let tls = PeerTls::load(&node, "127.0.0.1:11400").unwrap();
    let (server, client) = (tls.server(), tls.client());
    // A certificate the other nodes would refuse as a client.
    pki.issue("node", "n1", vec![Eku::ServerAuth]);
    let e = tls.reload().unwrap_err().to_string();
    assert!(e.contains("as a client"), "{e}");
    assert!(Arc::ptr_eq(&server, &tls.server()) && Arc::ptr_eq(&client, &tls.client()));
    pki.issue("node", "n1", both());
    tls.reload().unwrap();
    assert!(!Arc::ptr_eq(&server, &tls.server()) && !Arc::ptr_eq(&client, &tls.client()));
}
