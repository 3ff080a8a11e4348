//! HTTP/3 from the client side over real QUIC: the one driver under `berth bench --h3` (a load
//! thread's share of the connections, each keeping `streams` requests in flight: h3load's and
//! h2load's closed loop) and under [`fetch`] (requests on one connection, answers whole, for
//! tests and tools).
//!
//! ```text
//!   mio UdpSocket ── quinn-udp (GSO out, GRO in) ── quinn_proto::Endpoint (client, no server)
//!        │ datagrams ──> ConnectionEvent ──> Link::quic ── stream bytes ──> h3 Client::recv
//!        │ <── poll_transmit <── stream writes, opens, resets <── h3::Quic orders (poll_quic)
//!   Driver::turn: poll (until QUIC's earliest timer or the caller's), read, expire, take in
//!   Driver::send_out: h3's orders to QUIC, what streams could not take, datagrams out
//! ```
//!
//! It mirrors the server's driver (`berth::drive::quic`: `endpoint.rs`, `conn.rs`) from the
//! other side: QUIC is quinn-proto's, HTTP/3 and QPACK are berth-proto's client role
//! (`h3::client`), so the load speaks the same QUIC implementation the server does and the
//! same HTTP/3 code reads both ends. A request stream is opened in QUIC first (within the
//! server's MAX_STREAMS) and only then asked of the client role, so the ids of the two agree;
//! a stream QUIC has no credit for waits for its `Available` event. Certificates are checked
//! against `--ca` when given, and not at all otherwise, as `berth bench https://` does
//! (`berth::net::tls::TlsConnector`); ALPN is `h3` alone.
//!
//! What counts as an error in the load: a non-2xx answer, a stream the server reset, a
//! connection closed with requests unanswered (read) or by our client role for the server's
//! protocol error (protocol), a handshake that failed or went unanswered for the timeout
//! (connect), and no answer within the timeout (timeout; QUIC's idle timeout included). A GOAWAY winds a connection down as HTTP/2's does:
//! the requests past it go back to the budget, and the connection is made again once its last
//! answer is in; a connection closed with H3_NO_ERROR and nothing owed is made again too.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth::drive::quic::QuicSocket;
pub use berth_proto::h3::client::Answer;
use berth_proto::h3::client::{Answers, Client, Event};
use berth_proto::h3::error::ErrorCode;
use berth_proto::h3::qpack::DecoderConfig;
use berth_proto::h3::Quic as Order;
use bytes::{Bytes, BytesMut};
use mio::{Events, Interest, Poll, Token};
use quinn_proto::{
    ClientConfig, ConnectionError, ConnectionHandle, DatagramEvent, Dir, EcnCodepoint, ReadError,
    StreamEvent, StreamId, VarInt, WriteError,
};
use slab::Slab;

use super::load::Shared;
use super::report::{Failure, Tally};
use crate::poll_loop::TICK;

/// Datagrams read in one turn before the connections they touched are served: a server that
/// sends faster than we read cannot keep the clock from moving (timers, timeouts).
const READ_PER_TURN: usize = 1024;

/// The client's QUIC transport: the server opens no request streams (bidirectional 0) and
/// only HTTP/3's three unidirectional ones (and perhaps a few reserved types), so a handful
/// is allowed; windows stay quinn's (1.25 MB a stream, the connection unbounded by them).
fn transport() -> quinn_proto::TransportConfig {
    let mut t = quinn_proto::TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(0))
        .max_concurrent_uni_streams(VarInt::from_u32(16))
        .datagram_receive_buffer_size(None);
    t
}

/// QUIC's client configuration: `--ca`'s trust (or none), ALPN `h3`, TLS 1.3 on ring.
pub(crate) fn client_config(ca: Option<&Path>) -> Result<ClientConfig, String> {
    let tls = berth::net::tls::TlsConnector::new(ca, &[b"h3"]).map_err(|e| format!("TLS: {e}"))?;
    let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls.rustls_config())
        .map_err(|e| format!("TLS for QUIC: {e}"))?;
    let mut config = ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(transport()));
    Ok(config)
}

fn stream_id(id: u64) -> StreamId {
    // Every id here came from QUIC or from the client role, which names only ids QUIC gave.
    StreamId::from(VarInt::from_u64(id).unwrap_or(VarInt::MAX))
}

