//! `berth msg bench`: an echo load generator for message servers.
//!
//! Each connection makes the handshake (berth's keyword and `OK`, or ZeroMQ's greeting and
//! READY as a DEALER), then keeps up to `window` messages in flight: it writes messages filled
//! with a deterministic pattern ([`Pattern`]), and reads the echoes back, checking each one's
//! length and every byte as it streams in. An echo that differs is a protocol error, counted
//! with where it differed; this is how a server that breaks at some size (seed 003's 8,760,000
//! bytes) shows up as errors rather than as a fast-looking number.
//!
//! ```text
//!   pattern (shared, read-only) ──write──▶ socket ──▶ server ──▶ socket ──read──▶ reader
//!        ▲                                                               │ Start/Chunk/End
//!        └────────────── compare each chunk in place (no copy kept) ◀────┘
//! ```
//!
//! Memory does not grow with message size: a connection holds a small output buffer (headers
//! and small messages batched into one write), and each thread one read buffer; a 64 MiB
//! message is written from and compared against the pattern in slices. Threads each own a
//! share of the connections on their own mio loop (`load.rs`); their tallies are merged into
//! one [`MsgReport`] at the end, as `bench` does for HTTP.

mod endpoint;
mod load;
mod pattern;
mod report;
mod wire;
mod ws;
pub mod zmtp;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use berth_proto::msg::frame::CONTROL_BIT;
use berth_proto::msg::name::{NameRule, STRICT_MAX_NAME};

use crate::load_threads::{self, Budget, Progress, Threads};

pub use berth::net::Endpoint;
pub use endpoint::parse as parse_endpoint;
pub use pattern::Pattern;
pub use report::{Failure, MsgErrors, MsgReport, MsgRunShape, MsgTally, OTHER_REASONS};

/// The wire protocol a run speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// berth's framing and handshake (docs/msg-protocol.md).
    Berth,
    /// ZeroMQ: ZMTP 3.0, NULL mechanism, as a DEALER talking to a ROUTER.
    Zmq,
    /// WebSocket (RFC 6455): binary messages to an echo server (`ws://` endpoints).
    WebSocket,
}

impl Protocol {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Berth => "berth",
            Protocol::Zmq => "zmq",
            Protocol::WebSocket => "websocket",
        }
    }
}

/// How connections introduce themselves (berth only; ZeroMQ connections send no name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Names {
    /// Connection `i` (counted from 0 across all threads) is named `PREFIX` + `i`.
    Prefix(String),
    /// Empty keywords: anonymous clients.
    Anonymous,
}

impl Names {
    /// The keyword of connection `i`.
    pub fn name(&self, i: usize) -> String {
        match self {
            Names::Prefix(p) => format!("{p}{i}"),
            Names::Anonymous => String::new(),
        }
    }
}

/// When a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// After this long; echoes still arriving then count their verified bytes, not as messages.
    Duration(Duration),
    /// After this many messages have been echoed or lost to failures.
    Messages(u64),
}

/// A message bench run.
#[derive(Debug, Clone)]
pub struct MsgBenchConfig {
    /// Where to connect.
    pub endpoint: Endpoint,
    /// The endpoint as the user wrote it, for the report.
    pub endpoint_text: String,
    /// What to speak.
    pub protocol: Protocol,
    /// Payload bytes per message.
    pub size: u64,
    /// Concurrent connections.
    pub connections: usize,
    /// Load threads (at most one per connection).
    pub threads: usize,
    /// Messages in flight per connection before it waits for echoes.
    pub window: usize,
    /// When to stop.
    pub limit: Limit,
    /// How long a connection may move no byte while something is outstanding (connecting, a
    /// handshake, a message or its echo) before that is a timeout error. Progress, not whole
    /// round trips, is timed: 200 connections each echoing 64 MiB take many seconds per round
    /// trip on a healthy server.
    pub timeout: Duration,
    /// Keywords (berth).
    pub names: Names,
    /// Print a progress line to stderr once a second.
    pub progress: bool,
    /// Relay instead of echo: see [`Relay`].
    pub relay: Option<Relay>,
}

/// Relay mode (berth framing, the relay demo's `@NAME text`): connections `2k` and `2k + 1`
/// are partners, each sending its messages to the other by name (`@PARTNER ` then the pattern,
/// the message's size in all), so each message crosses the server once, from one client to
/// another; what a connection receives is its partner's messages, checked byte by byte like
/// echoes, and timed from its own message of the same number. Nobody sends before every
/// connection is in and a moment has passed, so that every name is known everywhere.
#[derive(Debug, Clone)]
pub struct Relay {
    /// Where the odd connections connect: another node of a cluster (`--relay-via`), or
    /// `None` for the same endpoint as the even ones.
    pub via: Option<Endpoint>,
    /// The pause once everyone is in.
    pub settle: Duration,
}

impl MsgBenchConfig {
    /// A run with the CLI's defaults: 10 connections, 2 threads, 10 seconds, names `bench-N`.
    pub fn new(endpoint: Endpoint, protocol: Protocol, size: u64) -> MsgBenchConfig {
        MsgBenchConfig {
            endpoint_text: endpoint.to_string(),
            endpoint,
            protocol,
            size,
            connections: 10,
            threads: 2,
            window: MsgBenchConfig::default_window(size),
            limit: Limit::Duration(Duration::from_secs(10)),
            timeout: Duration::from_secs(10),
            names: Names::Prefix("bench-".to_owned()),
            progress: false,
            relay: None,
        }
    }

