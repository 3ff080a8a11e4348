//! `berth serve`: settings from flags, the chosen model on every listener, and the startup
//! line.

use std::net::{SocketAddr, ToSocketAddrs};
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;

use berth::app::redirect::HttpsRedirect;
use berth::app::{Demo, DemoConfig};
use berth::drive::{self, Common, Server, Settings};
use berth::files::Files;
use berth::net::activation;
use berth::net::tls::{KeyPassword, TlsAcceptor, TlsSettings};
use berth::net::{Acceptor, Addr, ConnSizing, Endpoint, ListenConfig, Scheme};
use berth::stats::Stats;
use berth_proto::h2::H2Config;
use berth_proto::http::Limits;

use crate::args::{not_served_yet, usage_error, Http2, HttpMode, ServeArgs};
use crate::lifecycle;

/// One `--listen` (or `--host`/`--port`): where, and whether over TLS.
struct Listener {
    /// A TCP address, a UNIX socket's path, or (`quic://`, HTTP/3) a UDP address.
    addr: Addr,
    /// HTTPS (or, on a UDP address, QUIC) with this certificate.
    tls: Option<TlsAcceptor>,
}

pub fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    // Before any thread starts, so that every thread inherits the blocked mask.
    berth::process::signal::block_termination()?;
    // Listening sockets a service manager passed (systemd's socket activation), taken before
    // any thread starts: one per listener in order, then the --http-port listener's.
    let mut inherited = activation::listen_fds()
        .map_err(|e| format!("socket activation: {e}"))?
        .into_iter();

    let listeners = listeners(&args)?;
    let model = args.model;
    let needs = model.needs();
    let accept_threads = args
        .accept
        .accept_threads
        .map(|n| n.get())
        .unwrap_or_else(|| needs.accept_threads.default_count(crate::args::cores()));
    let workers = args.worker_threads.unwrap_or(accept_threads);
    let limits = Limits {
        max_header_bytes: args.max_header_size.get(),
        max_headers: usize::from(args.max_headers),
        max_uri_bytes: args.max_uri_size.get(),
        max_body_bytes: args.max_body_size,
        http2: (args.http2 != Http2::Off).then(|| H2Config {
            max_concurrent_streams: args.http2_max_streams,
            max_streams_per_connection: args.http2_max_requests,
            exclusive: args.http2 == Http2::Only,
            ..H2Config::default()
        }),
        server_header: args.server_header.on(),
        date_header: args.date_header.on(),
        jobs_per_connection: args
            .jobs_per_connection
            .map_or(workers.max(1), NonZeroUsize::get),
        files_per_connection: args.files_per_connection.get(),
        ..Limits::default()
    };
    let mut settings = Settings::new(model, SocketAddr::from(([127, 0, 0, 1], 0)));
    settings.addr = listeners[0].addr.clone();
    settings.common = Common {
        listen: ListenConfig {
            backlog: args.backlog,
            // HTTP clients speak first: let the kernel hand over connections with their request.
            defer_accept_secs: 1,
            exclusive: !args.reuse_port,
            ..ListenConfig::default()
        },
        read_on_accept: true,
        accept_threads,
        sizing: ConnSizing {
            capacity: args.accept.accept_capacity.get(),
            ..ConnSizing::http()
        },
        workers,
        queue_capacity: args.queue_capacity.get(),
        limits,
        timeouts: drive::Timeouts {
            header: args.header_timeout,
            body: args.body_timeout,
            idle: args.idle_timeout,
            write: args.write_timeout,
        },
    };
    settings.models = args.model_flags.configs;

    // Only models with a worker pool can offload; elsewhere a slow request waits on its own
    // thread.
    let offload_slow = !needs.workers || workers > 0;
    let app = DemoConfig {
        slow_duration: args.slow_duration,
        offload_slow,
        ws: berth::proto::ws::WsConfig {
            max_message: args.ws_max_message.get(),
            deflate: args.ws_deflate.config(),
        },
        compress: args.compress.then_some(berth::proto::http::Compress {
            level: args.compress_level,
            min_size: args.compress_min_size,
        }),
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
    let files = match &args.site {
        Some(dir) => match files.with_site(dir) {
            Ok(files) => files,
            Err(e) => usage_error(
                "serve",
                &format!("invalid value '{}' for '--site': {e}", dir.display()),
            ),
        },
        None => files,
    }
    .precompressed(!args.no_precompressed);
    let files = match args.max_open_files {
        Some(n) => files.budget(n.get()),
        None => files,
    };
    let access_log = match (args.access_log, &args.access_log_format) {
        (_, Some(format)) => Some(format.clone()),
        (true, None) => Some(berth::app::AccessLog::Combined),
        (false, None) => None,
    };
    // Detach now: every flag has been checked (usage errors reached the terminal), and no
    // thread has been started yet (fork keeps only the calling one).
    let mut daemon = lifecycle::detach(&args.daemon)?;
    let demo = |stats: &Arc<Stats>, addr: &Addr, tls: bool| {
        Demo::new(app.clone(), stats.clone())
            .with_access_log(access_log.clone())
            .over_unix_socket(matches!(addr, Addr::Unix(_)))
            .over_tls(tls)
            .with_files(files.clone())
            .with_server_header(args.server_header.on())
    };
    // Kept to announce a drain: /healthz reads it in every process of the server.
    let mut health = Vec::new();
    let mut servers: Vec<Server> = Vec::new();
    let mut urls = Vec::new();
    // The host of the first HTTPS listener and its bound port, for --http-port.
    let mut first_https = None;
    for listener in &listeners {
        let mut one = settings.clone();
        one.addr = listener.addr.clone();
        one.common.listen.transport = listener.tls.clone().map_or(Acceptor::Plain, Acceptor::Tls);
        // Socket activation passes listening stream sockets: none is a QUIC listener's.
        if !matches!(listener.addr, Addr::Udp(_)) {
            one.common.listen.inherited = inherited.next();
        }
        // --http3: the UDP twin of a TLS listener over TCP (same port, same certificate).
        one.models.evloop.http3 = args.http3 && listener.tls.is_some();
        // Advertised in Alt-Svc on the TLS listener's answers, unless --alt-svc off.
        one.models.evloop.alt_svc = args.alt_svc.on();
        // QUIC's limits, for a quic:// listener or the --http3 twin.
        one.models.evloop.quic = drive::quic::QuicLimits {
            max_streams: args.http3_max_streams,
            retry: args.quic_retry.retry(),
            ..drive::quic::QuicLimits::default()
        };
        // The same for uring, which serves HTTP/3 from its loops as evloop does.
        one.models.uring.http3 = one.models.evloop.http3;
        one.models.uring.alt_svc = one.models.evloop.alt_svc;
        one.models.uring.quic = one.models.evloop.quic;
        let stats = one.new_stats()?;
        health.push(stats.clone());
        let (server, bound) = drive::serve(
            &one,
            demo(&stats, &listener.addr, listener.tls.is_some()),
            stats.clone(),
        )
        .map_err(|e| lifecycle::failed(&mut daemon, e))?;
        urls.push(match (&bound, &listener.tls) {
            // `unix:///PATH`, as --listen takes it (curl --unix-socket PATH http://localhost/).
            (Addr::Unix(_), _) => bound.to_string(),
            // HTTP/3 (curl --http3-only https://HOST:PORT/), written as --listen takes it.
            (Addr::Udp(a), _) => format!("quic://{a}"),
            (Addr::Tcp(_), Some(_)) => format!("https://{bound}"),
            (Addr::Tcp(_), None) => format!("http://{bound}"),
        });
        servers.push(server);
        if let (None, Some(_), Addr::Tcp(tcp), Addr::Tcp(asked)) =
            (first_https, &listener.tls, &bound, &listener.addr)
        {
            first_https = Some((asked.ip(), tcp.port()));
        }
        if let (true, Some(_), Addr::Tcp(tcp)) = (args.http3, &listener.tls, &bound) {
            // HTTP/3 on its UDP twin, served by the same loops (`evloop::Config::http3`).
            urls.push(format!("quic://{tcp}"));
        }
    }

    // The plain-HTTP listener beside HTTPS (`--http-port`): the same model and limits, on the
    // host of the first HTTPS listener.
    let mut plain_note = None;
    if let Some(port) = args.http_port {
        let Some((host, tls_port)) = first_https else {
            usage_error(
                "serve",
                "--http-port serves beside an HTTPS listener, and none is asked for (a \
                 tls:// --listen, or --tls-cert with --host/--port)",
            );
        };
        let mut plain = settings.clone();
        plain.addr = Addr::Tcp(SocketAddr::new(host, port));
        plain.common.listen.transport = Acceptor::Plain;
        plain.common.listen.inherited = inherited.next();
        let stats = plain.new_stats()?;
        health.push(stats.clone());
        let started = match args.http_mode {
            HttpMode::Serve => drive::serve(&plain, demo(&stats, &plain.addr, false), stats),
            HttpMode::Redirect => drive::serve(&plain, HttpsRedirect { port: tls_port }, stats),
        };
        let (server, at) = started.map_err(|e| lifecycle::failed(&mut daemon, e))?;
        let what = match args.http_mode {
            HttpMode::Serve => "serves the same",
            HttpMode::Redirect => "redirects to https",
        };
        plain_note = Some(format!("; plain http on {at} {what}"));
        servers.push(server);
    }
    let shape = settings.describe();
    if files.root().is_none() {
        // Said at startup, where whoever started berth is looking (info, not a warning:
        // serving no files is a fine way to run).
        log::info!(
            "no --root given and no ./public: /files/ answers 404 (give --root DIR, or create \
             ./public before starting)"
        );
    }
    if let Some(site) = files.site() {
        // Said once: a file of the site that a demo route hides is never served.
        let hidden: Vec<String> = berth::app::DEMO_ROUTES
            .iter()
            .filter(|route| site.join(&route[1..]).exists())
            .map(|route| route.to_string())
            .collect();
        if !hidden.is_empty() {
            log::warn!(
                "--site {}: {} not served (the demo's routes of the same paths win)",
                site.display(),
                hidden.join(", ")
            );
        }
    }
    if inherited.len() > 0 {
        log::warn!(
            "socket activation passed {} listening socket(s) more than berth uses (one per \
             listener, and one for --http-port): not used",
            inherited.len()
        );
    }
    let mut line = format!(
        "berth listening on {} (model {model}, {shape})",
        urls.join(" ")
    );
    line.push_str(plain_note.as_deref().unwrap_or_default());
    lifecycle::ready(&mut daemon, &line)?;

    let tls: Vec<TlsAcceptor> = listeners.iter().filter_map(|l| l.tls.clone()).collect();
    let reload_all = || {
        if reload(&tls) {
            for server in &servers {
                server.renew_workers();
            }
        }
    };
    let signal = lifecycle::wait_for_stop(reload_all)?;
    for stats in &health {
        stats.set_draining();
    }
    lifecycle::drain_delay(
        args.stop.drain_delay,
        signal,
        "/healthz answers 503",
        reload_all,
    )?;
    let timeout = args.stop.shutdown_timeout;
    log::info!(
        "{signal:?} received: finishing requests in flight (up to {timeout:?}); a second signal stops at once"
    );
    for server in &servers {
        server.drain(timeout);
    }
    // A second signal stops at once: the server closes every connection itself (resetting
    // those with bytes still waiting for their peer, rather than leaving them to the kernel as
    // orphans), then the process exits 1; if that takes longer than a moment, it exits anyway.
    let stops: Vec<_> = servers.iter().map(Server::stop_handle).collect();
    let stopped_at_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stopped_at_once.clone();
    std::thread::spawn(move || {
        if let Ok(again) = berth::process::signal::wait_for_termination() {
            log::warn!("{again:?} received again: stopping now");
            flag.store(true, std::sync::atomic::Ordering::Release);
            for stop in &stops {
                stop.stop();
            }
            std::thread::sleep(std::time::Duration::from_secs(2));
            std::process::exit(1);
        }
    });
    for server in servers {
        server.join();
    }
    if stopped_at_once.load(std::sync::atomic::Ordering::Acquire) {
        return Err("stopped at once by a second signal: requests in flight were cut off".into());
    }
    log::info!("stopped");
    // The pid file goes with the daemon handle.
    drop(daemon);
    Ok(())
}

