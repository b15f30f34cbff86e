//! Reading PEM files: a certificate chain, a private key, a CA bundle.
//! Every error names the file and what is wrong with it, since it ends up
//! in a startup failure or a refused SIGHUP reload that someone must fix.

use std::io;
use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Every certificate in `path`, in order (at least one).
pub fn certs(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(path, &e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(path, "no CERTIFICATE in it"));
    }
    Ok(certs)
}

/// The first private key in `path` (PKCS#8, PKCS#1 RSA or SEC1 EC).
pub fn key(path: &Path) -> io::Result<PrivateKeyDer<'static>> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => bad(path, "no PRIVATE KEY in it"),
        e => bad(path, &e.to_string()),
    })
}

/// The CA certificates in `path`, as trust anchors.
pub fn roots(path: &Path) -> io::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in certs(path)? {
        roots
            .add(cert)
            .map_err(|e| bad(path, &format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

fn read(path: &Path) -> io::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn bad(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}
