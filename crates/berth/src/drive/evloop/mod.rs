//! `evloop`: seed 001's model. `-A` accept threads, each with its own `SO_REUSEPORT` listener
//! and its own mio poll; a connection stays on the thread that accepted it for life, in a slab
//! preallocated to `-C` slots; `-w` worker threads take slow jobs from one FIFO queue and post
//! the reply back to the owning loop, waking it through a mio `Waker`.
//!
//! ```text
//!  listener 0 ─ loop 0 (poll, slab of C conns, buffer pool) ──┐ jobs ┌─ worker 0
//!  listener 1 ─ loop 1 (poll, slab of C conns, buffer pool) ──┼─────>├─ worker 1
//!      ...                           ^  replies + wake        │ FIFO └─ ...
//!                                    └────────────────────────┘
//! ```
//!
//! A connection whose peer leaves while its job runs keeps its slot (marked dead) until the job
//! ends, so the reply always finds the slot it was meant for; a job still queued when its peer
//! leaves is marked cancelled and dropped unrun by the worker that takes it, which frees the
//! slot then (see `workers`). A connection arriving when the
//! slab is full is accepted, sent the service's refusal, closed and counted: never left to rot
//! in the backlog.

mod inline;

pub use inline::Inline;

use std::io;

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::http::Handler;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use super::accept;
use super::loops::{
    Lent, Loop, LoopConfig, Parts, Runs, State, Wiring, ACCEPT_RETRY, REPLY_CHECK_EVERY,
};
use super::pump::Conn;
use super::quic::{self, Endpoint};
use super::{Server, Service};
use crate::net::{Addr, BindError, Evented, EventedListener, Listener, Socket, Stream};
use crate::rt::{Control, DRAIN_GRACE};
use crate::stats::Stats;

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);
const QUIC: Token = Token(usize::MAX - 3);

/// Settings of the `evloop` model of its own; capacity, workers, limits, timeouts and buffer
/// sizes come from [`Common`](super::Common).
#[derive(Debug, Clone)]
pub struct Config {
    /// Spare buffers each loop keeps for reuse.
    pub pooled_buffers: usize,
    /// Readiness events taken from the kernel per poll.
    pub events: usize,
    /// Number of the first loop, for [`Service::handler`] and the stats shard: processes that
    /// share counters (prefork) give each of their loops a distinct number.
    pub first_thread: usize,
    /// On a TLS listener, also serve HTTP/3 on its UDP twin (the same port and certificate:
    /// `berth serve --http3`), from the same loops: each loop's UDP socket sits in its poll
    /// beside its TCP listener, and its QUIC connections share its workers and counters.
    pub http3: bool,
    /// With [`Config::http3`], answers over the TLS listener carry `Alt-Svc: h3=":PORT";
    /// ma=86400` (the twin's port, bound), so that browsers move over to HTTP/3 by themselves
    /// (`berth serve --alt-svc on|off`).
    pub alt_svc: bool,
    /// QUIC's limits for its HTTP/3 (a `quic://` listener's, or [`Config::http3`]'s twin's):
    /// request streams at once, when new connections get a Retry (`berth serve
    /// --http3-max-streams`, `--quic-retry`).
    pub quic: quic::QuicLimits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            pooled_buffers: 256,
            events: 1024,
            first_thread: 0,
            http3: false,
            alt_svc: true,
            quic: quic::QuicLimits::default(),
        }
    }
}

/// What a loop reads: the common settings and, of its own, the events taken per poll.
type Flat = LoopConfig<Own>;

/// The part of a loop's settings that is `evloop`'s own.
#[derive(Debug, Clone)]
struct Own {
    /// Readiness events taken from the kernel per poll.
    events: usize,
    /// The UDP sockets of a TLS listener's HTTP/3 twin ([`Config::http3`]) or of a `quic://`
    /// listener, one per loop: each loop takes its own as it starts.
    twin: Option<Arc<quic::Twin>>,
}