fn varint(c: u64) -> VarInt {
    VarInt::from_u64(c).unwrap_or(VarInt::MAX)
}

/// Bytes the client role asked to write on a stream that QUIC has not taken yet, then FIN.
#[derive(Default)]
struct Outbox {
    bytes: Vec<u8>,
    pos: usize,
    fin: bool,
}

/// Why a connection ended, as the caller counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// QUIC said so: the server closed it, it reset, or it timed out.
    Lost(ConnectionError),
    /// Our client role closed it for the server's protocol error, or QUIC refused a stream
    /// HTTP/3 needs.
    Protocol,
}

/// One QUIC connection with HTTP/3 on it.
pub(crate) struct Link {
    handle: ConnectionHandle,
    quic: quinn_proto::Connection,
    /// The client role: requests out, answers in as events.
    pub h3: Client,
    outbox: HashMap<u64, Outbox>,
    readable: BTreeSet<u64>,
    /// The handshake is done (HTTP/3 may begin).
    pub connected: bool,
    /// QUIC may have credit for another request stream (it said so, or the handshake is done).
    pub available: bool,
    /// How it ended, once it did; it stays (closing, draining) until QUIC is done with it.
    pub ended: Option<End>,
    /// The caller's connection it serves; `None` once the caller let it go (it closes).
    owner: Option<usize>,
}

impl Link {
    /// Opens the next request stream in QUIC and sends the request on it; `None` if the
    /// server's MAX_STREAMS has no room now (wait for [`Link::available`]).
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        fields: &[(&str, &[u8])],
        body: &[u8],
    ) -> Option<u64> {
        if !self.connected || self.ended.is_some() {
            return None;
        }
        let Some(id) = self.quic.streams().open(Dir::Bi) else {
            self.available = false;
            return None;
        };
        let id = u64::from(id);
        let asked = self.h3.request(method, path, fields, body, true);
        if asked != id {
            // Both count request streams from 0 by 4 and only QUIC's opens reach the role, so
            // this is a bug here: end the connection rather than answer the wrong stream.
            log::error!("HTTP/3 stream {asked} is QUIC's {id}: the connection is closed");
            self.ended = Some(End::Protocol);
            return None;
        }
        Some(id)
    }
}

/// One thread's QUIC client endpoint on one UDP socket, and its connections.
pub(crate) struct Driver {
    poll: Poll,
    events: Events,
    /// The UDP socket, as the server's endpoints have theirs (GSO, GRO, a full socket's send
    /// kept for when it has room).
    socket: QuicSocket,
    endpoint: quinn_proto::Endpoint,
    config: ClientConfig,
    links: Slab<Link>,
    by_handle: HashMap<ConnectionHandle, usize>,
    send_buf: Vec<u8>,
    /// Links with more to send once the socket has room.
    unsent: BTreeSet<usize>,
    /// The socket was not drained last turn: read on without waiting for readiness.
    more_to_read: bool,
    /// UDP payload bytes received, for the report's transfer line.
    pub received: u64,
}

