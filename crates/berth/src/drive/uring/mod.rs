//! `uring`: `evloop` on io_uring (issue 19). `-A` loop threads, each with its own
//! `SO_REUSEPORT` listener and its own ring; a connection stays on the thread that accepted it,
//! in a slab of `-C` slots; `-w` workers run slow jobs from one FIFO queue and post the reply
//! back to the owning loop, as in `evloop` (the same `workers` module and return addresses).
//!
//! ```text
//!  listener 0 ─ loop 0 (ring: multishot accept, multishot recv ─> provided buffers,
//!                       sends batched per turn; slab of C conns; wheel) ──┐ jobs ┌─ worker 0
//!  listener 1 ─ loop 1 (ring ...)                                       ──┼─────>├─ worker 1
//!      ...                        ^  replies + wake (mio Waker, polled by │ FIFO └─ ...
//!                                 └── the ring: multishot poll)  ─────────┘
//! ```
//!
//! What differs from `evloop` is only how the loop waits and moves bytes:
//! - One multishot accept per listener; one multishot receive per connection, into a ring of
//!   provided buffers shared by the loop's connections, so an idle connection holds no receive
//!   buffer (its received bytes are copied out of the provided buffer into a pooled one, which
//!   goes back to the pool once read).
//! - The pump reads and writes a [`UringStream`], user-space queues the ring fills and empties
//!   (see `stream`); sends are submitted at the end of each turn, together with every other
//!   submission, in the turn's one `io_uring_enter`, which also waits for the next completion
//!   or the next tick of the timing wheel.
//! - Workers wake the loop through a mio `Waker` (an eventfd in an epoll set of its own),
//!   whose epoll descriptor the ring polls (multishot): `workers` and `Control` stay as they
//!   are.
//! - Files go with `sendfile(2)` on the socket itself, once everything queued before them has
//!   been sent, as in `evloop`; when the socket is full the ring polls it for room (one-shot
//!   `POLLOUT`), and its completion pumps the connection again. Over TLS they are read and
//!   sent through the output buffer in bounded chunks. Why not the ring's own `splice`: from
//!   a regular file it cannot be done without blocking, so io_uring hands each one to its
//!   worker threads (io-wq), a thread hop per chunk where `sendfile` is one call.
//!
//! - HTTP/3 (a `quic://` listener, or `--http3`'s UDP twin of a TLS listener) is served as
//!   `evloop` serves it, by the same `quic::Endpoint`: each loop's UDP socket is registered in
//!   the mio poll that holds the waker, so the ring's poll of that epoll descriptor completes
//!   for a datagram too; the loop then asks the poll which it was and reads or sends on the
//!   socket itself (one datagram per system call, as `evloop`), and QUIC's next timer bounds
//!   the ring's wait. A `quic://` listener's loops have no TCP listener and arm no accept.
//!
//! A connection whose peer leaves while its job runs keeps its slot (marked dead) until the
//! job ends, as in `evloop`. A connection closed with bytes still unsent keeps its slot until
//! they are sent (or the write timeout passes), then closes.
//!
//! A connection's receive is armed with a byte limit (Linux 6.17's multishot receive limit):
//! one buffer at most is received ahead of what the session has read, and a peer that sends
//! and never reads costs one buffer (`flood_memory.rs`). Cancelling a multishot receive does not
//! stop one that a flood keeps busy, so on older kernels a paused connection may take up to the
//! provided buffers' bytes before the cancellation lands.
//!
//! Where io_uring cannot be set up (an old kernel, seccomp, `io_uring_disabled`), starting the
//! model fails with the cause (`sys::uring::Ring::new`); nothing falls back silently.

mod stream;

pub use stream::UringStream;

use std::io;

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::http::Handler;
use mio::{Events, Poll, Token};
use slab::Slab;

use super::accept;
use super::loops::{Lent, Loop, LoopConfig, Parts, Runs, State, ACCEPT_RETRY, REPLY_CHECK_EVERY};
use super::pump::Conn;
use super::quic::{self, Endpoint};
use super::{Server, Service};
use crate::net::{Addr, BindError, Listener, Stream};
use crate::rt::{Control, DRAIN_GRACE};
use crate::stats::Stats;
use crate::sys::uring::{Completion, Ring, RingConfig};
use stream::{Io, Spares};

/// The waker's token in the loop's mio poll.
const WAKER: Token = Token(0);
/// The UDP socket's token in the loop's mio poll (HTTP/3: a `quic://` listener's loops, or a
/// TLS listener's with [`Config::http3`]).
const QUIC: Token = Token(1);
/// Tags of the listener's accept and the waker's poll (their completions are of their own
/// kinds, so the tags need only differ from nothing).
const LISTENER_TAG: u64 = 0;
const WAKER_TAG: u64 = 0;