impl Own {
    fn config(common: &super::Common, own: &Config) -> Flat {
        let events = own.events;
        let own_part = Own { events, twin: None };
        LoopConfig::new(common, own.pooled_buffers, own.first_thread, own_part)
    }
}

/// Starts one event loop per listener (TCP listeners should share a port through
/// `SO_REUSEPORT`; copies of one UNIX socket share its accept queue)
/// and `common.workers` workers. Returns once every loop is running.
pub fn spawn<S: Service>(
    listeners: Vec<Listener>,
    service: S,
    common: &super::Common,
    config: &Config,
    stats: Arc<Stats>,
) -> io::Result<Server> {
    let config = Own::config(common, config);
    let listeners = listeners.into_iter().map(Some).collect();
    super::loops::spawn::<S, EventLoop<S::Handler>>(listeners, service, common, config, WAKER, stats)
}

struct EventLoop<H: Handler> {
    /// The handler, buffers, deadlines and return addresses (see `loops`).
    state: State<H>,
    poll: Poll,
    /// `None` once a drain has closed it.
    listener: Option<EventedListener>,
    /// A drain is under way (until when a connection not yet answered may still bring its
    /// request: see [`DRAIN_GRACE`]): no new connections, idle ones closed, busy ones closed
    /// once idle. `None`: serving.
    draining: Option<Instant>,
    conns: Slab<Conn<Stream<Socket>>>,
    /// The QUIC endpoint of a `quic://` listener (HTTP/3), on this loop's UDP socket.
    quic: Option<Endpoint>,
    /// Accepting failed for want of descriptors (EMFILE/ENFILE) or memory. The listener is
    /// edge-triggered, so nothing would wake us for connections already waiting: retry on a
    /// timer until accepting works again (nginx does the same).
    accept_paused: bool,
    ctl: Arc<Control>,
    config: Flat,
}

impl<H: Handler> Runs for EventLoop<H> {
    type H = H;
    type Own = Own;
    const KIND: &'static str = "loop";

    /// A loop for `service`, on the thread that will run it (a handler may be tied to it).
    fn make<S: Service<Handler = H>>(service: &S, p: Parts<H::Job, Own>) -> io::Result<Self> {
        let udp = p.config.own.twin.as_ref().and_then(|t| t.take(p.wiring.owner));
        EventLoop::with(service, p.wiring, p.poll, p.listener, udp, p.ctl, p.config)
    }

    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(self.config.own.events);
        while self.turn(&mut events, true)? {}
        self.close_all();
        Ok(())
    }
}

impl<H: Handler> EventLoop<H> {
    /// A loop on its own thread: accepting on `listener` (TCP or UNIX), and/or serving QUIC on
    /// a UDP socket.
    fn with<S: Service<Handler = H>>(
        service: &S,
        wiring: Wiring<H::Job>,
        poll: Poll,
        listener: Option<Listener>,
        udp: Option<(std::net::UdpSocket, Arc<quic::Shared>)>,
        ctl: Arc<Control>,
        config: Flat,
    ) -> io::Result<Self> {
        let listener = match listener {
            Some(listener) => {
                let mut listener = listener.into_evented();
                poll.registry()
                    .register(&mut listener, LISTENER, Interest::READABLE)?;
                Some(listener)
            }
            None => None,
        };
        let state = State::new(service, wiring, &config);
        let quic = match udp {
            Some((socket, shared)) => {
                let waker = state.loops[state.owner].waker.clone();
                let mut endpoint =
                    Endpoint::new(socket, shared, config.sizing.capacity, waker, state.id)?;
                endpoint.register(poll.registry(), QUIC)?;
                Some(endpoint)
            }
            None => None,
        };
        Ok(EventLoop {
            state,
            poll,
            listener,
            draining: None,
            conns: Slab::with_capacity(config.sizing.capacity),
            quic,
            accept_paused: false,
            ctl,
            config,
        })
    }

