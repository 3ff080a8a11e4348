//! A loop's QUIC endpoint: its UDP socket, quinn-proto's `Endpoint` (which connection a
//! datagram is for, new connections, stateless answers), the connections themselves in a slab,
//! their deadlines, and the queue their jobs' replies come back on. The loop (`evloop`) calls
//! it when its socket is ready, when a reply or a wake is posted, when a deadline passes, and
//! at a drain or a stop.
//!
//! A connection's slot lives as long as QUIC keeps the connection (through its closing and
//! draining periods) and, after that, as long as a job it handed out is not back: a worker's
//! reply always finds the slot it was meant for, as in `evloop` for TCP (the slot's cancelled
//! flag in the reply queue tells workers to drop a queued job unrun).

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::http::Handler;
use bytes::BytesMut;
use crossbeam_channel::Receiver;
use mio::{Interest, Registry, Token};
use quinn_proto::{ConnectionHandle, DatagramEvent, EcnCodepoint, ServerConfig, TransportConfig};
use slab::Slab;

use super::conn::Conn;
use super::socket::QuicSocket;
use super::{Env, QuicLimits, Retry};
use crate::drive::workers::{Done, LoopQueue};
use crate::net::tls::TlsAcceptor;

/// Datagrams read before the connections they touched are served: enough to batch a burst,
/// few enough that a flood on the socket cannot starve the connections.
const READ_BATCH: usize = 64;

/// Batches read in one turn of the loop before it turns (its clock read anew, timers run,
/// replies taken) and comes back for the rest: a client that sends faster than the loop
/// serves would otherwise keep it reading with a clock that stands still, so that no timer
/// ran and every deadline set meanwhile (a handshake's, an answer's) was already past.
const READ_BATCHES_PER_TURN: usize = 16;

/// What every loop's endpoint of one listener shares: the TLS it serves with, and QUIC's
/// settings and stateless-reset key, the same on every thread (a stateless reset made by one
/// thread is recognised for a connection of another).
pub(crate) struct Shared {
    pub tls: TlsAcceptor,
    pub endpoint: Arc<quinn_proto::EndpointConfig>,
    pub transport: Arc<TransportConfig>,
    /// The limits that are the driver's (Retry, handshakes under way).
    pub limits: QuicLimits,
}

impl Shared {
    /// QUIC for the TLS `tls` serves, with `transport`'s settings (made by
    /// `transport_config_with` from the same `limits`) and `limits`.
    pub fn with_limits(
        tls: TlsAcceptor,
        transport: TransportConfig,
        limits: QuicLimits,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            tls,
            endpoint: Arc::new(quinn_proto::EndpointConfig::default()),
            transport: Arc::new(transport),
            limits,
        })
    }

    /// QUIC's server configuration for the TLS configuration live now.
    fn server_config(&self) -> io::Result<(Arc<rustls::ServerConfig>, Arc<ServerConfig>)> {
        let (live, tls) = self.tls.quic();
        let crypto = quinn_proto::crypto::rustls::QuicServerConfig::try_from(tls)
            .map_err(|e| io::Error::other(format!("TLS for QUIC: {e}")))?;
        // Its token key (for Retry tokens; berth sends no NEW_TOKEN) is a random one of each
        // endpoint's: enough, as a client's Initial after a Retry comes back to the loop that
        // sent the Retry (the kernel steers its address there, see `drive::quic`'s docs).
        let mut config = ServerConfig::with_crypto(Arc::new(crypto));
        config.transport_config(self.transport.clone());
        // A connection stays on its thread's socket (see `drive::quic`'s docs).
        config.migration(false);
        Ok((live, Arc::new(config)))
    }
}

/// A connection's slot: live, or kept after QUIC is done with it until its jobs are back.
enum Slot {
    Live(Box<Conn>),
    Orphan { jobs_out: usize },
}