/// Settings of the `uring` model of its own; capacity, workers, limits, timeouts and buffer
/// sizes come from [`Common`](super::Common).
#[derive(Debug, Clone)]
pub struct Config {
    /// Submission queue entries of each loop's ring.
    pub ring_entries: u32,
    /// Provided receive buffers of each loop's ring (rounded up to a power of two, at most
    /// 32768), each of the common buffer size: shared by all of the loop's connections.
    pub recv_buffers: u32,
    /// On a TLS listener, also serve HTTP/3 on its UDP twin (the same port and certificate:
    /// `berth serve --http3`), from the same loops, as `evloop` does
    /// (`evloop::Config::http3`).
    pub http3: bool,
    /// With [`Config::http3`], answers over the TLS listener carry `Alt-Svc` naming the twin
    /// (`berth serve --alt-svc on|off`).
    pub alt_svc: bool,
    /// QUIC's limits for its HTTP/3 (a `quic://` listener's, or [`Config::http3`]'s twin's).
    pub quic: quic::QuicLimits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ring_entries: 1024,
            recv_buffers: 256,
            http3: false,
            alt_svc: true,
            quic: quic::QuicLimits::default(),
        }
    }
}

/// Spare buffers each loop keeps for reuse (as `evloop` keeps by default).
const POOLED_BUFFERS: usize = 256;

/// What a loop reads: the common settings and, of its own, its ring's and its UDP socket.
type Flat = LoopConfig<Own>;

/// The part of a loop's settings that is `uring`'s own.
#[derive(Debug, Clone)]
struct Own {
    ring: RingConfig,
    /// The UDP sockets of a TLS listener's HTTP/3 twin ([`Config::http3`]) or of a `quic://`
    /// listener, one per loop: each loop takes its own as it starts.
    twin: Option<Arc<quic::Twin>>,
}

/// A loop's settings, from the common ones and the model's own in one step.
fn loop_config(common: &super::Common, own: &Config) -> Flat {
    let buffers = own.recv_buffers.clamp(1, 32768).next_power_of_two();
    let ring = RingConfig {
        entries: own.ring_entries.clamp(8, 32768),
        buffers: u16::try_from(buffers).unwrap_or(32768),
        buffer_size: u32::try_from(common.sizing.buffer_size.clamp(512, 1 << 20)).unwrap_or(16384),
    };
    LoopConfig::new(common, POOLED_BUFFERS, 0, Own { ring, twin: None })
}

/// Most bytes a connection queues for sending before its writes would block.
fn tx_limit(config: &Flat) -> usize {
    (4 * config.sizing.buffer_size).max(64 * 1024)
}

/// Most received bytes a connection holds unread before its receive is paused; also the
/// byte limit of each receive it arms. One buffer: what `evloop` holds of a connection's
/// input in user space (the rest waits in the kernel's socket buffer, as it does here once
/// the receive is paused), so a peer that sends and never reads costs one buffer here (issue
/// 29: a ping flood cost megabytes per connection). Where the kernel limits receives
/// (`Ring::recv_multi`), nothing more is received than this.
fn rx_limit(config: &Flat) -> usize {
    config.sizing.buffer_size
}

/// Sets up an io_uring as the loops will, and drops it: whether the model can run here, with
/// the cause if not.
///
/// On a thread of its own: the kernel tears a ring down after its descriptor is closed and
/// then sends task work to every thread that used it, which interrupts a blocking call of that
/// thread (a socket read with a timeout fails with `EINTR`). The caller's thread must not be
/// one of them.
pub fn check(config: &Config, common: &super::Common) -> io::Result<()> {
    let ring = loop_config(common, config).own.ring;
    std::thread::scope(|s| {
        s.spawn(|| Ring::new(ring).map(drop))
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("setting up io_uring panicked")))
    })
}

/// Starts one loop per listener (TCP listeners should share a port through `SO_REUSEPORT`;
/// copies of one UNIX socket share its queue, the accept working on either family) and
/// `common.workers` workers. Returns once every loop has set up its ring, or the first
/// failure to (the others are stopped).
pub fn spawn<S: Service>(
    listeners: Vec<Listener>,
    service: S,
    common: &super::Common,
    config: &Config,
    stats: Arc<Stats>,
) -> io::Result<Server> {
    let config = loop_config(common, config);
    let listeners = listeners.into_iter().map(Some).collect();
    super::loops::spawn::<S, UringLoop<S::Handler>>(listeners, service, common, config, WAKER, stats)
}

/// One connection of a loop: what the pump serves. Its queues and the state of its
/// operations in the ring live in its transport ([`Io`]), packed, so that a slot is no bigger
/// than an `evloop` one.
struct Slot {
    conn: Conn<Stream<UringStream>>,
}

impl Slot {
    fn io(&mut self) -> &mut Io {
        Io::of(&mut self.conn.stream)
    }

    fn io_ref(&self) -> &Io {
        Io::of_ref(&self.conn.stream)
    }

    /// The tag of this connection's current receive.
    fn recv_tag(&self, key: usize) -> u64 {
        let io = self.io_ref();
        tag(key, io.incarnation, io.arm)
    }
}

