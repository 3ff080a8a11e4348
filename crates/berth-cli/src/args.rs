//! Command-line flags. Each flag documents itself; `--help` is generated from these docs. The
//! serve options keep seed 001's names and short forms (`-v -d -p -A -C -w -D`).

use std::num::NonZeroUsize;
use std::time::Duration;

use berth::drive::{Model, ModelConfigs};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::error::ErrorKind;
use clap::{Arg, ArgAction, Args, CommandFactory, Parser, Subcommand};

/// berth: a socket server core that runs every classic concurrency model over the same
/// protocols, and measures them.
#[derive(Debug, Parser)]
#[command(
    name = "berth",
    version,
    arg_required_else_help = true,
    disable_help_flag = true
)]
pub struct Cli {
    /// Print help.
    #[arg(short = 'h', long = "help", short_alias = '?', action = ArgAction::Help, global = true)]
    help: Option<bool>,

    #[command(subcommand)]
    pub command: Command,
}

/// What to run.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve HTTP/1.1 (the demo routes) until stopped.
    #[command(disable_help_flag = true)]
    Serve(ServeArgs),
    /// Load-test an HTTP/1.1 server: keep-alive like wrk, or a connection per request like ab.
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

/// Options of `berth bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Target, e.g. http://127.0.0.1:9000/hello/world or https://127.0.0.1:9443/hello/world
    pub url: String,

    /// Concurrent connections.
    #[arg(short = 'c', long, value_name = "N", default_value = "10")]
    pub connections: NonZeroUsize,

    /// Load threads, each with its own event loop (at most one per connection).
    #[arg(short = 't', long, value_name = "N", default_value = "2")]
    pub threads: NonZeroUsize,

    /// How long to run: 10, 10s, 500ms, 2m [default: 10s unless -n is given].
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "requests")]
    pub duration: Option<Duration>,

    /// Stop after this many requests instead of after a duration.
    #[arg(short = 'n', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,

    /// Open a new connection for every request (ab's default) instead of keeping them.
    #[arg(long)]
    pub no_keepalive: bool,

    /// Requests written back to back on a connection before reading the answers.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        conflicts_with = "no_keepalive"
    )]
    pub pipeline: NonZeroUsize,

    /// Request method.
    #[arg(short = 'm', long, value_name = "METHOD", default_value = "GET")]
    pub method: String,

    /// Send this file's contents as the request body.
    #[arg(long, value_name = "FILE", conflicts_with = "body_string")]
    pub body: Option<std::path::PathBuf>,

    /// Send this string as the request body.
    #[arg(long, value_name = "S")]
    pub body_string: Option<String>,

    /// Add a header field, e.g. -H 'Content-Type: application/json' (repeatable).
    #[arg(short = 'H', long = "header", value_name = "'NAME: VALUE'", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,

    /// Longest wait for a response before it counts as a timeout error.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// https:// only: verify the server's certificate against this CA (PEM). Without it the
    /// certificate is not checked, as wrk does not.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,

    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Print help.
    #[arg(short = 'h', long = "help", short_alias = '?', action = ArgAction::Help)]
    help: Option<bool>,
}

/// Options of `berth lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    /// Short runs (0.75 s each, no warm-up): the whole lab in under two minutes.
    #[arg(long)]
    pub quick: bool,

    /// Seconds per measured run [default: 10, or 0.75 with --quick].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Untimed load before each measured run [default: 1s, or none with --quick].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_or_zero)]
    pub warmup: Option<Duration>,

    /// Where lab.json, lab.svg and the servers' logs go.
    #[arg(long, value_name = "DIR", default_value = "target/lab")]
    pub out: std::path::PathBuf,

    /// Only these servers and/or shapes, comma-separated (e.g. evloop,nginx,hello).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub only: Vec<String>,

    /// Directory of the peers' sources [default: ./peers, or the one in berth's source tree].
    #[arg(long, value_name = "DIR")]
    pub peers: Option<std::path::PathBuf>,

    /// Print help.
    #[arg(short = 'h', long = "help", short_alias = '?', action = ArgAction::Help)]
    help: Option<bool>,
}