/// One loop's QUIC endpoint.
pub(crate) struct Endpoint {
    /// The loop's UDP socket, through quinn-udp (GSO, GRO, don't-fragment, a full socket's
    /// send kept for when it has room).
    socket: QuicSocket,
    quinn: quinn_proto::Endpoint,
    shared: Arc<Shared>,
    /// QUIC's server configuration and the TLS configuration it was made from: made anew when
    /// a reload (SIGHUP) replaced that.
    config: (Arc<rustls::ServerConfig>, Arc<ServerConfig>),
    conns: Slab<Slot>,
    by_handle: HashMap<ConnectionHandle, usize>,
    handles: HashMap<usize, ConnectionHandle>,
    /// Each live connection's deadline, and the same ordered by time.
    deadlines: HashMap<usize, Instant>,
    due: BTreeSet<(Instant, usize)>,
    /// Most connections at once (`-C`); new ones past it are refused.
    capacity: usize,
    /// Live connections whose handshake is not done (`Conn::handshaking`).
    handshaking: usize,
    /// Where this endpoint's jobs' replies (and wakes) are posted, and where they are read.
    replies: Arc<Vec<LoopQueue>>,
    inbox: Receiver<(usize, Done)>,
    send_buf: Vec<u8>,
    /// Connections that may have more to send once the socket has room.
    unsent: BTreeSet<usize>,
    /// The socket was not drained last turn (`READ_BATCHES_PER_TURN`): read on at the next,
    /// without waiting for readiness, which an edge-triggered poll would not report again.
    more_to_read: bool,
    draining: bool,
    /// The loop's number, for log lines.
    id: usize,
}

impl Endpoint {
    /// An endpoint on `socket` (non-blocking), with at most `capacity` connections, whose
    /// replies wake the loop through `waker`.
    pub fn new(
        socket: std::net::UdpSocket,
        shared: Arc<Shared>,
        capacity: usize,
        waker: Arc<mio::Waker>,
        id: usize,
    ) -> io::Result<Endpoint> {
        let config = shared.server_config()?;
        let socket = QuicSocket::new(socket)?;
        // MTU discovery only where the kernel sets don't-fragment: a probe bigger than the
        // path must be lost, not fragmented. Without it every packet stays at QUIC's 1,200
        // bytes, a fifth more packets (and system calls) per byte than at 1,452.
        let quinn = quinn_proto::Endpoint::new(
            shared.endpoint.clone(),
            Some(config.1.clone()),
            !socket.may_fragment(),
            None,
        );
        let (tx, inbox) = crossbeam_channel::unbounded();
        Ok(Endpoint {
            socket,
            quinn,
            shared,
            config,
            conns: Slab::new(),
            by_handle: HashMap::new(),
            handles: HashMap::new(),
            deadlines: HashMap::new(),
            due: BTreeSet::new(),
            capacity,
            handshaking: 0,
            replies: Arc::new(vec![LoopQueue::new(tx, waker, capacity)]),
            inbox,
            send_buf: Vec::new(),
            unsent: BTreeSet::new(),
            more_to_read: false,
            draining: false,
            id,
        })
    }