/// `key`, `incarnation` and receive arming as one ring tag.
fn tag(key: usize, incarnation: u16, arm: u8) -> u64 {
    key as u64 | u64::from(incarnation) << 32 | u64::from(arm) << 48
}

/// The parts of a tag.
fn untag(tag: u64) -> (usize, u16, u8) {
    (
        (tag & 0xffff_ffff) as usize,
        (tag >> 32) as u16,
        (tag >> 48) as u8,
    )
}

struct UringLoop<H: Handler> {
    /// The handler, buffers, deadlines and return addresses (see `loops`).
    state: State<H>,
    ring: Ring,
    /// Holds the waker and the UDP socket of HTTP/3, if any: its epoll descriptor is readable
    /// after a wake or a datagram, which the ring polls.
    poll: Poll,
    events: Events,
    /// `None` once a drain has closed it, or from the start in a `quic://` listener's loop.
    listener: Option<Listener>,
    /// The QUIC endpoint of HTTP/3 (a `quic://` listener's or a TLS listener's twin), on this
    /// loop's UDP socket.
    quic: Option<Endpoint>,
    /// The accept failed (out of descriptors, say): arm it again at this time.
    accept_retry: Option<Instant>,
    /// A drain is under way, until when a connection not yet answered may still bring its
    /// request ([`DRAIN_GRACE`], as `evloop`'s). `None`: serving.
    draining: Option<Instant>,
    slots: Slab<Slot>,
    /// Per slot key: the incarnation of its next connection.
    incarnations: Vec<u16>,
    /// Keys with bytes to send, submitted at the end of the turn.
    to_send: Vec<usize>,
    /// Queues of connections gone idle, for the next to get busy.
    spares: Spares,
    ctl: Arc<Control>,
    config: Flat,
}

impl<H: Handler> Runs for UringLoop<H> {
    type H = H;
    type Own = Own;
    const KIND: &'static str = "uring";

    /// A loop for `service`, on the thread that will run it: the ring is set up for a single
    /// issuer, and a handler may be tied to its thread.
    fn make<S: Service<Handler = H>>(
        service: &S,
        p: Parts<H::Job, Own>,
    ) -> io::Result<Self> {
        let config = p.config;
        let udp = config.own.twin.as_ref().and_then(|t| t.take(p.wiring.owner));
        let mut ring = Ring::new(config.own.ring)?;
        // A `quic://` listener's loop has no listener: nothing to accept.
        if let Some(listener) = &p.listener {
            ring.accept_multi(listener.as_raw_fd(), LISTENER_TAG)?;
        }
        let state = State::new(service, p.wiring, &config);
        // The UDP socket sits in the same mio poll as the waker: the ring's one poll of its
        // epoll descriptor hears both, and the loop asks which (`Completion::Polled`).
        let quic = match udp {
            Some((socket, shared)) => {
                let waker = state.loops[state.owner].waker.clone();
                let mut endpoint =
                    Endpoint::new(socket, shared, config.sizing.capacity, waker, state.id)?;
                endpoint.register(p.poll.registry(), QUIC)?;
                Some(endpoint)
            }
            None => None,
        };
        ring.poll_multi(p.poll.as_raw_fd(), WAKER_TAG)?;
        ring.submit_and_wait(false, None)?;
        Ok(UringLoop {
            state,
            ring,
            poll: p.poll,
            events: Events::with_capacity(8),
            listener: p.listener,
            quic,
            accept_retry: None,
            draining: None,
            slots: Slab::with_capacity(config.sizing.capacity),
            incarnations: vec![0; config.sizing.capacity],
            to_send: Vec::with_capacity(1024),
            spares: Spares::new(tx_limit(&config), config.pooled_buffers),
            ctl: p.ctl,
            config,
        })
    }

    fn run(&mut self) -> io::Result<()> {
        while self.turn()? {}
        for key in self.slots.iter().map(|(k, _)| k).collect::<Vec<_>>() {
            self.release(key);
        }
        self.close_listener();
        self.with_quic(|q, env| q.close_all(env));
        // Closing sends and cancellations go out before the ring is dropped.
        self.ring.submit_and_wait(false, None)
    }
}

impl<H: Handler> UringLoop<H> {
    /// Calls `f` with the QUIC endpoint, if the loop has one, and the loop's state lent to it.
    fn with_quic(&mut self, f: impl FnOnce(&mut Endpoint, &mut quic::Env<'_, H>)) {
        if let Some(endpoint) = self.quic.as_mut() {
            let mut env = quic::Env::new(&mut self.state, &self.config.timeouts);
            f(endpoint, &mut env);
        }
    }

    /// Nothing left to serve: no TCP connection, no QUIC one.
    fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.quic.as_ref().is_none_or(Endpoint::is_empty)
    }