/// Options of `berth serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Concurrency model. Seed 000's `-type s|t|f` (and `-types`, `-typet`, `-typef`) and
    /// `-port N` spellings work too.
    #[arg(short = 'm', long, value_parser = model_parser(), default_value = Model::DEFAULT.name())]
    pub model: Model,

    /// Log one line per response (request line and status), at info level.
    #[arg(long)]
    pub access_log: bool,

    /// Generate debug output (to stderr).
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// Detach from the terminal and run in the background. The command returns once the
    /// server is up (printing the startup line) or failed (printing the cause, exit 1).
    #[arg(short = 'd', long)]
    pub daemonize: bool,

    /// With -d: write the daemon's pid here; removed on a clean exit.
    #[arg(long, value_name = "PATH", requires = "daemonize")]
    pub pid_file: Option<std::path::PathBuf>,

    /// With -d: append the daemon's log (stdout and stderr) here [default: discarded].
    #[arg(long, value_name = "PATH", requires = "daemonize")]
    pub log_file: Option<std::path::PathBuf>,

    /// Listen port; 0 picks a free one (the startup line says which).
    #[arg(short = 'p', long, default_value_t = 9000)]
    pub port: u16,

    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,

    /// Number of accept threads, each with its own listener and event loop; in the actor model,
    /// scheduler threads running the actors [default: number of CPU cores].
    #[arg(short = 'A', long, value_name = "N")]
    pub accept_threads: Option<NonZeroUsize>,

    /// Maximum number of simultaneous connections per accept thread (in the actor model, in
    /// all); more are refused (503).
    #[arg(short = 'C', long, value_name = "N", default_value = "100000")]
    pub accept_capacity: NonZeroUsize,

    /// Worker threads for slow jobs [default: the number of accept threads]. With 0, a slow
    /// request is answered at once, like a fast one.
    #[arg(short = 'w', long, value_name = "N", allow_negative_numbers = true)]
    pub worker_threads: Option<usize>,

    /// Each model's own flags (`--max-threads`, `--processes`, ...), from the model registry.
    #[command(flatten)]
    pub model_flags: ModelFlags,

    /// Jobs that may wait for a worker; a slow request that finds the queue full is answered 503
    /// with `Retry-After` at once.
    #[arg(long, value_name = "N", default_value = "10000")]
    pub queue_capacity: NonZeroUsize,

    /// Directory served under `/files/` [default: ./public if it exists; otherwise `/files/`
    /// answers 404]. Nothing outside it is served, symlinks included.
    #[arg(long, value_name = "DIR")]
    pub root: Option<std::path::PathBuf>,

    /// Largest WebSocket message (`/ws/echo`) in bytes, its fragments together; beyond it the
    /// connection is closed with 1009.
    #[arg(long, value_name = "BYTES", default_value = "16777216")]
    pub ws_max_message: NonZeroUsize,

    /// Slow task delay in milliseconds (`/test/slow`).
    #[arg(short = 'D', long, value_name = "MS", default_value_t = 30)]
    pub slow_duration: u64,

    /// Largest request head (request line and header fields) in bytes; beyond it: 431.
    #[arg(long, value_name = "BYTES", default_value = "16384")]
    pub max_header_size: NonZeroUsize,

    /// Largest number of header fields in a request (at most 256); beyond it: 431.
    #[arg(long, value_name = "N", default_value = "64", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub max_headers: u16,

    /// Longest request-target in bytes; beyond it: 414.
    #[arg(long, value_name = "BYTES", default_value = "8192")]
    pub max_uri_size: NonZeroUsize,

    /// Largest request body in bytes; beyond it: 413.
    #[arg(long, value_name = "BYTES", default_value = "1048576")]
    pub max_body_size: usize,

    /// Seconds from a request's first byte until its head must be complete; then 408.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_secs)]
    pub header_timeout: Duration,

    /// Longest silence, in seconds, while a request body arrives; then 408.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_secs)]
    pub body_timeout: Duration,

    /// Seconds a keep-alive connection may sit idle between requests before it is closed.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_secs)]
    pub idle_timeout: Duration,

    /// Seconds a response may make no progress (peer not reading) before the connection closes.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_secs)]
    pub write_timeout: Duration,

    /// Seconds a graceful shutdown (first SIGTERM or SIGINT) lets requests in flight finish;
    /// a second signal stops at once.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_secs)]
    pub shutdown_timeout: Duration,

    /// Seconds between the first SIGTERM or SIGINT and the drain: /healthz answers 503 at
    /// once while everything else is served as before, so that a load balancer's health check
    /// takes this server out of rotation before it stops accepting. 0: drain at once.
    #[arg(long, value_name = "SECS", default_value = "0", value_parser = parse_secs_or_zero)]
    pub drain_delay: Duration,

    /// Share the port with another process that listens on it with SO_REUSEPORT (another berth
    /// of the same user: the old server of a zero-downtime restart). Without it a port anyone
    /// else listens on is refused ("already in use", exit 1); berth's own threads and processes
    /// share their port either way.
    #[arg(long)]
    pub reuse_port: bool,

    /// Serve HTTPS with this certificate (PEM, the chain after it). Needs --tls-key. SIGHUP
    /// reads both files again (new connections get the new certificate).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, RSA or EC).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// With --tls-cert: also listen for plain HTTP on this port, answering as --http-mode
    /// says.
    #[arg(long, value_name = "PORT", requires = "tls_cert")]
    pub http_port: Option<u16>,

    /// What the --http-port listener does: redirect every request to https (308, the same
    /// host and target), or serve the same application unencrypted.
    #[arg(long, value_name = "MODE", default_value = "redirect", value_parser = ["redirect", "serve"], requires = "http_port")]
    pub http_mode: String,

    /// Listen backlog (pending connections the kernel queues per listener).
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(i32).range(1..))]
    pub backlog: i32,

    /// Print help.
    #[arg(short = 'h', long = "help", short_alias = '?', action = ArgAction::Help)]
    help: Option<bool>,
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
        let mut cmd = Cli::command();
        // The arguments as parsed (seed 000's spellings already rewritten, `serve` implied).
        let sub = argv
            .get(1)
            .and_then(|name| cmd.find_subcommand_mut(name).cloned());
        let usage = match sub {
            Some(sub) => {
                let name = format!("berth {}", sub.get_name());
                sub.bin_name(name).render_usage()
            }
            None => cmd.render_usage(),
        };
        eprintln!("\n{usage}");
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
                    .value_parser(clap::value_parser!(NonZeroUsize)),
            )
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Prints `msg` as an error of subcommand `sub` (`"serve"`, or nested: `"msg send"`), then
/// its usage, and exits with 2.
pub fn usage_error(sub: &str, msg: &str) -> ! {
    let mut cmd = Cli::command();
    let mut name = String::from("berth");
    for part in sub.split_whitespace() {
        match cmd.find_subcommand(part).cloned() {
            Some(found) => {
                cmd = found;
                name.push(' ');
                name.push_str(part);
            }
            None => break,
        }
    }
    cmd.bin_name(name)
        .error(ErrorKind::ValueValidation, msg)
        .exit()
}

