//! Mail between the engine threads of one server (what crosses, and the credit that bounds
//! it: see `directory`): posting with the sender's credit, taking posts in, acknowledging, and
//! both ends of a stream whose sender and receiver are on different threads.
//!
//! A stream across threads is the single-thread stream cut at the mailbox: the sender's side
//! takes the receiver's stream slot and posts `Open`, then each read's bytes as a `Chunk`
//! (the sender is paused once `out_high` bytes wait for acknowledgement); the receiver's side
//! opens the stream on its queue and feeds it the chunks, acknowledging them as the queue
//! takes them (or, over `out_high`, as it drains). A sender that cannot finish posts `Cut`,
//! and the receiver's side completes the frame with zeros as `cut_feed` does; a receiver that
//! leaves or closes posts `Gone`, and the sender drops the rest and goes on, as it does
//! within a thread.

use super::{ClientId, Core, Io, THROUGH_MIN};
use crate::msg::client::{Inbound, RemoteWaiter};
use crate::msg::directory::{Credit, Post, Slot};

impl Core {
    /// Whether `thread` is an engine thread of this server (not the cluster link).
    pub(super) fn is_engine(&self, thread: usize) -> bool {
        thread < self.directory.link_thread()
    }

    /// Sends a post to another thread, keeping order behind posts still waiting; `false` if
    /// it had to wait (or there is no other thread).
    pub(super) fn send_post(&mut self, post: Post, thread: usize) -> bool {
        let Some((boxes, _)) = &self.mail else {
            return false;
        };
        let post = match self.outbox.is_empty() {
            true => match boxes.post(thread, post) {
                Ok(()) => return true,
                Err(p) => p,
            },
            false => post,
        };
        self.outbox.push_back((thread, post));
        false
    }

    /// Sends a post to the thread of `to`; a post that must wait pauses the client whose input
    /// caused it. `false`: there is no other thread.
    pub(super) fn post(&mut self, post: Post, to: ClientId) -> bool {
        if self.mail.is_none() {
            return false;
        }
        if self.send_post(post, to.thread()) {
            return true;
        }
        // A client feeding a stream is not paused here: the stream's receiver (and whatever
        // waits behind it) depends on it, and the other engine may be waiting on that
        // receiver. What it can add meanwhile is bounded by its credit.
        let feeding = self
            .source
            .and_then(|s| self.get(s))
            .is_some_and(|s| s.feeding.is_some());
        if let Some(src) = self.source.filter(|_| !feeding) {
            if let Some(s) = self.get_mut(src) {
                s.paused = true;
            }
            if !self.outbox_waiters.contains(&src) {
                self.outbox_waiters.push(src);
            }
        }
        true
    }

    /// Counts `len` bytes posted to `to` against the client being delivered, pausing it once
    /// more than `out_high` wait for acknowledgement; returns who is owed them back.
    fn charge(&mut self, to: ClientId, len: usize) -> Credit {
        if !self.is_engine(to.thread()) {
            // The link's mailbox is bounded in posts, and a full one pauses (`post`).
            return Credit::None;
        }
        let high = self.config.out_high as u64;
        let Some(src) = self.source else {
            return Credit::None;
        };
        let Some(c) = self.get_mut(src) else {
            return Credit::None;
        };
        c.in_flight += len as u64;
        if c.in_flight > high {
            c.paused = true;
            c.awaiting_acks = true;
        }
        Credit::Client(src)
    }

    /// A whole message for `to`, a client of another thread.
    pub(super) fn post_message(&mut self, to: ClientId, msg: Vec<u8>) -> bool {
        let len = msg.len() as u64;
        let credit = self.charge(to, msg.len());
        if self.post(Post::Message(to, msg, credit), to) {
            return true;
        }
        self.acked(credit, len);
        false
    }

    /// Gives `bytes` back to whoever posted them.
    pub(super) fn ack(&mut self, credit: Credit, bytes: u64) {
        match credit {
            Credit::None => {}
            Credit::Link => self.directory.link_acked(bytes),
            Credit::Client(id) if id.thread() == self.thread => self.acked(credit, bytes),
            Credit::Client(id) => {
                self.send_post(Post::Ack(id, bytes), id.thread());
            }
        }
    }

    /// `bytes` posted on behalf of a client of this thread were taken: it is read again once
    /// at most a quarter of `out_high` waits.
    fn acked(&mut self, credit: Credit, bytes: u64) {
        let Credit::Client(id) = credit else { return };
        let low = (self.config.out_high as u64 / 4).max(1);
        let Some(c) = self.get_mut(id) else { return };
        c.in_flight = c.in_flight.saturating_sub(bytes);
        if c.awaiting_acks && c.in_flight <= low {
            c.awaiting_acks = false;
            if c.paused {
                c.paused = false;
                self.resumed.push(id);
            }
        }
    }

