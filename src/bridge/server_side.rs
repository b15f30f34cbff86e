//! The bridge's connections to the job server: over TCP (`sprout bridge
//! --server`) or in-process (embedded mode, through the server's
//! [`LocalConnector`]), reconnecting with backoff when one is lost.
//!
//! Also the server's *flavour*: sprout takes fractional delays, so timers
//! are set to the millisecond; a classic beanstalkd only takes whole
//! seconds, so delays are rounded up (never early). It is detected without
//! side effects: `pause-tube <a tube that cannot exist> 0.5` answers
//! NOT_FOUND on sprout (the fraction parses, the tube is missing) and
//! BAD_FORMAT on beanstalkd.

use std::time::Duration;

use sprout_protocol::{Command, Response};

use super::backoff::Backoff;
use super::remote::Remote;
use super::server_conn::ServerConn;
use super::triggers::Triggers;
use crate::client::{self, Client};
use crate::connection::LocalConnector;

/// How the bridge reaches the server.
#[derive(Clone)]
pub enum Connector {
    /// Over the network (`sprout bridge --server`).
    Tcp(Remote),
    Local(LocalConnector),
}

impl Connector {
    async fn connect(&self) -> client::Result<ServerConn> {
        match self {
            Connector::Tcp(remote) => remote.connect().await,
            Connector::Local(local) => Ok(Client::new(Box::new(local.connect()))),
        }
    }
}

/// Which delays the server understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// Fractional seconds: delays to the millisecond.
    Sprout,
    /// Whole seconds only.
    Classic,
}

impl Flavour {
    /// Asks the server, without side effects.
    pub async fn detect(conn: &mut ServerConn) -> client::Result<Flavour> {
        let probe = format!("bridge-probe.{}", std::process::id());
        let probe = format!("{probe}.{}", "-".repeat(150 - probe.len()));
        match conn.pause_tube(&probe, Duration::from_millis(500)).await {
            Err(client::Error::Reply(Response::BadFormat)) => Ok(Flavour::Classic),
            Ok(()) | Err(client::Error::Reply(_)) => Ok(Flavour::Sprout),
            Err(e) => Err(e),
        }
    }

    /// The delay that makes a job ready at `at_ms` (Unix ms), never
    /// earlier, seen from `now_ms`.
    pub fn delay(self, at_ms: i64, now_ms: i64) -> Duration {
        let ms = at_ms.saturating_sub(now_ms).max(0) as u64;
        match self {
            Flavour::Sprout => Duration::from_millis(ms),
            Flavour::Classic => Duration::from_secs(ms.div_ceil(1000)),
        }
    }
}

/// Whether the server takes `fire` (sprout's one-step delivery: a
/// reserved timer becomes its delivery, see `engine/fire.rs`) and
/// `reserve-batch`. Asked without side effects: `fire` of job 0, which no
/// server holds, answers NOT_FOUND where it exists; an older sprout or a
/// beanstalkd answers UNKNOWN_COMMAND to the line and to its empty body
/// line, so the answers are read up to the `list-tube-used` sent behind.
pub async fn detect_fire(conn: &mut ServerConn) -> client::Result<bool> {
    let probe = Command::Fire {
        id: 0,
        pri: 0,
        ttr: Duration::from_secs(1),
        body: bytes::Bytes::new(),
    };
    conn.send(&probe).await?;
    conn.send(&Command::ListTubeUsed).await?;
    conn.flush().await?;
    let mut fires = false;
    loop {
        match conn.recv().await? {
            Response::Using(_) => return Ok(fires),
            Response::NotFound => fires = true,
            _ => {}
        }
    }
}

/// One logical connection that survives the loss of the real one: it
/// reconnects (with backoff) on demand and sets its tubes up again.
pub struct Session {
    connector: Connector,
    /// The tube `put` goes to.
    uses: String,
    /// The tube `reserve` takes from, if any (`default` is then ignored).
    watches: Option<String>,
    conn: Option<ServerConn>,
    /// Told whenever a lost connection is replaced (a server restarted
    /// without `-b` may have lost timers: reconcile and verify).
    reconnected: Triggers,
}

/// Reconnecting to the job server: quicker than to Redis (every worker
/// waits on it).
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));

impl Session {
    pub fn new(
        connector: Connector,
        uses: &str,
        watches: Option<&str>,
        reconnected: Triggers,
    ) -> Session {
        Session {
            connector,
            uses: uses.to_owned(),
            watches: watches.map(str::to_owned),
            conn: None,
            reconnected,
        }
    }

    /// The connection, (re)connecting first if needed; retries until the
    /// server answers.
    pub async fn conn(&mut self) -> &mut ServerConn {
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => self.reconnect().await,
        };
        self.conn.insert(conn)
    }

    async fn reconnect(&mut self) -> ServerConn {
        let mut backoff = BACKOFF;
        let mut lost = false;
        loop {
            match self.open().await {
                Ok(conn) => {
                    if lost {
                        tracing::info!("reconnected to the job server");
                    }
                    return conn;
                }
                Err(e) => {
                    if !lost {
                        tracing::warn!(error = %e, "cannot reach the job server; retrying");
                    }
                    lost = true;
                    backoff.wait().await;
                }
            }
        }
    }

    async fn open(&mut self) -> client::Result<ServerConn> {
        let mut conn = self.connector.connect().await?;
        conn.use_tube(&self.uses).await?;
        if let Some(tube) = &self.watches {
            conn.watch(tube).await?;
            conn.ignore("default").await?;
        }
        Ok(conn)
    }

    /// Looks at an error from the connection: a lost connection is dropped
    /// (the next [`Session::conn`] reconnects) and `true` returned; a reply
    /// error (NOT_FOUND, …) leaves the connection alone and returns `false`.
    pub fn failed(&mut self, error: &client::Error) -> bool {
        if matches!(error, client::Error::Reply(_)) {
            return false;
        }
        tracing::warn!(error = %error, "lost the job server connection");
        self.reset();
        self.reconnected.all();
        true
    }

    /// Sends `commands` in one pipeline (one write) and reads their
    /// answers, in order.
    pub async fn pipeline(&mut self, commands: &[Command]) -> client::Result<Vec<Response>> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        let conn = self.conn().await;
        for c in commands {
            conn.send(c).await?;
        }
        conn.flush().await?;
        let mut replies = Vec::with_capacity(commands.len());
        for _ in commands {
            replies.push(conn.recv().await?);
        }
        Ok(replies)
    }

    /// Drops the connection; the next [`Session::conn`] opens a new one.
    pub fn reset(&mut self) {
        self.conn = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_never_early() {
        assert_eq!(
            Flavour::Sprout.delay(1_250, 1_000),
            Duration::from_millis(250)
        );
        assert_eq!(Flavour::Classic.delay(1_250, 1_000), Duration::from_secs(1));
        assert_eq!(Flavour::Classic.delay(3_000, 1_000), Duration::from_secs(2));
        assert_eq!(Flavour::Classic.delay(3_001, 1_000), Duration::from_secs(3));
        assert_eq!(Flavour::Sprout.delay(500, 1_000), Duration::ZERO);
    }
}
