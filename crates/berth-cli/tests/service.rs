//! berth under a load balancer and a service manager (issue 21): `/healthz` answers 503 from
//! the first SIGTERM while everything else is still served for `--drain-delay`, then the drain
//! closes the port; systemd's socket activation (a listening socket passed as descriptor 3,
//! `LISTEN_PID`/`LISTEN_FDS`) is served in every model, and a passed descriptor that is not a
//! listening socket stops startup with the cause; `Type=notify` readiness (`READY=1`,
//! `RELOADING=1`, `STOPPING=1` on `$NOTIFY_SOCKET`).

mod common;

use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::{Duration, Instant};

use berth::drive::Model;
use common::{address_in, get, wait_for, Berth, BIN};

const LIMIT: Duration = Duration::from_secs(20);

fn status_of(response: &str) -> &str {
    response.get(9..12).unwrap_or("")
}

fn health(addr: SocketAddr) -> String {
    status_of(&get(addr, "/healthz")).to_owned()
}

#[test]
fn healthz_answers_503_from_the_first_signal_and_the_port_closes_after_the_delay() {
    let threads: Vec<_> = Model::ALL
        .into_iter()
        .flat_map(|m| {
            [
                std::thread::spawn(move || serving_while_draining_in(m.name())),
                std::thread::spawn(move || drain_delay_in(m.name())),
            ]
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// During the delay (an hour: the checks never race its end, however slow the machine), from
/// the first signal: `/healthz` answers 503 while everything else is still served, new
/// connections included, and `/stats` says draining; a second signal then ends it.
fn serving_while_draining_in(model: &str) {
    let mut berth = Berth::spawn(&[
        "serve",
        "--model",
        model,
        "-p",
        "0",
        "--drain-delay",
        "3600",
    ]);
    let addr = address_in(&berth.line());
    assert_eq!(health(addr), "200", "{model}");
    assert!(get(addr, "/healthz").ends_with("ok\n"), "{model}");
    berth.signal("TERM");
    assert!(
        wait_for(LIMIT, || health(addr) == "503"),
        "{model}: /healthz did not turn 503"
    );
    // Still serving, new connections included, while the balancer takes it out of rotation.
    let answer = get(addr, "/hello/world");
    assert!(answer.ends_with("Hello, World!"), "{model}: {answer}");
    assert!(
        get(addr, "/stats").contains("\nberth_draining 1\n"),
        "{model}"
    );
    berth.signal("TERM");
    let (status, _, err) = berth.finish(LIMIT);
    assert!(status.success(), "{model}: {err}");
    assert!(err.contains("/healthz answers 503"), "{model}: {err}");
}

/// After the delay (2 s), and not before, the drain closes the port and the process exits
/// cleanly.
fn drain_delay_in(model: &str) {
    let mut berth = Berth::spawn(&["serve", "--model", model, "-p", "0", "--drain-delay", "2"]);
    let addr = address_in(&berth.line());
    assert_eq!(health(addr), "200", "{model}");
    let signalled = Instant::now();
    berth.signal("TERM");
    assert!(
        wait_for(LIMIT, || TcpStream::connect(addr).is_err()),
        "{model}: the port stayed open after the delay"
    );
    assert!(
        signalled.elapsed() >= Duration::from_millis(1900),
        "{model}: closed before the delay ended ({:?})",
        signalled.elapsed()
    );
    let (status, _, err) = berth.finish(LIMIT);
    assert!(status.success(), "{model}: {err}");
}

/// A second signal during the delay drains at once: with a delay of an hour, berth exits
/// within the test's deadline only if the second signal cut the delay short.
#[test]
fn a_second_signal_cuts_the_drain_delay_short() {
    let mut berth = Berth::spawn(&["serve", "-p", "0", "--drain-delay", "3600"]);
    let addr = address_in(&berth.line());
    berth.signal("TERM");
    assert!(wait_for(LIMIT, || health(addr) == "503"));
    berth.signal("TERM");
    let status = berth.wait(LIMIT);
    assert!(status.success());
}

/// Runs berth through Python, which passes it a socket as systemd does: descriptor 3,
/// `LISTEN_PID` (berth's own pid: Python execs berth, keeping its pid) and `LISTEN_FDS=1`.
/// `listening`: whether the socket is listening (a bound socket that is not is refused).
fn activated(args: &[&str], listening: bool, pid_matches: bool) -> (Berth, u16) {
    let script = r#"
import os, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
if sys.argv[1] == "listen":
    s.listen(128)
print("port", s.getsockname()[1], flush=True)
if s.fileno() != 3:
    os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
os.environ["LISTEN_PID"] = str(os.getpid() + (0 if sys.argv[2] == "mine" else 1))
os.environ["LISTEN_FDS"] = "1"
os.execv(sys.argv[3], sys.argv[3:])
"#;
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script])
        .arg(if listening { "listen" } else { "bound" })
        .arg(if pid_matches { "mine" } else { "other" })
        .arg(BIN)
        .args(args);
    let mut berth = Berth::spawn_command(&mut cmd);
    let line = berth.line();
    let port = line
        .trim()
        .strip_prefix("port ")
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap();
    (berth, port)
}

#[test]
fn a_socket_passed_by_systemd_is_served_in_every_model() {
    berth_testkit::require("python3");
    for model in Model::ALL.map(Model::name) {
        // -p names another port: the passed socket wins.
        let (mut berth, port) = activated(&["serve", "--model", model, "-p", "1"], true, true);
        let line = berth.line();
        let addr = address_in(&line);
        assert_eq!(addr.port(), port, "{model}: {line}");
        for _ in 0..5 {
            assert!(
                get(addr, "/hello/world").ends_with("Hello, World!"),
                "{model}"
            );
        }
        berth.signal("TERM");
        let status = berth.wait(LIMIT);
        assert!(status.success(), "{model}");
    }
}

#[test]
fn passed_descriptors_that_are_not_for_berth_or_not_listening() {
    berth_testkit::require("python3");
    // Meant for another process (LISTEN_PID is not berth's): berth binds its own port.
    let free = common::free_port().to_string();
    let (mut berth, port) = activated(&["serve", "-p", &free], true, false);
    let addr = address_in(&berth.line());
    assert_ne!(addr.port(), port);
    assert_eq!(addr.port().to_string(), free);
    berth.signal("TERM");
    assert!(berth.wait(LIMIT).success());

    // A socket that is bound but not listening is a mistake, named at startup.
    let (mut berth, _) = activated(&["serve", "-p", "0"], false, true);
    let (status, _, err) = berth.finish(LIMIT);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "socket activation: descriptor 3 of LISTEN_FDS: a socket that is not listening"
        ),
        "{err}"
    );
}

#[test]
fn readiness_reload_and_stop_are_told_to_the_service_manager() {
    let dir = std::env::temp_dir().join(format!("berth-notify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let manager = UnixDatagram::bind(&path).unwrap();
    manager.set_read_timeout(Some(LIMIT)).unwrap();
    let mut berth = Berth::spawn_command(
        Command::new(BIN)
            .args(["serve", "-p", "0"])
            .env("NOTIFY_SOCKET", &path),
    );
    let line = berth.line();
    let mut buf = [0u8; 4096];
    let mut next = || {
        let n = manager.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let ready = next();
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(
        ready.contains(&format!("MAINPID={}", berth.pid())),
        "{ready}"
    );
    assert!(
        ready.contains(&format!("STATUS={}", line.trim())),
        "{ready}"
    );
    berth.signal("HUP");
    assert_eq!(next(), "RELOADING=1");
    assert_eq!(next(), "READY=1");
    berth.signal("TERM");
    assert_eq!(next(), "STOPPING=1");
    assert!(berth.wait(LIMIT).success());
    let _ = std::fs::remove_dir_all(&dir);
}