    /// `bytes` from `credit` went to `to`'s queue (`taken`) or nowhere: owed back now, unless
    /// the queue is over `out_high` (a stream's feeder: its ready bytes), as a local sender
    /// would be paused; then once it drains (`wake_waiters`).
    fn owe(&mut self, to: ClientId, credit: Credit, bytes: u64, stream: bool, taken: bool) {
        if credit == Credit::None {
            return;
        }
        let high = self.config.out_high;
        if let Some(c) = self.get_mut(to).filter(|_| taken) {
            let full = match stream {
                true => c.out.ready() > high,
                false => c.out.queued() > high,
            };
            if full {
                let same = |w: &&mut RemoteWaiter| w.credit == credit && w.stream == stream;
                match c.remote_waiters.iter_mut().find(same) {
                    Some(w) => w.bytes += bytes,
                    None => c.remote_waiters.push(RemoteWaiter {
                        credit,
                        bytes,
                        stream,
                    }),
                }
                return;
            }
        }
        self.ack(credit, bytes);
    }

    /// Takes `id`'s stream slot for a stream about to open to it on this thread: `Unknown`
    /// when no other thread can reach it (a single thread, an anonymous client).
    pub(super) fn take_slot(&mut self, id: ClientId) -> Slot {
        if self.mail.is_none() {
            return Slot::Unknown;
        }
        self.sync_slot(id);
        self.directory.take_stream(id)
    }

    /// Frees `id`'s stream slot if this thread holds it for a stream that is no longer open.
    pub(super) fn sync_slot(&mut self, id: ClientId) {
        let Some(c) = self.get_mut(id) else { return };
        if c.inbound != Inbound::None && !c.out.stream_open() {
            c.inbound = Inbound::None;
            self.directory.free_stream(id);
        }
    }

    /// Opens a stream to `to`, a client of another engine thread (the caller checked the
    /// consent rule): only for a client's message being delivered, and when `to`'s slot is
    /// free.
    pub(super) fn open_remote_stream(&mut self, to: ClientId, len: u64) -> bool {
        if !self.is_engine(to.thread()) || to.is_datagram() || self.mail.is_none() {
            return false;
        }
        let Some(src) = self.source.filter(|&s| self.get(s).is_some()) else {
            return false;
        };
        if self.directory.take_stream(to) != Slot::Taken {
            return false;
        }
        self.send_post(Post::Open { to, from: src, len }, to.thread());
        let c = self.get_mut(src).expect("checked above");
        if len > 0 {
            c.feeding = Some(to);
            c.feed_left = len;
        }
        true
    }

    /// More of the stream the client being delivered feeds to `to`, on another thread.
    pub(super) fn remote_stream_chunk(&mut self, to: ClientId, bytes: &[u8]) -> bool {
        let Some(src) = self.source else {
            return false;
        };
        let Some(c) = self.get_mut(src) else {
            return false;
        };
        if c.feeding != Some(to) {
            return bytes.is_empty();
        }
        let n = bytes
            .len()
            .min(usize::try_from(c.feed_left).unwrap_or(usize::MAX));
        c.feed_left -= n as u64;
        if c.feed_left == 0 {
            c.feeding = None;
        }
        if n > 0 {
            self.charge(to, n);
            let chunk = Post::Chunk {
                to,
                from: src,
                bytes: bytes[..n].to_vec(),
            };
            self.post(chunk, to);
        }
        true
    }

    /// `from` will not finish the stream it feeds to `to` on another thread (see `cut_feed`).
    pub(super) fn cut_remote_feed(&mut self, from: ClientId, to: ClientId) {
        let Some(c) = self.get_mut(from) else { return };
        if std::mem::take(&mut c.feed_left) > 0 {
            self.send_post(Post::Cut { to, from }, to.thread());
        }
    }

