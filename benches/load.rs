//! The load tool: drives any beanstalk server (sprout, beanstalkd, tuber, …)
//! over loopback TCP and prints one JSON line of results per run.
//!
//! It exists so the servers can be compared side by side with the same client
//! (`benches/compare.sh` runs it alternately against two servers). Every
//! connection pipelines up to `--window` commands, written in one buffer per
//! refill, and every reply is checked: a reply that is not the one expected
//! ends the run with an error instead of being counted.
//!
//! ```text
//! cargo bench --bench load -- put      --addr 127.0.0.1:11300 --conns 50 --jobs 200000 --pid PID
//! cargo bench --bench load -- drain    --conns 50 --jobs 200000
//! cargo bench --bench load -- pingpong --producers 25 --consumers 25 --jobs 200000 [--rate 20000]
//! cargo bench --bench load -- delayed  --jobs 10000 --delay 1 --rate 10000
//! cargo bench --bench load -- delayed  --jobs 1000000 --delay 0.5 --spread 20   # sprout only
//! cargo bench --bench load -- fill     --jobs 1000000 [--delay 3600] [--settle 6] --pid PID
//! ```
//!
//! In `pingpong` and `delayed` each body starts with the time the job should
//! become ready, and consumers record how late it was at `RESERVED` (an early
//! job fails the run). Consumers keep one blocking `reserve-with-timeout` in
//! flight, its delete going out with the next reserve. Unpaced `pingpong`
//! producers stop at `--backlog` unreserved jobs, so its latency is about
//! backlog ÷ throughput; `--rate` measures latency at a fixed load instead.
//! `fill` leaves its jobs in the server.
//!
//! With `--auth-token-file FILE` every connection first authenticates
//! (`auth`, a server with `--auth`), so the cost of the access checks
//! shows beside a run without them.
//!
//! With `--tls CA_FILE` every connection speaks TLS (rustls, sprout's own
//! `tls::client_config`), checking the server's certificate for the host
//! of `--addr` against CA_FILE; `--tls-cert`/`--tls-key` show a client
//! certificate to a server that asks for one. The handshakes happen while
//! connecting, before the clock starts: what is timed is the traffic.
//!
//! With `--pid` (the server's process id) the line also carries the server's
//! CPU time over the timed part (utime + stime from `/proc/PID/stat`, and
//! the kernel's share, stime, on its own) and its memory (`VmRSS`, `VmHWM`
//! from `/proc/PID/status`); with `--helper-pids A,B,C` also the CPU time of
//! processes the server needs (a cluster node's NATS servers), apart.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use clap::{Parser, ValueEnum};
use rustls_pki_types::ServerName;
use sprout_protocol::codec::ClientCodec;
use sprout_protocol::encode::encode_command;
use sprout_protocol::{Command, JobId, Response, Token, TubeName};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tokio_util::codec::Decoder;

/// A connection that has had no reply for this long is declared stalled.
const STALL: Duration = Duration::from_secs(30);
/// How long a consumer's `reserve-with-timeout` waits for a job, in seconds.
const CONSUMER_WAIT: Duration = Duration::from_secs(1);
/// Digits of the time stamp at the front of a stamped body.
const STAMP_LEN: usize = 20;
const PRIORITY: u32 = 1024;
const TTR: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// `--conns` connections put `--jobs` jobs in all.
    Put,
    /// Fill the tube (untimed), then reserve + delete until it is empty (timed).
    Drain,
    /// Producers put while consumers reserve + delete; put→reserve latency.
    Pingpong,
    /// Put delayed jobs while consumers wait; lateness at reserve, none early.
    Delayed,
    /// Put `--jobs` jobs and leave them in the server; its memory per job.
    Fill,
}