/// The listeners asked for: every `--listen` (endpoints as `msg serve` takes them, parsed by
/// the same [`Endpoint::parse`]), or `--host`/`--port` (HTTPS with `--tls-cert`). Mistakes
/// are usage errors; `quic://` (and `--http3`) in a model that does not serve HTTP/3 is refused
/// in one line naming the models that do, exit 2; certificate problems are runtime failures
/// with their cause (exit 1), found before anything starts.
fn listeners(args: &ServeArgs) -> Result<Vec<Listener>, String> {
    let serves_quic = args.model.caps().serves_http3;
    let quic_refused = |what: &str| -> ! {
        not_served_yet(&format!(
            "{what}: HTTP/3 is served by --model {} only, not {}",
            drive::Caps::http3_models().join(", --model "),
            args.model
        ))
    };
    if args.http3 && !serves_quic {
        quic_refused("--http3");
    }
    let certificate = |cert: &Path, key: &Path| {
        let mut settings = TlsSettings::http(cert, key);
        settings.key_password = args.tls_key_password.clone().map(KeyPassword);
        settings.redirect_plain_http = args.redirect_https;
        match args.http2 {
            Http2::On => {}
            Http2::Off => settings.alpn.retain(|p| p != b"h2"),
            Http2::Only => settings.alpn.retain(|p| p == b"h2"),
        }
        TlsAcceptor::new(settings).map_err(|e| format!("TLS: {e}"))
    };
    // --tls-cert and --tls-key: read once, for --host/--port or every tls:// without files.
    let mut default_tls: Option<TlsAcceptor> = None;
    let default = |default_tls: &mut Option<TlsAcceptor>| -> Result<_, String> {
        if let (None, Some(cert), Some(key)) = (&*default_tls, &args.tls_cert, &args.tls_key) {
            *default_tls = Some(certificate(cert, key)?);
        }
        Ok(default_tls.clone())
    };
    if args.listen.is_empty() {
        let tls = default(&mut default_tls)?;
        let addr = match (args.host.as_str(), args.port)
            .to_socket_addrs()
            .map(|mut a| a.next())
        {
            Ok(Some(addr)) => addr,
            _ => usage_error(
                "serve",
                &format!(
                    "invalid value '{}' for '--host': not an address or a resolvable name (a \
                     UNIX socket is --listen unix:///PATH)",
                    args.host
                ),
            ),
        };
        if args.redirect_https && tls.is_none() {
            usage_error(
                "serve",
                "--redirect-https is for TLS listeners, and none is asked for (--tls-cert \
                 with --tls-key, or a tls:// --listen)",
            );
        }
        let listeners = vec![Listener {
            addr: Addr::Tcp(addr),
            tls,
        }];
        no_twin_without_tls(args, &listeners);
        return Ok(listeners);
    }
    let bad = |text: &str, why: &str| -> ! {
        usage_error(
            "serve",
            &format!("invalid value '{text}' for '--listen': {why}"),
        )
    };
    let mut endpoints = Vec::new();
    for text in &args.listen {
        let endpoint = Endpoint::parse(text).unwrap_or_else(|e| bad(text, &e));
        match endpoint.scheme() {
            Scheme::Tcp | Scheme::Tls | Scheme::Unix => {}
            Scheme::Quic if serves_quic => {}
            Scheme::Quic => quic_refused(&format!("--listen {text}")),
            Scheme::Udp => bad(
                text,
                "HTTP is served over tcp://, tls://, unix:// and quic://, not udp://",
            ),
            Scheme::Ws | Scheme::Wss => bad(
                text,
                "ws:// and wss:// are msg serve's; serve takes tcp://, tls:// and unix:// (and \
                 answers WebSocket upgrades on them)",
            ),
        }
        if endpoint.raw || endpoint.no_anonymous || endpoint.expected_only {
            bad(
                text,
                "the options ?raw, ?anonymous, ?expected-only are msg serve's",
            );
        }
        endpoints.push((text, endpoint));
    }
    let tls_scheme = |e: &Endpoint| matches!(e.scheme(), Scheme::Tls | Scheme::Quic);
    if args.tls_cert.is_some() && !endpoints.iter().any(|(_, e)| tls_scheme(e)) {
        usage_error(
            "serve",
            "--tls-cert is for tls:// and quic:// listeners, and no --listen is one (write \
             tls://HOST:PORT for HTTPS)",
        );
    }
    let mut listeners = Vec::new();
    for (text, endpoint) in endpoints {
        let bad = |why: &str| -> ! { bad(text, why) };
        let tls = match endpoint.tls.as_ref() {
            None => None,
            Some(files) => match (&files.cert, &files.key) {
                (Some(cert), Some(key)) => Some(certificate(cert, key)?),
                (None, None) => match default(&mut default_tls)? {
                    Some(tls) => Some(tls),
                    None => bad(&format!(
                        "{} needs ?cert=FILE&key=FILE, or --tls-cert and --tls-key",
                        endpoint.scheme()
                    )),
                },
                _ => bad(&format!(
                    "{} needs both ?cert=FILE and key=FILE",
                    endpoint.scheme()
                )),
            },
        };
        listeners.push(Listener {
            addr: endpoint.address,
            tls,
        });
    }
    no_twin_without_tls(args, &listeners);
    if args.redirect_https && listeners.iter().all(|l| l.tls.is_none()) {
        usage_error(
            "serve",
            "--redirect-https is for TLS listeners, and none is asked for (--tls-cert with \
             --tls-key, or a tls:// --listen)",
        );
    }
    Ok(listeners)
}

