//! A small async beanstalk client over the shared codec.
//!
//! Used by the tests, the examples, the load tool and the Redis bridge, and
//! usable against any beanstalkd-compatible server. Each typed method sends
//! one command and reads its reply; [`Client::send`] and [`Client::recv`]
//! let a caller pipeline many commands before reading the answers.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use sprout_protocol::codec::ClientCodec;
use sprout_protocol::{Command, JobId, Response, TubeName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, ToSocketAddrs, UnixStream};
use tokio_util::codec::Framed;

/// What can go wrong talking to a server.
#[derive(Debug)]
pub enum Error {
    Io(io::Error),
    /// The server answered something other than success for this command
    /// (`NOT_FOUND`, `TIMED_OUT`, `BAD_FORMAT`, …).
    Reply(Response),
    /// The server closed the connection.
    Closed,
    /// A tube name the protocol does not allow.
    BadTubeName(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o error: {e}"),
            Error::Reply(r) => write!(f, "server replied {r:?}"),
            Error::Closed => f.write_str("server closed the connection"),
            Error::BadTubeName(n) => write!(f, "invalid tube name {n:?}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// A job handed out by `reserve` or `peek`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub id: JobId,
    pub body: Bytes,
}

/// Where a `put` landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    Inserted(JobId),
    /// The server could not queue the job and buried it at once.
    Buried(JobId),
}

impl Put {
    pub fn id(self) -> JobId {
        match self {
            Put::Inserted(id) | Put::Buried(id) => id,
        }
    }
}

/// One connection to a beanstalk server.
pub struct Client<S> {
    framed: Framed<S, ClientCodec>,
}

impl Client<TcpStream> {
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Client::new(stream))
    }
}

impl Client<UnixStream> {
    pub async fn connect_unix(path: impl AsRef<Path>) -> Result<Self> {
        Ok(Client::new(UnixStream::connect(path).await?))
    }
}

