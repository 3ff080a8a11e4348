//! Named clients across nodes (`berth msg serve --cluster nats://HOST:PORT`, issue 21): the
//! cluster link, one thread per server that speaks NATS for its engines.
//!
//! ```text
//!   node A engines ──Op::Claim/Release──> link A ──KV berth_names: create/update/delete──┐
//!        ^  relay to a remote name: Post ─> link A ──publish berth.relay.<node B>──> NATS ──> link B
//!        └── replica of other nodes' names <── KV watch ──────────────────────────────┘    │
//!                                                            node B engines <── Post ──────┘
//! ```
//!
//! - **Names** are claimed cluster-wide in the JetStream key-value bucket `berth_names` (key: the
//!   name in unpadded URL-safe base64, value: the holding node's id). A name is refused at once
//!   if the local directory or its replica of the bucket (kept by a watch) has it; otherwise it
//!   is admitted and claimed with an atomic `create`. Two nodes that admit the same name within
//!   the replica's propagation delay race at that `create`: the loser's client is ended with
//!   `name-replaced` (the first holder keeps the name, as within a node).
//! - **Leases:** every node keeps a key of its own in the bucket `berth_nodes`, whose entries
//!   expire after the lease (`max_age`), and puts it again every third of a lease. A node that
//!   dies stops doing so: within a lease its names drop out of every replica, and a claim may
//!   take them over (a compare-and-swap `update` on the dead holder's revision).
//! - **Relays** to a name another node holds are published whole on that node's subject,
//!   `berth.relay.<node>`, the target in the header `Berth-To`; the node's link hands them to
//!   the engine holding the client. One link and one NATS connection per node, and one
//!   subscription: messages from one sender to one receiver arrive in the order sent, as within
//!   a node.
//! - **Backpressure and drops:** the link's inbound mailbox is bounded, so a slow NATS (a full
//!   client buffer) pauses the senders as a slow client does. A message over NATS's
//!   `max_payload` (1 MiB by default) cannot cross and is dropped, with a warning; one for a
//!   client that left meanwhile is dropped too.
//! - **NATS restarts:** the client reconnects by itself; the link then makes sure the buckets
//!   exist, puts its names and its node key again, and starts a fresh watch.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation, Store};
use base64::Engine as _;
use berth_proto::msg::Name;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::client::ClientId;
use super::directory::{Credit, Directory, Mailbox, Mailboxes, Op, Post};

/// The bucket of names.
const NAMES: &str = "berth_names";
/// The bucket of live nodes.
const NODES: &str = "berth_nodes";
/// Bytes the link may have posted to engines and not had acknowledged before it waits.
const LINK_WINDOW: u64 = 4 << 20;
/// Posts the link's mailbox holds before senders wait.
const MAILBOX: usize = 1024;

/// How a server joins a cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The NATS server, `nats://HOST:PORT`.
    pub url: String,
    /// How long a node that stops renewing keeps its names (`--cluster-lease`).
    pub lease: Duration,
}

impl ClusterConfig {
    /// `url` with the default lease (10 s).
    pub fn new(url: impl Into<String>) -> ClusterConfig {
        ClusterConfig {
            url: url.into(),
            lease: Duration::from_secs(10),
        }
    }
}

/// The link's mailbox: what engines post for names on other nodes.
struct LinkBox(mpsc::Sender<Post>);

impl Mailbox for LinkBox {
    fn post(&self, post: Post) -> Result<(), Post> {
        self.0.try_send(post).map_err(|e| match e {
            mpsc::error::TrySendError::Full(p) | mpsc::error::TrySendError::Closed(p) => p,
        })
    }
}

/// A connected link, not yet running.
pub(crate) struct Link {
    ops: mpsc::UnboundedSender<Op>,
    start: Box<dyn FnOnce(Arc<Mailboxes>) -> io::Result<JoinHandle<()>> + Send>,
}

/// The running link.
pub(crate) struct Running {
    ops: mpsc::UnboundedSender<Op>,
    thread: Option<JoinHandle<()>>,
}

