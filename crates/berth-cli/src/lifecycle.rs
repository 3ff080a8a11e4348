//! What `serve` and `msg serve` do alike around serving: detach (`-d`), announce the startup
//! line (to stdout, or to the starting process of a daemon) and tell the service manager
//! (`sd_notify`), wait for signals, and let `--drain-delay` pass before the drain.

use std::io::Write;
use std::time::{Duration, Instant};

use berth::net::activation;
use berth::process::daemon::{self, Daemon};
use berth::process::signal::{self, Signal};

use crate::args::DaemonArgs;

/// Detaches if `-d` was given. Call it once every flag has been checked (usage errors reach
/// the terminal) and before any thread is started (fork keeps only the calling one).
pub fn detach(args: &DaemonArgs) -> std::io::Result<Option<Daemon>> {
    match args.daemonize {
        true => daemon::daemonize(args.pid_file.as_deref(), args.log_file.as_deref()).map(Some),
        false => Ok(None),
    }
}

/// Reports a failure to start to whoever waits for the daemon, and passes it on.
pub fn failed<E: std::fmt::Display>(daemon: &mut Option<Daemon>, e: E) -> E {
    if let Some(d) = daemon {
        d.failed(&e.to_string());
    }
    e
}

/// The server is up: the startup line goes to stdout (or, under `-d`, to the log and the
/// starting process, which prints it), and a service manager that asked is told READY=1.
pub fn ready(daemon: &mut Option<Daemon>, line: &str) -> std::io::Result<()> {
    match daemon {
        Some(d) => {
            log::info!("{line}");
            d.ready(line);
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
    Ok(())
}

/// Waits for SIGTERM or SIGINT, running `reload` for each SIGHUP meanwhile (the manager is
/// told RELOADING=1, then READY=1); returns the stop signal, the manager told STOPPING=1.
pub fn wait_for_stop(mut reload: impl FnMut()) -> std::io::Result<signal::Termination> {
    let stop = loop {
        match signal::wait_for_signal()? {
            Signal::Stop(stop) => break stop,
            Signal::Reload => {
                tell_manager("RELOADING=1");
                reload();
                tell_manager("READY=1");
            }
        }
    };
    tell_manager("STOPPING=1");
    Ok(stop)
}

/// `--drain-delay`: serves on for `delay` after the first stop signal, SIGHUP still reloading;
/// a second stop signal ends the delay at once.
pub fn drain_delay(
    delay: Duration,
    stop: signal::Termination,
    what: &str,
    mut reload: impl FnMut(),
) -> std::io::Result<()> {
    if delay.is_zero() {
        return Ok(());
    }
    log::info!(
        "{stop:?} received: {what}; serving on for {delay:?} before the drain (a second signal \
         drains at once)"
    );
    let until = Instant::now() + delay;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        match signal::wait_for_signal_within(left)? {
            Some(Signal::Stop(_)) => return Ok(()),
            Some(Signal::Reload) => reload(),
            None => {}
        }
    }
}

/// Tells a service manager that asked (`Type=notify`: `$NOTIFY_SOCKET`) about a change of
/// state; a failure to tell is logged, never fatal.
pub fn tell_manager(state: &str) {
    if let Err(e) = activation::notify(state) {
        log::warn!("cannot notify the service manager ($NOTIFY_SOCKET): {e}");
    }
}
