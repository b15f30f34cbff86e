//! Who is at the other end of a connection, as far as the transport knows:
//! the address it came from, the listener that took it, the client
//! certificate it showed in a TLS handshake, and, for a client another
//! node of the cluster passed on, what that node vouched for. The
//! listeners (`server.rs`, `tls/`, `cluster/peers.rs`) fill it in; the
//! access checks (`auth/`) and the audit log read it. A leaf: it knows no
//! other module.

use std::fmt;

/// One accepted connection's origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// `203.0.113.7:50122`, `unix` for a unix socket, `local` for an
    /// in-process client (the embedded bridge).
    pub addr: String,
    /// The listener that accepted it, spelled as `-l`/`--tls-listen` bind
    /// it (`127.0.0.1:11300`, `unix:/run/sprout/sprout.sock`), so a policy
    /// can name it.
    pub listener: String,
    /// The verified client certificate, on a TLS listener that got one.
    pub cert: Option<CertIdentity>,
    /// A client another node of this cluster passed on: set only by the
    /// peer listener, after that node proved it is one (its certificate
    /// chains to `--cluster-peer-ca`), and trusted only from there.
    pub vouched: Option<Vouch>,
}

/// What a node of this cluster says of a client it passed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vouch {
    /// The node: its certificate's common name (else its address).
    pub by: String,
    /// The principal it found the client to be, as it would have for a
    /// client of its own; `None`: none (the client must `auth`).
    pub principal: Option<String>,
}

/// What a verified client certificate says about its holder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertIdentity {
    /// The subject's common name, if it has one.
    pub common_name: Option<String>,
    /// Its subject alternative names, each as `DNS:name`, `IP:addr`,
    /// `URI:uri` or `EMAIL:addr`.
    pub sans: Vec<String>,
}

impl Peer {
    /// An in-process client: trusted as the server itself is.
    pub fn local() -> Peer {
        Peer {
            addr: "local".into(),
            listener: "local".into(),
            cert: None,
            vouched: None,
        }
    }
}

impl fmt::Display for Peer {
    /// The address, as log lines show it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.addr)
    }
}
