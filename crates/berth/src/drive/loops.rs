//! What the event-loop models (`evloop`, `uring`) do alike once they know a connection has
//! something to do, written once: acting on what a pump decided ([`Loop::settle`]: arm its
//! deadline, close it, open its file, offload its job), taking the replies of finished jobs
//! ([`Loop::take_replies`]) and expiring connections whose deadline passed
//! ([`Loop::expire_due`]). A model supplies how it waits and moves bytes, and what arming,
//! finishing and freeing a connection mean to it; the state the shared logic works on (the
//! handler, buffers, deadlines, where jobs go) is one [`State`] each model embeds.
//!
//! ```text
//!   evloop (mio poll) ─┐                       ┌─> arm / finish / free  (the model's own)
//!   uring  (ring)     ─┴─> pump ─> Fate ─> settle ─> files.open, workers::offload
//!                           take_replies, expire_due ─┘
//! ```

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use berth_proto::http::{Handler, Limits};
use crossbeam_channel::{Receiver, Sender};
use mio::{Poll, Token, Waker};

use super::pump::{Conn, Env, Fate};
use super::workers::{self, Done, LoopConn, LoopQueue, Offloaded, Task};
use super::{Server, Service, Timeouts};
use crate::files::Files;
use crate::net::{Acceptor, ConnSizing, Transport};
use crate::rt::DateCache;
use crate::rt::{BufPool, Control, Wheel};
use crate::stats::Stats;

/// Deadlines are kept to this precision: a timeout fires up to this much late, never early.
pub(super) const TIMER_RESOLUTION: Duration = Duration::from_millis(100);
/// Slots of the timing wheel: 1024 x 100 ms covers 102 s per lap.
pub(super) const TIMER_SLOTS: usize = 1024;
/// Within a long batch of events, finished jobs are picked up every this many.
pub(super) const REPLY_CHECK_EVERY: usize = 8;
/// How long a loop waits before accepting again after accepting failed (out of descriptors).
pub(super) const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Who a loop is and where its jobs go and come back: what `spawn` hands each loop thread.
pub(super) struct Wiring<J> {
    /// Thread number: for the handler, the stats shard and log lines.
    pub id: usize,
    /// Index among the loops started together: where workers post this loop's replies.
    pub owner: usize,
    pub queue: Option<Sender<Task<J, LoopConn>>>,
    pub loops: Arc<Vec<LoopQueue>>,
    pub replies: Receiver<(usize, Done)>,
    pub stats: Arc<Stats>,
}

/// What a loop reads of its settings, made from [`Common`](super::Common) and the model's
/// own part in one step ([`LoopConfig::new`]), each value once.
#[derive(Debug, Clone)]
pub(super) struct LoopConfig<C> {
    /// Most connections (`-C`: the slab and the timing wheel are made for it) and the size of
    /// each pooled buffer.
    pub sizing: ConnSizing,
    pub limits: Limits,
    /// Spare buffers kept for reuse.
    pub pooled_buffers: usize,
    /// Header, body, idle and write timeouts.
    pub timeouts: Timeouts,
    /// What accepted connections are served over.
    pub transport: Acceptor,
    /// Read a new connection at once instead of waiting for its first readiness event
    /// ([`Common::read_on_accept`](super::Common::read_on_accept)).
    pub read_on_accept: bool,
    /// Number of the first loop, for [`Service::handler`] and the stats shard.
    pub first_thread: usize,
    /// The model's own settings.
    pub own: C,
}

impl<C> LoopConfig<C> {
    /// A loop's settings: the common ones, the spare buffers it keeps, the number of its first
    /// loop and the model's own part.
    pub fn new(common: &super::Common, pooled_buffers: usize, first_thread: usize, own: C) -> Self {
        LoopConfig {
            sizing: common.sizing,
            limits: common.limits,
            pooled_buffers,
            timeouts: common.timeouts,
            transport: common.listen.transport.clone(),
            read_on_accept: common.read_on_accept,
            first_thread,
            own,
        }
    }
}

/// What an event loop keeps besides its connections and how it waits: the session state lent
/// to pumps, the deadlines, and where jobs go and come back. The shared logic reaches it
/// through [`Loop::state`].
pub(super) struct State<H: Handler> {
    pub id: usize,
    pub owner: usize,
    pub handler: H,
    pub pool: BufPool,
    pub date: DateCache,
    pub limits: Limits,
    /// Most bytes a connection's input may hold (head, body and a buffer of slack).
    pub max_input: usize,
    /// Where file answers are opened.
    pub files: Files,
    /// What a connection refused at capacity is told.
    pub refusal: &'static [u8],
    /// Connection deadlines.
    pub wheel: Wheel,
    /// Scratch for the keys the wheel hands back, kept to avoid allocating per tick.
    pub due: Vec<usize>,
    /// The time read once per loop turn, for every deadline set in it.
    pub now: Instant,
    pub queue: Option<Sender<Task<H::Job, LoopConn>>>,
    /// Every loop's completion queue: the return address of this loop's jobs.
    pub loops: Arc<Vec<LoopQueue>>,
    pub replies: Receiver<(usize, Done)>,
    pub stats: Arc<Stats>,
}

