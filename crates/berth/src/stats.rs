//! Server counters, shared by drivers (connections, jobs) and the app (requests, statuses), and
//! rendered by `GET /stats` in the Prometheus text format.
//!
//! Counters that change per request live in per-thread shards, each on its own cache lines, so
//! that two event loops counting requests never contend for one line. Reading sums the shards.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use berth_proto::h2::{Abuse, Counts};
use berth_proto::h3;

use crate::sys::shm::{CacheAligned, SharedBox};

/// Status codes counted individually; anything else lands in the `other` bucket.
const STATUSES: [u16; 21] = [
    100, 200, 204, 206, 301, 304, 400, 403, 404, 405, 408, 413, 414, 416, 417, 431, 500, 501, 503,
    505, 0,
];

/// Where each counter of a shard sits among its cells; `STATUSES[i]` is counted at
/// `FIRST_STATUS + i`.
const OPENED: usize = 0;
const CLOSED: usize = 1;
const REFUSED: usize = 2;
const REQUESTS: usize = 3;
const FIRST_STATUS: usize = 4;
const SHARD_CELLS: usize = FIRST_STATUS + STATUSES.len();

/// One thread's counters: a view of its cells, which sit on cache lines of their own so that
/// neighbouring shards never share one. As cheap to pass around as a reference.
#[derive(Clone, Copy)]
pub struct Shard<'a> {
    cells: &'a [AtomicU64; SHARD_CELLS],
}

impl Shard<'_> {
    /// A connection was accepted and is being served.
    pub fn connection_opened(&self) {
        self.cells[OPENED].fetch_add(1, Relaxed);
    }
    /// A served connection was closed and its resources freed.
    pub fn connection_closed(&self) {
        self.cells[CLOSED].fetch_add(1, Relaxed);
    }
    /// A connection was refused (at capacity) and closed at once.
    pub fn connection_refused(&self) {
        self.cells[REFUSED].fetch_add(1, Relaxed);
    }
    /// A request reached the application.
    pub fn request(&self) {
        self.cells[REQUESTS].fetch_add(1, Relaxed);
    }
    /// A response with this status was written.
    pub fn response(&self, status: u16) {
        let i = STATUSES
            .iter()
            .position(|&s| s == status)
            .unwrap_or(STATUSES.len() - 1);
        self.cells[FIRST_STATUS + i].fetch_add(1, Relaxed);
    }
}

/// Most shards a [`Stats`] has; threads beyond it share shards (still correct, just contended).
pub const MAX_SHARDS: usize = 64;

/// The job gauges (they go up and down), by index.
const JOBS_QUEUED: usize = 0;
const JOBS_RUNNING: usize = 1;
/// The job totals, by index.
const JOBS_DONE: usize = 0;
const JOBS_REJECTED: usize = 1;
const JOBS_CANCELLED: usize = 2;
/// Not a total: the server's state, 0 serving, 1 draining (here so that it is shared with
/// forked workers like the counters).
const DRAINING: usize = 3;

/// The counters themselves: the shards' cells, the job gauges and the job totals. Plain arrays
/// of atomics (fixed-size and pointer-free), so they can live in memory shared with forked
/// children ([`SharedBox`]).
type Counters = (
    [CacheAligned<[AtomicU64; SHARD_CELLS]>; MAX_SHARDS],
    [AtomicI64; 2],
    [AtomicU64; 4],
    [AtomicU64; H2_CELLS + H3_CELLS],
);

/// HTTP/2's totals, by index, counted as each connection ends (`Stats::http2_ended`): then the
/// connections ended for each kind of abuse, in `Abuse::ALL`'s order.
const H2_CONNECTIONS: usize = 0;
const H2_STREAMS: usize = 1;
const H2_REFUSED: usize = 2;
const H2_CLIENT_RESETS: usize = 3;
const H2_PROVOKED_RESETS: usize = 4;
const H2_OVERSIZED_HEADS: usize = 5;
const H2_ABUSE: usize = 6;
const H2_CELLS: usize = H2_ABUSE + Abuse::ALL.len();

