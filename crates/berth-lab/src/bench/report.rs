//! What a bench run measured: each load thread keeps a [`Tally`] of its own, merged once at the
//! end into a [`Report`] that renders as a table or as JSON. Errors are counted by kind and
//! always shown, zero or not, so a fast-looking run that failed half its requests cannot hide.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::latency::{self, Latency};
use crate::load_threads::Budget;

/// Failures by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Errors {
    /// The connection could not be made (refused, reset during the handshake, no ports left).
    pub connect: u64,
    /// Reading failed, or the peer closed with requests unanswered (HTTP/3: the QUIC
    /// connection closed or was reset with answers owed).
    pub read: u64,
    /// Writing the request failed.
    pub write: u64,
    /// No complete response within the timeout.
    pub timeout: u64,
    /// A complete response whose status was not 2xx.
    pub status: u64,
    /// Bytes that are not an HTTP response (HTTP/1.x text, or HTTP/2 frames that break the
    /// protocol, or a TLS server that did not choose `h2`).
    pub protocol: u64,
    /// HTTP/2 and HTTP/3: a stream the server reset (RST_STREAM, RESET_STREAM), one per
    /// stream.
    pub reset: u64,
    /// HTTP/2: a GOAWAY with an error code, one per connection it ended (a GOAWAY with
    /// NO_ERROR winds a connection down politely and is not counted).
    pub goaway: u64,
}

impl Errors {
    /// Sum of every kind.
    pub fn total(&self) -> u64 {
        self.connect
            + self.read
            + self.write
            + self.timeout
            + self.status
            + self.protocol
            + self.reset
            + self.goaway
    }

    fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.read += o.read;
        self.write += o.write;
        self.timeout += o.timeout;
        self.status += o.status;
        self.protocol += o.protocol;
        self.reset += o.reset;
        self.goaway += o.goaway;
    }

    fn to_json(self) -> Value {
        json!({
            "connect": self.connect, "read": self.read, "write": self.write,
            "timeout": self.timeout, "status": self.status, "protocol": self.protocol,
            "reset": self.reset, "goaway": self.goaway,
        })
    }
}

/// Why a load loop's connection failed (HTTP/1.1, HTTP/2 or HTTP/3): one error of its kind in
/// the tally ([`Tally::failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    Connect,
    Read,
    Write,
    Timeout,
    Protocol,
    /// An HTTP/2 GOAWAY with an error code.
    GoAway,
}

/// How long a connection waits before trying again after its connect failed.
const CONNECT_BACKOFF: Duration = Duration::from_millis(10);

impl Failure {
    /// When the connection is made again: a refused connect after a pause, so that a server
    /// that is down is not hammered in a tight loop; other failures at once, as wrk does.
    pub(crate) fn retry_at(self, now: Instant) -> Instant {
        match self {
            Failure::Connect => now + CONNECT_BACKOFF,
            _ => now,
        }
    }
}

/// One load thread's counts.
#[derive(Debug, Clone)]
pub struct Tally {
    /// Latency of every completed response, in microseconds.
    pub latency: Histogram<u64>,
    /// Complete responses, any status.
    pub responses: u64,
    /// Bytes read from sockets.
    pub bytes: u64,
    /// Connections established.
    pub connects: u64,
    /// Failures.
    pub errors: Errors,
    /// Responses by status code.
    pub statuses: BTreeMap<u16, u64>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            latency: latency::histogram(),
            responses: 0,
            bytes: 0,
            connects: 0,
            errors: Errors::default(),
            statuses: BTreeMap::new(),
        }
    }
}

