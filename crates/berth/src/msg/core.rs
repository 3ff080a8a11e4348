//! The engine's state and every rule of the message protocol that needs sockets: accepting,
//! the handshake decision, reading into pieces or whole messages, output with backpressure,
//! UDP peers, timeouts and closing. It owns no poll loop (that is [`super::engine`]): readiness
//! comes in through [`Core::ready`], and what the application must hear goes out through a
//! [`Sink`], either at once (message bytes, which borrow the read buffer) or as [`Note`]s
//! delivered between events.
//!
//! This file holds the state, the sending API and readiness dispatch; `admit` (accepting, the
//! handshake decision), `read` (bytes to pieces or messages), `write` (flushing, ending,
//! closing, timers), `cross` (the mail between engine threads) and `udp` hold the rest.
//!
//! Backpressure: while a client's input is being delivered it is the *source*; a send that
//! leaves any client's queue above `out_high` pauses the source until that queue falls below a
//! quarter of it. A relay of a 1 GiB message therefore holds about `out_high` plus one read
//! buffer, however fast the sender writes. A source sending to a client of another thread
//! cannot be paused from there: its bytes are credited instead, and it is paused while more
//! than `out_high` of them wait for the other thread's acknowledgement, which that thread
//! gives by the same rule (see `cross`).
//!
//! Whole messages sent to a client that is receiving a streamed message wait behind the stream
//! (they are *held*), and only the stream's sender can make them move. So the stream's sender
//! is judged by the bytes ready to write alone, never by the held ones: were it paused until
//! the whole queue drained, it would wait for itself, and every sender behind it with it
//! (issue 12: a relay that stopped for good). Any other sender is judged by the whole queue,
//! which keeps what is held bounded.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::msg::{FrameDecoder, Name, Peer, Piece, Policy, Transport};
use bytes::Bytes;
use mio::net::{TcpListener, UdpSocket, UnixListener};
use mio::{Interest, Registry, Token};
use slab::Slab;

use super::client::{Client, ClientId, Inbound, Io, Phase, Proto, Stream};
use super::directory::{Directory, Mailboxes, Post, Slot};
use super::outq::{Framing, IterProducer, OutQueue, Produce, SHARE_FROM};
use super::stats::MsgStats;
use crate::net::{Addr, ConnSizing, Endpoint, ListenConfig};
use crate::rt::{BufPool, Wheel};

mod admit;
mod cross;
mod hold;
mod read;
mod udp;
mod write;
mod ws;

pub(crate) use self::ws::WsPeer;

/// Tokens at and above this are listeners (`LISTENERS + index`); below are client slab keys.
pub(crate) const LISTENERS: usize = usize::MAX / 2;
/// How long a closed connection keeps reading (and dropping) what the client still sends, so
/// that its last frame (a refusal, an error) is not destroyed by a reset.
const LINGER: Duration = Duration::from_secs(2);
/// Stream chunks at least this long are written straight to the socket when it takes them.
const THROUGH_MIN: usize = 8 * 1024;
/// Reads of resumed clients per [`Core::settle`] before the engine polls again.
const RESUMED_PER_SETTLE: usize = 64;
/// Largest UDP payload (65,535 minus the IP and UDP headers): a message and its kind byte.
const MAX_DATAGRAM: usize = super::client::MAX_DATAGRAM_MESSAGE + 1;

