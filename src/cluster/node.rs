//! A cluster node's life: it follows the stream as a hot standby, takes
//! over when the lease is free, and leads until it is deposed or stopped.
//!
//! Taking over: a caught-up standby takes the lease (`standby.rs`), then
//! claims the stream: the fence subjects and a meta message with the next
//! epoch (`fence.rs`), fenced on the last message it read
//! (`Nats-Expected-Last-Sequence`). If anyone wrote after that (a deposed
//! leader's last batch), the claim fails and it reads on to the stream's
//! end and claims again; once the claim is in, every later write of the
//! old leader is refused by the stream itself, whatever the clocks say.
//! The engine replica already holds every job, so serving starts right
//! away.
//!
//! A leader that loses the lease, or whose batch the stream refuses, stops
//! (the process exits: fail-stop); nothing it had not got acknowledged was
//! answered, and a standby takes over.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::pull::OrderedConfig;
use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::{self, stream::Stream};
use async_nats::Client;
use bytes::Bytes;
use futures_util::StreamExt;
use sprout_protocol::JobId;
use tokio::sync::watch;

use super::claim::{self, Claim};
use super::cluster_flags::Options;
use super::cluster_store::ClusterStore;
use super::fence::Fences;
use super::follow::PageError;
use super::follow::{self, Change, Pages};
use super::held::Held;
use super::lease::{Deposed, Holder, Lease, Standing, Timing};
use super::link;
use super::link::LinkError;
use super::members;
use super::meta::Meta;
use super::placement;
use super::publish::{self, Chain, Refusal};
use super::purges::Purges;
use super::role::Role;
use super::standby::Standby;
use super::status::{Part, Teller};
use super::stream::{self, Trouble};
use super::subjects::{NameError, Subjects};
use super::timing::TtlTooShort;
use super::version;
use super::writer::{WriteError, Writer};
use crate::engine::{ClusterStats, Engine};
use crate::shared::Shared;