impl Driver {
    /// A client endpoint on a fresh UDP socket of `remote`'s address family.
    pub fn new(remote: SocketAddr, config: ClientConfig) -> io::Result<Driver> {
        let any: SocketAddr = if remote.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = std::net::UdpSocket::bind(any)?;
        socket.set_nonblocking(true)?;
        let mut socket = QuicSocket::new(socket)?;
        // MTU discovery only where the kernel sets don't-fragment (as the server's endpoint).
        let endpoint = quinn_proto::Endpoint::new(
            Arc::new(quinn_proto::EndpointConfig::default()),
            None,
            !socket.may_fragment(),
            None,
        );
        let poll = Poll::new()?;
        poll.registry().register(
            socket.source(),
            Token(0),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        Ok(Driver {
            poll,
            events: Events::with_capacity(64),
            socket,
            endpoint,
            config,
            links: Slab::new(),
            by_handle: HashMap::new(),
            send_buf: Vec::new(),
            unsent: BTreeSet::new(),
            more_to_read: false,
            received: 0,
        })
    }

    /// Starts a connection to `remote` for the caller's connection `owner`, its requests for
    /// `authority`; the link's key. Its first datagrams go out with [`Driver::send_out`].
    pub fn connect(
        &mut self,
        owner: usize,
        remote: SocketAddr,
        server_name: &str,
        authority: &str,
        now: Instant,
    ) -> Result<usize, String> {
        let (handle, quic) = self
            .endpoint
            .connect(now, self.config.clone(), remote, server_name)
            .map_err(|e| e.to_string())?;
        let mut h3 = Client::new(DecoderConfig::default());
        h3.set_origin("https", authority);
        let key = self.links.insert(Link {
            handle,
            quic,
            h3,
            outbox: HashMap::new(),
            readable: BTreeSet::new(),
            connected: false,
            available: false,
            ended: None,
            owner: Some(owner),
        });
        self.by_handle.insert(handle, key);
        Ok(key)
    }

    /// The link of `key`, if it is still there.
    pub fn link(&mut self, key: usize) -> Option<&mut Link> {
        self.links.get_mut(key)
    }

    /// The caller is done with `key`: it is closed (H3_NO_ERROR), and dropped once QUIC has
    /// said so to the server.
    pub fn let_go(&mut self, key: usize, now: Instant) {
        let Some(link) = self.links.get_mut(key) else {
            return;
        };
        link.owner = None;
        if !link.quic.is_closed() {
            let code = varint(ErrorCode::H3_NO_ERROR.0);
            link.quic.close(now, code, Bytes::new());
        }
        self.send_out(key, now);
    }

    /// One turn: waits for datagrams until `until` or QUIC's earliest timer, reads them, runs
    /// the timers due, and takes in what the touched links heard. Returns the keys of the
    /// touched links that have an owner (each then wants [`Driver::send_out`] once the
    /// caller has acted on its events); ownerless ones are served here.
    pub fn turn(&mut self, until: Instant) -> io::Result<Vec<usize>> {
        let now = Instant::now();
        let timer = self
            .links
            .iter_mut()
            .filter_map(|(_, l)| l.quic.poll_timeout())
            .min();
        let wake = timer.map_or(until, |t| t.min(until));
        let wait = if self.more_to_read {
            Duration::ZERO
        } else {
            wake.saturating_duration_since(now)
        };
        match self.poll.poll(&mut self.events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        let (mut readable, mut writable) = (self.more_to_read, false);
        for ev in self.events.iter() {
            readable |= ev.is_readable() || ev.is_error();
            writable |= ev.is_writable();
        }
        let mut touched = BTreeSet::new();
        let now = Instant::now();
        if writable {
            self.send_unsent(now);
        }
        if readable {
            self.receive(now, &mut touched);
        }
        for (key, link) in self.links.iter_mut() {
            if link.quic.poll_timeout().is_some_and(|t| t <= now) {
                link.quic.handle_timeout(now);
                touched.insert(key);
            }
        }
        let mut owned = Vec::with_capacity(touched.len());
        for key in touched {
            self.take_in(key);
            match self.links.get(key) {
                Some(link) if link.owner.is_some() => owned.push(key),
                Some(_) => self.send_out(key, now),
                None => {}
            }
        }
        Ok(owned)
    }

    /// Reads datagrams until the socket is drained or [`READ_PER_TURN`] were read.
    fn receive(&mut self, now: Instant, touched: &mut BTreeSet<usize>) {
        self.more_to_read = false;
        let mut read = 0;
        while read < READ_PER_TURN {
            match self.socket.recv() {
                Ok(Some(r)) => {
                    self.received += r.bytes() as u64;
                    for at in r.datagrams() {
                        self.datagram(at, r.from, r.local, r.ecn, now, touched);
                        read += 1;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    // An ICMP error from an earlier send (the server is not there yet, or
                    // any more): QUIC's timers decide what it means.
                    log::debug!("QUIC client: receive: {e}");
                    return;
                }
            }
        }
        self.more_to_read = true;
    }

    fn datagram(
        &mut self,
        at: std::ops::Range<usize>,
        from: SocketAddr,
        local: Option<IpAddr>,
        ecn: Option<EcnCodepoint>,
        now: Instant,
        touched: &mut BTreeSet<usize>,
    ) {
        let data = BytesMut::from(self.socket.datagram(at));
        let mut buf = std::mem::take(&mut self.send_buf);
        buf.clear();
        match self.endpoint.handle(now, from, local, ecn, data, &mut buf) {
            Some(DatagramEvent::ConnectionEvent(handle, event)) => {
                if let Some(&key) = self.by_handle.get(&handle) {
                    if let Some(link) = self.links.get_mut(key) {
                        link.quic.handle_event(event);
                        touched.insert(key);
                    }
                }
            }
            // A stateless reset for a connection we no longer know, and the like.
            Some(DatagramEvent::Response(t)) => {
                self.socket.send(&t, &buf[..t.size]);
            }
            // No server configuration: nothing may connect to us.
            Some(DatagramEvent::NewConnection(_)) | None => {}
        }
        self.send_buf = buf;
    }

    /// Takes QUIC's news for `key` and hands its stream bytes to the client role.
    fn take_in(&mut self, key: usize) {
        let Some(link) = self.links.get_mut(key) else {
            return;
        };
        while let Some(event) = link.quic.poll() {
            match event {
                quinn_proto::Event::Connected => {
                    link.connected = true;
                    link.available = true;
                }
                // The first reason stands (our own close comes before QUIC's word of it).
                quinn_proto::Event::ConnectionLost { reason } if link.ended.is_none() => {
                    link.ended = Some(End::Lost(reason));
                }
                quinn_proto::Event::Stream(StreamEvent::Opened { dir }) => {
                    while let Some(id) = link.quic.streams().accept(dir) {
                        link.readable.insert(id.into());
                    }
                }
                quinn_proto::Event::Stream(StreamEvent::Readable { id }) => {
                    link.readable.insert(id.into());
                }
                quinn_proto::Event::Stream(StreamEvent::Available { dir: Dir::Bi }) => {
                    link.available = true;
                }
                quinn_proto::Event::Stream(StreamEvent::Stopped { id, .. }) => {
                    // The server wants no more of the request; its answer may still come.
                    link.outbox.remove(&id.into());
                }
                _ => {}
            }
        }
        if !link.connected || link.ended.is_some() {
            return;
        }
        for id in std::mem::take(&mut link.readable) {
            let mut recv = link.quic.recv_stream(stream_id(id));
            let Ok(mut chunks) = recv.read(true) else {
                continue;
            };
            loop {
                match chunks.next(usize::MAX) {
                    Ok(Some(chunk)) => link.h3.recv(id, &chunk.bytes, false),
                    Ok(None) => {
                        link.h3.recv(id, &[], true);
                        break;
                    }
                    Err(ReadError::Blocked) => break,
                    Err(ReadError::Reset(code)) => {
                        link.h3.reset(id, code.into_inner());
                        break;
                    }
                }
            }
            // Flow-control credit goes out with the next datagram polled.
            let _ = chunks.finalize();
        }
        link.h3.process();
    }

    /// Carries out the client role's orders for `key`, writes what its streams can take, and
    /// sends its datagrams; drops it once QUIC is done with it.
    pub fn send_out(&mut self, key: usize, now: Instant) {
        let Some(link) = self.links.get_mut(key) else {
            return;
        };
        if link.connected && !link.quic.is_closed() {
            orders(link, now);
            let ids: Vec<u64> = link.outbox.keys().copied().collect();
            for id in ids {
                flush(link, id);
            }
        }
        if link.ended == Some(End::Protocol) && !link.quic.is_closed() {
            let code = varint(ErrorCode::H3_INTERNAL_ERROR.0);
            link.quic.close(now, code, Bytes::new());
        }
        let handle = link.handle;
        while let Some(event) = link.quic.poll_endpoint_events() {
            if let Some(event) = self.endpoint.handle_event(handle, event) {
                link.quic.handle_event(event);
            }
        }
        if !self.socket.transmit(&mut link.quic, now) {
            self.unsent.insert(key);
        }
        if link.quic.is_drained() {
            if let Some(link) = self.links.try_remove(key) {
                self.by_handle.remove(&link.handle);
            }
            self.unsent.remove(&key);
        }
    }

    /// The socket has room: what it refused, then the links that had more.
    fn send_unsent(&mut self, now: Instant) {
        if !self.socket.resend() {
            return;
        }
        while let Some(key) = self.unsent.pop_first() {
            self.send_out(key, now);
            if self.socket.is_blocked() {
                return;
            }
        }
    }

    /// Closes every link and sends the closes (the run is over).
    pub fn close_all(&mut self, now: Instant) {
        let keys: Vec<usize> = self.links.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.let_go(key, now);
        }
    }
}

/// Does what the client role asked of QUIC, in order.
fn orders(link: &mut Link, now: Instant) {
    while let Some(order) = link.h3.poll_quic() {
        match order {
            Order::Open { stream } => {
                let opened = link.quic.streams().open(Dir::Uni).map(u64::from);
                if opened != Some(stream) {
                    // RFC 9114 §6.2: a server must let a client open its control stream.
                    log::debug!("QUIC: the server allows no stream {stream} ({opened:?})");
                    link.ended = Some(End::Protocol);
                    let code = varint(ErrorCode::H3_STREAM_CREATION_ERROR.0);
                    link.quic.close(now, code, Bytes::new());
                    return;
                }
            }
            Order::Send { stream, bytes, fin } => {
                let out = link.outbox.entry(stream).or_default();
                if out.bytes.is_empty() {
                    out.bytes = bytes;
                } else {
                    out.bytes.extend_from_slice(&bytes);
                }
                out.fin |= fin;
            }
            Order::Reset { stream, code } => {
                link.outbox.remove(&stream);
                let _ = link
                    .quic
                    .send_stream(stream_id(stream))
                    .reset(varint(code.0));
            }
            Order::Stop { stream, code } => {
                let _ = link
                    .quic
                    .recv_stream(stream_id(stream))
                    .stop(varint(code.0));
            }
            Order::Close { code, reason } => {
                if link.ended.is_none() {
                    link.ended = Some(End::Protocol);
                }
                let reason = Bytes::from_static(reason.as_bytes());
                link.quic.close(now, varint(code.0), reason);
                return;
            }
        }
    }
}

/// Writes what waits for `stream` as far as QUIC takes it, then its FIN.
fn flush(link: &mut Link, stream: u64) {
    let Some(out) = link.outbox.get_mut(&stream) else {
        return;
    };
    let id = stream_id(stream);
    while out.pos < out.bytes.len() {
        match link.quic.send_stream(id).write(&out.bytes[out.pos..]) {
            Ok(n) => out.pos += n,
            Err(WriteError::Blocked) => return,
            Err(WriteError::Stopped(_) | WriteError::ClosedStream) => {
                link.outbox.remove(&stream);
                return;
            }
        }
    }
    if out.fin {
        let _ = link.quic.send_stream(id).finish();
    }
    link.outbox.remove(&stream);
}

/// What every connection of a run sends, and how.
pub(crate) struct Plan {
    /// Where to send (UDP).
    pub addr: SocketAddr,
    /// The name the certificate is checked against (SNI).
    pub server_name: String,
    /// QUIC's client configuration (TLS, ALPN `h3`, transport).
    pub config: ClientConfig,
    /// Streams kept in flight per connection (fewer while the server's MAX_STREAMS allows
    /// fewer).
    pub streams: usize,
    /// `:method`, `:authority` and `:path`.
    pub method: String,
    pub authority: String,
    pub path: String,
    /// The regular fields, lowercase.
    pub fields: Vec<(String, String)>,
    /// The request's body (none: HEADERS and FIN).
    pub body: Vec<u8>,
    /// Longest wait for an answer (or a handshake).
    pub timeout: Duration,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "h3::Plan({} {})", self.addr, self.path)
    }
}