/// Settings of an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Largest message delivered whole (`--max-message`); bigger frames end the connection
    /// with the `too-large` error frame.
    pub max_message: u64,
    /// Largest message a streaming handler accepts (defaults to the protocol's maximum).
    pub max_streamed: u64,
    /// Largest message received whole before a streaming handler sees it (`--max-held`). A
    /// message up to this size arrives at the handler only once all of it has been read, so an
    /// echo or relay cannot block its own sender (a blocking client that sends a whole message
    /// before it reads the answer); a bigger one streams through as it arrives.
    pub max_held: u64,
    /// Most bytes of messages being received whole at once, across the engine's clients
    /// (`--max-held-total`, shared out evenly by a [`MsgServer`](super::MsgServer)'s threads).
    /// A client whose message would go over it is not read until enough is delivered; one
    /// message at a time may exceed it, so that every message within the limits gets through.
    pub max_held_total: u64,
    /// Most clients at once (more are refused with `capacity`; each thread of a
    /// [`MsgServer`](super::MsgServer) is an engine with its own) and the size of each read
    /// buffer: [`ConnSizing::msg`], 10,000 and 64 KiB, whose doc says why they are not HTTP's.
    pub sizing: ConnSizing,
    /// Time allowed for the keyword after connecting.
    pub handshake_timeout: Duration,
    /// A UDP client silent this long is disconnected.
    pub udp_idle: Duration,
    /// A stream client with output waiting that takes none of it for this long is dropped
    /// (and a closing one closed).
    pub write_timeout: Duration,
    /// A client that sends nothing for this long in the middle of a message is ended with the
    /// `read-timeout` error frame (`None`, the default: never, as FI-ASockIOCore). A client
    /// the engine itself is not reading (backpressure) is never timed out for it.
    pub read_timeout: Option<Duration>,
    /// The same for a client whose unfinished message others wait on (`--stall-timeout`,
    /// default 30 s; issue 29): one feeding a stream to another client, or one holding part
    /// of the held budget that another client waits for. Its stall would stop them too, so it
    /// is ended whatever `read_timeout` says, and a stream it fed is completed with zeros.
    pub stall_timeout: Duration,
    /// Bytes a message others wait on must bring in each `stall_timeout` window
    /// (`--stall-min-bytes`, default 64 KiB; issue 40): a sender that trickles less (a byte
    /// every half second to a 100 MB stream) is stalled as much as a silent one, and ended the
    /// same way. 0: only silence is a stall.
    pub stall_min_bytes: u64,
    /// A queue above this many bytes pauses whoever feeds it.
    pub out_high: usize,
    /// Unread whole messages above this many bytes pause reading from their client.
    pub inbox_high: usize,
    /// Longest opening handshake (the HTTP head) a `ws://` client may send; a longer one is
    /// answered 431 (`--ws-max-head`).
    pub max_opening: usize,
    /// permessage-deflate (RFC 7692) on `ws://` and `wss://` listeners (`--ws-deflate`,
    /// `--ws-deflate-*`); a listener's `?deflate=off` turns it off there.
    pub ws_deflate: berth_proto::ws::DeflateConfig,
    /// What a name may be (`policy.names`), expected names and rules.
    pub policy: Policy,
    /// How listeners are bound: the options HTTP's models take ([`ListenConfig`], the same
    /// struct as `drive::Common::listen`), as the engine reads them:
    /// - `exclusive` (on by default): a TCP or UDP port another process listens on is refused;
    ///   off (`--reuse-port`), it is shared. The threads of one server share theirs either way
    ///   (`reuse_port` is always set on TCP listeners).
    /// - `nodelay` (on): `TCP_NODELAY` on TCP connections, accepted and made (off: Nagle's
    ///   algorithm gathers small writes, as a socket does by default).
    /// - `transport`: [`Acceptor::Tls`](crate::net::Acceptor::Tls) gives the certificate of
    ///   the `tls://` and `wss://` listeners that name none of their own (`--tls-cert`,
    ///   `--tls-key`); plain endpoints stay plain.
    /// - `inherited`: a listening TCP socket a service manager passed (socket activation,
    ///   [`activation::listen_fds`](crate::net::activation::listen_fds)): the first TCP
    ///   endpoint (`tcp://`, `tls://`, `ws://`, `wss://`) listens on it instead of binding its
    ///   address, in every thread of a [`MsgServer`](super::MsgServer).
    /// - `backlog` and `defer_accept_secs` apply to TCP listeners; UNIX sockets are bound with
    ///   the defaults (`unix_mode` is not read).
    pub listen: ListenConfig,
    /// Join a cluster of servers through NATS (`--cluster`): names are unique across it, and
    /// relays reach clients of other nodes. Read by [`MsgServer`](super::MsgServer) only.
    pub cluster: Option<super::ClusterConfig>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_message: 64 << 20,
            max_streamed: berth_proto::msg::frame::CONTROL_BIT - 1,
            max_held: 64 << 20,
            max_held_total: 1 << 30,
            sizing: ConnSizing::msg(),
            handshake_timeout: Duration::from_secs(10),
            udp_idle: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            read_timeout: None,
            stall_timeout: Duration::from_secs(30),
            stall_min_bytes: 64 * 1024,
            out_high: 1 << 20,
            inbox_high: 8 << 20,
            max_opening: 16 * 1024,
            ws_deflate: berth_proto::ws::DeflateConfig::default(),
            policy: Policy::default(),
            listen: ListenConfig::default(),
            cluster: None,
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
    Lost(ClientId, Option<Name>, Option<String>),
}

