//! What a message bench run measured, in the shape of `bench::report`: each load thread keeps
//! a [`MsgTally`], merged once at the end into a [`MsgReport`] that renders as a table or as
//! JSON. Errors are counted by kind and always shown, zero or not, and the servers' own words
//! (refusal texts, what differed in an echo) are kept, counted, beside them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::Protocol;
use crate::latency::{self, Latency};

/// Distinct error texts kept per run; more are counted under [`OTHER_REASONS`], so a server
/// that fails differently on every message cannot grow the report without bound.
const MAX_REASONS: usize = 32;

/// The key under which error texts beyond the first 32 distinct ones are counted.
pub const OTHER_REASONS: &str = "(other errors)";

/// Failures by kind. Each one ended a connection (which the bench then opens again).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MsgErrors {
    /// The connection could not be made.
    pub connect: u64,
    /// The handshake failed: refused by the server (its text is in the reasons), or answered
    /// with something that is not the protocol's handshake.
    pub handshake: u64,
    /// Reading failed, or the server closed (or ended with a control frame) with messages
    /// outstanding.
    pub read: u64,
    /// Writing failed.
    pub write: u64,
    /// No byte moved for the timeout while something was outstanding.
    pub timeout: u64,
    /// An echo was not what was sent (length or content), or the framing was broken.
    pub protocol: u64,
}

impl MsgErrors {
    /// Sum of every kind.
    pub fn total(&self) -> u64 {
        self.connect + self.handshake + self.read + self.write + self.timeout + self.protocol
    }

    fn add(&mut self, o: &MsgErrors) {
        self.connect += o.connect;
        self.handshake += o.handshake;
        self.read += o.read;
        self.write += o.write;
        self.timeout += o.timeout;
        self.protocol += o.protocol;
    }

    fn to_json(self) -> Value {
        json!({
            "connect": self.connect, "handshake": self.handshake, "read": self.read,
            "write": self.write, "timeout": self.timeout, "protocol": self.protocol,
        })
    }
}

/// Kinds of failure, for [`MsgTally::fail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// See [`MsgErrors::connect`].
    Connect,
    /// See [`MsgErrors::handshake`].
    Handshake,
    /// See [`MsgErrors::read`].
    Read,
    /// See [`MsgErrors::write`].
    Write,
    /// See [`MsgErrors::timeout`].
    Timeout,
    /// See [`MsgErrors::protocol`].
    Protocol,
}

impl Failure {
    /// The kind's name, as in the report.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Handshake => "handshake",
            Failure::Read => "read",
            Failure::Write => "write",
            Failure::Timeout => "timeout",
            Failure::Protocol => "protocol",
        }
    }
}

/// One load thread's counts.
#[derive(Debug, Clone)]
pub struct MsgTally {
    /// Round trip of every echoed message, in microseconds: from its first byte handed to the
    /// socket to its echo's last byte read.
    pub latency: Histogram<u64>,
    /// Messages whose whole echo came back and matched.
    pub messages: u64,
    /// Echoed payload bytes that matched what was sent, including those of an echo still
    /// arriving when the run stopped (so big messages in short runs are not undercounted).
    pub payload_bytes: u64,
    /// Bytes read from sockets (headers and handshakes included).
    pub bytes_read: u64,
    /// Bytes written to sockets.
    pub bytes_written: u64,
    /// Connections established.
    pub connects: u64,
    /// Handshakes completed.
    pub handshakes: u64,
    /// Failures by kind.
    pub errors: MsgErrors,
    /// Failures by what was said about them (`kind: text`), counted.
    pub reasons: BTreeMap<String, u64>,
}

impl Default for MsgTally {
    fn default() -> Self {
        MsgTally {
            latency: latency::histogram(),
            messages: 0,
            payload_bytes: 0,
            bytes_read: 0,
            bytes_written: 0,
            connects: 0,
            handshakes: 0,
            errors: MsgErrors::default(),
            reasons: BTreeMap::new(),
        }
    }
}

