//! Command-line flags. Each flag documents itself; `--help` is generated from these docs,
//! grouped by heading. The serve options keep seed 001's names and short forms
//! (`-v -d -p -A -C -w -D`), and every subcommand shares one vocabulary: a flag name, its unit
//! syntax ([`berth::units`]) and its default mean the same in `serve` and `msg serve`, and a
//! short flag means the same in every subcommand that has it. Older spellings are rewritten
//! before parsing, each with a note ([`crate::spellings`]).

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use berth::drive::{Model, ModelConfigs};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::error::ErrorKind;
use clap::{Arg, ArgAction, Args, CommandFactory, Parser, Subcommand, ValueEnum};

use berth::net::ConnSizing;
use berth::units;

/// Headings of `--help`, shared by the subcommands.
pub mod heading {
    /// Where and how to listen.
    pub const LISTEN: &str = "Listening";
    /// Model, threads and connection caps.
    pub const THREADS: &str = "Model, threads and capacity";
    /// Sizes the server accepts.
    pub const LIMITS: &str = "Limits";
    /// Timeouts.
    pub const TIMEOUTS: &str = "Timeouts";
    /// Certificates.
    pub const TLS: &str = "TLS";
    /// Stopping.
    pub const SHUTDOWN: &str = "Shutdown";
    /// Running in the background.
    pub const PROCESS: &str = "Process";
    /// Logs.
    pub const LOGGING: &str = "Logging";
    /// What the demo application does.
    pub const APP: &str = "Application";
    /// Names and their rules (msg).
    pub const NAMES: &str = "Names";
    /// The load a generator makes.
    pub const LOAD: &str = "Load";
    /// How a request or message is made.
    pub const REQUEST: &str = "Request";
    /// What is printed.
    pub const OUTPUT: &str = "Output";
}

/// Default of `--write-timeout`, in `serve` and `msg serve`: nginx's `send_timeout`.
pub const WRITE_TIMEOUT: &str = "60s";
/// Default of `--shutdown-timeout`, in `serve` and `msg serve`: gunicorn's `--graceful-timeout`
/// and Kubernetes' termination grace period.
pub const SHUTDOWN_TIMEOUT: &str = "30s";
/// Default of `-C`/`--accept-capacity`, in `serve` and `msg serve`: HTTP's
/// ([`ConnSizing::HTTP_CAPACITY`]), also for messages, where an engine made in code holds
/// fewer ([`ConnSizing::msg`]).
pub fn accept_capacity() -> NonZeroUsize {
    NonZeroUsize::new(ConnSizing::HTTP_CAPACITY).unwrap_or(NonZeroUsize::MIN)
}

/// berth: a socket server core that runs every classic concurrency model over the same
/// protocols, and measures them.
#[derive(Debug, Parser)]
#[command(
    name = "berth",
    version,
    arg_required_else_help = true,
    disable_help_flag = true,
    disable_help_subcommand = false
)]
pub struct Cli {
    /// Print help (of the subcommand it follows).
    #[arg(short = 'h', long = "help", short_alias = '?', action = ArgAction::Help, global = true)]
    help: Option<bool>,

    /// Logging, the same for every subcommand.
    #[command(flatten)]
    pub log: LogArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// What to run.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve HTTP/1.1 and HTTP/2, plain or TLS: files, a site (--site DIR), WebSocket and the
    /// demo routes, until stopped.
    #[command(disable_help_flag = true)]
    Serve(Box<ServeArgs>),
    /// Load-test an HTTP server: keep-alive like wrk, a connection per request like ab,
    /// HTTP/2 like h2load, or HTTP/3 like h3load.
    #[command(disable_help_flag = true)]
    Bench(BenchArgs),
    /// Run every berth model and every installed peer server under the same loads, one after
    /// another, and print the table (also written as lab.json and lab.svg).
    #[command(disable_help_flag = true)]
    Lab(LabArgs),
    /// The message protocol (docs/msg-protocol.md): serve, send, listen, bench.
    #[command(disable_help_flag = true)]
    Msg(crate::msg::MsgArgs),
}

/// `-v` and `--log-level`, global: given before or after the subcommand.
#[derive(Debug, Args)]
#[command(next_help_heading = heading::LOGGING)]
pub struct LogArgs {
    /// Debug output (to stderr): the same as --log-level debug.
    #[arg(short = 'v', long, global = true)]
    pub verbose: bool,