    /// Registers the socket with the loop's poll.
    pub fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(
            self.socket.source(),
            token,
            Interest::READABLE | Interest::WRITABLE,
        )
    }

    /// No connection left (live or waiting for its jobs).
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// When [`Endpoint::expire`] is next due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.due.first().map(|(at, _)| *at)
    }

    /// A loop's wait, `timeout` (its own deadlines'), shortened to QUIC's next deadline if
    /// `endpoint` has one sooner: QUIC's timers (acknowledgements, loss detection, pacing)
    /// want their own time, finer than the loop's wheel.
    pub fn shorten_wait(
        endpoint: Option<&Endpoint>,
        timeout: Option<Duration>,
    ) -> Option<Duration> {
        match endpoint.and_then(Endpoint::next_deadline) {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                Some(timeout.map_or(wait, |t| t.min(wait)))
            }
            None => timeout,
        }
    }

    /// The loop is about to poll: false if replies came meanwhile, or the socket has
    /// datagrams left to read (poll without waiting).
    pub fn about_to_sleep(&self) -> bool {
        !self.more_to_read && self.replies[0].about_to_sleep(|| !self.inbox.is_empty())
    }

    /// The loop is awake (see `LoopQueue::awake`).
    pub fn awake(&self) {
        self.replies[0].awake();
    }

    /// The socket is readable and/or writable.
    pub fn ready<H: Handler>(&mut self, readable: bool, writable: bool, env: &mut Env<'_, H>) {
        if writable {
            self.send_unsent(env);
        }
        if readable {
            self.receive(env);
        }
    }

    /// Reads datagrams until the socket is drained, or `READ_BATCHES_PER_TURN` batches were
    /// read (the rest wait for the next turn: `more_to_read`), serving the connections they
    /// touched after each batch.
    fn receive<H: Handler>(&mut self, env: &mut Env<'_, H>) {
        let mut touched = BTreeSet::new();
        self.more_to_read = false;
        for batch in 1.. {
            let mut drained = false;
            for _ in 0..READ_BATCH {
                match self.socket.recv() {
                    Ok(Some(r)) => {
                        for at in r.datagrams() {
                            self.datagram(at, r.from, r.local, r.ecn, &mut touched, env);
                        }
                    }
                    Ok(None) => {
                        drained = true;
                        break;
                    }
                    Err(e) => {
                        // An ICMP error from an earlier send (ECONNREFUSED): nothing to do
                        // for a socket that serves many peers; read on.
                        log::debug!("QUIC loop {}: receive: {e}", self.id);
                    }
                }
            }
            for key in std::mem::take(&mut touched) {
                self.service(key, env, |conn, env| conn.run(env));
            }
            if drained {
                return;
            }
            if batch >= READ_BATCHES_PER_TURN {
                self.more_to_read = true;
                return;
            }
        }
    }

    /// One datagram, the socket's `at`, from `from` to our address `local` (when known).
    fn datagram<H: Handler>(
        &mut self,
        at: std::ops::Range<usize>,
        from: SocketAddr,
        local: Option<IpAddr>,
        ecn: Option<EcnCodepoint>,
        touched: &mut BTreeSet<usize>,
        env: &mut Env<'_, H>,
    ) {
        let data = BytesMut::from(self.socket.datagram(at));
        let mut buf = std::mem::take(&mut self.send_buf);
        buf.clear();
        let event = self.quinn.handle(env.now, from, local, ecn, data, &mut buf);
        match event {
            Some(DatagramEvent::ConnectionEvent(handle, event)) => {
                if let Some(&key) = self.by_handle.get(&handle) {
                    if let Some(Slot::Live(conn)) = self.conns.get_mut(key) {
                        conn.quic.handle_event(event);
                        conn.take_events();
                        touched.insert(key);
                    }
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                let limits = &self.shared.limits;
                let retry = incoming.may_retry()
                    && !incoming.remote_address_validated()
                    && match limits.retry {
                        Retry::On => true,
                        Retry::Auto => self.handshaking >= limits.retry_after,
                        Retry::Off => false,
                    };
                if self.draining
                    || self.conns.len() >= self.capacity
                    || self.handshaking >= limits.max_handshakes
                {
                    let t = self.quinn.refuse(incoming, &mut buf);
                    env.stats.shard(env.shard).connection_refused();
                    self.socket.send(&t, &buf[..t.size]);
                } else if retry {
                    // Stateless: the client comes back with the token, from the address it
                    // claims, or never.
                    match self.quinn.retry(incoming, &mut buf) {
                        Ok(t) => {
                            env.stats.quic_retry_sent();
                            self.socket.send(&t, &buf[..t.size]);
                        }
                        Err(e) => self.accept(e.into_incoming(), &mut buf, touched, env),
                    }
                } else {
                    self.accept(incoming, &mut buf, touched, env);
                }
            }
            Some(DatagramEvent::Response(t)) => {
                self.socket.send(&t, &buf[..t.size]);
            }
            None => {}
        }
        self.send_buf = buf;
    }

    /// Accepts a new connection into a slot.
    fn accept<H: Handler>(
        &mut self,
        incoming: quinn_proto::Incoming,
        buf: &mut Vec<u8>,
        touched: &mut BTreeSet<usize>,
        env: &mut Env<'_, H>,
    ) {
        if !self.shared.tls.live_is(&self.config.0) {
            // The certificate was reloaded: new connections get it.
            match self.shared.server_config() {
                Ok(config) => self.config = config,
                Err(e) => log::warn!("QUIC loop {}: the reloaded TLS is not usable: {e}", self.id),
            }
        }
        let config = Some(self.config.1.clone());
        match self.quinn.accept(incoming, env.now, buf, config) {
            Ok((handle, quic)) => {
                let entry = self.conns.vacant_entry();
                let key = entry.key();
                log::debug!("QUIC connection from {} opened", quic.remote_address());
                entry.insert(Slot::Live(Box::new(Conn::new(
                    quic,
                    key,
                    self.replies.clone(),
                    self.shared.limits.max_streams,
                    env.now,
                ))));
                self.handshaking += 1;
                self.by_handle.insert(handle, key);
                self.handles.insert(key, handle);
                env.stats.shard(env.shard).connection_opened();
                env.stats.http3_opened();
                touched.insert(key);
            }
            Err(e) => {
                log::debug!(
                    "QUIC loop {}: a connection failed to start: {}",
                    self.id,
                    e.cause
                );
                if let Some(t) = e.response {
                    self.socket.send(&t, &buf[..t.size]);
                }
            }
        }
    }

    /// The socket has room: the datagram it refused, then what connections still had.
    fn send_unsent<H: Handler>(&mut self, env: &mut Env<'_, H>) {
        if !self.socket.resend() {
            return;
        }
        while let Some(key) = self.unsent.pop_first() {
            self.service(key, env, |_, _| {});
            if self.socket.is_blocked() {
                return;
            }
        }
    }

    /// Calls `serve` on the live connection of slot `key`, then passes what it has for the
    /// endpoint and the socket on, sets its deadline, and frees it once QUIC is done with it.
    fn service<H: Handler>(
        &mut self,
        key: usize,
        env: &mut Env<'_, H>,
        serve: impl FnOnce(&mut Conn, &mut Env<'_, H>),
    ) {
        let Some(&handle) = self.handles.get(&key) else {
            return;
        };
        let Some(Slot::Live(conn)) = self.conns.get_mut(key) else {
            return;
        };
        serve(conn, env);
        if conn.handshaking && (conn.is_started() || conn.quic.is_closed()) {
            conn.handshaking = false;
            self.handshaking -= 1;
        }
        // What QUIC tells the endpoint (new connection IDs, the end), and what it answers.
        while let Some(event) = conn.quic.poll_endpoint_events() {
            if let Some(event) = self.quinn.handle_event(handle, event) {
                conn.quic.handle_event(event);
            }
        }
        conn.take_events();
        if !self.socket.transmit(&mut conn.quic, env.now) {
            self.unsent.insert(key);
        }
        if conn.is_drained() {
            conn.cancel_jobs(env);
            let jobs_out = conn.jobs_out;
            self.forget(key, env, jobs_out);
            return;
        }
        let at = conn.deadline(env);
        self.set_deadline(key, at);
    }

    fn set_deadline(&mut self, key: usize, at: Option<Instant>) {
        if let Some(old) = self.deadlines.remove(&key) {
            self.due.remove(&(old, key));
        }
        if let Some(at) = at {
            self.deadlines.insert(key, at);
            self.due.insert((at, key));
        }
    }

    /// QUIC is done with slot `key`'s connection: it is freed, or kept as an orphan while
    /// `jobs_out` jobs are not back (queued ones are dropped unrun: the slot's flag says so).
    fn forget<H: Handler>(&mut self, key: usize, env: &Env<'_, H>, jobs_out: usize) {
        if let Some(Slot::Live(conn)) = self.conns.get(key) {
            env.stats.http3_ended(conn.counts(), conn.packets());
            if conn.handshaking {
                self.handshaking -= 1;
            }
        }
        self.set_deadline(key, None);
        self.unsent.remove(&key);
        if let Some(handle) = self.handles.remove(&key) {
            self.by_handle.remove(&handle);
        }
        if jobs_out > 0 {
            self.conns[key] = Slot::Orphan { jobs_out };
            self.replies[0].set_cancelled(key, true);
        } else {
            self.free(key, env);
        }
    }

    fn free<H: Handler>(&mut self, key: usize, env: &Env<'_, H>) {
        self.replies[0].set_cancelled(key, false);
        drop(self.conns.remove(key));
        env.stats.shard(env.shard).connection_closed();
    }

    /// Hands finished jobs' replies and wakes to their connections.
    pub fn take_replies<H: Handler>(&mut self, env: &mut Env<'_, H>) {
        while let Ok((key, done)) = self.inbox.try_recv() {
            match self.conns.get_mut(key) {
                Some(Slot::Orphan { jobs_out }) => {
                    if matches!(done, Done::More) {
                        continue;
                    }
                    *jobs_out = jobs_out.saturating_sub(1);
                    if *jobs_out == 0 {
                        self.free(key, env);
                    }
                }
                Some(Slot::Live(_)) => match done {
                    Done::Reply(stream, reply) => {
                        self.service(key, env, |conn, env| conn.complete(stream, reply, env));
                    }
                    Done::Cancelled => {
                        self.service(key, env, |conn, _| {
                            conn.jobs_out = conn.jobs_out.saturating_sub(1);
                        });
                    }
                    Done::More => self.service(key, env, |conn, env| conn.wake(env)),
                },
                // A wake for a connection gone since (its slot is free or reused: one extra
                // look at it is harmless).
                None => {}
            }
        }
    }

    /// Serves the connections whose deadline has passed, each once; first reads on if the
    /// socket was not drained last turn (the loop calls this every turn).
    ///
    /// Once: the due connections are taken first, and one whose new deadline has passed
    /// already waits for the next turn, which reads the clock anew (the loop polls without
    /// waiting for it). Served until none was due, a connection could keep this loop going
    /// with a clock that stands still: quinn-proto's pacer, asked to send with no tokens and
    /// no time elapsed since it last looked, may set its timer to `env.now` itself (its delay,
    /// the RTT times the token deficit over the congestion window, rounds to 0 ns when the
    /// RTT measured on loopback is tiny against a window of megabytes), so the thread spun
    /// here, reading and sending nothing, until the client gave up on the silence (quic-go's
    /// 50 MB download, two runs in three; seen in a debugger: `handle_timeout`, then
    /// `poll_transmit` blocked by pacing, again and again).
    pub fn expire<H: Handler>(&mut self, env: &mut Env<'_, H>) {
        if self.more_to_read {
            self.receive(env);
        }
        let mut due = Vec::new();
        while let Some(&(at, key)) = self.due.first() {
            if at > env.now {
                break;
            }
            self.due.remove(&(at, key));
            self.deadlines.remove(&key);
            due.push(key);
        }
        for key in due {
            self.service(key, env, |conn, env| conn.expire(env));
        }
    }

    /// A drain: no new connections; each one is told (GOAWAY) and closes once its requests
    /// are answered.
    pub fn drain<H: Handler>(&mut self, env: &mut Env<'_, H>) {
        if self.draining {
            return;
        }
        self.draining = true;
        self.quinn.set_server_config(None);
        let keys: Vec<usize> = self.handles.keys().copied().collect();
        for key in keys {
            self.service(key, env, |conn, env| {
                if !conn.is_draining() {
                    conn.drain(env)
                }
            });
        }
    }

    /// The server stops now: every connection is closed (its CONNECTION_CLOSE sent once).
    pub fn close_all<H: Handler>(&mut self, env: &mut Env<'_, H>) {
        let keys: Vec<usize> = self.handles.keys().copied().collect();
        for key in keys {
            self.service(key, env, |conn, env| {
                conn.cancel_jobs(env);
                conn.close_now(env.now);
            });
        }
        // Their slots go with the loop; the count of connections goes to 0 with them.
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.replies[0].set_cancelled(key, true);
            if let Slot::Live(conn) = self.conns.remove(key) {
                // Orphans were counted as QUIC let them go (`forget`).
                env.stats.http3_ended(conn.counts(), conn.packets());
            }
            env.stats.shard(env.shard).connection_closed();
        }
    }
}