impl MsgTally {
    /// Records one echoed message.
    pub fn echoed(&mut self, latency: Duration) {
        self.messages += 1;
        latency::record(&mut self.latency, latency);
    }

    /// Records one failure and what was said about it.
    pub fn fail(&mut self, why: Failure, text: &str) {
        let e = &mut self.errors;
        match why {
            Failure::Connect => e.connect += 1,
            Failure::Handshake => e.handshake += 1,
            Failure::Read => e.read += 1,
            Failure::Write => e.write += 1,
            Failure::Timeout => e.timeout += 1,
            Failure::Protocol => e.protocol += 1,
        }
        self.reason(&format!("{}: {text}", why.name()), 1);
    }

    fn reason(&mut self, key: &str, n: u64) {
        if let Some(count) = self.reasons.get_mut(key) {
            *count += n;
        } else if self.reasons.len() < MAX_REASONS {
            self.reasons.insert(key.to_owned(), n);
        } else {
            *self.reasons.entry(OTHER_REASONS.to_owned()).or_default() += n;
        }
    }

    fn merge(&mut self, o: &MsgTally) {
        latency::merge(&mut self.latency, &o.latency);
        self.messages += o.messages;
        self.payload_bytes += o.payload_bytes;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.connects += o.connects;
        self.handshakes += o.handshakes;
        self.errors.add(&o.errors);
        for (k, n) in &o.reasons {
            self.reason(k, *n);
        }
    }
}

/// How a run was set up, for the report's header.
#[derive(Debug, Clone)]
pub struct MsgRunShape {
    /// The endpoint, as resolved.
    pub endpoint: String,
    /// Wire protocol.
    pub protocol: Protocol,
    /// Payload bytes per message.
    pub size: u64,
    /// Concurrent connections.
    pub connections: usize,
    /// Load threads.
    pub threads: usize,
    /// Messages in flight per connection.
    pub window: usize,
    /// Relay mode: messages went from one client to another (timed one way), not echoed.
    pub relay: bool,
}

/// The merged result of a run.
#[derive(Debug, Clone)]
pub struct MsgReport {
    /// How the run was set up.
    pub shape: MsgRunShape,
    /// Wall time from the start to the stop.
    pub elapsed: Duration,
    /// Everything counted.
    pub tally: MsgTally,
}

impl MsgReport {
    /// Merges the threads' tallies.
    pub fn new(shape: MsgRunShape, elapsed: Duration, tallies: &[MsgTally]) -> MsgReport {
        let mut tally = MsgTally::default();
        for t in tallies {
            tally.merge(t);
        }
        MsgReport {
            shape,
            elapsed,
            tally,
        }
    }

    fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Echoed messages per second.
    pub fn msgs_per_sec(&self) -> f64 {
        self.tally.messages as f64 / self.secs()
    }