    /// Calls `f` with the QUIC endpoint, if the loop has one, and the loop's state lent to it.
    fn with_quic(&mut self, f: impl FnOnce(&mut Endpoint, &mut quic::Env<'_, H>)) {
        if let Some(endpoint) = self.quic.as_mut() {
            let mut env = quic::Env::new(&mut self.state, &self.config.timeouts);
            f(endpoint, &mut env);
        }
    }

    /// Closes every connection: the loop is over.
    fn close_all(&mut self) {
        for key in self.conns.iter().map(|(k, _)| k).collect::<Vec<_>>() {
            self.finish(key);
        }
        self.with_quic(|q, env| q.close_all(env));
    }

    /// Nothing left to serve: no TCP connection, no QUIC one.
    fn is_empty(&self) -> bool {
        self.conns.is_empty() && self.quic.as_ref().is_none_or(Endpoint::is_empty)
    }

    /// One round: poll (waiting for the next event or deadline if `block`, else not at all),
    /// then take finished jobs, accept, pump what is ready and expire what is due. False once
    /// the loop is over: asked to stop, or drained.
    fn turn(&mut self, events: &mut Events, block: bool) -> io::Result<bool> {
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
            let timeout = if !block {
                Some(Duration::ZERO)
            } else if self.accept_paused {
                Some(ACCEPT_RETRY)
            } else if !self.conns.is_empty() {
                Some(self.state.wheel.resolution())
            } else {
                None
            };
            let timeout = Endpoint::shorten_wait(self.quic.as_ref(), timeout);
            let queue = &self.state.loops[self.state.owner];
            let quiet = queue.about_to_sleep(|| !self.state.replies.is_empty())
                & self.quic.as_ref().is_none_or(Endpoint::about_to_sleep);
            let timeout = if quiet { timeout } else { Some(Duration::ZERO) };
            let polled = self.poll.poll(events, timeout);
            self.state.loops[self.state.owner].awake();
            if let Some(q) = &self.quic {
                q.awake();
            }
            match polled {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(true),
                Err(e) => return Err(e),
            }
            self.state.date.refresh();
            // The same clock read: the date cache reads it anyway.
            self.state.now = self.state.date.now();
            if self.accept_paused {
                self.accept();
            }
            // Finished jobs first: their clients have waited longest, and under fast load a
            // waker event can sit behind hundreds of readiness events in the same batch.
            self.take_replies();
            for (i, event) in events.iter().enumerate() {
                // Look for finished jobs now and then within a long batch too.
                if i % REPLY_CHECK_EVERY == REPLY_CHECK_EVERY - 1 {
                    self.take_replies();
                }
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => {
                        self.take_replies();
                        self.with_quic(|q, env| q.take_replies(env));
                    }
                    QUIC => {
                        let (readable, writable) = (event.is_readable(), event.is_writable());
                        self.with_quic(|q, env| q.ready(readable, writable, env));
                    }
                    Token(key) => {
                        let Some(conn) = self.conns.get_mut(key) else {
                            continue;
                        };
                        if event.is_readable() {
                            conn.mark_readable();
                        }
                        if event.is_read_closed() || event.is_error() {
                            conn.mark_peer_fin();
                        }
                        if event.is_writable() || event.is_write_closed() {
                            conn.mark_writable();
                        }
                        self.pump(key);
                    }
                }
            }
            self.expire_due();
            self.with_quic(|q, env| {
                q.take_replies(env);
                q.expire(env);
            });
        Ok(true)
    }

    fn accept(&mut self) {
        self.accept_at_most(usize::MAX);
    }

