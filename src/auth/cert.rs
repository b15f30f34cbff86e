//! Naming a client certificate in a policy: `CN=<common name>`, or one of
//! its subject alternative names as `DNS:`, `IP:`, `URI:` or `EMAIL:`
//! (the forms `Peer.cert` spells them in). A certificate is that
//! principal's if any of its names is listed under the principal's
//! `certs`.
//!
//! Compared as their standards compare them: a DNS name and an e-mail
//! address without regard to ASCII case, an IP address as an address
//! (`IP:::1` and `IP:0:0::1` are one), a common name and a URI exactly.
//! Only a certificate the TLS listener verified (it chains to
//! `--tls-client-ca`) is ever looked at, so the names are the CA's word.

use std::net::IpAddr;

use crate::peer::CertIdentity;

/// One name of a certificate, normalised for comparing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CertName(String);

impl CertName {
    /// Reads a policy's `certs` entry.
    pub fn parse(text: &str) -> Result<CertName, String> {
        let refuse = |why: &str| {
            format!(
                "cert `{text}` {why}: expected CN=<common name> or a subject alternative \
                 name as DNS:<name>, IP:<address>, URI:<uri> or EMAIL:<address>"
            )
        };
        if let Some(cn) = text.strip_prefix("CN=") {
            if cn.is_empty() {
                return Err(refuse("has an empty common name"));
            }
            return Ok(CertName(text.to_owned()));
        }
        let (kind, value) = text
            .split_once(':')
            .ok_or_else(|| refuse("names no kind"))?;
        if value.is_empty() {
            return Err(refuse("has an empty name"));
        }
        match kind {
            "DNS" | "URI" | "EMAIL" => Ok(CertName::san(kind, value)),
            "IP" => match value.parse::<IpAddr>() {
                Ok(_) => Ok(CertName::san(kind, value)),
                Err(_) => Err(refuse("has no valid IP address")),
            },
            _ => Err(refuse("has an unknown kind")),
        }
    }

    /// The name a certificate's SAN (as `Peer.cert` spells it) compares
    /// as; `None` for a form a policy cannot name.
    fn of_san(san: &str) -> Option<CertName> {
        let (kind, value) = san.split_once(':')?;
        match kind {
            "DNS" | "URI" | "EMAIL" => Some(CertName::san(kind, value)),
            "IP" => value
                .parse::<IpAddr>()
                .ok()
                .map(|_| CertName::san(kind, value)),
            _ => None,
        }
    }

    fn san(kind: &str, value: &str) -> CertName {
        let value = match kind {
            "DNS" | "EMAIL" => value.to_ascii_lowercase(),
            "IP" => value
                .parse::<IpAddr>()
                .map_or(value.into(), |ip| ip.to_string()),
            _ => value.to_owned(),
        };
        CertName(format!("{kind}:{value}"))
    }

    /// Every name `cert` can be found by: its common name and its SANs.
    pub fn all_of(cert: &CertIdentity) -> impl Iterator<Item = CertName> + '_ {
        let cn = cert
            .common_name
            .as_ref()
            .map(|cn| CertName(format!("CN={cn}")));
        cn.into_iter()
            .chain(cert.sans.iter().filter_map(|san| CertName::of_san(san)))
    }
}

impl std::fmt::Display for CertName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_entries() {
        for (text, want) in [
            ("CN=producer-1", Ok("CN=producer-1")),
            ("CN=Producer One", Ok("CN=Producer One")),
            ("DNS:Producer.Internal", Ok("DNS:producer.internal")),
            ("IP:10.0.0.7", Ok("IP:10.0.0.7")),
            ("IP:0:0::1", Ok("IP:::1")),
            ("URI:spiffe://prod/Worker", Ok("URI:spiffe://prod/Worker")),
            ("EMAIL:Ops@Example.com", Ok("EMAIL:ops@example.com")),
            ("CN=", Err("empty common name")),
            ("producer-1", Err("names no kind")),
            ("cn=producer-1", Err("names no kind")),
            ("DNS:", Err("empty name")),
            ("IP:10.0.0.300", Err("no valid IP")),
            ("OU:ops", Err("unknown kind")),
        ] {
            match (CertName::parse(text), want) {
                (Ok(name), Ok(want)) => assert_eq!(name.to_string(), want),
                (Err(e), Err(says)) => assert!(e.contains(says), "{text}: {e}"),
                (got, want) => panic!("{text}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn names_of_a_certificate() {
        let cert = CertIdentity {
            common_name: Some("worker-7".into()),
            sans: vec![
                "DNS:Worker7.Internal".into(),
                "IP:0:0:0:0:0:0:0:1".into(),
                "URI:spiffe://prod/worker".into(),
                "OTHER:x".into(),
            ],
        };
        let names: Vec<String> = CertName::all_of(&cert).map(|n| n.to_string()).collect();
        assert_eq!(
            names,
            [
                "CN=worker-7",
                "DNS:worker7.internal",
                "IP:::1",
                "URI:spiffe://prod/worker"
            ]
        );
        let parsed = |t| CertName::parse(t).unwrap();
        for entry in ["CN=worker-7", "DNS:WORKER7.internal", "IP:::1"] {
            assert!(
                CertName::all_of(&cert).any(|n| n == parsed(entry)),
                "{entry}"
            );
        }
        assert!(!CertName::all_of(&cert).any(|n| n == parsed("CN=Worker-7")));
    }
}
