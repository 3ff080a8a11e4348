//! Names and mail shared by the engines of one server (`berth msg serve -A N`).
//!
//! The [`Directory`] maps live names to clients, whichever thread holds them: a name is
//! claimed atomically at admission, so two threads can never admit the same one. Mail to a
//! client of another thread travels through that thread's [`Mailboxes`] entry: a bounded
//! channel and the waker of its poll. A full channel makes the sending thread keep the post
//! and pause the client it came from until the channel takes it.
//!
//! What crosses: whole messages, and streamed messages as a [`Post::Open`], [`Post::Chunk`]s
//! of at most one read each and, if their sender cannot finish, a [`Post::Cut`]. A stream to
//! a named client is opened only by whoever takes its *stream slot* here
//! ([`Directory::take_stream`]), whatever thread they are on, so a stream never reaches a
//! client already receiving one (the sender learns it at once, as within a thread, and sends
//! whole or refuses).
//!
//! Backpressure is credit, counted in bytes, not posts (a post may be a 64 MiB message): the
//! bytes of a post sent on behalf of a client ([`Credit`]) count against it until the
//! receiving thread acknowledges them ([`Post::Ack`]), and a client with more than `out_high`
//! bytes unacknowledged is not read. The receiving thread acknowledges a post as soon as its
//! client's queue took it and is not over `out_high`, else once that queue has drained, by
//! the rule a local sender is resumed by (see `core`). So a relay across threads holds what
//! one within a thread holds, plus at most `out_high` in flight per sender.
//!
//! In a cluster (`--cluster nats://...`, see `cluster`) the directory also holds a replica of
//! the names other nodes hold: such a name is found like a local one, as an id whose thread is
//! the cluster link (the mailbox after the engines'), so a relay to it is a post like any
//! other; claims and releases of local names are told to the link, which makes them
//! cluster-wide.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use berth_proto::msg::Name;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use mio::Waker;

use super::client::ClientId;

/// Live names of a server, and how far its engines are in a shutdown. Names are bytes, found
/// by their bytes.
#[derive(Debug)]
pub struct Directory {
    names: Mutex<Names>,
    /// Engine threads of the server.
    engines: usize,
    /// Engine threads with no client in the middle of a message any more, while stopping.
    quiet: AtomicUsize,
    /// Names other nodes of the cluster hold.
    remote: Mutex<Remote>,
    /// The cluster link, told of every local claim and release (none outside a cluster).
    cluster: OnceLock<tokio::sync::mpsc::UnboundedSender<Op>>,
    /// Bytes the cluster link has posted to engines and they have not yet acknowledged.
    link_in_flight: AtomicU64,
}

/// Local names, both ways.
#[derive(Debug, Default)]
struct Names {
    by_name: HashMap<Name, ClientId>,
    by_id: HashMap<ClientId, Holder>,
}

/// A client holding a name.
#[derive(Debug)]
struct Holder {
    name: Name,
    /// A streamed message to it is open, or on its way from another thread.
    receiving: bool,
}

/// Whether a stream to a client may open ([`Directory::take_stream`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Taken by the caller: open the stream, and free the slot when it ends.
    Taken,
    /// Someone is already streaming to it.
    Busy,
    /// The client holds no name here (anonymous, or gone): no other thread can reach it.
    Unknown,
}

/// Who is owed an acknowledgement for the bytes of a post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credit {
    /// Nobody: sent outside a client's delivery (the application's own sends).
    None,
    /// The client whose input caused the post, on the sending thread.
    Client(ClientId),
    /// The cluster link (its bytes in flight are counted here, in the directory).
    Link,
}

/// What the directory tells the cluster link.
#[derive(Debug)]
pub(crate) enum Op {
    /// `name` was claimed here by this client: claim it cluster-wide.
    Claim(Name, ClientId),
    /// `name` was released here.
    Release(Name),
    /// The server is stopping: release everything and leave.
    Stop,
}

/// The replica of names held on other nodes, each with the id that stands for it here.
#[derive(Debug, Default)]
struct Remote {
    by_name: HashMap<Name, usize>,
    slots: slab::Slab<RemoteName>,
    next_gen: u32,
}

#[derive(Debug)]
struct RemoteName {
    name: Name,
    node: Arc<str>,
    gen: u32,
}

impl Default for Directory {
    fn default() -> Self {
        Directory::new(1)
    }
}

impl Directory {
    /// The directory of a server of `engines` threads.
    pub(crate) fn new(engines: usize) -> Directory {
        Directory {
            names: Mutex::default(),
            engines,
            quiet: AtomicUsize::new(0),
            remote: Mutex::default(),
            cluster: OnceLock::new(),
            link_in_flight: AtomicU64::new(0),
        }
    }

    /// The link posted `bytes` to an engine.
    pub(crate) fn link_sent(&self, bytes: u64) {
        self.link_in_flight.fetch_add(bytes, Ordering::AcqRel);
    }

