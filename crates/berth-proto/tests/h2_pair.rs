//! Conversations between berth-proto's HTTP/2 client role and the server connection, joined
//! in memory with a manual clock ([`Pair`]): the h2_paths cases that are request and answer
//! (time passing, the drain, windows, trailers, jobs answered out of order), told as a client
//! of good faith tells them, and checked by what the *client* heard. The byte-exact and
//! abusive cases stay in h2_paths and the vectors.

mod h2_support;

use std::time::Duration;

use berth_proto::h2::client::{ClientConfig, Event, Windows};
use berth_proto::h2::frame::{setting, ErrorCode};
use berth_proto::h2::H2Config;
use berth_proto::http::{body_stream, Reply};

use h2_support::pair::Pair;
use h2_support::Server;

fn pair() -> Pair {
    Pair::new(H2Config::default(), ClientConfig::default())
}

/// A pair whose server holds its jobs until the test answers them.
fn holding() -> Pair {
    Pair::with(Server::new(H2Config::default()), ClientConfig::default())
}

#[test]
fn the_opening_is_exchanged_and_requests_answered() {
    let mut p = pair();
    assert_eq!(
        p.heard,
        [Event::Settings { first: true }, Event::SettingsAcked],
        "the server's SETTINGS and its ack of the client's"
    );
    let a = p.get("/");
    let b = p.get("/nowhere");
    assert_eq!((a, b), (1, 3));
    assert_eq!(p.answer(a).status, 200);
    assert_eq!(p.answer(a).body, b"Hello, World!");
    assert!(p.answer(a).ended);
    assert_eq!(p.answer(b).status, 404);
    assert_eq!(p.client.open_streams(), 0, "both over and forgotten");
    assert_eq!(p.error, None);
}

/// h2_paths' `a_window_left_shut_ends_at_the_write_timeout`, from the client's side: a client
/// that opens no window gets the head and no DATA, and a GOAWAY once the write timeout passes.
#[test]
fn a_window_left_shut_ends_at_the_write_timeout() {
    let client = ClientConfig {
        settings: vec![(setting::INITIAL_WINDOW_SIZE, 0)],
        windows: Windows::Shut,
        ..ClientConfig::default()
    };
    let mut p = Pair::new(H2Config::default(), client);
    let id = p.get("/big");
    assert_eq!(p.answer(id).status, 200);
    assert!(
        p.answer(id).body.is_empty(),
        "no DATA through a shut window"
    );
    let write = p.server.timeouts.write;
    p.advance(write - Duration::from_secs(1));
    assert!(!p.server.closed);
    assert_eq!(p.goaway(), None);
    p.advance(Duration::from_secs(1));
    assert!(p.server.closed, "the write timeout ends a window left shut");
    assert_eq!(p.goaway(), Some((id, ErrorCode::NO_ERROR)), "told why");
}

/// An answer bigger than every window arrives whole: the client opens its windows as it
/// reads, and the server's write timeout never fires while it does.
#[test]
fn a_big_answer_arrives_as_the_client_opens_its_windows() {
    let mut p = pair();
    let id = p.get("/big");
    let a = p.answer(id);
    assert_eq!(a.body.len(), 100_000);
    assert!(a.ended);
    let updates = p.count(|e| matches!(e, Event::Data { .. }));
    assert!(
        updates >= 7,
        "{updates} DATA frames of at most 16,384 bytes"
    );
}

/// A request body past the server's windows goes out as the server opens them, never ahead
/// of them (the server would reset the stream for it).
#[test]
fn a_request_body_past_the_windows_goes_out_as_they_open() {
    let mut p = pair();
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let id = p.request("POST", "/echo", &body);
    let a = p.answer(id);
    assert_eq!(a.status, 200);
    assert_eq!(a.body.len(), body.len());
    assert!(a.body == body, "the body echoed whole and in order");
    assert_eq!(p.resets(), []);
    assert_eq!(p.error, None);
}

/// A head past the server's frame size goes in CONTINUATION frames and arrives whole.
#[test]
fn a_long_request_head_goes_in_continuations() {
    let config = H2Config {
        max_header_list_size: 64 * 1024,
        ..H2Config::default()
    };
    let mut p = Pair::new(config, ClientConfig::default());
    let long = vec![b'v'; 20_000];
    p.server.limits.max_header_bytes = 64 * 1024;
    let id = p.send("GET", "/", &[(b"x-long", &long)], b"", true);
    p.drive();
    assert_eq!(p.answer(id).status, 200, "{:?}", p.heard);
}

