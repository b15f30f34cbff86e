//! The client's side: a configuration that trusts one CA file and may show
//! a client certificate. For sprout's own clients of a TLS port: the load
//! tool (`benches/load.rs`), the tests, and a node relaying to its leader.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;

use super::pem;
use super::provider::provider;

/// TLS 1.3 and 1.2, trusting the CAs in `ca`; with `identity` (a
/// certificate chain file and its key file), showing that certificate
/// to a server that asks for one.
pub fn client_config(ca: &Path, identity: Option<(&Path, &Path)>) -> io::Result<Arc<ClientConfig>> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(pem::roots(ca)?);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(pem::certs(cert)?, pem::key(key)?)
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} with {}: {e}", cert.display(), key.display()),
                )
            })?,
    };
    Ok(Arc::new(config))
}
