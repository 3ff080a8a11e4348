//! `berth msg serve`, `send` and `listen` as built binaries: the relay demo end to end, a port
//! in use refused, two processes sharing one port with `--reuse-port`, a 1 GiB message relayed
//! in bounded server memory (within an engine thread and between two), the size limit, and
//! usage errors.
//!
//! Every child is stopped and reaped by its guard when the test ends; every wait is bounded.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitStatus;
use std::thread;
use std::time::{Duration, Instant};

use berth_testkit::msg::{frame, read_frame_raw};
use common::{run_within, Berth};

const LIMIT: Duration = Duration::from_secs(60);

/// A `berth msg serve` child, stopped by its [`Berth`] guard when dropped.
struct Server {
    berth: Berth,
    endpoints: Vec<String>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut berth = Berth::spawn(&[&["msg", "serve"][..], args].concat());
        let line = berth.line();
        let endpoints = line
            .trim()
            .strip_prefix("berth msg listening on ")
            .unwrap_or_else(|| panic!("startup line: {line:?}"))
            .split(' ')
            .map(str::to_owned)
            .collect();
        Server { berth, endpoints }
    }

    fn addr(&self) -> SocketAddr {
        self.endpoints[0]
            .strip_prefix("tcp://")
            .unwrap()
            .parse()
            .unwrap()
    }

    /// SIGTERM, then the exit status and stderr.
    fn stop(mut self) -> (i32, String) {
        self.berth.signal("TERM");
        let status = self.berth.wait(LIMIT);
        (status.code().unwrap_or(-1), self.berth.stderr())
    }

    /// The server's peak resident memory so far, in KiB.
    fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.berth.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status")
    }
}

fn client(addr: SocketAddr, name: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(&frame(name.as_bytes())).unwrap();
    assert_eq!(read_frame_raw(&mut s), (2, b"OK".to_vec()));
    s
}

/// Runs `berth ARGS` to its end (within [`LIMIT`]): exit status, stdout, stderr.
fn berth(args: &[&str]) -> (ExitStatus, String, String) {
    run_within(args, LIMIT)
}

