//! `berth msg`: the message protocol of docs/msg-protocol.md from the command line: a server
//! (`serve`), two hand tools (`send`, `listen`) and a load generator (`bench`).

pub mod bench;

use clap::{ArgAction, Args, Subcommand};

/// Options of `berth msg`.
#[derive(Debug, Args)]
pub struct MsgArgs {
    #[command(subcommand)]
    pub command: MsgCommand,

    /// Print help.
    #[arg(short = 'h', long = "help", short_alias = '?', action = ArgAction::Help)]
    help: Option<bool>,
}

/// What `berth msg` runs.
#[derive(Debug, Subcommand)]
pub enum MsgCommand {
    /// Load-test a message server: msgs/s and MB/s of echoed messages by size.
    #[command(disable_help_flag = true)]
    Bench(bench::MsgBenchArgs),
}

/// Runs the chosen `berth msg` subcommand.
pub fn run(opts: MsgArgs) -> Result<(), String> {
    match opts.command {
        MsgCommand::Bench(opts) => bench::run(opts),
    }
}
