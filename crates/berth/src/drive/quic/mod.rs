//! HTTP/3 over QUIC in the event-loop model (issue 42): the driver between a UDP socket and
//! berth-proto's sans-IO HTTP/3 connection (`berth_proto::h3`), with QUIC itself done by
//! quinn-proto, as sans-IO as the HTTP/3 above it (datagrams and `now` in; datagrams, stream
//! bytes and a deadline out). This module owns what is between the two: which datagram goes
//! to which connection, QUIC stream bytes to and from HTTP/3, jobs, files and bodies for the
//! streams, timers and the drain. It reads no request and writes no answer itself: the one
//! exchange does, through `h3::Connection`.
//!
//! ```text
//!   UdpSocket (one per evloop or uring loop, SO_REUSEPORT)
//!     │ recv_from                                               send_to ^
//!     v                                                                 │
//!   endpoint::Endpoint ── quinn_proto::Endpoint (which connection, new ones, stateless replies)
//!     │ ConnectionEvent                                  poll_transmit  │
//!     v                                                                 │
//!   conn::Conn: quinn_proto::Connection ── stream bytes ──> h3::Connection::recv ─┐
//!        ^  writes, opens, resets, stops, close  <── h3::Quic (poll_quic)     │ process
//!        │                                                                        v
//!        └── Body::pull (drive/body.rs) <── Action::Pull      Action::Offload ──> workers (reply
//!            files.open                 <── Action::Open      back through our LoopQueue)
//! ```
//!
//! ```text
//!   socket    binding one UDP socket per loop on one port (SO_REUSEPORT), whose port is ours
//!   endpoint  a loop's QUIC endpoint: its socket, its connections, their deadlines, replies
//!   conn      one connection: QUIC streams <-> HTTP/3, the one place that acts on http::Action
//! ```
//!
//! **Steering.** Each loop of `evloop` (or `uring`) has its own UDP socket on the port; the kernel
//! picks a socket for each datagram by a hash of its 4-tuple (SO_REUSEPORT's default, no BPF
//! program), so every datagram of one client address and port reaches the same thread for as
//! long as the set of sockets is unchanged, which is the server's life (they are all bound at
//! startup and closed together). A connection therefore stays on the thread that accepted it.
//! What that costs: a client whose address changes (NAT rebinding, migration) lands on
//! another thread, which does not know its connection ID; migration is turned off
//! (`ServerConfig::migration(false)`) so that QUIC does not invite it, and such a client's
//! packets are answered with a stateless reset, after which it reconnects. Steering by
//! connection ID (a reuseport BPF program reading the CID we chose) would keep such a
//! connection; it needs a BPF loader, for a case that is rare and recovers by itself.
//!
//! **UDP I/O.** Through quinn-udp on mio's `UdpSocket` (no raw system calls here): each
//! connection's burst of datagrams goes out in one `sendmsg` with UDP GSO (as many as
//! `max_gso_segments`, one where the kernel has no GSO), reads take GRO batches apart, the
//! socket sets don't-fragment so that quinn-proto's MTU discovery may run (up to 1,452 bytes a
//! packet instead of 1,200), and a datagram's destination address (IP_PKTINFO) is answered
//! from. Before it, issue 42's 1 MiB benchmark sent one `sendto` per 1,200-byte packet, ~900
//! a MiB, and served caddy's requests/s at 0.75-0.94x (BENCHMARKS.md, HTTP/3). A burst stays
//! within one UDP send's 65,507 bytes ([`gso_batch`]), and the sockets ask for 4 MiB buffers
//! (`net::size_quic_buffers`): a larger burst is refused whole and dropped, an overflowing
//! buffer drops too, and QUIC repairs either only at its loss timer (~25 ms).
//!
//! **Retry** ([`QuicLimits::retry`], `berth serve --quic-retry auto|on|off`): a new connection
//! proves its address first while handshakes pile up on a loop, always, or never; past
//! [`QuicLimits::max_handshakes`] new ones are refused. Beyond that, quinn-proto's own 3x
//! anti-amplification limit before validation. **Not yet**: 0-RTT (off: `TlsAcceptor::quic`
//! sets no early data).
//!
//! **Counts.** `/stats` has HTTP/3's beside HTTP/2's: connections as they open and end
//! (`Stats::http3_opened`, `Stats::http3_ended`, from `endpoint`), and each connection's
//! `h3::Counts` added as QUIC lets it go (or as the server stops with it open).

mod conn;
mod endpoint;
mod socket;

pub(super) use endpoint::{Endpoint, Shared};
pub(super) use socket::bind_sockets;
pub use socket::{gso_batch, QuicSocket, Received};

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::http::{Context, Handler, Limits};
use crossbeam_channel::Sender;

use super::loops::State;
use super::workers::{LoopConn, Task};
use super::{Common, Timeouts};
use crate::files::Files;
use crate::net::tls::TlsAcceptor;
use crate::net::{Acceptor, Addr, BindError};
use crate::rt::DateCache;
use crate::stats::Stats;