impl Tally {
    /// One failure per connection event, as wrk counts them: of the `owed` requests in
    /// flight or taken for the connection, all but the one counted here go back to `budget`,
    /// so that a count-bounded run ends after exactly N answers or failures.
    pub(crate) fn failed(&mut self, why: Failure, owed: usize, budget: &Budget) {
        budget.give_back(owed.saturating_sub(1) as u64);
        let e = &mut self.errors;
        match why {
            Failure::Connect => e.connect += 1,
            Failure::Read => e.read += 1,
            Failure::Write => e.write += 1,
            Failure::Timeout => e.timeout += 1,
            Failure::Protocol => e.protocol += 1,
            Failure::GoAway => e.goaway += 1,
        }
    }

    /// Records one complete response.
    pub fn response(&mut self, status: u16, latency: Duration) {
        self.responses += 1;
        latency::record(&mut self.latency, latency);
        *self.statuses.entry(status).or_default() += 1;
        if !(200..300).contains(&status) {
            self.errors.status += 1;
        }
    }

    fn merge(&mut self, o: &Tally) {
        latency::merge(&mut self.latency, &o.latency);
        self.responses += o.responses;
        self.bytes += o.bytes;
        self.connects += o.connects;
        self.errors.add(&o.errors);
        for (s, n) in &o.statuses {
            *self.statuses.entry(*s).or_default() += n;
        }
    }
}

/// How a run was set up, for the report's header.
#[derive(Debug, Clone)]
pub struct RunShape {
    /// Target URL.
    pub url: String,
    /// Concurrent connections.
    pub connections: usize,
    /// Load threads.
    pub threads: usize,
    /// Connections kept open across requests.
    pub keep_alive: bool,
    /// Requests written per batch on each connection.
    pub pipeline: usize,
    /// Request method.
    pub method: String,
    /// HTTP/2 with this many streams in flight per connection; `None`: HTTP/1.1.
    pub http2_streams: Option<usize>,
    /// HTTP/3 with this many streams in flight per connection; `None`: not HTTP/3.
    pub http3_streams: Option<usize>,
}

/// The merged result of a run.
#[derive(Debug, Clone)]
pub struct Report {
    /// How the run was set up.
    pub shape: RunShape,
    /// Wall time from the first connect to the stop.
    pub elapsed: Duration,
    /// Everything counted.
    pub tally: Tally,
}

impl Report {
    /// Merges the threads' tallies.
    pub fn new(shape: RunShape, elapsed: Duration, tallies: &[Tally]) -> Report {
        let mut tally = Tally::default();
        for t in tallies {
            tally.merge(t);
        }
        Report {
            shape,
            elapsed,
            tally,
        }
    }