impl Plan {
    /// The plan for `request` to `target` with `streams` in flight per connection.
    pub fn new(
        target: &super::Target,
        request: &super::RequestSpec,
        streams: usize,
        ca: Option<&Path>,
        timeout: Duration,
    ) -> Result<Plan, String> {
        let server_name = target
            .tls_host
            .clone()
            .ok_or("HTTP/3 needs an https:// URL")?;
        let mut fields = request.fields(target);
        let mut pseudo = |name: &str| {
            let at = fields.iter().position(|(n, _)| n == name);
            at.map(|at| fields.remove(at).1).unwrap_or_default()
        };
        let (method, authority, path) = (pseudo(":method"), pseudo(":authority"), pseudo(":path"));
        pseudo(":scheme");
        Ok(Plan {
            addr: target.addr,
            server_name,
            config: client_config(ca)?,
            streams,
            method,
            authority,
            path,
            fields,
            body: request.body.clone(),
            timeout,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No link: waiting for `retry_at`, or for nothing when the budget is spent.
    Idle,
    /// The handshake is under way.
    Connecting,
    /// Streams open as answers complete.
    Open,
    /// No new stream (a GOAWAY came): made again once the streams in flight are answered.
    Draining,
}

/// A request in flight.
struct Inflight {
    began: Instant,
    /// Final status, once its head came (0 before).
    status: u16,
}

struct Conn {
    /// The driver's link.
    link: Option<usize>,
    state: State,
    inflight: HashMap<u64, Inflight>,
    /// Requests taken from the budget at the connect, for the first streams.
    reserved: usize,
    /// The connect's start, for its timeout.
    began: Instant,
    retry_at: Option<Instant>,
}

struct Loop<'a> {
    plan: &'a Plan,
    shared: &'a Shared,
    driver: Driver,
    conns: Vec<Conn>,
    tally: Tally,
    published: (u64, u64),
}

/// Runs `connections` HTTP/3 connections on one UDP socket until `shared.stop` is set or the
/// budget is spent.
pub(crate) fn run(plan: &Plan, shared: &Shared, connections: usize) -> io::Result<Tally> {
    let now = Instant::now();
    let mut lp = Loop {
        plan,
        shared,
        driver: Driver::new(plan.addr, plan.config.clone())?,
        conns: (0..connections)
            .map(|_| Conn {
                link: None,
                state: State::Idle,
                inflight: HashMap::new(),
                reserved: 0,
                began: now,
                retry_at: Some(now),
            })
            .collect(),
        tally: Tally::default(),
        published: (0, 0),
    };
    let mut next_tick = now;
    loop {
        let now = Instant::now();
        if now >= next_tick {
            lp.tick(now);
            lp.tally.bytes = lp.driver.received;
            lp.shared.publish(&lp.tally, &mut lp.published);
            next_tick = now + TICK;
        }
        let bounded_done = shared.budget.is_bounded()
            && lp
                .conns
                .iter()
                .all(|c| c.state == State::Idle && c.retry_at.is_none());
        if shared.stop.load(Relaxed) || bounded_done {
            break;
        }
        for key in lp.driver.turn(next_tick)? {
            lp.serve(key, Instant::now());
        }
    }
    // The closes go out, so the server frees the connections at once rather than at its
    // idle timeout.
    lp.driver.close_all(Instant::now());
    lp.tally.bytes = lp.driver.received;
    lp.shared.publish(&lp.tally, &mut lp.published);
    Ok(lp.tally)
}

impl Loop<'_> {
    /// Timeouts, and connections due to be made.
    fn tick(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            let late = match c.state {
                State::Idle => {
                    if c.retry_at.is_some_and(|t| t <= now) {
                        self.open(i, now);
                    }
                    false
                }
                State::Connecting => now.duration_since(c.began) >= self.plan.timeout,
                State::Open | State::Draining => c
                    .inflight
                    .values()
                    .any(|s| now.duration_since(s.began) >= self.plan.timeout),
            };
            if late {
                // A handshake nobody answers is a connection not made (UDP has no refusal
                // to hear, only silence); an answer not in time is a timeout.
                let why = match self.conns[i].state {
                    State::Connecting => Failure::Connect,
                    _ => Failure::Timeout,
                };
                self.fail(i, why, now);
            }
        }
    }

