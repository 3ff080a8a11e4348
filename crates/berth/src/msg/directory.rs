//! Names and mail shared by the engines of one server (`berth msg serve -A N`).
//!
//! The [`Directory`] maps live names to clients, whichever thread holds them: a name is
//! claimed atomically at admission, so two threads can never admit the same one. A message to
//! a client of another thread travels whole through that thread's [`Mailboxes`] entry: a
//! bounded channel and the waker of its poll. A full channel is backpressure: the sending
//! thread keeps the message and pauses the client it came from until the channel takes it.
//!
//! In a cluster (`--cluster nats://...`, see `cluster`) the directory also holds a replica of
//! the names other nodes hold: such a name is found like a local one, as an id whose thread is
//! the cluster link (the mailbox after the engines'), so a relay to it is a post like any
//! other; claims and releases of local names are told to the link, which makes them
//! cluster-wide.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use berth_proto::msg::Name;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use mio::Waker;

use super::client::ClientId;

/// Live names of a server, and how far its engines are in a shutdown. Names are bytes, found
/// by their bytes.
#[derive(Debug)]
pub struct Directory {
    names: Mutex<HashMap<Name, ClientId>>,
    /// Engine threads of the server.
    engines: usize,
    /// Engine threads with no client in the middle of a message any more, while stopping.
    quiet: AtomicUsize,
    /// Names other nodes of the cluster hold.
    remote: Mutex<Remote>,
    /// The cluster link, told of every local claim and release (none outside a cluster).
    cluster: OnceLock<tokio::sync::mpsc::UnboundedSender<Op>>,
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
        }
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
        self.names().get(name).copied()
    }

    /// One engine thread has no client in the middle of a message any more (call once).
    pub(crate) fn thread_quiet(&self) {
        self.quiet.fetch_add(1, Ordering::AcqRel);
    }

    /// Every engine thread is quiet: messages can no longer cross between them.
    pub(crate) fn all_quiet(&self) -> bool {
        self.quiet.load(Ordering::Acquire) >= self.engines
    }

    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<Name, ClientId>> {
        // A panic while holding the lock leaves the map consistent (every change is one call).
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `name` for `id` unless a live client holds it.
    pub(crate) fn claim(&self, name: &Name, id: ClientId) -> bool {
        let mut names = self.names();
        if names.contains_key(name) || self.remote().by_name.contains_key(name.as_bytes()) {
            return false;
        }
        names.insert(name.clone(), id);
        self.tell(Op::Claim(name.clone(), id));
        true
    }

    /// Registers `name` for `id` whoever holds it; returns the client it was taken from.
    /// Across nodes the first holder keeps it: a newcomer here that the cluster refuses is
    /// ended with `name-replaced` by the link.
    pub(crate) fn take_over(&self, name: &Name, id: ClientId) -> Option<ClientId> {
        let old = self.names().insert(name.clone(), id);
        if old.is_none() {
            self.tell(Op::Claim(name.clone(), id));
        }
        old
    }

    /// Frees `name` if `id` holds it.
    pub(crate) fn release(&self, name: &[u8], id: ClientId) {
        let mut names = self.names();
        if names.get(name) == Some(&id) {
            names.remove(name);
            self.tell(Op::Release(Name::from(name)));
        }
    }

    /// The client holding `name`: a local one, or the id standing for another node's.
    pub(crate) fn lookup(&self, name: &[u8]) -> Option<ClientId> {
        if let Some(id) = self.names().get(name).copied() {
            return Some(id);
        }
        let remote = self.remote();
        let slot = *remote.by_name.get(name)?;
        let tag = ((self.link_thread() as u32) << 24) | remote.slots[slot].gen;
        Some(ClientId::new(slot, tag))
    }
}

/// What one engine posts to another.
pub(crate) enum Post {
    /// A whole message for a client of the receiving engine.
    Message(ClientId, Vec<u8>),
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
