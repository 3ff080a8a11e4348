//! The engine's state and every rule of the message protocol that needs sockets: accepting,
//! the handshake decision, reading into pieces or whole messages, output with backpressure,
//! UDP peers, timeouts and closing. It owns no poll loop (that is [`super::engine`]): readiness
//! comes in through [`Core::ready`], and what the application must hear goes out through a
//! [`Sink`], either at once (message bytes, which borrow the read buffer) or as [`Note`]s
//! delivered between events.
//!
//! Backpressure: while a client's input is being delivered it is the *source*; a send that
//! leaves any client's queue above `out_high` pauses the source until that queue falls below a
//! quarter of it. A relay of a 1 GiB message therefore holds about `out_high` plus one read
//! buffer, however fast the sender writes.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::msg::handshake::encode_refusal;
use berth_proto::msg::{
    Admission, Ending, Event, FrameDecoder, Keyword, Listener as ListenerFlags, Peer, Piece,
    Policy, Refusal, ServerSession, Transport,
};
use mio::net::{TcpListener, UdpSocket, UnixListener};
use mio::{Interest, Registry, Token};
use slab::Slab;

use super::client::{Client, ClientId, Io, Phase, Proto, Stream};
use super::directory::{Directory, Mailboxes, Post};
use super::endpoint::Endpoint;
use super::outq::{Framing, OutQueue, Produce};
use super::stats::MsgStats;
use crate::drive::evloop::pool::BufPool;
use crate::drive::evloop::timer::Wheel;
use crate::net::read_into_spare;

mod udp;

/// Tokens at and above this are listeners (`LISTENERS + index`); below are client slab keys.
pub(crate) const LISTENERS: usize = usize::MAX / 2;
/// How long a closed connection keeps reading (and dropping) what the client still sends, so
/// that its last frame (a refusal, an error) is not destroyed by a reset.
const LINGER: Duration = Duration::from_secs(2);
/// Largest UDP payload (65,535 minus the IP and UDP headers).
const MAX_DATAGRAM: usize = 65_507;

/// Settings of an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Largest message delivered whole (`--max-message`); bigger frames end the connection
    /// with the `too-large` error frame.
    pub max_message: u64,
    /// Largest message a streaming handler accepts (defaults to the protocol's maximum).
    pub max_streamed: u64,
    /// Most clients at once; more are refused with `capacity`.
    pub capacity: usize,
    /// Time allowed for the keyword after connecting.
    pub handshake_timeout: Duration,
    /// A UDP client silent this long is disconnected.
    pub udp_idle: Duration,
    /// A stream client with output waiting that takes none of it for this long is dropped
    /// (and a closing one closed).
    pub write_timeout: Duration,
    /// A queue above this many bytes pauses whoever feeds it.
    pub out_high: usize,
    /// Unread whole messages above this many bytes pause reading from their client.
    pub inbox_high: usize,
    /// Read buffer size.
    pub buffer_size: usize,
    /// Expected names and rules.
    pub policy: Policy,
    /// Share ports with other processes (`SO_REUSEPORT`).
    pub reuse_port: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_message: 64 << 20,
            max_streamed: berth_proto::msg::frame::CONTROL_BIT - 1,
            capacity: 10_000,
            handshake_timeout: Duration::from_secs(10),
            udp_idle: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            out_high: 1 << 20,
            inbox_high: 8 << 20,
            buffer_size: 64 * 1024,
            policy: Policy::default(),
            reuse_port: true,
        }
    }
}

/// How an admitted client arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Under a name given in advance.
    Expected,
    /// Under another name.
    Unknown,
    /// Without a name (anonymous, or through a raw listener).
    Anonymous,
    /// A server this engine connected to (client mode).
    Outbound,
}

/// What the application hears between events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Note {
    Connected(ClientId, Arrival),
    Drained(ClientId),
    /// The client is gone: its name, if it had one, and the reason a server we connected to
    /// gave for closing, if it gave one.
    Lost(ClientId, Option<String>, Option<String>),
}