    /// Starts a connection, if the budget has a request for it.
    fn open(&mut self, i: usize, now: Instant) {
        self.conns[i].retry_at = None;
        // As the other loops do: requests are taken before connecting, so a count-bounded run
        // opens no connection it has nothing to send on.
        let reserved = self.shared.budget.take(self.plan.streams as u64) as usize;
        if reserved == 0 {
            return;
        }
        let p = self.plan;
        self.conns[i].reserved = reserved;
        match self
            .driver
            .connect(i, p.addr, &p.server_name, &p.authority, now)
        {
            Ok(key) => {
                let c = &mut self.conns[i];
                c.link = Some(key);
                c.state = State::Connecting;
                c.began = now;
                c.inflight.clear();
                self.driver.send_out(key, now);
            }
            Err(e) => {
                log::debug!("QUIC connect: {e}");
                self.fail(i, Failure::Connect, now);
            }
        }
    }

    /// Acts on what link `key` heard, opens the streams there is room for, sends.
    fn serve(&mut self, key: usize, now: Instant) {
        let Some(i) = self.conns.iter().position(|c| c.link == Some(key)) else {
            self.driver.let_go(key, now);
            return;
        };
        let Some(link) = self.driver.link(key) else {
            return;
        };
        let connected = link.connected;
        if self.conns[i].state == State::Connecting && connected {
            self.tally.connects += 1;
            let c = &mut self.conns[i];
            c.state = State::Open;
            let reserved = std::mem::take(&mut c.reserved);
            self.start_streams(i, key, reserved, now);
        }
        if let Err(why) = self.events(i, key, now) {
            return self.fail(i, why, now);
        }
        if let Some(end) = self.driver.link(key).and_then(|l| l.ended.clone()) {
            return self.ended(i, end, now);
        }
        if self.conns[i].state == State::Open {
            self.refill(i, key, now);
        }
        if let Some(key) = self.conns[i].link {
            self.driver.send_out(key, now);
        }
    }