    /// What to log: a level (error, warn, info, debug, trace, off) or filters as RUST_LOG takes
    /// them, e.g. info,berth::msg=debug or warn,access=info [default: $RUST_LOG, else info].
    #[arg(long, value_name = "FILTER", global = true, conflicts_with = "verbose", value_parser = crate::logging::check)]
    pub log_level: Option<String>,
}

impl LogArgs {
    /// The filter to log with: `--log-level`, `-v`, `$RUST_LOG`, else `info`.
    pub fn filter(&self) -> String {
        match (&self.log_level, self.verbose) {
            (Some(filter), _) => filter.clone(),
            (None, true) => "debug".to_owned(),
            (None, false) => std::env::var("RUST_LOG")
                .ok()
                .filter(|f| !f.trim().is_empty())
                .unwrap_or_else(|| "info".to_owned()),
        }
    }
}

/// `-d` and what goes with it, for `serve` and `msg serve`.
#[derive(Debug, Args)]
#[command(next_help_heading = heading::PROCESS)]
pub struct DaemonArgs {
    /// Detach from the terminal and run in the background. The command returns once the
    /// server is up (printing the startup line) or failed (printing the cause, exit 1).
    #[arg(short = 'd', long)]
    pub daemonize: bool,

    /// With -d: write the daemon's pid here; removed on a clean exit.
    #[arg(long, value_name = "PATH", requires = "daemonize")]
    pub pid_file: Option<PathBuf>,

    /// With -d: append the daemon's log (stdout and stderr) here [default: discarded].
    #[arg(long, value_name = "PATH", requires = "daemonize")]
    pub log_file: Option<PathBuf>,
}

/// How a server stops, for `serve` and `msg serve`.
#[derive(Debug, Args)]
#[command(next_help_heading = heading::SHUTDOWN)]
pub struct StopArgs {
    /// How long a graceful shutdown (first SIGTERM or SIGINT) lets work in flight finish:
    /// requests answered (serve), queued output delivered (msg serve). A second signal stops
    /// at once.
    #[arg(long, value_name = "DURATION", default_value = SHUTDOWN_TIMEOUT, value_parser = units::duration)]
    pub shutdown_timeout: Duration,

    /// Time between the first SIGTERM or SIGINT and the drain, during which the server goes on
    /// serving as before (the service manager is told STOPPING=1 at once; serve's /healthz
    /// answers 503), so that a load balancer takes it out of rotation before it stops
    /// accepting. 0: drain at once.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = units::duration_or_zero)]
    pub drain_delay: Duration,
}

/// Accept threads and the connection cap, for `serve` and `msg serve`.
#[derive(Debug, Args)]
#[command(next_help_heading = heading::THREADS)]
pub struct AcceptArgs {
    /// Accept threads, each with its own listener (SO_REUSEPORT) and event loop. serve's actor
    /// model: the scheduler threads; msg serve: UNIX and UDP listeners are served by the first,
    /// names are shared by all [default: number of CPU cores (serve's prefork: 1 per
    /// process)].
    #[arg(short = 'A', long, value_name = "N")]
    pub accept_threads: Option<NonZeroUsize>,

    /// Most connections at once per accept thread (serve's actor model: in all); more are
    /// refused (HTTP 503; msg: a `refused capacity` frame).
    #[arg(short = 'C', long, value_name = "N", default_value_t = accept_capacity())]
    pub accept_capacity: NonZeroUsize,
}

/// The number of CPU cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(NonZeroUsize::get)
        .unwrap_or(1)
}

/// How long a load generator runs, for `bench` and `msg bench`.
pub const BENCH_DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// Options of `berth bench`.
#[derive(Debug, Args)]
// `--streams` counts the streams of HTTP/2 or of HTTP/3.
#[command(group(clap::ArgGroup::new("streams_protocol").args(["h2", "h3"])))]
pub struct BenchArgs {
    /// Target, e.g. http://127.0.0.1:9000/hello/world or https://127.0.0.1:9443/hello/world
    pub url: String,

    /// Concurrent connections.
    #[arg(short = 'c', long, value_name = "N", default_value = "10", help_heading = heading::LOAD)]
    pub connections: NonZeroUsize,

    /// Load threads, each with its own event loop (at most one per connection).
    #[arg(short = 't', long, value_name = "N", default_value = "2", help_heading = heading::LOAD)]
    pub threads: NonZeroUsize,

    /// How long to run: 10 (seconds), 10s, 500ms, 2m [default: 10s unless -n is given].
    #[arg(long, value_name = "DURATION", value_parser = units::duration, conflicts_with = "requests", help_heading = heading::LOAD)]
    pub duration: Option<Duration>,