    /// Retries waiting posts and reads this engine's mailbox; `true` if anything moved.
    pub(super) fn exchange_mail(&mut self) -> bool {
        let Some((boxes, rx)) = &self.mail else {
            return false;
        };
        let (boxes, rx) = (boxes.clone(), rx.clone());
        let mut moved = false;
        while let Some((thread, post)) = self.outbox.pop_front() {
            if let Err(p) = boxes.post(thread, post) {
                self.outbox.push_front((thread, p));
                break;
            }
            moved = true;
        }
        if self.outbox.is_empty() {
            for w in std::mem::take(&mut self.outbox_waiters) {
                if let Some(c) = self.get_mut(w).filter(|c| !c.awaiting_acks) {
                    c.paused = false;
                    self.resumed.push(w);
                }
            }
        }
        while let Ok(post) = rx.try_recv() {
            moved = true;
            match post {
                Post::Message(to, msg, credit) => {
                    let len = msg.len() as u64;
                    let taken = self.send_owned(to, msg);
                    self.owe(to, credit, len, false, taken);
                }
                Post::Open { to, from, len } => self.remote_open(to, from, len),
                Post::Chunk { to, from, bytes } => self.remote_chunk(to, from, &bytes),
                Post::Cut { to, from } => {
                    if self.get(to).map(|c| c.inbound) == Some(Inbound::Remote(from)) {
                        self.cut_stream_to(to, from, "its sender stopped before the end");
                        self.sync_slot(to);
                    }
                }
                Post::Ack(id, bytes) => self.acked(Credit::Client(id), bytes),
                Post::Gone { from, to } => {
                    if let Some(c) = self.get_mut(from).filter(|c| c.feeding == Some(to)) {
                        log::debug!("client {from}: {to}, which it streams to, is gone");
                        c.feeding = None;
                        c.feed_left = 0;
                    }
                }
                Post::Close(to) => self.close(to),
                Post::Replaced(to) => self.name_replaced(to),
            }
        }
        moved
    }

    /// A client of another thread opens a stream to `to` (its thread took `to`'s slot).
    fn remote_open(&mut self, to: ClientId, from: ClientId, len: u64) {
        let mut opened = false;
        let known = self.queue(to, true, |q, _| opened = q.open_stream(len));
        let c = self.get_mut(to);
        match c {
            Some(c) if known && opened => {
                c.inbound = Inbound::Remote(from);
                // (A stream of no bytes is over already.)
                self.sync_slot(to);
            }
            Some(c) if c.out.stream_open() => {
                // Already receiving: the slot is someone else's (never, while it is kept).
                log::warn!("client {to}: a stream from {from} found another open");
                self.send_post(Post::Gone { from, to }, from.thread());
            }
            _ => {
                self.directory.free_stream(to);
                self.send_post(Post::Gone { from, to }, from.thread());
            }
        }
    }

    /// More of the stream `from` feeds to `to`.
    fn remote_chunk(&mut self, to: ClientId, from: ClientId, bytes: &[u8]) {
        let len = bytes.len() as u64;
        let ours = self
            .get(to)
            .is_some_and(|c| c.inbound == Inbound::Remote(from) && c.out.stream_open());
        if !ours {
            // `to` left or is closing: the rest goes nowhere, and its sender goes on.
            self.ack(Credit::Client(from), len);
            self.send_post(Post::Gone { from, to }, from.thread());
            return;
        }
        let taken = self.queue(to, true, |q, io| match io {
            // As `stream_chunk`: big chunks try the socket first.
            Io::Stream { stream, .. } if bytes.len() >= THROUGH_MIN => {
                q.stream_chunk_through(stream, bytes);
            }
            _ => {
                q.stream_chunk(bytes);
            }
        });
        self.sync_slot(to);
        self.owe(to, Credit::Client(from), len, true, taken);
    }

    /// What a client leaving owes senders on other threads: the bytes its queue kept them
    /// waiting for, and word that the stream it was receiving goes nowhere.
    pub(super) fn settle_remote(
        &mut self,
        id: ClientId,
        waiters: Vec<RemoteWaiter>,
        inbound: Inbound,
    ) {
        for w in waiters {
            self.ack(w.credit, w.bytes);
        }
        if let Inbound::Remote(from) = inbound {
            self.send_post(Post::Gone { from, to: id }, from.thread());
        }
    }

    /// Acknowledges the senders on other threads waiting on `id`'s queue that may go on, by
    /// the rule local waiters are resumed by (`wake_waiters`).
    pub(super) fn wake_remote_waiters(&mut self, id: ClientId, low: usize) {
        let Some(c) = self.get_mut(id) else { return };
        if c.remote_waiters.is_empty() {
            return;
        }
        let (ready, total) = (c.out.ready(), c.out.queued());
        if ready > low {
            return;
        }
        let waiters = std::mem::take(&mut c.remote_waiters);
        let (go, stay): (Vec<_>, Vec<_>) =
            waiters.into_iter().partition(|w| total <= low || w.stream);
        self.get_mut(id).expect("checked above").remote_waiters = stay;
        for w in go {
            self.ack(w.credit, w.bytes);
        }
    }
}
