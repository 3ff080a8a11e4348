//! The worker pool: threads fed by one FIFO queue, running offloaded jobs and posting each
//! reply back to whoever owns the connection (seed 001's worker threads and wait queue): the
//! event loop that owns it, or in the actor model the connection's actor.

use std::sync::Arc;
use std::thread::JoinHandle;

use berth_proto::http::{Job, Reply};
use crossbeam_channel::{Receiver, Sender};

use crate::stats::Stats;

/// Where a job's reply goes once the job has run.
pub(crate) trait ReplyTo: Send + 'static {
    /// Hands the reply over (and wakes its owner). The owner may be gone (shutdown); then
    /// nobody needs the reply.
    fn reply(self, reply: Reply);
}

/// An event loop's completion queue and the waker of its poll.
pub(crate) struct LoopQueue {
    pub done: Sender<(usize, Reply)>,
    pub waker: Arc<mio::Waker>,
}

/// A connection of an event loop: the loops' queues, which loop, and the connection's key.
pub(crate) struct LoopConn {
    pub loops: Arc<Vec<LoopQueue>>,
    pub owner: usize,
    pub conn: usize,
}

impl ReplyTo for LoopConn {
    fn reply(self, reply: Reply) {
        let dest = &self.loops[self.owner];
        if dest.done.send((self.conn, reply)).is_ok() {
            let _ = dest.waker.wake();
        }
    }
}

/// A job with its return address.
pub(crate) struct Task<J, R> {
    pub job: J,
    pub reply_to: R,
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
                        stats.job_started();
                        let reply = super::run_job(task.job);
                        stats.job_finished();
                        task.reply_to.reply(reply);
                    }
                })
        })
        .collect()
}