    /// Stop after this many requests instead of after a duration.
    #[arg(short = 'n', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = heading::LOAD)]
    pub requests: Option<u64>,

    /// Open a new connection for every request (ab's default) instead of keeping them.
    #[arg(long, help_heading = heading::LOAD)]
    pub no_keepalive: bool,

    /// Requests written back to back on a connection before reading the answers.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        conflicts_with = "no_keepalive",
        help_heading = heading::LOAD
    )]
    pub pipeline: NonZeroUsize,

    /// Speak HTTP/2: h2c with prior knowledge on http://, ALPN h2 on https:// (like h2load).
    #[arg(long, conflicts_with_all = ["no_keepalive", "pipeline"], help_heading = heading::LOAD)]
    pub h2: bool,

    /// Speak HTTP/3 over QUIC: UDP to the https:// URL's port, ALPN h3 (like h3load).
    #[arg(long, conflicts_with_all = ["h2", "no_keepalive", "pipeline"], help_heading = heading::LOAD)]
    pub h3: bool,

    /// With --h2 or --h3: streams kept in flight on each connection (fewer if the server allows
    /// fewer).
    #[arg(long, value_name = "N", default_value = "10", requires = "streams_protocol", help_heading = heading::LOAD)]
    pub streams: NonZeroUsize,

    /// Longest wait for a response before it counts as a timeout error.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = units::duration, help_heading = heading::LOAD)]
    pub timeout: Duration,

    /// Request method.
    #[arg(long, value_name = "METHOD", default_value = "GET", help_heading = heading::REQUEST)]
    pub method: String,

    /// Send this file's contents as the request body.
    #[arg(long, value_name = "FILE", conflicts_with = "body_string", help_heading = heading::REQUEST)]
    pub body: Option<PathBuf>,

    /// Send this string as the request body.
    #[arg(long, value_name = "S", help_heading = heading::REQUEST)]
    pub body_string: Option<String>,

    /// Add a header field, e.g. -H 'Content-Type: application/json' (repeatable).
    #[arg(short = 'H', long = "header", value_name = "'NAME: VALUE'", value_parser = parse_header, help_heading = heading::REQUEST)]
    pub headers: Vec<(String, String)>,

    /// https:// only: verify the server's certificate against this CA (PEM). Without it the
    /// certificate is not checked, as wrk does not.
    #[arg(long, value_name = "FILE", help_heading = heading::REQUEST)]
    pub ca: Option<PathBuf>,

    /// Print the report as JSON instead of a table.
    #[arg(long, help_heading = heading::OUTPUT)]
    pub json: bool,
}

/// Options of `berth lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    /// Short runs (0.75 s each, no warm-up): the whole lab in under two minutes.
    #[arg(long)]
    pub quick: bool,

    /// How long each measured run lasts [default: 10s, or 750ms with --quick].
    #[arg(long, value_name = "DURATION", value_parser = units::duration)]
    pub duration: Option<Duration>,

    /// Untimed load before each measured run [default: 1s, or none with --quick].
    #[arg(long, value_name = "DURATION", value_parser = units::duration_or_zero)]
    pub warmup: Option<Duration>,

    /// Where lab.json, lab.svg and the servers' logs go.
    #[arg(long, value_name = "DIR", default_value = "target/lab")]
    pub out: PathBuf,

    /// Only these servers and/or shapes, comma-separated (e.g. evloop,nginx,hello).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub only: Vec<String>,

    /// Directory of the peers' sources [default: ./peers, or the one in berth's source tree].
    #[arg(long, value_name = "DIR")]
    pub peers: Option<PathBuf>,

    /// The Python that runs the Python peers (python-*, granian, berth-asgi, berth-wsgi ...),
    /// e.g. a venv's, where berth-py and granian are installed [default: python3 on PATH].
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
}

/// Whether `serve` speaks HTTP/2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Http2 {
    /// A plain connection that starts with the preface is HTTP/2's (h2c with prior
    /// knowledge), any other HTTP/1.1's; TLS offers `h2` by ALPN before `http/1.1`.
    On,
    /// HTTP/1.1 only: TLS offers `http/1.1` alone.
    Off,
    /// Every connection is HTTP/2's (prior knowledge, a gRPC backend's port; TLS offers `h2`
    /// alone): an HTTP/1.1 request is a connection error.
    Only,
}

