//! One client connection: read, decode every complete request in the
//! buffer, run them all under one engine lock, write all answers at once.
//!
//! A `reserve` that has to wait parks the connection on its mailbox; the
//! requests pipelined behind it stay decoded in `pending` and run once the
//! answer has been written, as beanstalkd does. While parked, the socket is
//! still read (up to a bound) so a client that hangs up is noticed at once.
//!
//! With `-b`, an answer is held until the store has written its command's
//! records to the journal (under `-f 0`: and synced them), and until the
//! disk's id ceiling is above every job id it names; the connection writes
//! the journal itself unless another is already at it, so one write (one
//! sync under `-f 0`) releases the answers of every waiting connection
//! (group commit; see `store/journal.rs`). If the store fails, the answer
//! becomes the error beanstalkd's clients know (OUT_OF_MEMORY for a put,
//! whose job is then dropped; INTERNAL_ERROR otherwise), so nothing
//! unstored is claimed.
//!
//! Memory per connection is bounded: reads stop while decoded requests are
//! pending, answers are written out whenever they pass [`WRITE_HIGH_WATER`]
//! bytes, and a client that does not read its answers stalls only itself
//! (its writes block, so its task stops reading).
//!
//! With `--auth`, each request goes through the connection's
//! [`Session`] first (`auth/session.rs`), which answers or refuses it or
//! lets it run, given the facts the engine knows under the same lock
//! ([`Known`]). Until the connection authenticates, a `put`'s body is
//! read with a size limit of 0 (skipped as it arrives), decoding stops
//! after each `auth` so the lines behind it are read under its outcome,
//! and reads and writes end at the session's deadline.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use sprout_protocol::codec::ServerCodec;
use sprout_protocol::encode::encode_response;
use sprout_protocol::{Command, JobId, Request, Response, TubeName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio_util::codec::Decoder;

use crate::auth::{self, Session, Step};
use crate::engine::{ConnId, Engine, Outcome, Time};
use crate::fill;
use crate::peer::Peer;
use crate::pending::Pending;
use crate::shared::{Letter, Mailbox, Shared, Submission};
use crate::store::{self, Progress};

/// Requests decoded ahead of execution, at most.
const MAX_PENDING: usize = 512;
/// Answers are written out once this many bytes are waiting.
const WRITE_HIGH_WATER: usize = 64 * 1024;
/// Room made in the read buffer before each read.
const READ_CHUNK: usize = 16 * 1024;
/// While parked in `reserve`, stop reading once this much input is queued.
const PARKED_READ_LIMIT: usize = 64 * 1024;
/// How long a closing connection may take to say so (TLS's `close_notify`).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Serves one client (from `peer`) until it quits, hangs up or fails.
/// `slot`: the `--max-pending` slot its TLS handshake held, which it
/// keeps until it authenticates (`auth/session.rs`); a server without
/// `--auth` trusts it now.
pub async fn serve<S>(
    stream: S,
    peer: Peer,
    shared: Arc<Shared>,
    max_job_size: u32,
    slot: Option<Pending>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let listener = peer.listener.clone();
    let session = match shared.auth() {
        None => {
            // Trusted now: the slot is free for another.
            drop(slot);
            None
        }
        Some(gate) => match Session::open(gate.clone(), peer, slot) {
            Some(session) => Some(session),
            None => {
                tracing::info!("too many connections not yet authenticated: closed a new one");
                return;
            }
        },
    };
    let (id, mailbox) = shared.connect();
    tracing::info!(conn = id, %listener, "connection opened");
    let codec = match session {
        Some(_) => ServerCodec::with_auth(max_job_size),
        None => ServerCodec::new(max_job_size),
    };
    let mut conn = Connection {
        id,
        stream,
        mailbox,
        progress: shared.store.progress(),
        codec,
        max_job_size,
        session,
        rbuf: BytesMut::new(),
        wbuf: BytesMut::new(),
        pending: VecDeque::new(),
        answers: Vec::new(),
    };
    match conn.run(&shared).await {
        Ok(()) => {
            conn.close().await;
            tracing::info!(conn = id, "connection closed")
        }
        Err(e) => tracing::info!(conn = id, error = %e, "connection closed"),
    }
    shared.disconnect(id);
}

struct Connection<S> {
    id: ConnId,
    stream: S,
    mailbox: Mailbox,
    progress: watch::Receiver<Progress>,
    codec: ServerCodec,
    /// `-z`, which the codec applies once the connection may put.
    max_job_size: u32,
    /// With `--auth`: who the client is.
    session: Option<Session>,
    rbuf: BytesMut,
    wbuf: BytesMut,
    pending: VecDeque<Request>,
    /// Answers not yet written, each with the store submission it waits for.
    answers: Vec<Letter>,
}

/// Where a batch of requests left the connection.
enum Next {
    /// Everything pending ran, or the write buffer is full: carry on.
    Continue,
    /// A `reserve` is waiting for its answer.
    Parked,
    /// `quit`.
    Close,
    /// A command runs in steps (`Outcome::Again`): yield, then go on.
    Again,
}

impl<S> Connection<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    async fn run(&mut self, shared: &Shared) -> io::Result<()> {
        loop {
            self.decode()?;
            if self.pending.is_empty() {
                if !self.read().await? {
                    return Ok(());
                }
                continue;
            }
            let next = self.execute(shared);
            self.flush(shared).await?;
            match next {
                Next::Continue => {}
                // Let the others have the engine before the next step.
                Next::Again => tokio::task::yield_now().await,
                Next::Close => return Ok(()),
                Next::Parked => {
                    if !self.park(shared).await? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Decodes complete requests from the read buffer, up to [`MAX_PENDING`]
    /// (before authenticating: up to the first `auth`).
    fn decode(&mut self) -> io::Result<()> {
        let anonymous = self.session.as_ref().is_some_and(|s| !s.authenticated());
        if self.session.is_some() {
            self.codec
                .set_max_job_size(if anonymous { 0 } else { self.max_job_size });
        }
        while self.pending.len() < MAX_PENDING {
            match self.codec.decode(&mut self.rbuf)? {
                Some(request) => {
                    let auth = matches!(request, Ok(Command::Auth(_)));
                    self.pending.push_back(request);
                    if auth && anonymous {
                        break;
                    }
                }
                None => break,
            }
        }
        Ok(())
    }

    /// Ends the stream after `quit` or the client's end of stream: over
    /// TLS that sends `close_notify`, so the client knows it got every
    /// answer (a plain socket sends its FIN, as when it is dropped). A
    /// client that does not read is given [`CLOSE_TIMEOUT`].
    async fn close(&mut self) {
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.stream.shutdown()).await;
    }

    /// Reads more input; `false` at end of stream.
    async fn read(&mut self) -> io::Result<bool> {
        self.rbuf.reserve(READ_CHUNK);
        let deadline = self.deadline();
        Ok(in_time(deadline, self.stream.read_buf(&mut self.rbuf)).await? != 0)
    }

    /// When the connection is closed unless it authenticates first.
    fn deadline(&self) -> Option<Instant> {
        self.session.as_ref().and_then(Session::deadline)
    }

    /// Runs pending requests under one lock until they run out, one parks
    /// or quits, or the answers pass [`WRITE_HIGH_WATER`].
    fn execute(&mut self, shared: &Shared) -> Next {
        let mut state = shared.lock();
        let mut size = 0;
        while let Some(request) = self.pending.pop_front() {
            // The clock is read per command: `stats-job`'s time-left
            // truncates like beanstalkd's only if time moves on.
            let now = shared.clock.now();
            let outcome = match &mut self.session {
                None => run(&mut state.engine, self.id, request, now),
                Some(session) => match gated(&mut state.engine, self.id, session, request, now) {
                    Ok(outcome) => outcome,
                    Err(last) => {
                        let seq = state.submit();
                        self.answers.push(Letter::new(&state, shared, last, seq));
                        return Next::Close;
                    }
                },
            };
            let named = match &outcome {
                Outcome::Reply(r @ (Response::Reserved { .. } | Response::Found { .. })) => {
                    named_id(r)
                }
                _ => None,
            };
            let seq = state.submit_naming(named);
            match outcome {
                Outcome::Reply(response) => {
                    size += approximate_len(&response);
                    let letter = Letter::new(&state, shared, response, seq);
                    let cold = !letter.cold.is_empty();
                    self.answers.push(letter);
                    // Its body is read before anything after it runs: this
                    // connection's own `delete` could take it away first.
                    if cold {
                        break;
                    }
                }
                Outcome::Wait => return Next::Parked,
                Outcome::Close => return Next::Close,
                Outcome::Again(command) => {
                    self.pending.push_front(Ok(command));
                    return Next::Again;
                }
            }
            if size >= WRITE_HIGH_WATER {
                break;
            }
        }
        Next::Continue
    }

    /// Writes every answer out, once the store has done what each waits for.
    async fn flush(&mut self, shared: &Shared) -> io::Result<()> {
        // 0 without a store, which then has nothing to wait for.
        let newest = self.answers.iter().map(|l| l.after.seq).max().unwrap_or(0);
        if newest > 0 {
            let id_bound = self
                .answers
                .iter()
                .filter_map(|l| named_id(&l.response))
                .max()
                .map_or(0, |id| id + 1);
            let progress =
                store::acknowledged(&*shared.store, &mut self.progress, newest, id_bound).await?;
            self.fail_unstored(shared, &progress);
        }
        self.fill_cold(shared).await;
        for letter in self.answers.drain(..) {
            encode_response(&letter.response, &mut self.wbuf);
        }
        if !self.wbuf.is_empty() {
            let deadline = self.deadline();
            in_time(deadline, self.stream.write_all(&self.wbuf)).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// Turns the answers whose records the store failed to keep into errors:
    /// an unstored put is dropped and answered OUT_OF_MEMORY; a delete,
    /// bury, release or kick that may not survive a restart is answered
    /// INTERNAL_ERROR. Other answers stand: what they changed (a reserve's
    /// counter) is not something the client was promised would persist.
    fn fail_unstored(&mut self, shared: &Shared, progress: &Progress) {
        for Letter {
            response, after, ..
        } in &mut self.answers
        {
            if !after.failed(progress) {
                continue;
            }
            match response {
                Response::Inserted(id) => {
                    shared.forget(*id);
                    *response = Response::OutOfMemory;
                }
                Response::Deleted
                | Response::Buried
                | Response::Released
                | Response::Kicked
                | Response::KickedCount(_) => *response = Response::InternalError,
                _ => {}
            }
        }
    }

    /// Reads the bodies the body cache did not hold (`fill.rs`), and wakes
    /// the read-ahead if a hit of this flush's asked it for pages (not
    /// under the engine lock, where the hit was: `store/read_ahead.rs`).
    async fn fill_cold(&mut self, shared: &Shared) {
        if let Some(bodies) = shared.store.bodies() {
            bodies.wake_ahead();
        }
        let (Some(bodies), true) = (
            shared.store.bodies(),
            self.answers.iter().any(|l| !l.cold.is_empty()),
        ) else {
            return;
        };
        let replies = (self.answers.iter_mut())
            .filter(|l| !l.cold.is_empty())
            .map(|l| (&mut l.response, std::mem::take(&mut l.cold)))
            .collect();
        fill::from_disk(bodies, replies).await;
    }

    /// Waits for the answer to a blocked `reserve` and writes it; `false`
    /// if the mailbox is gone.
    async fn park(&mut self, shared: &Shared) -> io::Result<bool> {
        loop {
            let room = self.rbuf.len() < PARKED_READ_LIMIT;
            if room {
                self.rbuf.reserve(READ_CHUNK);
            }
            tokio::select! {
                letter = self.mailbox.recv() => {
                    // The sender lives until this connection disconnects.
                    let Some(letter) = letter else { return Ok(false) };
                    self.answers.push(letter);
                    self.flush(shared).await?;
                    return Ok(true);
                }
                read = self.stream.read_buf(&mut self.rbuf), if room => {
                    if read? == 0 {
                        self.end_wait_at_hangup(shared);
                        self.flush(shared).await?;
                        return Ok(true);
                    }
                }
            }
        }
    }

    /// The client half-closed while parked: as beanstalkd does, end the
    /// wait with TIMED_OUT (unless a job reached the mailbox first). The
    /// requests it sent before hanging up still run; the next read then
    /// sees the end of the stream and closes.
    fn end_wait_at_hangup(&mut self, shared: &Shared) {
        let mut state = shared.lock();
        // Under the lock no new answer can arrive, so this check is final.
        let letter = match self.mailbox.try_recv() {
            Ok(letter) => letter,
            Err(_) => {
                let answer = state.engine.cancel_wait(self.id);
                let answer = answer.unwrap_or(Response::TimedOut);
                Letter::new(&state, shared, answer, Submission::default())
            }
        };
        drop(state);
        self.answers.push(letter);
    }
}

/// Runs `request` for `conn` as the engine takes it.
fn run(engine: &mut Engine, conn: ConnId, request: Request, now: Time) -> Outcome {
    match request {
        Ok(command) => engine.execute(conn, command, now),
        Err(rejected) => {
            engine.reject(conn, rejected);
            Outcome::Reply(rejected.error.into())
        }
    }
}

/// Runs `request` for `conn` as its `session` allows; `Err`: answer
/// this, then close.
fn gated(
    engine: &mut Engine,
    conn: ConnId,
    session: &mut Session,
    request: Request,
    now: Time,
) -> Result<Outcome, Response> {
    let step = session.screen(request, &Known { engine, conn }, Instant::now());
    Ok(match step {
        Step::Run(request) => run(engine, conn, request, now),
        Step::Seeing(command) => {
            let sees = |tube: &TubeName| session.may_inspect(tube.as_str());
            engine.execute_seeing(conn, command, now, &sees)
        }
        Step::Audited(command) => {
            let outcome = engine.execute(conn, command.clone(), now);
            if let Outcome::Reply(answer) = &outcome {
                session.audit_admin(&command, answer);
            }
            outcome
        }
        Step::Answer(response) => Outcome::Reply(response),
        Step::Last(response) => return Err(response),
        Step::Close => Outcome::Close,
    })
}

/// What the access checks read of the engine, for one connection.
struct Known<'a> {
    engine: &'a Engine,
    conn: ConnId,
}

impl auth::Facts for Known<'_> {
    fn used(&self) -> &str {
        self.engine.used_tube(self.conn).as_str()
    }

    fn watched(&self) -> impl Iterator<Item = &str> {
        self.engine.watched_tubes(self.conn).map(TubeName::as_str)
    }

    fn job(&self, id: JobId) -> Option<auth::JobFacts<'_>> {
        let (tube, mine) = self.engine.job_access(self.conn, id)?;
        Some(auth::JobFacts {
            tube: tube.as_str(),
            mine,
        })
    }
}

/// `io`, ended with `TimedOut` at `deadline` if there is one.
async fn in_time<T>(
    deadline: Option<Instant>,
    io: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    let Some(deadline) = deadline else {
        return io.await;
    };
    match tokio::time::timeout_at(deadline.into(), io).await {
        Ok(done) => done,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no authentication before the deadline",
        )),
    }
}