    /// Complete responses per second.
    pub fn requests_per_sec(&self) -> f64 {
        self.tally.responses as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Latency percentiles; all zero when nothing was answered.
    pub fn latency(&self) -> Latency {
        Latency::of(&self.tally.latency)
    }

    /// The report as JSON (`--json`); latencies in microseconds.
    pub fn to_json(&self) -> Value {
        let l = self.latency();
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let statuses: serde_json::Map<String, Value> = self
            .tally
            .statuses
            .iter()
            .map(|(s, n)| (s.to_string(), json!(n)))
            .collect();
        json!({
            "url": self.shape.url,
            "method": self.shape.method,
            "connections": self.shape.connections,
            "threads": self.shape.threads,
            "keep_alive": self.shape.keep_alive,
            "pipeline": self.shape.pipeline,
            "http2": self.shape.http2_streams.is_some(),
            "http3": self.shape.http3_streams.is_some(),
            "streams": self.shape.http2_streams.or(self.shape.http3_streams),
            "duration_s": secs,
            "requests": self.tally.responses,
            "requests_per_sec": self.requests_per_sec(),
            "bytes": self.tally.bytes,
            "bytes_per_sec": self.tally.bytes as f64 / secs,
            "connects": self.tally.connects,
            "latency_us": l.to_json(),
            "status": statuses,
            "errors": self.tally.errors.to_json(),
        })
    }

    /// The report as the table printed at the end of a run.
    pub fn to_table(&self) -> String {
        let s = &self.shape;
        let l = self.latency();
        let secs = self.elapsed.as_secs_f64();
        let mode = match (s.http2_streams, s.keep_alive, s.pipeline) {
            _ if s.http3_streams.is_some() => format!(
                "HTTP/3, {} streams per connection",
                s.http3_streams.unwrap_or(0)
            ),
            (Some(n), _, _) => format!("HTTP/2, {n} streams per connection"),
            (None, false, _) => "a connection per request".to_owned(),
            (None, true, 1) => "keep-alive".to_owned(),
            (None, true, n) => format!("keep-alive, pipelined {n} deep"),
        };
        let mut out = String::new();
        let _ = writeln!(out, "{} {}", s.method, s.url);
        let _ = writeln!(
            out,
            "  {} connections, {} threads, {mode}, {secs:.2} s",
            s.connections, s.threads
        );
        l.write_table(&mut out, "  latency ms   ");
        let _ = writeln!(
            out,
            "  requests     {} in {secs:.2} s, {:.1}/s",
            self.tally.responses,
            self.requests_per_sec()
        );
        let _ = writeln!(
            out,
            "  transfer     {:.2} MiB read, {:.2} MiB/s; {} connections opened",
            self.tally.bytes as f64 / 1048576.0,
            self.tally.bytes as f64 / 1048576.0 / secs.max(1e-9),
            self.tally.connects
        );
        let statuses: Vec<String> = self
            .tally
            .statuses
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect();
        let statuses = if statuses.is_empty() {
            "none".to_owned()
        } else {
            statuses.join(", ")
        };
        let _ = writeln!(out, "  status       {statuses}");
        let e = self.tally.errors;
        // HTTP/2's and HTTP/3's own kinds only where they can happen (HTTP/3 has no GOAWAY
        // error: its GOAWAY carries none, and a close with an error code is counted as a read
        // or protocol error).
        let h2 = if s.http2_streams.is_some() {
            format!(", reset {}, goaway {}", e.reset, e.goaway)
        } else if s.http3_streams.is_some() {
            format!(", reset {}", e.reset)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  errors       {} (connect {}, read {}, write {}, timeout {}, non-2xx {}, protocol {}{h2})",
            e.total(),
            e.connect,
            e.read,
            e.write,
            e.timeout,
            e.status,
            e.protocol
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> RunShape {
        RunShape {
            url: "http://127.0.0.1:1/".into(),
            connections: 2,
            threads: 1,
            keep_alive: true,
            pipeline: 1,
            method: "GET".into(),
            http2_streams: None,
            http3_streams: None,
        }
    }

    #[test]
    fn merges_threads_and_counts_non_2xx() {
        let mut a = Tally::default();
        a.response(200, Duration::from_micros(100));
        a.response(503, Duration::from_micros(300));
        a.errors.connect = 2;
        let mut b = Tally::default();
        b.response(200, Duration::from_millis(2));
        b.bytes = 10;
        let r = Report::new(shape(), Duration::from_secs(2), &[a, b]);
        assert_eq!(r.tally.responses, 3);
        assert_eq!(r.tally.errors.status, 1);
        assert_eq!(r.tally.errors.total(), 3);
        assert_eq!(r.requests_per_sec(), 1.5);
        let l = r.latency();
        assert_eq!((l.min, l.p50), (100, 300));
        assert!((1990..=2010).contains(&l.max));
        let j = r.to_json();
        assert_eq!(j["status"]["503"], 1);
        assert_eq!(j["errors"]["connect"], 2);
        let table = r.to_table();
        assert!(table.contains("200: 2, 503: 1"), "{table}");
        assert!(table.contains("errors       3 (connect 2"), "{table}");
    }

    #[test]
    fn an_empty_run_reports_zeros() {
        let r = Report::new(shape(), Duration::from_secs(1), &[Tally::default()]);
        assert_eq!(r.latency().max, 0);
        assert!(r.to_table().contains("status       none"));
    }
}
