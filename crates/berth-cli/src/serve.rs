//! `berth serve`: settings from flags, the chosen model, and the startup line.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use berth::app::{Demo, DemoConfig};
use berth::drive::files::Files;
use berth::drive::{self, evloop, Model, Settings};
use berth::net::ListenConfig;
use berth_proto::http::Limits;

use crate::args::{usage_error, ServeArgs};

pub fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    // Before any thread starts, so that every thread inherits the blocked mask.
    drive::signal::block_termination()?;

    let level = if args.verbose {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Info
    };
    // A panic (in a job, say) is reported once, through the log, and costs only its request.
    std::panic::set_hook(Box::new(|info| log::error!("panic: {info}")));
    env_logger::Builder::new()
        .filter_level(level)
        .target(env_logger::Target::Stderr)
        .init();

    let addr: SocketAddr = match (args.host.as_str(), args.port)
        .to_socket_addrs()
        .map(|mut a| a.next())
    {
        Ok(Some(addr)) => addr,
        _ => usage_error(
            "serve",
            &format!(
                "invalid value '{}' for '--host': not an address or a resolvable name",
                args.host
            ),
        ),
    };
    let model: Model = args.model.into();
    // prefork's parallelism comes from its processes: one loop each unless asked otherwise.
    let accept_threads = args
        .accept_threads
        .map(|n| n.get())
        .unwrap_or_else(|| match model {
            Model::Prefork => 1,
            _ => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
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
    let mut settings = Settings::new(model, addr);
    settings.listen = ListenConfig {
        backlog: args.backlog,
        // HTTP clients speak first: let the kernel hand over connections with their request.
        defer_accept_secs: 1,
        exclusive: !args.reuse_port,
        ..ListenConfig::default()
    };
    settings.accept_threads = accept_threads;
    settings.evloop = evloop::Config {
        capacity,
        workers,
        limits,
        read_on_accept: true,
        queue_capacity: args.queue_capacity.get(),
        timeouts: drive::Timeouts {
            header: args.header_timeout,
            body: args.body_timeout,
            idle: args.idle_timeout,
            write: args.write_timeout,
        },
        ..evloop::Config::default()
    };
    settings.max_threads = args.max_threads.get();
    settings.max_children = args.max_children.get();
    settings.processes = args.processes.get();
    settings.actor_batch = args.actor_batch.get();

    let stats = settings.new_stats()?;
    // Only the event-loop and actor models have workers; elsewhere a slow request waits on its
    // own thread.
    let offload_slow =
        !matches!(model, Model::Evloop | Model::Prefork | Model::Actor) || workers > 0;
    let app = DemoConfig {
        slow_duration: Duration::from_millis(args.slow_duration),
        offload_slow,
    };
    let files = match &args.root {
        Some(dir) => match Files::new(dir) {
            Ok(files) => files,
            Err(e) => usage_error(
                "serve",
                &format!("invalid value '{}' for '--root': {e}", dir.display()),
            ),
        },
        None if Path::new("public").is_dir() => Files::new("public")?,
        None => Files::none(),
    };
    // Detach now: every flag has been checked (usage errors reached the terminal), and no
    // thread has been started yet (fork keeps only the calling one).
    let mut daemon = match args.daemonize {
        true => Some(drive::daemon::daemonize(
            args.pid_file.as_deref(),
            args.log_file.as_deref(),
        )?),
        false => None,
    };
    let (server, bound) = match drive::serve(
        &settings,
        Demo::new(app, stats.clone())
            .with_access_log(args.access_log)
            .with_files(files.clone()),
        stats,
    ) {
        Ok(started) => started,
        Err(e) => {
            if let Some(d) = &mut daemon {
                d.failed(&e.to_string());
            }
            return Err(e.into());
        }
    };

    let (threads, workers_n) = (
        count(accept_threads, "accept thread"),
        count(workers, "worker"),
    );
    let shape = match model {
        Model::Evloop => format!("{threads}, {workers_n}, capacity {capacity} per thread"),
        Model::Prefork => format!(
            "{} x {threads}, {workers_n} and capacity {capacity} per thread",
            count_as(settings.processes, "process", "processes")
        ),
        Model::Threaded => format!("a thread per connection, at most {}", settings.max_threads),
        Model::Forked => format!(
            "a process per connection, at most {}",
            settings.max_children
        ),
        Model::Single => "one connection at a time".to_owned(),
        Model::Actor => format!(
            "{}, batch {}, {workers_n}, capacity {capacity}",
            count(accept_threads, "scheduler thread"),
            settings.actor_batch
        ),
    };
    if files.root().is_none() {
        // Said at startup, where whoever started berth is looking (info, not a warning:
        // serving no files is a fine way to run).
        log::info!(
            "no --root given and no ./public: /files/ answers 404 (give --root DIR, or create \
             ./public before starting)"
        );
    }
    let line = format!("berth listening on http://{bound} (model {model}, {shape})");
    match &mut daemon {
        Some(d) => {
            log::info!("{line}");
            d.ready(&line);
        }
        None => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}")?;
            out.flush()?;
        }
    }
    let signal = drive::signal::wait_for_termination()?;
    log::info!("{signal:?} received: finishing requests in flight (up to {:?}); a second signal stops at once", args.shutdown_timeout);
    server.drain(args.shutdown_timeout);
    std::thread::spawn(|| {
        if let Ok(again) = drive::signal::wait_for_termination() {
            log::warn!("{again:?} received again: stopping now");
            std::process::exit(1);
        }
    });
    server.join();
    log::info!("stopped");
    // The pid file goes with the daemon handle.
    drop(daemon);
    Ok(())
}

/// `1 worker`, `2 workers`.
fn count(n: usize, one: &str) -> String {
    count_as(n, one, &format!("{one}s"))
}

/// `1 process`, `2 processes`.
fn count_as(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
