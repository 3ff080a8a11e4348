//! Server counters, shared by drivers (connections, jobs) and the app (requests, statuses), and
//! rendered by `GET /stats` in the Prometheus text format.
//!
//! Counters that change per request live in per-thread shards, each on its own cache lines, so
//! that two event loops counting requests never contend for one line. Reading sums the shards.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Status codes counted individually; anything else lands in the `other` bucket.
const STATUSES: [u16; 21] = [
    100, 200, 204, 206, 301, 304, 400, 403, 404, 405, 408, 413, 414, 416, 417, 431, 500, 501, 503,
    505, 0,
];

/// One thread's counters. Aligned so that neighbouring shards never share a cache line.
#[repr(align(128))]
#[derive(Default)]
pub struct Shard {
    opened: AtomicU64,
    closed: AtomicU64,
    refused: AtomicU64,
    requests: AtomicU64,
    statuses: [AtomicU64; STATUSES.len()],
}

impl Shard {
    /// A connection was accepted and is being served.
    pub fn connection_opened(&self) {
        self.opened.fetch_add(1, Relaxed);
    }
    /// A served connection was closed and its resources freed.
    pub fn connection_closed(&self) {
        self.closed.fetch_add(1, Relaxed);
    }
    /// A connection was refused (at capacity) and closed at once.
    pub fn connection_refused(&self) {
        self.refused.fetch_add(1, Relaxed);
    }
    /// A request reached the application.
    pub fn request(&self) {
        self.requests.fetch_add(1, Relaxed);
    }
    /// A response with this status was written.
    pub fn response(&self, status: u16) {
        let i = STATUSES
            .iter()
            .position(|&s| s == status)
            .unwrap_or(STATUSES.len() - 1);
        self.statuses[i].fetch_add(1, Relaxed);
    }
}

/// Most shards a [`Stats`] has; threads beyond it share shards (still correct, just contended).
pub const MAX_SHARDS: usize = 64;

/// The counters themselves: fixed-size and pointer-free, so they can live in memory shared with
/// forked children (see `drive::shared`).
pub(crate) struct Counters {
    shards: [Shard; MAX_SHARDS],
    jobs_queued: AtomicI64,
    jobs_running: AtomicI64,
    jobs_done: AtomicU64,
    jobs_rejected: AtomicU64,
    jobs_cancelled: AtomicU64,
}

enum Storage {
    Private(Box<Counters>),
    Shared(crate::drive::shared::SharedBox<Counters>),
}

/// All counters of one server.
pub struct Stats {
    shards: usize,
    storage: Storage,
}

/// A consistent-enough reading of every counter (each counter is read once, not atomically
/// with the others).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Connections open now.
    pub connections_open: u64,
    /// Connections accepted and served since start.
    pub connections_total: u64,
    /// Connections refused at capacity since start.
    pub connections_refused: u64,
    /// Requests handed to the application since start.
    pub requests: u64,
    /// Jobs waiting in the worker queue.
    pub jobs_queued: i64,
    /// Jobs running on a worker now.
    pub jobs_running: i64,
    /// Jobs finished since start.
    pub jobs_done: u64,
    /// Jobs refused with 503 because the worker queue was full.
    pub jobs_rejected: u64,
    /// Jobs dropped unrun because their client had gone (reset or closed) while they waited.
    pub jobs_cancelled: u64,
    /// `(status, count)` for each status seen; status 0 counts codes not listed individually.
    pub responses: Vec<(u16, u64)>,
}

impl Stats {
    /// Counters with `shards` shards (use one per thread that counts per request; at most
    /// [`MAX_SHARDS`]).
    pub fn new(shards: usize) -> Self {
        Stats {
            shards: shards.clamp(1, MAX_SHARDS),
            storage: Storage::Private(Box::default()),
        }
    }

    /// Like [`Stats::new`], but in memory shared with processes forked later, so that the
    /// `forked` and `prefork` models' children count into the parent's `/stats`.
    pub fn new_shared(shards: usize) -> std::io::Result<Self> {
        let shared = crate::drive::shared::SharedBox::new(Counters::default())?;
        Ok(Stats {
            shards: shards.clamp(1, MAX_SHARDS),
            storage: Storage::Shared(shared),
        })
    }

    fn counters(&self) -> &Counters {
        match &self.storage {
            Storage::Private(c) => c,
            Storage::Shared(c) => c,
        }
    }

    /// The shard for thread number `i` (wraps around if there are more threads than shards).
    pub fn shard(&self, i: usize) -> &Shard {
        &self.counters().shards[i % self.shards]
    }