impl<H: Handler> State<H> {
    /// The state of a loop serving `service`, made on the thread that will run it (a handler
    /// may be tied to it).
    pub fn new<S: Service<Handler = H>, C>(
        service: &S,
        w: Wiring<H::Job>,
        sizes: &LoopConfig<C>,
    ) -> Self {
        State {
            id: w.id,
            owner: w.owner,
            handler: service.handler(w.id),
            pool: BufPool::new(
                sizes.sizing.buffer_size,
                sizes.pooled_buffers,
                sizes.pooled_buffers / 4,
            ),
            date: DateCache::default(),
            limits: sizes.limits,
            max_input: sizes.limits.max_input(sizes.sizing.buffer_size),
            files: service.files(),
            refusal: sizes.transport.refusal(service.refusal()),
            wheel: Wheel::new(
                TIMER_RESOLUTION,
                TIMER_SLOTS,
                sizes.sizing.capacity,
                Instant::now(),
            ),
            due: Vec::with_capacity(1024),
            now: Instant::now(),
            queue: w.queue,
            loops: w.loops,
            replies: w.replies,
            stats: w.stats,
        }
    }

    /// `conn` lent with the session state, for one pump.
    pub fn lend<'a, T>(&'a mut self, conn: &'a mut Conn<T>) -> Lent<'a, T, H> {
        let shared = Shared {
            handler: &mut self.handler,
            pool: &mut self.pool,
            limits: &self.limits,
            date: &mut self.date,
            max_input: self.max_input,
            stats: &self.stats,
        };
        (conn, shared)
    }
}

/// The state every event loop keeps for its connections' sessions, borrowed apart from the
/// connections themselves.
pub(super) struct Shared<'a, H: Handler> {
    pub handler: &'a mut H,
    pub pool: &'a mut BufPool,
    pub limits: &'a Limits,
    pub date: &'a mut DateCache,
    pub max_input: usize,
    pub stats: &'a Arc<Stats>,
}

impl<H: Handler> Shared<'_, H> {
    /// What a pump is lent: an unlimited budget (a loop pumps a connection until it would
    /// block), and no wind-down rule (a drain winds connections down from outside).
    fn env(&mut self) -> Env<'_, H> {
        Env {
            handler: self.handler,
            pool: self.pool,
            limits: self.limits,
            date: self.date,
            max_input: self.max_input,
            budget: usize::MAX,
            stats: self.stats,
            wind_down: None,
            going: None,
        }
    }
}

/// A connection and the session state, lent together for one pump.
pub(super) type Lent<'a, T, H> = (&'a mut Conn<T>, Shared<'a, H>);

/// What `count` loops and their workers are started with: each loop's poll (holding the
/// waker that workers wake it with, registered as `waker`), the loops' completion queues and
/// each loop's receiving end, the workers' queue (none with no workers: jobs run on the loop)
/// and threads.
pub(super) struct Started<J> {
    pub polls: Vec<Poll>,
    pub loops: Arc<Vec<LoopQueue>>,
    pub replies: Vec<Receiver<(usize, Done)>>,
    pub wakers: Vec<Arc<Waker>>,
    pub queue: Option<Sender<Task<J, LoopConn>>>,
    pub workers: Vec<JoinHandle<()>>,
}

/// Makes the return addresses of `count` loops of `common.sizing.capacity` slots each and starts
/// `common.workers` workers fed by a queue of `common.queue_capacity` jobs.
pub(super) fn start<J: berth_proto::http::Job>(
    count: usize,
    common: &super::Common,
    waker: Token,
    stats: &Arc<Stats>,
) -> io::Result<Started<J>> {
    let (capacity, workers) = (common.sizing.capacity, common.workers);
    let mut polls = Vec::with_capacity(count);
    let mut reply_to = Vec::with_capacity(count);
    let mut replies = Vec::with_capacity(count);
    for _ in 0..count {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), waker)?);
        let (tx, rx) = crossbeam_channel::unbounded();
        reply_to.push(LoopQueue::new(tx, waker, capacity));
        replies.push(rx);
        polls.push(poll);
    }
    let wakers = reply_to.iter().map(|r| r.waker.clone()).collect();
    let (queue_tx, queue_rx) = crossbeam_channel::bounded(common.queue_capacity.max(1));
    let threads = workers::spawn(workers, queue_rx, stats.clone())?;
    Ok(Started {
        polls,
        loops: Arc::new(reply_to),
        replies,
        wakers,
        queue: (workers > 0).then_some(queue_tx),
        workers: threads,
    })
}