/// Rewrites seed 000's single-dash spellings into berth's flags: `-type s|t|f` and
/// `-types/-typet/-typef` become `--model single|threaded|forked`; `-port N` and `-portN` become
/// `--port N`. Arguments given that way without `serve` (`berth -type s`) imply `serve`.
pub fn seed_spellings(args: Vec<String>) -> Vec<String> {
    let model_of = |t: &str| match t {
        "s" => Some("single"),
        "t" => Some("threaded"),
        "f" => Some("forked"),
        _ => None,
    };
    let mut out = Vec::with_capacity(args.len() + 1);
    let mut it = args.into_iter();
    out.extend(it.next());
    let rest: Vec<String> = it.collect();
    if rest
        .first()
        .is_some_and(|a| a.starts_with("-type") || a.starts_with("-port"))
    {
        out.push("serve".to_owned());
    }
    // The seed's spellings belong to serving; other subcommands get their arguments untouched.
    if rest
        .first()
        .is_some_and(|a| matches!(a.as_str(), "bench" | "lab" | "msg"))
    {
        out.extend(rest);
        return out;
    }
    let mut rest = rest.into_iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-type" => match rest.next() {
                Some(t) => match model_of(&t) {
                    Some(m) => out.extend(["--model".to_owned(), m.to_owned()]),
                    None => usage_error(
                        "serve",
                        &format!("invalid value '{t}' for '-type': expected s, t or f"),
                    ),
                },
                None => usage_error("serve", "a value is required for '-type': s, t or f"),
            },
            "-types" | "-typet" | "-typef" => out.extend([
                "--model".to_owned(),
                model_of(&arg[5..]).unwrap_or("single").to_owned(),
            ]),
            "-port" => match rest.next() {
                Some(p) => out.extend(["--port".to_owned(), p]),
                None => usage_error("serve", "a value is required for '-port'"),
            },
            a if a.starts_with("-port")
                && a[5..].bytes().all(|b| b.is_ascii_digit())
                && a.len() > 5 =>
            {
                out.extend(["--port".to_owned(), a[5..].to_owned()])
            }
            _ => out.push(arg),
        }
    }
    out
}

/// A positive number of seconds, fractions allowed (`0.5`).
pub(crate) fn parse_secs(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs <= 1e6 => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!(
            "'{s}' is not a number of seconds between 0 and 1000000 (e.g. 10 or 0.5)"
        )),
    }
}

/// Like [`parse_secs`], but 0 is allowed (e.g. no delay).
pub(crate) fn parse_secs_or_zero(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(0.0) => Ok(Duration::ZERO),
        _ => parse_secs(s),
    }
}

/// A duration: plain seconds (`10`, `0.5`) or with a unit (`500ms`, `10s`, `2m`), above 0.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    match parse_duration_or_zero(s)? {
        Duration::ZERO => Err(format!("'{s}' must be more than zero")),
        d => Ok(d),
    }
}

/// Like [`parse_duration`], but 0 is allowed (e.g. no warm-up).
fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    let (number, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    match number.parse::<f64>() {
        Ok(v) if (0.0..=1e6).contains(&(v * scale)) => Ok(Duration::from_secs_f64(v * scale)),
        _ => Err(format!("'{s}' is not a duration (e.g. 10, 10s, 500ms, 2m)")),
    }
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