    /// Reads the client role's events for connection `i`.
    fn events(&mut self, i: usize, key: usize, now: Instant) -> Result<(), Failure> {
        while let Some(event) = self.driver.link(key).and_then(|l| l.h3.poll_event()) {
            let c = &mut self.conns[i];
            match event {
                Event::Head { stream, status, .. } => {
                    if let Some(s) = c.inflight.get_mut(&stream) {
                        s.status = status;
                    }
                }
                Event::End { stream } => {
                    if let Some(s) = c.inflight.remove(&stream) {
                        self.tally.response(s.status, now.duration_since(s.began));
                    }
                }
                Event::Reset { stream, .. } => {
                    if c.inflight.remove(&stream).is_some() {
                        self.tally.errors.reset += 1;
                    }
                }
                Event::GoAway(last) => {
                    // Requests at or past `last` were not and will not be served: they go
                    // back to the budget, for this connection made again or another.
                    let before = c.inflight.len();
                    c.inflight.retain(|&id, _| id < last);
                    let dropped = before - c.inflight.len();
                    self.shared.budget.give_back(dropped as u64);
                    c.state = State::Draining;
                }
                Event::Closed(_) => return Err(Failure::Protocol),
                Event::Data { .. } | Event::Trailers { .. } => {}
            }
        }
        let c = &self.conns[i];
        if c.state == State::Draining && c.inflight.is_empty() {
            self.reopen(i, now);
        }
        Ok(())
    }

