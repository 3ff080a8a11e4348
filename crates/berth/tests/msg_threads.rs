//! Relays between clients of different engine threads (`berth msg serve -A N`), over real
//! sockets: each case runs with one thread, and with two threads and the sender and the
//! receiver placed on different ones. Across threads a message must behave as it does within
//! one: a stream over `max_held` relays in bounded memory, a receiver that reads nothing pauses
//! its sender (rather than the server keeping what it sends), and either end may leave
//! mid-message (a sender's stream is completed with zeros and its receiver told, a receiver's
//! rest is dropped and its sender goes on).
//!
//! Before the fix, a stream never crossed threads (its sender was told `@! the target is
//! receiving another large message` and the receiver got nothing: `berth msg serve -A 2`'s
//! 1 GiB relay timed out), and whole messages crossed a mailbox bounded in posts, not bytes (a
//! receiver that read nothing left the server holding everything its sender sent).
//!
//! No case bounds how long anything takes: each waits for what it expects, with the support's
//! generous read timeout only so that a failure fails rather than hangs. A sender counts as
//! paused when a write of it has taken nothing for [`PAUSED`].

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use berth::app::relay::EchoRelay;
use berth::msg::{Arrival, ClientId, EngineConfig, MsgHandler, MsgServer, Name, Out, Piece};
use berth_proto::msg::policy::parse_rule;
use berth_testkit::msg::*;

/// A write that takes nothing for this long means the server stopped reading its client.
const PAUSED: Duration = Duration::from_secs(3);
/// Most bytes a paused sender may have got into the server and the kernel's buffers: the
/// kernel's share (autotuned socket buffers) is most of it; the server's is `out_high` (1 MiB)
/// on each side of the mailbox, plus a read.
const PAUSED_WITHIN: u64 = 64 << 20;

/// The demo relay, telling each client which engine thread it is on (`thread N`) right after
/// its `OK`, so that a test can place its clients.
struct Placed {
    thread: usize,
    relay: EchoRelay,
}

impl MsgHandler for Placed {
    fn on_connect(&mut self, client: ClientId, _: Arrival, out: &mut Out<'_>) {
        out.send(client, format!("thread {}", self.thread).as_bytes());
    }
    fn on_data(&mut self, client: ClientId, msg: &[u8], out: &mut Out<'_>) {
        self.relay.on_data(client, msg, out);
    }
    fn streams(&self) -> bool {
        self.relay.streams()
    }
    fn on_piece(&mut self, client: ClientId, piece: Piece<'_>, out: &mut Out<'_>) {
        self.relay.on_piece(client, piece, out);
    }
    fn on_whole(&mut self, client: ClientId, msg: Vec<u8>, out: &mut Out<'_>) {
        self.relay.on_whole(client, msg, out);
    }
    fn on_connection_lost(&mut self, client: ClientId, name: Option<&Name>, out: &mut Out<'_>) {
        self.relay.on_connection_lost(client, name, out);
    }
}

/// A server of `threads` engine threads, with `rules` (`NAME:streams=SIZE`).
fn spawn(threads: usize, config: EngineConfig, rules: &[&str]) -> MsgServer {
    let mut config = config;
    for rule in rules {
        let (name, rule) = parse_rule(rule).unwrap();
        config.policy.rules.insert(name, rule);
    }
    let hold = config.max_held;
    MsgServer::spawn(&[tcp_endpoint()], config, threads, WAIT, move |thread| {
        Placed {
            thread,
            relay: EchoRelay::new(hold),
        }
    })
    .unwrap()
}

/// Streams over 1 KiB from others reach only names given `streams=` rules.
fn streaming() -> EngineConfig {
    EngineConfig {
        max_held: 1024,
        stall_timeout: Duration::from_millis(300),
        ..EngineConfig::default()
    }
}

/// The two threads a case's sender and receiver are on: different ones when there are two.
fn places(threads: usize) -> (usize, usize) {
    (threads - 1, 0)
}

/// A client named `name` on engine thread `thread`: connects until the kernel puts one there
/// (the threads' listeners share the port; connections are spread by their addresses).
fn client_on(addr: SocketAddr, name: &str, thread: usize) -> TcpStream {
    client_on_with(name, thread, || tcp(addr))
}

