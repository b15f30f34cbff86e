//! What a verified client certificate says about its holder, in the words
//! a policy uses (`peer::CertIdentity`): the subject's common name, and its
//! subject alternative names as `DNS:…`, `IP:…`, `URI:…`, `EMAIL:…` (the
//! prefixes OpenSSL prints). Other kinds of names are left out: a policy
//! cannot name them.

use std::net::IpAddr;

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::peer::CertIdentity;

/// The identity in `der`, a certificate rustls has verified; an error if
/// it does not parse (then nothing it says can be trusted to be read right).
pub fn of(der: &[u8]) -> Result<CertIdentity, String> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| e.to_string())?;
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .map(|cn| cn.as_str().map(str::to_owned))
        .transpose()
        .map_err(|e| format!("common name: {e}"))?;
    let sans = match cert.subject_alternative_name().map_err(|e| e.to_string())? {
        Some(ext) => ext.value.general_names.iter().filter_map(name).collect(),
        None => Vec::new(),
    };
    Ok(CertIdentity { common_name, sans })
}

/// One subject alternative name as a policy spells it.
fn name(general: &GeneralName) -> Option<String> {
    match general {
        GeneralName::DNSName(dns) => Some(format!("DNS:{dns}")),
        GeneralName::URI(uri) => Some(format!("URI:{uri}")),
        GeneralName::RFC822Name(email) => Some(format!("EMAIL:{email}")),
        GeneralName::IPAddress(bytes) => ip(bytes).map(|ip| format!("IP:{ip}")),
        _ => None,
    }
}

fn ip(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    fn cert(cn: Option<&str>, sans: Vec<SanType>) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params
            .distinguished_name
            .push(DnType::OrganizationName, "sprout tests");
        params.subject_alt_names = sans;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn names_as_a_policy_spells_them() {
        let dns = |s: &str| SanType::DnsName(s.try_into().unwrap());
        for (cn, sans, want) in [
            (Some("producer-1"), vec![], (Some("producer-1"), vec![])),
            (None, vec![], (None, vec![])),
            (
                Some("worker"),
                vec![
                    dns("worker.internal"),
                    SanType::IpAddress("10.0.0.7".parse().unwrap()),
                    SanType::IpAddress("::1".parse().unwrap()),
                    SanType::URI("spiffe://example.org/worker".try_into().unwrap()),
                    SanType::Rfc822Name("ops@example.org".try_into().unwrap()),
                ],
                (
                    Some("worker"),
                    vec![
                        "DNS:worker.internal",
                        "IP:10.0.0.7",
                        "IP:::1",
                        "URI:spiffe://example.org/worker",
                        "EMAIL:ops@example.org",
                    ],
                ),
            ),
        ] {
            let got = of(&cert(cn, sans)).unwrap();
            let want = CertIdentity {
                common_name: want.0.map(String::from),
                sans: want.1.into_iter().map(String::from).collect(),
            };
            assert_eq!(got, want, "{cn:?}");
        }
    }

    #[test]
    fn garbage_is_refused() {
        assert!(of(b"not a certificate").is_err());
    }
}
