//! Command-line flags. Each flag documents itself; `--help` is generated from these docs. The
//! serve options keep seed 001's names and short forms (`-v -d -p -A -C -w -D`).

use std::num::NonZeroUsize;

use clap::error::ErrorKind;
use clap::{ArgAction, Args, CommandFactory, Parser, Subcommand};

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
}

/// Options of `berth serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Generate debug output (to stderr).
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// Detach from the terminal and run in the background (not available yet: refused).
    #[arg(short = 'd', long)]
    pub daemonize: bool,

    /// Listen port; 0 picks a free one (the startup line says which).
    #[arg(short = 'p', long, default_value_t = 9000)]
    pub port: u16,

    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,

    /// Number of accept threads, each with its own listener and event loop [default: number of
    /// CPU cores].
    #[arg(short = 'A', long, value_name = "N")]
    pub accept_threads: Option<NonZeroUsize>,

    /// Maximum number of simultaneous connections per accept thread; more are refused (503).
    #[arg(short = 'C', long, value_name = "N", default_value = "100000")]
    pub accept_capacity: NonZeroUsize,

    /// Worker threads for slow jobs [default: the number of accept threads]. With 0, a slow
    /// request is answered at once, like a fast one.
    #[arg(short = 'w', long, value_name = "N", allow_negative_numbers = true)]
    pub worker_threads: Option<usize>,

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

    /// Listen backlog (pending connections the kernel queues per listener).
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(i32).range(1..))]
    pub backlog: i32,

    /// Print help.
    #[arg(short = 'h', long = "help", short_alias = '?', action = ArgAction::Help)]
    help: Option<bool>,
}

/// Prints a parse error followed by the usage of the command it concerns, and exits with 2
/// (0 for `--help` and `--version`, which clap reports as errors too).
pub fn exit_with_usage(err: clap::Error) -> ! {
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
        let sub = std::env::args()
            .nth(1)
            .and_then(|name| cmd.find_subcommand_mut(&name).cloned());
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