/// When a new QUIC connection must first prove its address with a Retry (`--quic-retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuicRetry {
    /// Only while many handshakes are under way on a loop (a flood of Initials).
    Auto,
    /// Before every handshake: a round trip more for each new connection.
    On,
    /// Never.
    Off,
}

impl QuicRetry {
    /// The driver's setting.
    pub fn retry(self) -> berth::drive::quic::Retry {
        use berth::drive::quic::Retry;
        match self {
            QuicRetry::Auto => Retry::Auto,
            QuicRetry::On => Retry::On,
            QuicRetry::Off => Retry::Off,
        }
    }
}

/// A switch given as `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

impl OnOff {
    /// Whether it is on.
    pub fn on(self) -> bool {
        self == OnOff::On
    }
}

/// What the `--http-port` listener does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HttpMode {
    /// Redirect every request to https (308, the same host and target).
    Redirect,
    /// Serve the same application unencrypted.
    Serve,
}

/// `--access-log-format`: a format's name or a template of atoms, as
/// [`berth::app::AccessLog::parse`] reads it (the one parser `python -m berth` uses too).
fn access_log_format(text: &str) -> Result<berth::app::AccessLog, String> {
    berth::app::AccessLog::parse(text)
}

/// Options of `berth serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen (repeatable, kinds mixed): tcp://HOST:PORT,
    /// tls://HOST:PORT[?cert=FILE&key=FILE] (or --tls-cert and --tls-key), unix:///PATH (every
    /// model; a stale socket file is replaced, a live one refused, the file removed at exit).
    /// Each listener is served by its own threads of the chosen model. Without it: --host and
    /// --port.
    #[arg(short = 'l', long = "listen", value_name = "ENDPOINT", conflicts_with_all = ["host", "port"], help_heading = heading::LISTEN)]
    pub listen: Vec<String>,

    /// Listen port (the short form of --listen tcp://HOST:PORT); 0 picks a free one (the
    /// startup line says which).
    #[arg(short = 'p', long, default_value_t = 9000, help_heading = heading::LISTEN)]
    pub port: u16,

    /// Address to listen on (the short form of --listen tcp://HOST:PORT).
    #[arg(long, default_value = "127.0.0.1", help_heading = heading::LISTEN)]
    pub host: String,

    /// Share the port with another process that listens on it with SO_REUSEPORT (another berth
    /// of the same user: the old server of a zero-downtime restart). Without it a port anyone
    /// else listens on is refused ("already in use", exit 1); berth's own threads and processes
    /// share their port either way.
    #[arg(long, help_heading = heading::LISTEN)]
    pub reuse_port: bool,

    /// Listen backlog (pending connections the kernel queues per listener).
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(i32).range(1..), help_heading = heading::LISTEN)]
    pub backlog: i32,

    /// Concurrency model. SocketAll's ServerSocket demo's `-type s|t|f` (and `-types`, `-typet`, `-typef`) and
    /// `-port N` spellings work too.
    #[arg(short = 'm', long, value_parser = model_parser(), default_value = Model::DEFAULT.name(), help_heading = heading::THREADS)]
    pub model: Model,

    #[command(flatten)]
    pub accept: AcceptArgs,

    /// Worker threads for slow jobs [default: the number of accept threads]. With 0, a slow
    /// request is answered at once, like a fast one.
    #[arg(short = 'w', long, value_name = "N", allow_negative_numbers = true, help_heading = heading::THREADS)]
    pub worker_threads: Option<usize>,

    /// Jobs that may wait for a worker; a slow request that finds the queue full is answered 503
    /// with `Retry-After` at once.
    #[arg(long, value_name = "N", default_value = "10000", help_heading = heading::THREADS)]
    pub queue_capacity: NonZeroUsize,

    /// Slow jobs one connection may have queued or running at once [default: the number of
    /// worker threads]: an HTTP/2 connection's further requests wait in the connection, not in
    /// the shared queue, so one client's hundred streams cannot hold every worker ahead of
    /// other clients.
    #[arg(long, value_name = "N", help_heading = heading::THREADS)]
    pub jobs_per_connection: Option<NonZeroUsize>,

    /// Each model's own flags (`--max-threads`, `--processes`, ...), from the model registry.
    #[command(flatten)]
    pub model_flags: ModelFlags,

    /// Largest request head (request line and header fields); beyond it: 431.
    #[arg(long, value_name = "SIZE", default_value = "16k", value_parser = units::limit_usize, help_heading = heading::LIMITS)]
    pub max_header_size: NonZeroUsize,

    /// Largest number of header fields in a request (at most 256); beyond it: 431.
    #[arg(long, value_name = "N", default_value = "64", value_parser = clap::value_parser!(u16).range(1..=256), help_heading = heading::LIMITS)]
    pub max_headers: u16,

    /// Longest request-target; beyond it: 414.
    #[arg(long, value_name = "SIZE", default_value = "8k", value_parser = units::limit_usize, help_heading = heading::LIMITS)]
    pub max_uri_size: NonZeroUsize,

    /// Largest request body; beyond it: 413. `0` or `none`: no limit. `--max-body`, as
    /// `python -m berth` says, works too, and means the same; its default there is 1g, for an
    /// application's uploads (a WSGI body is read whole first), here 1m, for the demo routes.
    #[arg(long, visible_alias = "max-body", value_name = "SIZE", default_value = "1m", value_parser = units::limit_or_none, help_heading = heading::LIMITS)]
    pub max_body_size: usize,

    /// Largest WebSocket message (`/ws/echo`), its fragments together (inflated, if it came
    /// compressed); beyond it the connection is closed with 1009.
    #[arg(long, value_name = "SIZE", default_value = "16m", value_parser = units::limit_usize, help_heading = heading::LIMITS)]
    pub ws_max_message: NonZeroUsize,

    #[command(flatten)]
    pub ws_deflate: WsDeflateArgs,

    /// HTTP/2: with `on`, a plain connection that starts with its preface is served as HTTP/2
    /// (h2c with prior knowledge) and TLS listeners offer `h2` by ALPN before `http/1.1`;
    /// `only` serves every connection as HTTP/2.
    #[arg(long, value_name = "on|off|only", value_enum, default_value_t = Http2::On, help_heading = heading::LIMITS)]
    pub http2: Http2,

    /// HTTP/2 streams a client may have open at once on one connection; one more is refused
    /// (REFUSED_STREAM).
    #[arg(long, value_name = "N", default_value = "128", value_parser = clap::value_parser!(u32).range(1..), help_heading = heading::LIMITS)]
    pub http2_max_streams: u32,

    /// HTTP/2 streams (requests) one connection may open in all; after them it is wound down
    /// with GOAWAY NO_ERROR and the client goes on with a new connection (nginx's
    /// `keepalive_requests`, which HTTP/2 connections obey too, defaults to 1000).
    #[arg(long, value_name = "N", default_value = "10000", value_parser = clap::value_parser!(u32).range(1..), help_heading = heading::LIMITS)]
    pub http2_max_requests: u32,

    /// Files one HTTP/2 connection may hold open for its answers at once; a stream asking for
    /// one more (or whose window is shut) has its file opened when one of those is done.
    #[arg(long, value_name = "N", default_value = "8", help_heading = heading::LIMITS)]
    pub files_per_connection: NonZeroUsize,

    /// Files open for answers at once, across every connection [default: half of the
    /// process's descriptor limit, `ulimit -n`]; past it a file request is answered 503 with
    /// `Retry-After`, and connections keep the other half.
    #[arg(long, value_name = "N", help_heading = heading::LIMITS)]
    pub max_open_files: Option<NonZeroUsize>,

    /// `Server: berth` in every response (HTTP/2: `server: berth`); `off` writes none.
    #[arg(long, value_name = "on|off", value_enum, default_value_t = OnOff::On, help_heading = heading::LIMITS)]
    pub server_header: OnOff,

    /// `Date` in every response, HTTP/1.1 and HTTP/2 (RFC 9110 §6.6.1); `off` writes none (a
    /// proxy in front adds its own).
    #[arg(long, value_name = "on|off", value_enum, default_value_t = OnOff::On, help_heading = heading::LIMITS)]
    pub date_header: OnOff,

    /// From a request's first byte until its head must be complete; then 408.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = units::duration, help_heading = heading::TIMEOUTS)]
    pub header_timeout: Duration,

    /// Longest silence while a request body arrives; then 408.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = units::duration, help_heading = heading::TIMEOUTS)]
    pub body_timeout: Duration,

    /// How long a keep-alive connection may sit idle between requests before it is closed.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = units::duration, help_heading = heading::TIMEOUTS)]
    pub idle_timeout: Duration,

    /// How long a response may make no progress (the peer not reading) before the connection
    /// is closed.
    #[arg(long, value_name = "DURATION", default_value = WRITE_TIMEOUT, value_parser = units::duration, help_heading = heading::TIMEOUTS)]
    pub write_timeout: Duration,

    /// Serve HTTPS with this certificate (PEM, the chain after it). Needs --tls-key. SIGHUP
    /// reads both files again (new connections get the new certificate).
    #[arg(long, value_name = "FILE", requires = "tls_key", help_heading = heading::TLS)]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, RSA or EC).
    #[arg(long, value_name = "FILE", requires = "tls_cert", help_heading = heading::TLS)]
    pub tls_key: Option<PathBuf>,

    /// The password of an encrypted --tls-key (ENCRYPTED PRIVATE KEY: PKCS#8 with PBES2, as
    /// openssl pkcs8 -topk8 writes it), kept for SIGHUP's reload. Anyone who can list the
    /// processes sees it: on a shared machine decrypt the key instead (openssl pkey).
    #[arg(long, value_name = "PASSWORD", requires = "tls_key", help_heading = heading::TLS)]
    pub tls_key_password: Option<String>,

    /// On a TLS listener, a plain HTTP request (http:// to the https:// port) is redirected
    /// to the same host, port and target over https:// (308, which keeps the method), rather
    /// than answered 400 "plain HTTP request sent to an HTTPS port" (nginx's answer, and
    /// berth's without this). A request with no usable Host still gets the 400.
    #[arg(long, help_heading = heading::TLS)]
    pub redirect_https: bool,

    /// Also serve HTTP/3 (QUIC) on the UDP twin of every TLS listener: the same port, the same
    /// certificate. --model evloop only. (A listener of its own: --listen quic://HOST:PORT.)
    #[arg(long, help_heading = heading::TLS)]
    pub http3: bool,

    /// With --http3: answers over TLS (HTTP/1.1 and HTTP/2) carry `Alt-Svc: h3=":PORT";
    /// ma=86400`, so that browsers move over to HTTP/3 by themselves; `off` serves HTTP/3
    /// without advertising it (clients that are told of it some other way, or tests).
    #[arg(long, value_name = "on|off", value_enum, default_value_t = OnOff::On, requires = "http3", help_heading = heading::TLS)]
    pub alt_svc: OnOff,

    /// HTTP/3 request streams a client may have open at once on one connection (QUIC's
    /// MAX_STREAMS, which the client's QUIC obeys; one opened past it closes the connection
    /// with STREAM_LIMIT_ERROR).
    #[arg(long, value_name = "N", default_value_t = berth::drive::quic::MAX_CONCURRENT_REQUESTS, value_parser = clap::value_parser!(u32).range(1..), help_heading = heading::TLS)]
    pub http3_max_streams: u32,

    /// When a new QUIC connection must first prove its address with a Retry (RFC 9000
    /// §8.1.2), a round trip more for the client: `auto` while more than 64 handshakes are under
    /// way on a loop (a flood of Initials then costs one stateless answer each), `on` always,
    /// `off` never.
    #[arg(long, value_name = "auto|on|off", value_enum, default_value_t = QuicRetry::Auto, help_heading = heading::TLS)]
    pub quic_retry: QuicRetry,

    /// With --tls-cert: also listen for plain HTTP on this port, answering as --http-mode
    /// says.
    #[arg(long, value_name = "PORT", requires = "tls_cert", help_heading = heading::TLS)]
    pub http_port: Option<u16>,

    /// What the --http-port listener does.
    #[arg(long, value_name = "MODE", value_enum, default_value_t = HttpMode::Redirect, requires = "http_port", help_heading = heading::TLS)]
    pub http_mode: HttpMode,

    #[command(flatten)]
    pub stop: StopArgs,

    #[command(flatten)]
    pub daemon: DaemonArgs,

    /// Log one line per response, at info level with target `access` (on stderr, or the
    /// --log-file of -d), in the --access-log-format.
    #[arg(long, help_heading = heading::LOGGING)]
    pub access_log: bool,

    /// How --access-log writes its lines, the same as python -m berth's: combined (nginx's,
    /// with the seconds taken last), common, json, short, or a template of gunicorn's atoms
    /// ('%(h)s "%(r)s" %(s)s %(b)s %(D)s') or granian's ('%(addr)s %(status)d
    /// %(dt_ms).3f'); giving it turns the access log on [default: combined].
    #[arg(long, value_name = "FORMAT", value_parser = access_log_format, help_heading = heading::LOGGING)]
    pub access_log_format: Option<berth::app::AccessLog>,

    /// Directory served under `/files/` [default: ./public if it exists; otherwise `/files/`
    /// answers 404]. Nothing outside it is served, symlinks included.
    #[arg(long, value_name = "DIR", help_heading = heading::APP)]
    pub root: Option<PathBuf>,

    /// Serve the site in DIR at `/`: `index.html` for a directory (301 to `dir/` without the
    /// slash), ETag, Range and 304 as `/files/`, nothing outside DIR. The demo's own routes
    /// (`/stats`, `/healthz`, `/files/`, ...) stay and win over files of the same name; `/`
    /// is the site's.
    #[arg(long, value_name = "DIR", help_heading = heading::APP)]
    pub site: Option<PathBuf>,

    /// Compress files of compressible types (text, JSON, JavaScript, SVG, XML, wasm) on the
    /// fly with gzip, br or zstd, as the client accepts; never ranges, 304s or HTTP/1.0. See
    /// docs/serve.md's note on BREACH before turning it on for pages with secrets.
    #[arg(long, help_heading = heading::APP)]
    pub compress: bool,

    /// Level of --compress, 1 (fastest) to 9 (smallest), for all three codings.
    #[arg(long, value_name = "N", default_value = "5", value_parser = clap::value_parser!(u8).range(1..=9), help_heading = heading::APP)]
    pub compress_level: u8,

    /// Files smaller than this are sent as they are by --compress: 16k, 1m (bytes without a
    /// suffix).
    #[arg(long, value_name = "SIZE", default_value = "1k", value_parser = units::size, help_heading = heading::APP)]
    pub compress_min_size: u64,

    /// Do not look for precompressed siblings (`name.br`, `name.zst`, `name.gz`) of the files
    /// of `/files/` and the site; by default the one the client accepts best is served.
    #[arg(long, help_heading = heading::APP)]
    pub no_precompressed: bool,

    /// How long `/test/slow` waits: 30ms, 1s; a bare number is milliseconds (as server-demo's).
    #[arg(short = 'D', long, value_name = "DURATION", default_value = "30", value_parser = units::slow_duration, help_heading = heading::APP)]
    pub slow_duration: Duration,
}

