//! One client as the engine holds it: its socket (or its UDP address), its protocol state, its
//! output queue and, for callers that read whole messages, its inbox.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::time::Instant;

use berth_proto::msg::{FrameDecoder, Name, Peer, ServerSession};

pub(crate) use crate::net::Stream;

use super::outq::OutQueue;

/// Largest message a UDP client can be sent: 65,507 bytes of UDP payload over IPv4, less the
/// kind byte (docs/msg-protocol.md §6).
pub const MAX_DATAGRAM_MESSAGE: usize = 65_506;

/// A client of the engine: a connection it accepted, a UDP peer, or a server it connected to.
/// Ids are never reused while the engine runs (a slot's generation changes when it is freed),
/// so a stale id finds nothing rather than someone else.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub(crate) u64);

impl ClientId {
    /// The generation's bits in a tag.
    pub(crate) const GEN_MASK: u32 = 0x7f_ffff;
    /// The tag bit of a UDP client: any engine thread can tell, from the id alone, that a
    /// message for it must fit one datagram.
    pub(crate) const DATAGRAM: u32 = 0x80_0000;

    /// `tag` is the slot's generation in its low 23 bits, [`ClientId::DATAGRAM`], and the
    /// engine's thread above them.
    pub(crate) fn new(key: usize, tag: u32) -> ClientId {
        ClientId((u64::from(tag) << 32) | key as u64)
    }
    pub(crate) fn key(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
    pub(crate) fn gen(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The engine thread that owns the client.
    pub(crate) fn thread(self) -> usize {
        (self.0 >> 56) as usize
    }
    /// Whether the client is a UDP peer.
    pub(crate) fn is_datagram(self) -> bool {
        self.gen() & Self::DATAGRAM != 0
    }
    /// The largest message this client can be sent: one datagram's payload for a UDP peer.
    pub fn max_message(self) -> u64 {
        match self.is_datagram() {
            true => MAX_DATAGRAM_MESSAGE as u64,
            false => u64::MAX,
        }
    }
}

impl ClientId {
    /// The id as a number, for a binding that hands ids to another language (Python).
    pub fn to_raw(self) -> u64 {
        self.0
    }

    /// An id from [`ClientId::to_raw`]. A number that was never an id, or whose client is
    /// gone, finds no client: every call taking it answers as for a departed client.
    pub fn from_raw(raw: u64) -> ClientId {
        ClientId(raw)
    }
}

impl fmt::Debug for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}.{}", self.key(), self.gen() & Self::GEN_MASK)
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// How a stream's bytes are understood.
pub(crate) enum Proto {
    /// A client of ours, speaking the framed protocol (keyword first).
    Server(ServerSession),
    /// A raw listener's client, or one decided raw: bytes as they come.
    Raw,
    /// Accepted while the application decides per connection (`Engine::deciding`): not read
    /// until it is decided framed ([`Proto::Server`]) or raw ([`Proto::Raw`]).
    Undecided,
    /// A server we connected to (client mode): frames, and control frames from it.
    Outbound(FrameDecoder),
    /// A WebSocket client (`ws://`): the opening handshake, then a message per WebSocket
    /// message, the first its keyword.
    Ws(Box<super::core::WsPeer>),
}

/// Where a client's bytes travel.
pub(crate) enum Io {
    Stream {
        stream: Stream,
        proto: Proto,
        /// Seen the peer's end of stream (or an error): nothing more will be read.
        hup: bool,
        /// The socket may have bytes to read.
        readable: bool,
    },
    Udp {
        /// The datagram listener (index) the client talks through.
        listener: usize,
        addr: SocketAddr,
    },
}

/// Where the client is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Connected, keyword not yet decided.
    Handshake,
    /// Admitted: messages flow.
    Open,
    /// To be closed once its output is written (refused, ended, or asked to).
    Closing,
    /// Output written and our side shut: reading and dropping until the peer closes (so that
    /// the last frame is not destroyed by a reset), or the linger time ends.
    Lingering,
}

/// A message received whole before the application sees it (see `core/hold.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hold {
    /// Its announced length.
    pub(crate) len: u64,
    /// Its bytes are counted against the engine's held budget. Until they are, the client is
    /// not read (it waits its turn for the budget).
    pub(crate) reserved: bool,
    /// The bytes it counts against the budget: its length, or the capacity of the pooled
    /// buffer it fills.
    pub(crate) charge: u64,
}