/// Request streams a client may have open at once (QUIC's MAX_STREAMS for bidirectional
/// streams) by default: 128, HTTP/2's default here (`--http2-max-streams`) and nginx's
/// `http3_max_concurrent_streams`.
pub const MAX_CONCURRENT_REQUESTS: u32 = 128;

/// Unidirectional streams a client may open: its control stream and QPACK's two, which RFC 9114
/// §6.2 has a server allow, and room for a few of the reserved types clients send to keep
/// servers honest (§6.2.3), which are read and dropped.
const MAX_UNI_STREAMS: u32 = 8;

/// What one request stream may send before its bytes are taken (QUIC's stream receive
/// window): 256 KiB, so a request body never waits for a round trip on a fast link while the
/// connection window bounds the whole.
const STREAM_WINDOW: u32 = 256 * 1024;

/// What one connection may have received and not yet taken, over all its streams: 4 MiB, which
/// bounds a connection's request bytes in berth whatever its stream count.
const CONNECTION_WINDOW: u32 = 4 * 1024 * 1024;

/// Request streams advertised to a new connection before it uses them: quinn-proto makes its
/// stream tables up front for every stream a client may open (`StreamsState`, about 75 bytes
/// a stream), so a connection allowed [`QuicLimits::max_streams`] from the start holds ~9 KB
/// more while idle (BENCHMARKS, idle HTTP/3). The full limit is advertised once a client has
/// half of these open at once (`Conn::widen_streams`): a client that opens more than 16 in
/// its first flight waits one round trip for the rest.
pub const IDLE_STREAMS: u32 = 16;

/// QUIC's limits that are a server's choice, beside the timeouts: one value per listener,
/// the same on every loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicLimits {
    /// Request streams (bidirectional) a client may have open at once: QUIC's MAX_STREAMS,
    /// which the client's QUIC obeys; a client that opens one more anyway has its connection
    /// closed by QUIC (STREAM_LIMIT_ERROR). Default [`MAX_CONCURRENT_REQUESTS`].
    pub max_streams: u32,
    /// When new connections must prove their address first. Default [`Retry::Auto`].
    pub retry: Retry,
    /// Handshakes under way on a loop past which [`Retry::Auto`] retries. Default
    /// [`RETRY_AFTER`].
    pub retry_after: usize,
    /// Handshakes under way on a loop past which new connections are refused. Default
    /// [`MAX_HANDSHAKES`].
    pub max_handshakes: usize,
}

/// When a new connection is asked to prove its address with a Retry (RFC 9000 §8.1.2) before
/// the server keeps any state for it: a round trip more for the client, and a flood of
/// Initials from spoofed or throwaway addresses then costs the server one stateless answer
/// each instead of a connection held until its handshake times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Only while more handshakes than `QuicLimits::retry_after` are under way on the loop.
    Auto,
    /// Always.
    On,
    /// Never (handshakes past `QuicLimits::max_handshakes` are still refused).
    Off,
}

/// Handshakes under way on one loop past which `Retry::Auto` asks new clients to prove
/// their address: 64, far past what honest clients begin in one handshake time.
pub const RETRY_AFTER: usize = 64;

/// Handshakes under way on one loop past which new connections are refused
/// (CONNECTION_REFUSED), validated or not: 1,024 (each holds a TLS handshake's state, some
/// tens of KiB, until it completes or `Timeouts::header` passes).
pub const MAX_HANDSHAKES: usize = 1024;

impl Default for QuicLimits {
    fn default() -> Self {
        QuicLimits {
            max_streams: MAX_CONCURRENT_REQUESTS,
            retry: Retry::Auto,
            retry_after: RETRY_AFTER,
            max_handshakes: MAX_HANDSHAKES,
        }
    }
}

/// What every loop's endpoint of one listener shares, for the TLS `tls` serves, with these
/// timeouts and limits (`evloop::Config::quic`: `berth serve --http3-max-streams`,
/// `--quic-retry`).
pub(super) fn shared(tls: TlsAcceptor, t: &Timeouts, limits: &QuicLimits) -> Arc<Shared> {
    Shared::with_limits(tls, transport_config_with(t, limits), *limits)
}

/// The UDP sockets of a loop model's HTTP/3 (a `quic://` listener's, or a TLS listener's
/// twin's: `--http3`), one per loop, by `Wiring::owner`, and what their QUIC endpoints share.
/// `evloop` and `uring` both serve from it, each loop taking its own socket as it starts.
pub(in crate::drive) struct Twin {
    shared: Arc<Shared>,
    sockets: std::sync::Mutex<Vec<Option<std::net::UdpSocket>>>,
}

impl std::fmt::Debug for Twin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Twin")
    }
}

impl Twin {
    fn new(shared: Arc<Shared>, sockets: Vec<std::net::UdpSocket>) -> Arc<Twin> {
        Arc::new(Twin {
            shared,
            sockets: std::sync::Mutex::new(sockets.into_iter().map(Some).collect()),
        })
    }