/// HTTP/3's cells, by index, after HTTP/2's in the same array: connections opened and ended
/// (`Stats::http3_opened`, `Stats::http3_ended`), then the totals of `h3::Counts`, added as
/// each connection ends.
const H3_OPENED: usize = H2_CELLS;
const H3_ENDED: usize = H2_CELLS + 1;
const H3_REQUESTS: usize = H2_CELLS + 2;
const H3_STREAM_ERRORS: usize = H2_CELLS + 3;
const H3_CLIENT_RESETS: usize = H2_CELLS + 4;
const H3_REJECTED: usize = H2_CELLS + 5;
const H3_OVERSIZED_HEADS: usize = H2_CELLS + 6;
const H3_RETRIES: usize = H2_CELLS + 7;
const H3_PACKETS_SENT: usize = H2_CELLS + 8;
const H3_PACKETS_LOST: usize = H2_CELLS + 9;
const H3_CELLS: usize = 10;

enum Storage {
    Private(Box<Counters>),
    Shared(SharedBox<Counters>),
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
    /// A drain has begun ([`Stats::set_draining`]): `/healthz` answers 503.
    pub draining: bool,
    /// HTTP/2, counted as its connections end.
    pub http2: Http2Totals,
    /// HTTP/3: its connections as they open and end, and what they did as they end.
    pub http3: Http3Totals,
}

/// What the HTTP/2 connections that ended did, and what they were ended for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Http2Totals {
    /// Connections that spoke HTTP/2.
    pub connections: u64,
    /// Streams (requests) their clients opened.
    pub streams: u64,
    /// Streams refused: too many open at once (REFUSED_STREAM).
    pub refused: u64,
    /// Streams their clients reset before the answer was complete.
    pub client_resets: u64,
    /// Streams berth reset because of the client's frames.
    pub provoked_resets: u64,
    /// Requests answered 431 for their header list.
    pub oversized_heads: u64,
    /// `(kind, connections)` ended with GOAWAY ENHANCE_YOUR_CALM for each kind of abuse, every
    /// kind listed.
    pub abuse: Vec<(&'static str, u64)>,
}

/// What the HTTP/3 connections did (QUIC, `quic://` listeners and `--http3` twins): the
/// connections counted as they open and end, the rest as each ends (`h3::Counts`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Http3Totals {
    /// HTTP/3 connections open now.
    pub connections_open: u64,
    /// HTTP/3 connections accepted (QUIC handshakes begun and taken in).
    pub connections: u64,
    /// Requests (request streams whose head came) on the connections that ended.
    pub requests: u64,
    /// Request streams reset for a malformed request.
    pub stream_errors: u64,
    /// Request streams the client reset or stopped before their answer was complete.
    pub client_resets: u64,
    /// Request streams refused after GOAWAY (H3_REQUEST_REJECTED).
    pub rejected: u64,
    /// Requests answered 431 for their field section.
    pub oversized_heads: u64,
    /// Retry packets sent: new connections asked to prove their address (`--quic-retry`).
    pub retries: u64,
    /// QUIC packets the connections that ended sent, and those of them QUIC found lost (and
    /// sent again what mattered): on a quiet path, the losses are the server's own doing.
    pub packets: QuicPackets,
}

/// QUIC packets one connection sent, and how many of them were lost (quinn-proto's path
/// statistics, MTU probes not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuicPackets {
    /// Packets sent.
    pub sent: u64,
    /// Packets declared lost.
    pub lost: u64,
}

/// Every counter at zero.
fn zeroed() -> Counters {
    (
        std::array::from_fn(|_| CacheAligned::default()),
        Default::default(),
        Default::default(),
        std::array::from_fn(|_| AtomicU64::new(0)),
    )
}

impl Stats {
    /// Counters with `shards` shards (use one per thread that counts per request; at most
    /// [`MAX_SHARDS`]).
    pub fn new(shards: usize) -> Self {
        Stats {
            shards: shards.clamp(1, MAX_SHARDS),
            storage: Storage::Private(Box::new(zeroed())),
        }
    }

    /// Like [`Stats::new`], but in memory shared with processes forked later, so that the
    /// `forked` and `prefork` models' children count into the parent's `/stats`.
    pub fn new_shared(shards: usize) -> std::io::Result<Self> {
        let shared = SharedBox::new(zeroed())?;
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

    /// The cells of the shards in use.
    fn shards(&self) -> impl Iterator<Item = &[AtomicU64; SHARD_CELLS]> {
        self.counters().0[..self.shards].iter().map(|s| &**s)
    }

    fn gauge(&self, i: usize) -> &AtomicI64 {
        &self.counters().1[i]
    }

    fn total(&self, i: usize) -> &AtomicU64 {
        &self.counters().2[i]
    }

    /// The shard for thread number `i` (wraps around if there are more threads than shards).
    pub fn shard(&self, i: usize) -> Shard<'_> {
        Shard {
            cells: &self.counters().0[i % self.shards],
        }
    }