/// Drives a beanstalk server and prints one JSON line of results.
#[derive(Debug, Parser)]
#[command(name = "load")]
struct Args {
    scenario: Scenario,
    /// The server's address.
    #[arg(long, default_value = "127.0.0.1:11300")]
    addr: String,
    /// Drain only: the tube holds `--jobs` jobs already (a `-b` server
    /// restarted on a filled store, its bodies cold); drain them.
    #[arg(long)]
    no_fill: bool,
    /// Connections (put, drain, fill).
    #[arg(long, default_value_t = 50)]
    conns: usize,
    /// Jobs in all, split over the connections (or producers).
    #[arg(long, default_value_t = 100_000)]
    jobs: u64,
    /// Body size in bytes (at least 20 for pingpong and delayed, whose
    /// bodies carry a time stamp).
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Tube to use and watch.
    #[arg(long, default_value = "default")]
    tube: String,
    /// Commands in flight per connection.
    #[arg(long, default_value_t = 100)]
    window: usize,
    /// Producer connections (pingpong, delayed).
    #[arg(long, default_value_t = 25)]
    producers: usize,
    /// Consumer connections (pingpong, delayed).
    #[arg(long, default_value_t = 25)]
    consumers: usize,
    /// pingpong: producers wait while this many jobs are put but not yet reserved.
    #[arg(long, default_value_t = 1000)]
    backlog: u64,
    /// Delay of each job in seconds, fractions allowed (delayed: default 1; fill: default 0).
    #[arg(long)]
    delay: Option<f64>,
    /// Spread the delays evenly over this many more seconds (job i of N gets
    /// delay + spread * i / N; beanstalkd only takes whole seconds).
    #[arg(long, default_value_t = 0.0)]
    spread: f64,
    /// Put at most this many jobs per second in all (0: as fast as possible),
    /// which spreads equal delays' deadlines over time.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// The server's process id, to read its CPU time and memory from /proc.
    #[arg(long)]
    pid: Option<u32>,
    /// Processes the server needs besides itself (a cluster node's NATS
    /// servers), comma-separated: their CPU time is reported apart
    /// (`helper_cpu_us_per_job`).
    #[arg(long, value_delimiter = ',')]
    helper_pids: Vec<u32>,
    /// Speak TLS, trusting the CAs in this PEM file.
    #[arg(long, value_name = "CA_FILE")]
    tls: Option<std::path::PathBuf>,
    /// With --tls: the client certificate (PEM chain) to show.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "tls_key"])]
    tls_cert: Option<std::path::PathBuf>,
    /// With --tls-cert: its private key.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Authenticate every connection first (`auth TOKEN`, a server with
    /// --auth) with the token in FILE (its first line).
    #[arg(long, value_name = "FILE")]
    auth_token_file: Option<std::path::PathBuf>,
    /// fill: after the fill, wait this many seconds and read the server's
    /// RSS again (`rss_settled_kb`). Right after a fill the heap still
    /// holds what the burst freed: sprout's heap trimmer (`src/malloc.rs`)
    /// looks every 5 s, so at 10k jobs with `-b` the two readings differ
    /// by ~6 MB, as much as the whole gap to what the server holds.
    #[arg(long, default_value_t = 0.0)]
    settle: f64,
}

type Fallible<T> = Result<T, String>;

fn main() {
    // `cargo bench` passes `--bench` to every bench binary.
    let args = Args::parse_from(std::env::args().filter(|a| a != "--bench"));
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("load: error: {e}");
            std::process::exit(1);
        }
    }
}