    /// One round: submit what the last one queued and wait for a completion, the next tick or
    /// a wake; then take finished jobs, handle completions and expire what is due. False once
    /// the loop is over: asked to stop, or drained.
    fn turn(&mut self) -> io::Result<bool> {
        if self.ctl.stop_now() {
            return Ok(false);
        }
        if self.ctl.draining() {
            if self.draining.is_none() {
                self.begin_drain();
            }
            if self.is_empty() {
                return Ok(false);
            }
        }
        self.submit_sends();
        if let Some(at) = self.accept_retry {
            if self.state.now >= at && self.listener.is_some() {
                let fd = self.listener.as_ref().map_or(-1, |l| l.as_raw_fd());
                self.accept_retry = match self.ring.accept_multi(fd, LISTENER_TAG) {
                    Ok(()) => None,
                    Err(_) => Some(self.state.now + ACCEPT_RETRY),
                };
            }
        }
        let timeout = if self.accept_retry.is_some() {
            Some(ACCEPT_RETRY)
        } else if !self.slots.is_empty() || self.draining.is_some() {
            Some(self.state.wheel.resolution())
        } else {
            None
        };
        let timeout = Endpoint::shorten_wait(self.quic.as_ref(), timeout);
        let wait = self.state.loops[self.state.id].about_to_sleep(|| !self.state.replies.is_empty())
            & self.quic.as_ref().is_none_or(Endpoint::about_to_sleep)
            & (timeout != Some(Duration::ZERO));
        let waited = self.ring.submit_and_wait(wait, timeout);
        self.state.loops[self.state.id].awake();
        if let Some(q) = &self.quic {
            q.awake();
        }
        waited?;
        self.state.date.refresh();
        // The same clock read: the date cache reads it anyway.
        self.state.now = self.state.date.now();
        self.take_replies();
        // The completions there now, not those that arrive meanwhile: a peer that floods
        // would keep the loop here, and the cancellations, sends and timers of this turn
        // (submitted at the next) would wait behind it.
        let ready = self.ring.ready();
        for handled in 1..=ready {
            let Some(c) = self.ring.next() else {
                break;
            };
            if handled % REPLY_CHECK_EVERY == 0 {
                self.take_replies();
            }
            self.complete(c)?;
        }
        self.expire_due();
        self.with_quic(|q, env| {
            q.take_replies(env);
            q.expire(env);
        });
        Ok(true)
    }

    /// Acts on one completion.
    fn complete(&mut self, c: Completion) -> io::Result<()> {
        match c {
            Completion::Accepted { tag, result, more } => {
                debug_assert_eq!(tag, LISTENER_TAG);
                let failed = match result {
                    Ok(fd) => {
                        self.accepted(socket2::Socket::from(fd));
                        false
                    }
                    Err(e) => {
                        if self.listener.is_some() {
                            log::warn!("loop {}: accept failed, retrying on a timer: {e}", self.state.id);
                        }
                        true
                    }
                };
                if !more && self.listener.is_some() {
                    // Ended: armed again at once, or after a pause if it failed (out of
                    // descriptors, say), as `evloop` retries.
                    if failed {
                        self.accept_retry = Some(self.state.now + ACCEPT_RETRY);
                    } else {
                        let fd = self.listener.as_ref().map_or(-1, |l| l.as_raw_fd());
                        if let Err(e) = self.ring.accept_multi(fd, LISTENER_TAG) {
                            log::warn!("loop {}: cannot accept, retrying on a timer: {e}", self.state.id);
                            self.accept_retry = Some(self.state.now + ACCEPT_RETRY);
                        }
                    }
                }
            }
            Completion::Polled { tag, more } => {
                debug_assert_eq!(tag, WAKER_TAG);
                // Consume the waker's edge so that the next wake makes the descriptor
                // readable again; and the UDP socket's, which says whether to read or send.
                let _ = self.poll.poll(&mut self.events, Some(Duration::ZERO));
                let (mut readable, mut writable) = (false, false);
                for event in self.events.iter().filter(|e| e.token() == QUIC) {
                    readable |= event.is_readable();
                    writable |= event.is_writable();
                }
                self.take_replies();
                // A wake may be for a QUIC connection's job as well as a TCP one's.
                self.with_quic(|q, env| {
                    q.take_replies(env);
                    if readable || writable {
                        q.ready(readable, writable, env);
                    }
                });
                if !more {
                    self.ring.poll_multi(self.poll.as_raw_fd(), WAKER_TAG)?;
                }
            }
            Completion::Received { tag, result, more } => self.received(tag, result, more)?,
            Completion::Sent { tag, result, buf } => self.sent(tag, result, buf)?,
            Completion::Writable { tag } => {
                if let Some((key, _)) = self.slot_of(tag) {
                    let slot = &mut self.slots[key];
                    // The poll is over, whoever is left to hear of it (see `release`).
                    slot.conn.mark_writable();
                    if !slot.conn.is_orphan() && !slot.io_ref().closing() {
                        self.pump(key);
                    }
                }
            }
            Completion::Nop { .. } => {}
        }
        Ok(())
    }