/// WebSocket permessage-deflate (RFC 7692), for `serve` (`/ws/echo`) and `msg serve` (`ws://`
/// and `wss://` listeners).
#[derive(Debug, Args)]
pub struct WsDeflateArgs {
    /// Compress WebSocket messages (permessage-deflate) with clients that offer it, as
    /// browsers do; `off` never negotiates it. In `msg serve`, a ws:// listener's
    /// `?deflate=off` turns it off for that listener.
    #[arg(long, value_name = "on|off", value_enum, default_value_t = OnOff::On, help_heading = heading::LIMITS)]
    pub ws_deflate: OnOff,

    /// Largest LZ77 window permessage-deflate uses, as bits (8 to 15), both ways; below 15,
    /// a client that does not let the server limit its window gets no compression.
    #[arg(long, value_name = "BITS", default_value_t = 15, value_parser = clap::value_parser!(u8).range(8..=15), help_heading = heading::LIMITS)]
    pub ws_deflate_window_bits: u8,

    /// zlib's memLevel (1 to 9) of the WebSocket compressor: the size of its buffers.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u8).range(1..=9), help_heading = heading::LIMITS)]
    pub ws_deflate_mem_level: u8,

    /// Compression level of WebSocket messages (0 to 9; 1 is the fast path).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=9), help_heading = heading::LIMITS)]
    pub ws_deflate_level: u8,

