//! The worker pool: threads fed by one FIFO queue, running offloaded jobs and posting each
//! reply back to whoever owns the connection (seed 001's worker threads and wait queue): the
//! event loop that owns it, or in the actor model the connection's actor.
//!
//! A job whose client has gone (reset the connection) while it waited is not run: a worker
//! that takes it asks its return address whether it is [`ReplyTo::cancelled`], and if so drops
//! it, counts it, and tells the owner ([`ReplyTo::reply`] with `None`) so that the owner frees
//! the slot it kept for the reply. Without this a burst of clients that send a slow request and
//! reset at once would leave the queue full of work nobody waits for, ahead of honest requests.
//!
//! A deferred job ([`Job::DEFERRED`]: answered by another thread's event loop, a Python ASGI
//! app's say) skips the pool: [`offload`] starts it on the caller's thread with an [`Answer`]
//! that posts to the same return address, and the connection waits for it without holding a
//! worker. The answer's streamed body, if any, wakes the owner the same way
//! ([`ReplyTo::more`]) each time the producer pushes into a parked stream.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use berth_proto::http::{Answer, Job, Reply, Respond};
use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::stats::Stats;

/// Where a job's reply goes once the job has run.
pub(crate) trait ReplyTo: Send + 'static {
    /// Whether the connection the job would answer has gone, so the job need not run.
    fn cancelled(&self) -> bool;

    /// Hands the reply over (and wakes its owner); `None` if the job was cancelled. The owner
    /// may be gone (shutdown); then nobody needs the reply.
    fn reply(&self, reply: Option<Reply>);

    /// The connection's streamed body has more: wake the owner to pump it.
    fn more(&self);
}

/// What a loop's completion queue carries for a connection.
pub(crate) enum Done {
    /// The reply of a job for the stream (0 for HTTP/1.1, see `Fate::Offload`).
    Reply(u64, Reply),
    /// The job was dropped unrun: its peer left.
    Cancelled,
    /// The streamed body the connection sends has more.
    More,
}

/// An event loop's completion queue, the waker of its poll, and a cancelled flag per slot.
pub(crate) struct LoopQueue {
    pub done: Sender<(usize, Done)>,
    pub waker: Arc<mio::Waker>,
    /// The loop may be blocked in its poll: the next post must wake it. The loop sets it just
    /// before it polls (after a last look at the queue) and clears it once awake; a post that
    /// finds it clear skips the wake-up write, which the loop would not need: it looks at the
    /// queue before it polls again. A busy loop answering a burst of replies (a Python app's
    /// batch, say) is woken once, not once per reply.
    pub asleep: AtomicBool,
    /// Set by the loop when a connection with a job out loses its peer; cleared when the slot
    /// is freed. A slot is not reused while a job refers to it, so the key names one job.
    pub cancelled: Box<[AtomicBool]>,
}