    fn accepted(&mut self, stream: socket2::Socket) {
        if self.listener.is_none() && self.draining.is_none() {
            // Accepted while the server stopped: nobody will serve it.
            return;
        }
        if self.slots.len() >= self.config.sizing.capacity {
            let shard = self.state.stats.shard(self.state.id);
            let who = format_args!("loop {}", self.state.id);
            accept::refuse(stream, self.state.refusal, shard, self.config.sizing.capacity, who);
            return;
        }
        let fd = stream.as_raw_fd();
        let key = self.slots.vacant_key();
        let incarnation = self.incarnations[key];
        let io = Io::new(stream, incarnation);
        let conn = match Conn::accept(UringStream::new(io), &self.config.transport) {
            Ok(conn) => conn,
            Err(e) => {
                log::debug!("loop {}: a connection failed to start: {e}", self.state.id);
                return;
            }
        };
        let limit = u32::try_from(rx_limit(&self.config)).unwrap_or(u32::MAX);
        if let Err(e) = self.ring.recv_multi(fd, tag(key, incarnation, 0), limit) {
            log::warn!("loop {}: cannot receive on a connection: {e}", self.state.id);
            return;
        }
        let mut slot = Slot { conn };
        slot.io().set_receiving(true);
        self.slots.insert(slot);
        self.state.stats.shard(self.state.id).connection_opened();
        if self.draining.is_some() {
            // Accepted as the drain began (its completion came after): its one answer is its
            // last.
            self.slots[key].conn.wind_down();
        }
        // A new connection waits for its first bytes (or a TLS client hello) under the header
        // timeout.
        self.arm(key);
    }

    /// The live slot `tag` names, if it is still that connection.
    fn slot_of(&self, tag: u64) -> Option<(usize, u8)> {
        let (key, incarnation, arm) = untag(tag);
        let slot = self.slots.get(key)?;
        (slot.io_ref().incarnation == incarnation).then_some((key, arm))
    }

    fn received(
        &mut self,
        tag: u64,
        result: io::Result<Option<crate::sys::uring::Buffer>>,
        more: bool,
    ) -> io::Result<()> {
        let Some((key, arm)) = self.slot_of(tag) else {
            // An earlier connection's: its bytes have nobody to go to.
            if let Ok(Some(buf)) = result {
                self.ring.consume(buf, |_| ());
            }
            return Ok(());
        };
        let slot = &mut self.slots[key];
        let current = arm == slot.io_ref().arm;
        if current && !more {
            slot.io().set_receiving(false);
        }
        let mut rearm = false;
        match result {
            Ok(Some(buf)) => {
                let (spares, pool) = (&mut self.spares, &mut self.state.pool);
                let io = slot.io();
                self.ring.consume(buf, |bytes| io.received(bytes, spares, pool));
                rearm = current && !more;
            }
            Ok(None) => {
                slot.io().set_eof(true);
                slot.conn.mark_peer_fin();
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => rearm = current,
            Err(e) if e.raw_os_error() == Some(libc::ECANCELED) => return Ok(()),
            // A kernel that does not know a receive's byte limit: without one from now on.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && self.ring.drop_recv_limit() => {
                log::info!(
                    "loop {}: this kernel cannot limit a multishot receive (Linux 6.17 can): \
                     a paused connection may take up to the provided buffers' bytes",
                    self.state.id
                );
                rearm = current;
            }
            Err(e) => slot.io().fail(e, &mut self.spares),
        }
        if slot.io_ref().closing() || slot.conn.is_orphan() {
            // Nobody reads any more: drop what came.
            slot.io().drop_unread();
            return Ok(());
        }
        if rearm && !slot.io_ref().paused() {
            if slot.io_ref().unread() >= rx_limit(&self.config) {
                // The receive ended at its limit with all of it unread: resume once it is read
                // (`arm`).
                slot.io().set_paused(true);
            } else {
                self.rearm(key);
            }
        }
        self.slots[key].conn.mark_readable();
        self.pump(key);
        Ok(())
    }

    /// Arms a new receive for `key`. If the ring will not take it, the connection fails (its
    /// next read says why), rather than wait for bytes that would never be received.
    fn rearm(&mut self, key: usize) {
        let slot = &mut self.slots[key];
        let io = slot.io();
        io.arm = io.arm.wrapping_add(1);
        let fd = io.sock.as_raw_fd();
        // No more than the connection may hold unread (see `Ring::recv_multi`).
        let limit = rx_limit(&self.config).saturating_sub(io.unread());
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        match self.ring.recv_multi(fd, slot.recv_tag(key), limit) {
            Ok(()) => slot.io().set_receiving(true),
            Err(e) => {
                log::warn!("loop {}: cannot receive on a connection: {e}", self.state.id);
                slot.io().fail(e, &mut self.spares);
                slot.conn.mark_readable();
            }
        }
    }

