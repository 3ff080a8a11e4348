//! `berth bench`: an HTTP/1.1 load generator.
//!
//! Keep-alive mode is wrk's closed loop (each connection sends a request, or a pipelined batch,
//! as soon as the previous answer is in); `keep_alive: false` is ab's (a new connection per
//! request, timed from the connect). Threads each own a share of the connections on their own
//! mio loop ([`load`]); their tallies are merged into one [`Report`] at the end.

mod load;
mod report;
mod target;

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

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
    let threads = config.threads.clamp(1, config.connections);
    let plan = load::Plan {
        addr: config.target.addr,
        request: config.request.encode(&config.target, config.keep_alive),
        pipeline: config.pipeline,
        keep_alive: config.keep_alive,
        head: config.request.is_head(),
        timeout: config.timeout,
    };
    let shared = load::Shared {
        budget: match config.limit {
            Limit::Requests(n) => Some(AtomicU64::new(n)),
            Limit::Duration(_) => None,
        },
        ..load::Shared::default()
    };
    let started = Instant::now();
    let (tallies, elapsed) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                // Connections are dealt out as evenly as they go.
                let share =
                    config.connections / threads + usize::from(t < config.connections % threads);
                let (plan, shared) = (&plan, &shared);
                std::thread::Builder::new()
                    .name(format!("bench-{t}"))
                    .spawn_scoped(s, move || load::run(plan, shared, share))
            })
            .collect();
        watch(config, &shared, started, &handles);
        let elapsed = started.elapsed();
        shared.stop.store(true, Relaxed);
        let tallies: Result<Vec<_>, String> = handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .map_err(|_| "a load thread panicked".to_owned())?
                    .map_err(|e| format!("load thread failed: {e}")),
                Err(e) => Err(format!("cannot start a load thread: {e}")),
            })
            .collect();
        (tallies, elapsed)
    });
    let shape = RunShape {
        url: config.target.url.clone(),
        connections: config.connections,
        threads,
        keep_alive: config.keep_alive,
        pipeline: config.pipeline,
        method: config.request.method.clone(),
    };
    Ok(Report::new(shape, elapsed, &tallies?))
}

/// Waits for the run's end (its time, or every thread done), printing progress if asked.
fn watch<T>(
    config: &BenchConfig,
    shared: &load::Shared,
    started: Instant,
    handles: &[std::io::Result<std::thread::ScopedJoinHandle<'_, T>>],
) {
    let deadline = match config.limit {
        Limit::Duration(d) => Some(started + d),
        Limit::Requests(_) => None,
    };
    let all_done = || {
        handles
            .iter()
            .all(|h| h.as_ref().map_or(true, |h| h.is_finished()))
    };
    let mut next_line = started + Duration::from_secs(1);
    let mut last = 0;
    loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) || all_done() {
            break;
        }
        let mut wake = next_line;
        if let Some(d) = deadline {
            wake = wake.min(d);
        }
        // Short naps so a count-bounded run ends promptly after its last answer.
        std::thread::sleep(
            wake.saturating_duration_since(now)
                .min(Duration::from_millis(20)),
        );
        if Instant::now() >= next_line {
            next_line += Duration::from_secs(1);
            if config.progress {
                let done = shared.responses.load(Relaxed);
                let _ = write!(
                    std::io::stderr(),
                    "\r  {:>5.1} s  {:>10} responses  {:>9}/s  {} errors   ",
                    started.elapsed().as_secs_f64(),
                    done,
                    done - last,
                    shared.errors.load(Relaxed)
                );
                last = done;
            }
        }
    }
    if config.progress {
        let _ = write!(std::io::stderr(), "\r{:70}\r", "");
    }
}
