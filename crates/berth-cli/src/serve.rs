//! `berth serve`: settings from flags, the chosen model, and the startup line.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use berth::app::redirect::HttpsRedirect;
use berth::app::{Demo, DemoConfig};
use berth::drive::files::Files;
use berth::drive::signal::Signal;
use berth::drive::{self, Common, Settings};
use berth::net::activation;
use berth::net::tls::{TlsAcceptor, TlsSettings};
use berth::net::{Acceptor, ListenConfig};
use berth_proto::http::Limits;

use crate::args::{usage_error, ServeArgs};

pub fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    // Before any thread starts, so that every thread inherits the blocked mask.
    drive::signal::block_termination()?;
    // Listening sockets a service manager passed (systemd's socket activation), taken before
    // any thread starts: the first is the server's, a second the --http-port listener's.
    let mut inherited = activation::listen_fds()
        .map_err(|e| format!("socket activation: {e}"))?
        .into_iter();

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
    let model = args.model;
    let needs = model.needs();
    let accept_threads = args.accept_threads.map(|n| n.get()).unwrap_or_else(|| {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        needs.accept_threads.default_count(cores)
    });
    let workers = args.worker_threads.unwrap_or(accept_threads);
    let limits = Limits {
        max_header_bytes: args.max_header_size.get(),
        max_headers: usize::from(args.max_headers),
        max_uri_bytes: args.max_uri_size.get(),
        max_body_bytes: args.max_body_size,
        ..Limits::default()
    };
    // Certificate problems are runtime failures with their cause (exit 1), found before
    // anything starts.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            Some(TlsAcceptor::new(TlsSettings::http(cert, key)).map_err(|e| format!("TLS: {e}"))?)
        }
        _ => None,
    };
    let mut settings = Settings::new(model, addr);
    settings.common = Common {
        listen: ListenConfig {
            backlog: args.backlog,
            // HTTP clients speak first: let the kernel hand over connections with their request.
            defer_accept_secs: 1,
            exclusive: !args.reuse_port,
            transport: tls.clone().map_or(Acceptor::Plain, Acceptor::Tls),
            inherited: inherited.next(),
            ..ListenConfig::default()
        },
        read_on_accept: true,
        accept_threads,
        capacity: args.accept_capacity.get(),
        workers,
        queue_capacity: args.queue_capacity.get(),
        limits,
        timeouts: drive::Timeouts {
            header: args.header_timeout,
            body: args.body_timeout,
            idle: args.idle_timeout,
            write: args.write_timeout,
        },
        ..Common::default()
    };
    settings.models = args.model_flags.configs;

    let stats = settings.new_stats()?;
    // Only models with a worker pool can offload; elsewhere a slow request waits on its own
    // thread.
    let offload_slow = !needs.workers || workers > 0;
    let app = DemoConfig {
        slow_duration: Duration::from_millis(args.slow_duration),
        offload_slow,
        ws: berth::proto::ws::WsConfig {
            max_message: args.ws_max_message.get(),
        },
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
    let demo = |stats: &std::sync::Arc<berth::stats::Stats>| {
        Demo::new(app.clone(), stats.clone())
            .with_access_log(args.access_log)
            .with_files(files.clone())
    };
    // Kept to announce a drain: /healthz reads it in every process of the server.
    let mut health = vec![stats.clone()];
    let (server, bound) = match drive::serve(&settings, demo(&stats), stats) {
        Ok(started) => started,
        Err(e) => {
            if let Some(d) = &mut daemon {
                d.failed(&e.to_string());
            }
            return Err(e.into());
        }
    };

    // The plain-HTTP listener beside HTTPS (`--http-port`): the same model and limits.
    let plain = match args.http_port {
        None => None,
        Some(port) => {
            let mut plain = settings.clone();
            plain.addr.set_port(port);
            plain.common.listen.transport = Acceptor::Plain;
            plain.common.listen.inherited = inherited.next();
            let stats = plain.new_stats()?;
            health.push(stats.clone());
            let started = match args.http_mode.as_str() {
                "serve" => drive::serve(&plain, demo(&stats), stats),
                _ => drive::serve(&plain, HttpsRedirect { port: bound.port() }, stats),
            };
            match started {
                Ok((server, at)) => Some((server, at)),
                Err(e) => {
                    if let Some(d) = &mut daemon {
                        d.failed(&e.to_string());
                    }
                    return Err(e.into());
                }
            }
        }
    };
    let shape = settings.describe();
    if files.root().is_none() {
        // Said at startup, where whoever started berth is looking (info, not a warning:
        // serving no files is a fine way to run).
        log::info!(
            "no --root given and no ./public: /files/ answers 404 (give --root DIR, or create \
             ./public before starting)"
        );
    }
    if inherited.len() > 0 {
        log::warn!(
            "socket activation passed {} listening socket(s) more than berth uses (one, and one \
             for --http-port): not used",
            inherited.len()
        );
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut line = format!("berth listening on {scheme}://{bound} (model {model}, {shape})");
    if let Some((_, at)) = &plain {
        let what = match args.http_mode.as_str() {
            "serve" => "serves the same",
            _ => "redirects to https",
        };
        line.push_str(&format!("; plain http on {at} {what}"));
    }
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
    tell_manager(&format!(
        "READY=1\nMAINPID={}\nSTATUS={line}",
        std::process::id()
    ));
    let signal = loop {
        match drive::signal::wait_for_signal()? {
            Signal::Stop(signal) => break signal,
            Signal::Reload => {
                tell_manager("RELOADING=1");
                if reload(tls.as_ref()) {
                    server.renew_workers();
                }
                tell_manager("READY=1");
            }
        }
    };
    tell_manager("STOPPING=1");
    for stats in &health {
        stats.set_draining();
    }
    if !args.drain_delay.is_zero() {
        log::info!(
            "{signal:?} received: /healthz answers 503; serving on for {:?} before the drain (a second signal drains at once)",
            args.drain_delay
        );
        let until = std::time::Instant::now() + args.drain_delay;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            match drive::signal::wait_for_signal_within(left)? {
                Some(Signal::Stop(_)) => break,
                Some(Signal::Reload) if reload(tls.as_ref()) => server.renew_workers(),
                Some(Signal::Reload) | None => {}
            }
        }
    }
    log::info!("{signal:?} received: finishing requests in flight (up to {:?}); a second signal stops at once", args.shutdown_timeout);
    server.drain(args.shutdown_timeout);
    if let Some((plain, _)) = &plain {
        plain.drain(args.shutdown_timeout);
    }
    // A second signal stops at once: the server closes every connection itself (resetting
    // those with bytes still waiting for their peer, rather than leaving them to the kernel as
    // orphans), then the process exits 1; if that takes longer than a moment, it exits anyway.
    let stops: Vec<_> = std::iter::once(server.stop_handle())
        .chain(plain.as_ref().map(|(p, _)| p.stop_handle()))
        .collect();
    let stopped_at_once = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stopped_at_once.clone();
    std::thread::spawn(move || {
        if let Ok(again) = drive::signal::wait_for_termination() {
            log::warn!("{again:?} received again: stopping now");
            flag.store(true, std::sync::atomic::Ordering::Release);
            for stop in &stops {
                stop.stop();
            }
            std::thread::sleep(std::time::Duration::from_secs(2));
            std::process::exit(1);
        }
    });
    server.join();
    if let Some((plain, _)) = plain {
        plain.join();
    }
    if stopped_at_once.load(std::sync::atomic::Ordering::Acquire) {
        return Err("stopped at once by a second signal: requests in flight were cut off".into());
    }
    log::info!("stopped");
    // The pid file goes with the daemon handle.
    drop(daemon);
    Ok(())
}

/// SIGHUP: the certificate and key are read again; new connections get them. A reload that
/// fails keeps the certificate in use and says why.
/// Whether anything was reloaded.
fn reload(tls: Option<&TlsAcceptor>) -> bool {
    let Some(tls) = tls else {
        log::info!("SIGHUP received: nothing to reload (no --tls-cert)");
        return false;
    };
    let files = tls.settings();
    match tls.reload() {
        Ok(()) => {
            log::info!(
                "SIGHUP received: certificate reloaded from {} and {}",
                files.cert.display(),
                files.key.display()
            );
            true
        }
        Err(e) => {
            log::warn!("SIGHUP received: certificate not reloaded, the one in use stays: {e}");
            false
        }
    }
}

/// Tells a service manager that asked (`Type=notify`: `$NOTIFY_SOCKET`) about a change of
/// state; a failure to tell is logged, never fatal.
fn tell_manager(state: &str) {
    if let Err(e) = activation::notify(state) {
        log::warn!("cannot notify the service manager ($NOTIFY_SOCKET): {e}");
    }
}
