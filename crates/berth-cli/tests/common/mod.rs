//! What the tests of the built `berth` binary share: a guard that owns a running berth and
//! always stops and reaps it, its startup line and output read with deadlines, runs to the end
//! with a deadline, signals, and a small HTTP client. Include it with `mod common;` (in
//! `tests/common/mod.rs`, so that cargo does not build it as a test of its own).
//!
//! Every wait has a deadline, so a test that finds a bug fails instead of hanging.
#![allow(dead_code, unused_imports)] // each test binary uses a different part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The processes a test made, from `/proc` (the shared test kit's, as the `berth` crate's
/// tests use it).
pub use berth_testkit::procs;
/// Polls a condition until it holds or a deadline passes (the shared test kit's).
pub use berth_testkit::wait_for;

use procs::{alive, children_of};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_berth");

/// Generous bound on anything a test waits for; only a guard against hangs.
pub use berth_testkit::LIMIT;

/// A running berth (stdin from `/dev/null`), stopped when dropped, pass or fail: SIGTERM and a
/// bounded wait, then SIGKILL for it and for any child process it had. A thread reads its
/// stdout line by line and another collects its stderr, so a chatty berth never blocks on a
/// full pipe.
pub struct Berth {
    child: Child,
    /// Lines of stdout, each with its line ending.
    stdout: mpsc::Receiver<Vec<u8>>,
    /// stderr, collected until the pipe closes.
    stderr: Option<JoinHandle<Vec<u8>>>,
}

impl Berth {
    /// Starts `berth ARGS`.
    pub fn spawn(args: &[&str]) -> Berth {
        Berth::start(Command::new(BIN).args(args))
    }

    /// Starts `berth ARGS` in the working directory `dir`.
    pub fn spawn_in(dir: &Path, args: &[&str]) -> Berth {
        Berth::start(Command::new(BIN).args(args).current_dir(dir))
    }

    /// Starts `cmd`, which runs berth (possibly through a wrapper that execs it, with the
    /// environment or descriptors a test needs).
    pub fn spawn_command(cmd: &mut Command) -> Berth {
        Berth::start(cmd)
    }

    fn start(cmd: &mut Command) -> Berth {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn berth");
        let mut out = BufReader::new(child.stdout.take().expect("stdout piped"));
        let (tx, stdout) = mpsc::channel();
        thread::spawn(move || loop {
            let mut line = Vec::new();
            match out.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if tx.send(line).is_err() => break,
                Ok(_) => {}
            }
        });
        let mut err = child.stderr.take().expect("stderr piped");
        let stderr = Some(thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = err.read_to_end(&mut bytes);
            bytes
        }));
        Berth {
            child,
            stdout,
            stderr,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether it has not exited yet.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// The next line of stdout (the first is the startup line), without its line ending,
    /// within [`LIMIT`]; if none comes, kills berth and panics with its stderr.
    pub fn line(&mut self) -> String {
        match self.stdout.recv_timeout(LIMIT) {
            Ok(line) => {
                let line = String::from_utf8_lossy(&line);
                let line = line.strip_suffix('\n').unwrap_or(&line);
                line.strip_suffix('\r').unwrap_or(line).to_owned()
            }
            Err(e) => {
                self.kill();
                panic!(
                    "no line on stdout within {LIMIT:?} ({e}); stderr: {}",
                    self.stderr()
                );
            }
        }
    }

    /// What is left of stdout, up to its end (call after berth has exited); what a process it
    /// left behind still holds open is given up on after [`LIMIT`].
    pub fn rest_of_stdout(&mut self) -> String {
        let mut bytes = Vec::new();
        while let Ok(line) = self.stdout.recv_timeout(LIMIT) {
            bytes.extend_from_slice(&line);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Everything berth wrote to stderr (waits for the pipe to close: call after it has
    /// exited); empty if already taken.
    pub fn stderr(&mut self) -> String {
        let bytes = self
            .stderr
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Sends `SIG<sig>` (`TERM`, `INT`, `KILL`, ...); asserts that it was delivered.
    pub fn signal(&self, sig: &str) {
        assert!(signal(self.pid(), sig), "kill -{sig} {} failed", self.pid());
    }

    /// Waits for the exit within `within`; `None` if it is still running.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the exit within `within`; panics (and the guard stops berth) otherwise.
    pub fn wait(&mut self, within: Duration) -> ExitStatus {
        self.wait_exit(within)
            .unwrap_or_else(|| panic!("berth did not exit within {within:?}"))
    }

    /// Waits for the exit within `within`; returns the status with all of stdout that was not
    /// read yet, and stderr.
    pub fn finish(&mut self, within: Duration) -> (ExitStatus, String, String) {
        let status = self.wait(within);
        (status, self.rest_of_stdout(), self.stderr())
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Berth {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        // Children first noted, so that none outlives a berth that has to be killed.
        let children: Vec<i32> = children_of(self.pid()).iter().map(|p| p.pid).collect();
        signal(self.pid(), "TERM");
        if self.wait_exit(Duration::from_secs(5)).is_none() {
            self.kill();
        }
        for pid in children {
            if alive(pid) {
                signal(pid, "KILL");
            }
        }
    }
}

/// Runs `berth ARGS` to its end within [`LIMIT`]; returns the exit status, stdout and stderr.
pub fn run(args: &[&str]) -> (ExitStatus, String, String) {
    run_within(args, LIMIT)
}

/// [`run`] with a deadline of `within`.
pub fn run_within(args: &[&str], within: Duration) -> (ExitStatus, String, String) {
    let mut berth = Berth::spawn(args);
    if berth.wait_exit(within).is_none() {
        panic!("berth {args:?} did not exit within {within:?}");
    }
    berth.finish(within)
}

/// Sends `SIG<sig>` to `pid` with the `kill` command; whether it was delivered.
pub fn signal(pid: i32, sig: &str) -> bool {
    Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Parses `http://ADDR` (or `https://ADDR`) out of a startup line.
pub fn address_in(line: &str) -> SocketAddr {
    let start = line
        .find("://")
        .filter(|&i| line[..i].ends_with("http") || line[..i].ends_with("https"))
        .unwrap_or_else(|| panic!("no http:// address in {line:?}"))
        + "://".len();
    let rest = &line[start..];
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    rest[..end].parse().expect("a socket address")
}

/// One GET over a fresh connection, closing after it; returns the raw response.
pub fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect_timeout(&addr, LIMIT).expect("connect");
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.set_write_timeout(Some(LIMIT)).unwrap();
    // One write, as real clients send a request: `write!` would send it in pieces, and a
    // server that answers 503 at accept (TCP_DEFER_ACCEPT wakes it on the first piece) has
    // closed by the time the later pieces come, so they meet a reset (EPIPE).
    let request = format!("GET {path} HTTP/1.1\r\nHost: cli\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read response");
    out
}

/// A port that was free a moment ago (nothing listens on it now).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}
