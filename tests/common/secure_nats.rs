//! A NATS cluster closed as the README's "Security" section sets one up,
//! for the tests of a cluster's closed links (`cluster_secure.rs`):
//!
//! - TLS for clients, which must present a certificate of the test's CA
//!   (`tls { verify: true }`), and for the routes between the servers
//!   (`cluster { tls {} }`); one server certificate for 127.0.0.1;
//! - an account per sprout cluster (`CLUSTER`) whose users, one with a
//!   password and one with an NKey, may publish only to the cluster's
//!   subjects, its lease bucket's and the JetStream API (of their own
//!   account: that is the cluster's streams and nothing else), and
//!   subscribe only to reply inboxes;
//! - another account (`OTHER`) with JetStream and a user of its own, the
//!   stranger with credentials; no user without credentials.
//!
//! A certificate proves only that the CA signed it, so every party gets
//! the same client certificate; the accounts tell them apart.

use std::path::PathBuf;

use async_nats::{Client, ConnectError, ConnectOptions};

use super::certs::Ca;
use super::nats::{Additions, NatsCluster};
use super::TempDir;

/// Who connects to NATS.
#[derive(Clone, Copy, Debug)]
pub enum Who {
    /// The cluster's user with a password.
    Node,
    /// The cluster's user with an NKey.
    NodeNKey,
    /// A user of another account.
    Other,
    /// No credentials.
    Anonymous,
}

const PASSWORD: &str = "cluster-node-password-1";
const OTHER_PASSWORD: &str = "other-account-password-1";

/// A running closed NATS cluster for one sprout cluster (see the module
/// docs).
pub struct SecureNats {
    // Dropped first: the servers go before their certificates.
    pub nats: NatsCluster,
    /// The sprout cluster's name.
    pub name: String,
    pub ca: PathBuf,
    /// A client certificate and key of the CA.
    pub client: (PathBuf, PathBuf),
    password_file: PathBuf,
    nkey_file: PathBuf,
    nkey_seed: String,
    _dir: TempDir,
}

impl SecureNats {
    /// Three servers closed for sprout cluster `name`; `None` without a
    /// NATS server (see `nats.rs`).
    pub fn start(test: &str, name: &str) -> Option<SecureNats> {
        let dir = TempDir::new();
        let ca = Ca::new("sprout test CA");
        let ca_file = ca.write(dir.path(), "ca");
        let (server_cert, server_key) = ca
            .issue("nats", &["127.0.0.1", "localhost"])
            .write(dir.path(), "server");
        let client = ca.issue("client", &[]).write(dir.path(), "client");
        let nkey = nkeys::KeyPair::new_user();
        let nkey_seed = nkey.seed().unwrap();
        let password_file = dir.path().join("password");
        std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
        let nkey_file = dir.path().join("nkey");
        std::fs::write(&nkey_file, &nkey_seed).unwrap();
        let tls = format!(
            "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n}}",
            server_cert.display(),
            server_key.display(),
            ca_file.display()
        );
        let additions = Additions {
            top: format!("{tls}\n{}", accounts(name, &nkey.public_key())),
            cluster: tls,
        };
        let nats = NatsCluster::start_with(3, test, &additions)?;
        Some(SecureNats {
            nats,
            name: name.to_string(),
            ca: ca_file,
            client,
            password_file,
            nkey_file,
            nkey_seed,
            _dir: dir,
        })
    }

    /// The sprout cluster's stream.
    pub fn stream(&self) -> String {
        format!("SPROUT_{}", self.name)
    }

    /// A sprout node's flags for this NATS: TLS with the client
    /// certificate, and the password (or, with `nkey`, the NKey).
    pub fn node_flags(&self, nkey: bool) -> Vec<String> {
        let mut flags = vec![
            "--cluster-tls-ca".to_string(),
            self.ca.display().to_string(),
            "--cluster-tls-cert".into(),
            self.client.0.display().to_string(),
            "--cluster-tls-key".into(),
            self.client.1.display().to_string(),
        ];
        let credentials = if nkey {
            vec![
                "--cluster-nkey".into(),
                self.nkey_file.display().to_string(),
            ]
        } else {
            vec![
                "--cluster-user".into(),
                format!("sprout-{}", self.name),
                "--cluster-password-file".into(),
                self.password_file.display().to_string(),
            ]
        };
        flags.extend(credentials);
        flags
    }

    /// Connects as `who` over TLS, presenting the client certificate if
    /// `cert`.
    pub async fn connect(&self, who: Who, cert: bool) -> Result<Client, ConnectError> {
        let mut options = match who {
            Who::Node => ConnectOptions::with_user_and_password(
                format!("sprout-{}", self.name),
                PASSWORD.into(),
            ),
            Who::NodeNKey => ConnectOptions::with_nkey(self.nkey_seed.clone()),
            Who::Other => {
                ConnectOptions::with_user_and_password("other".into(), OTHER_PASSWORD.into())
            }
            Who::Anonymous => ConnectOptions::new(),
        }
        .add_root_certificates(self.ca.clone())
        .require_tls(true);
        if cert {
            options = options.add_client_certificate(self.client.0.clone(), self.client.1.clone());
        }
        options.connect(self.nats.url_list()).await
    }
}

/// The accounts block: the cluster's account and its users' permissions
/// (as the README shows them), and another account.
fn accounts(name: &str, nkey: &str) -> String {
    format!(
        r#"
SPROUT_NODE = {{
  publish: ["sprout.{name}.>", "$KV.sprout-{name}-lease.>", "$JS.API.>"]
  subscribe: ["_INBOX.>"]
}}
accounts {{
  CLUSTER: {{
    jetstream: enabled
    users: [
      {{ user: "sprout-{name}", password: "{PASSWORD}", permissions: $SPROUT_NODE }}
      {{ nkey: "{nkey}", permissions: $SPROUT_NODE }}
    ]
  }}
  OTHER: {{
    jetstream: enabled
    users: [ {{ user: "other", password: "{OTHER_PASSWORD}" }} ]
  }}
}}
"#
    )
}