fn tube(name: &str) -> Result<TubeName> {
    TubeName::new(name.as_bytes()).ok_or_else(|| Error::BadTubeName(name.to_owned()))
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub fn new(stream: S) -> Self {
        Client {
            framed: Framed::new(stream, ClientCodec::new()),
        }
    }

    /// Queues a command without waiting for its answer (see [`Client::flush`]).
    pub async fn send(&mut self, command: &Command) -> Result<()> {
        Ok(self.framed.feed(command).await?)
    }

    /// Writes out every queued command.
    pub async fn flush(&mut self) -> Result<()> {
        Ok(SinkExt::<&Command>::flush(&mut self.framed).await?)
    }

    /// Reads the next answer.
    pub async fn recv(&mut self) -> Result<Response> {
        match self.framed.next().await {
            Some(response) => Ok(response?),
            None => Err(Error::Closed),
        }
    }

    /// Sends one command and reads its answer, whatever it is.
    pub async fn request(&mut self, command: &Command) -> Result<Response> {
        self.framed.send(command).await?;
        self.recv().await
    }

    pub async fn put(
        &mut self,
        pri: u32,
        delay: Duration,
        ttr: Duration,
        body: impl Into<Bytes>,
    ) -> Result<Put> {
        let body = body.into();
        match self
            .request(&Command::Put {
                pri,
                delay,
                ttr,
                body,
                tags: None,
            })
            .await?
        {
            Response::Inserted(id) => Ok(Put::Inserted(id)),
            Response::BuriedId(id) => Ok(Put::Buried(id)),
            other => Err(Error::Reply(other)),
        }
    }

    pub async fn use_tube(&mut self, name: &str) -> Result<()> {
        match self.request(&Command::Use(tube(name)?)).await? {
            Response::Using(_) => Ok(()),
            other => Err(Error::Reply(other)),
        }
    }

    /// Returns how many tubes are watched now.
    pub async fn watch(&mut self, name: &str) -> Result<u32> {
        self.watching(Command::Watch(tube(name)?)).await
    }

    /// Returns how many tubes are watched now.
    pub async fn ignore(&mut self, name: &str) -> Result<u32> {
        self.watching(Command::Ignore(tube(name)?)).await
    }

    async fn watching(&mut self, command: Command) -> Result<u32> {
        match self.request(&command).await? {
            Response::Watching(n) => Ok(n),
            other => Err(Error::Reply(other)),
        }
    }

    pub async fn reserve(&mut self) -> Result<Job> {
        let reply = self.request(&Command::Reserve).await?;
        reserved(reply)
    }

    /// `None` when the timeout passes with no job (TIMED_OUT).
    pub async fn reserve_with_timeout(&mut self, timeout: Duration) -> Result<Option<Job>> {
        match self.request(&Command::ReserveWithTimeout(timeout)).await? {
            Response::TimedOut => Ok(None),
            other => reserved(other).map(Some),
        }
    }

    pub async fn delete(&mut self, id: JobId) -> Result<()> {
        self.expect(&Command::Delete(id), Response::Deleted).await
    }

    pub async fn release(&mut self, id: JobId, pri: u32, delay: Duration) -> Result<()> {
        self.expect(&Command::Release { id, pri, delay }, Response::Released)
            .await
    }

    pub async fn bury(&mut self, id: JobId, pri: u32) -> Result<()> {
        self.expect(&Command::Bury { id, pri }, Response::Buried)
            .await
    }

    pub async fn touch(&mut self, id: JobId) -> Result<()> {
        self.expect(&Command::Touch(id), Response::Touched).await
    }

    pub async fn kick_job(&mut self, id: JobId) -> Result<()> {
        self.expect(&Command::KickJob(id), Response::Kicked).await
    }

    /// Returns how many jobs were kicked.
    pub async fn kick(&mut self, bound: u32) -> Result<u32> {
        match self.request(&Command::Kick(bound)).await? {
            Response::KickedCount(n) => Ok(n),
            other => Err(Error::Reply(other)),
        }
    }

    pub async fn pause_tube(&mut self, name: &str, delay: Duration) -> Result<()> {
        let command = Command::PauseTube {
            tube: tube(name)?,
            delay,
        };
        self.expect(&command, Response::Paused).await
    }

    /// `peek`, `peek-ready`, `peek-delayed` or `peek-buried`; `None` for NOT_FOUND.
    pub async fn peek(&mut self, command: &Command) -> Result<Option<Job>> {
        match self.request(command).await? {
            Response::Found { id, body } => Ok(Some(Job { id, body })),
            Response::NotFound => Ok(None),
            other => Err(Error::Reply(other)),
        }
    }

    /// `stats`, `stats-job`, `stats-tube` or a `list-*` command: the YAML document.
    pub async fn yaml(&mut self, command: &Command) -> Result<String> {
        match self.request(command).await? {
            Response::Ok(body) => Ok(String::from_utf8_lossy(&body).into_owned()),
            other => Err(Error::Reply(other)),
        }
    }

    /// `stats` (or `stats-job`, `stats-tube`) as a map of key to raw value.
    pub async fn stats(&mut self, command: &Command) -> Result<BTreeMap<String, String>> {
        Ok(parse_yaml_map(&self.yaml(command).await?))
    }

    async fn expect(&mut self, command: &Command, success: Response) -> Result<()> {
        match self.request(command).await? {
            reply if reply == success => Ok(()),
            other => Err(Error::Reply(other)),
        }
    }
}

fn reserved(reply: Response) -> Result<Job> {
    match reply {
        Response::Reserved { id, body } => Ok(Job { id, body }),
        other => Err(Error::Reply(other)),
    }
}

/// Reads the flat `key: value` YAML of the stats commands. String values
/// lose their quotes.
pub fn parse_yaml_map(yaml: &str) -> BTreeMap<String, String> {
    yaml.lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .collect()
}

/// Reads the `- item` YAML list of the `list-*` commands.
pub fn parse_yaml_list(yaml: &str) -> Vec<String> {
    yaml.lines()
        .filter_map(|line| line.strip_prefix("- "))
        .map(str::to_owned)
        .collect()
}