    /// Checks the settings: counts above zero, a size that can be framed, names that are
    /// valid keywords. Every error is the caller's to fix.
    pub fn check(&self) -> Result<(), String> {
        if self.connections == 0 || self.window == 0 {
            return Err("connections and window must be at least 1".to_owned());
        }
        if self.limit == Limit::Messages(0) || self.limit == Limit::Duration(Duration::ZERO) {
            return Err("the run needs a duration or a message count above 0".to_owned());
        }
        if self.size >= CONTROL_BIT {
            return Err(format!(
                "a message of {} bytes cannot be framed (the length field allows less than 2^63)",
                self.size
            ));
        }
        endpoint::check(&self.endpoint)?;
        if let Some(via) = self.relay.as_ref().and_then(|r| r.via.as_ref()) {
            endpoint::check(via)?;
        }
        if self.relay.is_some() {
            let Names::Prefix(_) = self.names else {
                return Err("relay mode needs named connections".to_owned());
            };
            if self.protocol != Protocol::Berth {
                return Err("relay mode speaks berth framing (tcp:// or unix://)".to_owned());
            }
            if self.connections % 2 != 0 {
                return Err("relay mode pairs connections: give an even number".to_owned());
            }
            let prefix = self.names.name(self.connections - 1).len() as u64 + 2;
            if self.size <= prefix {
                return Err(format!(
                    "relay messages start with @NAME and a space ({prefix} bytes here): use a size above that"
                ));
            }
        }
        if let (Protocol::Berth, Names::Prefix(p)) = (self.protocol, &self.names) {
            // Names grow with the index; the last one is the longest.
            let longest = self.names.name(self.connections - 1);
            // Checked against the strict rule, so that the bench's names are taken by any
            // berth server, `--strict-names` or not.
            if NameRule::STRICT.check(longest.as_bytes()).is_err() {
                return Err(format!(
                    "name prefix {p:?} gives names like {longest:?}, which are not valid names (1 to {STRICT_MAX_NAME} bytes of UTF-8, no control characters or spaces, not starting with '#')"
                ));
            }
        }
        Ok(())
    }

    /// The window used when none is given: 16 messages in flight up to 4 KiB, where a
    /// one-at-a-time loop would measure round-trip latency rather than the server; 1 above,
    /// where one message already fills the socket buffers.
    pub fn default_window(size: u64) -> usize {
        if size <= 4096 {
            16
        } else {
            1
        }
    }
}

/// Runs the load and returns what it measured. Fails only if the load itself could not run
/// (bad settings, no threads, no poll instance); everything the server does wrong is in the
/// report.
pub fn run(config: &MsgBenchConfig) -> Result<MsgReport, String> {
    config.check()?;
    let plan = load::Plan {
        endpoint: config.endpoint.clone(),
        protocol: config.protocol,
        size: config.size,
        window: config.window,
        timeout: config.timeout,
        pattern: Pattern::new(),
        relay: config.relay.is_some(),
        peer_endpoint: config
            .relay
            .as_ref()
            .and_then(|r| r.via.clone())
            .unwrap_or_else(|| config.endpoint.clone()),
        connections: config.connections,
        settle: config.relay.as_ref().map_or(Duration::ZERO, |r| r.settle),
    };
    let (duration, count) = match config.limit {
        Limit::Duration(d) => (Some(d), None),
        Limit::Messages(n) => (None, Some(n)),
    };
    // Relay mode deals connections out in pairs: partners share a thread, which times each
    // message from its sender's write to its partner's read.
    let pairs = config.relay.is_some();
    let units = if pairs {
        config.connections / 2
    } else {
        config.connections
    };
    let threads = Threads::new("msgbench", config.threads, units, duration);
    let shared = load::Shared {
        budget: Budget::new(count),
        ..load::Shared::default()
    };
    let (mut last_msgs, mut last_bytes) = (0, 0);
    let progress = Progress {
        show: config.progress,
        counts: || {
            let msgs = shared.messages.load(Relaxed);
            let bytes = shared.payload_bytes.load(Relaxed);
            let line = format!(
                "{:>10} messages  {:>9}/s  {:>9.1} MB/s  {} errors   ",
                msgs,
                msgs - last_msgs,
                (bytes - last_bytes) as f64 / 1e6,
                shared.errors.load(Relaxed)
            );
            (last_msgs, last_bytes) = (msgs, bytes);
            line
        },
        width: 80,
    };
    // Names count across threads: a thread's connections are a range of the run's indices.
    let (tallies, elapsed) = load_threads::run(&threads, &shared.stop, progress, |conns| {
        let conns = if pairs {
            2 * conns.start..2 * conns.end
        } else {
            conns
        };
        let specs = conns
            .map(|i| load::Spec {
                name: config.names.name(i),
                prefix: match config.relay {
                    Some(_) => format!("@{} ", config.names.name(i ^ 1)).into_bytes(),
                    None => Vec::new(),
                },
                peer: config.relay.is_some() && i % 2 == 1,
            })
            .collect();
        load::run(&plan, &shared, specs)
    })?;
    let shape = MsgRunShape {
        endpoint: config.endpoint_text.clone(),
        protocol: config.protocol,
        size: config.size,
        connections: config.connections,
        threads: threads.count,
        window: config.window,
        relay: config.relay.is_some(),
    };
    Ok(MsgReport::new(shape, elapsed, &tallies))
}