    /// The link ended: made again if nothing was owed and the server closed it politely (or
    /// it idled out), else a failure of its kind.
    fn ended(&mut self, i: usize, end: End, now: Instant) {
        let c = &self.conns[i];
        let polite = match &end {
            End::Lost(ConnectionError::ApplicationClosed(close)) => {
                close.error_code == varint(ErrorCode::H3_NO_ERROR.0)
            }
            End::Lost(ConnectionError::TimedOut) => true,
            _ => false,
        };
        let why = match (&end, c.state) {
            (_, State::Connecting) => Failure::Connect,
            (End::Protocol, _) => Failure::Protocol,
            (End::Lost(ConnectionError::TimedOut), _) => Failure::Timeout,
            _ => Failure::Read,
        };
        if polite && c.state != State::Connecting && c.inflight.is_empty() {
            self.reopen(i, now);
        } else {
            self.fail(i, why, now);
        }
    }

    /// Opens up to `n` streams on connection `i`; those QUIC has no credit for go back to the
    /// budget (the next `Available` refills).
    fn start_streams(&mut self, i: usize, key: usize, n: usize, now: Instant) {
        let p = self.plan;
        let fields: Vec<(&str, &[u8])> = p
            .fields
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes()))
            .collect();
        let mut opened = 0;
        if let Some(link) = self.driver.link(key) {
            while opened < n {
                let Some(id) = link.request(&p.method, &p.path, &fields, &p.body) else {
                    break;
                };
                self.conns[i].inflight.insert(
                    id,
                    Inflight {
                        began: now,
                        status: 0,
                    },
                );
                opened += 1;
            }
        }
        self.shared.budget.give_back((n - opened) as u64);
    }

    /// Keeps the connection's share in flight while the budget lasts; closes it once nothing
    /// is in flight and nothing is left to send.
    fn refill(&mut self, i: usize, key: usize, now: Instant) {
        let available = self.driver.link(key).is_some_and(|l| l.available);
        let want = self
            .plan
            .streams
            .saturating_sub(self.conns[i].inflight.len());
        if want > 0 && available && !self.shared.stop.load(Relaxed) {
            let n = self.shared.budget.take(want as u64) as usize;
            self.start_streams(i, key, n, now);
        }
        let c = &self.conns[i];
        if c.inflight.is_empty() && c.state == State::Open && available {
            // Nothing in flight and nothing left to send: the run is over for this one.
            self.close(i, now);
        }
    }

    fn close(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        if let Some(key) = c.link.take() {
            self.driver.let_go(key, now);
        }
        c.state = State::Idle;
        c.inflight.clear();
        c.reserved = 0;
        c.retry_at = None;
    }

    fn reopen(&mut self, i: usize, now: Instant) {
        self.close(i, now);
        if !self.shared.stop.load(Relaxed) {
            self.open(i, now);
        }
    }

    fn fail(&mut self, i: usize, why: Failure, now: Instant) {
        let c = &self.conns[i];
        self.tally
            .failed(why, c.inflight.len() + c.reserved, &self.shared.budget);
        self.close(i, now);
        self.conns[i].retry_at = Some(why.retry_at(now));
        if why != Failure::Connect && !self.shared.stop.load(Relaxed) {
            self.open(i, now);
        }
    }
}

