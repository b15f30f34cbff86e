//! TLS on the beanstalk port (`--tls-listen`): rustls with the ring
//! provider, TLS 1.3 and 1.2, no OpenSSL.
//!
//! beanstalkd's answer to "the network can read my jobs" was a stunnel in
//! front of it; here the server ends TLS itself, so it knows who is at the
//! other end: the client certificate, verified against `--tls-client-ca`
//! (then required on every TLS listener), becomes the connection's
//! `peer::CertIdentity`, which the access checks map to a principal.
//!
//! # How, file by file
//!
//! * `tls_flags.rs`: the flags ([`TlsArgs`]) and which combinations make sense
//!   ([`Options::from_args`]).
//! * `pem.rs`: reading the chain, the key and a CA bundle (for the
//!   cluster's peer links too, `cluster/peers.rs`), with errors
//!   that name the file.
//! * `certs.rs`: [`Certs`], the configuration every TLS listener shares,
//!   rebuilt from the same files on SIGHUP (`server.rs` catches the
//!   signal). A bad file is refused and the old configuration kept;
//!   connections already open are not touched.
//! * `handshake.rs`: `accept`, one handshake under the
//!   connection's deadline, and the identity it proved (`identity.rs`:
//!   x509-parser reads the subject and its alternative names), and the
//!   stream it yields (`tls_stream.rs`: it behaves as the plain socket
//!   `connection.rs` expects: a write is done when it is on the socket, a
//!   hang-up without `close_notify` is an end of stream).
//! * `client_config.rs`: [`client_config`], the other side, for the load tool,
//!   the tests and node-to-node links.
//!
//! The accept path itself is in `server.rs`: accept, take a slot of
//! `--max-pending` (`pending::PendingLimit`; none free: close at once),
//! hand the connection to its own task, handshake by the deadline, then
//! serve it as any other.
//!
//! Choices a user may notice: certificates and keys are read before `-u`
//! drops privileges, and again as that user at SIGHUP (a key readable only
//! by root then fails to reload, which is logged, and the old one stays);
//! there is no session ticket key to rotate (rustls's default: TLS 1.3
//! resumption through its in-memory cache only); ALPN is not negotiated
//! (the beanstalk protocol has no name to offer).

mod certs;
mod client_config;
mod handshake;
mod identity;
pub(crate) mod pem;
mod provider;
mod tls_flags;
mod tls_stream;

pub use certs::{on_sighup, Certs};
pub use client_config::client_config;
pub(crate) use handshake::accept;
pub(crate) use provider::provider;
pub use tls_flags::{Files, Options, TlsArgs};
pub use tls_stream::Stream;