    fn sent(&mut self, tag: u64, result: io::Result<usize>, mut buf: Vec<u8>) -> io::Result<()> {
        let Some((key, _)) = self.slot_of(tag) else {
            self.state.pool.put(buf);
            return Ok(());
        };
        let slot = &mut self.slots[key];
        let io = slot.io();
        match result {
            Ok(n) if n > 0 && n < buf.len() => {
                // The rest of this buffer first, before anything written since.
                buf.drain(..n);
                let fd = io.sock.as_raw_fd();
                let Err(e) = self.ring.send(fd, buf, 0, tag) else {
                    return Ok(());
                };
                // The ring will not take it: the connection fails.
                buf = Vec::new();
                io.fail(e, &mut self.spares);
            }
            Ok(0) if !buf.is_empty() => io.fail(io::ErrorKind::WriteZero.into(), &mut self.spares),
            Ok(_) => {}
            Err(e) => io.fail(e, &mut self.spares),
        }
        io.set_sending(false);
        io.sent_buffer(buf, &mut self.state.pool);
        let failed = io.failed();
        if failed {
            io.drop_queued();
        }
        let more = io.queued() > 0;
        io.shut_if_sent();
        if more && !io.listed() {
            io.set_listed(true);
            self.to_send.push(key);
        }
        if io.closing() {
            // This send is over: nothing of ours is in the ring unless `more` goes next.
            slot.conn.mark_writable();
            if !more || failed {
                self.release(key);
            }
            return Ok(());
        }
        if slot.conn.is_orphan() {
            return Ok(());
        }
        slot.conn.mark_writable();
        if failed {
            slot.conn.mark_readable();
        }
        self.pump(key);
        Ok(())
    }

    /// Submits a send for every connection that wrote this turn and has none in flight.
    fn submit_sends(&mut self) {
        let mut to_send = std::mem::take(&mut self.to_send);
        for key in to_send.drain(..) {
            let Some(slot) = self.slots.get_mut(key) else {
                continue;
            };
            let io = slot.io();
            io.set_listed(false);
            if io.sending() || io.queued() == 0 {
                continue;
            }
            let buf = io.take_queued();
            io.set_sending(true);
            let fd = io.sock.as_raw_fd();
            let t = tag(key, io.incarnation, 0);
            if let Err(e) = self.ring.send(fd, buf, 0, t) {
                log::warn!("loop {}: cannot submit a send: {e}", self.state.id);
                io.set_sending(false);
                io.fail(e, &mut self.spares);
            }
        }
        self.to_send = to_send;
    }

    /// Lists `key` for a send at the end of the turn if it has bytes to send.
    fn queue_send(&mut self, key: usize) {
        let io = self.slots[key].io();
        if !io.listed() && io.queued() > 0 {
            io.set_listed(true);
            self.to_send.push(key);
        }
    }

    /// Polls for room in the socket if a file's bytes wait for it (see `stream`). If the ring
    /// will not take the poll, the connection fails; its write deadline closes it.
    fn poll_room(&mut self, key: usize) {
        let io = self.slots[key].io();
        if !io.wants_room() {
            return;
        }
        io.set_wants_room(false);
        let t = tag(key, io.incarnation, 0);
        if let Err(e) = self.ring.poll_writable(io.sock.as_raw_fd(), t) {
            log::warn!("loop {}: cannot poll a connection: {e}", self.state.id);
            io.fail(e, &mut self.spares);
        }
    }

    /// Starts a drain: close the listener, close the idle keep-alive connections; busy ones
    /// are closed when they become idle, and connections not yet answered get
    /// [`DRAIN_GRACE`] to bring their request (their receive is armed: it comes as any).
    fn begin_drain(&mut self) {
        let now = Instant::now();
        self.draining = Some(now + DRAIN_GRACE);
        self.state.now = now;
        // A client whose handshake the kernel completed has connected and may have sent its
        // request: closing the listener would reset it. Served like any connection accepted
        // before the drain (as `evloop` does); past the capacity, refused with the 503.
        for _ in 0..self.config.sizing.capacity.saturating_add(1) {
            let Some(Ok(stream)) = self.listener.as_ref().map(|l| l.accept()) else {
                break;
            };
            self.accepted(socket2::Socket::from(std::os::fd::OwnedFd::from(stream)));
        }
        self.close_listener();
        // QUIC connections hear GOAWAY and close once their requests are answered.
        self.with_quic(|q, env| q.drain(env));
        // Told first (an upgraded protocol: a WebSocket's close 1001; HTTP/2: GOAWAY, after
        // which it closes once its streams are done), then what is idle is closed; HTTP/1.1
        // connections busy with a request are told, in the response they wait for, that it is
        // the last.
        let told: Vec<usize> = self
            .slots
            .iter_mut()
            .filter(|(_, s)| !s.io_ref().closing())
            .filter_map(|(key, slot)| slot.conn.wind_down().then_some(key))
            .collect();
        for key in told {
            self.pump(key);
        }
        let (idle, fresh): (Vec<usize>, Vec<usize>) = self
            .slots
            .iter()
            .filter(|(_, s)| !s.io_ref().closing() && s.conn.is_idle())
            .map(|(k, _)| k)
            .partition(|&k| self.slots[k].conn.answered());
        for key in idle {
            self.finish(key);
        }
        for key in fresh {
            self.slots[key].conn.wind_down();
            self.arm(key);
        }
    }