/// The job id an answer tells the client, if any.
fn named_id(response: &Response) -> Option<JobId> {
    match response {
        Response::Inserted(id)
        | Response::BuriedId(id)
        | Response::Reserved { id, .. }
        | Response::Found { id, .. } => Some(*id),
        _ => None,
    }
}

/// Roughly how many bytes `response` takes on the wire.
fn approximate_len(response: &Response) -> usize {
    match response {
        Response::Reserved { body, .. } | Response::Found { body, .. } | Response::Ok(body) => {
            body.len() + 32
        }
        _ => 16,
    }
}

/// Opens in-process connections to a server: each one a `tokio::io::duplex`
/// pipe served by `connection::serve` exactly like an accepted socket,
/// with the same durability guarantees (the embedded Redis bridge uses it).
#[derive(Clone)]
pub struct LocalConnector {
    shared: Arc<Shared>,
    max_job_size: u32,
}

impl LocalConnector {
    pub fn new(shared: Arc<Shared>, max_job_size: u32) -> Self {
        LocalConnector {
            shared,
            max_job_size,
        }
    }

    pub fn connect(&self) -> tokio::io::DuplexStream {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        tokio::spawn(serve(
            theirs,
            Peer::local(),
            self.shared.clone(),
            self.max_job_size,
            None,
        ));
        ours
    }
}