async fn run(args: Args) -> Fallible<String> {
    if args.window == 0 || args.conns == 0 || args.producers == 0 || args.consumers == 0 {
        return Err("--window, --conns, --producers and --consumers must be at least 1".into());
    }
    let tube = TubeName::new(args.tube.as_bytes())
        .ok_or_else(|| format!("invalid tube name {:?}", args.tube))?;
    let stamped = matches!(args.scenario, Scenario::Pingpong | Scenario::Delayed);
    if stamped && args.size < STAMP_LEN {
        return Err(format!(
            "--size must be at least {STAMP_LEN} for {:?}",
            args.scenario
        ));
    }
    let default_delay = if args.scenario == Scenario::Delayed {
        1.0
    } else {
        0.0
    };
    let delay = args.delay.unwrap_or(default_delay);
    let numbers = [delay, args.spread, args.rate];
    if !numbers.iter().all(|n| *n >= 0.0 && n.is_finite()) {
        return Err("--delay, --spread and --rate must be non-negative numbers".into());
    }
    let probe = Probe {
        pid: args.pid,
        helpers: args.helper_pids.clone(),
    };
    let mut report = Report::default();
    report.text("scenario", &format!("{:?}", args.scenario).to_lowercase());
    report.text("addr", &args.addr);
    report.number("window", args.window as u64);
    report.number("size", args.size as u64);
    report.number("tls", args.tls.is_some() as u64);
    report.number("auth", args.auth_token_file.is_some() as u64);
    let setup = Setup {
        addr: &args.addr,
        tube: &tube,
        window: args.window,
        tls: tls(&args)?,
        token: token(&args)?,
    };
    // Connect first, so the plan's clock starts with the work. Stamped
    // scenarios have consumers (`conns`) and producers.
    let conns = setup
        .connect(if stamped { args.consumers } else { args.conns })
        .await?;
    let producer_conns = setup
        .connect(if stamped { args.producers } else { 0 })
        .await?;
    let plan = Arc::new(Plan {
        jobs: args.jobs,
        size: args.size,
        body: Bytes::from(vec![b'x'; args.size]),
        delay,
        spread: args.spread,
        rate: args.rate,
        stamped,
        backlog: (args.scenario == Scenario::Pingpong).then_some(args.backlog),
        epoch: Instant::now(),
        put: AtomicU64::new(0),
        reserved: AtomicU64::new(0),
    });
    match args.scenario {
        Scenario::Put => {
            report.number("conns", args.conns as u64);
            let before = probe.sample()?;
            let start = Instant::now();
            run_all(conns, producers(&plan, args.conns), args.window).await?;
            report.timed(args.jobs, start.elapsed(), &probe, before)?;
        }
        Scenario::Drain => {
            report.number("conns", args.conns as u64);
            let conns = match args.no_fill {
                true => conns,
                false => run_all(conns, producers(&plan, args.conns), args.window).await?,
            };
            let before = probe.sample()?;
            let start = Instant::now();
            let consumers = (0..args.conns).map(|_| Consumer::new(Until::Empty, &plan));
            let consumers = join(spawn_all(conns, consumers, args.window)).await?;
            let elapsed = start.elapsed();
            let drained: u64 = consumers.iter().map(|(_, c)| c.deleted).sum();
            if drained != args.jobs {
                return Err(format!(
                    "drained {drained} jobs but put {} (was the tube empty before?)",
                    args.jobs
                ));
            }
            report.timed(drained, elapsed, &probe, before)?;
            // Here "latency" is each reserve's round trip.
            let mut waits: Vec<i64> = consumers.into_iter().flat_map(|(_, c)| c.waits).collect();
            report.lateness(&mut waits);
        }
        Scenario::Pingpong | Scenario::Delayed => {
            report.number("producers", args.producers as u64);
            report.number("consumers", args.consumers as u64);
            report.float("delay", delay);
            report.float("spread", args.spread);
            report.float("rate", args.rate);
            let before = probe.sample()?;
            let start = Instant::now();
            let consumers = (0..args.consumers).map(|_| Consumer::new(Until::All, &plan));
            let consumers = spawn_all(conns, consumers, args.window);
            let producers = spawn_all(
                producer_conns,
                producers(&plan, args.producers),
                args.window,
            );
            join(producers).await?;
            let consumers = join(consumers).await?;
            let last = consumers.iter().filter_map(|(_, c)| c.last_reserve).max();
            let elapsed = last.map_or(Duration::ZERO, |t| t.duration_since(start));
            let mut lateness: Vec<i64> = consumers
                .into_iter()
                .flat_map(|(_, c)| c.lateness)
                .collect();
            if lateness.len() as u64 != args.jobs {
                return Err(format!("reserved {} jobs of {}", lateness.len(), args.jobs));
            }
            report.timed(args.jobs, elapsed, &probe, before)?;
            let early = report.lateness(&mut lateness);
            if early > 0 {
                println!("{}", report.finish());
                return Err(format!(
                    "{early} jobs were reserved before their delay ran out"
                ));
            }
        }
        Scenario::Fill => {
            report.number("conns", args.conns as u64);
            report.float("delay", delay);
            let pid = args.pid.ok_or("fill needs --pid")?;
            let before = probe.sample()?;
            let start = Instant::now();
            run_all(conns, producers(&plan, args.conns), args.window).await?;
            report.timed(args.jobs, start.elapsed(), &probe, before)?;
            let rss_before = before.map_or(0, |s| s.rss_kb);
            let rss_after = status_kb(pid, "VmRSS")?;
            let per_job = (rss_after as f64 - rss_before as f64) * 1024.0 / args.jobs.max(1) as f64;
            report.number("rss_before_kb", rss_before);
            report.float("rss_per_job", per_job);
            report.float("overhead_per_job", per_job - args.size as f64);
            if args.settle > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(args.settle)).await;
                report.number("rss_settled_kb", status_kb(pid, "VmRSS")?);
            }
        }
    }
    Ok(report.finish())
}

