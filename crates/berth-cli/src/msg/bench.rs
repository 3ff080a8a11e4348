//! `berth msg bench`: turns the options into a [`MsgBenchConfig`], runs it, prints the report.

use std::num::NonZeroUsize;
use std::time::Duration;

use berth_lab::msgbench::{self, parse_endpoint, Limit, MsgBenchConfig, Names, Protocol, Relay};
use clap::Args;

use crate::args::{heading, usage_error, BENCH_DEFAULT_DURATION};
use berth::units;

/// Options of `berth msg bench`.
#[derive(Debug, Args)]
pub struct MsgBenchArgs {
    /// Target endpoint: tcp://HOST:PORT, unix:///PATH or ws://HOST:PORT/PATH (a WebSocket echo
    /// server, such as serve's /ws/echo; without a path, /ws/relay, as every ws:// endpoint).
    pub endpoint: String,

    /// Speak ZeroMQ (ZMTP 3.0, as a DEALER) to a ROUTER that echoes, instead of berth framing.
    #[arg(long)]
    pub zmq: bool,

    /// Payload bytes per message: 64, 1k, 64k, 1m, 8760000, 64m (k and m are 1024-based).
    #[arg(short = 's', long, value_name = "SIZE", default_value = "64", value_parser = units::size, help_heading = heading::LOAD)]
    pub size: u64,

    /// Concurrent connections.
    #[arg(short = 'c', long, value_name = "N", default_value = "10", help_heading = heading::LOAD)]
    pub connections: NonZeroUsize,

    /// Load threads, each with its own event loop (at most one per connection).
    #[arg(short = 't', long, value_name = "N", default_value = "2", help_heading = heading::LOAD)]
    pub threads: NonZeroUsize,

    /// Messages in flight per connection before it waits for echoes [default: 16 up to 4k,
    /// 1 above].
    #[arg(long, value_name = "N", help_heading = heading::LOAD)]
    pub window: Option<NonZeroUsize>,

    /// How long to run: 10 (seconds), 10s, 500ms, 2m [default: 10s unless -n is given].
    #[arg(long, value_name = "DURATION", value_parser = units::duration, conflicts_with = "count", help_heading = heading::LOAD)]
    pub duration: Option<Duration>,

    /// Stop after this many messages have been echoed (or lost to errors).
    #[arg(short = 'n', long = "count", value_name = "COUNT", value_parser = clap::value_parser!(u64).range(1..), help_heading = heading::LOAD)]
    pub count: Option<u64>,

    /// Longest a connection may go without moving a byte while it waits for something
    /// (connect, handshake, echo) before that counts as a timeout error.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = units::duration, help_heading = heading::LOAD)]
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

    /// Relay instead of echo: connections 2k and 2k+1 send to each other by name (@NAME
    /// text, the relay demo), each message crossing the server once, checked and timed.
    #[arg(long, conflicts_with_all = ["anonymous", "zmq"])]
    pub relay: bool,

    /// Relay mode across nodes: the odd connections connect to this endpoint (another node
    /// of the cluster), the even ones to ENDPOINT.
    #[arg(long, value_name = "ENDPOINT", conflicts_with_all = ["anonymous", "zmq"])]
    pub relay_via: Option<String>,

    /// Print the report as JSON instead of a table.
    #[arg(long, help_heading = heading::OUTPUT)]
    pub json: bool,
}

/// Runs the load and prints the table (or JSON) on stdout.
pub fn run(opts: MsgBenchArgs) -> Result<(), String> {
    let endpoint = parse_endpoint(&opts.endpoint).unwrap_or_else(|e| usage_error("msg bench", &e));
    let protocol = match (endpoint.websocket.is_some(), opts.zmq) {
        (true, true) => usage_error(
            "msg bench",
            "--zmq is for tcp:// and unix:// endpoints, not ws://",
        ),
        (true, false) => Protocol::WebSocket,
        (_, true) => Protocol::Zmq,
        (_, false) => Protocol::Berth,
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
        (None, d) => Limit::Duration(d.unwrap_or(BENCH_DEFAULT_DURATION)),
    };
    config.timeout = opts.timeout;
    config.names = if opts.anonymous {
        Names::Anonymous
    } else {
        Names::Prefix(opts.name_prefix.clone())
    };
    config.progress = !opts.json && berth_lab::bench::BenchConfig::stderr_is_terminal();
    if opts.relay || opts.relay_via.is_some() {
        let via = opts
            .relay_via
            .as_deref()
            .map(|e| parse_endpoint(e).unwrap_or_else(|err| usage_error("msg bench", &err)));
        config.relay = Some(Relay {
            via,
            settle: Duration::from_millis(500),
        });
    }
    // Settings the library refuses (a prefix that makes invalid names) are usage errors.
    if let Err(e) = config.check() {
        usage_error("msg bench", &e);
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