    /// A job entered the worker queue.
    pub fn job_queued(&self) {
        self.gauge(JOBS_QUEUED).fetch_add(1, Relaxed);
    }
    /// A worker took a job out of the queue (to run it, or to drop it as cancelled).
    pub fn job_dequeued(&self) {
        self.gauge(JOBS_QUEUED).fetch_sub(1, Relaxed);
    }
    /// A job is dropped unrun: its client has gone.
    pub fn job_cancelled(&self) {
        self.total(JOBS_CANCELLED).fetch_add(1, Relaxed);
    }
    /// A job starts to run, wherever it runs (a worker, an event loop, an actor, a
    /// connection's own thread or process).
    pub fn job_started(&self) {
        self.gauge(JOBS_RUNNING).fetch_add(1, Relaxed);
    }
    /// A job was refused because the worker queue was full (answered 503).
    pub fn job_rejected(&self) {
        self.total(JOBS_REJECTED).fetch_add(1, Relaxed);
    }
    /// The server is going away: from now on its health check (`/healthz`) answers 503, so
    /// that a load balancer stops sending it new requests before it closes. Every process of
    /// the server sees it (the counters are shared with forked workers). There is no way back:
    /// a drain ends in a stop.
    pub fn set_draining(&self) {
        self.total(DRAINING).store(1, Relaxed);
    }

    /// Whether [`Stats::set_draining`] was called.
    pub fn is_draining(&self) -> bool {
        self.total(DRAINING).load(Relaxed) != 0
    }

    /// A job finished running.
    pub fn job_finished(&self) {
        self.gauge(JOBS_RUNNING).fetch_sub(1, Relaxed);
        self.total(JOBS_DONE).fetch_add(1, Relaxed);
    }

    /// An HTTP/2 connection ended with these counts.
    pub fn http2_ended(&self, c: &Counts) {
        let h2 = &self.counters().3;
        h2[H2_CONNECTIONS].fetch_add(1, Relaxed);
        h2[H2_STREAMS].fetch_add(c.streams, Relaxed);
        h2[H2_REFUSED].fetch_add(c.refused, Relaxed);
        h2[H2_CLIENT_RESETS].fetch_add(c.client_resets, Relaxed);
        h2[H2_PROVOKED_RESETS].fetch_add(c.provoked_resets, Relaxed);
        h2[H2_OVERSIZED_HEADS].fetch_add(c.oversized_heads, Relaxed);
        if let Some(abuse) = c.abuse {
            h2[H2_ABUSE + abuse.index()].fetch_add(1, Relaxed);
        }
    }

    /// An HTTP/3 connection was accepted (QUIC).
    pub fn http3_opened(&self) {
        self.counters().3[H3_OPENED].fetch_add(1, Relaxed);
    }

    /// An HTTP/3 connection ended (QUIC is done with it) with these counts.
    pub fn http3_ended(&self, c: &h3::Counts, packets: QuicPackets) {
        let h3 = &self.counters().3;
        h3[H3_PACKETS_SENT].fetch_add(packets.sent, Relaxed);
        h3[H3_PACKETS_LOST].fetch_add(packets.lost, Relaxed);
        h3[H3_ENDED].fetch_add(1, Relaxed);
        h3[H3_REQUESTS].fetch_add(c.requests, Relaxed);
        h3[H3_STREAM_ERRORS].fetch_add(c.stream_errors, Relaxed);
        h3[H3_CLIENT_RESETS].fetch_add(c.client_resets, Relaxed);
        h3[H3_REJECTED].fetch_add(c.rejected, Relaxed);
        h3[H3_OVERSIZED_HEADS].fetch_add(c.oversized_heads, Relaxed);
    }