#[test]
fn send_and_listen_through_the_relay_demo() {
    let dir = std::env::temp_dir().join(format!("berth-msg-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("m.sock");
    let unix = format!("unix://{}", sock.display());
    let server = Server::start(&[
        "--listen",
        "tcp://127.0.0.1:0",
        "--listen",
        &unix,
        "--rule",
        "admin:transport=unix",
    ]);
    let tcp = server.endpoints[0].clone();
    assert_eq!(server.endpoints[1], unix);

    let (status, out, err) = berth(&["msg", "send", &tcp, "hello", "two words"]);
    assert!(status.success(), "{status:?}: {out}{err}");
    assert_eq!(out, "hello\ntwo words\n");

    let (status, _, err) = berth(&["msg", "send", &tcp, "--name", "admin", "x"]);
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("refused: transport-refused"), "{err}");
    let (_, out, _) = berth(&["msg", "send", &unix, "--name", "admin", "over unix"]);
    assert_eq!(out, "over unix\n");

    let mut listener = Berth::spawn(&["msg", "listen", &tcp, "--name", "bob"]);
    // Wait until bob is registered (the relay answers `@!` until then; such a send exits 1,
    // so alice sends only once a probe got through).
    let deadline = Instant::now() + LIMIT;
    loop {
        let (_, probe, _) = berth(&["msg", "send", &tcp, "@bob ?", "--wait", "300ms"]);
        if !probe.starts_with("@! no client") {
            break;
        }
        assert!(Instant::now() < deadline, "bob never registered");
    }
    let (status, out, err) = berth(&["msg", "send", &tcp, "--name", "alice", "@bob hi"]);
    assert!(status.success(), "{status:?}: {out}{err}");
    // Bob got the one probe that reached him (from an anonymous sender), then alice's.
    let probe = listener.line();
    assert!(probe.starts_with("@#") && probe.ends_with(" ?"), "{probe}");
    assert_eq!(listener.line(), "@alice hi");
    let (code, err) = server.stop();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("refused:transport-refused 1"), "{err}");
    // The listener saw the shutdown and exited by itself.
    assert!(listener.wait(LIMIT).success());
    assert!(!sock.exists(), "the UNIX socket file is removed at exit");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn send_exits_0_when_every_message_was_delivered() {
    let server = Server::start(&["--listen", "tcp://127.0.0.1:0"]);
    let tcp = server.endpoints[0].clone();
    let mut bob = client(server.addr(), "bob");
    // README's example: a relay gets no answer, an echo does; both delivered.
    let (status, out, err) = berth(&["msg", "send", &tcp, "--name", "alice", "@bob hi", "hello"]);
    assert_eq!(status.code(), Some(0), "{out}{err}");
    assert_eq!((out.as_str(), err.as_str()), ("hello\n", ""));
    assert_eq!(read_frame_raw(&mut bob).1, b"@alice hi");
    // Only relays: done as soon as the server has routed them, not after --wait (an hour: a
    // send that waited for it would not end within the run's deadline).
    let (status, out, err) = berth(&[
        "msg", "send", &tcp, "@bob one", "@bob two", "--wait", "3600s",
    ]);
    assert_eq!(status.code(), Some(0), "{out}{err}");
    assert_eq!(out, "");
    for text in [" one", " two"] {
        let got = String::from_utf8(read_frame_raw(&mut bob).1).unwrap();
        // An anonymous sender appears as `#SLOT.GENERATION`.
        let (from, rest) = got.split_at(got.find(' ').unwrap());
        assert!(from.starts_with("@#") && from[2..].contains('.'), "{got}");
        assert_eq!(rest, text);
    }
    // A relay that cannot be delivered fails the send.
    let (status, out, err) = berth(&["msg", "send", &tcp, "@nobody x", "echoed"]);
    assert_eq!(status.code(), Some(1), "{out}{err}");
    assert_eq!(out, "@! no client named nobody\necho\u{65}d\n");
    assert_eq!(err, "berth: 1 of 1 relayed messages not delivered\n");
    // --answers: that many answers of any kind; 0 only sends.
    let (status, out, err) = berth(&["msg", "send", &tcp, "--answers", "0", "x"]);
    assert_eq!(status.code(), Some(0), "{out}{err}");
    let (status, out, err) = berth(&[
        "msg",
        "send",
        &tcp,
        "--answers",
        "3",
        "--wait",
        "300ms",
        "a",
        "b",
    ]);
    assert_eq!(status.code(), Some(1), "{out}{err}");
    assert_eq!(out, "a\nb\n");
    assert_eq!(err, "berth: 2 of 3 answers within 300ms\n");
}

#[test]
fn send_help_and_endpoint_errors_are_its_own() {
    let (status, out, _) = berth(&["msg", "send", "--help"]);
    assert_eq!(status.code(), Some(0));
    assert!(!out.contains("[default: \"\"]"), "{out}");
    assert!(
        out.contains("[default: anonymous; others see it as #ID]"),
        "{out}"
    );
    for endpoint in ["carrier-pigeon://x", "udp://127.0.0.1:9100", "tcp://nohost"] {
        let (status, _, err) = berth(&["msg", "send", endpoint, "m"]);
        assert_eq!(status.code(), Some(2), "{endpoint}: {err}");
        assert!(err.contains("Usage: berth msg send "), "{endpoint}: {err}");
    }
    let (status, _, err) = berth(&["msg", "listen", "udp://127.0.0.1:9100", "--name", "a"]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("Usage: berth msg listen "), "{err}");
    let (status, _, err) = berth(&["msg", "serve", "--listen", "nope://x"]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("Usage: berth msg serve "), "{err}");
}

#[test]
fn a_second_server_is_refused_a_port_in_use() {
    // -A 2: the first server's own threads share the port; nobody else joins it unasked.
    let a = Server::start(&["--listen", "tcp://127.0.0.1:0", "-A", "2"]);
    let (status, out, err) = berth(&["msg", "serve", "--listen", &a.endpoints[0]]);
    assert_eq!(status.code(), Some(1), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(
        err,
        format!(
            "berth: cannot listen: address {} already in use\n",
            a.addr()
        )
    );
    // The same for UDP.
    let u = Server::start(&["--listen", "udp://127.0.0.1:0"]);
    let (status, _, err) = berth(&["msg", "serve", "--listen", &u.endpoints[0]]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("Address already in use"), "{err}");
    // And an HTTP server on the message server's port.
    let port = a.addr().port().to_string();
    let (status, _, err) = berth(&["serve", "-p", &port]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err, format!("berth: address {} already in use\n", a.addr()));
    let (code, err) = a.stop();
    assert_eq!(code, 0, "{err}");
}

#[test]
fn two_processes_share_one_port_with_reuse_port() {
    let a = Server::start(&["--listen", "tcp://127.0.0.1:0", "--reuse-port"]);
    let port = a.addr().port();
    let b = Server::start(&[
        "--listen",
        &format!("tcp://127.0.0.1:{port}"),
        "--reuse-port",
    ]);
    assert_eq!(a.endpoints, b.endpoints);
    let clients: Vec<_> = (0..40)
        .map(|i| client(a.addr(), &format!("c{i}")))
        .collect();
    for mut c in clients {
        c.write_all(&frame(b"ping")).unwrap();
        assert_eq!(read_frame_raw(&mut c), (4, b"ping".to_vec()));
    }
    let admitted = |err: &str| -> u64 {
        let stats = err.lines().find(|l| l.contains("stopped:")).unwrap();
        let after = stats.split("admitted ").nth(1).unwrap();
        after.split(' ').next().unwrap().parse().unwrap()
    };
    let (code_a, err_a) = a.stop();
    let (code_b, err_b) = b.stop();
    assert_eq!((code_a, code_b), (0, 0));
    let (na, nb) = (admitted(&err_a), admitted(&err_b));
    assert_eq!(na + nb, 40, "{err_a}\n{err_b}");
    assert!(
        na > 0 && nb > 0,
        "the kernel gave one process all 40: {na} + {nb}"
    );
}

/// Bob's rule takes streamed messages this big (issue 29: without one, a relay over
/// `--max-held` to him would be refused). With the default `-A` (a thread per core), bob and
/// alice may or may not share a thread; the case below places them on different ones.
#[test]
fn a_1_gib_message_is_relayed_in_bounded_server_memory() {
    let server = Server::start(&["--listen", "tcp://127.0.0.1:0", "--rule", "bob:streams=2g"]);
    let addr = server.addr();
    let bob = client(addr, "bob");
    let alice = client(addr, "alice");
    relay_1_gib(&server, bob, alice, b"@alice ");
}

/// The same between two engine threads (with two, `berth msg serve -A 2`'s 1 GiB relay never
/// finished: a stream did not cross threads, and its sender was told the target was busy).
/// Bob comes over a UNIX socket, which the first thread serves; the sender is an anonymous
/// client found on the second (see [`anonymous_on_thread_1`]).
#[test]
fn a_1_gib_message_is_relayed_across_engine_threads_in_bounded_server_memory() {
    let dir = std::env::temp_dir().join(format!("berth-cli-msg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("threads.sock");
    let unix = format!("unix://{}", path.display());
    let server = Server::start(&[
        "--listen",
        "tcp://127.0.0.1:0",
        "--listen",
        &unix,
        "--rule",
        "bob:streams=2g",
        "-A",
        "2",
    ]);
    let mut bob = std::os::unix::net::UnixStream::connect(&path).unwrap();
    bob.set_read_timeout(Some(LIMIT)).unwrap();
    bob.write_all(&frame(b"bob")).unwrap();
    assert_eq!(read_frame_raw(&mut bob), (2, b"OK".to_vec()));
    let mut others = Vec::new();
    let (alice, shown) = anonymous_on_thread_1(server.addr(), &mut bob, &mut others);
    relay_1_gib(&server, bob, alice, &shown);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An anonymous client on the second engine thread of a server of two whose first thread has
/// one client, `bob`, and how `bob` is shown its relays (`@#0.N `). The relay shows an
/// anonymous sender as `@#SLOT.SERIAL`, SLOT its place in its thread's table: bob holds slot
/// 0 of the first thread, so a sender shown with slot 0 is on the second. Clients found on
/// the first are kept in `others` (their slots stay taken).
fn anonymous_on_thread_1(
    addr: SocketAddr,
    bob: &mut impl Read,
    others: &mut Vec<TcpStream>,
) -> (TcpStream, Vec<u8>) {
    loop {
        let mut s = client(addr, "");
        s.write_all(&frame(b"@bob ?")).unwrap();
        let (_, shown) = read_frame_raw(bob);
        let shown = shown[..shown.len() - 1].to_vec();
        if shown.starts_with(b"@#0.") {
            return (s, shown);
        }
        others.push(s);
    }
}

/// `alice` relays 1 GiB to `bob`, who is shown her as `shown` (the prefix, its space
/// included); the server's peak memory grows by less than 64 MiB.
fn relay_1_gib(server: &Server, mut bob: impl Read, mut alice: TcpStream, shown: &[u8]) {
    const SIZE: u64 = 1 << 30;
    // Wait until the server is past start-up, then take its peak as the baseline.
    alice.write_all(&frame(b"warm")).unwrap();
    assert_eq!(read_frame_raw(&mut alice), (4, b"warm".to_vec()));
    let before = server.peak_rss_kib();

    let prefix = b"@bob ";
    let writer = thread::spawn(move || {
        alice
            .write_all(&(prefix.len() as u64 + SIZE).to_le_bytes())
            .unwrap();
        alice.write_all(prefix).unwrap();
        let chunk: Vec<u8> = (0..1u32 << 16).map(|i| (i % 251) as u8).collect();
        for _ in 0..SIZE / chunk.len() as u64 {
            alice.write_all(&chunk).unwrap();
        }
        alice
    });
    let mut head = [0u8; 8];
    bob.read_exact(&mut head).unwrap();
    assert_eq!(u64::from_le_bytes(head), shown.len() as u64 + SIZE);
    let mut got_prefix = vec![0u8; shown.len()];
    bob.read_exact(&mut got_prefix).unwrap();
    assert_eq!(got_prefix, shown);
    let mut buf = vec![0u8; 1 << 16];
    let mut seen: u64 = 0;
    while seen < SIZE {
        let want = buf.len().min((SIZE - seen) as usize);
        let n = bob.read(&mut buf[..want]).unwrap();
        assert!(n > 0, "connection ended after {seen} bytes");
        for (i, b) in buf[..n].iter().enumerate() {
            let at = seen + i as u64;
            assert_eq!(*b, ((at % 65536) % 251) as u8, "byte {at}");
        }
        seen += n as u64;
    }
    let mut alice = writer.join().unwrap();
    // Nothing was lost around it: the connection still echoes.
    alice.write_all(&frame(b"after")).unwrap();
    assert_eq!(read_frame_raw(&mut alice), (5, b"after".to_vec()));
    let grew = server.peak_rss_kib().saturating_sub(before);
    assert!(grew < 64 * 1024, "server peak RSS grew by {grew} KiB");
    eprintln!("1 GiB relayed; server peak RSS grew by {grew} KiB");
}

#[test]
fn max_message_ends_a_client_with_the_error_frame() {
    let server = Server::start(&["--listen", "tcp://127.0.0.1:0", "--max-message", "1k"]);
    let mut c = client(server.addr(), "big");
    c.write_all(&frame(&[1u8; 1024])).unwrap();
    assert_eq!(read_frame_raw(&mut c), (1024, vec![1u8; 1024]));
    c.write_all(&frame(&[1u8; 1025])).unwrap();
    let (len, text) = read_frame_raw(&mut c);
    assert!(len & (1 << 63) != 0);
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "error too-large frame of 1025 bytes over the limit of 1024"
    );
}

#[test]
fn bad_endpoints_rules_and_sizes_are_usage_errors() {
    for args in [
        &["msg", "serve", "--listen", "http://127.0.0.1:1"][..],
        &[
            "msg",
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--rule",
            "x:speed=1",
        ],
        &[
            "msg",
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--max-message",
            "lots",
        ],
        &["msg", "serve"],
        &[
            "msg",
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--name-taken",
            "maybe",
        ],
        &[
            "msg",
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--rule",
            "svc:name-taken=sometimes",
        ],
        // Issue 29's settings: a size above zero, a time above zero.
        &[
            "msg",
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--rule",
            "bulk:streams=0",
        ],
        &[
            "msg",
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--stall-timeout",
            "0",
        ],
        &["msg", "send", "tcp://127.0.0.1:1"],
        &["msg", "send", "carrier-pigeon://x", "m"],
    ] {
        let (status, _, err) = berth(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("Usage:"), "{args:?}: {err}");
    }
    // A port held by a program that does not share it (no SO_REUSEPORT) is a runtime failure,
    // with the cause, even with --reuse-port.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("tcp://{}", taken.local_addr().unwrap());
    let (status, _, err) = berth(&["msg", "serve", "--listen", &endpoint, "--reuse-port"]);
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("already in use"), "{err}");
}

/// Issue 12: `--listen unix:///path/of/a/file` replaced the file with its socket. It is a
/// runtime failure now (exit 1, the cause named), and the file is untouched.
#[test]
fn a_unix_listener_never_replaces_a_regular_file() {
    let dir = std::env::temp_dir().join(format!("berth-cli-unix-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("notes.txt");
    std::fs::write(&file, b"keep me").unwrap();
    let endpoint = format!("unix://{}", file.display());
    let (status, _, err) = berth(&["msg", "serve", "--listen", &endpoint]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 15: 32 blocking clients, each sending a 64 MiB message whole before it reads the
/// echo, against a held budget of 128 MiB. Every one gets its echo (those over the budget wait
/// their turn, unread), and the server's peak memory stays within the budget plus a slack of
/// 64 MiB for everything else (read buffers, a read in flight per waiting client, stacks; the
/// echo is the held buffer itself, queued, not a copy). Measured: 137-138 MiB.
#[test]
fn blocking_clients_sending_64_mib_each_stay_within_the_held_budget() {
    const CLIENTS: usize = 32;
    const SIZE: usize = 64 << 20;
    let server = Server::start(&["--listen", "tcp://127.0.0.1:0", "--max-held-total", "128m"]);
    let addr = server.addr();
    let msg: std::sync::Arc<Vec<u8>> =
        std::sync::Arc::new((0..SIZE as u32).map(|i| (i % 253) as u8).collect());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let msg = msg.clone();
            thread::spawn(move || {
                let mut s = client(addr, &format!("c{i}"));
                s.set_write_timeout(Some(LIMIT)).unwrap();
                s.write_all(&(SIZE as u64).to_le_bytes()).unwrap();
                s.write_all(&msg)
                    .expect("the server stopped reading a sending client");
                let mut head = [0u8; 8];
                s.read_exact(&mut head).unwrap();
                assert_eq!(u64::from_le_bytes(head), SIZE as u64);
                let mut buf = vec![0u8; 1 << 20];
                let mut at = 0;
                while at < SIZE {
                    let n = s.read(&mut buf[..(SIZE - at).min(1 << 20)]).unwrap();
                    assert!(n > 0, "client {i}: closed after {at} bytes");
                    assert!(buf[..n] == msg[at..at + n], "client {i}: differs at {at}");
                    at += n;
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let peak_mib = server.peak_rss_kib() / 1024;
    let (code, err) = server.stop();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(" messages 32 "), "{err}");
    eprintln!(
        "peak RSS {peak_mib} MiB; {}",
        err.lines().last().unwrap_or("")
    );
    assert!(
        peak_mib <= 128 + 64,
        "peak RSS {peak_mib} MiB over 128 MiB + slack"
    );
}

/// Issue 15: each timeout names its real cause in the log and the exit counts: a client that
/// takes none of its echo for `--write-timeout` is dropped (its socket takes nothing, so no
/// frame can reach it); one that stops halfway through a message for `--read-timeout` is
/// told `error read-timeout` first.
#[test]
fn timeouts_say_their_real_cause() {
    let server = Server::start(&[
        "--listen",
        "tcp://127.0.0.1:0",
        "--write-timeout",
        "1",
        "--read-timeout",
        "1",
    ]);
    let addr = server.addr();
    let mut deaf = client(addr, "deaf");
    deaf.write_all(&frame(&vec![b'd'; 32 << 20])).unwrap();
    let mut stalled = client(addr, "stalled");
    stalled.write_all(&frame(&[b's'; 1000])[..500]).unwrap();
    let (len, text) = read_frame_raw(&mut stalled);
    assert_eq!(len & (1 << 63), 1 << 63, "a control frame");
    assert_eq!(
        String::from_utf8_lossy(&text),
        "error read-timeout sent nothing for 1s in the middle of a message"
    );
    // The deaf client is dropped about a second after its echo stopped moving.
    thread::sleep(Duration::from_millis(2500));
    let (code, err) = server.stop();
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("client") && err.contains("(deaf) took none of its output for 1s"),
        "{err}"
    );
    assert!(err.contains("dropped (--write-timeout)"), "{err}");
    assert!(
        err.contains(
            "(stalled) sent nothing for 1s in the middle of a message: ended (--read-timeout)"
        ),
        "{err}"
    );
    assert!(err.contains("write-timeout 1 read-timeout 1"), "{err}");
    drop(deaf);
}

/// Connects with a keyword of any bytes; returns the stream and the answer's payload (a
/// refusal's control payload, or `OK`).
fn hello_bytes(addr: SocketAddr, name: &[u8]) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(&frame(name)).unwrap();
    let (_, answer) = read_frame_raw(&mut s);
    (s, answer)
}

/// Issue 15: names are bytes, given on the command line in the escaped form the logs show
/// (`\xNN`), and `--strict-names` / `--max-name` bring back the rule of old or a tighter limit.
#[test]
fn names_are_bytes_on_the_command_line_too() {
    let server = Server::start(&[
        "--listen",
        "tcp://127.0.0.1:0",
        "-v",
        "--expect",
        "\\xff\\xfe",
    ]);
    let tcp = server.endpoints[0].clone();
    let (mut bin, answer) = hello_bytes(server.addr(), b"\xff\xfe");
    assert_eq!(answer, b"OK");
    // `msg send --name` takes the escaped form, and so does the relay's target.
    let (status, out, err) = berth(&["msg", "send", &tcp, "--name", "a\\x20b", "@\\xff\\xfe hi"]);
    assert_eq!(status.code(), Some(0), "{out}{err}");
    assert_eq!(read_frame_raw(&mut bin).1, b"@a\\x20b hi");
    let (code, err) = server.stop();
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("admitted: \\xff\\xfe (Expected, Tcp)"),
        "{err}"
    );
    assert!(err.contains("admitted: a\\x20b (Unknown, Tcp)"), "{err}");

    let server = Server::start(&[
        "--listen",
        "tcp://127.0.0.1:0",
        "--strict-names",
        "--max-name",
        "8",
    ]);
    let (_, answer) = hello_bytes(server.addr(), b"a\nb");
    assert!(answer.starts_with(b"refused name-invalid"), "{answer:?}");
    let (_, answer) = hello_bytes(server.addr(), b"123456789");
    assert_eq!(
        String::from_utf8(answer).unwrap(),
        "refused name-invalid a name is at most 8 bytes; this one has 9"
    );
    assert_eq!(hello_bytes(server.addr(), b"svc").1, b"OK");
    let (code, err) = server.stop();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("refused:name-invalid 2"), "{err}");
}

#[test]
fn bad_name_options_are_usage_errors() {
    let listen = ["msg", "serve", "--listen", "tcp://127.0.0.1:0"];
    for extra in [
        &["--max-name", "0"][..],
        &["--max-name", "lots"],
        &["--max-name", "1m"],
        &["--max-name", "-1"],
        // Names no client could register under the rule in force.
        &["--strict-names", "--expect", "a\\x20b"],
        &["--strict-names", "--rule", "\\xff:transport=tcp"],
        &["--max-name", "4", "--expect", "12345"],
        &["--expect", "#1.2"],
        &["--expect", ""],
        &["--rule", "#x:transport=unix"],
    ] {
        let args = [&listen[..], extra].concat();
        let (status, _, err) = berth(&args);
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("Usage:"), "{args:?}: {err}");
    }
}

/// A masked client frame (a browser's), FIN set.
fn ws_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let key = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}

#[test]
fn a_browser_on_a_ws_listener_relays_with_a_tcp_client() {
    let server = Server::start(&[
        "--listen",
        "tcp://127.0.0.1:0",
        "--listen",
        "ws://127.0.0.1:0",
        "--ws-max-head",
        "2k",
    ]);
    let ws_url = server.endpoints[1].clone();
    let ws_addr: SocketAddr = ws_url
        .strip_prefix("ws://")
        .and_then(|u| u.strip_suffix("/ws/relay"))
        .unwrap_or_else(|| panic!("{ws_url}"))
        .parse()
        .unwrap();
    let mut alice = TcpStream::connect(ws_addr).unwrap();
    alice.set_read_timeout(Some(LIMIT)).unwrap();
    alice
        .write_all(
            b"GET /ws/relay HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
              Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .unwrap();
    alice.write_all(&ws_frame(1, b"alice")).unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0];
        alice.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(
        head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "{head}"
    );
    // Alice's name is in once her own echo comes back.
    alice.write_all(&ws_frame(1, b"in?")).unwrap();
    let mut echo = [0; 5];
    alice.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"\x81\x03in?");

    let mut bob = client(server.addr(), "bob");
    bob.write_all(&frame(b"@alice hello browser")).unwrap();
    let mut got = [0; 2 + 18];
    alice.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"\x81\x12@bob hello browser");
    alice.write_all(&ws_frame(1, b"@bob hello tcp")).unwrap();
    assert_eq!(read_frame_raw(&mut bob).1, b"@alice hello tcp");

    // A head over --ws-max-head is answered 431.
    let mut big = TcpStream::connect(ws_addr).unwrap();
    big.set_read_timeout(Some(LIMIT)).unwrap();
    let request = format!("GET /ws/relay HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(2100));
    big.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = big.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");

    // SIGTERM: the browser is told with a close 1001.
    let (code, err) = server.stop();
    assert_eq!(code, 0, "{err}");
    let mut close = Vec::new();
    let _ = alice.read_to_end(&mut close);
    assert_eq!(&close[..4], b"\x88\x21\x03\xe9", "{close:?}");
}

/// Issue 29, the attack byte for byte, against `berth msg serve` with its defaults: an
/// anonymous client sends a length field of 2^63 - 1, then `@victim x`, then nothing. The
/// victim got the header and 15 bytes, and every later message to it waited behind that frame
/// for ever. Now a relay over `--max-held` reaches only a receiver whose rule takes streamed
/// messages (`streams=SIZE`): the attacker is told no, and the victim never sees the frame.
#[test]
fn a_stranger_cannot_block_a_named_clients_messages() {
    let server = Server::start(&["--listen", "tcp://127.0.0.1:0"]);
    let addr = server.addr();
    let mut victim = client(addr, "victim");
    let mut attacker = client(addr, "");
    attacker.write_all(&(u64::MAX >> 1).to_le_bytes()).unwrap();
    attacker.write_all(b"@victim x").unwrap();
    // The attacker is told why, in a message, and may go on (its bytes are dropped).
    let (len, notice) = read_frame_raw(&mut attacker);
    assert_eq!(len & (1 << 63), 0, "a message, not the end");
    let notice = String::from_utf8_lossy(&notice).into_owned();
    assert!(
        notice.starts_with("@! a message of ") && notice.contains("victim takes no streamed"),
        "{notice}"
    );
    let mut friend = client(addr, "friend");
    friend.write_all(&frame(b"@victim hello")).unwrap();
    // The friend's message is the first thing the victim gets (read the length alone first:
    // the attack's would be 2^63 bytes).
    let mut head = [0u8; 8];
    victim.read_exact(&mut head).unwrap();
    assert_eq!(
        u64::from_le_bytes(head),
        13,
        "the victim got a frame of {head:?}"
    );
    let mut text = [0u8; 13];
    victim.read_exact(&mut text).unwrap();
    assert_eq!(&text, b"@friend hello");
    // And so it goes on: a second message to the victim arrives too.
    friend.write_all(&frame(b"@victim again")).unwrap();
    assert_eq!(read_frame_raw(&mut victim), (13, b"@friend again".to_vec()));
    drop(attacker);
    let (code, err) = server.stop();
    assert_eq!(code, 0, "{err}");
}

/// Issue 29 attacked again from outside, several at once, against `--stall-timeout` and a
/// receiver whose rule takes streams (`--rule victim:streams=1m`): one stalls mid-header, one
/// sends the 2^63 - 1 attack, two stall after part of a stream the victim takes (only one can
/// be open: the other waits behind it), and one after part of a held message. The victim gets
/// each cut stream completed, then a friend's message, and the server's descriptors come back
/// to where they were once the attackers are gone.
#[test]
fn several_attackers_at_once_cannot_stop_a_receiver() {
    let server = Server::start(&[
        "--listen",
        "tcp://127.0.0.1:0",
        "--max-held",
        "64k",
        "--stall-timeout",
        "0.3",
        "--rule",
        "victim:streams=1m",
    ]);
    let addr = server.addr();
    let pid = server.berth.pid();
    let mut victim = client(addr, "victim");
    let before = berth_testkit::procs::open_descriptors(pid);

    let mut attackers = Vec::new();
    let mut mid_header = client(addr, "");
    mid_header.write_all(&[1, 2, 3, 4]).unwrap();
    attackers.push(mid_header);
    let mut huge = client(addr, "");
    huge.write_all(&(u64::MAX >> 1).to_le_bytes()).unwrap();
    huge.write_all(b"@victim x").unwrap();
    attackers.push(huge);
    for i in 0..2 {
        let mut s = client(addr, &format!("s{i}"));
        s.write_all(&500_000u64.to_le_bytes()).unwrap();
        s.write_all(b"@victim partial").unwrap();
        attackers.push(s);
    }
    let mut holder = client(addr, "holder");
    holder.write_all(&60_000u64.to_le_bytes()).unwrap();
    holder.write_all(b"@victim held").unwrap();
    attackers.push(holder);

    // The first stream opened: its frame, completed with zeros when its sender stalled.
    let mut cut = 0;
    let mut got = Vec::new();
    while got.is_empty() {
        let (len, payload) = read_frame_raw(&mut victim);
        assert_eq!(len & (1 << 63), 0);
        let text = String::from_utf8_lossy(&payload[..payload.len().min(80)]).into_owned();
        if text.starts_with("@s") {
            assert_eq!(len, 500_000 - 8 + 4);
            assert!(payload[4..].starts_with(b"partial"));
            assert!(payload[11..].iter().all(|&b| b == 0));
            cut += 1;
        } else if text.starts_with("@! the message of 499996 bytes from @s") {
            got.push(text);
        } else {
            panic!("unexpected: {text}");
        }
    }
    assert_eq!(cut, 1);
    // Of the two streamers, one fed the stream and was ended; the other was refused (the
    // victim was busy, and its message over --max-held) rather than queued behind.
    let mut told: Vec<String> = attackers[2..4]
        .iter_mut()
        .map(|s| String::from_utf8_lossy(&read_frame_raw(s).1).into_owned())
        .collect();
    told.sort();
    assert!(
        told[0].starts_with("@! the target is receiving"),
        "{told:?}"
    );
    assert!(
        told[1].starts_with("error read-timeout sent nothing"),
        "{told:?}"
    );
    let mut friend = client(addr, "friend");
    friend.write_all(&frame(b"@victim hello")).unwrap();
    let (_, payload) = read_frame_raw(&mut victim);
    assert_eq!(payload, b"@friend hello");

    drop(attackers);
    drop(friend);
    // Every attacker's descriptor is closed (lingering ones within the 2 s linger).
    assert!(
        common::wait_for(LIMIT, || berth_testkit::procs::open_descriptors(pid)
            <= before),
        "{} descriptors, {before} before",
        berth_testkit::procs::open_descriptors(pid)
    );
    let (code, err) = server.stop();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stall-timeout 1 streams-cut 1"), "{err}");
}

/// Issue 29's settings are options of `msg serve`, with their defaults in the help.
#[test]
fn the_stall_timeout_and_streams_rule_are_documented_options() {
    let (status, out, err) = berth(&["msg", "serve", "--help"]);
    assert!(status.success(), "{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("--stall-timeout <DURATION>"), "{out}");
    assert!(flat.contains("[default: 30s]"), "{out}");
    assert!(flat.contains("bulk:streams=1g"), "{out}");
}
