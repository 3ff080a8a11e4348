//! The settings every model shares: how it listens, how many threads accept, how many
//! connections and queued jobs it holds, request limits, timeouts and buffer sizes. What only
//! one model has (`--max-threads`, `--processes`, ...) lives in that model's own `Config`.

use berth_proto::http::Limits;

use super::blocking::ConnConfig;
use super::Timeouts;
use crate::net::{ConnSizing, ListenConfig};

/// Settings shared by every model. A model that has no use for one ignores it (the blocking
/// models have no worker pool, so `workers` and `queue_capacity` mean nothing to them).
#[derive(Debug, Clone)]
pub struct Common {
    /// How listeners are bound, and what their connections are served over
    /// ([`ListenConfig::transport`]).
    pub listen: ListenConfig,
    /// Read a new connection at once instead of waiting for its first readiness event
    /// (`evloop`, `prefork`). Pays off when the listener defers accepts until data arrives
    /// ([`ListenConfig::defer_accept_secs`]), because then the request is already there;
    /// otherwise it mostly costs a read that finds nothing.
    pub read_on_accept: bool,
    /// Accept threads (`-A`): each with its own listener and loop in `evloop`, the same in each
    /// process of `prefork`; scheduler threads in `actor`. See
    /// [`AcceptThreads`](super::AcceptThreads).
    pub accept_threads: usize,
    /// Most simultaneous connections (`-C`) and the size of each read and write buffer
    /// ([`ConnSizing::http`]: 100,000 and 16 KiB). `capacity` counts per accept thread in
    /// `evloop`, `uring` and `prefork` (in each process), in all in `actor`; the event loop's
    /// slab is preallocated to it, and the blocking models do not read it (their own caps are
    /// `--max-threads` and `--max-children`). `buffer_size` is pooled in the event-loop models,
    /// the initial size in the blocking models, and in `uring` also the size of each of the
    /// ring's receive buffers and the unread input a connection may hold.
    pub sizing: ConnSizing,
    /// Worker threads for offloaded jobs (`-w`). With 0, jobs run on the loop or actor thread.
    pub workers: usize,
    /// Jobs that may wait for a worker (`--queue-capacity`); a job beyond it is answered 503
    /// with `Retry-After` at once.
    pub queue_capacity: usize,
    /// Request limits.
    pub limits: Limits,
    /// Header, body, idle and write timeouts.
    pub timeouts: Timeouts,
}

impl Default for Common {
    fn default() -> Self {
        Common {
            listen: ListenConfig::default(),
            read_on_accept: false,
            accept_threads: 1,
            sizing: ConnSizing::http(),
            workers: 1,
            queue_capacity: 10_000,
            limits: Limits::default(),
            timeouts: Timeouts::default(),
        }
    }
}

impl Common {
    /// What a blocking connection (`single`, `threaded`, `forked`) takes from these settings.
    pub fn conn(&self) -> ConnConfig {
        ConnConfig {
            limits: self.limits,
            timeouts: self.timeouts,
            buffer_size: self.sizing.buffer_size,
        }
    }
}