/// A request for [`fetch`].
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `:method`, e.g. `GET`.
    pub method: String,
    /// `:path`, e.g. `/hello/world`.
    pub path: String,
    /// Regular fields (lowercase names).
    pub fields: Vec<(String, String)>,
    /// The body, sent as one DATA frame (none if empty).
    pub body: Vec<u8>,
}

impl Request {
    /// A GET of `path`.
    pub fn get(path: &str) -> Request {
        Request {
            method: "GET".to_owned(),
            path: path.to_owned(),
            ..Request::default()
        }
    }
}

/// Sends `requests` as concurrent streams of one HTTP/3 connection to `addr` (as many at once
/// as the server's MAX_STREAMS allows, the rest as its credit comes) and returns the answers
/// in the same order. `server_name` is checked against the certificate when `ca` is given
/// (else nothing is checked) and is the requests' `:authority` with `addr`'s port. Fails if
/// the connection cannot be made, ends before every answer is in, or `within` passes.
pub fn fetch(
    addr: SocketAddr,
    server_name: &str,
    ca: Option<&Path>,
    requests: &[Request],
    within: Duration,
) -> io::Result<Vec<Answer>> {
    let config = client_config(ca).map_err(io::Error::other)?;
    let mut driver = Driver::new(addr, config)?;
    let start = Instant::now();
    let deadline = start + within;
    let authority = format!("{server_name}:{}", addr.port());
    let key = driver
        .connect(0, addr, server_name, &authority, start)
        .map_err(io::Error::other)?;
    driver.send_out(key, start);
    let mut answers = Answers::default();
    let mut by_stream: HashMap<u64, usize> = HashMap::new();
    let (mut sent, mut done) = (0, 0);
    while done < requests.len() {
        let now = Instant::now();
        if now >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{done} of {} answers within {within:?}", requests.len()),
            ));
        }
        let touched = driver.turn(deadline.min(now + TICK))?;
        if !touched.contains(&key) {
            continue;
        }
        let Some(link) = driver.link(key) else {
            return Err(io::Error::other("the connection is gone"));
        };
        let finished = answers.gather(&mut link.h3);
        done += finished
            .iter()
            .filter(|s| by_stream.contains_key(s))
            .count();
        if let Some(code) = answers.closed {
            return Err(io::Error::other(format!(
                "the server broke HTTP/3: closed with {code:?}"
            )));
        }
        if let Some(end) = &link.ended {
            if done < requests.len() {
                return Err(io::Error::other(format!(
                    "the connection ended with {done} of {} answers: {end:?}",
                    requests.len()
                )));
            }
        }
        while sent < requests.len() && link.available {
            let r = &requests[sent];
            let fields: Vec<(&str, &[u8])> = r
                .fields
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_bytes()))
                .collect();
            let Some(id) = link.request(&r.method, &r.path, &fields, &r.body) else {
                break;
            };
            by_stream.insert(id, sent);
            sent += 1;
        }
        driver.send_out(key, Instant::now());
    }
    driver.close_all(Instant::now());
    let mut in_order = vec![Answer::default(); requests.len()];
    for (stream, answer) in answers.by_stream {
        if let Some(&at) = by_stream.get(&stream) {
            in_order[at] = answer;
        }
    }
    Ok(in_order)
}