/// `--tls …`: how to start TLS on each connection, and the server's name
/// (the host of `--addr`) its certificate must carry.
fn tls(args: &Args) -> Fallible<Option<(TlsConnector, ServerName<'static>)>> {
    let Some(ca) = &args.tls else {
        return Ok(None);
    };
    let identity = args.tls_cert.as_deref().zip(args.tls_key.as_deref());
    let config = sprout::tls::client_config(ca, identity).map_err(|e| e.to_string())?;
    let host = match args.addr.rsplit_once(':') {
        Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']'),
        None => &args.addr,
    };
    let name =
        ServerName::try_from(host.to_string()).map_err(|e| format!("--addr host {host:?}: {e}"))?;
    Ok(Some((TlsConnector::from(config), name)))
}

/// `--auth-token-file`'s token.
fn token(args: &Args) -> Fallible<Option<Token>> {
    let Some(file) = &args.auth_token_file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(Some(Token::new(
        text.lines().next().unwrap_or("").trim().to_owned(),
    )))
}

/// What to connect to and how every connection is set up.
struct Setup<'a> {
    addr: &'a str,
    tube: &'a TubeName,
    window: usize,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    /// Sent as `auth` before anything else.
    token: Option<Token>,
}

impl Setup<'_> {
    /// Opens `n` connections, each using and watching only the tube.
    async fn connect(&self, n: usize) -> Fallible<Vec<Conn>> {
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            let tcp = TcpStream::connect(self.addr)
                .await
                .map_err(|e| format!("connect to {}: {e}", self.addr))?;
            tcp.set_nodelay(true).map_err(|e| e.to_string())?;
            let stream = match &self.tls {
                None => Stream::Plain(tcp),
                Some((connector, name)) => {
                    let tls = connector.connect(name.clone(), tcp).await;
                    let tls = tls.map_err(|e| format!("TLS handshake with {}: {e}", self.addr))?;
                    let (rx, tx) = tokio::io::split(tls);
                    Stream::Tls {
                        rx,
                        tx,
                        unflushed: false,
                    }
                }
            };
            let mut conn = Conn {
                stream,
                rbuf: BytesMut::with_capacity(64 * 1024),
                wbuf: BytesMut::with_capacity(64 * 1024),
                codec: ClientCodec::new(),
            };
            if let Some(token) = &self.token {
                let auth = (Command::Auth(token.clone()), Response::Authenticated);
                conn.run(&mut Script(VecDeque::from([auth])), self.window)
                    .await?;
            }
            if *self.tube != TubeName::default_tube() {
                let mut script = Script(VecDeque::from([
                    (
                        Command::Use(self.tube.clone()),
                        Response::Using(self.tube.clone()),
                    ),
                    (Command::Watch(self.tube.clone()), Response::Watching(2)),
                    (
                        Command::Ignore(TubeName::default_tube()),
                        Response::Watching(1),
                    ),
                ]));
                conn.run(&mut script, self.window).await?;
            }
            conns.push(conn);
        }
        Ok(conns)
    }
}

/// What a connection's work offers to send next.
enum Next<T> {
    /// A command was encoded; its reply will come back with this tag.
    Send(T),
    /// Nothing to send until a reply comes or other connections make progress.
    Wait,
    /// Nothing more to send.
    Done,
}

/// The commands of one connection and the check of their replies.
trait Work {
    /// What the work remembers about a command until its reply.
    type Tag;
    fn next(&mut self, buf: &mut BytesMut) -> Next<Self::Tag>;
    /// Checks the reply to the command tagged `tag` (replies come in order).
    fn reply(&mut self, tag: Self::Tag, reply: Response) -> Fallible<()>;
}

/// One connection with its buffers: the only place that does socket I/O.
struct Conn {
    stream: Stream,
    rbuf: BytesMut,
    wbuf: BytesMut,
    codec: ClientCodec,
}

