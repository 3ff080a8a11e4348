//! `actor`: seed 002's model. Every connection is an actor with a mailbox; a pool of `-A`
//! scheduler threads runs the actors, each at most `--actor-batch` messages at a time before it
//! yields its thread; one poller thread turns socket readiness into messages; a Files actor owns
//! file-system access for `/files`; slow jobs go to the `-w` workers, whose replies come back as
//! messages.
//!
//! ```text
//!   listener ─ accept ─┐
//!   sockets ─ ready ───┴─> poller (mio) ─ Ready, Expire, Drain ─> connection actor
//!                                                                  │          ^
//!                                            OpenMsg(FileRequest)  v          │ File(open file)
//!                                                               Files actor ──┘
//!   connection actor ─ job ─> workers (-w) ─ Done(reply) ─> connection actor
//!   connection actor ─ Continue ─> itself (more to do: to the back of the run queue)
//!
//!   Every actor runs on the -A scheduler threads, at most --actor-batch messages at a time.
//! ```
//!
//! The pieces: [`runtime`] (actors, mailboxes, batches; knows nothing of HTTP), the connection
//! actor (the pumped connection of every model, non-blocking as in `evloop`, driven by
//! messages, one socket operation per message), and the Files actor. The seed's connection
//! actor polled its socket with a 25 ms read timeout; here the poller tells an actor when its
//! socket is ready, so an idle connection costs no scheduler time at all.

mod connection;
mod files;
pub mod runtime;

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::http::{Handler, Limits};
use crossbeam_channel::Receiver;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use self::connection::{ConnActor, ConnMsg, Shared};
use self::files::FilesActor;
use self::runtime::{Addr, Runtime, Spawner};
use super::accept;
use crate::rt::DateCache;
use super::pump::Conn;
use super::workers;
use super::{Server, Service, Timeouts};
use crate::net::{Acceptor, ConnSizing, Evented, EventedListener, Listener};
use crate::rt::{BufPool, Control};
use crate::stats::Stats;

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);
/// How often the poller looks for connections past their deadline.
const TICK: Duration = Duration::from_millis(100);
/// How often accepting is retried after running out of descriptors.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// How long a stop waits for connection actors to close their sockets.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Settings of the `actor` model of its own; scheduler threads (`-A`), capacity, workers,
/// limits, timeouts and buffer sizes come from [`Common`](super::Common).
#[derive(Debug, Clone)]
pub struct Config {
    /// Most messages an actor handles before it yields its thread (`--actor-batch`). Seed 002
    /// settled on 2: 1 gives the steadiest latency, large batches let busy actors hog threads.
    pub batch: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { batch: 2 }
    }
}

/// What the poller and the actors read: the [`Common`](super::Common) settings they use and
/// the model's own [`Config`], side by side in one flat struct.
#[derive(Debug, Clone)]
struct Flat {
    /// Scheduler threads (`-A`).
    schedulers: usize,
    /// Most messages an actor handles before it yields its thread (`--actor-batch`).
    batch: usize,
    /// Most simultaneous connections (`-C`; more are refused) and the size of a connection's
    /// read and write buffers.
    sizing: ConnSizing,
    /// Worker threads for offloaded jobs (`-w`). With 0, the connection actor runs the job.
    workers: usize,
    /// Jobs that may wait for a worker; beyond it a job is answered 503.
    queue_capacity: usize,
    /// Request limits.
    limits: Limits,
    /// Header, body, idle and write timeouts.
    timeouts: Timeouts,
    /// What accepted connections are served over.
    transport: Acceptor,
}

impl Flat {
    fn new(common: &super::Common, own: &Config) -> Flat {
        Flat {
            schedulers: common.accept_threads,
            batch: own.batch,
            sizing: common.sizing,
            workers: common.workers,
            queue_capacity: common.queue_capacity,
            limits: common.limits,
            timeouts: common.timeouts,
            transport: common.listen.transport.clone(),
        }
    }
}

