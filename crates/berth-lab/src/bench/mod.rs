//! `berth bench`: an HTTP/1.1, HTTP/2 and HTTP/3 load generator.
//!
//! Keep-alive mode is wrk's closed loop (each connection sends a request, or a pipelined batch,
//! as soon as the previous answer is in); `keep_alive: false` is ab's (a new connection per
//! request, timed from the connect). HTTP/2 (`http2_streams`) is h2load's: each connection
//! keeps that many streams in flight, h2c with prior knowledge on `http://` and ALPN `h2` on
//! `https://`. HTTP/3 (`http3_streams`) is the same closed loop over QUIC (h3load's), UDP to
//! the `https://` URL's port, by the QUIC driver of [`h3`], which also serves [`h3::fetch`].
//! Threads each own a share of the connections on their own mio loop (the private `load` and
//! `h2` modules, and `h3`); their tallies are merged into one [`Report`] at the end.

mod h2;
pub mod h3;
mod load;
mod report;
mod target;

use std::io::IsTerminal;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::load_threads::{self, Budget, Progress, Threads};

pub use crate::latency::Latency;
pub use report::{Errors, Report, RunShape, Tally};
pub use target::{RequestSpec, Target};

/// When a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// After this long; requests still in flight then are not counted.
    Duration(Duration),
    /// After this many requests have been answered or have failed.
    Requests(u64),
}

/// A bench run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Where to send.
    pub target: Target,
    /// What to send.
    pub request: RequestSpec,
    /// Concurrent connections.
    pub connections: usize,
    /// Load threads (at most one per connection).
    pub threads: usize,
    /// When to stop.
    pub limit: Limit,
    /// Keep connections open across requests (wrk) or open one per request (ab).
    pub keep_alive: bool,
    /// Requests written back to back on a connection before reading (1: no pipelining).
    pub pipeline: usize,
    /// Longest wait for a response; longer is a timeout error.
    pub timeout: Duration,
    /// Print a progress line to stderr once a second (only worth it on a terminal).
    pub progress: bool,
    /// `https://`: verify the server against this CA (PEM). Without it the certificate is
    /// not checked (as wrk does not): the run measures the server, not the trust chain.
    pub ca: Option<std::path::PathBuf>,
    /// Speak HTTP/2 with this many streams in flight on each connection (h2c with prior
    /// knowledge, or ALPN `h2` over TLS); `None`: HTTP/1.1. Needs `keep_alive` and no
    /// pipelining (streams are HTTP/2's concurrency).
    pub http2_streams: Option<usize>,
    /// Speak HTTP/3 over QUIC (UDP to the `https://` URL's port, ALPN `h3`) with this many
    /// streams in flight on each connection; `None`: not. Needs `https://`, `keep_alive`, no
    /// pipelining, and no `http2_streams`.
    pub http3_streams: Option<usize>,
}

impl BenchConfig {
    /// A keep-alive GET run with wrk's defaults (10 connections, 2 threads, 10 seconds).
    pub fn new(target: Target) -> BenchConfig {
        BenchConfig {
            target,
            request: RequestSpec::default(),
            connections: 10,
            threads: 2,
            limit: Limit::Duration(Duration::from_secs(10)),
            keep_alive: true,
            pipeline: 1,
            timeout: Duration::from_secs(10),
            progress: false,
            ca: None,
            http2_streams: None,
            http3_streams: None,
        }
    }

    /// Whether a progress line makes sense: stderr is a terminal.
    pub fn stderr_is_terminal() -> bool {
        std::io::stderr().is_terminal()
    }
}