/// A connection's socket, plain or TLS.
enum Stream {
    Plain(TcpStream),
    /// Split so that a read and a write can wait at once; `unflushed`:
    /// written, but rustls may still hold some of it (a write that met a
    /// full socket), to be flushed before waiting only on replies.
    Tls {
        rx: ReadHalf<TlsStream<TcpStream>>,
        tx: WriteHalf<TlsStream<TcpStream>>,
        unflushed: bool,
    },
}

impl Conn {
    /// Runs `work` to the end with up to `window` commands in flight. Once
    /// half the window is answered it is refilled, all new commands going out
    /// in one write; reading and writing interleave, so neither side can
    /// block the other however big the window.
    async fn run<W: Work>(&mut self, work: &mut W, window: usize) -> Fallible<()> {
        let mut tags = VecDeque::with_capacity(window);
        let refill_at = window / 2;
        loop {
            if tags.len() <= refill_at {
                let mut done = false;
                while tags.len() < window {
                    match work.next(&mut self.wbuf) {
                        Next::Send(tag) => tags.push_back(tag),
                        Next::Wait => break,
                        Next::Done => {
                            done = true;
                            break;
                        }
                    }
                }
                if tags.is_empty() {
                    if done {
                        return Ok(());
                    }
                    // Waiting on other connections with nothing in flight.
                    tokio::time::sleep(Duration::from_micros(500)).await;
                    continue;
                }
            }
            let read = tokio::time::timeout(STALL, self.transfer())
                .await
                .map_err(|_| {
                    let work = std::any::type_name::<W>().rsplit("::").next().unwrap_or("");
                    let n = tags.len();
                    format!("server stalled: no reply for {STALL:?} to {work}'s {n} commands")
                })?
                .map_err(io_error)?;
            match read {
                Read::Closed => return Err("the server closed the connection".into()),
                Read::Nothing => {}
                Read::Some => {
                    while let Some(reply) = self.codec.decode(&mut self.rbuf).map_err(io_error)? {
                        let tag = tags
                            .pop_front()
                            .ok_or_else(|| format!("reply {reply:?} to no command"))?;
                        work.reply(tag, reply)?;
                    }
                }
            }
        }
    }