    /// WebSocket messages shorter than this are sent uncompressed.
    #[arg(long, value_name = "SIZE", default_value = "256", value_parser = units::size_usize, help_heading = heading::LIMITS)]
    pub ws_deflate_threshold: usize,
}

impl WsDeflateArgs {
    /// The settings these flags make.
    pub fn config(&self) -> berth::proto::ws::DeflateConfig {
        berth::proto::ws::DeflateConfig {
            enabled: self.ws_deflate.on(),
            max_window_bits: self.ws_deflate_window_bits,
            mem_level: self.ws_deflate_mem_level,
            level: self.ws_deflate_level,
            threshold: self.ws_deflate_threshold,
            ..berth::proto::ws::DeflateConfig::default()
        }
    }
}

/// Prints a parse error followed by the usage of the command it concerns, and exits with 2
/// (0 for `--help` and `--version`, which clap reports as errors too).
pub fn exit_with_usage(err: clap::Error, argv: &[String]) -> ! {
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        err.exit();
    }
    let rendered = err.render().to_string();
    eprint!("{rendered}");
    if !rendered.contains("Usage:") {
        // The arguments as parsed (seed 000's spellings already rewritten, `serve` implied):
        // the usage of the innermost subcommand named (`msg serve`'s, not `msg`'s).
        let (cmd, name) = innermost(argv.iter().skip(1).map(String::as_str));
        eprintln!("\n{}", cmd.bin_name(name).render_usage());
    }
    std::process::exit(2);
}

