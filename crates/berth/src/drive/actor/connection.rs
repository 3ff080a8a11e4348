//! The connection actor: one per connection, owning its socket and its HTTP session (the
//! pumped [`Conn`] every model uses, non-blocking as in the event loop), driven by messages:
//! readiness from the poller, its own "go on" messages, job replies from the workers and files
//! from the Files actor.
//!
//! Each message does a bounded amount of socket work ([`BUDGET`] reads or body sends);
//! when more could be done at once the actor sends itself [`ConnMsg::Continue`] and returns, so
//! other actors get the thread in between — the "recursive behaviour" of seed 002, whose cost
//! and benefit the runtime's batch size trades.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use berth_proto::http::{FileError, FileRequest, Handler, Limits, Reply};
use crossbeam_channel::Sender;

use super::runtime::{Actor, Addr, Context};
use crate::rt::{DateCache, DRAIN_GRACE};
use crate::drive::pump::{Conn, Env, Fate};
use crate::files::OpenFile;
use crate::drive::workers::{self, Offloaded, ReplyTo, Task};
use crate::drive::Timeouts;
use crate::rt::BufPool;
use crate::stats::Stats;

/// Socket operations per message: one read or one body chunk, then yield.
pub(super) const BUDGET: usize = 1;

/// What a connection actor is sent.
pub(super) enum ConnMsg {
    /// The poller saw readiness on the socket.
    Ready {
        readable: bool,
        writable: bool,
        /// The peer's FIN or an error: a short read no longer means "drained".
        hup: bool,
    },
    /// Sent to itself: go on with what the budget cut short.
    Continue,
    /// A streamed body has more (a reply's, or room for the request's): pump again.
    More,
    /// A worker ran the job of the connection's stream (0 for HTTP/1.1).
    Done(u64, Reply),
    /// The Files actor's answer.
    File(u64, FileRequest, Result<OpenFile, FileError>),
    /// The poller found the connection's deadline passed.
    Expire,
    /// A drain began: close if idle, else make the response in progress the last.
    Drain,
    /// Close now.
    Shutdown,
}

/// What the Files actor is sent.
pub(super) struct OpenMsg {
    pub stream: u64,
    pub request: FileRequest,
    pub reply_to: Addr<ConnMsg>,
}

/// A job's return address: the connection actor. An actor whose peer has gone closes its
/// socket and stops at once, so a stopped actor means a cancelled job.
pub(super) struct ActorReply(pub Addr<ConnMsg>, pub u64);

impl ReplyTo for ActorReply {
    fn cancelled(&self) -> bool {
        self.0.is_stopped()
    }

    fn reply(&self, reply: Option<Reply>) {
        if let Some(reply) = reply {
            self.0.send(ConnMsg::Done(self.1, reply));
        }
    }

    fn more(&self) {
        self.0.send(ConnMsg::More);
    }
}

/// What every connection actor of a server shares.
pub(super) struct Shared<J> {
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub max_input: usize,
    pub buffer_size: usize,
    /// The Files actor.
    pub files: Addr<OpenMsg>,
    /// The workers' queue; `None` runs jobs in the actor itself.
    pub queue: Option<Sender<Task<J, ActorReply>>>,
    pub stats: Arc<Stats>,
    /// Connections open, for the capacity check.
    pub open: AtomicUsize,
    /// Slab keys of closed connections, for the poller to free.
    pub closed: Sender<usize>,
    /// Deadlines are milliseconds since this instant (0: none).
    pub epoch: Instant,
}

impl<J> Shared<J> {
    /// `at` as stored in a deadline cell.
    pub fn millis(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_millis() as u64 + 1
    }
}

/// One connection.
pub(super) struct ConnActor<H: Handler> {
    pub conn: Conn<crate::net::Stream<crate::net::Socket>>,
    /// Its key in the poller's slab.
    pub key: usize,
    /// Its stats shard.
    pub shard: usize,
    pub handler: H,
    /// Its own two buffers, kept while it lives (actors move between threads, so there is no
    /// per-thread pool to return them to).
    pub pool: BufPool,
    pub date: DateCache,
    /// Read by the poller's timer scan.
    pub deadline: Arc<AtomicU64>,
    /// A drain began; until this instant (its grace, [`DRAIN_GRACE`]) a connection that has
    /// answered nothing yet is kept for the request its client may still send.
    pub draining: Option<Instant>,
    pub shared: Arc<Shared<H::Job>>,
}