    /// Waits until the socket takes some of `wbuf` or has bytes for `rbuf`,
    /// and moves what it can.
    async fn transfer(&mut self) -> io::Result<Read> {
        self.rbuf.reserve(16 * 1024);
        let read = |n: usize| if n == 0 { Read::Closed } else { Read::Some };
        match &mut self.stream {
            Stream::Plain(stream) => {
                let interest = if self.wbuf.is_empty() {
                    Interest::READABLE
                } else {
                    Interest::READABLE | Interest::WRITABLE
                };
                let ready = stream.ready(interest).await?;
                if ready.is_writable() && !self.wbuf.is_empty() {
                    match stream.try_write(&self.wbuf) {
                        Ok(n) => self.wbuf.advance(n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                if !ready.is_readable() {
                    return Ok(Read::Nothing);
                }
                match stream.try_read_buf(&mut self.rbuf) {
                    Ok(n) => Ok(read(n)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Read::Nothing),
                    Err(e) => Err(e),
                }
            }
            Stream::Tls { rx, tx, unflushed } => {
                let sending = !self.wbuf.is_empty() || *unflushed;
                let wbuf = &mut self.wbuf;
                // Cancelled when a read comes first: a write or flush not
                // finished has taken nothing.
                let send = async {
                    if wbuf.is_empty() {
                        tx.flush().await?;
                        *unflushed = false;
                    } else {
                        wbuf.advance(tx.write(wbuf).await?);
                        *unflushed = true;
                    }
                    Ok(Read::Nothing)
                };
                tokio::select! {
                    n = rx.read_buf(&mut self.rbuf) => Ok(read(n?)),
                    sent = send, if sending => sent,
                }
            }
        }
    }
}

/// What one [`Conn::transfer`] read.
enum Read {
    Some,
    Nothing,
    Closed,
}

fn io_error(e: io::Error) -> String {
    format!("i/o error: {e}")
}

/// Starts one task per connection.
fn spawn_all<W>(
    conns: Vec<Conn>,
    works: impl IntoIterator<Item = W>,
    window: usize,
) -> Vec<JoinHandle<Fallible<(Conn, W)>>>
where
    W: Work + Send + 'static,
    W::Tag: Send,
{
    conns
        .into_iter()
        .zip(works)
        .map(|(mut conn, mut work)| {
            tokio::spawn(async move {
                conn.run(&mut work, window).await?;
                Ok((conn, work))
            })
        })
        .collect()
}

/// Waits for every task; the first error wins.
async fn join<W>(handles: Vec<JoinHandle<Fallible<(Conn, W)>>>) -> Fallible<Vec<(Conn, W)>> {
    let mut done = Vec::with_capacity(handles.len());
    for handle in handles {
        done.push(handle.await.map_err(|e| e.to_string())??);
    }
    Ok(done)
}

/// Runs one work per connection to the end and hands the connections back.
async fn run_all<W>(
    conns: Vec<Conn>,
    works: impl IntoIterator<Item = W>,
    window: usize,
) -> Fallible<Vec<Conn>>
where
    W: Work + Send + 'static,
    W::Tag: Send,
{
    let done = join(spawn_all(conns, works, window)).await?;
    Ok(done.into_iter().map(|(conn, _)| conn).collect())
}

/// Commands with the exact reply each must get (connection setup).
struct Script(VecDeque<(Command, Response)>);

impl Work for Script {
    type Tag = (Command, Response);

    fn next(&mut self, buf: &mut BytesMut) -> Next<Self::Tag> {
        match self.0.pop_front() {
            Some(step) => {
                encode_command(&step.0, buf);
                Next::Send(step)
            }
            None => Next::Done,
        }
    }

    fn reply(&mut self, (command, expected): Self::Tag, reply: Response) -> Fallible<()> {
        if reply == expected {
            Ok(())
        } else {
            Err(format!("{command:?}: expected {expected:?}, got {reply:?}"))
        }
    }
}

/// The jobs of one run and the progress shared by its connections.
struct Plan {
    jobs: u64,
    size: usize,
    /// The body of unstamped jobs.
    body: Bytes,
    delay: f64,
    spread: f64,
    /// Puts per second in all (0: no limit).
    rate: f64,
    /// Bodies start with the time the job should become ready (pingpong, delayed).
    stamped: bool,
    /// Producers wait while this many jobs are put but not reserved.
    backlog: Option<u64>,
    /// Time zero of the stamps.
    epoch: Instant,
    put: AtomicU64,
    reserved: AtomicU64,
}

impl Plan {
    /// The delay of job `index` (0-based).
    fn delay_of(&self, index: u64) -> Duration {
        Duration::from_secs_f64(self.delay + self.spread * index as f64 / self.jobs.max(1) as f64)
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// Puts jobs `first`, `first + step`, … below `plan.jobs`.
fn producers(plan: &Arc<Plan>, n: usize) -> impl Iterator<Item = Producer> + '_ {
    (0..n as u64).map(move |first| Producer {
        plan: Arc::clone(plan),
        index: first,
        step: n as u64,
    })
}

struct Producer {
    plan: Arc<Plan>,
    index: u64,
    step: u64,
}

impl Work for Producer {
    type Tag = ();

    fn next(&mut self, buf: &mut BytesMut) -> Next<()> {
        let plan = &*self.plan;
        if self.index >= plan.jobs {
            return Next::Done;
        }
        if plan.rate > 0.0 && (self.index as f64 / plan.rate) > plan.epoch.elapsed().as_secs_f64() {
            return Next::Wait;
        }
        if let Some(backlog) = plan.backlog {
            let reserved = plan.reserved.load(Ordering::Relaxed);
            if plan.put.load(Ordering::Relaxed).saturating_sub(reserved) >= backlog {
                return Next::Wait;
            }
        }
        let delay = plan.delay_of(self.index);
        let body = if plan.stamped {
            let ready_at = plan.now() + delay.as_nanos() as u64;
            let mut body = String::with_capacity(plan.size);
            write!(body, "{ready_at:0width$}", width = STAMP_LEN).expect("write to String");
            body.extend(std::iter::repeat_n('x', plan.size - STAMP_LEN));
            Bytes::from(body)
        } else {
            plan.body.clone()
        };
        let put = Command::Put {
            pri: PRIORITY,
            delay,
            ttr: TTR,
            body,
            tags: None,
        };
        encode_command(&put, buf);
        plan.put.fetch_add(1, Ordering::Relaxed);
        self.index += self.step;
        Next::Send(())
    }

    fn reply(&mut self, (): (), reply: Response) -> Fallible<()> {
        match reply {
            Response::Inserted(_) => Ok(()),
            other => Err(format!("put: expected INSERTED, got {other:?}")),
        }
    }
}

/// When a consumer stops.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    /// At its first `TIMED_OUT` to `reserve-with-timeout 0`: the tube is empty.
    Empty,
    /// When all `plan.jobs` jobs are reserved (by any consumer). Its
    /// `reserve-with-timeout` blocks, and a server answers a connection's
    /// commands in order, so only one is in flight at a time: a delete
    /// queued behind it would wait for it, and at the end each one left
    /// would wait out its timeout.
    All,
}

enum Sent {
    /// A reserve, sent at this moment.
    Reserve(Instant),
    Delete,
}

/// Reserves and deletes jobs.
struct Consumer {
    plan: Arc<Plan>,
    until: Until,
    stopped: bool,
    /// A blocking reserve is in flight (`Until::All`).
    blocked: bool,
    deletes: Vec<JobId>,
    deleted: u64,
    /// Nanoseconds from each stamped job's ready time to its reserve.
    lateness: Vec<i64>,
    /// Nanoseconds from sending each reserve that got a job to its answer.
    waits: Vec<i64>,
    last_reserve: Option<Instant>,
}

impl Consumer {
    fn new(until: Until, plan: &Arc<Plan>) -> Consumer {
        Consumer {
            plan: Arc::clone(plan),
            until,
            stopped: false,
            blocked: false,
            deletes: Vec::new(),
            deleted: 0,
            lateness: Vec::new(),
            waits: Vec::new(),
            last_reserve: None,
        }
    }
}

impl Work for Consumer {
    type Tag = Sent;

    fn next(&mut self, buf: &mut BytesMut) -> Next<Sent> {
        if let Some(id) = self.deletes.pop() {
            encode_command(&Command::Delete(id), buf);
            return Next::Send(Sent::Delete);
        }
        let timeout = match self.until {
            Until::Empty if !self.stopped => Duration::ZERO,
            Until::All if self.blocked => return Next::Wait,
            Until::All if self.plan.reserved.load(Ordering::Relaxed) < self.plan.jobs => {
                self.blocked = true;
                CONSUMER_WAIT
            }
            _ => return Next::Done,
        };
        encode_command(&Command::ReserveWithTimeout(timeout), buf);
        Next::Send(Sent::Reserve(Instant::now()))
    }

    fn reply(&mut self, sent: Sent, reply: Response) -> Fallible<()> {
        if let Sent::Reserve(_) = sent {
            self.blocked = false;
        }
        match (sent, reply) {
            (Sent::Reserve(sent), Response::Reserved { id, body }) => {
                let now = Instant::now();
                self.waits.push(now.duration_since(sent).as_nanos() as i64);
                if self.plan.stamped {
                    let stamp = std::str::from_utf8(&body[..STAMP_LEN.min(body.len())])
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(|| format!("job {id} has no time stamp: not ours"))?;
                    let at = now.duration_since(self.plan.epoch).as_nanos() as i64;
                    self.lateness.push(at - stamp as i64);
                }
                self.plan.reserved.fetch_add(1, Ordering::Relaxed);
                self.last_reserve = Some(now);
                self.deletes.push(id);
                Ok(())
            }
            (Sent::Reserve(_), Response::TimedOut) => {
                self.stopped = self.until == Until::Empty;
                Ok(())
            }
            (Sent::Delete, Response::Deleted) => {
                self.deleted += 1;
                Ok(())
            }
            (Sent::Reserve(_), other) => Err(format!("reserve: expected RESERVED, got {other:?}")),
            (Sent::Delete, other) => Err(format!("delete: expected DELETED, got {other:?}")),
        }
    }
}

/// The server's CPU time and memory, when its pid is known.
struct Probe {
    pid: Option<u32>,
    helpers: Vec<u32>,
}

#[derive(Clone, Copy)]
struct Sample {
    cpu_seconds: f64,
    /// The part of `cpu_seconds` spent in the kernel (stime).
    sys_seconds: f64,
    rss_kb: u64,
    /// The helpers' CPU time, all together.
    helper_cpu_seconds: f64,
}

impl Probe {
    fn sample(&self) -> Fallible<Option<Sample>> {
        let Some(pid) = self.pid else {
            return Ok(None);
        };
        let (user, sys) = cpu_seconds(pid)?;
        let mut helper_cpu_seconds = 0.0;
        for &helper in &self.helpers {
            let (user, sys) = cpu_seconds(helper)?;
            helper_cpu_seconds += user + sys;
        }
        Ok(Some(Sample {
            cpu_seconds: user + sys,
            sys_seconds: sys,
            rss_kb: status_kb(pid, "VmRSS")?,
            helper_cpu_seconds,
        }))
    }
}

/// utime and stime of every thread of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> Fallible<(f64, f64)> {
    sprout_testkit::cpu_seconds(pid).ok_or_else(|| format!("/proc/{pid}/stat: unreadable"))
}

/// A `kB` field of `/proc/PID/status`.
fn status_kb(pid: u32, key: &str) -> Fallible<u64> {
    sprout_testkit::status_kb(pid, key).ok_or_else(|| format!("/proc/{pid}/status: no {key}"))
}

/// The result line, built as a flat JSON object.
#[derive(Default)]
struct Report(String);

impl Report {
    fn key(&mut self, key: &str) {
        self.0.push(if self.0.is_empty() { '{' } else { ',' });
        write!(self.0, "\"{key}\":").expect("write to String");
    }

    fn text(&mut self, key: &str, value: &str) {
        self.key(key);
        write!(self.0, "{value:?}").expect("write to String");
    }

    fn number(&mut self, key: &str, value: u64) {
        self.key(key);
        write!(self.0, "{value}").expect("write to String");
    }

    fn float(&mut self, key: &str, value: f64) {
        self.key(key);
        write!(self.0, "{value:.3}").expect("write to String");
    }

    /// Throughput of `jobs` over `elapsed`, and with a pid the server's CPU
    /// time since `before` and its memory now.
    fn timed(
        &mut self,
        jobs: u64,
        elapsed: Duration,
        probe: &Probe,
        before: Option<Sample>,
    ) -> Fallible<()> {
        let seconds = elapsed.as_secs_f64();
        self.number("jobs", jobs);
        self.float("seconds", seconds);
        self.float("jobs_per_sec", jobs as f64 / seconds.max(1e-9));
        if let (Some(before), Some(after), Some(pid)) = (before, probe.sample()?, probe.pid) {
            let cpu = after.cpu_seconds - before.cpu_seconds;
            self.float("server_cpu_seconds", cpu);
            self.float("cpu_us_per_job", cpu * 1e6 / jobs.max(1) as f64);
            // How much of it the kernel took (sockets, wakeups, fsync):
            // the part a server cannot shave by being smarter in user space.
            let sys = after.sys_seconds - before.sys_seconds;
            self.float("sys_us_per_job", sys * 1e6 / jobs.max(1) as f64);
            if !probe.helpers.is_empty() {
                let helpers = after.helper_cpu_seconds - before.helper_cpu_seconds;
                self.float("helper_cpu_us_per_job", helpers * 1e6 / jobs.max(1) as f64);
            }
            self.number("rss_kb", after.rss_kb);
            self.number("hwm_kb", status_kb(pid, "VmHWM")?);
        }
        Ok(())
    }

    /// Percentiles of the lateness (put→reserve latency) in microseconds;
    /// returns how many jobs came early.
    fn lateness(&mut self, lateness: &mut [i64]) -> usize {
        lateness.sort_unstable();
        let early = lateness.iter().take_while(|&&l| l < 0).count();
        let at = |q: f64| {
            let rank = (q * lateness.len() as f64).ceil() as usize;
            lateness
                .get(rank.saturating_sub(1))
                .map_or(0.0, |&l| l as f64 / 1e3)
        };
        self.float("latency_us_p50", at(0.50));
        self.float("latency_us_p99", at(0.99));
        self.float("latency_us_p999", at(0.999));
        self.float("latency_us_max", at(1.0));
        self.number("early", early as u64);
        early
    }

    fn finish(&self) -> String {
        format!("{}}}", self.0)
    }
}