    /// A job entered the worker queue.
    pub fn job_queued(&self) {
        self.counters().jobs_queued.fetch_add(1, Relaxed);
    }
    /// A worker took a job out of the queue (to run it, or to drop it as cancelled).
    pub fn job_dequeued(&self) {
        self.counters().jobs_queued.fetch_sub(1, Relaxed);
    }
    /// A job is dropped unrun: its client has gone.
    pub fn job_cancelled(&self) {
        self.counters().jobs_cancelled.fetch_add(1, Relaxed);
    }
    /// A job starts to run, wherever it runs (a worker, an event loop, an actor, a
    /// connection's own thread or process).
    pub fn job_started(&self) {
        self.counters().jobs_running.fetch_add(1, Relaxed);
    }
    /// A job was refused because the worker queue was full (answered 503).
    pub fn job_rejected(&self) {
        self.counters().jobs_rejected.fetch_add(1, Relaxed);
    }
    /// A job finished running.
    pub fn job_finished(&self) {
        self.counters().jobs_running.fetch_sub(1, Relaxed);
        self.counters().jobs_done.fetch_add(1, Relaxed);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> Snapshot {
        let sum = |f: fn(&Shard) -> &AtomicU64| {
            self.counters().shards[..self.shards]
                .iter()
                .map(|s| f(s).load(Relaxed))
                .sum::<u64>()
        };
        let (opened, closed) = (sum(|s| &s.opened), sum(|s| &s.closed));
        let responses = STATUSES
            .iter()
            .enumerate()
            .map(|(i, &status)| {
                (
                    status,
                    self.counters().shards[..self.shards]
                        .iter()
                        .map(|s| s.statuses[i].load(Relaxed))
                        .sum(),
                )
            })
            .filter(|&(_, n)| n > 0)
            .collect();
        Snapshot {
            connections_open: opened.saturating_sub(closed),
            connections_total: opened,
            connections_refused: sum(|s| &s.refused),
            requests: sum(|s| &s.requests),
            jobs_queued: self.counters().jobs_queued.load(Relaxed),
            jobs_running: self.counters().jobs_running.load(Relaxed),
            jobs_done: self.counters().jobs_done.load(Relaxed),
            jobs_rejected: self.counters().jobs_rejected.load(Relaxed),
            jobs_cancelled: self.counters().jobs_cancelled.load(Relaxed),
            responses,
        }
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            shards: std::array::from_fn(|_| Shard::default()),
            jobs_queued: AtomicI64::new(0),
            jobs_running: AtomicI64::new(0),
            jobs_done: AtomicU64::new(0),
            jobs_rejected: AtomicU64::new(0),
            jobs_cancelled: AtomicU64::new(0),
        }
    }
}

impl Snapshot {
    /// Renders the Prometheus text exposition format (version 0.0.4).
    pub fn to_prometheus(&self, out: &mut String) {
        let mut metric = |name: &str, kind: &str, help: &str, value: i128| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        metric(
            "berth_connections_open",
            "gauge",
            "Connections open now.",
            self.connections_open.into(),
        );
        metric(
            "berth_connections_total",
            "counter",
            "Connections accepted and served.",
            self.connections_total.into(),
        );
        metric(
            "berth_connections_refused_total",
            "counter",
            "Connections refused at capacity.",
            self.connections_refused.into(),
        );
        metric(
            "berth_requests_total",
            "counter",
            "Requests handed to the application.",
            self.requests.into(),
        );
        metric(
            "berth_jobs_queued",
            "gauge",
            "Jobs waiting for a worker.",
            self.jobs_queued.into(),
        );
        metric(
            "berth_jobs_running",
            "gauge",
            "Jobs running on a worker.",
            self.jobs_running.into(),
        );
        metric(
            "berth_jobs_done_total",
            "counter",
            "Jobs finished.",
            self.jobs_done.into(),
        );
        metric(
            "berth_jobs_rejected_total",
            "counter",
            "Jobs refused with 503 because the worker queue was full.",
            self.jobs_rejected.into(),
        );
        metric(
            "berth_jobs_cancelled_total",
            "counter",
            "Jobs dropped unrun because their client had gone.",
            self.jobs_cancelled.into(),
        );
        let _ = writeln!(
            out,
            "# HELP berth_responses_total Responses written, by status."
        );
        let _ = writeln!(out, "# TYPE berth_responses_total counter");
        for &(status, n) in &self.responses {
            match status {
                0 => {
                    let _ = writeln!(out, "berth_responses_total{{status=\"other\"}} {n}");
                }
                s => {
                    let _ = writeln!(out, "berth_responses_total{{status=\"{s}\"}} {n}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_sum_and_render() {
        let stats = Stats::new(2);
        stats.shard(0).connection_opened();
        stats.shard(1).connection_opened();
        stats.shard(3).connection_closed();
        stats.shard(0).response(200);
        stats.shard(1).response(200);
        stats.shard(1).response(299);
        let snap = stats.snapshot();
        assert_eq!(snap.connections_open, 1);
        assert_eq!(snap.connections_total, 2);
        assert_eq!(snap.responses, vec![(200, 2), (0, 1)]);
        let mut text = String::new();
        snap.to_prometheus(&mut text);
        assert!(text.contains("berth_connections_open 1\n"));
        assert!(text.contains("berth_responses_total{status=\"200\"} 2\n"));
        assert!(text.contains("berth_responses_total{status=\"other\"} 1\n"));
    }

    #[test]
    fn shared_counters_count_the_same() {
        let stats = Stats::new_shared(2).unwrap();
        stats.shard(1).request();
        stats.job_queued();
        let snap = stats.snapshot();
        assert_eq!((snap.requests, snap.jobs_queued), (1, 1));
    }
}