/// Where the engine delivers what clients send.
pub(crate) trait Sink {
    /// Pieces (`true`) or whole messages (`false`).
    fn streams(&self) -> bool;
    /// A whole message.
    fn message(&mut self, core: &mut Core, id: ClientId, msg: &[u8]);
    /// A piece of a message (streaming sinks only).
    fn piece(&mut self, core: &mut Core, id: ClientId, piece: Piece<'_>);
    /// A note.
    fn note(&mut self, core: &mut Core, note: Note);
}

pub(crate) enum ListenSock {
    Tcp(TcpListener),
    Unix(UnixListener),
    Udp(UdpSocket),
    /// No longer listening (shutting down); kept so that indices stay valid.
    Closed,
}

pub(crate) struct Listener {
    pub(crate) endpoint: Endpoint,
    pub(crate) sock: ListenSock,
    /// UDP: registered peers by address.
    udp_peers: HashMap<SocketAddr, usize>,
    /// UDP: clients whose datagrams wait for the socket to take more.
    udp_blocked: VecDeque<ClientId>,
}

impl Listener {
    pub(crate) fn new(endpoint: Endpoint, sock: ListenSock) -> Listener {
        Listener {
            endpoint,
            sock,
            udp_peers: HashMap::new(),
            udp_blocked: VecDeque::new(),
        }
    }
}

/// The engine's state.
pub(crate) struct Core {
    registry: Registry,
    pub(crate) listeners: Vec<Listener>,
    pub(crate) clients: Slab<Client>,
    next_gen: u32,
    /// This engine's number among the server's threads (in every id it gives out).
    thread: usize,
    /// Live names, shared with the server's other engines.
    directory: Arc<Directory>,
    /// The other engines' mailboxes and this one's, when there are several.
    mail: Option<(Arc<Mailboxes>, crossbeam_channel::Receiver<Post>)>,
    /// Posts another engine's channel had no room for, in order.
    outbox: VecDeque<(usize, Post)>,
    /// Clients paused until the outbox is empty.
    outbox_waiters: Vec<ClientId>,
    /// Reading the mailbox waits for this client's queue to drain.
    mail_stalled: Option<ClientId>,
    pub(crate) config: EngineConfig,
    wheel: Wheel,
    pool: BufPool,
    scratch: Vec<u8>,
    pub(crate) now: Instant,
    /// Clients whose output to try writing.
    dirty: Vec<ClientId>,
    /// Paused clients to read again.
    resumed: Vec<ClientId>,
    notes: VecDeque<Note>,
    /// The client whose input is being delivered.
    source: Option<ClientId>,
    /// Largest message new clients may send: `max_streamed` when the application takes
    /// pieces, `max_message` when it takes whole messages (set by the engine per turn).
    pub(crate) limit: u64,
    pub(crate) stats: Arc<MsgStats>,
}

impl Core {
    pub(crate) fn new(registry: Registry, config: EngineConfig, stats: Arc<MsgStats>) -> Core {
        let now = Instant::now();
        Core {
            registry,
            listeners: Vec::new(),
            clients: Slab::with_capacity(config.capacity.min(1024)),
            next_gen: 1,
            thread: 0,
            directory: Arc::default(),
            mail: None,
            outbox: VecDeque::new(),
            outbox_waiters: Vec::new(),
            mail_stalled: None,
            wheel: Wheel::new(Duration::from_millis(100), 1024, config.capacity, now),
            pool: BufPool::new(config.buffer_size, 64, 4),
            scratch: Vec::with_capacity(MAX_DATAGRAM + 1),
            now,
            dirty: Vec::new(),
            resumed: Vec::new(),
            notes: VecDeque::new(),
            source: None,
            limit: config.max_message,
            stats,
            config,
        }
    }

    /// Makes this core engine `thread` of a server whose engines share `directory` and
    /// `mail`.
    pub(crate) fn join(
        &mut self,
        thread: usize,
        directory: Arc<Directory>,
        mail: Option<(Arc<Mailboxes>, crossbeam_channel::Receiver<Post>)>,
    ) {
        self.thread = thread;
        self.directory = directory;
        self.mail = mail;
    }

    /// The live client with this id.
    pub(crate) fn get(&self, id: ClientId) -> Option<&Client> {
        self.clients.get(id.key()).filter(|c| c.gen == id.gen())
    }

    fn get_mut(&mut self, id: ClientId) -> Option<&mut Client> {
        self.clients.get_mut(id.key()).filter(|c| c.gen == id.gen())
    }

    /// The admitted client registered under `name`.
    pub(crate) fn lookup(&self, name: &str) -> Option<ClientId> {
        self.directory.lookup(name)
    }

    fn is_remote(&self, id: ClientId) -> bool {
        id.thread() != self.thread
    }

    /// Sends a post to another engine, keeping order behind posts still waiting; a post that
    /// must wait pauses the client whose input caused it.
    fn post(&mut self, post: Post, to: ClientId) -> bool {
        let Some((boxes, _)) = &self.mail else {
            return false;
        };
        let thread = to.thread();
        let post = match self.outbox.is_empty() {
            true => match boxes.post(thread, post) {
                Ok(()) => return true,
                Err(p) => p,
            },
            false => post,
        };
        self.outbox.push_back((thread, post));
        if let Some(src) = self.source {
            if let Some(s) = self.get_mut(src) {
                s.paused = true;
            }
            if !self.outbox_waiters.contains(&src) {
                self.outbox_waiters.push(src);
            }
        }
        true
    }

