//! The worker pool: threads fed by one FIFO queue, running offloaded jobs and posting each
//! reply back to the I/O thread that owns the connection (seed 001's worker threads and wait
//! queue).

use std::sync::Arc;
use std::thread::JoinHandle;

use berth_proto::http::{Job, Reply};
use crossbeam_channel::{Receiver, Sender};

use crate::stats::Stats;

/// Where a job's reply goes: the owning loop's completion queue and the waker of its poll.
pub(crate) struct ReplyTo {
    pub done: Sender<(usize, Reply)>,
    pub waker: Arc<mio::Waker>,
}

/// A job with its return address: the loop that owns the connection and the connection's key.
pub(crate) struct Task<J> {
    pub job: J,
    pub owner: usize,
    pub conn: usize,
}

/// Starts `count` workers. They stop when every `Sender` of `queue` is gone.
pub(crate) fn spawn<J: Job>(
    count: usize,
    queue: Receiver<Task<J>>,
    reply_to: Arc<Vec<ReplyTo>>,
    stats: Arc<Stats>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    (0..count)
        .map(|i| {
            let (queue, reply_to, stats) = (queue.clone(), reply_to.clone(), stats.clone());
            std::thread::Builder::new()
                .name(format!("berth-worker-{i}"))
                .spawn(move || {
                    for task in queue {
                        stats.job_started();
                        let reply = super::run_job(task.job);
                        stats.job_finished();
                        let dest = &reply_to[task.owner];
                        // The loop may be gone (shutdown); then nobody needs the reply.
                        if dest.done.send((task.conn, reply)).is_ok() {
                            let _ = dest.waker.wake();
                        }
                    }
                })
        })
        .collect()
}
