//! `berth msg serve`: the echo and relay demo on every endpoint given, served by `-A` engine
//! threads, until SIGINT or SIGTERM (after `--drain-delay`; in the background with `-d`; a
//! service manager is told READY/RELOADING/STOPPING as `serve` tells it). Processes can also share a TCP or UDP port with
//! `--reuse-port` (SO_REUSEPORT), as seed 003's "multiple instances" do; without it a port
//! another process listens on is refused. SIGHUP reads every file of the tls:// listeners
//! again (certificate chain, key, client CA), all or nothing.

use std::num::NonZeroUsize;

use berth::app::relay::EchoRelay;
use berth::msg::{ClusterConfig, Endpoint, EngineConfig, MsgServer, NameRule, Policy, TlsReloader};
use berth::net::tls::{TlsAcceptor, TlsSettings};
use berth::net::{activation, Acceptor, Addr, ConnSizing, ListenConfig, Scheme};
use berth_proto::msg::policy::{parse_name, parse_rule};

use super::ServeArgs;
use crate::args::{not_served_yet, usage_error};
use crate::lifecycle;

/// Serves until stopped.
pub fn run(args: ServeArgs) -> Result<(), String> {
    // Before any thread starts, so that every thread inherits the blocked mask.
    berth::process::signal::block_termination().map_err(|e| e.to_string())?;
    // A listening socket a service manager passed (systemd's socket activation), taken before
    // any thread starts: the first TCP endpoint listens on it.
    let mut inherited = activation::listen_fds()
        .map_err(|e| format!("socket activation: {e}"))?
        .into_iter();
    let passed = inherited.next();
    if inherited.len() > 0 {
        log::warn!(
            "socket activation passed {} listening socket(s) more than msg serve uses (one, \
             for the first tcp:// endpoint): not used",
            inherited.len()
        );
    }

    let endpoints: Vec<Endpoint> = args
        .listen
        .iter()
        .map(|e| Endpoint::parse(e).unwrap_or_else(|err| usage_error("msg serve", &err)))
        .collect();
    if let Some(quic) = endpoints.iter().find(|e| e.scheme() == Scheme::Quic) {
        not_served_yet(&format!(
            "--listen {quic}: quic:// is not served by msg serve yet; it takes tcp://, tls://, \
             unix://, udp://, ws:// and wss://"
        ));
    }
    let tcp = |e: &Endpoint| matches!(e.address, Addr::Tcp(_));
    if passed.is_some() && !endpoints.iter().any(tcp) {
        log::warn!("socket activation passed a listening socket, and no tcp:// endpoint takes it");
    }
    let names = NameRule {
        max: args.max_name,
        strict: args.strict_names,
    };
    let mut policy = Policy {
        names,
        no_anonymous: args.no_anonymous,
        expected_only: args.expected_only,
        name_taken: args.name_taken,
        ..Policy::default()
    };
    for name in &args.expect {
        let name = parse_name(name, names)
            .unwrap_or_else(|err| usage_error("msg serve", &format!("--expect {err}")));
        policy.expected.insert(name);
    }
    for rule in &args.rules {
        let (name, rule) = parse_rule(rule).unwrap_or_else(|err| usage_error("msg serve", &err));
        policy.rules.insert(name, rule);
    }
    // A name no client could register (too long for --max-name, not strict) is a mistake.
    if let Err(err) = policy.check_names() {
        usage_error("msg serve", &err);
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let settings = TlsSettings {
                alpn: Vec::new(),
                client_ca: args.client_ca.clone(),
                ..TlsSettings::http(cert, key)
            };
            Some(TlsAcceptor::new(settings).map_err(|e| format!("TLS: {e}"))?)
        }
        _ => None,
    };
    let defaults = EngineConfig::default();
    let config = EngineConfig {
        max_message: args.max_message.unwrap_or(defaults.max_message),
        max_streamed: args.max_message.unwrap_or(defaults.max_streamed),
        // serve's -C default (100,000 a thread), where an engine made in code holds 10,000;
        // the read buffers stay the engine's 64 KiB (`ConnSizing::msg`).
        sizing: ConnSizing {
            capacity: args.accept.accept_capacity.get(),
            ..defaults.sizing
        },
        handshake_timeout: args.handshake_timeout,
        udp_idle: args.udp_idle,
        write_timeout: args.write_timeout,
        read_timeout: args.read_timeout,
        stall_timeout: args.stall_timeout,
        stall_min_bytes: args.stall_min_bytes,
        max_held: args.max_held,
        max_held_total: args.max_held_total,
        out_high: usize::try_from(args.out_high).unwrap_or(usize::MAX),
        policy,
        max_opening: usize::try_from(args.ws_max_head).unwrap_or(usize::MAX),
        ws_deflate: args.ws_deflate.config(),
        cluster: args.cluster.as_ref().map(|url| ClusterConfig {
            url: url.clone(),
            lease: args.cluster_lease,
        }),
        listen: ListenConfig {
            exclusive: !args.reuse_port,
            transport: tls.map_or(Acceptor::Plain, Acceptor::Tls),
            inherited: passed,
            ..ListenConfig::default()
        },
        ..defaults
    };

    let (grace, hold, max_name) = (args.stop.shutdown_timeout, args.max_held, args.max_name);
    // Detach now: every flag has been checked, and no thread has been started yet.
    let mut daemon = lifecycle::detach(&args.daemon).map_err(|e| e.to_string())?;
    // As serve: one engine thread per core unless asked (relays between clients of different
    // threads stream and are held back as within one: tests/msg.rs, berth's msg_threads.rs).
    let threads = args
        .accept
        .accept_threads
        .map_or_else(crate::args::cores, NonZeroUsize::get);
    let server = MsgServer::spawn(&endpoints, config, threads, grace, move |_| {
        EchoRelay::new(hold).with_max_name(max_name)
    })
    .map_err(|e| lifecycle::failed(&mut daemon, format!("cannot listen: {e}")))?;
    let bound = server.endpoints.clone();
    let list: Vec<String> = bound.iter().map(|e| e.to_string()).collect();
    let line = format!("berth msg listening on {}", list.join(" "));
    lifecycle::ready(&mut daemon, &line).map_err(|e| e.to_string())?;
    // Signals are taken on a thread of their own, so that this one can wait for the server,
    // which also ends (and exits 1) if an engine thread panics. SIGHUP reloads certificates.
    let stopper = server.stopper();
    let reloader = server.tls_reloader();
    let delay = args.stop.drain_delay;
    std::thread::spawn(move || {
        let Ok(signal) = lifecycle::wait_for_stop(|| reload(&reloader)) else {
            return;
        };
        if lifecycle::drain_delay(
            delay,
            signal,
            "the service manager is told STOPPING=1",
            || reload(&reloader),
        )
        .is_err()
        {
            return;
        }
        log::info!("{signal:?} received: telling clients and closing (up to {grace:?})");
        stopper.stop();
        if let Ok(again) = berth::process::signal::wait_for_termination() {
            log::warn!("{again:?} received again: stopping now");
            std::process::exit(1);
        }
    });
    let stats = server.stats().clone();
    let result = server.join();
    log::info!("stopped: {}", stats.snapshot());
    // The pid file goes with the daemon handle.
    drop(daemon);
    result.map_err(|e| e.to_string())
}

/// SIGHUP: every file of the tls:// listeners (certificate chain, key, client CA) is read
/// again, in every engine thread; new connections get them. A reload where any file fails
/// keeps every listener's old set and says why.
fn reload(reloader: &TlsReloader) {
    match reloader.reload() {
        Ok(sets) if sets.is_empty() => {
            log::info!("SIGHUP received: nothing to reload (no tls:// listener)");
        }
        Ok(sets) => {
            for files in sets {
                log::info!("SIGHUP received: read again and in use for new connections: {files}");
            }
        }
        Err(errors) => {
            for e in errors {
                log::warn!("SIGHUP received: {e}");
            }
            log::warn!(
                "SIGHUP received: nothing reloaded, every tls:// listener keeps the files it had"
            );
        }
    }
}