fn client_on_with(name: &str, thread: usize, connect: impl Fn() -> TcpStream) -> TcpStream {
    let want = Frame::Data(format!("thread {thread}").into_bytes());
    loop {
        let (mut s, answer) = hello(connect(), name);
        if answer != ok() {
            // The name is still held by an attempt let go just before: it is being freed.
            assert_eq!(code(&answer), "name-taken", "{name}");
            thread::sleep(Duration::from_millis(10));
            continue;
        }
        if read_frame(&mut s).unwrap() == want {
            return s;
        }
    }
}

fn text(f: Frame) -> String {
    match f {
        Frame::Data(d) => String::from_utf8_lossy(&d).into_owned(),
        Frame::Control(c) => panic!("a control frame: {c}"),
    }
}

fn read_head(s: &mut impl Read) -> u64 {
    let mut head = [0u8; 8];
    s.read_exact(&mut head).unwrap();
    u64::from_le_bytes(head)
}

fn read_n(s: &mut impl Read, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf).unwrap();
    buf
}

/// The payload byte at `at` of the test messages.
fn pattern(at: u64) -> u8 {
    ((at % 65_536) % 251) as u8
}

/// Writes `bytes` from `at` of the pattern, as the socket takes them. The first time a write
/// takes nothing for [`PAUSED`], says how many bytes of the pattern had been written (the
/// caller's `paused`). Returns the socket once everything is written.
fn write_pattern(
    s: TcpStream,
    from: u64,
    bytes: u64,
    paused: Option<mpsc::Sender<u64>>,
) -> TcpStream {
    let mut paused = paused;
    write_pattern_telling(s, from, bytes, 0, &mut paused)
}