    /// An engine acknowledged `bytes` the link posted (its client's queue took them).
    pub(crate) fn link_acked(&self, bytes: u64) {
        self.link_in_flight.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes the link posted that engines have not yet acknowledged.
    pub(crate) fn link_in_flight(&self) -> u64 {
        self.link_in_flight.load(Ordering::Acquire)
    }

    /// The thread index of the cluster link: the mailbox after the engines'.
    pub(crate) fn link_thread(&self) -> usize {
        self.engines
    }

    /// Joins the directory to a cluster: claims and releases are told to `link` from now on.
    pub(crate) fn join_cluster(&self, link: tokio::sync::mpsc::UnboundedSender<Op>) {
        let _ = self.cluster.set(link);
    }

    fn tell(&self, op: Op) {
        if let Some(link) = self.cluster.get() {
            // The link outlives the engines; a send after it left changes nothing.
            let _ = link.send(op);
        }
    }

    fn remote(&self) -> std::sync::MutexGuard<'_, Remote> {
        self.remote.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Another node holds `name` (the replica the cluster link keeps).
    pub(crate) fn remote_put(&self, name: Name, node: Arc<str>) {
        let mut remote = self.remote();
        if let Some(&slot) = remote.by_name.get(&name) {
            if remote.slots[slot].node == node {
                return;
            }
            remote.slots.remove(slot);
            remote.by_name.remove(&name);
        }
        remote.next_gen = (remote.next_gen + 1) & ClientId::GEN_MASK;
        let gen = remote.next_gen.max(1);
        let slot = remote.slots.insert(RemoteName {
            name: name.clone(),
            node,
            gen,
        });
        remote.by_name.insert(name, slot);
    }

    /// No other node holds `name` any more.
    pub(crate) fn remote_remove(&self, name: &[u8]) {
        let mut remote = self.remote();
        if let Some(slot) = remote.by_name.remove(name) {
            remote.slots.remove(slot);
        }
    }

    /// Forgets the names of nodes `alive` says are gone.
    pub(crate) fn remote_retain(&self, alive: impl Fn(&str) -> bool) {
        let mut remote = self.remote();
        let gone: Vec<Name> = remote
            .slots
            .iter()
            .filter(|(_, r)| !alive(&r.node))
            .map(|(_, r)| r.name.clone())
            .collect();
        for name in gone {
            if let Some(slot) = remote.by_name.remove(&name) {
                remote.slots.remove(slot);
            }
        }
    }

    /// The remote name an id from [`Directory::lookup`] stands for, and its node.
    pub(crate) fn remote_target(&self, id: ClientId) -> Option<(Name, Arc<str>)> {
        let remote = self.remote();
        let r = remote.slots.get(id.key())?;
        (r.gen == id.gen() & ClientId::GEN_MASK).then(|| (r.name.clone(), r.node.clone()))
    }

    /// The local client holding `name`, if one does (not another node's).
    pub(crate) fn lookup_local(&self, name: &[u8]) -> Option<ClientId> {
        self.names().by_name.get(name).copied()
    }

    /// The name a local client holds, whatever thread asks.
    pub(crate) fn name_of(&self, id: ClientId) -> Option<Name> {
        self.names().by_id.get(&id).map(|h| h.name.clone())
    }

    /// Takes the stream slot of `id` for a stream about to open to it.
    pub(crate) fn take_stream(&self, id: ClientId) -> Slot {
        match self.names().by_id.get_mut(&id) {
            Some(h) if h.receiving => Slot::Busy,
            Some(h) => {
                h.receiving = true;
                Slot::Taken
            }
            None => Slot::Unknown,
        }
    }

    /// The stream to `id` has ended (or never opened): another may open.
    pub(crate) fn free_stream(&self, id: ClientId) {
        if let Some(h) = self.names().by_id.get_mut(&id) {
            h.receiving = false;
        }
    }

    /// One engine thread has no client in the middle of a message any more (call once).
    pub(crate) fn thread_quiet(&self) {
        self.quiet.fetch_add(1, Ordering::AcqRel);
    }

    /// Every engine thread is quiet: messages can no longer cross between them.
    pub(crate) fn all_quiet(&self) -> bool {
        self.quiet.load(Ordering::Acquire) >= self.engines
    }

    fn names(&self) -> std::sync::MutexGuard<'_, Names> {
        // A panic while holding the lock leaves the map consistent (every change is one call).
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `name` for `id` unless a live client holds it.
    pub(crate) fn claim(&self, name: &Name, id: ClientId) -> bool {
        let mut names = self.names();
        if names.by_name.contains_key(name) || self.remote().by_name.contains_key(name.as_bytes()) {
            return false;
        }
        names.insert(name, id);
        self.tell(Op::Claim(name.clone(), id));
        true
    }

    /// Registers `name` for `id` whoever holds it; returns the client it was taken from.
    /// Across nodes the first holder keeps it: a newcomer here that the cluster refuses is
    /// ended with `name-replaced` by the link.
    pub(crate) fn take_over(&self, name: &Name, id: ClientId) -> Option<ClientId> {
        let old = self.names().insert(name, id);
        if old.is_none() {
            self.tell(Op::Claim(name.clone(), id));
        }
        old
    }

    /// Frees `name` if `id` holds it.
    pub(crate) fn release(&self, name: &[u8], id: ClientId) {
        let mut names = self.names();
        names.by_id.remove(&id);
        if names.by_name.get(name) == Some(&id) {
            names.by_name.remove(name);
            self.tell(Op::Release(Name::from(name)));
        }
    }

    /// The client holding `name`: a local one, or the id standing for another node's.
    pub(crate) fn lookup(&self, name: &[u8]) -> Option<ClientId> {
        if let Some(id) = self.names().by_name.get(name).copied() {
            return Some(id);
        }
        let remote = self.remote();
        let slot = *remote.by_name.get(name)?;
        let tag = ((self.link_thread() as u32) << 24) | remote.slots[slot].gen;
        Some(ClientId::new(slot, tag))
    }
}

impl Names {
    /// `name` is `id`'s now; returns whom it was taken from.
    fn insert(&mut self, name: &Name, id: ClientId) -> Option<ClientId> {
        let holder = Holder {
            name: name.clone(),
            receiving: false,
        };
        self.by_id.insert(id, holder);
        self.by_name.insert(name.clone(), id)
    }
}

/// What one engine posts to another.
pub(crate) enum Post {
    /// A whole message for a client of the receiving engine, and who is owed its bytes back.
    Message(ClientId, Vec<u8>, Credit),
    /// A streamed message of `len` bytes opens to `to`, fed by `from` (whose thread took
    /// `to`'s stream slot).
    Open {
        to: ClientId,
        from: ClientId,
        len: u64,
    },
    /// More of the stream `from` feeds to `to` (owed back to `from`).
    Chunk {
        to: ClientId,
        from: ClientId,
        bytes: Vec<u8>,
    },
    /// `from` cannot finish its stream to `to`: complete it with zeros (issue 29).
    Cut { to: ClientId, from: ClientId },
    /// Bytes posted on behalf of this client were taken.
    Ack(ClientId, u64),
    /// `to` no longer takes the stream `from` feeds it (it left, or is closing): the rest of
    /// the message is dropped, and `from` goes on.
    Gone { from: ClientId, to: ClientId },
    /// Close this client once its queued output is written.
    Close(ClientId),
    /// A newcomer on another thread took this client's name: end it with `name-replaced`.
    Replaced(ClientId),
}

/// Where posts for one thread go.
pub(crate) trait Mailbox: Send + Sync {
    /// Delivers `post`, or gives it back if the box is full (or its owner has stopped).
    fn post(&self, post: Post) -> Result<(), Post>;
}

/// An engine's mailbox: a bounded channel and the waker of its poll.
struct EngineBox(Sender<Post>, Arc<Waker>);

impl Mailbox for EngineBox {
    fn post(&self, post: Post) -> Result<(), Post> {
        match self.0.try_send(post) {
            Ok(()) => {
                let _ = self.1.wake();
                Ok(())
            }
            Err(TrySendError::Full(p) | TrySendError::Disconnected(p)) => Err(p),
        }
    }
}

/// Every engine's inbound channel and waker, by thread index (and the cluster link's after
/// them, in a cluster).
pub(crate) struct Mailboxes {
    boxes: Vec<Box<dyn Mailbox>>,
}

impl Mailboxes {
    /// Channels of `capacity` posts for `wakers.len()` engines; returns the receivers too.
    /// With `link`, the cluster link's box comes after the engines'.
    pub(crate) fn new(
        wakers: Vec<Arc<Waker>>,
        capacity: usize,
        link: Option<Box<dyn Mailbox>>,
    ) -> (Arc<Mailboxes>, Vec<Receiver<Post>>) {
        let (mut boxes, receivers): (Vec<Box<dyn Mailbox>>, Vec<_>) = wakers
            .into_iter()
            .map(|waker| {
                let (tx, rx) = crossbeam_channel::bounded(capacity);
                (Box::new(EngineBox(tx, waker)) as Box<dyn Mailbox>, rx)
            })
            .unzip();
        boxes.extend(link);
        (Arc::new(Mailboxes { boxes }), receivers)
    }

    /// Posts to the engine owning the client the post is for; gives the post back if that
    /// engine's channel is full (or it has stopped).
    pub(crate) fn post(&self, thread: usize, post: Post) -> Result<(), Post> {
        match self.boxes.get(thread) {
            Some(mailbox) => mailbox.post(post),
            None => Err(post),
        }
    }
}
