//! `berth serve -d`: detaches, reports the startup line (or the failure) to the starting
//! terminal, writes the pid file, logs to the log file, drains on SIGTERM and removes the pid
//! file on a clean exit.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use common::procs::alive;
use common::{address_in, run, signal, wait_for};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("berth-daemon-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Kills the daemon if a test fails half-way.
struct Reaper(i32);
impl Drop for Reaper {
    fn drop(&mut self) {
        if self.0 > 0 && alive(self.0) {
            signal(self.0, "KILL");
        }
    }
}

#[test]
fn daemon_serves_logs_and_cleans_up() {
    let dir = scratch("ok");
    let (pid_file, log_file) = (dir.join("berth.pid"), dir.join("berth.log"));
    let (status, line, err) = run(&[
        "serve",
        "-d",
        "-v",
        "-p",
        "0",
        "-A",
        "1",
        "--pid-file",
        &pid_file.to_string_lossy(),
        "--log-file",
        &log_file.to_string_lossy(),
    ]);
    assert_eq!(status.code(), Some(0), "{err}");
    // The command returned (run waits for its exit, within its deadline) with the daemon up:
    // its startup line, and it serves (below).
    let addr = address_in(&line);

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

    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    assert!(
        response.starts_with("HTTP/1.1 200 OK") && response.ends_with("Hello, World!"),
        "{response}"
    );

    assert!(signal(pid, "TERM"), "kill -TERM {pid} failed");
    assert!(
        wait_for(Duration::from_secs(10), || !alive(pid)),
        "daemon still running after SIGTERM"
    );
    assert!(
        wait_for(Duration::from_secs(2), || !pid_file.exists()),
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
    let (status, _, err) = run(&[
        "serve",
        "-d",
        "-p",
        &port,
        "--pid-file",
        &pid_file.to_string_lossy(),
    ]);
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("already in use"), "{err}");
    assert!(!pid_file.exists(), "a failed daemon leaves no pid file");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn pid_and_log_files_need_daemonize() {
    let (status, _, err) = run(&["serve", "--pid-file", "/tmp/x.pid"]);
    assert_eq!(status.code(), Some(2));
    assert!(err.contains("Usage:"));
}
