//! The `berth` command. Arguments are parsed by clap into [`args::Cli`] (after
//! [`spellings::rewrite`] has turned older spellings into today's), turned into settings, and
//! handed to the library; this file sets up logging and maps outcomes to exit codes:
//! 0 clean, 2 usage error (message and usage on stderr), 1 runtime failure with its cause.

mod args;
mod bench;
mod lab;
mod lifecycle;
mod logging;
mod msg;
mod serve;
mod spellings;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let argv = spellings::rewrite(std::env::args().collect());
    let cli = match args::Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => args::exit_with_usage(e, &argv),
    };
    logging::init(&cli.log);
    let result = match cli.command {
        args::Command::Serve(opts) => serve::run(*opts),
        args::Command::Bench(opts) => bench::run(opts).map_err(Into::into),
        args::Command::Lab(opts) => lab::run(opts).map_err(Into::into),
        args::Command::Msg(opts) => msg::run(opts).map_err(Into::into),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("berth: {e}");
            ExitCode::FAILURE
        }
    }
}