/// How long a request (a batch's acknowledgment among them) waits for
/// NATS's answer. A batch sent during an election may never be answered;
/// it is sent again (`writer.rs`), fenced as before, so a short wait
/// costs nothing but a resend, and replies resume soon after the election.
const ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// How soon a node tries again to set its stream and lease up.
const SETUP_RETRY: Duration = Duration::from_millis(500);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a node cannot join its cluster, or must stop serving.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Version(#[from] version::Refused),
    #[error(transparent)]
    Ttl(#[from] TtlTooShort),
    /// The stream or the lease bucket could lose jobs, or this node's
    /// claim is refused: `Trouble::Refused`'s reason.
    #[error("{0}")]
    Setup(String),
    #[error("cannot read the stream: {0}")]
    Read(#[source] BoxError),
    #[error("the stream's consumer ended")]
    Ended,
    #[error("reading the stream: {0}")]
    Reading(#[source] BoxError),
    #[error("a stream message without its sequence: {0}")]
    NoSequence(#[source] BoxError),
    #[error(transparent)]
    Page(#[from] PageError),
    /// The replica lacks a job the stream changes: it cannot be trusted to
    /// take over.
    #[error("stream sequence {seq} changes job {id}, which this node does not hold")]
    Unknown { id: JobId, seq: u64 },
    /// The lease is lost: its reason alone.
    #[error("{}", .0 .0)]
    Deposed(#[from] Deposed),
    #[error("the lease ran out while claiming: {0}")]
    LostClaiming(#[source] Refusal),
    #[error("cannot read the stream's end: {0}")]
    End(#[source] BoxError),
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// A node connected to its cluster, before it follows anything.
pub struct Connected {
    client: Client,
    js: jetstream::Context,
    stream: Stream,
    lease: Lease,
    subjects: Subjects,
    options: Options,
    /// Rewrites this node's claim (`claim::keep`).
    keeper: tokio::task::JoinHandle<()>,
}

impl Connected {
    /// The connection to NATS.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The largest job body that fits in one of the server's messages,
    /// with room for the page around it.
    pub fn max_job_size(&self) -> u32 {
        let payload = self.client.server_info().max_payload;
        payload.saturating_sub(64 << 10).min(u32::MAX as usize) as u32
    }

    /// The largest change message to send: room for headers beside it in
    /// the server's largest message (one job's record is smaller still,
    /// [`Connected::max_job_size`]).
    fn change_limit(&self) -> usize {
        self.client
            .server_info()
            .max_payload
            .saturating_sub(16 << 10)
    }

    /// At a graceful stop: this node's claim on its id goes, so the same
    /// id may start elsewhere at once.
    async fn leave(&self) {
        self.keeper.abort();
        if let Err(e) = claim::withdraw(self.lease.store(), &self.options.node).await {
            tracing::warn!("{e}");
        }
    }
}

/// Connects to NATS and checks the server, the stream and the lease.
pub async fn connect(options: &Options) -> Result<Connected, NodeError> {
    let subjects = Subjects::new(&options.name)?;
    let client = link::connect(&options.link, &options.node).await?;
    version::check(&client)?;
    let mut js = jetstream::new(client.clone());
    js.set_timeout(ACK_TIMEOUT);
    let timing = Timing::new(options.lease_ttl)?;
    // A NATS cluster that is starting (or electing) times requests out:
    // wait for it, as for a database that is not up yet.
    let (ours, ttl) = (own_claim(options), timing.ttl);
    // Copies JetStream can never place are refused, not waited for.
    let replicas = options.replicas;
    let judge = |t| placement::judge(t, replicas, placement::servers_seen(&client));
    let (stream, lease) = loop {
        let opened = match stream::ensure(&js, &subjects, replicas).await {
            Ok(stream) => match Lease::open(&js, &options.name, timing, replicas).await {
                Ok(lease) => match claim::stake(lease.store(), &options.node, &ours, ttl).await {
                    Ok(()) => break (stream, lease),
                    Err(trouble) => judge(trouble),
                },
                Err(trouble) => judge(trouble),
            },
            Err(trouble) => judge(trouble),
        };
        match opened {
            Trouble::Refused(why) => return Err(NodeError::Setup(why)),
            Trouble::Passing(why) => tracing::warn!("{why}; trying again"),
        }
        tokio::time::sleep(SETUP_RETRY).await;
    };
    let store = lease.store().clone();
    let keeper = tokio::spawn(claim::keep(store, options.node.clone(), ours, ttl));
    Ok(Connected {
        client,
        js,
        stream,
        lease,
        subjects,
        options: options.clone(),
        keeper,
    })
}

/// What this node's claim on its id says (`claim.rs`).
fn own_claim(options: &Options) -> Claim {
    Claim {
        addr: options.advertise.clone(),
        peer_tls: options.peers.is_some(),
    }
}

/// Follows, takes over and leads; returns `Ok` once a graceful stop
/// (`closed` turns true) has withdrawn this node's claim and released the
/// lease it held, or why this node must stop serving.
pub async fn run(
    node: Connected,
    pages: Pages,
    shared: Arc<Shared>,
    store: Arc<ClusterStore>,
    role: watch::Sender<Role>,
    closed: watch::Receiver<bool>,
) -> Result<(), NodeError> {
    let every = node.lease.timing().ttl;
    let members = members::watch(node.lease.store().clone(), every, shared.clone());
    let members = tokio::spawn(members);
    let led = tokio::select! {
        taken = take_over(&node, pages, shared, &role) => match taken {
            Ok((follower, held)) => lead(&node, follower, held, store, &role, closed).await,
            Err(why) => Err(why),
        },
        () = stopped(closed.clone()) => Ok(()),
    };
    members.abort();
    if led.is_ok() {
        node.leave().await;
    }
    led
}

/// Completes once `closed` turns true (or its sender is gone).
async fn stopped(mut closed: watch::Receiver<bool>) {
    let _ = closed.wait_for(|closed| *closed).await;
}

/// Follows the stream until this node holds the lease and has claimed the
/// stream: the follower, now the leader's, and its lease.
async fn take_over(
    node: &Connected,
    pages: Pages,
    shared: Arc<Shared>,
    role: &watch::Sender<Role>,
) -> Result<(Follower, Held), NodeError> {
    let mut follower = Follower::start(node, pages, shared, role.clone()).await?;
    let options = &node.options;
    let mut standby = Standby::new(&node.lease, &options.node, &options.advertise);
    loop {
        let mut held = loop {
            let next_try = standby.next_try();
            tokio::select! {
                message = follower.next() => message?,
                // Someone leads: pass clients to whoever the lease names
                // (the tail may lag, or stall on a dead NATS server, behind
                // a takeover).
                seen = standby.seen() => if let Some(holder) = seen {
                    follower.follow_holder(holder);
                },
                () = tokio::time::sleep_until(next_try), if follower.caught_up => {
                    match standby.try_take().await {
                        Ok(Some(held)) => break held,
                        Ok(None) => {}
                        Err(e) => tracing::warn!("{e}"),
                    }
                }
            }
        };
        // A takeover that NATS cannot finish now (an election) is given
        // up, and this node goes on following: it serves nothing yet.
        match follower.claim(node, &mut held).await {
            Ok(()) => return Ok((follower, held)),
            Err(why) => tracing::warn!("takeover given up: {why}"),
        }
    }
}

/// Leads until deposed (`Err`) or stopped: then gives the lease up, so a
/// standby need not wait it out.
async fn lead(
    node: &Connected,
    mut follower: Follower,
    mut held: Held,
    store: Arc<ClusterStore>,
    role: &watch::Sender<Role>,
    closed: watch::Receiver<bool>,
) -> Result<(), NodeError> {
    let pages = std::mem::take(&mut follower.pages);
    let meta = pages.meta.clone();
    let records = pages.pending.iter().flat_map(|(_, records)| records);
    let pending_bytes = pages.log.page_bytes(records);
    let mut writer = Writer {
        store,
        client: node.client.clone(),
        js: node.js.clone(),
        stream: node.stream.clone(),
        subjects: node.subjects.clone(),
        pages,
        meta,
        fences: follower.fences,
        fenced: 0,
        limit: node.change_limit(),
        pending_bytes,
        purges: Purges::default(),
    };
    writer.pages.log.reslot();
    writer.start();
    tracing::info!(
        epoch = writer.meta.epoch,
        "leading cluster {} from stream sequence {}",
        node.options.name,
        writer.pages.last_seq
    );
    follower.teller.tell(Part::Leader {
        epoch: writer.meta.epoch,
    });
    role.send_replace(Role::Leader);
    tokio::select! {
        why = writer.run() => Err(why.into()),
        deposed = held.keep() => Err(deposed.into()),
        () = stopped(closed) => {
            if let Err(e) = held.release().await {
                tracing::warn!("{e}");
            }
            Ok(())
        }
    }
}

/// How long a takeover waits for the next message of a stream known to
/// hold more before it tails the stream again.
const STALLED: Duration = Duration::from_secs(2);

/// The stream's messages from sequence `from` on, in order.
async fn tail(stream: &Stream, from: u64) -> Result<jetstream::consumer::pull::Ordered, NodeError> {
    let consumer = stream
        .create_consumer(OrderedConfig {
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: from,
            },
            ..Default::default()
        })
        .await
        .map_err(|e| NodeError::Read(e.into()))?;
    consumer
        .messages()
        .await
        .map_err(|e| NodeError::Read(e.into()))
}

/// A standby's tail of the stream into its engine replica.
struct Follower {
    messages: jetstream::consumer::pull::Ordered,
    pages: Pages,
    shared: Arc<Shared>,
    role: watch::Sender<Role>,
    own_addr: String,
    own_node: String,
    subjects: Subjects,
    changes: Vec<Change>,
    /// Nothing more in the stream, as of the last message: only then is
    /// this node worth a lease (a takeover reads what is left without
    /// renewing it).
    caught_up: bool,
    /// Tells this node's part as it changes (`status.rs`).
    teller: Teller,
    /// What this node's claim wrote on the fence subjects, once made.
    fences: Fences,
}

impl Follower {
    async fn start(
        node: &Connected,
        pages: Pages,
        shared: Arc<Shared>,
        role: watch::Sender<Role>,
    ) -> Result<Follower, NodeError> {
        let caught_up = node
            .stream
            .get_info()
            .await
            .map_err(|e| NodeError::Read(e.into()))?
            .state
            .messages
            == 0;
        let messages = tail(&node.stream, 1).await?;
        let follower = Follower {
            messages,
            pages,
            shared,
            role,
            own_addr: node.options.advertise.clone(),
            own_node: node.options.node.clone(),
            subjects: node.subjects.clone(),
            changes: Vec::new(),
            caught_up,
            teller: Teller::new(&node.options.name, &node.options.node),
            fences: Fences::default(),
        };
        let standby = follower.stats("standby");
        show(&mut follower.shared.lock().engine, standby);
        Ok(follower)
    }

    /// Tails the stream again from the message after the last applied:
    /// an ordered consumer lives on one NATS server, and one on a server
    /// that died may stall until its heartbeats run out.
    async fn tail_again(&mut self, stream: &Stream) -> Result<(), NodeError> {
        self.messages = tail(stream, self.pages.last_seq + 1).await?;
        Ok(())
    }

    /// Applies the next message of the stream.
    async fn next(&mut self) -> Result<(), NodeError> {
        let message = self
            .messages
            .next()
            .await
            .ok_or(NodeError::Ended)?
            .map_err(|e| NodeError::Reading(e.into()))?;
        let info = message.info().map_err(NodeError::NoSequence)?;
        let seq = info.stream_sequence;
        self.caught_up = info.pending == 0;
        let Some(subject) = self.subjects.parse(&message.subject) else {
            tracing::warn!("ignoring stream message on {}", message.subject);
            return Ok(());
        };
        let payload: Bytes = message.payload.clone();
        let was = self.pages.meta.clone();
        self.pages.apply(seq, subject, payload, &mut self.changes)?;
        if !self.changes.is_empty() {
            let now = self.shared.clock.now();
            let mut state = self.shared.lock();
            // The replica's clock may have stood still since its last
            // timer: restored deadlines are judged against now.
            state.engine.tick(now);
            for change in self.changes.drain(..) {
                let mut image = match change {
                    Change::Job(image) => image,
                    Change::Unless(image) if state.engine.holds(image.id) => continue,
                    Change::Unless(image) => image,
                    Change::Update(mut image) => {
                        follow::carry(&mut image, now);
                        match state.engine.update(&image) {
                            true => continue,
                            false => return Err(NodeError::Unknown { id: image.id, seq }),
                        }
                    }
                    Change::Deleted(id) => {
                        state.engine.forget(id);
                        continue;
                    }
                };
                follow::carry(&mut image, now);
                state.engine.forget(image.id);
                state.engine.restore(&image);
            }
        }
        let meta = &self.pages.meta;
        if meta.addr != was.addr {
            let leader = Some(meta.addr.clone()).filter(|a| *a != self.own_addr);
            show(&mut self.shared.lock().engine, self.stats("standby"));
            self.role.send_replace(Role::Standby { leader });
        }
        let news = (&meta.node, meta.epoch) != (&was.node, was.epoch);
        if news && !meta.addr.is_empty() && meta.addr != self.own_addr {
            self.teller.tell(Part::Standby {
                leader: meta.node.clone(),
                addr: meta.addr.clone(),
                epoch: meta.epoch,
            });
        }
        Ok(())
    }

    /// Passes clients to the lease's holder, if it is another node than
    /// the one the stream named last.
    fn follow_holder(&mut self, holder: Holder) {
        let leader = Some(holder.addr).filter(|a| *a != self.own_addr);
        let role = Role::Standby { leader };
        if *self.role.borrow() != role {
            self.role.send_replace(role);
        }
    }

    /// What `stats` shows, as of the last meta message.
    fn stats(&self, role: &'static str) -> ClusterStats {
        ClusterStats {
            name: self.subjects.name().to_string(),
            node: self.own_node.clone(),
            role,
            leader: self.pages.meta.addr.clone(),
            epoch: self.pages.meta.epoch,
            members: Vec::new(),
        }
    }

    /// Claims the stream (see the module docs): first over what this
    /// caught-up node has read, then, if refused, over the stream's end
    /// read anew. The pages are then the new leader's writer's.
    async fn claim(&mut self, node: &Connected, held: &mut Held) -> Result<(), NodeError> {
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                self.read_to_end(node, held).await?;
            }
            if held.standing() != Standing::Fresh {
                held.renew().await?;
            }
            let claim = Meta {
                epoch: self.pages.meta.epoch + 1,
                ids_below: self.pages.meta.ids_below,
                node: node.options.node.clone(),
                addr: node.options.advertise.clone(),
                snap: self.pages.meta.snap,
            };
            let messages = Fences::claim(&node.subjects, Bytes::from(claim.encode()));
            let id = format!("e{}claim", claim.epoch);
            let after = self.pages.last_seq;
            let chain = Chain { after, fence: None };
            match publish::batch(&node.client, &node.js, id, &messages, &chain).await {
                Ok(seq) => {
                    self.pages.last_seq = seq;
                    self.fences = Fences::claimed(after);
                    self.pages.meta = claim;
                    let mut state = self.shared.lock();
                    show(&mut state.engine, self.stats("leader"));
                    state.engine.reserve_ids_below(self.pages.meta.ids_below);
                    drop(state);
                    return Ok(());
                }
                Err(e) if held.standing() == Standing::Deposed => {
                    return Err(NodeError::LostClaiming(e))
                }
                // Routine: the old leader's last batch came in after
                // what this node read.
                Err(e) => tracing::info!("claim refused, reading on: {e}"),
            }
        }
    }

    /// Reads the stream to its current end, for as long as the lease is
    /// held.
    async fn read_to_end(&mut self, node: &Connected, held: &Held) -> Result<(), NodeError> {
        let end = loop {
            match node.stream.get_info().await {
                Ok(info) => break info.state.last_sequence,
                Err(e) if held.standing() != Standing::Deposed => {
                    tracing::warn!("cannot read the stream's end, trying again: {e}");
                    tokio::time::sleep(held.timing().poll_every).await;
                }
                Err(e) => return Err(NodeError::End(e.into())),
            }
        };
        while self.pages.last_seq < end {
            match tokio::time::timeout(STALLED, self.next()).await {
                Ok(applied) => applied?,
                Err(_) => {
                    tracing::warn!("the stream's tail stalled: reading it again");
                    self.tail_again(&node.stream).await?;
                }
            }
        }
        Ok(())
    }
}

/// Sets what `stats` shows, keeping the members `members.rs` found.
fn show(engine: &mut Engine, mut stats: ClusterStats) {
    if let Some(now) = engine.cluster() {
        stats.members = now.members.clone();
    }
    engine.set_cluster(stats);
}