/// What a loop thread is given by [`spawn`], besides its service: who it is, its poll (with
/// the waker workers wake it through), its listener (none for a loop that serves QUIC only),
/// the stop control and its settings.
pub(super) struct Parts<J, C> {
    pub wiring: Wiring<J>,
    pub poll: Poll,
    pub listener: Option<crate::net::Listener>,
    pub ctl: Arc<Control>,
    pub config: LoopConfig<C>,
}

/// A loop `spawn` starts: made on its own thread (a handler or a ring may be tied to it),
/// then run until the server stops.
pub(super) trait Runs: Sized {
    type H: Handler;
    type Own: Clone + Send + 'static;
    /// What its threads are called, `berth-<KIND>-<id>`, and its log lines say.
    const KIND: &'static str;
    /// Sets the loop up; an error stops the server from starting.
    fn make<S: Service<Handler = Self::H>>(
        service: &S,
        parts: Parts<<Self::H as Handler>::Job, Self::Own>,
    ) -> io::Result<Self>;
    /// Serves until the server stops.
    fn run(&mut self) -> io::Result<()>;
}

/// Starts one loop `L` per listener (TCP listeners should share a port through `SO_REUSEPORT`;
/// copies of one UNIX socket share its queue; `None`: a loop without one, serving what its
/// settings give it, a `quic://` listener's UDP socket)
/// and `common.workers` workers: the `spawn` of `evloop` and `uring`. Returns once every loop
/// is set up, or with the first failure to set one up (the others are then stopped).
pub(super) fn spawn<S, L>(
    listeners: Vec<Option<crate::net::Listener>>,
    service: S,
    common: &super::Common,
    config: LoopConfig<L::Own>,
    waker: Token,
    stats: Arc<Stats>,
) -> io::Result<Server>
where
    S: Service,
    L: Runs<H = S::Handler>,
{
    let ctl = Arc::new(Control::default());
    let Started {
        polls,
        loops,
        replies,
        wakers,
        queue,
        workers: mut threads,
    } = start::<<S::Handler as Handler>::Job>(listeners.len(), common, waker, &stats)?;
    let (ready_tx, ready_rx) = crossbeam_channel::unbounded::<io::Result<()>>();
    let count = listeners.len();
    for (index, ((listener, poll), replies)) in
        listeners.into_iter().zip(polls).zip(replies).enumerate()
    {
        if let Some(listener) = &listener {
            listener.set_nonblocking(true)?;
        }
        let id = config.first_thread + index;
        let parts = Parts {
            wiring: Wiring {
                id,
                owner: index,
                queue: queue.clone(),
                loops: loops.clone(),
                replies,
                stats: stats.clone(),
            },
            poll,
            listener,
            ctl: ctl.clone(),
            config: config.clone(),
        };
        let (service, ready) = (service.clone(), ready_tx.clone());
        let thread = std::thread::Builder::new()
            .name(format!("berth-{}-{id}", L::KIND))
            .spawn(move || {
                let mut lp = match L::make(&service, parts) {
                    Ok(lp) => lp,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                let _ = ready.send(Ok(()));
                drop(ready);
                if let Err(e) = lp.run() {
                    log::error!("{} loop {id} failed: {e}", L::KIND);
                }
            })?;
        threads.push(thread);
    }
    drop(ready_tx);
    drop(queue);
    let server = Server::new(ctl, threads);
    server.ctl.wake_on_stop(wakers);
    for _ in 0..count {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                server.shutdown();
                return Err(e);
            }
            Err(_) => {
                server.shutdown();
                return Err(io::Error::other(format!(
                    "a {} loop ended while starting",
                    L::KIND
                )));
            }
        }
    }
    Ok(server)
}

/// An event loop, as the shared logic sees it.
pub(super) trait Loop {
    type H: Handler;
    type T: Transport;

    /// The live connection of slot `key` with the session state ([`State::lend`]), if the
    /// slot holds one.
    fn conn(&mut self, key: usize) -> Option<Lent<'_, Self::T, Self::H>>;
    /// The loop's [`State`].
    fn state(&mut self) -> &mut State<Self::H>;

    /// The connection goes on: wait for its next event, with its deadline set.
    fn arm(&mut self, key: usize);
    /// The connection is over (it may keep its slot while a job refers to it).
    fn finish(&mut self, key: usize);
    /// Frees slot `key` (a dead connection whose job ended).
    fn free(&mut self, key: usize);
    /// Slot `key`'s deadline passed: true if the model dealt with it itself (a connection it
    /// is closing, say), false to expire the session.
    fn overdue(&mut self, key: usize) -> bool {
        let _ = key;
        false
    }