    /// A QUIC Retry was sent to a new connection (`--quic-retry`).
    pub fn quic_retry_sent(&self) {
        self.counters().3[H3_RETRIES].fetch_add(1, Relaxed);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> Snapshot {
        let sum = |cell: usize| self.shards().map(|s| s[cell].load(Relaxed)).sum::<u64>();
        let (opened, closed) = (sum(OPENED), sum(CLOSED));
        let responses = STATUSES
            .iter()
            .enumerate()
            .map(|(i, &status)| (status, sum(FIRST_STATUS + i)))
            .filter(|&(_, n)| n > 0)
            .collect();
        Snapshot {
            connections_open: opened.saturating_sub(closed),
            connections_total: opened,
            connections_refused: sum(REFUSED),
            requests: sum(REQUESTS),
            jobs_queued: self.gauge(JOBS_QUEUED).load(Relaxed),
            jobs_running: self.gauge(JOBS_RUNNING).load(Relaxed),
            jobs_done: self.total(JOBS_DONE).load(Relaxed),
            jobs_rejected: self.total(JOBS_REJECTED).load(Relaxed),
            jobs_cancelled: self.total(JOBS_CANCELLED).load(Relaxed),
            responses,
            draining: self.is_draining(),
            http2: {
                let h2 = |i: usize| self.counters().3[i].load(Relaxed);
                Http2Totals {
                    connections: h2(H2_CONNECTIONS),
                    streams: h2(H2_STREAMS),
                    refused: h2(H2_REFUSED),
                    client_resets: h2(H2_CLIENT_RESETS),
                    provoked_resets: h2(H2_PROVOKED_RESETS),
                    oversized_heads: h2(H2_OVERSIZED_HEADS),
                    abuse: Abuse::ALL
                        .iter()
                        .map(|a| (a.name(), h2(H2_ABUSE + a.index())))
                        .collect(),
                }
            },
            http3: {
                let h3 = |i: usize| self.counters().3[i].load(Relaxed);
                Http3Totals {
                    connections_open: h3(H3_OPENED).saturating_sub(h3(H3_ENDED)),
                    connections: h3(H3_OPENED),
                    requests: h3(H3_REQUESTS),
                    stream_errors: h3(H3_STREAM_ERRORS),
                    client_resets: h3(H3_CLIENT_RESETS),
                    rejected: h3(H3_REJECTED),
                    oversized_heads: h3(H3_OVERSIZED_HEADS),
                    retries: h3(H3_RETRIES),
                    packets: QuicPackets {
                        sent: h3(H3_PACKETS_SENT),
                        lost: h3(H3_PACKETS_LOST),
                    },
                }
            },
        }
    }
}

impl Snapshot {
    /// Renders the Prometheus text exposition format (version 0.0.4).
    pub fn to_prometheus(&self, out: &mut String) {
        let metric = |out: &mut String, name: &str, kind: &str, help: &str, value: i128| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        metric(
            out,
            "berth_connections_open",
            "gauge",
            "Connections open now.",
            self.connections_open.into(),
        );
        metric(
            out,
            "berth_connections_total",
            "counter",
            "Connections accepted and served.",
            self.connections_total.into(),
        );
        metric(
            out,
            "berth_connections_refused_total",
            "counter",
            "Connections refused at capacity.",
            self.connections_refused.into(),
        );
        metric(
            out,
            "berth_requests_total",
            "counter",
            "Requests handed to the application.",
            self.requests.into(),
        );
        metric(
            out,
            "berth_jobs_queued",
            "gauge",
            "Jobs waiting for a worker.",
            self.jobs_queued.into(),
        );
        metric(
            out,
            "berth_jobs_running",
            "gauge",
            "Jobs running on a worker.",
            self.jobs_running.into(),
        );
        metric(
            out,
            "berth_jobs_done_total",
            "counter",
            "Jobs finished.",
            self.jobs_done.into(),
        );
        metric(
            out,
            "berth_jobs_rejected_total",
            "counter",
            "Jobs refused with 503 because the worker queue was full.",
            self.jobs_rejected.into(),
        );
        metric(
            out,
            "berth_jobs_cancelled_total",
            "counter",
            "Jobs dropped unrun because their client had gone.",
            self.jobs_cancelled.into(),
        );
        metric(
            out,
            "berth_draining",
            "gauge",
            "1 once a drain has begun (/healthz answers 503), else 0.",
            i128::from(self.draining),
        );
        let h2 = &self.http2;
        metric(
            out,
            "berth_http2_connections_total",
            "counter",
            "HTTP/2 connections ended.",
            h2.connections.into(),
        );
        metric(
            out,
            "berth_http2_streams_total",
            "counter",
            "HTTP/2 streams (requests) their clients opened.",
            h2.streams.into(),
        );
        metric(
            out,
            "berth_http2_refused_streams_total",
            "counter",
            "HTTP/2 streams refused: too many open at once.",
            h2.refused.into(),
        );
        metric(
            out,
            "berth_http2_oversized_heads_total",
            "counter",
            "HTTP/2 requests answered 431 for their header list.",
            h2.oversized_heads.into(),
        );
        let _ = writeln!(
            out,
            "# HELP berth_http2_resets_total HTTP/2 streams reset before their answer was \
             complete, by who reset them.\n# TYPE berth_http2_resets_total counter\n\
             berth_http2_resets_total{{by=\"client\"}} {}\n\
             berth_http2_resets_total{{by=\"server\"}} {}",
            h2.client_resets, h2.provoked_resets
        );
        let _ = writeln!(
            out,
            "# HELP berth_http2_abuse_total HTTP/2 connections ended with GOAWAY \
             ENHANCE_YOUR_CALM, by the abuse.\n# TYPE berth_http2_abuse_total counter"
        );
        for &(kind, n) in &h2.abuse {
            let _ = writeln!(out, "berth_http2_abuse_total{{kind=\"{kind}\"}} {n}");
        }
        let h3 = &self.http3;
        metric(
            out,
            "berth_http3_connections_open",
            "gauge",
            "HTTP/3 connections open now.",
            h3.connections_open.into(),
        );
        metric(
            out,
            "berth_http3_connections_total",
            "counter",
            "HTTP/3 connections accepted.",
            h3.connections.into(),
        );
        metric(
            out,
            "berth_http3_requests_total",
            "counter",
            "HTTP/3 requests, counted as their connection ends.",
            h3.requests.into(),
        );
        metric(
            out,
            "berth_http3_stream_errors_total",
            "counter",
            "HTTP/3 request streams reset for a malformed request.",
            h3.stream_errors.into(),
        );
        metric(
            out,
            "berth_http3_rejected_streams_total",
            "counter",
            "HTTP/3 request streams refused after GOAWAY.",
            h3.rejected.into(),
        );
        metric(
            out,
            "berth_http3_oversized_heads_total",
            "counter",
            "HTTP/3 requests answered 431 for their field section.",
            h3.oversized_heads.into(),
        );
        metric(
            out,
            "berth_http3_client_resets_total",
            "counter",
            "HTTP/3 request streams the client reset or stopped before their answer was \
             complete.",
            h3.client_resets.into(),
        );
        metric(
            out,
            "berth_quic_retries_total",
            "counter",
            "QUIC Retry packets sent: new connections asked to prove their address.",
            h3.retries.into(),
        );
        metric(
            out,
            "berth_quic_packets_sent_total",
            "counter",
            "QUIC packets sent, counted as their connection ends.",
            h3.packets.sent.into(),
        );
        metric(
            out,
            "berth_quic_packets_lost_total",
            "counter",
            "QUIC packets declared lost (their content sent again), counted as their connection \
             ends.",
            h3.packets.lost.into(),
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

    #[test]
    fn http3_counts_add_up_as_connections_end() {
        let stats = Stats::new(1);
        stats.http3_opened();
        stats.http3_opened();
        stats.http3_ended(
            &h3::Counts {
                requests: 3,
                client_resets: 1,
                ..h3::Counts::default()
            },
            QuicPackets { sent: 50, lost: 2 },
        );
        let got = stats.snapshot().http3;
        assert_eq!((got.connections_open, got.connections), (1, 2));
        assert_eq!((got.requests, got.client_resets), (3, 1));
        let mut text = String::new();
        stats.snapshot().to_prometheus(&mut text);
        for line in [
            "berth_http3_connections_open 1",
            "berth_http3_connections_total 2",
            "berth_http3_requests_total 3",
            "berth_http3_client_resets_total 1",
            "berth_quic_packets_sent_total 50",
            "berth_quic_packets_lost_total 2",
        ] {
            assert!(text.contains(&format!("\n{line}\n")), "{line}: {text}");
        }
    }
}
