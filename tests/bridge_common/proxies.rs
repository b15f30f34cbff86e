//! twemproxy (`nutcracker`) in front of Redis nodes.

use std::process::{Command, Stdio};

use super::bridge::{wait_port, Process};
use super::redis_server::Redis;
use crate::common::{TempDir, TestServer};

/// A twemproxy (Debian's `nutcracker`) in front of `backends`, on a free
/// port; its configuration file is [`Nutcracker::config`].
pub struct Nutcracker {
    _process: Process,
    pub port: u16,
    dir: TempDir,
}

impl Nutcracker {
    pub fn start(backends: &[&Redis]) -> Nutcracker {
        let dir = TempDir::new();
        let port = TestServer::free_port();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, r)| format!("   - 127.0.0.1:{}:1 backend{i}\n", r.port))
            .collect();
        let yaml = format!(
            "sprout:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  \
             redis: true\n  servers:\n{servers}"
        );
        std::fs::write(dir.path().join("nutcracker.yml"), yaml).expect("write the config");
        let child = Command::new("nutcracker")
            .arg("-c")
            .arg(dir.path().join("nutcracker.yml"))
            .args([
                "-s",
                &TestServer::free_port().to_string(),
                "-a",
                "127.0.0.1",
            ])
            .arg("-o")
            .arg(dir.path().join("nutcracker.log"))
            .arg("-p")
            .arg(dir.path().join("nutcracker.pid"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nutcracker");
        let process = Process(child);
        wait_port(port, "nutcracker");
        Nutcracker {
            _process: process,
            port,
            dir,
        }
    }

    pub fn config(&self) -> std::path::PathBuf {
        self.dir.path().join("nutcracker.yml")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}
