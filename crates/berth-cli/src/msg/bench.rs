//! `berth msg bench`: turns the options into a [`MsgBenchConfig`], runs it, prints the report.

use std::num::NonZeroUsize;
use std::time::Duration;

use berth_lab::msgbench::{self, Endpoint, Limit, MsgBenchConfig, Names, Protocol};
use clap::{ArgAction, Args};

use crate::args::{parse_duration, usage_error};

/// Options of `berth msg bench`.
#[derive(Debug, Args)]
pub struct MsgBenchArgs {
    /// Target endpoint: tcp://HOST:PORT or unix:///PATH.
    pub endpoint: String,

    /// Speak ZeroMQ (ZMTP 3.0, as a DEALER) to a ROUTER that echoes, instead of berth framing.
    #[arg(long)]
    pub zmq: bool,

    /// Payload bytes per message: 64, 1k, 64k, 1m, 8760000, 64m (k and m are 1024-based).
    #[arg(short = 's', long, value_name = "BYTES", default_value = "64", value_parser = parse_size)]
    pub size: u64,

    /// Concurrent connections.
    #[arg(short = 'c', long, value_name = "N", default_value = "10")]
    pub connections: NonZeroUsize,

    /// Load threads, each with its own event loop (at most one per connection).
    #[arg(short = 't', long, value_name = "N", default_value = "2")]
    pub threads: NonZeroUsize,

    /// Messages in flight per connection before it waits for echoes [default: 16 up to 4k,
    /// 1 above].
    #[arg(short = 'w', long, value_name = "N")]
    pub window: Option<NonZeroUsize>,

    /// How long to run: 10, 10s, 500ms, 2m [default: 10s unless -n is given].
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "count")]
    pub duration: Option<Duration>,

    /// Stop after this many messages have been echoed (or lost to errors).
    #[arg(short = 'n', long = "count", value_name = "COUNT", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,

    /// Longest a connection may go without moving a byte while it waits for something
    /// (connect, handshake, echo) before that counts as a timeout error.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Name connections PREFIX0, PREFIX1, ... in their keyword (berth framing only).
    #[arg(
        long,
        value_name = "P",
        default_value = "bench-",
        conflicts_with = "anonymous"
    )]
    pub name_prefix: String,

    /// Connect as anonymous clients (empty keyword) instead of named ones.
    #[arg(long)]
    pub anonymous: bool,

    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Print help.
    #[arg(short = 'h', long = "help", short_alias = '?', action = ArgAction::Help)]
    help: Option<bool>,
}

/// A message size: bytes, or a number with `k` or `m` (KiB and MiB; `b` suffixes allowed).
fn parse_size(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let t = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (number, scale) = if let Some(n) = t.strip_suffix('k') {
        (n, 1u64 << 10)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 1 << 20)
    } else if let Some(n) = t.strip_suffix('g') {
        (n, 1 << 30)
    } else {
        (t, 1)
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|&n| n < 1 << 63)
        .ok_or_else(|| format!("'{s}' is not a message size (e.g. 64, 1k, 64k, 1m, 8760000, 64m)"))
}

/// Runs the load and prints the table (or JSON) on stdout.
pub fn run(opts: MsgBenchArgs) -> Result<(), String> {
    let endpoint = Endpoint::parse(&opts.endpoint).unwrap_or_else(|e| usage_error("msg", &e));
    let protocol = if opts.zmq {
        Protocol::Zmq
    } else {
        Protocol::Berth
    };
    let mut config = MsgBenchConfig::new(endpoint, protocol, opts.size);
    config.endpoint_text = opts.endpoint.clone();
    config.connections = opts.connections.get();
    config.threads = opts.threads.get();
    if let Some(w) = opts.window {
        config.window = w.get();
    }
    config.limit = match (opts.count, opts.duration) {
        (Some(n), _) => Limit::Messages(n),
        (None, d) => Limit::Duration(d.unwrap_or(Duration::from_secs(10))),
    };
    config.timeout = opts.timeout;
    config.names = if opts.anonymous {
        Names::Anonymous
    } else {
        Names::Prefix(opts.name_prefix.clone())
    };
    config.progress = !opts.json && berth_lab::bench::BenchConfig::stderr_is_terminal();
    // Settings the library refuses (a prefix that makes invalid names) are usage errors.
    if let Err(e) = config.check() {
        usage_error("msg", &e);
    }
    let report = msgbench::run(&config)?;
    if opts.json {
        println!("{:#}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    // A run where nothing was echoed measured nothing: say so in the exit code too, with the
    // most frequent cause.
    if report.tally.messages == 0 {
        let cause = report
            .tally
            .reasons
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(text, _)| format!("; most often {text}"))
            .unwrap_or_default();
        return Err(format!(
            "no message to {} was echoed ({} errors{cause})",
            opts.endpoint,
            report.tally.errors.total()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        for (s, n) in [
            ("64", 64),
            ("1k", 1024),
            ("64K", 65_536),
            ("1m", 1 << 20),
            ("8760000", 8_760_000),
            ("64m", 64 << 20),
            ("64MiB", 64 << 20),
            ("0", 0),
        ] {
            assert_eq!(parse_size(s), Ok(n), "{s}");
        }
        for bad in [
            "",
            "k",
            "1.5m",
            "-1",
            "12q",
            "99999999999999999999",
            "9000000000g",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
