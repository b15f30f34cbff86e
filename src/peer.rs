//! Who is at the other end of a connection, as far as the transport knows:
//! the address it came from, the listener that took it, and the client
//! certificate it showed in a TLS handshake. The listeners (`server.rs`,
//! `tls/`) fill it in; the access checks (`auth/`) and the audit log read
//! it. A leaf: it knows no other module.

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
        }
    }
}

impl fmt::Display for Peer {
    /// The address, as log lines show it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.addr)
    }
}