    /// Accepts what waits in the listener's queue, at most `most` connections.
    fn accept_at_most(&mut self, most: usize) {
        for accepted in 1..=most {
            // A backlog of connections each answered on the spot (read_on_accept) can keep
            // the loop here for milliseconds: pick up finished jobs in between, as the event
            // loop does within a long batch of events.
            if accepted % REPLY_CHECK_EVERY == 0 {
                self.take_replies();
            }
            let Some(listener) = &self.listener else {
                return;
            };
            let who = format_args!("loop {}", self.state.id);
            let shard = self.state.stats.shard(self.state.id);
            let refusal = self.state.refusal;
            let Some(stream) = accept::next(listener, &mut self.accept_paused, who, refusal, shard)
            else {
                return;
            };
            if self.conns.len() >= self.config.sizing.capacity {
                let shard = self.state.stats.shard(self.state.id);
                accept::refuse(stream, self.state.refusal, shard, self.config.sizing.capacity, who);
                continue;
            }
            let entry = self.conns.vacant_entry();
            let key = entry.key();
            let mut conn = match Conn::accept(stream, &self.config.transport) {
                Ok(conn) => conn,
                Err(e) => {
                    log::debug!("loop {}: a connection failed to start: {e}", self.state.id);
                    continue;
                }
            };
            let interest = Interest::READABLE | Interest::WRITABLE;
            if let Err(e) = self
                .poll
                .registry()
                .register(conn.stream.source(), Token(key), interest)
            {
                log::warn!("loop {}: cannot register a connection: {e}", self.state.id);
                continue;
            }
            entry.insert(conn);
            self.state.stats.shard(self.state.id).connection_opened();
            if self.config.read_on_accept {
                self.conns[key].mark_readable();
                self.pump(key);
            }
        }
    }

    /// Starts a drain: take the connections the kernel has already accepted for us, then close
    /// the listener (new connections are refused once every loop has), and close the
    /// keep-alive connections that are idle; busy ones are closed when they become idle, and
    /// connections not yet answered get [`DRAIN_GRACE`] to bring their request (see
    /// [`EventLoop::arm`]).
    fn begin_drain(&mut self) {
        let now = Instant::now();
        self.draining = Some(now + DRAIN_GRACE);
        self.state.now = now;
        // A client whose handshake the kernel completed has connected and may have sent its
        // request: closing the listener would reset it (a loop busy with a long turn, such as
        // an application run inline, leaves many there). They are served like any connection
        // accepted before the drain; past the capacity they are refused with the 503. Bounded,
        // so that a client connecting on and on cannot hold the drain here.
        self.accept_at_most(self.config.sizing.capacity.saturating_add(1));
        if let Some(mut listener) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
        }
        self.accept_paused = false;
        // QUIC connections hear GOAWAY and close once their requests are answered.
        self.with_quic(|q, env| q.drain(env));
        // Told first (an upgraded protocol: a WebSocket's close 1001; HTTP/2: GOAWAY, after
        // which it closes once its streams are done), then what is idle is closed; HTTP/1.1
        // connections busy with a request are told, in the response they wait for, that it is
        // the last.
        let told: Vec<usize> = self
            .conns
            .iter_mut()
            .filter_map(|(key, conn)| conn.wind_down().then_some(key))
            .collect();
        for key in told {
            self.pump(key);
        }
        let (idle, fresh): (Vec<usize>, Vec<usize>) = self
            .conns
            .iter()
            .filter(|(_, c)| c.is_idle())
            .map(|(k, _)| k)
            .partition(|&k| self.conns[k].answered());
        for key in idle {
            self.finish(key);
        }
        // A connection accepted and not yet answered: its request may be in the socket
        // already (arrived after the last poll) or on its way. Read it now; what it lacks
        // comes within the grace (`arm`).
        for key in fresh {
            self.conns[key].wind_down();
            self.conns[key].mark_readable();
            self.pump(key);
        }
    }
}

impl<H: Handler> Loop for EventLoop<H> {
    type H = H;
    type T = Stream<Socket>;