/// `--http3` with no TLS listener over TCP to be the twin of: a usage error.
fn no_twin_without_tls(args: &ServeArgs, listeners: &[Listener]) {
    let tls_over_tcp = |l: &Listener| l.tls.is_some() && matches!(l.addr, Addr::Tcp(_));
    if args.http3 && !listeners.iter().any(tls_over_tcp) {
        usage_error(
            "serve",
            "--http3 opens the UDP twin of a TLS listener, and none is asked for (--tls-cert \
             with --tls-key, or a tls:// --listen; or --listen quic://HOST:PORT alone)",
        );
    }
}

/// SIGHUP: the certificates and keys are read again; new connections get them. A reload that
/// fails keeps the certificate in use and says why.
/// Whether anything was reloaded.
fn reload(tls: &[TlsAcceptor]) -> bool {
    if tls.is_empty() {
        log::info!("SIGHUP received: nothing to reload (no --tls-cert, no tls:// listener)");
        return false;
    }
    let mut any = false;
    for tls in tls {
        let files = tls.settings();
        match tls.reload() {
            Ok(()) => {
                log::info!(
                    "SIGHUP received: certificate reloaded from {} and {}",
                    files.cert.display(),
                    files.key.display()
                );
                any = true;
            }
            Err(e) => {
                log::warn!("SIGHUP received: certificate not reloaded, the one in use stays: {e}");
            }
        }
    }
    any
}
