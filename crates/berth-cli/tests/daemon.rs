//! `berth serve -d`: detaches, reports the startup line (or the failure) to the starting
//! terminal, writes the pid file, logs to the log file, drains on SIGTERM and removes the pid
//! file on a clean exit.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("berth-daemon-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Kills the daemon if a test fails half-way.
struct Reaper(i32);
impl Drop for Reaper {
    fn drop(&mut self) {
        if self.0 > 0 && alive(self.0) {
            let _ = Command::new("kill")
                .args(["-KILL", &self.0.to_string()])
                .status();
        }
    }
}

#[test]
fn daemon_serves_logs_and_cleans_up() {
    let dir = scratch("ok");
    let (pid_file, log_file) = (dir.join("berth.pid"), dir.join("berth.log"));
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "-d", "-v", "-p", "0", "-A", "1"])
        .arg("--pid-file")
        .arg(&pid_file)
        .arg("--log-file")
        .arg(&log_file)
        .output()
        .expect("run berth -d");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the command should return once the daemon is up"
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();

    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid");
    let _reaper = Reaper(pid);
    assert!(alive(pid));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let ppid = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .unwrap()
        .trim()
        .to_owned();
    assert_ne!(
        ppid,
        std::process::id().to_string(),
        "the daemon is not our child"
    );

    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    assert!(
        response.starts_with("HTTP/1.1 200 OK") && response.ends_with("Hello, World!"),
        "{response}"
    );

    assert!(Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    assert!(
        wait_until(Duration::from_secs(10), || !alive(pid)),
        "daemon still running after SIGTERM"
    );
    assert!(
        wait_until(Duration::from_secs(2), || !pid_file.exists()),
        "pid file left behind"
    );
    let log = std::fs::read_to_string(&log_file).expect("log file");
    assert!(log.contains("berth listening on"), "{log}");
    assert!(log.contains("stopped"), "{log}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn daemon_that_cannot_bind_says_why_and_exits_1() {
    let dir = scratch("busy");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let pid_file = dir.join("berth.pid");
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "-d", "-p", &port])
        .arg("--pid-file")
        .arg(&pid_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already in use"), "{err}");
    assert!(!pid_file.exists(), "a failed daemon leaves no pid file");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn pid_and_log_files_need_daemonize() {
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--pid-file", "/tmp/x.pid"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage:"));
}