/// Trailers end the stream after the body, a trailer block past the frame size in
/// CONTINUATION frames (h2_paths' `trailers_end_the_stream_after_the_body`).
#[test]
fn trailers_end_the_stream_after_the_body() {
    let mut p = holding();
    let a = p.get("/test/slow");
    let b = p.get("/test/slow");
    let _jobs = (p.server.take_job(a.into()), p.server.take_job(b.into()));
    let (writer, stream) = body_stream();
    p.server
        .reply(a.into(), Reply::streamed(200, b"head-".to_vec(), stream));
    writer.push(b"body".to_vec()).unwrap();
    p.server.pump();
    p.drive();
    assert!(!p.answer(a).ended);
    assert_eq!(p.answer(a).body, b"head-body");
    let fields = |pairs: &[(&str, &str)]| -> Vec<(String, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect()
    };
    writer
        .end_with(fields(&[("Grpc-Status", "0"), ("grpc-message", "fine")]))
        .unwrap();
    p.server.pump();
    let big = "v".repeat(40_000);
    let whole = Reply::empty(200)
        .with_trailers(fields(&[("x-big", big.as_str())]))
        .unwrap();
    p.server.reply(b.into(), whole);
    p.drive();
    let owned = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    };
    let ta = p.answer(a);
    assert!(ta.ended, "ended by the trailers");
    assert_eq!(
        ta.trailers,
        owned(&[("grpc-status", "0"), ("grpc-message", "fine")])
    );
    let tb = p.answer(b);
    assert!(tb.body.is_empty() && tb.ended);
    assert_eq!(tb.trailers, owned(&[("x-big", big.as_str())]));
    assert_eq!(p.error, None);
}

/// Jobs answered in any order reach the client on their own streams.
#[test]
fn jobs_answered_out_of_order_reach_their_streams() {
    let mut server = Server::new(H2Config::default());
    // Every stream's job out at once (the default share is 2).
    server.limits.jobs_per_connection = 100;
    let mut p = Pair::with(server, ClientConfig::default());
    let ids: Vec<u32> = (0..5).map(|_| p.get("/test/slow")).collect();
    for &id in ids.iter().rev() {
        let _job = p.server.take_job(id.into());
        p.server.reply(
            id.into(),
            Reply::new(200, "text/plain", format!("job {id}").into()),
        );
    }
    p.drive();
    for &id in &ids {
        assert_eq!(p.answer(id).body, format!("job {id}").as_bytes());
    }
    let order = p.answered();
    assert_eq!(order, ids.iter().rev().copied().collect::<Vec<_>>());
}

/// The drain (h2_paths' `the_drain_finishes_streams_in_flight_and_refuses_new_ones`): the
/// GOAWAY names the last stream taken up, the client forgets the ones above it, and the
/// connection ends once the streams in flight are answered.
#[test]
fn the_drain_finishes_streams_in_flight_and_the_client_forgets_the_rest() {
    let mut p = holding();
    let slow = p.get("/test/slow");
    p.server.conn.close_after_response();
    p.server.pump();
    p.drive();
    assert_eq!(p.goaway(), Some((slow, ErrorCode::NO_ERROR)));
    assert_eq!(p.client.goaway(), Some(slow));
    let late = p.get("/");
    assert_eq!(
        p.answer(late).status,
        0,
        "a stream after the GOAWAY is ignored"
    );
    assert!(!p.server.closed, "the slow job is still out");
    p.finish();
    assert_eq!(p.answer(slow).status, 200);
    assert!(
        p.server.closed,
        "closed once the streams in flight are done"
    );
}

/// The idle timeout, on the manual clock: nothing happens until it passes, then a GOAWAY.
#[test]
fn an_idle_connection_ends_at_the_idle_timeout() {
    let mut p = pair();
    let id = p.get("/");
    let idle = p.server.timeouts.idle;
    p.advance(idle - Duration::from_secs(1));
    assert!(!p.server.closed);
    p.advance(idle);
    assert!(p.server.closed);
    assert_eq!(p.goaway(), Some((id, ErrorCode::NO_ERROR)));
}

/// A PING from the client is acknowledged with its data.
#[test]
fn a_ping_comes_back() {
    let mut p = pair();
    p.client.ping(*b"berth!!!");
    p.drive();
    assert_eq!(p.count(|e| *e == Event::Pong(*b"berth!!!")), 1);
}

/// A request body in pieces, then trailers: the trailer block ends the request and the body
/// is whole at the server (`/echo` answers it back).
#[test]
fn a_request_ends_with_trailers_after_its_body() {
    let mut p = pair();
    let id = p.send("POST", "/echo", &[], b"first,", false);
    p.client.send_data(id, b"second", false);
    p.client.send_trailers(id, &[(b"x-checksum", b"42")]);
    p.drive();
    let a = p.answer(id);
    assert_eq!((a.status, a.body.as_slice()), (200, &b"first,second"[..]));
    assert!(a.ended);
    assert_eq!(p.client.open_streams(), 0, "sent and answered: forgotten");
}

/// A raw frame goes out as written, after what was queued: here a PING the role did not
/// make, which the server acknowledges like any other.
#[test]
fn a_raw_frame_goes_out_as_written() {
    let mut p = pair();
    p.client
        .write_frame(berth_proto::h2::frame::kind::PING, 0, 0, b"rawbytes");
    p.drive();
    assert_eq!(p.count(|e| *e == Event::Pong(*b"rawbytes")), 1);
}