/// `--model`: the registry's models, each with its one-line description; the default says so.
fn model_parser() -> impl clap::builder::TypedValueParser<Value = Model> {
    let values = Model::ALL.map(|m| {
        let about = match m == Model::DEFAULT {
            true => format!("{} (the default)", m.about()),
            false => m.about().to_owned(),
        };
        PossibleValue::new(m.name()).help(about)
    });
    PossibleValuesParser::new(values).map(|name| {
        name.parse::<Model>()
            .expect("clap only passes the names it offered")
    })
}

/// The flags of every model in the registry, each setting its model's own `Config`. Help text,
/// value name and default come from the model's [`berth::drive::Flag`]s.
#[derive(Debug, Clone, Default)]
pub struct ModelFlags {
    /// Every model's settings, defaults overwritten by the flags given.
    pub configs: ModelConfigs,
}

impl ModelFlags {
    fn all() -> impl Iterator<Item = berth::drive::FlagInfo> {
        Model::ALL.into_iter().flat_map(Model::flags)
    }
}

impl clap::FromArgMatches for ModelFlags {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = ModelFlags::default();
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        for flag in ModelFlags::all() {
            if let Some(&value) = matches.get_one::<NonZeroUsize>(flag.long) {
                self.configs.set_flag(flag.long, value);
            }
        }
        Ok(())
    }
}