impl<H: Handler + Send + 'static> Actor for ConnActor<H>
where
    H::Job: Send,
{
    type Msg = ConnMsg;

    fn handle(&mut self, msg: ConnMsg, cx: &mut Context<'_, Self>) {
        self.date.refresh();
        let shared = self.shared.clone();
        let mut env = Env {
            handler: &mut self.handler,
            pool: &mut self.pool,
            limits: &shared.limits,
            date: &mut self.date,
            max_input: shared.max_input,
            budget: BUDGET,
            stats: &shared.stats,
            wind_down: None,
            going: None,
        };
        let fate = match msg {
            ConnMsg::Ready {
                readable,
                writable,
                hup,
            } => {
                if readable {
                    self.conn.mark_readable();
                }
                if writable {
                    self.conn.mark_writable();
                }
                if hup {
                    self.conn.mark_peer_fin();
                }
                self.conn.pump(&mut env)
            }
            ConnMsg::Continue => self.conn.pump(&mut env),
            ConnMsg::More => {
                self.conn.poke();
                self.conn.pump(&mut env)
            }
            ConnMsg::Done(stream, reply) => self.conn.complete(stream, reply, &mut env),
            ConnMsg::File(stream, request, found) => {
                self.conn.file_opened(stream, &request, found, &mut env)
            }
            ConnMsg::Expire => {
                let due = self.deadline.load(Ordering::Acquire);
                if due != 0 && due <= shared.millis(Instant::now()) {
                    log::debug!("actor connection {} timed out", self.key);
                    self.conn.expire(&mut env)
                } else {
                    Fate::Keep
                }
            }
            ConnMsg::Drain => {
                self.draining = Some(Instant::now() + DRAIN_GRACE);
                // An upgraded protocol is told now (a WebSocket's close 1001).
                if self.conn.wind_down() {
                    self.conn.pump(&mut env)
                } else {
                    Fate::Keep
                }
            }
            ConnMsg::Shutdown => Fate::Close,
        };
        self.settle(fate, cx);
    }
}

impl<H: Handler + Send + 'static> ConnActor<H>
where
    H::Job: Send,
{
    /// Acts on what the connection needs next.
    fn settle(&mut self, mut fate: Fate<H::Job>, cx: &mut Context<'_, Self>) {
        loop {
            if self.conn.wants_waker() {
                let to = ActorReply(cx.addr(), 0);
                self.conn
                    .set_waker(Arc::new(move || workers::ReplyTo::more(&to)));
            }
            fate = match fate {
                Fate::Keep if self.drained() => Fate::Close,
                Fate::Keep => return self.arm(),
                Fate::Again => {
                    cx.addr().send(ConnMsg::Continue);
                    return self.arm();
                }
                Fate::Open { stream, request } => {
                    let asked = self.shared.files.send(OpenMsg {
                        stream,
                        request,
                        reply_to: cx.addr(),
                    });
                    if asked {
                        return self.arm();
                    }
                    // The Files actor is gone: only during shutdown.
                    Fate::Close
                }
                Fate::Offload { stream, job, ticket } => {
                    let (queue, stats) = (self.shared.queue.as_ref(), &self.shared.stats);
                    let reply_to = || ActorReply(cx.addr(), stream);
                    let reply = match workers::offload(queue, job, ticket, reply_to, stats) {
                        Offloaded::Queued => {
                            // Go on reading, so that a peer that resets while the job waits is
                            // seen and the job dropped (see `workers`); HTTP/2's streams behind
                            // the job are looked at next.
                            if self.conn.cut_short() || self.conn.pump_again() {
                                cx.addr().send(ConnMsg::Continue);
                            }
                            return self.arm();
                        }
                        Offloaded::Answer(reply) => reply,
                        Offloaded::Gone => {
                            self.close(cx);
                            return;
                        }
                    };
                    let shared = self.shared.clone();
                    let mut env = Env {
                        handler: &mut self.handler,
                        pool: &mut self.pool,
                        limits: &shared.limits,
                        date: &mut self.date,
                        max_input: shared.max_input,
                        budget: BUDGET,
                        stats: &shared.stats,
                        wind_down: None,
                        going: None,
                    };
                    self.conn.complete(stream, reply, &mut env)
                }
                Fate::Close => return self.close(cx),
            };
        }
    }

    /// Publishes the deadline for what the connection now waits for.
    fn arm(&mut self) {
        let at = self.conn.deadline(Instant::now(), &self.shared.timeouts);
        // An idle connection kept through a drain is given up at the grace's end.
        let at = match self.draining.filter(|_| self.conn.is_idle()) {
            Some(grace) => Some(at.map_or(grace, |at| at.min(grace))),
            None => at,
        };
        let millis = at.map_or(0, |at| self.shared.millis(at));
        self.deadline.store(millis, Ordering::Release);
    }

    /// While draining, whether the connection is done: idle, and either it has answered
    /// something (a keep-alive connection between requests: a client retries a request that
    /// meets its close, RFC 9112 §9.3.1) or the grace is over. A connection accepted and not
    /// yet answered is kept till then: its client connected before the drain and its request
    /// may be on its way (the rule nginx and uvicorn follow, and `evloop`'s).
    fn drained(&self) -> bool {
        self.draining.is_some_and(|grace| {
            self.conn.is_idle() && (self.conn.answered() || Instant::now() >= grace)
        })
    }

    /// Closes the connection and stops the actor (the socket closes when it is dropped).
    fn close(&mut self, cx: &mut Context<'_, Self>) {
        self.conn.shut(&mut self.pool);
        cx.stop();
    }
}

/// However the actor ends — closed, panicked, or dropped unrun at shutdown — the connection is
/// counted closed and its slab key given back.
impl<H: Handler> Drop for ConnActor<H> {
    fn drop(&mut self) {
        self.deadline.store(0, Ordering::Release);
        self.shared.stats.shard(self.shard).connection_closed();
        self.shared.open.fetch_sub(1, Ordering::AcqRel);
        let _ = self.shared.closed.send(self.key);
    }
}