impl LoopQueue {
    /// A loop's queue, with flags for `slots` connection slots.
    pub fn new(done: Sender<(usize, Done)>, waker: Arc<mio::Waker>, slots: usize) -> Self {
        LoopQueue {
            done,
            waker,
            asleep: AtomicBool::new(true),
            cancelled: (0..slots).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// The loop is about to poll: true if it may block, false if posts arrived meanwhile
    /// (poll without waiting, then take them). `pending` looks at the loop's queue.
    pub fn about_to_sleep(&self, pending: impl FnOnce() -> bool) -> bool {
        self.asleep.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if pending() {
            self.asleep.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// The loop is awake: posts need not wake it until it next calls
    /// [`LoopQueue::about_to_sleep`].
    pub fn awake(&self) {
        self.asleep.store(false, Ordering::SeqCst);
    }

    /// Marks (or unmarks) the job of slot `key` cancelled.
    pub fn set_cancelled(&self, key: usize, yes: bool) {
        if let Some(flag) = self.cancelled.get(key) {
            flag.store(yes, Ordering::Release);
        }
    }
}

/// A connection of an event loop: the loops' queues, which loop, the connection's key, and
/// the stream a job answers.
pub(crate) struct LoopConn {
    pub loops: Arc<Vec<LoopQueue>>,
    pub owner: usize,
    pub conn: usize,
    pub stream: u64,
}

impl ReplyTo for LoopConn {
    fn cancelled(&self) -> bool {
        self.loops[self.owner]
            .cancelled
            .get(self.conn)
            .is_some_and(|f| f.load(Ordering::Acquire))
    }

    fn reply(&self, reply: Option<Reply>) {
        self.post(reply.map_or(Done::Cancelled, |r| Done::Reply(self.stream, r)));
    }

    fn more(&self) {
        self.post(Done::More);
    }
}

impl LoopConn {
    fn post(&self, done: Done) {
        let dest = &self.loops[self.owner];
        if dest.done.send((self.conn, done)).is_ok() {
            // Pairs with the fence in `LoopQueue::about_to_sleep`: either the loop sees this
            // post before it sleeps, or this sees that it sleeps and wakes it.
            std::sync::atomic::fence(Ordering::SeqCst);
            if dest.asleep.swap(false, Ordering::SeqCst) {
                let _ = dest.waker.wake();
            }
        }
    }
}

/// One HTTP/2 stream's job as its connection and the worker that takes it both see it: the
/// connection cancels it when the client resets the stream, and a job not yet started is then
/// dropped unrun, counted as cancelled at that moment (a queued job is skipped by the worker
/// that takes it, which only hands the stream back). The HTTP/1.1 job of a connection needs
/// none: its connection's slot flag ([`LoopQueue::cancelled`]) says the same.
#[derive(Debug, Default)]
pub(crate) struct Ticket(AtomicU8);

/// A ticket is itself only (a [`Fate`](super::pump::Fate) compares them so).
impl PartialEq for Ticket {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Ticket {}

impl Ticket {
    const QUEUED: u8 = 0;
    const RUNNING: u8 = 1;
    const CANCELLED: u8 = 2;

    /// The stream was reset: true if the job had not started (it never will).
    pub fn cancel(&self) -> bool {
        self.0
            .compare_exchange(
                Self::QUEUED,
                Self::CANCELLED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// A worker takes the job: true if it is to run (its stream was not reset first).
    fn start(&self) -> bool {
        self.0
            .compare_exchange(
                Self::QUEUED,
                Self::RUNNING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The stream was reset before the job started.
    fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire) == Self::CANCELLED
    }
}

/// A deferred job's [`Answer`] posts here: to the job's return address, counting the job
/// finished when it is answered.
struct Deferred<R> {
    to: R,
    stats: Arc<Stats>,
    ticket: Option<Arc<Ticket>>,
}

impl<R: ReplyTo + Sync> Respond for Deferred<R> {
    fn reply(&self, reply: Reply) {
        self.stats.job_finished();
        self.to.reply(Some(reply));
    }

    fn cancelled(&self) -> bool {
        self.to.cancelled() || self.ticket.as_ref().is_some_and(|t| t.is_cancelled())
    }

    fn more(&self) {
        self.to.more();
    }
}

/// A job with its return address.
pub(crate) struct Task<J, R> {
    pub job: J,
    pub reply_to: R,
    /// An HTTP/2 stream's job: cancelled by its stream.
    pub ticket: Option<Arc<Ticket>>,
}

/// What became of a job handed to [`offload`].
pub(crate) enum Offloaded {
    /// A worker will run it and post the reply to its return address.
    Queued,
    /// Answer the connection with this now: the queue was full (503, counted), or there are
    /// no workers and the caller's thread ran the job.
    Answer(Reply),
    /// The workers are gone (only during a shutdown): close the connection.
    Gone,
}

/// The offload policy every event-loop model follows (evloop, prefork, actor): a job goes to
/// the workers' FIFO queue; a full queue is answered 503 with `Retry-After` at once rather than
/// queued without bound; with no workers (`-w 0`, as seed 001 allows) the caller's thread runs
/// the job itself. A deferred job is started here, whatever the workers, and answers later.
pub(crate) fn offload<J: Job, R: ReplyTo + Sync>(
    queue: Option<&Sender<Task<J, R>>>,
    job: J,
    ticket: Option<Arc<Ticket>>,
    reply_to: impl FnOnce() -> R,
    stats: &Arc<Stats>,
) -> Offloaded {
    if J::DEFERRED {
        stats.job_started();
        let to = Deferred {
            to: reply_to(),
            stats: stats.clone(),
            ticket,
        };
        job.start(Answer::new(Arc::new(to)));
        return Offloaded::Queued;
    }
    let Some(queue) = queue else {
        return Offloaded::Answer(super::run_job(job, stats));
    };
    let task = Task {
        job,
        reply_to: reply_to(),
        ticket,
    };
    match queue.try_send(task) {
        Ok(()) => {
            stats.job_queued();
            Offloaded::Queued
        }
        Err(TrySendError::Full(_)) => {
            stats.job_rejected();
            Offloaded::Answer(Reply::overloaded())
        }
        Err(TrySendError::Disconnected(_)) => Offloaded::Gone,
    }
}

/// Starts `count` workers. They stop when every `Sender` of `queue` is gone.
pub(crate) fn spawn<J: Job, R: ReplyTo>(
    count: usize,
    queue: Receiver<Task<J, R>>,
    stats: Arc<Stats>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    (0..count)
        .map(|i| {
            let (queue, stats) = (queue.clone(), stats.clone());
            std::thread::Builder::new()
                .name(format!("berth-worker-{i}"))
                .spawn(move || {
                    for task in queue {
                        stats.job_dequeued();
                        // A stream's job whose stream was reset was counted cancelled then.
                        let skip = task.ticket.as_ref().is_some_and(|t| !t.start());
                        if task.reply_to.cancelled() {
                            if !skip {
                                stats.job_cancelled();
                            }
                            task.reply_to.reply(None);
                            continue;
                        }
                        if skip {
                            // The connection lives on and keeps the reset stream until its job
                            // comes back: this reply, never sent, hands it back.
                            task.reply_to.reply(Some(Reply::failed()));
                            continue;
                        }
                        let reply = super::run_job(task.job, &stats);
                        task.reply_to.reply(Some(reply));
                    }
                })
        })
        .collect()
}