    /// Loop `owner`'s socket (once), with what its endpoint shares with the others.
    pub fn take(&self, owner: usize) -> Option<(std::net::UdpSocket, Arc<Shared>)> {
        let mut sockets = self.sockets.lock().unwrap_or_else(|e| e.into_inner());
        let socket = sockets.get_mut(owner).and_then(Option::take)?;
        Some((socket, self.shared.clone()))
    }

    /// A `quic://` listener on `udp` for `common.accept_threads` loops: its sockets and the
    /// address bound. TLS comes from the listener's transport, which must be
    /// [`Acceptor::Tls`] (QUIC has TLS inside).
    pub fn listen(
        udp: std::net::SocketAddr,
        common: &Common,
        limits: &QuicLimits,
    ) -> Result<(Arc<Twin>, std::net::SocketAddr), BindError> {
        let Acceptor::Tls(tls) = &common.listen.transport else {
            return Err(BindError {
                addr: Addr::Udp(udp),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "QUIC needs a certificate (quic://HOST:PORT?cert=FILE&key=FILE)",
                ),
            });
        };
        let (sockets, bound) = bind_sockets(udp, common.accept_threads, &common.listen)?;
        let shared = shared(tls.clone(), &common.timeouts, limits);
        Ok((Twin::new(shared, sockets), bound))
    }

    /// The UDP twin of a TLS listener bound at `bound` over TCP, for its `count` loops (the
    /// same port and certificate); `None` unless it is TLS over TCP. With `alt_svc`,
    /// `transport` becomes one that advertises the twin (`Alt-Svc`) in its answers.
    pub fn of_tls(
        bound: &Addr,
        count: usize,
        common: &Common,
        limits: &QuicLimits,
        alt_svc: bool,
        transport: &mut Acceptor,
    ) -> Result<Option<Arc<Twin>>, BindError> {
        let (Acceptor::Tls(tls), Addr::Tcp(tcp)) = (&common.listen.transport, bound) else {
            return Ok(None);
        };
        let (sockets, _) = bind_sockets(*tcp, count, &common.listen)?;
        let shared = shared(tls.clone(), &common.timeouts, limits);
        if alt_svc {
            // Made once for the listener; its connections share it (`Transport::alt_svc`).
            let alt_svc = crate::net::tls::h3_alt_svc(tcp.port());
            *transport = Acceptor::Tls(tls.advertising(Some(alt_svc)));
        }
        Ok(Some(Twin::new(shared, sockets)))
    }
}

/// QUIC's transport settings for a server with these timeouts and limits: the idle timeout is
/// berth's keep-alive timeout (`Timeouts::idle`: a connection with no packet for that long is
/// gone, a client that vanished mid-stream included); the stream limits and windows above.
pub(super) fn transport_config_with(
    t: &Timeouts,
    limits: &QuicLimits,
) -> quinn_proto::TransportConfig {
    let mut config = quinn_proto::TransportConfig::default();
    let idle = quinn_proto::IdleTimeout::try_from(t.idle.max(Duration::from_millis(1))).unwrap_or(
        quinn_proto::IdleTimeout::from(quinn_proto::VarInt::from_u32(60_000)),
    );
    config
        .max_idle_timeout(Some(idle))
        .max_concurrent_bidi_streams(limits.max_streams.clamp(1, IDLE_STREAMS).into())
        .max_concurrent_uni_streams(MAX_UNI_STREAMS.into())
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(CONNECTION_WINDOW.into())
        // No unreliable datagrams: HTTP/3 here does not use them (RFC 9297 is not offered).
        .datagram_receive_buffer_size(None);
    config
}

/// What a connection is lent while it runs: the loop's handler, limits, files, date and the
/// way to the workers, borrowed from the loop's [`State`] (the `evloop` or `uring` thread's
/// own).
pub(super) struct Env<'a, H: Handler> {
    pub handler: &'a mut H,
    pub limits: &'a Limits,
    pub timeouts: &'a Timeouts,
    pub date: &'a DateCache,
    pub files: &'a Files,
    pub queue: Option<&'a Sender<Task<H::Job, LoopConn>>>,
    pub stats: &'a Arc<Stats>,
    /// The loop's stats shard.
    pub shard: usize,
    /// The time read once per loop turn.
    pub now: Instant,
}

impl<'a, H: Handler> Env<'a, H> {
    /// Borrows a loop's state for its QUIC endpoint.
    pub(in crate::drive) fn new(state: &'a mut State<H>, timeouts: &'a Timeouts) -> Self {
        Env {
            handler: &mut state.handler,
            limits: &state.limits,
            timeouts,
            date: &state.date,
            files: &state.files,
            queue: state.queue.as_ref(),
            stats: &state.stats,
            shard: state.id,
            now: state.now,
        }
    }

    /// What the HTTP/3 connection is given with each call (request bodies may stream to their
    /// jobs: the loop reads while jobs are out). Borrowed for `'a`, not from `self`, so that the
    /// handler can be lent beside it.
    fn cx(&self) -> Context<'a> {
        let (limits, date): (&'a Limits, &'a DateCache) = (self.limits, self.date);
        Context {
            limits,
            date: date.get(),
            stream_bodies: true,
            now: self.now,
            alt_svc: None,
        }
    }
}
