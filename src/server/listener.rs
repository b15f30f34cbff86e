//! The sockets the server accepts connections on: TCP, unix, TLS, the
//! cluster's peer port, or one systemd passed (socket activation).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};

use crate::cluster;
use crate::peer::Peer;
use crate::tls;

/// One socket the server accepts connections on.
pub enum Listener {
    Tcp(TcpListener),
    /// A unix socket, with the path to remove on exit when sprout made it
    /// (a socket systemd passed stays: systemd owns it).
    Unix(UnixListener, Option<PathBuf>),
    /// `--tls-listen`: TCP, every connection a TLS handshake with the
    /// configuration all TLS listeners share.
    Tls(TcpListener, Arc<tls::Certs>),
    /// `--cluster-peer-listen`: TLS for the other nodes of the cluster,
    /// which pass their clients on here.
    Peer(TcpListener, Arc<cluster::PeerTls>),
}

impl Listener {
    /// Binds what one `-l` (with `-p`) names.
    pub async fn bind(listen: &str, port: u16) -> io::Result<Listener> {
        match listen.strip_prefix("unix:") {
            Some(path) => Listener::bind_unix(Path::new(path)),
            None => Ok(Listener::Tcp(TcpListener::bind((listen, port)).await?)),
        }
    }

    /// Binds one `--tls-listen ADDR:PORT`, serving `certs`.
    pub async fn bind_tls(addr: &str, certs: Arc<tls::Certs>) -> io::Result<Listener> {
        Ok(Listener::Tls(TcpListener::bind(addr).await?, certs))
    }

    /// Binds `--cluster-peer-listen ADDR:PORT`, serving `peers`.
    pub async fn bind_peer(addr: &str, peers: Arc<cluster::PeerTls>) -> io::Result<Listener> {
        Ok(Listener::Peer(TcpListener::bind(addr).await?, peers))
    }

    fn bind_unix(path: &Path) -> io::Result<Listener> {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Listener::Unix(
            UnixListener::bind(path)?,
            Some(path.to_owned()),
        ))
    }

    /// Takes over a listening socket systemd passed (socket activation):
    /// TCP or unix, refused if it is not a listening stream socket.
    pub fn inherit(fd: OwnedFd) -> io::Result<Listener> {
        let raw = fd.as_raw_fd();
        let not_ours = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {raw} from systemd is {what}, not a listening stream socket"),
            )
        };
        if sockopt(&fd, libc::SO_TYPE)? != libc::SOCK_STREAM {
            return Err(not_ours("not a stream socket"));
        }
        if sockopt(&fd, libc::SO_ACCEPTCONN)? == 0 {
            return Err(not_ours("not listening"));
        }
        match socket_family(&fd)? {
            libc::AF_INET | libc::AF_INET6 => {
                let l = std::net::TcpListener::from(fd);
                l.set_nonblocking(true)?;
                Ok(Listener::Tcp(TcpListener::from_std(l)?))
            }
            libc::AF_UNIX => {
                let l = std::os::unix::net::UnixListener::from(fd);
                l.set_nonblocking(true)?;
                Ok(Listener::Unix(UnixListener::from_std(l)?, None))
            }
            _ => Err(not_ours("of another family")),
        }
    }

    /// The origin of a connection this listener accepted from `addr`
    /// (its certificate, on a TLS listener, once the handshake is done).
    pub(super) fn peer(&self, addr: String) -> Peer {
        Peer {
            addr,
            listener: self.name(),
            cert: None,
            vouched: None,
        }
    }

    /// Its name in `Peer.listener` and in an `--auth` policy: as bound,
    /// and as `-l` or `--tls-listen` spell it (`127.0.0.1:11300`,
    /// `unix:/run/sprout/sprout.sock`): the `tls:` the log shows before a
    /// TLS listener is left out.
    pub(super) fn name(&self) -> String {
        match self {
            Listener::Tls(l, _) => l.local_addr().map_or("tls:?".into(), |a| a.to_string()),
            // The peer listener's `peer:ADDR`, which no policy names: its
            // clients are who the nodes vouch for (`auth/session.rs`).
            _ => self.to_string(),
        }
    }

    /// The bound TCP address (None for a unix socket).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _) | Listener::Peer(l, _) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }

    /// The TLS configuration it serves, if it is a TLS listener.
    pub(super) fn certs(&self) -> Option<&Arc<tls::Certs>> {
        match self {
            Listener::Tls(_, certs) => Some(certs),
            _ => None,
        }
    }

    /// The peer links' configuration, if it is the peer listener.
    pub(super) fn peers(&self) -> Option<&Arc<cluster::PeerTls>> {
        match self {
            Listener::Peer(_, peers) => Some(peers),
            _ => None,
        }
    }
}

impl std::fmt::Display for Listener {
    /// `127.0.0.1:11300` or `unix:/run/sprout/sprout.sock`, as `-l` reads it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(addr) => write!(f, "{addr}"),
                Err(_) => f.write_str("tcp:?"),
            },
            Listener::Tls(l, _) => match l.local_addr() {
                Ok(addr) => write!(f, "tls:{addr}"),
                Err(_) => f.write_str("tls:?"),
            },
            Listener::Peer(l, _) => match l.local_addr() {
                Ok(addr) => write!(f, "peer:{addr}"),
                Err(_) => f.write_str("peer:?"),
            },
            Listener::Unix(l, _) => {
                match l.local_addr().ok().as_ref().and_then(|a| a.as_pathname()) {
                    Some(path) => write!(f, "unix:{}", path.display()),
                    None => f.write_str("unix:?"),
                }
            }
        }
    }
}

fn sockopt(fd: &OwnedFd, option: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `value`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

fn socket_family(fd: &OwnedFd) -> io::Result<libc::c_int> {
    // SAFETY: an all-zero sockaddr_storage is valid; getsockname fills at
    // most `len` bytes of it.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let r = unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut addr as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(addr.ss_family as libc::c_int)
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, Some(path)) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}
