//! Issue 15 over real sockets: messages received whole before they are answered (so a client
//! that sends a whole message before it reads is answered), the budget of held bytes, the
//! read timeout, and the `error` frame a dropped client gets.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use berth::app::relay::EchoRelay;
use berth::msg::{EngineConfig, MsgServer};
use berth_testkit::msg::*;

/// A payload whose bytes depend on their position, so that a byte out of place is seen.
fn payload(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) % 251) as u8)
        .collect()
}

/// A blocking client as FI-ASockIOCore's users write one: the whole frame out, then the answer
/// in. Fails (rather than hanging) if the server stops reading it for 60 s.
fn send_all_then_read(s: &mut TcpStream, msg: &[u8]) {
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(&(msg.len() as u64).to_le_bytes()).unwrap();
    s.write_all(msg)
        .expect("the server stopped reading a client that sends before it reads");
    let mut head = [0u8; 8];
    s.read_exact(&mut head).unwrap();
    assert_eq!(u64::from_le_bytes(head), msg.len() as u64);
    // Compared as it arrives: no second copy of a large echo in the test.
    let mut buf = vec![0u8; 1 << 16];
    let mut at = 0;
    while at < msg.len() {
        let n = s.read(&mut buf[..(msg.len() - at).min(1 << 16)]).unwrap();
        assert!(n > 0, "closed after {at} of {} bytes", msg.len());
        assert!(buf[..n] == msg[at..at + n], "echo differs at byte {at}");
        at += n;
    }
}

/// The case of the issue: 64 MiB in one `sendall`, then the read. berth used to stream the
/// echo while the message arrived; the client, still sending, did not read it; its queue
/// passed `out_high`, berth stopped reading it, and both waited for good (from about 12 MiB).
#[test]
fn a_client_that_sends_64_mib_before_reading_gets_its_echo() {
    let server = echo(EngineConfig::default(), &[tcp_endpoint()]);
    let (mut c, answer) = hello(tcp(addr_of(&server.endpoints[0])), "fi-user");
    assert_eq!(answer, ok());
    let msg = payload(64 << 20, 7);
    send_all_then_read(&mut c, &msg);
    // And the connection goes on.
    send_all_then_read(&mut c, b"after");
}

/// A held message is not answered before its last byte; one over `max_held` streams, its echo
/// starting while it still arrives.
#[test]
fn held_messages_are_answered_whole_and_bigger_ones_stream() {
    let config = EngineConfig {
        max_held: 256 << 10,
        ..EngineConfig::default()
    };
    let server = echo(config, &[tcp_endpoint()]);
    let addr = addr_of(&server.endpoints[0]);

    let held = payload(200_000, 1);
    let (mut c, _) = hello(tcp(addr), "held");
    c.write_all(&frame(&held)[..100_000]).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut byte = [0u8; 1];
    let early = c.read(&mut byte);
    assert!(
        matches!(&early, Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)),
        "a held message was answered before it was whole: {early:?}"
    );
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(&frame(&held)[100_000..]).unwrap();
    assert_eq!(read_frame(&mut c).unwrap(), Frame::Data(held));

    let big = payload(1 << 20, 2);
    let (mut s, _) = hello(tcp(addr), "streamed");
    s.write_all(&frame(&big)[..300_000]).unwrap();
    let mut head = [0u8; 8];
    s.read_exact(&mut head)
        .expect("the echo of a big message starts early");
    assert_eq!(u64::from_le_bytes(head), big.len() as u64);
    s.write_all(&frame(&big)[300_000..]).unwrap();
    let mut rest = vec![0u8; big.len()];
    s.read_exact(&mut rest).unwrap();
    assert!(rest == big);
}