/// Runs the load and returns what it measured. Fails only if the load itself could not run
/// (e.g. no threads or no poll instance); everything the server does wrong is in the report.
pub fn run(config: &BenchConfig) -> Result<Report, String> {
    config.request.validate()?;
    if config.connections == 0 || config.pipeline == 0 {
        return Err("connections and pipeline depth must be at least 1".to_owned());
    }
    if config.limit == Limit::Requests(0) || config.limit == Limit::Duration(Duration::ZERO) {
        return Err("the run needs a duration or a request count above 0".to_owned());
    }
    if let Some(streams) = config.http2_streams {
        if streams == 0 {
            return Err("HTTP/2 needs at least 1 stream per connection".to_owned());
        }
        if !config.keep_alive || config.pipeline != 1 {
            return Err(
                "HTTP/2 keeps its connections and does not pipeline (streams are its \
                 concurrency)"
                    .to_owned(),
            );
        }
    }
    if let Some(streams) = config.http3_streams {
        if streams == 0 {
            return Err("HTTP/3 needs at least 1 stream per connection".to_owned());
        }
        if config.http2_streams.is_some() {
            return Err("HTTP/2 and HTTP/3 are one or the other".to_owned());
        }
        if config.target.tls_host.is_none() {
            return Err("HTTP/3 needs an https:// URL (QUIC has TLS inside)".to_owned());
        }
        if !config.keep_alive || config.pipeline != 1 {
            return Err(
                "HTTP/3 keeps its connections and does not pipeline (streams are its \
                 concurrency)"
                    .to_owned(),
            );
        }
    }
    let h3_plan = match config.http3_streams {
        Some(streams) => Some(h3::Plan::new(
            &config.target,
            &config.request,
            streams,
            config.ca.as_deref(),
            config.timeout,
        )?),
        None => None,
    };
    // Over TLS, HTTP/2 is offered alone: a server that does not choose it is not measured
    // as if it had.
    let alpn: &[&[u8]] = if config.http2_streams.is_some() {
        &[b"h2"]
    } else {
        &[b"http/1.1"]
    };
    let tls = match &config.target.tls_host {
        None => None,
        Some(host) => Some(load::TlsTarget {
            connector: berth::net::tls::TlsConnector::new(config.ca.as_deref(), alpn)
                .map_err(|e| format!("TLS: {e}"))?,
            host: host.clone(),
        }),
    };
    let h2_plan = config.http2_streams.map(|streams| h2::Plan {
        addr: config.target.addr,
        tls: tls.clone(),
        streams,
        block: config.request.encode_h2(&config.target),
        body: config.request.body.clone(),
        timeout: config.timeout,
    });
    let plan = load::Plan {
        tls,
        addr: config.target.addr,
        request: config.request.encode(&config.target, config.keep_alive),
        pipeline: config.pipeline,
        keep_alive: config.keep_alive,
        head: config.request.is_head(),
        timeout: config.timeout,
    };
    let (duration, count) = match config.limit {
        Limit::Duration(d) => (Some(d), None),
        Limit::Requests(n) => (None, Some(n)),
    };
    let threads = Threads::new("bench", config.threads, config.connections, duration);
    let shared = load::Shared {
        budget: Budget::new(count),
        ..load::Shared::default()
    };
    let mut last = 0;
    let progress = Progress {
        show: config.progress,
        counts: || {
            let done = shared.responses.load(Relaxed);
            let line = format!(
                "{:>10} responses  {:>9}/s  {} errors   ",
                done,
                done - last,
                shared.errors.load(Relaxed)
            );
            last = done;
            line
        },
        width: 70,
    };
    let (tallies, elapsed) = load_threads::run(&threads, &shared.stop, progress, |conns| {
        match (&h3_plan, &h2_plan) {
            (Some(h3_plan), _) => h3::run(h3_plan, &shared, conns.len()),
            (None, Some(h2_plan)) => h2::run(h2_plan, &shared, conns.len()),
            (None, None) => load::run(&plan, &shared, conns.len()),
        }
    })?;
    let shape = RunShape {
        url: config.target.url.clone(),
        connections: config.connections,
        threads: threads.count,
        keep_alive: config.keep_alive,
        pipeline: config.pipeline,
        method: config.request.method.clone(),
        http2_streams: config.http2_streams,
        http3_streams: config.http3_streams,
    };
    Ok(Report::new(shape, elapsed, &tallies))
}