/// Serves `listener` with connection actors on `common.accept_threads` scheduler threads.
/// Returns once every thread runs.
pub fn spawn<S: Service>(
    listener: Listener,
    service: S,
    common: &super::Common,
    config: &Config,
    stats: Arc<Stats>,
) -> io::Result<Server>
where
    <S::Handler as Handler>::Job: Send,
    S::Handler: Send + 'static,
{
    let config = Flat::new(common, config);
    let ctl = Arc::new(Control::default());
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    listener.set_nonblocking(true)?;
    let mut listener = listener.into_evented();
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;

    let runtime = Runtime::new(config.schedulers, "berth-actor")?;
    let spawner = runtime.spawner();
    let files = spawner.spawn(
        FilesActor {
            files: service.files(),
        },
        config.batch,
    );
    let (queue_tx, queue_rx) = crossbeam_channel::bounded(config.queue_capacity.max(1));
    let mut threads = workers::spawn(config.workers, queue_rx, stats.clone())?;
    let (closed_tx, closed) = crossbeam_channel::unbounded();
    let shared = Arc::new(Shared {
        limits: config.limits,
        timeouts: config.timeouts,
        max_input: config.limits.max_input(config.sizing.buffer_size),
        buffer_size: config.sizing.buffer_size,
        files,
        queue: (config.workers > 0).then_some(queue_tx),
        stats: stats.clone(),
        open: AtomicUsize::new(0),
        closed: closed_tx,
        epoch: Instant::now(),
    });
    let poller = {
        let ctl = ctl.clone();
        std::thread::Builder::new()
            .name("berth-poller".into())
            .spawn(move || {
                let mut poller = Poller {
                    poll,
                    listener: Some(listener),
                    conns: Slab::new(),
                    closed,
                    spawner,
                    shared,
                    service,
                    stats,
                    ctl,
                    config,
                    serial: 0,
                    accept_paused: false,
                    draining: false,
                };
                if let Err(e) = poller.run() {
                    log::error!("actor poller failed: {e}");
                }
                poller.stop();
                runtime.shutdown();
            })?
    };
    threads.push(poller);
    let server = Server::new(ctl, threads);
    server.ctl.wake_on_stop([waker]);
    Ok(server)
}

/// A connection as the poller knows it.
struct Entry {
    addr: Addr<ConnMsg>,
    deadline: Arc<AtomicU64>,
}

/// The poller thread: accepts, turns readiness into messages, sends `Expire` to connections
/// past their deadline, and runs drains and stops.
struct Poller<S: Service> {
    poll: Poll,
    /// `None` once a drain has closed it.
    listener: Option<EventedListener>,
    conns: Slab<Entry>,
    /// Keys of connections whose actors have closed them.
    closed: Receiver<usize>,
    spawner: Spawner,
    shared: Arc<Shared<<S::Handler as Handler>::Job>>,
    service: S,
    stats: Arc<Stats>,
    ctl: Arc<Control>,
    config: Flat,
    /// Numbers connections, for their handler and stats shard.
    serial: usize,
    accept_paused: bool,
    draining: bool,
}