impl Running {
    /// Releases this node's names and leaves the cluster (after the engines have stopped).
    pub(crate) fn stop(mut self) {
        let _ = self.ops.send(Op::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Link {
    /// Connects to NATS (failing with the cause if it cannot, within 5 s), makes sure the
    /// buckets exist, and joins `directory` to the cluster. Returns the link's mailbox too,
    /// for the engines'; the link runs once [`Link::run`] has theirs.
    pub(crate) fn connect(
        config: &ClusterConfig,
        directory: Arc<Directory>,
    ) -> io::Result<(Link, Box<dyn Mailbox>)> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let node: Arc<str> = Arc::from(node_id());
        let (events_tx, events) = mpsc::unbounded_channel();
        let url = config.url.clone();
        let lease = config.lease;
        let (client, names, nodes) = runtime.block_on(async {
            let client = async_nats::ConnectOptions::new()
                .name(format!("berth {node}"))
                .event_callback(move |event| {
                    let tx = events_tx.clone();
                    async move {
                        let _ = tx.send(event);
                    }
                })
                .connection_timeout(Duration::from_secs(5))
                .connect(url.as_str())
                .await
                .map_err(|e| io::Error::other(format!("cannot reach NATS at {url}: {e}")))?;
            let (names, nodes) = buckets(&client, lease)
                .await
                .map_err(|e| io::Error::other(format!("NATS at {url}: {e}")))?;
            Ok::<_, io::Error>((client, names, nodes))
        })?;
        let (relay_tx, relay) = mpsc::channel(MAILBOX);
        let (ops_tx, ops) = mpsc::unbounded_channel();
        directory.join_cluster(ops_tx.clone());
        log::info!("cluster: node {node} joined through {}", config.url);
        let start = Box::new(move |mailboxes: Arc<Mailboxes>| {
            std::thread::Builder::new()
                .name("berth-cluster".into())
                .spawn(move || {
                    let state = State {
                        client,
                        names,
                        nodes,
                        node,
                        lease,
                        directory,
                        mailboxes,
                        held: HashMap::new(),
                        alive: HashSet::new(),
                        unreleased: Vec::new(),
                    };
                    runtime.block_on(state.run(ops, relay, events));
                })
        });
        let link = Link { ops: ops_tx, start };
        Ok((link, Box::new(LinkBox(relay_tx))))
    }

    /// Starts the link's thread, delivering to `mailboxes`.
    pub(crate) fn run(self, mailboxes: Arc<Mailboxes>) -> io::Result<Running> {
        let thread = (self.start)(mailboxes)?;
        Ok(Running {
            ops: self.ops,
            thread: Some(thread),
        })
    }
}

/// This node's id: unique per process start, a valid subject token and key.
fn node_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("n{:x}{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}

/// The key of a name (names are any bytes; keys are `[-/_=.a-zA-Z0-9]+`).
fn key(name: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(name)
}

fn name_of(key: &str) -> Option<Name> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(key)
        .ok()
        .map(Name::from)
}

/// The two buckets, made if missing (the same config every node asks for).
async fn buckets(
    client: &async_nats::Client,
    lease: Duration,
) -> Result<(Store, Store), Box<dyn std::error::Error + Send + Sync>> {
    let js = async_nats::jetstream::new(client.clone());
    let names = match js.get_key_value(NAMES).await {
        Ok(kv) => kv,
        Err(_) => {
            js.create_key_value(kv::Config {
                bucket: NAMES.into(),
                history: 1,
                ..Default::default()
            })
            .await?
        }
    };
    let nodes = match js.get_key_value(NODES).await {
        Ok(kv) => kv,
        Err(_) => {
            js.create_key_value(kv::Config {
                bucket: NODES.into(),
                history: 1,
                max_age: lease,
                ..Default::default()
            })
            .await?
        }
    };
    Ok((names, nodes))
}

/// The link's state, on its thread.
struct State {
    client: async_nats::Client,
    names: Store,
    nodes: Store,
    node: Arc<str>,
    lease: Duration,
    directory: Arc<Directory>,
    mailboxes: Arc<Mailboxes>,
    /// Names held here, with the client and the revision of the claim.
    held: HashMap<Name, (ClientId, u64)>,
    /// Nodes whose key was there at the last look.
    alive: HashSet<String>,
    /// Releases NATS did not take (it was away): tried again at each renewal, so that a name
    /// left here is not held for ever in the cluster's eyes.
    unreleased: Vec<(Name, u64)>,
}

impl State {
    async fn run(
        mut self,
        mut ops: mpsc::UnboundedReceiver<Op>,
        mut relay: mpsc::Receiver<Post>,
        mut events: mpsc::UnboundedReceiver<async_nats::Event>,
    ) {
        let subject = format!("berth.relay.{}", self.node);
        let mut inbound = match self.client.subscribe(subject.clone()).await {
            Ok(s) => Some(s),
            Err(e) => {
                log::error!("cluster: cannot subscribe to {subject}: {e}");
                None
            }
        };
        self.heartbeat().await;
        let mut watch = self.watch().await;
        let mut tick = tokio::time::interval(self.lease / 3);
        let mut connected = false;
        loop {
            tokio::select! {
                op = ops.recv() => match op {
                    Some(Op::Claim(name, id)) => self.claim(name, id).await,
                    Some(Op::Release(name)) => self.release(&name).await,
                    Some(Op::Stop) | None => break,
                },
                Some(post) = relay.recv() => self.publish(post).await,
                Some(msg) = next(&mut inbound) => self.deliver(msg).await,
                entry = next(&mut watch) => match entry {
                    Some(Ok(entry)) => self.replicate(entry).await,
                    // The watch ended (NATS went away): a new one at the next tick.
                    other => {
                        log::debug!("cluster: the watch of names ended: {other:?}");
                        watch = None;
                    }
                },
                Some(event) = events.recv() => {
                    // The first `Connected` is the connection made at startup.
                    let again = std::mem::replace(&mut connected, true);
                    if matches!(event, async_nats::Event::Connected) && again {
                        log::info!("cluster: connected to NATS again; renewing this node's names");
                        self.renew().await;
                        watch = self.watch().await;
                    }
                }
                _ = tick.tick() => {
                    self.heartbeat().await;
                    if watch.is_none() {
                        watch = self.watch().await;
                    }
                }
            }
        }
        // Leaving: names released, the node key gone, so others need not wait out the lease.
        for (name, (_, revision)) in std::mem::take(&mut self.held) {
            let _ = self
                .names
                .delete_expect_revision(key(name.as_bytes()), Some(revision))
                .await;
        }
        let _ = self.nodes.purge(self.node.as_ref()).await;
        let _ = self.client.flush().await;
    }

    /// A watch of the bucket of names: every name's last holder, then each change.
    async fn watch(&self) -> Option<kv::Watch> {
        match self.names.watch_with_history(">").await {
            Ok(w) => Some(w),
            Err(e) => {
                log::warn!("cluster: cannot watch the names (again at the next renewal): {e}");
                None
            }
        }
    }

    /// Puts this node's key, and looks at which nodes are alive: names of the others are
    /// dropped from the replica.
    async fn heartbeat(&mut self) {
        if let Err(e) = self.nodes.put(self.node.as_ref(), "".into()).await {
            log::warn!("cluster: cannot renew this node's lease: {e}");
            return;
        }
        for (name, revision) in std::mem::take(&mut self.unreleased) {
            // Taken again here meanwhile: it is held, not to be released.
            if !self.held.contains_key(&name) {
                self.delete(name, revision).await;
            }
        }
        let Ok(keys) = self.nodes.keys().await else {
            return;
        };
        self.alive = keys.filter_map(|k| async { k.ok() }).collect().await;
        log::debug!("cluster: nodes alive: {:?}", self.alive);
        let alive = &self.alive;
        self.directory.remote_retain(|node| alive.contains(node));
    }

    /// After a reconnection: the buckets (NATS may have come back empty), this node's key
    /// and names.
    async fn renew(&mut self) {
        match buckets(&self.client, self.lease).await {
            Ok((names, nodes)) => {
                self.names = names;
                self.nodes = nodes;
            }
            Err(e) => log::warn!("cluster: the buckets: {e}"),
        }
        self.heartbeat().await;
        let value = bytes_of(&self.node);
        for (name, (_, revision)) in self.held.iter_mut() {
            if let Ok(r) = self.names.put(key(name.as_bytes()), value.clone()).await {
                *revision = r;
            }
        }
    }

    /// Claims `name` for local client `id` cluster-wide; a name another live node holds is
    /// lost, and the client ended.
    async fn claim(&mut self, name: Name, id: ClientId) {
        let k = key(name.as_bytes());
        let value = bytes_of(&self.node);
        for _ in 0..3 {
            match self.names.create(&k, value.clone()).await {
                Ok(revision) => {
                    log::debug!("cluster: claimed {name:?} (revision {revision})");
                    self.held.insert(name, (id, revision));
                    return;
                }
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(e) => {
                    // NATS unreachable: held here; renewed (put) once it is back.
                    log::warn!("cluster: cannot claim {name:?}: {e}");
                    self.held.insert(name, (id, 0));
                    return;
                }
            }
            let Ok(Some(entry)) = self.names.entry(k.clone()).await else {
                continue;
            };
            if entry.operation != Operation::Put {
                // Deleted since: create again.
                if let Ok(r) = self.names.update(&k, value.clone(), entry.revision).await {
                    self.held.insert(name, (id, r));
                    return;
                }
                continue;
            }
            let holder = String::from_utf8_lossy(&entry.value).into_owned();
            if holder == *self.node {
                self.held.insert(name, (id, entry.revision));
                return;
            }
            self.heartbeat().await;
            if self.alive.contains(&holder) {
                break;
            }
            // Its holder's lease is over: take it over, unless another node did first.
            if let Ok(r) = self.names.update(&k, value.clone(), entry.revision).await {
                self.held.insert(name, (id, r));
                return;
            }
        }
        log::info!("cluster: {name:?} is held on another node; client {id} ended");
        let _ = self.mailboxes.post(id.thread(), Post::Replaced(id));
    }

    async fn release(&mut self, name: &Name) {
        if let Some((_, revision)) = self.held.remove(name) {
            self.delete(name.clone(), revision).await;
        }
    }

    /// Deletes a name this node held at `revision` (unless someone took it over since); kept
    /// for later if NATS cannot be reached.
    async fn delete(&mut self, name: Name, revision: u64) {
        let k = key(name.as_bytes());
        match self.names.delete_expect_revision(k, Some(revision)).await {
            Ok(()) => {}
            Err(e) if e.kind() == kv::DeleteErrorKind::WrongLastRevision => {}
            Err(e) => {
                log::debug!("cluster: releasing {name:?} later: {e}");
                self.unreleased.push((name, revision));
            }
        }
    }

    /// A change in the bucket of names: the replica follows. A name whose holder is not
    /// among the nodes alive at the last look is checked against its node key first (a node
    /// that joined since), and left out if that node is gone.
    async fn replicate(&mut self, entry: kv::Entry) {
        let Some(name) = name_of(&entry.key) else {
            return;
        };
        let holder = String::from_utf8_lossy(&entry.value).into_owned();
        if entry.operation != Operation::Put || holder == *self.node {
            return self.directory.remote_remove(name.as_bytes());
        }
        if !self.alive.contains(&holder) {
            match self.nodes.entry(holder.clone()).await {
                Ok(Some(e)) if e.operation == Operation::Put => {
                    self.alive.insert(holder.clone());
                }
                _ => return self.directory.remote_remove(name.as_bytes()),
            }
        }
        log::debug!("cluster: {name:?} is held on node {holder}");
        self.directory.remote_put(name, Arc::from(holder));
    }

    /// A relay for another node's client: published on its node's subject.
    async fn publish(&mut self, post: Post) {
        let Post::Message(to, msg, _) = post else {
            // Closes and name changes of remote clients are their own node's business.
            return;
        };
        let Some((name, node)) = self.directory.remote_target(to) else {
            log::debug!("cluster: a relay to a name that left; dropped");
            return;
        };
        let max = self.client.server_info().max_payload;
        if msg.len() + 128 > max {
            log::warn!(
                "cluster: a message of {} bytes for {name:?} is over NATS's max_payload ({max}); dropped",
                msg.len()
            );
            return;
        }
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Berth-To", key(name.as_bytes()).as_str());
        let subject = format!("berth.relay.{node}");
        if let Err(e) = self
            .client
            .publish_with_headers(subject, headers, msg.into())
            .await
        {
            log::warn!("cluster: a relay to {name:?} not sent: {e}");
        }
    }

    /// A relay from another node: to the engine holding its target.
    async fn deliver(&mut self, msg: async_nats::Message) {
        let Some(name) = msg
            .headers
            .as_ref()
            .and_then(|h| h.get("Berth-To"))
            .and_then(|k| name_of(k.as_str()))
        else {
            return;
        };
        let len = msg.payload.len() as u64;
        let mut post = Post::Message(ClientId(0), msg.payload.to_vec(), Credit::Link);
        // An engine whose mailbox stays full, or whose clients take none of what the link
        // sent them, this long (stuck, or stopped) loses the message rather than hold up the
        // link, its leases and every other relay.
        let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
        // What engines have not yet acknowledged is bounded, as any sender's is (a client
        // that reads nothing holds the link back, not the server's memory).
        while self.directory.link_in_flight() > LINK_WINDOW {
            if tokio::time::Instant::now() >= give_up {
                log::warn!("cluster: a relay for {name:?} dropped: engines took nothing for 5 s");
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.directory.link_sent(len);
        loop {
            let Some(id) = self.directory.lookup_local(name.as_bytes()) else {
                log::debug!("cluster: a relay for {name:?}, who left; dropped");
                self.directory.link_acked(len);
                return;
            };
            if let Post::Message(to, _, _) = &mut post {
                *to = id;
            }
            match self.mailboxes.post(id.thread(), post) {
                Ok(()) => return,
                Err(_) if tokio::time::Instant::now() >= give_up => {
                    log::warn!(
                        "cluster: a relay for {name:?} dropped: its engine took nothing for 5 s"
                    );
                    self.directory.link_acked(len);
                    return;
                }
                Err(p) => {
                    // The engine's mailbox is full: wait (NATS holds what follows).
                    post = p;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
    }
}

fn bytes_of(s: &str) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(s.as_bytes())
}

/// The next item of an optional stream; pending for ever without one.
async fn next<S: futures_util::Stream + Unpin>(s: &mut Option<S>) -> Option<S::Item> {
    match s {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}
