//! `berth msg bench`: load for message servers (placeholder until the load generator lands).

use clap::{ArgAction, Args};

/// Options of `berth msg bench`.
#[derive(Debug, Args)]
pub struct MsgBenchArgs {
    /// Target endpoint, e.g. tcp://127.0.0.1:9100
    pub endpoint: String,

    /// Print help.
    #[arg(short = 'h', long = "help", short_alias = '?', action = ArgAction::Help)]
    help: Option<bool>,
}

/// Runs the load and prints the report.
pub fn run(opts: MsgBenchArgs) -> Result<(), String> {
    Err(format!("berth msg bench {}: not built yet", opts.endpoint))
}
