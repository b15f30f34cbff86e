//! The cryptography every TLS configuration here uses: rustls's ring
//! provider, named rather than taken from the process default, so that a
//! crate elsewhere in the tree enabling a second provider can never leave
//! rustls unable to choose (it then refuses to build a configuration).

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// ring's provider with its default cipher suites and key exchanges.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