    /// Stops accepting: the armed accept holds the listening socket open, so it is cancelled
    /// along with closing the descriptor.
    fn close_listener(&mut self) {
        if let Some(listener) = self.listener.take() {
            let _ = self.ring.cancel_accept(LISTENER_TAG);
            // Shut it so that the port refuses at once, whatever the kernel still holds.
            let _ = socket2::SockRef::from(&listener).shutdown(std::net::Shutdown::Both);
            drop(listener);
            self.accept_retry = None;
        }
    }

    /// Frees a slot: its receive cancelled, its descriptor closed. An operation the ring still
    /// holds on the socket (a send, a poll for room: the pump waits for it while `writable` is
    /// false) keeps the socket alive in the kernel whoever closes the descriptor, until it
    /// ends; a peer that never reads would hold it for ever. So such operations are cancelled,
    /// and the cancellation submitted before the descriptor is closed (the kernel finds them
    /// by the open file).
    fn release(&mut self, key: usize) {
        self.state.wheel.disarm(key);
        self.state.loops[self.state.id].set_cancelled(key, false);
        let mut slot = self.slots.remove(key);
        if slot.io_ref().sending() || !slot.conn.is_writable() {
            // Bytes unsent, given up on (a write timeout, the server stopping): a reset, not
            // an orphan (`Transport::abort`).
            crate::net::transport::reset_on_close(&slot.io_ref().sock);
            let fd = slot.io_ref().sock.as_raw_fd();
            if let Err(e) = self.ring.cancel_fd(fd) {
                log::warn!("loop {}: cannot cancel a connection's sends: {e}", self.state.id);
            }
        } else if slot.io_ref().receiving() {
            let _ = self.ring.cancel_recv(slot.recv_tag(key));
        }
        let incarnation = &mut self.incarnations[key];
        *incarnation = incarnation.wrapping_add(1);
        {
            let io = slot.io();
            io.shut_if_sent();
            io.release_buffers(&mut self.spares, &mut self.state.pool);
        }
        drop(slot);
        self.state.stats.shard(self.state.id).connection_closed();
    }
}

impl<H: Handler> Loop for UringLoop<H> {
    type H = H;
    type T = Stream<UringStream>;

    /// A closing connection has no session left to pump.
    fn conn(&mut self, key: usize) -> Option<Lent<'_, Self::T, H>> {
        let slot = self.slots.get_mut(key).filter(|s| !s.io_ref().closing())?;
        // Whatever the pump writes has somewhere to go (given back once it is idle: `arm`).
        slot.io().attach(&mut self.spares, &mut self.state.pool);
        Some(self.state.lend(&mut slot.conn))
    }

    fn state(&mut self) -> &mut State<H> {
        &mut self.state
    }

    /// After a pump that keeps the connection: queue its bytes, give back empty buffers, pause
    /// or resume receiving, and set its deadline.
    ///
    /// While draining, an idle connection is closed, but for one accepted and not yet answered
    /// while the drain's grace lasts (the rule and its reason: `evloop`'s `arm`).
    fn arm(&mut self, key: usize) {
        let grace = self.draining.filter(|_| self.slots[key].conn.is_idle());
        if let Some(grace) = grace {
            if self.slots[key].conn.answered() || self.state.now >= grace {
                return self.finish(key);
            }
        }
        self.queue_send(key);
        self.poll_room(key);
        let rx_limit = rx_limit(&self.config);
        let slot = &mut self.slots[key];
        let (unread, ended) = {
            let io = slot.io();
            io.release_buffers(&mut self.spares, &mut self.state.pool);
            (io.unread(), io.eof() || io.failed())
        };
        if unread >= rx_limit && !slot.io_ref().paused() {
            // Bytes come faster than the session takes them: stop receiving until it catches
            // up, so that a connection's memory stays bounded.
            slot.io().set_paused(true);
            if slot.io_ref().receiving() {
                slot.io().set_receiving(false);
                let _ = self.ring.cancel_recv(slot.recv_tag(key));
            }
        } else if slot.io_ref().paused() && unread == 0 && !ended {
            slot.io().set_paused(false);
            if !slot.io_ref().receiving() {
                self.rearm(key);
            }
        }
        let at = self.slots[key]
            .conn
            .deadline(self.state.now, &self.config.timeouts);
        let at = match grace {
            Some(grace) => Some(at.map_or(grace, |at| at.min(grace))),
            None => at,
        };
        self.state.wheel.set(key, at);
    }

    /// Ends a connection: as `evloop` does, or, with bytes still unsent, once they are sent.
    fn finish(&mut self, key: usize) {
        let slot = &mut self.slots[key];
        if slot.conn.is_orphan() || slot.io_ref().closing() {
            return;
        }
        let abandoned = slot.conn.shut(&mut self.state.pool);
        self.state.wheel.disarm(key);
        if slot.conn.work_out() {
            // The slot stays until the job ends; stop receiving meanwhile.
            if slot.io_ref().receiving() {
                slot.io().set_receiving(false);
                let _ = self.ring.cancel_recv(slot.recv_tag(key));
            }
            slot.conn.orphan();
            self.state.loops[self.state.id].set_cancelled(key, true);
            return;
        }
        if slot.io_ref().unsent() && !abandoned {
            slot.io().set_closing(true);
            self.queue_send(key);
            let at = self.state.now + self.config.timeouts.write;
            self.state.wheel.set(key, Some(at));
            return;
        }
        self.release(key);
    }

    fn free(&mut self, key: usize) {
        self.release(key);
    }

    /// A closing connection whose last bytes did not go within the write timeout is aborted.
    fn overdue(&mut self, key: usize) -> bool {
        if self.slots.get(key).is_some_and(|s| s.io_ref().closing()) {
            crate::net::transport::reset_on_close(&self.slots[key].io_ref().sock);
            self.release(key);
            return true;
        }
        false
    }
}

