//! `berth msg serve`: one engine thread serving the echo and relay demo on every endpoint
//! given, until SIGINT or SIGTERM. More cores: start more processes on the same TCP or UDP
//! port (SO_REUSEPORT), as seed 003 does.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use berth::app::relay::EchoRelay;
use berth::drive;
use berth::msg::{Endpoint, Engine, EngineConfig, Policy};
use berth_proto::msg::policy::parse_rule;

use super::ServeArgs;
use crate::args::usage_error;

/// Serves until stopped.
pub fn run(args: ServeArgs) -> Result<(), String> {
    // Before any thread starts, so that every thread inherits the blocked mask.
    drive::signal::block_termination().map_err(|e| e.to_string())?;
    let level = if args.verbose {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Info
    };
    env_logger::Builder::new()
        .filter_level(level)
        .target(env_logger::Target::Stderr)
        .init();

    let endpoints: Vec<Endpoint> = args
        .listen
        .iter()
        .map(|e| Endpoint::parse(e).unwrap_or_else(|err| usage_error("msg", &err)))
        .collect();
    let mut policy = Policy {
        no_anonymous: args.no_anonymous,
        expected_only: args.expected_only,
        ..Policy::default()
    };
    policy.expected.extend(args.expect.iter().cloned());
    for rule in &args.rules {
        let (name, rule) = parse_rule(rule).unwrap_or_else(|err| usage_error("msg", &err));
        policy.rules.insert(name, rule);
    }
    let defaults = EngineConfig::default();
    let config = EngineConfig {
        max_message: args.max_message.unwrap_or(defaults.max_message),
        max_streamed: args.max_message.unwrap_or(defaults.max_streamed),
        capacity: args.capacity.max(1),
        handshake_timeout: args.handshake_timeout,
        udp_idle: args.udp_idle,
        out_high: usize::try_from(args.out_high).unwrap_or(usize::MAX),
        policy,
        reuse_port: !args.no_reuse_port,
        ..defaults
    };

    let mut engine = Engine::new(config).map_err(|e| e.to_string())?;
    let mut bound = Vec::new();
    for e in &endpoints {
        bound.push(
            engine
                .listen(e)
                .map_err(|err| format!("cannot listen: {err}"))?,
        );
    }
    let stats = engine.stats().clone();
    let waker = engine.waker();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let (grace, hold) = (args.shutdown_timeout, args.max_held);
    let thread = std::thread::Builder::new()
        .name("berth-msg".into())
        .spawn(move || {
            let mut demo = EchoRelay::new(hold);
            engine.serve(&mut demo, &flag, Duration::from_millis(500), grace)
        })
        .map_err(|e| e.to_string())?;

    let list: Vec<String> = bound.iter().map(|e| e.to_string()).collect();
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "berth msg listening on {}", list.join(" "));
        let _ = out.flush();
    }
    let signal = drive::signal::wait_for_termination().map_err(|e| e.to_string())?;
    log::info!("{signal:?} received: telling clients and closing (up to {grace:?})");
    stop.store(true, Ordering::Relaxed);
    let _ = waker.wake();
    std::thread::spawn(|| {
        if let Ok(again) = drive::signal::wait_for_termination() {
            log::warn!("{again:?} received again: stopping now");
            std::process::exit(1);
        }
    });
    let result = thread
        .join()
        .map_err(|_| "the engine thread panicked".to_owned())?;
    log::info!("stopped: {}", stats.snapshot());
    result.map_err(|e| e.to_string())
}
