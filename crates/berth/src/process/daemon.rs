//! Running in the background (`-d`): detach from the terminal, write a pid file, send output to
//! a log file, and still tell the person who started it whether it came up.
//!
//! ```text
//!  berth serve -d            fork ──> child: setsid, fork ──> grandchild (the daemon)
//!    │ waits on a pipe                 └─ exits                │ binds, starts serving
//!    │ <──────────── "ok: <startup line>" or "error: <cause>" ─┘
//!    └─ prints it, exits 0 or 1
//! ```
//! Call [`daemonize`] before any thread is started: `fork` keeps only the calling thread.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::sys::fd::{pipe, redirect_standard_streams};
use crate::sys::process::{self, Fork};

/// The daemon's side: report readiness to the waiting parent, and own the pid file.
pub struct Daemon {
    report: Option<File>,
    pid_file: Option<PathBuf>,
}

impl Daemon {
    /// Tells the starting process that the server is up; it prints `line` and exits 0.
    pub fn ready(&mut self, line: &str) {
        if let Some(mut pipe) = self.report.take() {
            let _ = writeln!(pipe, "ok: {line}");
        }
    }

    /// Tells the starting process that the server failed; it prints `cause` and exits 1.
    pub fn failed(&mut self, cause: &str) {
        // The pid file goes first: once the report is written the starting process exits, and
        // whoever started it may look for the pid file at once.
        if let Some(path) = self.pid_file.take() {
            let _ = std::fs::remove_file(path);
        }
        if let Some(mut pipe) = self.report.take() {
            let _ = writeln!(pipe, "error: {cause}");
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(path) = &self.pid_file {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Detaches. Returns in the daemon only; the starting process prints what the daemon reports
/// and exits (0 if it reported ready, 1 otherwise). stdin becomes /dev/null; stdout and stderr
/// go to `log_file` (appended) or /dev/null.
pub fn daemonize(pid_file: Option<&Path>, log_file: Option<&Path>) -> io::Result<Daemon> {
    // Open what can fail before detaching, so the error reaches the terminal.
    let log = match log_file {
        Some(path) => OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot open log file {}: {e}", path.display()),
                )
            })?,
        None => OpenOptions::new().write(true).open("/dev/null")?,
    };
    let null = File::open("/dev/null")?;
    let (read_end, write_end) = pipe()?;
    match process::fork()? {
        Fork::Parent(_) => {
            drop(write_end);
            let mut report = String::new();
            let _ = File::from(read_end).read_to_string(&mut report);
            let code = match report.trim_end().split_once(": ") {
                Some(("ok", line)) => {
                    println!("{line}");
                    0
                }
                Some((_, cause)) => {
                    eprintln!("berth: {cause}");
                    1
                }
                None => {
                    eprintln!("berth: the daemon exited before it was ready (see the log file)");
                    1
                }
            };
            let _ = io::stdout().flush();
            process::exit_child(code);
        }
        Fork::Child => {}
    }
    drop(read_end);
    // A new session: no controlling terminal, not in the shell's process group.
    if process::new_session().is_err() {
        process::exit_child(1);
    }
    // Fork again so the daemon is not a session leader and can never reacquire a terminal.
    match process::fork() {
        Ok(Fork::Parent(_)) => process::exit_child(0),
        Ok(Fork::Child) => {}
        Err(_) => process::exit_child(1),
    }
    redirect_standard_streams(&null, &log, &log)?;
    let mut daemon = Daemon {
        report: Some(File::from(write_end)),
        pid_file: None,
    };
    if let Some(path) = pid_file {
        if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
            daemon.failed(&format!("cannot write pid file {}: {e}", path.display()));
            return Err(e);
        }
        daemon.pid_file = Some(path.to_owned());
    }
    Ok(daemon)
}