impl<S: Service> Poller<S>
where
    <S::Handler as Handler>::Job: Send,
    S::Handler: Send + 'static,
{
    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut next_tick = Instant::now() + TICK;
        while !self.ctl.stop_now() {
            if self.ctl.draining() && !self.draining {
                self.begin_drain();
            }
            if self.draining && self.shared.open.load(Ordering::Acquire) == 0 {
                break;
            }
            let timeout = next_tick.saturating_duration_since(Instant::now());
            let timeout = if self.accept_paused {
                timeout.min(ACCEPT_RETRY)
            } else {
                timeout
            };
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            self.free_closed();
            if self.accept_paused {
                self.accept();
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(key) => {
                        let Some(entry) = self.conns.get(key) else {
                            continue;
                        };
                        let hup = event.is_read_closed() || event.is_error();
                        entry.addr.send(ConnMsg::Ready {
                            readable: event.is_readable() || hup,
                            writable: event.is_writable() || event.is_write_closed(),
                            hup,
                        });
                    }
                }
            }
            let now = Instant::now();
            if now >= next_tick {
                next_tick = now + TICK;
                self.expire_due(now);
            }
        }
        Ok(())
    }

    fn free_closed(&mut self) {
        while let Ok(key) = self.closed.try_recv() {
            if self.conns.contains(key) {
                self.conns.remove(key);
            }
        }
    }

    fn accept(&mut self) {
        self.accept_at_most(usize::MAX);
    }

    /// Accepts what waits in the listener's queue, at most `most` connections.
    fn accept_at_most(&mut self, most: usize) {
        for _ in 0..most {
            let Some(listener) = &self.listener else {
                return;
            };
            let refusal = self.config.transport.refusal(self.service.refusal());
            let Some(stream) = accept::next(
                listener,
                &mut self.accept_paused,
                "actor poller",
                refusal,
                self.stats.shard(0),
            ) else {
                return;
            };
            if self.shared.open.load(Ordering::Acquire) >= self.config.sizing.capacity {
                let (shard, capacity) = (self.stats.shard(0), self.config.sizing.capacity);
                let refusal = self.config.transport.refusal(self.service.refusal());
                accept::refuse(stream, refusal, shard, capacity, "actor");
                continue;
            }
            let mut conn = match Conn::accept(stream, &self.config.transport) {
                Ok(conn) => conn,
                Err(e) => {
                    log::debug!("actor poller: a connection failed to start: {e}");
                    continue;
                }
            };
            // Keys of closed connections must be free before they are handed out again.
            self.free_closed();
            let entry = self.conns.vacant_entry();
            let key = entry.key();
            let interest = Interest::READABLE | Interest::WRITABLE;
            if let Err(e) = self
                .poll
                .registry()
                .register(conn.stream.source(), Token(key), interest)
            {
                log::warn!("actor poller: cannot register a connection: {e}");
                continue;
            }
            self.serial = self.serial.wrapping_add(1);
            let shard = self.serial;
            let deadline = Arc::new(AtomicU64::new(0));
            let actor = ConnActor {
                conn,
                key,
                shard,
                handler: self.service.handler(shard),
                pool: BufPool::new(self.shared.buffer_size, 2, 0),
                date: DateCache::default(),
                deadline: deadline.clone(),
                draining: None,
                shared: self.shared.clone(),
            };
            self.shared.open.fetch_add(1, Ordering::AcqRel);
            self.stats.shard(shard).connection_opened();
            let addr = self.spawner.spawn(actor, self.config.batch);
            entry.insert(Entry { addr, deadline });
        }
    }

    /// Sends `Expire` to every connection whose deadline has passed (the actor checks again:
    /// it may have moved on since).
    fn expire_due(&mut self, now: Instant) {
        let now = self.shared.millis(now);
        for (_, entry) in self.conns.iter() {
            let due = entry.deadline.load(Ordering::Acquire);
            if due != 0 && due <= now {
                entry.addr.send(ConnMsg::Expire);
            }
        }
    }

    /// Takes the connections the kernel has already accepted (as `evloop` does: closing the
    /// listener would reset them), closes the listener and tells every connection: idle ones
    /// close, busy ones finish the response in progress as their last.
    fn begin_drain(&mut self) {
        // Bounded, so that a client connecting on and on cannot hold the drain here.
        self.accept_at_most(self.config.sizing.capacity.saturating_add(1));
        self.draining = true;
        if let Some(mut listener) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
        }
        self.accept_paused = false;
        for (_, entry) in self.conns.iter() {
            entry.addr.send(ConnMsg::Drain);
        }
    }

    /// Closes every connection still open and waits (bounded) for their actors to do it.
    fn stop(&mut self) {
        self.listener = None;
        self.free_closed();
        for (_, entry) in self.conns.iter() {
            entry.addr.send(ConnMsg::Shutdown);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while self.shared.open.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.conns.clear();
    }
}

/// The `actor` model in the registry (not to be confused with [`runtime::Actor`], what an
/// actor is).
pub struct Actor;

impl super::Driver for Actor {
    const INFO: super::Info = super::Info {
        name: "actor",
        about: "An actor per connection, scheduler threads, a Files actor",
        needs: super::Needs {
            forks: false,
            children_listen: false,
            accept_threads: super::AcceptThreads::PerServer,
            workers: true,
        },
        caps: super::Caps::READINESS,
        flags: &[super::Flag {
            long: "actor-batch",
            value_name: "N",
            help: "`actor` model: most messages an actor handles before it yields its scheduler \
                   thread (seed 002 settled on 2; 1 is the steadiest latency, larger lets busy \
                   connections run on).",
            get: |m| m.actor.batch,
            set: |m, n| m.actor.batch = n.get(),
        }],
        // Connections count into shards by their serial number.
        shards: |_, _| crate::stats::MAX_SHARDS,
        listeners: super::registry::one_listener,
        describe: |common, m| {
            use super::registry::count;
            format!(
                "{}, batch {}, {}, capacity {}",
                count(common.accept_threads, "scheduler thread"),
                m.actor.batch,
                count(common.workers, "worker"),
                common.sizing.capacity
            )
        },
    };
    type Config = Config;

    fn spawn<S: Service>(
        addr: &crate::net::Addr,
        common: &super::Common,
        config: &Config,
        service: S,
        stats: Arc<Stats>,
    ) -> Result<(Server, crate::net::Addr), crate::net::BindError>
    where
        S::Handler: Send + 'static,
    {
        super::registry::on_one_listener(addr, common, |listener| {
            spawn(listener, service, common, config, stats)
        })
    }
}
