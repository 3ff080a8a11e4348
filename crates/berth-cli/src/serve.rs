//! `berth serve`: settings from flags, listeners, the driver, and the startup line.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use berth::app::{Demo, DemoConfig};
use berth::drive::evloop;
use berth::net::{bind_tcp, ListenConfig};
use berth::stats::Stats;
use berth_proto::http::Limits;
use clap::CommandFactory;

use crate::args::{Cli, ServeArgs};

/// Exits with status 2 and the usage text: the flags parsed but make no sense together.
fn usage_error(msg: &str) -> ! {
    let mut cmd = Cli::command();
    let serve = cmd
        .find_subcommand_mut("serve")
        .map(|c| c.clone())
        .unwrap_or(cmd);
    serve
        .bin_name("berth serve")
        .error(clap::error::ErrorKind::ValueValidation, msg)
        .exit()
}

pub fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    // Before any thread starts, so that every thread inherits the blocked mask.
    berth::drive::signal::block_termination()?;
    if args.daemonize {
        usage_error("--daemonize is not available yet; run berth under a supervisor (systemd, runit) instead");
    }
    let level = if args.verbose {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Info
    };
    env_logger::Builder::new()
        .filter_level(level)
        .target(env_logger::Target::Stderr)
        .init();

    let addr: SocketAddr = match (args.host.as_str(), args.port)
        .to_socket_addrs()
        .map(|mut a| a.next())
    {
        Ok(Some(addr)) => addr,
        _ => usage_error(&format!(
            "invalid value '{}' for '--host': not an address or a resolvable name",
            args.host
        )),
    };
    let accept_threads = args.accept_threads.map(|n| n.get()).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let workers = args.worker_threads.unwrap_or(accept_threads);
    let limits = Limits {
        max_header_bytes: args.max_header_size.get(),
        max_headers: usize::from(args.max_headers),
        max_uri_bytes: args.max_uri_size.get(),
        max_body_bytes: args.max_body_size,
        ..Limits::default()
    };
    let capacity = args.accept_capacity.get();

    let listeners = bind_tcp(
        addr,
        accept_threads,
        ListenConfig {
            backlog: args.backlog,
            // HTTP clients speak first: let the kernel hand over connections with their request.
            defer_accept_secs: 1,
            ..ListenConfig::default()
        },
    )?;
    let bound = listeners[0].local_addr()?;
    let stats = Arc::new(Stats::new(accept_threads));
    let app = DemoConfig {
        slow_duration: Duration::from_millis(args.slow_duration),
        offload_slow: workers > 0,
    };
    let config = evloop::Config {
        capacity,
        workers,
        limits,
        read_on_accept: true,
        ..evloop::Config::default()
    };
    let server = evloop::spawn(listeners, Demo::new(app, stats.clone()), config, stats)?;

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "berth listening on http://{bound} (model evloop, {accept_threads} accept threads, {workers} workers, capacity {capacity} per thread)"
    )?;
    out.flush()?;
    drop(out);
    let signal = berth::drive::signal::wait_for_termination()?;
    log::info!("{signal:?} received: stopping");
    server.shutdown();
    server.join();
    Ok(())
}
