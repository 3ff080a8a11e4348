//! berth's own log lines (the engine's `log` records: a plain HTTP request on a TLS port, a
//! connection timed out or refused at the cap, a job that panicked) written to the Python
//! logger `berth.error`, at the level `python -m berth --log-level` sets ([`log_to_python`]).
//!
//! The engine logs from its I/O threads, which must never wait for the GIL (a thread holding
//! it may be waiting for them): a record is handed to a thread of this module's own through a
//! bounded queue, without blocking (one that finds the queue full, or its lock taken, is
//! dropped), and that thread writes it to Python. A forked process (`--workers`, the `prefork`
//! and `forked` models) has none of its parent's threads: the first record logged in it
//! starts its own.

use std::sync::Mutex;

use crossbeam_channel::{Sender, TrySendError};
use pyo3::prelude::*;

/// Records that may wait for the Python side; beyond, they are dropped (a flood of debug
/// lines must not grow memory).
const QUEUE: usize = 10_000;

/// A record on its way to Python: its level (Python's number) and its line.
type Line = (u8, String);

/// This process's writer thread's queue, and the process it was started in.
static WRITER: Mutex<Option<(u32, Sender<Line>)>> = Mutex::new(None);

struct ToPython;

static LOGGER: ToPython = ToPython;

impl log::Log for ToPython {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        // Python's numbers: TRACE (berth's, 5), DEBUG 10, INFO 20, WARNING 30, ERROR 40.
        let level = match record.level() {
            log::Level::Trace => 5,
            log::Level::Debug => 10,
            log::Level::Info => 20,
            log::Level::Warn => 30,
            log::Level::Error => 40,
        };
        let line = record.args().to_string();
        // Never waits: a lock held by another thread (or held at a fork, forever) drops it.
        let Ok(mut writer) = WRITER.try_lock() else {
            return;
        };
        let pid = std::process::id();
        if writer.as_ref().is_none_or(|(owner, _)| *owner != pid) {
            *writer = start().map(|tx| (pid, tx));
        }
        if let Some((_, tx)) = writer.as_ref() {
            if let Err(TrySendError::Disconnected(_)) = tx.try_send((level, line)) {
                *writer = None;
            }
        }
    }

    fn flush(&self) {}
}

/// Starts this process's writer thread.
fn start() -> Option<Sender<Line>> {
    let (tx, rx) = crossbeam_channel::bounded::<Line>(QUEUE);
    let spawned = std::thread::Builder::new()
        .name("berth-log".into())
        .spawn(move || {
            while let Ok((level, line)) = rx.recv() {
                Python::with_gil(|py| {
                    let logged = py
                        .import("logging")
                        .and_then(|l| l.call_method1("getLogger", ("berth.error",)))
                        .and_then(|l| l.call_method1("log", (level, "%s", line)));
                    if let Err(e) = logged {
                        e.write_unraisable(py, None);
                    }
                });
            }
        });
    spawned.ok().map(|_| tx)
}

/// Sends berth's own log records at `level` (Python's number: 5 trace, 10 debug, 20 info, 30
/// warning, 40 error, above: none) and above to the logger `berth.error`.
#[pyfunction]
pub fn log_to_python(level: u32) {
    let filter = match level {
        0..=5 => log::LevelFilter::Trace,
        6..=10 => log::LevelFilter::Debug,
        11..=20 => log::LevelFilter::Info,
        21..=30 => log::LevelFilter::Warn,
        31..=40 => log::LevelFilter::Error,
        _ => log::LevelFilter::Off,
    };
    // Only the first call installs it (a second `run()` in one process changes the level).
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(filter);
}