    /// Retries waiting posts and reads this engine's mailbox; `true` if anything moved.
    fn exchange_mail(&mut self) -> bool {
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
                if let Some(c) = self.get_mut(w) {
                    c.paused = false;
                    self.resumed.push(w);
                }
            }
        }
        if self.mail_stalled.is_some_and(|id| self.get(id).is_none()) {
            self.mail_stalled = None;
        }
        while self.mail_stalled.is_none() {
            let Ok(post) = rx.try_recv() else { break };
            moved = true;
            match post {
                Post::Message(to, msg) => {
                    self.send_owned(to, msg);
                    // The sender is on another thread and cannot be paused from here: stop
                    // reading the mailbox until this client's queue drains instead.
                    if self
                        .get(to)
                        .is_some_and(|c| c.out.queued() > self.config.out_high)
                    {
                        self.mail_stalled = Some(to);
                    }
                }
                Post::Close(to) => self.close(to),
            }
        }
        moved
    }

    /// How long until the next timer may fire, if anything is armed or lingering.
    pub(crate) fn timer_due(&self) -> Option<Duration> {
        if !self.outbox.is_empty() {
            // Another engine's mailbox was full: try again soon.
            return Some(Duration::from_millis(1));
        }
        (!self.clients.is_empty()).then(|| self.wheel.resolution())
    }

    // ----- sending -------------------------------------------------------------------------

    /// Runs `f` on an open client's queue, then applies backpressure. `false`: no such client,
    /// or it is no longer open.
    fn queue(&mut self, id: ClientId, f: impl FnOnce(&mut OutQueue)) -> bool {
        if self.is_remote(id) {
            // Only whole messages and closes cross threads (see `send`, `close`).
            return false;
        }
        let high = self.config.out_high;
        let Some(c) = self.get_mut(id) else {
            return false;
        };
        if c.phase != Phase::Open {
            return false;
        }
        f(&mut c.out);
        c.owes_drain = true;
        let full = c.out.queued() > high;
        self.dirty.push(id);
        if full {
            if let Some(src) = self.source {
                if let Some(s) = self.get_mut(src) {
                    s.paused = true;
                }
                let c = self.get_mut(id).expect("checked above");
                if !c.waiters.contains(&src) {
                    c.waiters.push(src);
                }
            }
        }
        true
    }

    pub(crate) fn send(&mut self, id: ClientId, msg: &[u8]) -> bool {
        if self.is_remote(id) {
            return self.post(Post::Message(id, msg.to_vec()), id);
        }
        self.queue(id, |q| q.push_message(msg))
    }

    pub(crate) fn send_owned(&mut self, id: ClientId, msg: Vec<u8>) -> bool {
        if self.is_remote(id) {
            return self.post(Post::Message(id, msg), id);
        }
        self.queue(id, |q| q.push_owned(msg))
    }

    pub(crate) fn send_lazy(&mut self, id: ClientId, producer: Box<dyn Produce>) -> bool {
        self.queue(id, |q| q.push_lazy(producer))
    }

    /// Opens a streamed message to `id`; `false` if it is gone or already receiving one.
    pub(crate) fn open_stream(&mut self, id: ClientId, len: u64) -> bool {
        let mut opened = false;
        let known = self.queue(id, |q| opened = q.open_stream(len));
        known && opened
    }

    /// More of the streamed message open to `id`.
    pub(crate) fn stream_chunk(&mut self, id: ClientId, bytes: &[u8]) -> bool {
        self.queue(id, |q| {
            q.stream_chunk(bytes);
        })
    }

    /// Closes `id` once its queued output is written. A client receiving a streamed message
    /// that will never be finished (its sender left) is closed at once instead: its stream
    /// cannot be resumed.
    pub(crate) fn close(&mut self, id: ClientId) {
        if self.is_remote(id) {
            self.post(Post::Close(id), id);
            return;
        }
        let Some(c) = self.get_mut(id) else { return };
        if c.phase == Phase::Open {
            c.phase = Phase::Closing;
            if c.out.stream_open() {
                c.out.clear();
            }
            if let Io::Udp { .. } = c.io {
                // After the queued datagrams, a goodbye.
                c.out.push_wire(b"B");
            }
            self.dirty.push(id);
        }
    }

    /// Takes the unread whole messages of `id`, and reads it again if it was paused for them.
    pub(crate) fn take_inbox(&mut self, id: ClientId) -> VecDeque<Vec<u8>> {
        let Some(c) = self.get_mut(id) else {
            return VecDeque::new();
        };
        c.inbox_bytes = 0;
        let inbox = std::mem::take(&mut c.inbox);
        if c.paused && c.waiters.is_empty() {
            c.paused = false;
            self.resumed.push(id);
        }
        inbox
    }

    /// Adds a whole message to `id`'s inbox; pauses it when the inbox is over its limit.
    /// Returns whether the inbox was empty before.
    pub(crate) fn inbox_push(&mut self, id: ClientId, msg: &[u8]) -> bool {
        let high = self.config.inbox_high;
        let Some(c) = self.get_mut(id) else {
            return false;
        };
        let first = c.inbox.is_empty();
        c.inbox.push_back(msg.to_vec());
        c.inbox_bytes += msg.len();
        if c.inbox_bytes > high {
            c.paused = true;
        }
        first
    }

    // ----- readiness -----------------------------------------------------------------------

    /// Handles one readiness event.
    pub(crate) fn ready(
        &mut self,
        token: Token,
        readable: bool,
        writable: bool,
        sink: &mut dyn Sink,
    ) {
        if token.0 >= LISTENERS {
            let index = token.0 - LISTENERS;
            if index >= self.listeners.len() {
                return;
            }
            if matches!(self.listeners[index].sock, ListenSock::Udp(_)) {
                if writable {
                    let blocked: Vec<_> = self.listeners[index].udp_blocked.drain(..).collect();
                    self.dirty.extend(blocked);
                }
                if readable {
                    self.receive_datagrams(index, sink);
                }
            } else {
                self.accept(index);
            }
            return;
        }
        let key = token.0;
        let Some(c) = self.clients.get_mut(key) else {
            return;
        };
        let id = c.id(key);
        if let Io::Stream { readable: r, .. } = &mut c.io {
            *r |= readable;
        }
        if writable {
            self.dirty.push(id);
        }
        if readable {
            self.pump(id, sink);
        }
    }

    /// Writes pending output, reads resumed clients and delivers notes until nothing is left.
    pub(crate) fn settle(&mut self, sink: &mut dyn Sink) {
        loop {
            if let Some(id) = self.dirty.pop() {
                self.flush(id);
            } else if let Some(note) = self.notes.pop_front() {
                sink.note(self, note);
            } else if let Some(id) = self.resumed.pop() {
                self.pump(id, sink);
            } else if !self.exchange_mail() {
                return;
            }
        }
    }

    // ----- accepting -----------------------------------------------------------------------

    fn accept(&mut self, index: usize) {
        loop {
            let (stream, peer) = match &self.listeners[index].sock {
                ListenSock::Tcp(l) => match l.accept() {
                    Ok((s, addr)) => (
                        Stream::Tcp(s),
                        Peer {
                            transport: Transport::Tcp,
                            ip: Some(addr.ip()),
                        },
                    ),
                    Err(e) => return self.accept_failed(index, e),
                },
                ListenSock::Unix(l) => match l.accept() {
                    Ok((s, _)) => (
                        Stream::Unix(s),
                        Peer {
                            transport: Transport::Unix,
                            ip: None,
                        },
                    ),
                    Err(e) => return self.accept_failed(index, e),
                },
                ListenSock::Udp(_) | ListenSock::Closed => return,
            };
            self.stats.connection();
            let raw = self.listeners[index].endpoint.raw;
            if self.clients.len() >= self.config.capacity {
                self.stats.refused(Refusal::Capacity);
                if !raw {
                    let mut stream = stream;
                    let mut out = Vec::new();
                    let text = format!(
                        "the server holds its limit of {} clients",
                        self.config.capacity
                    );
                    encode_refusal(Refusal::Capacity, &text, &mut out);
                    // Best effort: a fresh socket's buffer takes a short frame whole.
                    let _ = io::Write::write(&mut stream, &out);
                }
                continue;
            }
            let proto = if raw {
                Proto::Raw
            } else {
                Proto::Server(ServerSession::new(self.limit))
            };
            let framing = if raw { Framing::Raw } else { Framing::Frames };
            let io = Io::Stream {
                stream,
                proto,
                hup: false,
                readable: false,
            };
            let Some(id) = self.insert(io, peer, Some(index), framing) else {
                continue;
            };
            if raw {
                self.admit(id, None, Arrival::Anonymous);
            } else {
                let at = self.now + self.config.handshake_timeout;
                self.wheel.set(id.key(), Some(at));
            }
        }
    }

    fn accept_failed(&mut self, index: usize, e: io::Error) {
        match e.kind() {
            io::ErrorKind::WouldBlock => {}
            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted => self.accept(index),
            _ => log::warn!("{}: accept failed: {e}", self.listeners[index].endpoint),
        }
    }

    /// Adds a client with a stream or UDP address; registers streams with the poll.
    pub(crate) fn insert(
        &mut self,
        mut io: Io,
        peer: Peer,
        listener: Option<usize>,
        framing: Framing,
    ) -> Option<ClientId> {
        let entry = self.clients.vacant_entry();
        let key = entry.key();
        if key >= self.config.capacity {
            return None;
        }
        if let Io::Stream { stream, .. } = &mut io {
            if let Err(e) = self.registry.register(
                stream.source(),
                Token(key),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                log::warn!("cannot register a connection: {e}");
                return None;
            }
        }
        let gen = self.next_gen | ((self.thread as u32) << 24);
        self.next_gen = (self.next_gen + 1) & 0xff_ffff;
        self.next_gen = self.next_gen.max(1);
        entry.insert(Client::new(gen, io, peer, listener, OutQueue::new(framing)));
        Some(ClientId::new(key, gen))
    }

    /// Marks a client admitted under `name`; `false` if another thread claimed the name
    /// between the decision and now.
    pub(crate) fn admit(&mut self, id: ClientId, name: Option<String>, arrival: Arrival) -> bool {
        if let Some(name) = &name {
            if !self.directory.claim(name, id) {
                return false;
            }
        }
        self.wheel.disarm(id.key());
        let c = self.get_mut(id).expect("admitting a live client");
        c.phase = Phase::Open;
        c.admitted = true;
        c.name = name;
        self.stats.admitted();
        self.notes.push_back(Note::Connected(id, arrival));
        true
    }

    /// Decides on a keyword: the policy, this listener's settings, the names in use.
    fn decide(
        &mut self,
        id: ClientId,
        keyword: Result<Keyword, Refusal>,
    ) -> Result<(Option<String>, Arrival), (Refusal, String)> {
        let c = self.get(id).expect("deciding on a live client");
        let (peer, listener) = (c.peer, c.listener);
        let flags = listener.map_or(ListenerFlags::default(), |i| {
            let e = &self.listeners[i].endpoint;
            ListenerFlags {
                no_anonymous: e.no_anonymous,
                expected_only: e.expected_only,
            }
        });
        let keyword = keyword.map_err(|r| (r, why(r, None, peer)))?;
        let directory = &self.directory;
        match self
            .config
            .policy
            .admit_on(&keyword, peer, flags, |n| directory.lookup(n).is_some())
        {
            Ok(Admission::Expected(name)) => Ok((Some(name), Arrival::Expected)),
            Ok(Admission::Unknown(name)) => Ok((Some(name), Arrival::Unknown)),
            Ok(Admission::Anonymous) => Ok((None, Arrival::Anonymous)),
            Err(r) => {
                let name = match &keyword {
                    Keyword::Named(n) => Some(n.as_str()),
                    Keyword::Anonymous => None,
                };
                Err((r, why(r, name, peer)))
            }
        }
    }

    // ----- reading -------------------------------------------------------------------------

    /// Reads from a stream client until it would block, is paused, or is gone.
    fn pump(&mut self, id: ClientId, sink: &mut dyn Sink) {
        loop {
            let Some(c) = self.clients.get_mut(id.key()).filter(|c| c.gen == id.gen()) else {
                return;
            };
            // A closing client is not read until its output is out; then it lingers, and what
            // it still sends is read and dropped.
            let closing = matches!(c.phase, Phase::Closing | Phase::Lingering);
            if c.phase == Phase::Closing || (c.paused && c.phase != Phase::Lingering) {
                return;
            }
            let Io::Stream {
                stream,
                hup,
                readable,
                ..
            } = &mut c.io
            else {
                return;
            };
            if !*readable || *hup {
                return;
            }
            let mut buf = self.pool.take();
            match read_into_spare(stream, &mut buf) {
                Ok(0) => {
                    *hup = true;
                    *readable = false;
                    self.pool.put(buf);
                    return self.peer_closed(id);
                }
                Ok(_) if closing => self.pool.put(buf),
                Ok(_) => {
                    self.deliver(id, &buf, sink);
                    self.pool.put(buf);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    *readable = false;
                    self.pool.put(buf);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.pool.put(buf),
                Err(e) => {
                    self.pool.put(buf);
                    log::debug!("client {id}: read failed: {e}");
                    return self.remove(id);
                }
            }
        }
    }

    /// The peer will send nothing more. An open client with output still queued gets it
    /// (it may have half-closed and be waiting for answers); anything else goes now.
    fn peer_closed(&mut self, id: ClientId) {
        let Some(c) = self.get_mut(id) else { return };
        if c.phase == Phase::Open && !c.out.is_empty() && !c.out.stream_open() {
            c.phase = Phase::Closing;
            self.dirty.push(id);
        } else {
            self.remove(id);
        }
    }

    /// Passes a read's bytes through the client's protocol to the sink.
    fn deliver(&mut self, id: ClientId, input: &[u8], sink: &mut dyn Sink) {
        self.source = Some(id);
        let mut pos = 0;
        // A message found whole in this read: handed over without copying.
        let mut direct: Option<(usize, usize)> = None;
        while let Some(c) = self.get_mut(id) {
            if c.phase == Phase::Closing {
                break;
            }
            let Io::Stream { proto, .. } = &mut c.io else {
                break;
            };
            let piece = match proto {
                Proto::Raw => {
                    if pos == input.len() {
                        break;
                    }
                    pos = input.len();
                    self.stats.message(input.len());
                    self.whole_or_pieces(id, input, sink);
                    continue;
                }
                Proto::Server(session) => {
                    let (n, event) = session.next(&input[pos..]);
                    pos += n;
                    match event {
                        None => break,
                        Some(Event::Keyword(k)) => {
                            self.handshake(id, Ok(k));
                            continue;
                        }
                        Some(Event::BadKeyword(r)) => {
                            self.handshake(id, Err(r));
                            continue;
                        }
                        Some(Event::TooLarge(e)) => {
                            self.end(id, Ending::TooLarge, &e.to_string());
                            break;
                        }
                        Some(Event::Piece(p)) => p,
                    }
                }
                Proto::Outbound(decoder) => match decoder.next(&input[pos..]) {
                    Ok((_, None)) => break,
                    Ok((n, Some(p))) => {
                        pos += n;
                        p
                    }
                    Err(e) => {
                        log::warn!("server {id} sent a frame over our limit: {e}");
                        self.remove(id);
                        break;
                    }
                },
            };
            self.piece(id, piece, pos, &mut direct, input, sink);
        }
        self.source = None;
    }

    /// One piece of a framed message, to a streaming sink as it is, or assembled.
    fn piece(
        &mut self,
        id: ClientId,
        piece: Piece<'_>,
        pos: usize,
        direct: &mut Option<(usize, usize)>,
        input: &[u8],
        sink: &mut dyn Sink,
    ) {
        let c = self.get_mut(id).expect("delivering to a live client");
        if let Piece::Control(_) = piece {
            c.in_control = true;
            c.assembling.clear();
            return;
        }
        if c.in_control {
            match piece {
                Piece::Chunk(b) => c.assembling.extend_from_slice(b),
                Piece::End => {
                    let text = String::from_utf8_lossy(&c.assembling).into_owned();
                    log::info!("server {id} ends the connection: {text}");
                    c.ending = Some(text);
                    c.in_control = false;
                    c.assembling.clear();
                }
                _ => {}
            }
            return;
        }
        if sink.streams() {
            if let Piece::Start(len) = piece {
                self.stats.message(len as usize);
            }
            return sink.piece(self, id, piece);
        }
        match piece {
            Piece::Start(len) => {
                c.announced = len;
                c.assembling.clear();
                *direct = None;
                self.stats.message(len as usize);
            }
            Piece::Chunk(b) => {
                if c.assembling.is_empty() && direct.is_none() && b.len() as u64 == c.announced {
                    *direct = Some((pos - b.len(), pos));
                } else {
                    if let Some((from, to)) = direct.take() {
                        c.assembling.extend_from_slice(&input[from..to]);
                    }
                    c.assembling.extend_from_slice(b);
                }
            }
            Piece::End => {
                if let Some((from, to)) = direct.take() {
                    sink.message(self, id, &input[from..to]);
                } else {
                    let whole = std::mem::take(&mut c.assembling);
                    sink.message(self, id, &whole);
                    if let Some(c) = self.get_mut(id) {
                        // Keep a modest buffer for the next message; free a big one.
                        if whole.capacity() <= 1 << 20 {
                            let mut whole = whole;
                            whole.clear();
                            c.assembling = whole;
                        }
                    }
                }
            }
            Piece::Control(_) => {}
        }
    }

    /// Bytes that are one message by construction (a raw read, a datagram).
    fn whole_or_pieces(&mut self, id: ClientId, bytes: &[u8], sink: &mut dyn Sink) {
        if sink.streams() {
            sink.piece(self, id, Piece::Start(bytes.len() as u64));
            if !bytes.is_empty() {
                sink.piece(self, id, Piece::Chunk(bytes));
            }
            sink.piece(self, id, Piece::End);
        } else {
            sink.message(self, id, bytes);
        }
    }

    fn handshake(&mut self, id: ClientId, keyword: Result<Keyword, Refusal>) {
        let decision = match self.decide(id, keyword) {
            // Claimed by another thread between the decision and the admission.
            Ok((Some(name), arrival)) if !self.admit(id, Some(name.clone()), arrival) => Err((
                Refusal::NameTaken,
                format!("name {name:?} is held by a live connection"),
            )),
            Ok((None, arrival)) => {
                self.admit(id, None, arrival);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(refusal) => Err(refusal),
        };
        let c = self.get_mut(id).expect("handshake of a live client");
        let Io::Stream {
            proto: Proto::Server(session),
            ..
        } = &mut c.io
        else {
            return;
        };
        let mut answer = Vec::new();
        match decision {
            Ok(()) => {
                session.accept(&mut answer);
                // In front of anything the application may already have queued for it.
                c.out.push_wire(&answer);
                self.dirty.push(id);
            }
            Err((r, text)) => {
                session.refuse(r, &text, &mut answer);
                c.out.push_wire(&answer);
                c.phase = Phase::Closing;
                self.stats.refused(r);
                self.wheel.disarm(id.key());
                self.dirty.push(id);
                log::debug!("client {id} refused: {} {text}", r.code());
            }
        }
    }

    /// Ends an admitted client with a control frame after its queued output.
    fn end(&mut self, id: ClientId, why: Ending, text: &str) {
        let Some(c) = self.get_mut(id) else { return };
        if let Io::Stream {
            proto: Proto::Server(session),
            ..
        } = &mut c.io
        {
            let mut frame = Vec::new();
            session.end(why, text, &mut frame);
            // Behind a half-sent stream the frame would land inside its payload: drop the
            // stream (the peer sees the connection end early, which is the truth).
            if c.out.stream_open() {
                c.out.clear();
            }
            c.out.push_wire(&frame);
        }
        if why == Ending::TooLarge {
            self.stats.too_large();
            log::debug!("client {id}: {text}");
        }
        if let Some(c) = self.get_mut(id) {
            c.phase = Phase::Closing;
        }
        self.dirty.push(id);
    }

    /// Stops accepting: stream listeners are closed (a UNIX socket's file removed); UDP
    /// sockets stay open to say goodbye to their clients.
    pub(crate) fn stop_listening(&mut self) {
        for l in &mut self.listeners {
            if matches!(l.sock, ListenSock::Udp(_)) {
                continue;
            }
            if let ListenSock::Unix(_) = l.sock {
                if let super::endpoint::Address::Unix(path) = &l.endpoint.address {
                    let _ = std::fs::remove_file(path);
                }
            }
            // Dropping the socket closes it, which also takes it out of the poll.
            l.sock = ListenSock::Closed;
        }
    }

    /// Stops listening and ends every client with the `shutdown` frame (UDP clients: `B`)
    /// after its queued output.
    pub(crate) fn shutdown_all(&mut self) {
        self.stop_listening();
        let ids: Vec<_> = self.clients.iter().map(|(k, c)| c.id(k)).collect();
        for id in ids {
            match self
                .get(id)
                .map(|c| (c.phase, matches!(c.io, Io::Udp { .. })))
            {
                Some((Phase::Open, true)) => self.close(id),
                Some((Phase::Open, false)) => {
                    self.end(id, Ending::Shutdown, "the server is stopping")
                }
                Some((Phase::Handshake, _)) => self.remove(id),
                _ => {}
            }
        }
    }

    // ----- writing -------------------------------------------------------------------------

    /// Writes what a client has queued; closes it when done closing; reports a drained queue
    /// and wakes clients paused on it.
    fn flush(&mut self, id: ClientId) {
        let low = (self.config.out_high / 4).max(1);
        let Some(c) = self.clients.get_mut(id.key()).filter(|c| c.gen == id.gen()) else {
            return;
        };
        let stall = self.now + self.config.write_timeout;
        let is_stream = matches!(c.io, Io::Stream { .. });
        // A stream client with output waiting has `write_timeout` from its last progress to
        // take some (closing ones too, and from the moment they start closing).
        if is_stream && !c.out.is_empty() && !c.write_armed {
            c.write_armed = true;
            self.wheel.set(id.key(), Some(stall));
        }
        match &mut c.io {
            Io::Stream { stream, .. } => loop {
                c.out.refill(low);
                match c.out.write_to(stream) {
                    Ok(0) => break,
                    Ok(_) => {
                        self.wheel.set(id.key(), Some(stall));
                    }
                    Err(e) => {
                        log::debug!("client {id}: write failed: {e}");
                        return self.remove(id);
                    }
                }
            },
            Io::Udp { listener, addr } => {
                let (listener, addr) = (*listener, *addr);
                let ListenSock::Udp(sock) = &self.listeners[listener].sock else {
                    return;
                };
                loop {
                    c.out.refill(low);
                    let Some(datagram) = c.out.front_datagram() else {
                        break;
                    };
                    match sock.send_to(datagram, addr) {
                        Ok(_) => c.out.pop_datagram(),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            self.listeners[listener].udp_blocked.push_back(id);
                            return;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        // An ICMP error from an earlier datagram, or a message too big: drop
                        // this datagram, as UDP would.
                        Err(e) => {
                            log::debug!("client {id}: datagram not sent: {e}");
                            c.out.pop_datagram();
                        }
                    }
                }
            }
        }
        let c = self.get_mut(id).expect("still here");
        if c.out.queued() <= low && !c.waiters.is_empty() {
            let waiters = std::mem::take(&mut c.waiters);
            for w in waiters {
                if let Some(wc) = self.get_mut(w) {
                    wc.paused = false;
                    self.resumed.push(w);
                }
            }
        }
        let c = self.get_mut(id).expect("still here");
        if !c.out.is_empty() {
            return;
        }
        if std::mem::take(&mut c.write_armed) && matches!(c.io, Io::Stream { .. }) {
            self.wheel.disarm(id.key());
        }
        let c = self.get_mut(id).expect("still here");
        match c.phase {
            Phase::Closing => self.close_now(id),
            Phase::Open if c.owes_drain => {
                c.owes_drain = false;
                self.notes.push_back(Note::Drained(id));
            }
            _ => {}
        }
    }

    /// Output is written and the client is to go: UDP clients go now; stream clients stop
    /// writing and linger, reading and dropping what still arrives until the peer closes.
    fn close_now(&mut self, id: ClientId) {
        let Some(c) = self.get_mut(id) else { return };
        let Io::Stream {
            stream,
            hup,
            readable,
            ..
        } = &mut c.io
        else {
            return self.remove(id);
        };
        if *hup {
            return self.remove(id);
        }
        let _ = match stream {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
        };
        let read_now = *readable;
        c.paused = false;
        c.phase = Phase::Lingering;
        self.forget_name(id);
        let at = self.now + LINGER;
        self.wheel.set(id.key(), Some(at));
        if read_now {
            self.resumed.push(id);
        }
    }

    fn forget_name(&mut self, id: ClientId) {
        if let Some(name) = self.get(id).and_then(|c| c.name.as_deref()) {
            self.directory.release(name, id);
        }
    }

    /// Frees a client now; an admitted one is reported lost.
    pub(crate) fn remove(&mut self, id: ClientId) {
        if self.get(id).is_none() {
            return;
        }
        self.forget_name(id);
        let key = id.key();
        self.wheel.disarm(key);
        let c = self.clients.remove(key);
        if let Io::Udp { listener, addr } = c.io {
            self.listeners[listener].udp_peers.remove(&addr);
        }
        for w in c.waiters {
            if let Some(wc) = self.get_mut(w) {
                wc.paused = false;
                self.resumed.push(w);
            }
        }
        if c.admitted {
            self.stats.disconnected();
            self.notes.push_back(Note::Lost(id, c.name, c.ending));
        }
    }

    // ----- timers --------------------------------------------------------------------------

    /// Expires handshakes, idle UDP clients and lingering closes whose time has come.
    pub(crate) fn expire(&mut self, due: &mut Vec<usize>) {
        self.wheel.advance(self.now, due);
        for &key in due.iter() {
            let Some(c) = self.clients.get(key) else {
                continue;
            };
            let id = c.id(key);
            match (c.phase, &c.io) {
                (Phase::Handshake, _) => {
                    let text = format!(
                        "no keyword within {:?} of connecting",
                        self.config.handshake_timeout
                    );
                    self.refuse_now(id, Refusal::Timeout, &text);
                }
                (Phase::Open, Io::Udp { .. }) => self.remove(id),
                (Phase::Open, Io::Stream { .. }) => {
                    log::debug!(
                        "client {id} took no output for {:?}",
                        self.config.write_timeout
                    );
                    self.remove(id);
                }
                (Phase::Closing | Phase::Lingering, _) => self.remove(id),
            }
        }
        due.clear();
    }

    fn refuse_now(&mut self, id: ClientId, why: Refusal, text: &str) {
        let Some(c) = self.get_mut(id) else { return };
        if let Io::Stream {
            proto: Proto::Server(session),
            ..
        } = &mut c.io
        {
            let mut frame = Vec::new();
            session.refuse(why, text, &mut frame);
            c.out.push_wire(&frame);
        }
        c.phase = Phase::Closing;
        self.stats.refused(why);
        self.dirty.push(id);
    }

    /// Registers a listener's socket with the poll.
    pub(crate) fn add_listener(&mut self, mut listener: Listener) -> io::Result<usize> {
        let index = self.listeners.len();
        let token = Token(LISTENERS + index);
        match &mut listener.sock {
            ListenSock::Tcp(l) => self.registry.register(l, token, Interest::READABLE)?,
            ListenSock::Unix(l) => self.registry.register(l, token, Interest::READABLE)?,
            ListenSock::Udp(s) => {
                self.registry
                    .register(s, token, Interest::READABLE | Interest::WRITABLE)?
            }
            ListenSock::Closed => {}
        }
        self.listeners.push(listener);
        Ok(index)
    }

    /// A framed stream to a server we connected to, already past its handshake.
    pub(crate) fn add_outbound(
        &mut self,
        stream: Stream,
        peer: Peer,
        label: String,
    ) -> io::Result<ClientId> {
        let io = Io::Stream {
            stream,
            proto: Proto::Outbound(FrameDecoder::from_server(self.limit)),
            hup: false,
            readable: true,
        };
        let id = self
            .insert(io, peer, None, Framing::Frames)
            .ok_or_else(|| io::Error::other("the engine is at its client limit"))?;
        let c = self.get_mut(id).expect("just inserted");
        c.phase = Phase::Open;
        c.admitted = true;
        c.name = Some(label);
        self.stats.admitted();
        self.notes.push_back(Note::Connected(id, Arrival::Outbound));
        // Frames that came with the OK may already wait in the socket.
        self.resumed.push(id);
        Ok(id)
    }
}

/// The explanation sent with a refusal.
fn why(r: Refusal, name: Option<&str>, peer: Peer) -> String {
    let name = name.unwrap_or("");
    match r {
        Refusal::NameInvalid => {
            "a keyword is 1 to 255 bytes of UTF-8 without control characters".to_owned()
        }
        Refusal::AnonymousRefused => "this listener does not accept anonymous clients".to_owned(),
        Refusal::TransportRefused => {
            format!("name {name:?} may not connect over {:?}", peer.transport).to_lowercase()
        }
        Refusal::AddressRefused => match peer.ip {
            Some(ip) => format!("name {name:?} may not connect from {ip}"),
            None => format!("name {name:?} may not connect from here"),
        },
        Refusal::NotExpected => format!("name {name:?} was not expected here"),
        Refusal::NameTaken => format!("name {name:?} is held by a live connection"),
        Refusal::Capacity => "the server is at its client limit".to_owned(),
        Refusal::Timeout => "no keyword in time".to_owned(),
    }
}