impl Args for ModelFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        ModelFlags::all().fold(cmd, |cmd, flag| {
            // As clap does with a doc comment of one paragraph: no final period.
            let help = flag.help.strip_suffix('.').unwrap_or(flag.help);
            cmd.arg(
                Arg::new(flag.long)
                    .long(flag.long)
                    .value_name(flag.value_name)
                    .help(help)
                    .default_value(flag.default.to_string())
                    .value_parser(clap::value_parser!(NonZeroUsize))
                    .help_heading(heading::THREADS),
            )
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Refuses a setting berth understands but does not serve yet (`--listen quic://...` before
/// HTTP/3): exit 2, as a usage error, but in one line without the usage (the command line is
/// written right; the program is what falls short).
pub fn not_served_yet(what: &str) -> ! {
    eprintln!("berth: {what}");
    std::process::exit(2);
}

/// The innermost subcommand `words` name, walking from `berth` (options and their values
/// are skipped: only a word naming a subcommand of the one reached so far descends), and its
/// full name (`berth msg serve`).
pub fn innermost<'a>(words: impl IntoIterator<Item = &'a str>) -> (clap::Command, String) {
    let mut cmd = Cli::command();
    let mut name = String::from("berth");
    for word in words {
        if word == "--" {
            break;
        }
        if let Some(found) = cmd.find_subcommand(word).cloned() {
            cmd = found;
            name.push(' ');
            name.push_str(word);
        }
    }
    (cmd, name)
}

/// Prints `msg` as an error of subcommand `sub` (`"serve"`, or nested: `"msg send"`), then
/// its usage, and exits with 2.
pub fn usage_error(sub: &str, msg: &str) -> ! {
    let (cmd, name) = innermost(sub.split_whitespace());
    cmd.bin_name(name)
        .error(ErrorKind::ValueValidation, msg)
        .exit()
}

/// `Name: value` for `-H`.
fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!(
            "'{s}' is not a header field (expected 'Name: value')"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own checks of the whole command line, the models' flags included (a model's flag
    /// named like a shared one would fail here).
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Every model's flag reaches that model's settings.
    #[test]
    fn model_flags_set_their_models_settings() {
        let cli = Cli::try_parse_from([
            "berth",
            "serve",
            "--max-threads",
            "3",
            "--max-children",
            "4",
            "--processes",
            "5",
            "--actor-batch",
            "6",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        let c = args.model_flags.configs;
        assert_eq!(
            (
                c.threaded.max_threads,
                c.forked.max_children,
                c.prefork.processes,
                c.actor.batch
            ),
            (3, 4, 5, 6)
        );
        assert_eq!(args.model, Model::DEFAULT);
    }
}