/// Sixteen clients with 2 MiB messages at once against a budget of 5 MiB: every one is
/// answered (the others wait their turn, unread), and the engine never holds more than the
/// budget.
#[test]
fn the_held_budget_makes_messages_wait_their_turn_and_is_never_exceeded() {
    let config = EngineConfig {
        max_held_total: 5 << 20,
        ..EngineConfig::default()
    };
    let server = MsgServer::spawn(&[tcp_endpoint()], config, 1, WAIT, |_| {
        EchoRelay::new(64 << 20)
    })
    .unwrap();
    let addr = addr_of(&server.endpoints[0]);
    let msg = Arc::new(payload(2 << 20, 3));
    // All connected before any sends, so that their messages arrive together.
    let start = Arc::new(std::sync::Barrier::new(16));
    let clients: Vec<_> = (0..16)
        .map(|i| {
            let (msg, start) = (msg.clone(), start.clone());
            thread::spawn(move || {
                let (mut c, answer) = hello(tcp(addr), &format!("c{i}"));
                assert_eq!(answer, ok());
                // Half of the first message from everyone before the rest from anyone: sixteen
                // messages under way at once, eight times the budget.
                let wire = frame(&msg);
                c.write_all(&wire[..1 << 20]).unwrap();
                start.wait();
                c.write_all(&wire[1 << 20..]).unwrap();
                assert_eq!(read_frame(&mut c).unwrap(), Frame::Data(msg.to_vec()));
                for _ in 0..2 {
                    send_all_then_read(&mut c, &msg);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let stats = server.stats().snapshot();
    assert_eq!(stats.messages_in, 16 * 3);
    assert!(stats.held_peak > 0, "nothing was held: {stats}");
    assert!(
        stats.held_peak <= 5 << 20,
        "held {} bytes, over the budget: {stats}",
        stats.held_peak
    );
}

/// One message bigger than the whole budget still gets through, alone.
#[test]
fn a_message_over_the_whole_budget_is_held_alone() {
    let config = EngineConfig {
        max_held_total: 1 << 20,
        ..EngineConfig::default()
    };
    let server = echo(config, &[tcp_endpoint()]);
    let (mut c, _) = hello(tcp(addr_of(&server.endpoints[0])), "big");
    send_all_then_read(&mut c, &payload(8 << 20, 4));
}

/// `read_timeout`: a client that stops halfway through a message is ended with the
/// `read-timeout` frame, then closed.
#[test]
fn a_client_stalled_in_a_message_is_told_read_timeout() {
    let config = EngineConfig {
        read_timeout: Some(Duration::from_millis(300)),
        ..EngineConfig::default()
    };
    let server = echo(config, &[tcp_endpoint()]);
    let (mut c, _) = hello(tcp(addr_of(&server.endpoints[0])), "stalls");
    // The engine reads its clock after the poll that sees these bytes, so no earlier than
    // `started`.
    let started = Instant::now();
    c.write_all(&frame(&payload(100_000, 5))[..40_000]).unwrap();
    assert_eq!(
        read_frame(&mut c).unwrap(),
        Frame::Control(
            "error read-timeout sent nothing for 300ms in the middle of a message".into()
        )
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(closes(&mut c));
}

/// The read timeout counts silence inside a message only: a client idle between messages, or
/// sending a message slowly with gaps shorter than the timeout, stays.
#[test]
fn the_read_timeout_spares_idle_clients_and_slow_steady_senders() {
    // Margins wide enough for a loaded machine: gaps of a quarter of the timeout.
    let config = EngineConfig {
        read_timeout: Some(Duration::from_millis(1000)),
        ..EngineConfig::default()
    };
    let server = echo(config, &[tcp_endpoint()]);
    let (mut c, _) = hello(tcp(addr_of(&server.endpoints[0])), "steady");
    thread::sleep(Duration::from_millis(1500));
    let msg = payload(100_000, 6);
    let wire = frame(&msg);
    for part in wire.chunks(25_002) {
        c.write_all(part).unwrap();
        thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(read_frame(&mut c).unwrap(), Frame::Data(msg));
}

/// A client the engine does not read (waiting its turn for the held budget) is not timed out
/// for the silence that causes: only its own stalls count.
#[test]
fn a_client_waiting_for_the_budget_is_not_read_timed_out() {
    // `first`'s gaps are under a third of the timeout (a loaded machine stretches them: with
    // 400 ms gaps to a 600 ms timeout a CI run under load failed), and `second` waits through
    // six of them, well past the timeout.
    let config = EngineConfig {
        read_timeout: Some(Duration::from_millis(1000)),
        max_held_total: 1 << 20,
        ..EngineConfig::default()
    };
    let server = echo(config, &[tcp_endpoint()]);
    let addr = addr_of(&server.endpoints[0]);
    // `first` takes the whole budget and sends its message slowly, with gaps under the
    // timeout; `second` sends all of its message at once and waits, unread, longer than that.
    let (mut first, _) = hello(tcp(addr), "first");
    let (mut second, _) = hello(tcp(addr), "second");
    let a = payload(1 << 20, 8);
    let wire = frame(&a);
    first.write_all(&wire[..300_000]).unwrap();
    thread::sleep(Duration::from_millis(100));
    let b = payload(600_000, 9);
    let waiting = thread::spawn(move || {
        send_all_then_read(&mut second, &b);
    });
    for part in wire[300_000..].chunks(150_000) {
        thread::sleep(Duration::from_millis(300));
        first.write_all(part).unwrap();
    }
    assert_eq!(read_frame(&mut first).unwrap(), Frame::Data(a));
    waiting.join().unwrap();
}

/// A client that closes its sending side in the middle of a message is told so before the
/// close: it may still be reading.
#[test]
fn a_client_that_half_closes_in_a_message_is_told_incomplete() {
    let server = echo(EngineConfig::default(), &[tcp_endpoint()]);
    let (mut c, _) = hello(tcp(addr_of(&server.endpoints[0])), "halfway");
    c.write_all(&frame(&payload(100_000, 10))[..50_000])
        .unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    assert_eq!(
        read_frame(&mut c).unwrap(),
        Frame::Control(
            "error incomplete the connection's sending side closed in the middle of a message"
                .into()
        )
    );
    assert!(closes(&mut c));
}

/// Large held messages are read straight into their buffers (issue 30), which a reused buffer
/// may leave room beyond: a read that brings the next frames along must hand them on intact.
/// Back to back in one stream, sizes chosen so that pooled buffers fit loosely and tightly.
#[test]
fn back_to_back_large_messages_arrive_intact_whatever_buffer_they_land_in() {
    let server = echo(EngineConfig::default(), &[tcp_endpoint()]);
    let (mut c, answer) = hello(tcp(addr_of(&server.endpoints[0])), "direct");
    assert_eq!(answer, ok());
    let sizes = [
        2 << 20,
        (2 << 20) - 10_000,
        100,
        (2 << 20) - 1,
        1_500_000,
        70_000,
        (2 << 20) - 60_000,
        3,
        2 << 20,
    ];
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| payload(n, i as u32))
        .collect();
    let mut wire = Vec::new();
    for m in &msgs {
        wire.extend_from_slice(&frame(m));
    }
    let mut w = c.try_clone().unwrap();
    let writer = thread::spawn(move || w.write_all(&wire).unwrap());
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    for (i, m) in msgs.iter().enumerate() {
        let mut head = [0u8; 8];
        c.read_exact(&mut head).unwrap();
        assert_eq!(
            u64::from_le_bytes(head),
            m.len() as u64,
            "message {i}'s length"
        );
        let mut got = vec![0u8; m.len()];
        c.read_exact(&mut got).unwrap();
        assert!(got == *m, "message {i} differs");
    }
    writer.join().unwrap();
}
