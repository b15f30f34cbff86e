//! The server's TLS configuration, built from its files and rebuilt on
//! SIGHUP. A handshake takes the configuration current at its accept (an
//! `Arc`, so a reload never disturbs a connection already open); a reload
//! builds the whole new configuration first and swaps it in only if every
//! file was good, so a bad file leaves the old certificate serving.

use std::io;
use std::sync::{Arc, RwLock};

use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;

use super::pem;
use super::provider::provider;
use super::tls_flags::Files;

/// The current configuration of every TLS listener, and where it came from.
pub struct Certs {
    files: Files,
    current: RwLock<Arc<ServerConfig>>,
}

impl Certs {
    /// Reads `files`; fails (naming the file) if any is missing or bad.
    pub fn load(files: Files) -> io::Result<Certs> {
        let config = server_config(&files)?;
        Ok(Certs {
            files,
            current: RwLock::new(Arc::new(config)),
        })
    }

    /// The configuration for a handshake starting now.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reloads at every `hup` (SIGHUP) until the signal stream ends,
    /// logging each outcome for `what` (the port these files serve).
    pub async fn reload_at(self: Arc<Self>, hup: tokio::signal::unix::Signal, what: &str) {
        on_sighup(hup, what, || self.reload()).await
    }

    /// Reads the files again and serves what they now hold; on an error
    /// the configuration in use stays.
    pub fn reload(&self) -> io::Result<()> {
        let config = Arc::new(server_config(&self.files)?);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
        Ok(())
    }
}

/// Runs `reload` at every `hup` (SIGHUP) until the signal stream ends,
/// logging each outcome for `what` (the port its files serve).
pub async fn on_sighup(
    mut hup: tokio::signal::unix::Signal,
    what: &str,
    reload: impl Fn() -> io::Result<()>,
) {
    while hup.recv().await.is_some() {
        match reload() {
            Ok(()) => tracing::info!("SIGHUP: reloaded the TLS files ({what})"),
            Err(e) => tracing::error!(
                error = %e,
                "SIGHUP: TLS files refused ({what}); serving the previous ones"
            ),
        }
    }
}

/// TLS 1.3 and 1.2 with `files`' chain and key, and with a client CA,
/// a client certificate chaining to it required.
fn server_config(files: &Files) -> io::Result<ServerConfig> {
    let chain = pem::certs(&files.cert)?;
    let key = pem::key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(pem::roots(ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| io::Error::other(format!("{}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(chain, key).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} with {}: {e}", files.cert.display(), files.key.display()),
        )
    })
}