    fn conn(&mut self, key: usize) -> Option<Lent<'_, Self::T, H>> {
        let conn = self.conns.get_mut(key)?;
        Some(self.state.lend(conn))
    }

    fn state(&mut self) -> &mut State<H> {
        &mut self.state
    }

    /// Sets the connection's deadline for what it now waits for.
    ///
    /// While draining, an idle connection is closed, with one exception, the rule nginx and
    /// uvicorn follow for what is in flight: a connection accepted and not yet answered
    /// anything (its client connected before the drain and its request is on its way, or
    /// was already in the socket) is kept until the drain's grace ends ([`DRAIN_GRACE`]), and
    /// a request that comes within it is served, as the connection's last (`Connection:
    /// close`). A keep-alive connection idle between requests is closed at once: a client
    /// retries a request that meets a closing keep-alive connection (RFC 9112 §9.3.1).
    fn arm(&mut self, key: usize) {
        if let Some(grace) = self.draining {
            let conn = &mut self.conns[key];
            if conn.is_idle() {
                if conn.answered() || self.state.now >= grace {
                    return self.finish(key);
                }
                let at = conn.deadline(self.state.now, &self.config.timeouts);
                self.state
                    .wheel
                    .set(key, Some(at.map_or(grace, |at| at.min(grace))));
                return;
            }
        }
        let at = self.conns[key].deadline(self.state.now, &self.config.timeouts);
        self.state.wheel.set(key, at);
    }

    /// Closes a connection, or marks it dead if a job still refers to its slot.
    fn finish(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        if conn.is_orphan() {
            return;
        }
        conn.shut(&mut self.state.pool);
        self.state.wheel.disarm(key);
        if conn.work_out() {
            // The socket stays open until the job ends; stop hearing about it meanwhile. A job
            // still queued is dropped unrun when a worker takes it, which frees the slot then.
            let _ = self.poll.registry().deregister(conn.stream.source());
            conn.orphan();
            self.state.loops[self.state.owner].set_cancelled(key, true);
        } else {
            // Closing the descriptor removes it from the epoll set; no deregister call needed.
            self.free(key);
        }
    }

    fn free(&mut self, key: usize) {
        self.state.wheel.disarm(key);
        self.state.loops[self.state.owner].set_cancelled(key, false);
        drop(self.conns.remove(key));
        self.state.stats.shard(self.state.id).connection_closed();
    }
}

/// The `evloop` model in the registry.
pub struct Evloop;

impl super::Driver for Evloop {
    const INFO: super::Info = super::Info {
        name: "evloop",
        about: "Accept threads with event loops and a worker pool",
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
        flags: &[],
        shards: |common, _| common.accept_threads,
        listeners: |common, _| common.accept_threads,
        describe: |common, _| super::registry::describe_loops("accept thread", common),
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
        if let Addr::Udp(udp) = addr {
            return spawn_quic(*udp, service, common, config, stats);
        }
        let (listeners, bound) = bind_each(addr, common.accept_threads, common)?;
        let mut flat = Own::config(common, config);
        if config.http3 {
            let (limits, count) = (&config.quic, listeners.len());
            let transport = &mut flat.transport;
            flat.own.twin = quic::Twin::of_tls(&bound, count, common, limits, config.alt_svc, transport)?;
        }
        let listeners = listeners.into_iter().map(Some).collect();
        let server = super::loops::spawn::<S, EventLoop<S::Handler>>(
            listeners, service, common, flat, WAKER, stats,
        )
        .map_err(bind_error(addr))?;
        Ok((server, bound))
    }
}

/// Serves HTTP/3 on the UDP address `udp` (a `quic://` listener; a TLS listener's twin is
/// served by its own loops instead, [`Config::http3`]): one loop per accept thread, each with
/// its own UDP socket on the port, and `common.workers` workers; TLS from the listener's
/// transport, which must be [`Acceptor::Tls`](crate::net::Acceptor::Tls) (QUIC has TLS inside).
fn spawn_quic<S: Service>(
    udp: std::net::SocketAddr,
    service: S,
    common: &super::Common,
    config: &Config,
    stats: Arc<Stats>,
) -> Result<(Server, Addr), BindError> {
    let (twin, bound) = quic::Twin::listen(udp, common, &config.quic)?;
    // Loops without a listener, each given its UDP socket as a TLS listener's twin is.
    let mut flat = Own::config(common, config);
    let listeners = (0..common.accept_threads.max(1)).map(|_| None).collect();
    flat.own.twin = Some(twin);
    let server =
        super::loops::spawn::<S, EventLoop<S::Handler>>(listeners, service, common, flat, WAKER, stats)
            .map_err(super::registry::bind_error(&Addr::Udp(udp)))?;
    Ok((server, Addr::Udp(bound)))
}