/// Where the engine delivers what clients send.
pub(crate) trait Sink {
    /// Pieces (`true`) or whole messages (`false`).
    fn streams(&self) -> bool;
    /// A whole message.
    fn message(&mut self, core: &mut Core, id: ClientId, msg: &[u8]);
    /// A whole message, owned (a large held one): a sink that keeps messages keeps this one
    /// without copying it. The default passes it on as [`Sink::message`] and keeps its buffer
    /// for the next held message.
    fn message_owned(&mut self, core: &mut Core, id: ClientId, msg: Vec<u8>) {
        self.message(core, id, &msg);
        core.pool_put(Some(msg));
    }
    /// A piece of a message (streaming sinks only).
    fn piece(&mut self, core: &mut Core, id: ClientId, piece: Piece<'_>);
    /// A message a streaming sink gets whole (held: see `hold`), owned.
    fn whole(&mut self, core: &mut Core, id: ClientId, msg: Vec<u8>) {
        self.piece(core, id, Piece::Start(msg.len() as u64));
        if !msg.is_empty() {
            self.piece(core, id, Piece::Chunk(&msg));
        }
        self.piece(core, id, Piece::End);
    }
    /// A note.
    fn note(&mut self, core: &mut Core, note: Note);
}

pub(crate) enum ListenSock {
    Tcp(TcpListener),
    /// With its file, removed when the engine stops listening.
    Unix(UnixListener, crate::net::SocketFile),
    Udp(UdpSocket),
    /// No longer listening (shutting down); kept so that indices stay valid.
    Closed,
}

pub(crate) struct Listener {
    pub(crate) endpoint: Endpoint,
    pub(crate) sock: ListenSock,
    /// What its connections are served over: TLS for `tls://` (and `wss://`), else plain.
    pub(crate) transport: crate::net::Acceptor,
    /// UDP: registered peers by address.
    udp_peers: HashMap<SocketAddr, usize>,
    /// UDP: clients whose datagrams wait for the socket to take more.
    udp_blocked: VecDeque<ClientId>,
}

impl Endpoint {
    /// The transport, as the msg protocol's rules name it (`from=tls`...). `quic://`, which
    /// the engine does not serve, is UDP underneath.
    pub fn transport(&self) -> Transport {
        match self.address {
            Addr::Tcp(_) if self.tls.is_some() => Transport::Tls,
            Addr::Tcp(_) => Transport::Tcp,
            Addr::Unix(_) => Transport::Unix,
            Addr::Udp(_) => Transport::Udp,
        }
    }
}

impl Listener {
    pub(crate) fn new(endpoint: Endpoint, sock: ListenSock) -> Listener {
        Listener {
            transport: crate::net::Acceptor::Plain,
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
    pub(crate) config: EngineConfig,
    wheel: Wheel,
    pool: BufPool,
    /// The `Date` of WebSocket handshake answers, formatted once a second.
    date: crate::rt::DateCache,
    scratch: Vec<u8>,
    pub(crate) now: Instant,
    /// Clients whose output to try writing.
    dirty: Vec<ClientId>,
    /// Paused clients to read again.
    resumed: Vec<ClientId>,
    /// Bytes of the messages being received whole that count against `max_held_total`.
    held_used: u64,
    /// Clients waiting, in order, for the held budget to take their message.
    held_waiters: VecDeque<ClientId>,
    /// Large buffers written out, kept (within the held budget) for the next held messages:
    /// fresh memory costs a page fault and a zeroed page per 4 KiB, most of a large message's
    /// cost otherwise.
    held_pool: Vec<Vec<u8>>,
    /// The capacity of the pooled buffers.
    pool_bytes: u64,
    notes: VecDeque<Note>,
    /// The client whose input is being delivered.
    source: Option<ClientId>,
    /// Largest message new clients may send: `max_streamed` when the application takes
    /// pieces, `max_message` when it takes whole messages (set by the engine per turn).
    pub(crate) limit: u64,
    pub(crate) stats: Arc<MsgStats>,
    /// A shutdown has begun: clients are read only to finish the message they are sending.
    pub(super) stopping: bool,
    /// No client of this engine is in the middle of a message any more (while stopping).
    quiet: bool,
    /// Every stream client has been ended with the `shutdown` frame.
    ended_all: bool,
    /// Connections accepted on framed stream listeners wait for [`Core::decide_framing`] (framed or
    /// raw) instead of starting their handshake (see `decide_framing`).
    pub(crate) deciding: bool,
    /// The unread messages of clients that left during this round of the polling API (a
    /// client that sends its last message and closes is reported readable and gone at once):
    /// taken by [`Core::take_inbox`], dropped when the next round begins.
    pub(crate) left_inboxes: Vec<(ClientId, VecDeque<Vec<u8>>)>,
    /// Connections accepted while deciding, not yet handed to the application.
    pub(crate) undecided: Vec<ClientId>,
}

impl Core {
    pub(crate) fn new(registry: Registry, config: EngineConfig, stats: Arc<MsgStats>) -> Core {
        let now = Instant::now();
        Core {
            registry,
            listeners: Vec::new(),
            clients: Slab::with_capacity(config.sizing.capacity.min(1024)),
            next_gen: 1,
            thread: 0,
            directory: Arc::default(),
            mail: None,
            outbox: VecDeque::new(),
            outbox_waiters: Vec::new(),
            wheel: Wheel::new(
                Duration::from_millis(100),
                1024,
                config.sizing.capacity,
                now,
            ),
            pool: BufPool::new(config.sizing.buffer_size, 64, 4),
            date: crate::rt::DateCache::default(),
            scratch: Vec::with_capacity(MAX_DATAGRAM + 1),
            now,
            dirty: Vec::new(),
            resumed: Vec::new(),
            held_used: 0,
            held_waiters: VecDeque::new(),
            held_pool: Vec::new(),
            pool_bytes: 0,
            notes: VecDeque::new(),
            source: None,
            limit: config.max_message,
            stats,
            config,
            stopping: false,
            quiet: false,
            ended_all: false,
            deciding: false,
            undecided: Vec::new(),
            left_inboxes: Vec::new(),
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

    pub(super) fn get_mut(&mut self, id: ClientId) -> Option<&mut Client> {
        self.clients.get_mut(id.key()).filter(|c| c.gen == id.gen())
    }

    /// The admitted client registered under `name`.
    pub(crate) fn lookup(&self, name: &[u8]) -> Option<ClientId> {
        self.directory.lookup(name)
    }

    fn is_remote(&self, id: ClientId) -> bool {
        id.thread() != self.thread
    }

    /// How long until the next timer may fire, if anything is armed or lingering.
    pub(crate) fn timer_due(&self) -> Option<Duration> {
        if !self.resumed.is_empty() {
            // Readers left over by `settle`'s budget.
            return Some(Duration::ZERO);
        }
        if !self.outbox.is_empty() {
            // Another engine's mailbox was full: try again soon.
            return Some(Duration::from_millis(1));
        }
        (!self.clients.is_empty()).then(|| self.wheel.resolution())
    }

    /// Runs `f` on an open client's queue, then applies backpressure. `false`: no such client,
    /// or it is no longer open.
    /// `stream`: the call feeds the open stream, so its source is judged by the ready bytes.
    pub(super) fn queue(
        &mut self,
        id: ClientId,
        stream: bool,
        f: impl FnOnce(&mut OutQueue, &mut Io),
    ) -> bool {
        if self.is_remote(id) {
            // Posts cross threads instead (see `send`, `open_stream`, `close`).
            return false;
        }
        let high = self.config.out_high;
        let Some(c) = self.get_mut(id) else {
            return false;
        };
        if c.phase != Phase::Open {
            return false;
        }
        f(&mut c.out, &mut c.io);
        c.owes_drain = true;
        let full = if stream {
            c.out.ready() > high
        } else {
            c.out.queued() > high
        };
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
        if !self.fits(id, msg.len()) {
            return false;
        }
        if self.is_remote(id) {
            return self.post_message(id, msg.to_vec());
        }
        self.queue(id, false, |q, _| q.push_message(msg))
    }

    pub(crate) fn send_owned(&mut self, id: ClientId, msg: Vec<u8>) -> bool {
        if !self.fits(id, msg.len()) {
            return false;
        }
        if self.is_remote(id) {
            return self.post_message(id, msg);
        }
        self.queue(id, false, |q, _| q.push_owned(msg))
    }

    /// [`Core::send`] of a message whose memory stays its owner's until written: a large one
    /// goes to a local client's queue as it is (another thread's gets a copy); a small one is
    /// copied into the queue's blocks at once, as any message is.
    pub(crate) fn send_shared<T>(&mut self, id: ClientId, msg: T) -> bool
    where
        T: AsRef<[u8]> + Send + 'static,
    {
        let bytes = msg.as_ref();
        if !self.fits(id, bytes.len()) {
            return false;
        }
        if self.is_remote(id) {
            return self.post_message(id, bytes.to_vec());
        }
        if bytes.len() < SHARE_FROM {
            return self.queue(id, false, |q, _| q.push_message(bytes));
        }
        let msg = Bytes::from_owner(msg);
        self.queue(id, false, |q, _| q.push_shared(msg))
    }

    /// Whether a message of `len` bytes can go to `id` at all (a datagram client's is bounded).
    fn fits(&self, id: ClientId, len: usize) -> bool {
        if len as u64 > id.max_message() {
            log::debug!("client {id}: a message of {len} bytes fits no datagram");
            return false;
        }
        true
    }

    /// Queues a sequence to be drawn lazily (local clients only: a sequence does not cross
    /// threads).
    pub(crate) fn send_messages<I>(&mut self, id: ClientId, messages: I) -> bool
    where
        I: IntoIterator,
        I::IntoIter: Send + 'static,
        I::Item: AsRef<[u8]>,
    {
        let producer: Box<dyn Produce> = Box::new(IterProducer(messages.into_iter()));
        self.queue(id, false, |q, _| q.push_lazy(producer))
    }

    /// Why a stream of `len` bytes to `id` may not be opened whatever its queue (issue 29):
    /// `Some(limit)` when the message being delivered is still arriving from another client
    /// and `id` takes streams from others only up to `limit` bytes (its rule's `streams=`; 0:
    /// none). Were it opened, that sender could stop halfway and leave `id` inside a frame,
    /// every later message to it waiting behind.
    pub(crate) fn stream_refusal(&self, id: ClientId, len: u64) -> Option<u64> {
        if self.is_remote(id) && !self.is_engine(id.thread()) {
            // Nothing streams to another node (see `cross`); the caller sends whole.
            return None;
        }
        let src = self.source.filter(|&s| s != id)?;
        if !self.get(src).is_some_and(|s| s.arriving) {
            // Whole at hand (held, or all in this read): it cannot stop halfway.
            return None;
        }
        let limit = match self.is_remote(id) {
            true => self
                .directory
                .name_of(id)
                .map_or(0, |n| self.config.policy.streams_to(n.as_bytes())),
            false => self
                .get(id)
                .and_then(|c| c.name.as_ref())
                .map_or(0, |n| self.config.policy.streams_to(n.as_bytes())),
        };
        (len > limit).then_some(limit)
    }

    /// Opens a streamed message to `id`; `false` if it is gone, already receiving one, or
    /// does not take this one ([`Core::stream_refusal`]).
    pub(crate) fn open_stream(&mut self, id: ClientId, len: u64) -> bool {
        if self.stream_refusal(id, len).is_some() {
            return false;
        }
        if self.is_remote(id) {
            return self.open_remote_stream(id, len);
        }
        // With several threads, a client of another may be about to stream to `id`.
        let slot = self.take_slot(id);
        if slot == Slot::Busy {
            return false;
        }
        let (mut opened, mut open) = (false, false);
        let known = self.queue(id, true, |q, _| {
            opened = q.open_stream(len);
            open = q.stream_open();
        });
        if slot == Slot::Taken {
            match known && opened && open {
                true => self.get_mut(id).expect("known").inbound = Inbound::Local,
                false => self.directory.free_stream(id),
            }
        }
        // Only a stream this call opened is fed by the source: when `id` is already receiving
        // another client's stream, the source is refused and feeds nothing (marking it would
        // let its stall or departure cut the other client's stream).
        if known && opened && open {
            self.note_feeding(Some(id));
        }
        known && opened
    }

    /// Records that the source feeds the stream open to `to` (`None`: no longer, it has
    /// ended): a feeder is resumed as soon as the queues it waits on have little *ready*.
    fn note_feeding(&mut self, to: Option<ClientId>) {
        if let Some(src) = self.source.and_then(|s| self.get_mut(s)) {
            src.feeding = to;
        }
    }

    /// More of the streamed message open to `id`. `false` if `id` is gone, or if the client
    /// being delivered no longer feeds a stream to `id` (its stream was cut: the bytes would
    /// land in whatever `id` receives next).
    pub(crate) fn stream_chunk(&mut self, id: ClientId, bytes: &[u8]) -> bool {
        if let Some(src) = self.source.and_then(|s| self.get(s)) {
            if src.feeding != Some(id) {
                return bytes.is_empty();
            }
        }
        if self.is_remote(id) {
            return self.remote_stream_chunk(id, bytes);
        }
        let mut ended = false;
        let known = self.queue(id, true, |q, io| {
            match io {
                // Big chunks try the socket first (one copy fewer); small ones are gathered
                // and written together at the end of the round.
                Io::Stream { stream, .. } if bytes.len() >= THROUGH_MIN => {
                    q.stream_chunk_through(stream, bytes);
                }
                _ => {
                    q.stream_chunk(bytes);
                }
            }
            ended = !q.stream_open();
        });
        if known && ended {
            self.note_feeding(None);
        }
        known
    }

    /// Closes `id` once its queued output is written. A client receiving a streamed message
    /// that will never be finished (its sender left) is closed at once instead: its stream
    /// cannot be resumed.
    pub(crate) fn close(&mut self, id: ClientId) {
        if self.is_remote(id) {
            self.post(Post::Close(id), id);
            return;
        }
        if self.get(id).is_some_and(|c| {
            matches!(
                c.io,
                Io::Stream {
                    proto: Proto::Undecided,
                    ..
                }
            )
        }) {
            // Refused before anything was said to it, or read from it.
            return self.remove(id);
        }
        if self.get(id).is_some_and(|c| c.phase == Phase::Open) {
            // It will not be read again: a message it streams to someone cannot be finished.
            self.cut_feed(id, "its connection is closing");
        }
        let Some(c) = self.get_mut(id) else { return };
        if c.phase == Phase::Open {
            c.phase = Phase::Closing;
            if c.out.stream_open() {
                c.out.clear();
                if let Inbound::Remote(from) = c.inbound {
                    // Its sender, on another thread, drops the rest and goes on.
                    self.send_post(Post::Gone { from, to: id }, from.thread());
                }
            }
            self.sync_slot(id);
            let Some(c) = self.get_mut(id) else { return };
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
            // Gone in this round with messages unread: they are still the application's.
            let at = self.left_inboxes.iter().position(|(gone, _)| *gone == id);
            return at.map_or_else(VecDeque::new, |i| self.left_inboxes.swap_remove(i).1);
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
        self.inbox_push_owned(id, msg.to_vec())
    }

    /// [`Core::inbox_push`] of a message already owned.
    pub(crate) fn inbox_push_owned(&mut self, id: ClientId, msg: Vec<u8>) -> bool {
        let high = self.config.inbox_high;
        let Some(c) = self.get_mut(id) else {
            return false;
        };
        let first = c.inbox.is_empty();
        let len = msg.len();
        c.inbox.push_back(msg);
        c.inbox_bytes += len;
        if c.inbox_bytes > high {
            c.paused = true;
        }
        first
    }

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
    ///
    /// Resumed clients are read at most [`RESUMED_PER_SETTLE`] times per call; the rest wait
    /// for the next turn (whose poll then does not block). A reader and writers that keep
    /// waking each other would otherwise keep the engine here, away from its poll, its timers
    /// and its stop flag, for as long as they have bytes (issue 12: a shutdown that came only
    /// after 40 MB had been relayed).
    pub(crate) fn settle(&mut self, sink: &mut dyn Sink) {
        let mut budget = RESUMED_PER_SETTLE;
        loop {
            if let Some(id) = self.dirty.pop() {
                self.flush(id);
            } else if let Some(note) = self.notes.pop_front() {
                sink.note(self, note);
            } else if let Some(id) = (budget > 0).then(|| self.resumed.pop()).flatten() {
                budget -= 1;
                self.pump(id, sink);
            } else if !self.exchange_mail() {
                return;
            }
        }
    }

    /// Registers a listener's socket with the poll.
    pub(crate) fn add_listener(&mut self, mut listener: Listener) -> io::Result<usize> {
        let index = self.listeners.len();
        let token = Token(LISTENERS + index);
        match &mut listener.sock {
            ListenSock::Tcp(l) => self.registry.register(l, token, Interest::READABLE)?,
            ListenSock::Unix(l, _) => self.registry.register(l, token, Interest::READABLE)?,
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
        c.name = Some(Name::from(label));
        self.stats.admitted();
        self.notes.push_back(Note::Connected(id, Arrival::Outbound));
        // Frames that came with the OK may already wait in the socket.
        self.resumed.push(id);
        Ok(id)
    }
}