    /// Echoed, verified payload megabytes (10^6 bytes) per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.tally.payload_bytes as f64 / 1e6 / self.secs()
    }

    /// Round-trip percentiles in microseconds; all zero when nothing was echoed.
    pub fn latency(&self) -> Latency {
        Latency::of(&self.tally.latency)
    }

    /// The report as JSON (`--json`); latencies in microseconds, MB = 10^6 bytes.
    pub fn to_json(&self) -> Value {
        let l = self.latency();
        let s = &self.shape;
        let t = &self.tally;
        json!({
            "endpoint": s.endpoint,
            "protocol": s.protocol.name(),
            "size": s.size,
            "connections": s.connections,
            "threads": s.threads,
            "window": s.window,
            "relay": s.relay,
            "duration_s": self.secs(),
            "messages": t.messages,
            "msgs_per_sec": self.msgs_per_sec(),
            "payload_bytes": t.payload_bytes,
            "mb_per_sec": self.mb_per_sec(),
            "bytes_read": t.bytes_read,
            "bytes_written": t.bytes_written,
            "connects": t.connects,
            "handshakes": t.handshakes,
            "latency_us": l.to_json(),
            "errors": t.errors.to_json(),
            "error_reasons": t.reasons,
        })
    }

    /// The report as the table printed at the end of a run.
    pub fn to_table(&self) -> String {
        let s = &self.shape;
        let t = &self.tally;
        let l = self.latency();
        let secs = self.elapsed.as_secs_f64();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} {}, {}-byte messages",
            s.protocol.name(),
            s.endpoint,
            s.size
        );
        let _ = writeln!(
            out,
            "  {} connections, {} threads, window {}, {secs:.2} s",
            s.connections, s.threads, s.window
        );
        let (timed, done) = match s.relay {
            true => ("  relay ms      ", "relayed"),
            false => ("  round trip ms ", "echoed"),
        };
        l.write_table(&mut out, timed);
        let _ = writeln!(
            out,
            "  messages     {} {done} in {secs:.2} s, {:.1}/s",
            t.messages,
            self.msgs_per_sec()
        );
        let _ = writeln!(
            out,
            "  payload      {:.2} MB {done} and verified, {:.2} MB/s (MB = 10^6 bytes)",
            t.payload_bytes as f64 / 1e6,
            self.mb_per_sec()
        );
        let _ = writeln!(
            out,
            "  connections  {} opened, {} handshakes",
            t.connects, t.handshakes
        );
        let e = t.errors;
        let _ = writeln!(
            out,
            "  errors       {} (connect {}, handshake {}, read {}, write {}, timeout {}, protocol {})",
            e.total(),
            e.connect,
            e.handshake,
            e.read,
            e.write,
            e.timeout,
            e.protocol
        );
        // Most frequent first: the reason to read is the one that happened most.
        let mut reasons: Vec<_> = t.reasons.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (text, n) in reasons {
            let _ = writeln!(out, "    {n:>8} x {text}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> MsgRunShape {
        MsgRunShape {
            endpoint: "tcp://127.0.0.1:1".into(),
            protocol: Protocol::Berth,
            size: 64,
            connections: 2,
            threads: 1,
            window: 16,
            relay: false,
        }
    }

    #[test]
    fn merges_threads_and_keeps_reasons() {
        let mut a = MsgTally::default();
        a.echoed(Duration::from_micros(100));
        a.payload_bytes = 64;
        a.fail(Failure::Handshake, "refused name-taken");
        let mut b = MsgTally::default();
        b.echoed(Duration::from_millis(2));
        b.payload_bytes = 2_000_000 - 64;
        b.fail(Failure::Handshake, "refused name-taken");
        b.fail(Failure::Protocol, "echo differs at byte 3");
        let r = MsgReport::new(shape(), Duration::from_secs(2), &[a, b]);
        assert_eq!(r.tally.messages, 2);
        assert_eq!(r.msgs_per_sec(), 1.0);
        assert_eq!(r.mb_per_sec(), 1.0);
        assert_eq!(r.tally.errors.total(), 3);
        assert_eq!(r.tally.reasons["handshake: refused name-taken"], 2);
        let j = r.to_json();
        assert_eq!(j["errors"]["handshake"], 2);
        assert_eq!(j["error_reasons"]["protocol: echo differs at byte 3"], 1);
        assert_eq!(j["protocol"], "berth");
        let table = r.to_table();
        assert!(
            table.contains("errors       3 (connect 0, handshake 2"),
            "{table}"
        );
        assert!(
            table.contains("2 x handshake: refused name-taken"),
            "{table}"
        );
    }

    #[test]
    fn reasons_are_bounded() {
        let mut t = MsgTally::default();
        for i in 0..100 {
            t.fail(Failure::Protocol, &format!("differs at byte {i}"));
        }
        assert_eq!(t.reasons.len(), MAX_REASONS + 1);
        assert_eq!(t.reasons[OTHER_REASONS], 100 - MAX_REASONS as u64);
        assert_eq!(t.errors.protocol, 100);
    }

    #[test]
    fn an_empty_run_reports_zeros() {
        let r = MsgReport::new(shape(), Duration::from_secs(1), &[MsgTally::default()]);
        assert_eq!(r.latency().max, 0);
        assert!(r.to_table().contains("0 echoed"));
    }
}