    /// Pumps the connection of slot `key` and acts on what it decided.
    fn pump(&mut self, key: usize) {
        let Some((conn, mut shared)) = self.conn(key) else {
            return;
        };
        let fate = conn.pump(&mut shared.env());
        self.settle(key, fate);
    }

    /// Acts on what a connection's pump decided, until it waits or closes.
    fn settle(&mut self, key: usize, mut fate: Fate<<Self::H as Handler>::Job>) {
        loop {
            if !matches!(fate, Fate::Close) {
                self.give_waker(key);
            }
            match fate {
                Fate::Keep => return self.arm(key),
                Fate::Close => return self.finish(key),
                // Not with an unlimited budget; if it ever were, going on is right.
                Fate::Again => {
                    let Some((conn, mut shared)) = self.conn(key) else {
                        return;
                    };
                    fate = conn.pump(&mut shared.env());
                }
                // Files are opened here, at once: see `drive::pump`.
                Fate::Open { stream, request } => {
                    let found = self.state().files.open(&request);
                    let Some((conn, mut shared)) = self.conn(key) else {
                        return;
                    };
                    fate = conn.file_opened(stream, &request, found, &mut shared.env());
                }
                Fate::Offload {
                    stream,
                    job,
                    ticket,
                } => {
                    let st = self.state();
                    let reply_to = || LoopConn {
                        loops: st.loops.clone(),
                        owner: st.owner,
                        conn: key,
                        stream,
                    };
                    match workers::offload(st.queue.as_ref(), job, ticket, reply_to, &st.stats) {
                        Offloaded::Queued => {
                            let Some((conn, mut shared)) = self.conn(key) else {
                                return;
                            };
                            if !conn.pump_again() {
                                return self.arm(key);
                            }
                            fate = conn.pump(&mut shared.env());
                        }
                        Offloaded::Answer(reply) => {
                            let Some((conn, mut shared)) = self.conn(key) else {
                                return;
                            };
                            fate = conn.complete(stream, reply, &mut shared.env());
                        }
                        Offloaded::Gone => return self.finish(key),
                    }
                }
            }
        }
    }

    /// Gives a connection that began speaking HTTP/2 the way its streams wake this loop: a
    /// post of [`Done::More`], as a streamed body's producer makes.
    fn give_waker(&mut self, key: usize) {
        if !self.conn(key).is_some_and(|(c, _)| c.wants_waker()) {
            return;
        }
        let st = self.state();
        let to = LoopConn {
            loops: st.loops.clone(),
            owner: st.owner,
            conn: key,
            stream: 0,
        };
        if let Some((conn, _)) = self.conn(key) {
            conn.set_waker(std::sync::Arc::new(move || workers::ReplyTo::more(&to)));
        }
    }

    /// Hands every finished job's reply to its connection (or frees the slot of one whose
    /// peer has gone).
    fn take_replies(&mut self) {
        while let Ok((key, done)) = self.state().replies.try_recv() {
            let (stream, reply) = match done {
                Done::Reply(stream, reply) => (stream, Some(reply)),
                Done::Cancelled => (0, None),
                // A streamed body has more. Its connection may have ended since (and the slot
                // been reused: one extra pump is harmless).
                Done::More => {
                    if let Some((conn, _)) = self.conn(key).filter(|(c, _)| !c.is_orphan()) {
                        conn.poke();
                        self.pump(key);
                    }
                    continue;
                }
            };
            let Some((conn, mut shared)) = self.conn(key) else {
                debug_assert!(false, "reply for a freed slot");
                continue;
            };
            // A cancelled job's slot is dead: its reply (none) frees it, once no other job of
            // the connection (HTTP/2's streams) is out.
            let (false, Some(reply)) = (conn.is_orphan(), reply) else {
                debug_assert!(conn.is_orphan(), "a live connection's job was cancelled");
                if conn.work_back() {
                    self.free(key);
                }
                continue;
            };
            let fate = conn.complete(stream, reply, &mut shared.env());
            self.settle(key, fate);
        }
    }

    /// Expires the connections whose deadline has passed.
    fn expire_due(&mut self) {
        let st = self.state();
        let mut keys = std::mem::take(&mut st.due);
        st.wheel.advance(st.now, &mut keys);
        for &key in &keys {
            if self.overdue(key) {
                continue;
            }
            let Some((conn, mut shared)) = self.conn(key) else {
                continue;
            };
            if conn.is_orphan() {
                continue;
            }
            log::debug!("connection {key} timed out");
            let fate = conn.expire(&mut shared.env());
            self.settle(key, fate);
        }
        keys.clear();
        self.state().due = keys;
    }
}
