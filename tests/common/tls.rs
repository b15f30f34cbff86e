//! What the TLS tests add to the harness: a small PKI in a scratch
//! directory (its certificates made by `certs.rs`), a server started with
//! a TLS listener, and a client over rustls that the byte-level [`Client`]
//! drives.
//!
//! Not declared in `mod.rs` (it links rustls and sprout's
//! `tls::client_config` into every test binary otherwise): a test that
//! needs it adds `#[path = "common/tls.rs"] mod tls_kit;` beside
//! `mod common;`.

// Each test binary that includes it uses a part.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::{ClientConfig, ClientConnection, StreamOwned};
use rustls_pki_types::ServerName;

use crate::common::certs::Ca;
use crate::common::{binary, Addr, Client, Stream, TempDir, TestServer, IO_TIMEOUT};

/// A root CA, an intermediate that signs the server's certificate, and the
/// files a server and its clients read, in one scratch directory (the
/// certificates from `certs.rs`).
pub struct Pki {
    dir: TempDir,
    root: Ca,
    intermediate: Ca,
}

impl Pki {
    /// `ca.pem` (the root), and `server.pem` (leaf for `localhost` and
    /// 127.0.0.1, then the intermediate) with `server.key`.
    pub fn new() -> Pki {
        let dir = TempDir::new();
        let root = Ca::new("sprout test CA");
        let intermediate = root.intermediate("sprout test intermediate");
        root.write(dir.path(), "ca");
        let pki = Pki {
            dir,
            root,
            intermediate,
        };
        pki.write_server("localhost");
        pki
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// A new server certificate with common name `cn` in `server.pem` and
    /// `server.key` (replacing what was there); its DER.
    pub fn write_server(&self, cn: &str) -> Vec<u8> {
        let server = self.intermediate.issue(cn, &["localhost", "127.0.0.1"]);
        server.write(self.dir.path(), "server");
        server.der
    }

    /// A client certificate for `cn` (and `sans`) signed by the root, as
    /// `NAME.pem` and `NAME.key`.
    pub fn client(&self, name: &str, cn: &str, sans: &[&str]) {
        self.root.issue(cn, sans).write(self.dir.path(), name);
    }

    /// A client certificate of the root that expired in 2021, as `NAME.*`.
    pub fn expired_client(&self, name: &str) {
        self.root
            .issue_expired(name, &[])
            .write(self.dir.path(), name);
    }

    /// A client certificate of a CA the server does not know, as `NAME.*`.
    pub fn foreign_client(&self, name: &str) {
        let stranger = Ca::new("another CA");
        stranger.issue(name, &[]).write(self.dir.path(), name);
    }

    /// `--tls-cert … --tls-key …` for the server's files.
    pub fn server_args(&self) -> Vec<String> {
        let file = |f: &str| self.path(f).display().to_string();
        vec![
            "--tls-cert".into(),
            file("server.pem"),
            "--tls-key".into(),
            file("server.key"),
        ]
    }

    /// A client trusting `ca.pem`, showing the certificate `NAME.pem` if
    /// `identity` names one (sprout's own `tls::client_config`).
    pub fn client_config(&self, identity: Option<&str>) -> Arc<ClientConfig> {
        let files = identity.map(|n| {
            (
                self.path(&format!("{n}.pem")),
                self.path(&format!("{n}.key")),
            )
        });
        let files = files.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        sprout::tls::client_config(&self.path("ca.pem"), files).expect("client config")
    }
}

/// Starts the server with `--tls-listen 127.0.0.1:PORT`, `pki`'s server
/// certificate and `extra` (add `-l`/`-p` for a plain listener beside it).
pub fn start_tls(pki: &Pki, extra: &[&str]) -> TestServer {
    let mut last_err = String::new();
    for _ in 0..5 {
        let port = TestServer::free_port();
        let listen = format!("127.0.0.1:{port}");
        let server_args = pki.server_args();
        let mut args = vec!["--tls-listen", &listen];
        args.extend(server_args.iter().map(String::as_str));
        args.extend_from_slice(extra);
        match TestServer::spawn(&args, Addr::Tcp(port)) {
            Ok(s) => return s,
            Err(e) => last_err = e,
        }
    }
    panic!("could not start {}: {last_err}", binary().display());
}

/// A finished TLS handshake with the server on 127.0.0.1:`port` (the name
/// checked is `localhost`), or why it failed.
pub fn handshake(
    port: u16,
    config: Arc<ClientConfig>,
) -> io::Result<StreamOwned<ClientConnection, TcpStream>> {
    let mut sock = TcpStream::connect(("127.0.0.1", port))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(IO_TIMEOUT))?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    Ok(StreamOwned::new(conn, sock))
}

/// A [`Client`] over TLS to the server on `port`; panics if the handshake
/// fails.
pub fn tls_client(port: u16, config: Arc<ClientConfig>) -> Client {
    let stream = handshake(port, config).expect("TLS handshake");
    Client::over(Box::new(TlsStream(stream)))
}

/// [`tls_client`] with a socket receive buffer of `bytes` (the kernel's
/// autotuning lets a loopback socket buffer tens of MiB otherwise).
pub fn tls_client_with_window(port: u16, config: Arc<ClientConfig>, bytes: usize) -> Client {
    use std::os::fd::AsRawFd;
    let stream = handshake(port, config).expect("TLS handshake");
    let size = bytes as libc::c_int;
    // SAFETY: setsockopt reads `size` for the given length.
    let r = unsafe {
        libc::setsockopt(
            stream.sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_RCVBUF");
    Client::over(Box::new(TlsStream(stream)))
}

/// Handshakes with the server on `port` and sends `list-tubes`: Ok once it
/// is answered, else the handshake's error or (TLS 1.3 checks the client's
/// certificate after the client's side of the handshake is done) the
/// error of the first read.
pub fn list_tubes(port: u16, config: Arc<ClientConfig>) -> io::Result<()> {
    let mut stream = handshake(port, config)?;
    stream.write_all(b"list-tubes\r\n")?;
    let mut answer = [0u8; 64];
    match stream.read(&mut answer)? {
        0 => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed without an alert",
        )),
        _ => Ok(()),
    }
}

/// Why the server on `port` would not serve a client with `config`;
/// panics if it does.
pub fn refusal(port: u16, config: Arc<ClientConfig>) -> io::Error {
    list_tubes(port, config).expect_err("served")
}

/// The DER of the certificate the server on `port` shows now.
pub fn server_cert(port: u16, config: Arc<ClientConfig>) -> Vec<u8> {
    let stream = handshake(port, config).expect("TLS handshake");
    let certs = stream.conn.peer_certificates().expect("server certificate");
    certs[0].to_vec()
}

struct TlsStream(StreamOwned<ClientConnection, TcpStream>);

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl Stream for TlsStream {
    fn set_timeout(&self, t: Option<Duration>) {
        self.0.sock.set_read_timeout(t).expect("set_read_timeout");
    }

    fn shutdown_write(&self) {
        let _ = self.0.sock.shutdown(Shutdown::Write);
    }
}