/// The `uring` model in the registry.
pub struct Uring;

impl super::Driver for Uring {
    const INFO: super::Info = super::Info {
        name: "uring",
        about: "Accept threads with io_uring loops (multishot accept and receive) and a worker \
                pool",
        needs: super::Needs {
            forks: false,
            children_listen: false,
            accept_threads: super::AcceptThreads::PerServer,
            workers: true,
        },
        caps: super::Caps {
            allocation_free: true,
            serves_http3: true,
            ..super::Caps::READINESS
        },
        flags: &[
            super::Flag {
                long: "ring-entries",
                value_name: "N",
                help: "uring: submission queue entries of each loop's io_uring",
                get: |m| m.uring.ring_entries as usize,
                set: |m, v| m.uring.ring_entries = u32::try_from(v.get()).unwrap_or(u32::MAX),
            },
            super::Flag {
                long: "recv-buffers",
                value_name: "N",
                help: "uring: provided receive buffers per loop, shared by its connections (a \
                       power of two, at most 32768)",
                get: |m| m.uring.recv_buffers as usize,
                set: |m, v| m.uring.recv_buffers = u32::try_from(v.get()).unwrap_or(u32::MAX),
            },
        ],
        shards: |common, _| common.accept_threads,
        listeners: |common, _| common.accept_threads,
        describe: |common, _| super::registry::describe_loops("io_uring loop", common),
    };
    type Config = Config;

    fn spawn<S: Service>(
        addr: &Addr,
        common: &super::Common,
        config: &Config,
        service: S,
        stats: Arc<Stats>,
    ) -> Result<(Server, Addr), BindError> {
        use super::registry::{bind_each, bind_error};
        // Refuse before binding: where io_uring cannot run, nothing is left listening.
        check(config, common).map_err(bind_error(addr))?;
        let mut flat = loop_config(common, config);
        if let Addr::Udp(udp) = addr {
            // A `quic://` listener: loops without a listener, each given its UDP socket.
            let (twin, bound) = quic::Twin::listen(*udp, common, &config.quic)?;
            flat.own.twin = Some(twin);
            let listeners = (0..common.accept_threads.max(1)).map(|_| None).collect();
            let server = super::loops::spawn::<S, UringLoop<S::Handler>>(
                listeners, service, common, flat, WAKER, stats,
            )
            .map_err(bind_error(addr))?;
            return Ok((server, Addr::Udp(bound)));
        }
        let (listeners, bound) = bind_each(addr, common.accept_threads, common)?;
        if config.http3 {
            let (limits, count) = (&config.quic, listeners.len());
            let transport = &mut flat.transport;
            flat.own.twin =
                quic::Twin::of_tls(&bound, count, common, limits, config.alt_svc, transport)?;
        }
        let listeners = listeners.into_iter().map(Some).collect();
        let server = super::loops::spawn::<S, UringLoop<S::Handler>>(
            listeners, service, common, flat, WAKER, stats,
        )
        .map_err(bind_error(addr))?;
        Ok((server, bound))
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19: an idle `uring` connection costs no more than an `evloop` one. Neither holds
    /// a buffer when idle (`idle_memory*.rs` count the heap); what is left is the slot, in
    /// slabs of the same kind.
    #[test]
    fn a_uring_slot_is_no_bigger_than_an_evloop_one() {
        // The shape of `slab`'s entries, for both the same.
        #[allow(dead_code)]
        enum Entry<T> {
            Vacant(usize),
            Occupied(T),
        }
        let uring = std::mem::size_of::<Entry<Slot>>();
        let evloop = std::mem::size_of::<Entry<Conn<Stream<crate::net::Socket>>>>();
        assert!(uring <= evloop, "uring {uring} bytes per slot, evloop {evloop}");
        assert_eq!(std::mem::size_of::<Io>(), 16, "a descriptor, bits and a box");
    }
}
