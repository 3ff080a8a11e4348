//! Names and mail shared by the engines of one server (`berth msg serve -A N`).
//!
//! The [`Directory`] maps live names to clients, whichever thread holds them: a name is
//! claimed atomically at admission, so two threads can never admit the same one. A message to
//! a client of another thread travels whole through that thread's [`Mailboxes`] entry: a
//! bounded channel and the waker of its poll. A full channel is backpressure: the sending
//! thread keeps the message and pauses the client it came from until the channel takes it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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

    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<Name, ClientId>> {
        // A panic while holding the lock leaves the map consistent (every change is one call).
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `name` for `id` unless a live client holds it.
    pub(crate) fn claim(&self, name: &Name, id: ClientId) -> bool {
        let mut names = self.names();
        if names.contains_key(name) {
            return false;
        }
        names.insert(name.clone(), id);
        true
    }

    /// Registers `name` for `id` whoever holds it; returns the client it was taken from.
    pub(crate) fn take_over(&self, name: &Name, id: ClientId) -> Option<ClientId> {
        self.names().insert(name.clone(), id)
    }

    /// Frees `name` if `id` holds it.
    pub(crate) fn release(&self, name: &[u8], id: ClientId) {
        let mut names = self.names();
        if names.get(name) == Some(&id) {
            names.remove(name);
        }
    }

    /// The client holding `name`.
    pub(crate) fn lookup(&self, name: &[u8]) -> Option<ClientId> {
        self.names().get(name).copied()
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

/// Every engine's inbound channel and waker, by thread index.
pub(crate) struct Mailboxes {
    boxes: Vec<(Sender<Post>, Arc<Waker>)>,
}

impl Mailboxes {
    /// Channels of `capacity` posts for `wakers.len()` engines; returns the receivers too.
    pub(crate) fn new(
        wakers: Vec<Arc<Waker>>,
        capacity: usize,
    ) -> (Arc<Mailboxes>, Vec<Receiver<Post>>) {
        let (boxes, receivers) = wakers
            .into_iter()
            .map(|waker| {
                let (tx, rx) = crossbeam_channel::bounded(capacity);
                ((tx, waker), rx)
            })
            .unzip();
        (Arc::new(Mailboxes { boxes }), receivers)
    }

    /// Posts to the engine owning the client the post is for; gives the post back if that
    /// engine's channel is full (or it has stopped).
    pub(crate) fn post(&self, thread: usize, post: Post) -> Result<(), Post> {
        let Some((tx, waker)) = self.boxes.get(thread) else {
            return Err(post);
        };
        match tx.try_send(post) {
            Ok(()) => {
                let _ = waker.wake();
                Ok(())
            }
            Err(TrySendError::Full(p) | TrySendError::Disconnected(p)) => Err(p),
        }
    }
}
