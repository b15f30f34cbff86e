//! Certificates made in the tests (rcgen), the one way every test makes
//! them: a CA (a root, or an intermediate a CA signs), and the
//! certificates a CA issues (current, expired), as PEM text and files. A
//! certificate from another CA is one issued by a second `Ca::new`.
//! `tls.rs`'s `Pki` is a scratch directory of these for the beanstalk
//! port's TLS tests.
//!
//! Each certificate issued is good for both ends of a TLS connection
//! (server and client auth), as a NATS server's is for its routes, which
//! dial each other with it.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate (PEM).
    pub pem: String,
    /// The certificates sent after one it issues (PEM): itself and the
    /// intermediates above it when it is an intermediate, none for a root.
    chain: String,
}

/// A certificate and its key (PEM).
pub struct Issued {
    /// The certificate, then the intermediates up from its CA (none for
    /// a root's).
    pub cert: String,
    pub key: String,
    /// The certificate alone (DER), as a peer shows it.
    pub der: Vec<u8>,
}

impl Ca {
    /// A self-signed CA named `name`.
    pub fn new(name: &str) -> Ca {
        Ca::make(name, None)
    }

    /// A CA named `name` that this one signs: what it issues chains to
    /// this one's root through it.
    pub fn intermediate(&self, name: &str) -> Ca {
        Ca::make(name, Some(self))
    }

    fn make(name: &str, parent: Option<&Ca>) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let (pem, chain) = match parent {
            Some(parent) => {
                let pem = params.signed_by(&key, &parent.issuer).unwrap().pem();
                (pem.clone(), pem + &parent.chain)
            }
            None => (params.self_signed(&key).unwrap().pem(), String::new()),
        };
        Ca {
            issuer: Issuer::new(params, key),
            pem,
            chain,
        }
    }

    /// A certificate for `common_name` and `sans` (IP addresses or DNS
    /// names), signed by this CA.
    pub fn issue(&self, common_name: &str, sans: &[&str]) -> Issued {
        self.sign(common_name, sans, |_| {})
    }

    /// Like [`Ca::issue`], but valid only in 2020: expired.
    pub fn issue_expired(&self, common_name: &str, sans: &[&str]) -> Issued {
        self.sign(common_name, sans, |params| {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }

    fn sign(
        &self,
        common_name: &str,
        sans: &[&str],
        adjust: impl FnOnce(&mut CertificateParams),
    ) -> Issued {
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        adjust(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert: cert.pem() + &self.chain,
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }

    /// Writes the CA's certificate to `dir/NAME.pem`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, &self.pem).unwrap();
        path
    }
}

impl Issued {
    /// Writes `dir/NAME.pem` and `dir/NAME.key`: (certificate, key).
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert).unwrap();
        std::fs::write(&key, &self.key).unwrap();
        (cert, key)
    }
}