/// The engine's record of one client.
pub(crate) struct Client {
    pub(crate) gen: u32,
    pub(crate) io: Io,
    pub(crate) phase: Phase,
    /// It was admitted (so its end is reported).
    pub(crate) admitted: bool,
    /// When it is dropped for taking none of the output that waits on its reader
    /// (`write_timeout` after the last progress), while such output waits.
    pub(crate) write_due: Option<Instant>,
    /// While it is in the middle of a message: when its timer next looks at how long it has
    /// sent nothing (`read_timeout`, `stall_timeout`). Set when a message starts, never moved
    /// by a read: the timer, when it fires, reads `input_at` before it ends anyone.
    pub(crate) read_due: Option<Instant>,
    /// Its last read with bytes in the middle of a message (or when reading it resumed).
    pub(crate) input_at: Instant,
    /// When the current window of `--stall-timeout` over its message began, and the bytes it
    /// brought since: a message others wait on must bring `--stall-min-bytes` a window, or its
    /// sender is stalled however often it sends a byte (issue 40).
    pub(crate) window_at: Instant,
    pub(crate) window_bytes: u64,
    pub(crate) peer: Peer,
    /// The name it registered under (`None`: anonymous, raw, or not yet known); for a server
    /// we connected to, its endpoint.
    pub(crate) name: Option<Name>,
    /// Index of the listener it came through (`None`: a server we connected to).
    pub(crate) listener: Option<usize>,
    pub(crate) out: OutQueue,
    /// Whole messages read and not yet taken (polling API).
    pub(crate) inbox: VecDeque<Vec<u8>>,
    pub(crate) inbox_bytes: usize,
    /// The message being assembled, and its announced length.
    pub(crate) assembling: Vec<u8>,
    pub(crate) announced: u64,
    /// The message being received whole before the application sees it, if one is.
    pub(crate) hold: Option<Hold>,
    /// Held bytes delivered whose answer still fills a queue: given back to the budget when
    /// this client is no longer paused by that queue (see `core/hold.rs`).
    pub(crate) held_debt: u64,
    /// A control frame from the server we connected to is being read.
    pub(crate) in_control: bool,
    /// Why the server we connected to closed on us, if it said.
    pub(crate) ending: Option<String>,
    /// Reading is paused: a queue it feeds is full, or its inbox is.
    pub(crate) paused: bool,
    /// Clients paused until this one's output drains.
    pub(crate) waiters: Vec<ClientId>,
    /// The client this one's current message is streaming to, while that stream is open.
    pub(crate) feeding: Option<ClientId>,
    /// Its current message goes to the application in pieces as it arrives (it was neither
    /// held whole nor all in one read): a stream it opens to another client depends on its
    /// sending the rest (issue 29).
    pub(crate) arriving: bool,
    /// Output was queued since the last drained report.
    pub(crate) owes_drain: bool,
    /// Bytes posted to other engine threads on its behalf and not yet acknowledged (see
    /// `directory`).
    pub(crate) in_flight: u64,
    /// Reading is paused until enough of `in_flight` is acknowledged.
    pub(crate) awaiting_acks: bool,
    /// While `feeding` is a client of another thread: the bytes that stream still expects.
    pub(crate) feed_left: u64,
    /// The stream slot of this client (see `directory`) is held by this thread for a stream
    /// to it.
    pub(crate) inbound: Inbound,
    /// Senders on other threads whose bytes this client's queue took while over `out_high`:
    /// acknowledged once it drains.
    pub(crate) remote_waiters: Vec<RemoteWaiter>,
}

/// Who the stream slot of a client is held for, on the client's own thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inbound {
    /// Nobody (or the client has no slot: anonymous clients are reached from their thread
    /// only).
    None,
    /// A stream opened on this thread.
    Local,
    /// A stream fed by this client of another thread.
    Remote(ClientId),
}

/// Bytes owed back to a sender on another thread (see `directory::Credit`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteWaiter {
    pub(crate) credit: super::directory::Credit,
    pub(crate) bytes: u64,
    /// The bytes fed the open stream: owed back once the *ready* bytes drain (what waits
    /// behind that stream moves only when its sender goes on; see `core`).
    pub(crate) stream: bool,
}

impl Client {
    pub(crate) fn new(
        gen: u32,
        io: Io,
        peer: Peer,
        listener: Option<usize>,
        out: OutQueue,
    ) -> Self {
        Client {
            gen,
            io,
            phase: Phase::Handshake,
            admitted: false,
            write_due: None,
            read_due: None,
            input_at: Instant::now(),
            window_at: Instant::now(),
            window_bytes: 0,
            peer,
            name: None,
            listener,
            out,
            inbox: VecDeque::new(),
            inbox_bytes: 0,
            assembling: Vec::new(),
            announced: 0,
            hold: None,
            held_debt: 0,
            in_control: false,
            ending: None,
            paused: false,
            waiters: Vec::new(),
            feeding: None,
            arriving: false,
            owes_drain: false,
            in_flight: 0,
            awaiting_acks: false,
            feed_left: 0,
            inbound: Inbound::None,
            remote_waiters: Vec::new(),
        }
    }

    pub(crate) fn id(&self, key: usize) -> ClientId {
        ClientId::new(key, self.gen)
    }

    /// Its name as logs show it: escaped (any bytes may be a name), or `anonymous`.
    pub(crate) fn shown(&self) -> Shown<'_> {
        Shown(self.name.as_ref())
    }

    /// It has output only its reader can move: anything queued while it is closing, else
    /// bytes ready or a sequence to draw (a stream waiting for its sender's bytes is not).
    pub(crate) fn waits_on_reader(&self) -> bool {
        match self.phase {
            Phase::Open => self.out.has_output(),
            _ => !self.out.is_empty(),
        }
    }

    /// An open client has sent part of a message and not yet the rest, and may still send it.
    pub(crate) fn mid_message(&self) -> bool {
        match &self.io {
            Io::Stream { hup: false, .. } => self.inside_message(),
            _ => false,
        }
    }

    /// An open client has sent part of a message and not yet the rest (whether or not it can
    /// still send it).
    pub(crate) fn inside_message(&self) -> bool {
        match &self.io {
            Io::Stream {
                proto: Proto::Server(session),
                ..
            } => self.phase == Phase::Open && !session.at_boundary(),
            _ => false,
        }
    }
}

/// A client's name in a log line: its escaped form (docs/msg-protocol.md §2), which shows
/// every byte and holds no space or control character, or `anonymous`.
pub(crate) struct Shown<'a>(pub(crate) Option<&'a Name>);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(name) => fmt::Display::fmt(name, f),
            None => f.write_str("anonymous"),
        }
    }
}
