//! Where an HTTP request came from, whether the port is plain or TLS:
//! what `ConnectInfo` hands the handlers (the audit trail and the failed
//! token limit key on it). Its own type because axum can give a handler
//! the address of a connection only through a type of ours for a
//! listener of ours (`tls_accept.rs`).

use std::net::SocketAddr;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::TcpListener;

use super::tls_accept::TlsListener;

/// The client's address.
#[derive(Clone, Copy, Debug)]
pub struct ClientAddr(pub SocketAddr);

impl Connected<IncomingStream<'_, TcpListener>> for ClientAddr {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> ClientAddr {
        ClientAddr(*stream.remote_addr())
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for ClientAddr {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> ClientAddr {
        ClientAddr(*stream.remote_addr())
    }
}