/// [`write_pattern`], telling `paused` (once) the bytes written plus `before`.
fn write_pattern_telling(
    mut s: TcpStream,
    from: u64,
    bytes: u64,
    before: u64,
    paused: &mut Option<mpsc::Sender<u64>>,
) -> TcpStream {
    s.set_write_timeout(Some(PAUSED)).unwrap();
    let chunk: Vec<u8> = (0..1u64 << 16).map(pattern).collect();
    let (mut at, end) = (from, from + bytes);
    while at < end {
        let off = (at % chunk.len() as u64) as usize;
        let n = (chunk.len() - off).min((end - at) as usize);
        match s.write(&chunk[off..off + n]) {
            Ok(n) => at += n as u64,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if let Some(tx) = paused.take() {
                    tx.send(before + at - from).unwrap();
                }
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    s.set_write_timeout(None).unwrap();
    s
}

/// Reads `len` bytes of the pattern, from `from` on.
fn read_pattern(s: &mut impl Read, from: u64, len: u64) {
    let mut buf = vec![0u8; 1 << 16];
    let mut seen = 0;
    while seen < len {
        let want = buf.len().min((len - seen) as usize);
        let n = s.read(&mut buf[..want]).unwrap();
        assert!(n > 0, "the connection ended after {seen} of {len} bytes");
        for (i, b) in buf[..n].iter().enumerate() {
            let at = from + seen + i as u64;
            assert_eq!(*b, pattern(at), "byte {at}");
        }
        seen += n as u64;
    }
}

/// A relay over `max_held` streams across threads, whole and in order, and both ends go on.
#[test]
fn a_stream_over_max_held_relays_across_threads() {
    const SIZE: u64 = 32 << 20;
    for threads in [1, 2] {
        let server = spawn(threads, streaming(), &["bob:streams=1g"]);
        let addr = addr_of(&server.endpoints[0]);
        let (from, to) = places(threads);
        let mut bob = client_on(addr, "bob", to);
        let mut alice = client_on(addr, "alice", from);
        alice.write_all(&(5 + SIZE).to_le_bytes()).unwrap();
        alice.write_all(b"@bob ").unwrap();
        let writer = thread::spawn(move || write_pattern(alice, 0, SIZE, None));
        assert_eq!(read_head(&mut bob), 7 + SIZE, "{threads} threads");
        assert_eq!(read_n(&mut bob, 7), b"@alice ");
        read_pattern(&mut bob, 0, SIZE);
        let mut alice = writer.join().unwrap();
        // Both go on: what follows comes after it, and the sender is read again.
        alice.write_all(&frame(b"@bob after")).unwrap();
        assert_eq!(text(read_frame(&mut bob).unwrap()), "@alice after");
        alice.write_all(&frame(b"echo")).unwrap();
        assert_eq!(text(read_frame(&mut alice).unwrap()), "echo");
        server.stop();
        server.join().unwrap();
    }
}

/// A receiver that reads nothing pauses a sender streaming to it from another thread (the
/// server does not keep what the sender sends), and reading resumes it: every byte arrives.
#[test]
fn a_stream_to_a_receiver_that_reads_nothing_pauses_its_sender_across_threads() {
    const SIZE: u64 = 256 << 20;
    for threads in [1, 2] {
        let server = spawn(threads, streaming(), &["bob:streams=1g"]);
        let addr = addr_of(&server.endpoints[0]);
        let (from, to) = places(threads);
        let mut bob = client_on_with("bob", to, || tcp_small_window(addr, 64 << 10));
        let mut alice = client_on(addr, "alice", from);
        alice.write_all(&(5 + SIZE).to_le_bytes()).unwrap();
        alice.write_all(b"@bob ").unwrap();
        let (tx, paused) = mpsc::channel();
        let writer = thread::spawn(move || write_pattern(alice, 0, SIZE, Some(tx)));
        let sent = paused
            .recv()
            .unwrap_or_else(|_| panic!("{threads} threads: the sender was never paused"));
        assert!(
            sent < PAUSED_WITHIN,
            "{threads} threads: {sent} bytes taken from a sender whose receiver reads nothing"
        );
        eprintln!("{threads} thread(s): the sender was paused after {sent} bytes");
        assert_eq!(read_head(&mut bob), 7 + SIZE);
        assert_eq!(read_n(&mut bob, 7), b"@alice ");
        read_pattern(&mut bob, 0, SIZE);
        let mut alice = writer.join().unwrap();
        alice.write_all(&frame(b"echo")).unwrap();
        assert_eq!(text(read_frame(&mut alice).unwrap()), "echo");
        server.stop();
        server.join().unwrap();
    }
}

/// The same with whole messages (each within `max_held`, received whole before it is passed
/// on): a receiver that reads nothing pauses their sender, and reading resumes it.
#[test]
fn whole_messages_to_a_receiver_that_reads_nothing_pause_their_sender_across_threads() {
    const EACH: u64 = 4 << 20;
    const COUNT: u64 = 64;
    for threads in [1, 2] {
        let server = spawn(threads, EngineConfig::default(), &[]);
        let addr = addr_of(&server.endpoints[0]);
        let (from, to) = places(threads);
        let mut bob = client_on_with("bob", to, || tcp_small_window(addr, 64 << 10));
        let alice = client_on(addr, "alice", from);
        let (tx, paused) = mpsc::channel();
        let writer = thread::spawn(move || {
            let mut alice = alice;
            let mut paused = Some(tx);
            for i in 0..COUNT {
                alice.write_all(&(5 + EACH).to_le_bytes()).unwrap();
                alice.write_all(b"@bob ").unwrap();
                alice = write_pattern_telling(alice, 0, EACH, i * EACH, &mut paused);
            }
            alice
        });
        let sent = paused
            .recv()
            .unwrap_or_else(|_| panic!("{threads} threads: the sender was never paused"));
        assert!(
            sent < PAUSED_WITHIN,
            "{threads} threads: {sent} bytes taken from a sender whose receiver reads nothing"
        );
        eprintln!("{threads} thread(s): the sender was paused after {sent} bytes");
        for i in 0..COUNT {
            assert_eq!(read_head(&mut bob), 7 + EACH, "message {i}");
            assert_eq!(read_n(&mut bob, 7), b"@alice ");
            read_pattern(&mut bob, 0, EACH);
        }
        let mut alice = writer.join().unwrap();
        alice.write_all(&frame(b"echo")).unwrap();
        assert_eq!(text(read_frame(&mut alice).unwrap()), "echo");
        server.stop();
        server.join().unwrap();
    }
}

/// A sender that leaves, or stalls, mid-stream: its receiver on another thread gets the rest
/// as zeros, then the relay's `@!` saying so, and goes on; a stalled sender is ended.
#[test]
fn a_sender_that_leaves_or_stalls_mid_stream_across_threads_is_completed_with_zeros() {
    const SIZE: u64 = 4 << 20;
    const SENT: u64 = 1 << 20;
    for threads in [1, 2] {
        let server = spawn(threads, streaming(), &["bob:streams=1g"]);
        let addr = addr_of(&server.endpoints[0]);
        let (from, to) = places(threads);
        let mut bob = client_on(addr, "bob", to);
        for leaves in [true, false] {
            let mut alice = client_on(addr, "alice", from);
            alice.write_all(&(5 + SIZE).to_le_bytes()).unwrap();
            alice.write_all(b"@bob ").unwrap();
            let alice = write_pattern(alice, 0, SENT, None);
            assert_eq!(read_head(&mut bob), 7 + SIZE);
            assert_eq!(read_n(&mut bob, 7), b"@alice ");
            read_pattern(&mut bob, 0, SENT);
            let mut alice = Some(alice);
            if leaves {
                drop(alice.take());
            }
            let rest = read_n(&mut bob, (SIZE - SENT) as usize);
            assert!(
                rest.iter().all(|&b| b == 0),
                "{threads} threads, leaves {leaves}"
            );
            assert_eq!(
                text(read_frame(&mut bob).unwrap()),
                format!(
                    "@! the message of {} bytes from @alice was cut short: its sender stopped \
                     before the end, and the bytes it did not send came as zeros",
                    7 + SIZE
                )
            );
            if let Some(mut alice) = alice {
                match read_frame(&mut alice).unwrap() {
                    Frame::Control(t) => assert!(t.starts_with("error read-timeout"), "{t}"),
                    other => panic!("{other:?}"),
                }
                assert!(closes(&mut alice));
            }
            bob.write_all(&frame(b"still here")).unwrap();
            assert_eq!(text(read_frame(&mut bob).unwrap()), "still here");
        }
        server.stop();
        server.join().unwrap();
    }
}

/// A receiver that leaves mid-stream: the rest of the message is dropped, and its sender on
/// another thread goes on (it is read to the end of its message, then as before).
#[test]
fn a_receiver_that_leaves_mid_stream_across_threads_costs_its_sender_nothing() {
    const SIZE: u64 = 64 << 20;
    for threads in [1, 2] {
        let server = spawn(threads, streaming(), &["bob:streams=1g"]);
        let addr = addr_of(&server.endpoints[0]);
        let (from, to) = places(threads);
        let mut bob = client_on(addr, "bob", to);
        let mut alice = client_on(addr, "alice", from);
        alice.write_all(&(5 + SIZE).to_le_bytes()).unwrap();
        alice.write_all(b"@bob ").unwrap();
        let writer = thread::spawn(move || write_pattern(alice, 0, SIZE, None));
        assert_eq!(read_head(&mut bob), 7 + SIZE);
        assert_eq!(read_n(&mut bob, 7), b"@alice ");
        read_pattern(&mut bob, 0, 1 << 20);
        drop(bob);
        let mut alice = writer.join().unwrap();
        alice.write_all(&frame(b"after")).unwrap();
        assert_eq!(text(read_frame(&mut alice).unwrap()), "after");
        // The name is free again, and a new bob gets what is sent to it.
        let mut bob = client_on(addr, "bob", to);
        alice.write_all(&frame(b"@bob again")).unwrap();
        assert_eq!(text(read_frame(&mut bob).unwrap()), "@alice again");
        server.stop();
        server.join().unwrap();
    }
}

/// A receiver takes one stream at a time, whatever thread the second sender is on: the second
/// is told at once, as within a thread, and the first stream arrives whole.
#[test]
fn a_second_stream_to_a_busy_receiver_is_refused_across_threads() {
    const SIZE: u64 = 1 << 20;
    for threads in [1, 2] {
        let server = spawn(threads, streaming(), &["bob:streams=1g"]);
        let addr = addr_of(&server.endpoints[0]);
        let (from, to) = places(threads);
        let mut bob = client_on(addr, "bob", to);
        let mut first = client_on(addr, "first", to);
        first.write_all(&(5 + SIZE).to_le_bytes()).unwrap();
        first.write_all(b"@bob ").unwrap();
        let first = write_pattern(first, 0, 4096, None);
        assert_eq!(read_head(&mut bob), 7 + SIZE);
        let mut second = client_on(addr, "second", from);
        second.write_all(&(5 + SIZE).to_le_bytes()).unwrap();
        second.write_all(b"@bob ").unwrap();
        assert_eq!(
            text(read_frame(&mut second).unwrap()),
            "@! the target is receiving another large message; try again"
        );
        let second = write_pattern(second, 0, SIZE, None);
        let first = write_pattern(first, 4096, SIZE - 4096, None);
        assert_eq!(read_n(&mut bob, 7), b"@first ");
        read_pattern(&mut bob, 0, SIZE);
        drop((first, second));
        server.stop();
        server.join().unwrap();
    }
}
