//! The paths of [`Connection`](berth_proto::h2::Connection) that a conversation vector cannot
//! say (time passing, the driver's drain, jobs answered in a chosen order, request bodies
//! taken by the application bit by bit, limits other than the defaults). What a vector can say
//! is in `testdata/h2/flow.toml`.

mod h2_support;

use std::time::Duration;

use berth_proto::h2::frame::{self, setting, ErrorCode};
use berth_proto::h2::H2Config;
use berth_proto::http::{body_stream, Popped, Reply};

use h2_support::{code_named, Client, Server, Sink, TestJob};

const NO_ERROR: u32 = 0;

fn post(stream: u32, path: &str) -> Client {
    let mut c = Client::default();
    post_on(&mut c, stream, path);
    c
}

/// The head of a POST of `path` on `stream`, its body to follow, added to what `c` sends.
fn post_on<'c>(c: &'c mut Client, stream: u32, path: &str) -> &'c mut Client {
    c.headers(
        stream,
        &[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "x"),
        ],
        false,
    )
}

fn started<H: berth_proto::http::Handler>(server: &mut Server<H>) {
    server.feed(&Client::default().preface().take());
}

// --- the write timeout: a window left shut ----------------------------------------------

#[test]
fn a_window_left_shut_ends_at_the_write_timeout() {
    let mut s = Server::new(H2Config::default());
    let mut c = Client::default();
    c.preface()
        .settings(&[(setting::INITIAL_WINDOW_SIZE, 0)])
        .get(1, "/big");
    s.feed(&c.take());
    let heard = s.heard();
    assert_eq!(heard.responses.len(), 1);
    assert!(
        heard.responses[0].3.is_empty(),
        "no DATA through a shut window"
    );
    let start = s.now;
    let write = s.timeouts.write;
    // The deadline runs from the stall; it does not move while nothing moves.
    assert_eq!(s.deadline(), Some(start + write));
    s.advance(write - Duration::from_secs(1));
    assert!(!s.closed);
    assert_eq!(s.deadline(), Some(start + write));
    s.advance(Duration::from_secs(1));
    assert!(s.closed, "the write timeout ends a window left shut");
    let heard = s.heard();
    assert_eq!(heard.goaway, Some((1, NO_ERROR)), "the client is told why");
    assert!(s.conn.is_closed());
}

#[test]
fn a_long_answer_to_a_client_that_keeps_opening_its_window_lives() {
    // Each WINDOW_UPDATE moves the answer on: the write timeout must count from the last
    // progress, not from the first stall (else every download longer than 30 s through the
    // default 64 KiB window dies).
    let mut s = Server::new(H2Config::default());
    let mut c = Client::default();
    c.preface().get(1, "/big");
    s.feed(&c.take());
    assert_eq!(s.heard().responses[0].3.len(), 65_535);
    let step = s.timeouts.write - Duration::from_secs(5);
    let mut sent = 65_535;
    while sent < 100_000 {
        s.advance(step);
        assert!(
            !s.closed,
            "closed after {sent} bytes although the client reads"
        );
        c.window_update(0, 10_000).window_update(1, 10_000);
        s.feed(&c.take());
        sent = s.heard().responses[0].3.len();
    }
    let heard = s.heard();
    assert_eq!(heard.responses[0].3.len(), 100_000);
    assert!(heard.responses[0].4, "ended");
    // Done: the idle timeout now, no longer the write timeout.
    assert_eq!(s.deadline(), Some(s.now + s.timeouts.idle));
}

// --- streamed answers ---------------------------------------------------------------------

/// A server whose stream 1 waits for its job's reply (the job itself taken and dropped).
fn waiting_for_a_job() -> Server {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    let mut c = Client::default();
    c.get(1, "/test/slow");
    s.feed(&c.take());
    let _job = s.take_job(1);
    s
}

#[test]
fn a_streamed_answer_follows_its_producer_and_wakes_the_driver() {
    let mut s = waiting_for_a_job();
    let (writer, stream) = body_stream();
    s.reply(1, Reply::streamed(200, b"head-".to_vec(), stream));
    let heard = s.heard();
    assert_eq!(heard.responses[0].1, 200);
    assert_eq!(heard.responses[0].3, b"head-");
    assert!(!heard.responses[0].4);
    // Waiting for a producer is like waiting for a job: no timeout.
    assert_eq!(s.deadline(), None);
    let wakes = s.wakes.load(std::sync::atomic::Ordering::SeqCst);
    writer.push(b"more".to_vec()).unwrap();
    assert!(
        s.wakes.load(std::sync::atomic::Ordering::SeqCst) > wakes,
        "a push after the connection found the stream empty wakes the driver"
    );
    s.pump();
    assert_eq!(s.heard().responses[0].3, b"head-more");
    writer.end();
    s.pump();
    let heard = s.heard();
    assert_eq!(heard.responses[0].3, b"head-more");
    assert!(heard.responses[0].4, "END_STREAM once the producer ends");
    assert_eq!(s.conn.open_streams(), 0);
}

/// A streamed answer of a declared length is held to it, as over HTTP/1.1 (one reply path,
/// the exchange's): bytes past it are never sent, and the stream is reset rather than ended
/// short or long, so that the client can tell. Before the exchange wrote every reply, HTTP/2
/// sent whatever the producer pushed under the declared `content-length`.
#[test]
fn a_streamed_answer_is_held_to_its_declared_length() {
    let mut s = waiting_for_a_job();
    let (writer, stream) = body_stream();
    s.reply(
        1,
        Reply::streamed(200, b"head-".to_vec(), stream).with_length(8),
    );
    writer.push(b"more than declared".to_vec()).unwrap();
    writer.end();
    s.pump();
    let heard = s.heard();
    let (_, status, fields, body, ended) = &heard.responses[0];
    assert_eq!(*status, 200);
    assert_eq!(field(fields, "content-length"), Some("8"));
    assert_eq!(body, b"head-mor");
    assert!(!ended, "a body cut at its length is not ended as if whole");
    assert_eq!(heard.resets.len(), 1, "{:?}", heard.resets);
    assert_eq!(heard.resets[0].0, 1);
}

/// A producer that pushes its last bytes and ends with trailers before the connection pulls
/// any: the trailers still end the stream, whichever pull brought them to the connection (a
/// driver in memory takes them with the bytes; found by the HTTP/3 work, which had the same
/// rule).
#[test]
fn trailers_pushed_with_the_last_bytes_before_any_pull_are_sent() {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    s.feed(&Client::default().get(1, "/test/slow").take());
    let _job = s.take_job(1);
    let (writer, stream) = body_stream();
    writer.push(b"all of it".to_vec()).unwrap();
    writer
        .end_with(vec![("grpc-status".to_string(), b"0".to_vec())])
        .unwrap();
    s.reply(1, Reply::streamed(200, Vec::new(), stream));
    let heard = s.heard();
    assert_eq!(heard.responses[0].3, b"all of it");
    assert!(heard.responses[0].4, "ended by the trailers");
    assert_eq!(
        heard.trailers,
        [(1, vec![("grpc-status".to_string(), "0".to_string())])]
    );
}

/// Trailers end the stream: the last DATA frame does not, a HEADERS frame after it does,
/// its fields lowercased; a whole reply's trailers go the same way, after a body of none.
#[test]
fn trailers_end_the_stream_after_the_body() {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    s.feed(
        &Client::default()
            .get(1, "/test/slow")
            .get(3, "/test/slow")
            .take(),
    );
    let _jobs = (s.take_job(1), s.take_job(3));
    let (writer, stream) = body_stream();
    s.reply(1, Reply::streamed(200, b"head-".to_vec(), stream));
    writer.push(b"body".to_vec()).unwrap();
    s.pump();
    assert!(s.heard().trailers.is_empty());
    let fields = |pairs: &[(&str, &str)]| -> Vec<(String, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect()
    };
    writer
        .end_with(fields(&[("Grpc-Status", "0"), ("grpc-message", "fine")]))
        .unwrap();
    s.pump();
    let whole = Reply::empty(200)
        .with_trailers(fields(&[("x-sum", "42")]))
        .unwrap();
    s.reply(3, whole);
    let heard = s.heard();
    assert_eq!(heard.responses[0].3, b"head-body");
    assert!(heard.responses[0].4, "ended by the trailers");
    let owned = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        heard.trailers,
        [
            (1, owned(&[("grpc-status", "0"), ("grpc-message", "fine")])),
            (3, owned(&[("x-sum", "42")])),
        ]
    );
    assert!(heard.responses[1].3.is_empty() && heard.responses[1].4);
    assert_eq!(s.conn.open_streams(), 0);
    // Trailers larger than a frame go on in CONTINUATION frames, the block whole.
    s.feed(&Client::default().get(5, "/test/slow").take());
    let _job = s.take_job(5);
    let big = "v".repeat(40_000);
    let whole = Reply::empty(200)
        .with_trailers(fields(&[("x-big", big.as_str())]))
        .unwrap();
    s.reply(5, whole);
    let heard = s.heard();
    assert_eq!(heard.trailers[2], (5, owned(&[("x-big", big.as_str())])));
    assert_eq!(s.conn.open_streams(), 0);
}

#[test]
fn a_streamed_answer_whose_producer_fails_is_reset() {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    s.feed(&Client::default().get(1, "/test/slow").take());
    let _job = s.take_job(1);
    let (writer, stream) = body_stream();
    s.reply(1, Reply::streamed(200, Vec::new(), stream));
    writer.push(b"part".to_vec()).unwrap();
    writer.abort();
    s.pump();
    let heard = s.heard();
    assert!(!heard.responses[0].4, "the body must not look complete");
    assert_eq!(heard.resets, [(1, code_named("INTERNAL_ERROR"))]);
    assert!(!s.closed, "one stream's failure is that stream's");
}

// --- streamed request bodies --------------------------------------------------------------

fn sink() -> Server<Sink> {
    let mut s = Server::with(H2Config::default(), Sink);
    s.stream_bodies = true;
    started(&mut s);
    s
}

fn stream_updates<H: berth_proto::http::Handler>(s: &Server<H>, id: u32) -> Vec<u32> {
    s.heard()
        .window_updates
        .iter()
        .filter(|(sid, _)| *sid == id)
        .map(|(_, n)| *n)
        .collect()
}

#[test]
fn a_streamed_body_is_granted_window_only_as_the_job_takes_it() {
    let mut s = sink();
    s.feed(&post(1, "/up").take());
    let TestJob::Sink(body) = s.take_job(1) else {
        panic!("the body goes to a job as soon as the head is in")
    };
    // The whole initial window, in 16 KiB frames: nothing granted, the job took nothing.
    let mut c = Client::default();
    c.data(1, &vec![7; 65_535], false);
    s.feed(&c.take());
    assert!(!s.closed);
    assert_eq!(
        stream_updates(&s, 1),
        [] as [u32; 0],
        "no window ahead of the job"
    );
    // The job takes one frame's worth: less than half a window, still nothing.
    let Popped::Data(d) = body.pop(16_384) else {
        panic!()
    };
    assert_eq!(d.len(), 16_384);
    s.pump();
    assert_eq!(stream_updates(&s, 1), [] as [u32; 0]);
    // A second: past half a window. The stream's room hook wakes the driver, which grants
    // exactly what was taken.
    let wakes = s.wakes.load(std::sync::atomic::Ordering::SeqCst);
    let Popped::Data(d) = body.pop(16_384) else {
        panic!()
    };
    assert_eq!(d.len(), 16_384);
    let Popped::Data(_) = body.pop(16_384) else {
        panic!()
    };
    assert!(
        s.wakes.load(std::sync::atomic::Ordering::SeqCst) > wakes,
        "taking the body wakes the driver"
    );
    s.pump();
    assert_eq!(stream_updates(&s, 1), [3 * 16_384]);
    // The client sends what it was granted, and ends.
    c.data(1, &vec![8; 3 * 16_384], true);
    s.feed(&c.take());
    assert!(!s.closed, "the client kept within its window");
    // The job takes the rest and answers.
    s.reply(1, TestJob::Sink(body).run_reply());
    let heard = s.heard();
    assert_eq!(heard.responses.len(), 1);
    assert_eq!(
        String::from_utf8_lossy(&heard.responses[0].3),
        // 16,383 still queued of the first window, and the 49,152 of the second.
        "taken=65535 end"
    );
    assert_eq!(s.conn.open_streams(), 0);
}

#[test]
fn a_streamed_body_past_the_limit_aborts_the_job_and_is_answered_413() {
    let mut s = sink();
    s.limits.max_body_bytes = 1000;
    s.feed(&post(1, "/up").take());
    let TestJob::Sink(body) = s.take_job(1) else {
        panic!()
    };
    let mut c = Client::default();
    c.data(1, &[1; 600], false).data(1, &[2; 600], false);
    s.feed(&c.take());
    let heard = s.heard();
    assert_eq!(heard.responses.len(), 1);
    assert_eq!(heard.responses[0].1, 413);
    assert_eq!(heard.resets, [(1, NO_ERROR)], "the client is told to stop");
    assert!(matches!(body.pop(1 << 20), Popped::Data(d) if d.len() == 600));
    assert_eq!(
        body.pop(1 << 20),
        Popped::Aborted,
        "the job learns the body is cut"
    );
    // The job's answer, when it comes, is dropped; the connection goes on.
    s.reply(1, Reply::new(200, "text/plain", b"late".to_vec()));
    c.data(1, b"late data", true).get(3, "/");
    s.feed(&c.take());
    let heard = s.heard();
    assert_eq!(heard.responses.len(), 2);
    assert_eq!((heard.responses[1].0, heard.responses[1].1), (3, 200));
    assert!(!s.closed);
}

#[test]
fn a_job_that_drops_its_body_lets_the_client_finish() {
    let mut s = sink();
    s.feed(&post(1, "/up").take());
    let TestJob::Sink(body) = s.take_job(1) else {
        panic!()
    };
    let mut c = Client::default();
    c.data(1, &vec![1; 40_000], false);
    s.feed(&c.take());
    drop(body);
    s.pump();
    // What was queued for the job counts as taken: the window opens.
    assert_eq!(stream_updates(&s, 1), [40_000]);
    c.data(1, &vec![1; 40_000], true);
    s.feed(&c.take());
    assert!(!s.closed);
    s.reply(1, Reply::new(200, "text/plain", b"ok".to_vec()));
    assert_eq!(s.heard().responses[0].3, b"ok");
}

// --- bodies taken whole: what one connection holds of them ------------------------------

/// A server with a body limit of `limit` that has had `streams` POSTs (ids 1, 3, ...), each
/// with `sent` bytes of a body the handler takes whole and more to come; and their client.
fn bodies_begun(limit: usize, streams: u32, sent: usize) -> (Server, Client) {
    let mut s = Server::new(H2Config::default());
    s.limits.max_body_bytes = limit;
    started(&mut s);
    let mut c = Client::default();
    for id in (0..streams).map(|i| 2 * i + 1) {
        post_on(&mut c, id, "/missing").data(id, &vec![b' '; sent], false);
    }
    s.feed(&c.take());
    (s, c)
}

#[test]
fn many_bodies_taken_whole_at_once_hold_about_one_body_limit_and_all_are_served() {
    // Eight streams each send 60,000 bytes, within the first window, of bodies the handler
    // takes whole; the connection may hold 100,000 (the body limit, as one HTTP/1.1
    // connection). Only the lowest stream is granted more; each of the others waits its turn
    // for window, and every body is answered in the end.
    let (mut s, mut c) = bodies_begun(100_000, 8, 60_000);
    let updated: Vec<u32> = (1..=15)
        .step_by(2)
        .filter(|&id| !stream_updates(&s, id).is_empty())
        .collect();
    assert_eq!(updated, [1], "only the lowest stream is granted more");
    // Each body ends in turn (with more than the first window: the grant was needed); the
    // next stream is granted as the one before it is answered.
    for id in (1..=15).step_by(2) {
        assert!(
            !stream_updates(&s, id).is_empty(),
            "stream {id} was never granted"
        );
        c.data(id, &[b' '; 30_000], true);
        s.feed(&c.take());
        assert!(
            s.conn.buffered() <= 8 * 65_535 + 100_000,
            "{} held",
            s.conn.buffered()
        );
    }
    let heard = s.heard();
    assert_eq!(heard.responses.len(), 8, "every body is answered");
}

#[test]
fn the_one_stream_past_the_budget_may_send_the_rest_of_its_body_at_once() {
    // Fifteen streams fill their first windows (983,025 bytes, within the connection's
    // window) past a body limit of 900,000: the lowest stream is opened to what the limit
    // leaves it, in one WINDOW_UPDATE, so its upload takes one round trip, not one a window.
    let (mut s, mut c) = bodies_begun(900_000, 15, 65_535);
    assert_eq!(stream_updates(&s, 1), [900_000 - 65_535]);
    assert!((3..=29)
        .step_by(2)
        .all(|id| stream_updates(&s, id).is_empty()));
    c.data(1, &[b' '; 900_000 - 65_535], true);
    s.feed(&c.take());
    assert!(!s.closed, "the client kept within the window it was given");
    assert_eq!(s.heard().responses.len(), 1);
    assert_eq!(
        stream_updates(&s, 3),
        [900_000 - 65_535],
        "the next goes on alone"
    );
}

// --- bodies over the limit, whole -------------------------------------------------------

#[test]
fn a_body_past_the_limit_is_answered_413_at_once_and_the_connection_lives() {
    let mut s = Server::new(H2Config::default());
    s.limits.max_body_bytes = 1000;
    started(&mut s);
    let mut c = post(1, "/echo");
    c.data(1, &[1; 500], false).data(1, &[2; 501], false);
    s.feed(&c.take());
    let heard = s.heard();
    assert_eq!(heard.responses.len(), 1, "answered before the body ends");
    assert_eq!(heard.responses[0].1, 413);
    assert_eq!(heard.resets, [(1, NO_ERROR)]);
    assert_eq!(s.conn.buffered(), 0, "nothing of the body kept");
    c.data(1, &[3; 500], true).get(3, "/");
    s.feed(&c.take());
    let heard = s.heard();
    assert_eq!(
        heard.resets.len(),
        1,
        "late DATA on the refused stream is dropped"
    );
    assert_eq!((heard.responses[1].0, heard.responses[1].1), (3, 200));
    // A body exactly at the limit is served.
    let mut c = post(5, "/echo");
    c.data(5, &[4; 1000], true);
    s.feed(&c.take());
    let heard = s.heard();
    assert_eq!((heard.responses[2].0, heard.responses[2].1), (5, 200));
    assert_eq!(heard.responses[2].3.len(), 1000);
}

// --- the drain ------------------------------------------------------------------------------

#[test]
fn the_drain_finishes_streams_in_flight_and_refuses_new_ones() {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    let mut c = Client::default();
    c.get(1, "/test/slow");
    let mut p = post(3, "/echo");
    c.bytes.append(&mut p.bytes);
    c.data(3, b"abc", false);
    s.feed(&c.take());
    s.conn.close_after_response();
    s.pump();
    assert_eq!(
        s.heard().goaway,
        Some((3, NO_ERROR)),
        "GOAWAY names stream 3"
    );
    assert!(!s.closed);
    // A new stream after the GOAWAY is ignored, its DATA too: no answer, no reset.
    let mut p = post(5, "/echo");
    c.bytes.append(&mut p.bytes);
    c.data(5, b"x", true)
        .window_update(5, 10)
        .data(3, b"def", true);
    s.feed(&c.take());
    let heard = s.heard();
    assert_eq!(heard.resets, []);
    let answered: Vec<u32> = heard.responses.iter().map(|r| r.0).collect();
    assert_eq!(answered, [3], "stream 3 finished, 5 ignored");
    assert_eq!(heard.responses[0].3, b"abcdef");
    assert!(!s.closed, "stream 1's job is still out");
    s.finish();
    let heard = s.heard();
    assert_eq!(heard.responses.len(), 2);
    assert!(s.closed, "closed once the streams in flight are done");
    assert_eq!(
        heard.goaway,
        Some((3, NO_ERROR)),
        "still 3: 5 was never taken up"
    );
}

#[test]
fn a_drain_takes_up_the_streams_already_received() {
    // The drain is asked while a request sits unread in the input (the blocking models ask
    // just before they read it): it was sent before the client could hear of the drain, so
    // it is answered and the GOAWAY names it, as HTTP/1.1 answers such a request with
    // `Connection: close`.
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    s.conn.close_after_response();
    s.feed(&Client::default().get(1, "/").take());
    let heard = s.heard();
    assert_eq!(heard.goaway, Some((1, NO_ERROR)), "{heard:?}");
    assert_eq!(heard.responses.len(), 1);
    assert_eq!(heard.responses[0].1, 200);
    assert!(s.closed, "the drain is done once the stream is");
}

#[test]
fn the_stream_budget_drains_at_the_stream_that_spends_it() {
    let config = H2Config {
        max_streams_per_connection: 2,
        ..H2Config::default()
    };
    let mut s = Server::new(config);
    let mut c = Client::default();
    c.preface().get(1, "/").get(3, "/").get(5, "/");
    s.feed(&c.take());
    let heard = s.heard();
    let answered: Vec<u32> = heard.responses.iter().map(|r| r.0).collect();
    assert_eq!(answered, [1, 3], "stream 5 is past the budget");
    assert_eq!(heard.goaway, Some((3, NO_ERROR)));
    assert!(s.closed);
    assert_eq!(s.conn.counts().exhausted, 1);
}

#[test]
fn a_drain_before_the_preface_closes_at_once() {
    let mut s = Server::new(H2Config::default());
    s.conn.close_after_response();
    s.feed(frame::PREFACE);
    assert!(s.closed);
    assert_eq!(s.heard().goaway, Some((0, NO_ERROR)));
}

// --- timeouts ---------------------------------------------------------------------------

#[test]
fn a_preface_that_never_completes_ends_at_the_header_timeout() {
    let mut s = Server::new(H2Config::default());
    let start = s.now;
    let header = s.timeouts.header;
    s.feed(&frame::PREFACE[..5]);
    assert_eq!(s.deadline(), Some(start + header));
    // Each byte does not move the deadline (slowloris).
    for i in 5..12 {
        s.advance(Duration::from_secs(1));
        s.feed(&frame::PREFACE[i..i + 1]);
        assert_eq!(s.deadline(), Some(start + header), "byte {i}");
    }
    s.advance(header);
    assert!(s.closed);
    assert_eq!(s.heard().goaway.map(|g| g.1), Some(NO_ERROR));
}

#[test]
fn a_preface_without_its_settings_ends_at_the_header_timeout() {
    let mut s = Server::new(H2Config::default());
    s.feed(frame::PREFACE);
    let deadline = s.deadline().unwrap();
    assert_eq!(deadline, s.now + s.timeouts.header);
    s.advance(s.timeouts.header);
    assert!(s.closed);
}

#[test]
fn a_frame_dribbled_a_byte_at_a_time_ends_at_the_header_timeout() {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    let bytes = Client::default().get(1, "/").take();
    let start = s.now;
    let header = s.timeouts.header;
    for (i, b) in bytes.iter().take(bytes.len() - 1).enumerate() {
        s.feed(&[*b]);
        assert_eq!(s.deadline(), Some(start + header), "byte {i}");
        s.advance(Duration::from_millis(100));
        if s.now >= start + header {
            break;
        }
    }
    s.advance(header);
    assert!(
        s.closed,
        "a frame that never completes cannot hold the connection"
    );
}

#[test]
fn an_idle_connection_ends_at_the_idle_timeout() {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    s.feed(&Client::default().get(1, "/").take());
    let idle = s.timeouts.idle;
    assert_eq!(s.deadline(), Some(s.now + idle));
    s.advance(idle - Duration::from_secs(1));
    assert!(!s.closed);
    // (Like HTTP/1.1's, the idle deadline counts from the last poll: a driver polls after
    // each event, not on each tick.)
    s.advance(idle);
    assert!(s.closed);
    assert_eq!(s.heard().goaway, Some((1, NO_ERROR)));
}

#[test]
fn a_body_that_stops_arriving_is_answered_408_at_the_body_timeout() {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    let mut c = post(1, "/echo");
    c.data(1, b"part", false);
    s.feed(&c.take());
    assert_eq!(s.deadline(), Some(s.now + s.timeouts.body));
    s.advance(s.timeouts.body);
    assert!(s.closed);
    let heard = s.heard();
    assert_eq!((heard.responses[0].0, heard.responses[0].1), (1, 408));
    assert!(
        heard.responses[0].4,
        "the 408 goes out whole before the close"
    );
    assert_eq!(heard.goaway.map(|g| g.1), Some(NO_ERROR));
}

#[test]
fn a_header_block_left_open_ends_at_the_header_timeout() {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    let mut block = Vec::new();
    berth_proto::h2::hpack::encode([(&b":method"[..], &b"GET"[..])], &mut block);
    let mut bytes = Vec::new();
    frame::write_header(
        &mut bytes,
        block.len(),
        frame::kind::HEADERS,
        frame::flag::END_STREAM,
        1,
    );
    bytes.extend_from_slice(&block);
    s.feed(&bytes);
    assert_eq!(s.deadline(), Some(s.now + s.timeouts.header));
    s.advance(s.timeouts.header);
    assert!(s.closed);
}

#[test]
fn only_jobs_out_means_no_deadline() {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    s.feed(&Client::default().get(1, "/test/slow").take());
    assert_eq!(s.deadline(), None, "jobs are not timed here");
    s.finish();
    assert_eq!(s.deadline(), Some(s.now + s.timeouts.idle));
}

// --- many streams, jobs answered out of order -----------------------------------------------

#[test]
fn many_jobs_in_flight_answered_in_any_order() {
    let mut s = Server::new(H2Config::default());
    // Every stream's job out at once (the default share is 2: see the next test).
    s.limits.jobs_per_connection = 100;
    started(&mut s);
    let mut c = Client::default();
    let ids: Vec<u32> = (0..100).map(|i| 1 + 2 * i).collect();
    for &id in &ids {
        let path = if id % 3 == 0 { "/stream" } else { "/test/slow" };
        c.get(id, path);
    }
    c.window_update(0, 1 << 30);
    s.feed(&c.take());
    assert_eq!(s.held.len(), 100);
    assert_eq!(s.conn.jobs_out(), 100);
    // An order that is neither FIFO nor LIFO, and input between the answers.
    let mut order = ids.clone();
    order.sort_by_key(|id| (id * 37) % 101);
    let mut opened = Vec::new();
    for (n, id) in order.iter().enumerate() {
        let job = s.take_job(u64::from(*id));
        s.reply(u64::from(*id), job.run_reply());
        assert_eq!(s.conn.jobs_out(), 99 - n);
        if n % 10 == 0 {
            c.window_update(*id, 1 << 20);
            s.feed(&c.take());
            opened.push(*id);
        }
    }
    let heard = s.heard();
    assert_eq!(heard.resets, []);
    let mut answered: Vec<u32> = heard.responses.iter().map(|r| r.0).collect();
    assert_eq!(answered, order, "each answered when its job was");
    answered.sort();
    assert_eq!(answered, ids);
    // Streamed answers past the 64 KiB stream window wait for their own WINDOW_UPDATE.
    for r in &heard.responses {
        let streamed = r.0 % 3 == 0;
        let want = if streamed { 100_005 } else { 0 };
        if !streamed || opened.contains(&r.0) {
            assert_eq!(r.3.len(), want, "stream {}", r.0);
            assert!(r.4, "stream {} ended", r.0);
        } else {
            assert_eq!(r.3.len(), 65_535, "stream {} held by its window", r.0);
        }
    }
    assert!(!s.closed);
}

/// Issue 40: a connection has at most its share of jobs out ([`Limits::jobs_per_connection`],
/// 2 by default); later requests wait in the connection, in order, and go as jobs return. A
/// reset stream whose job is out is named for the driver to cancel; one still waiting is
/// simply dropped.
#[test]
fn jobs_past_the_connections_share_wait_in_it_and_resets_cancel_them() {
    let mut s = Server::new(H2Config::default());
    started(&mut s);
    let mut c = Client::default();
    for id in [1, 3, 5, 7, 9] {
        c.get(id, "/test/slow");
    }
    s.feed(&c.take());
    let out: Vec<u64> = s.held.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        out,
        [1, 3],
        "two jobs out; 5, 7 and 9 wait in the connection"
    );
    assert_eq!(s.conn.take_cancelled().count(), 0);
    frame::write_rst(&mut c.bytes, 3, ErrorCode::CANCEL);
    frame::write_rst(&mut c.bytes, 7, ErrorCode::CANCEL);
    s.feed(&c.take());
    let cancelled: Vec<u64> = s.conn.take_cancelled().collect();
    assert_eq!(
        cancelled,
        [3],
        "3's job is out: the driver drops it if it has not started"
    );
    assert_eq!(
        s.conn.jobs_out(),
        2,
        "3 holds its place until its job comes back"
    );
    // 3's job comes back (dropped unrun, or run): 5 goes out; 7 was dropped while it waited.
    let job = s.take_job(3);
    s.reply(3, job.run_reply());
    let out: Vec<u64> = s.held.iter().map(|(id, _)| *id).collect();
    assert_eq!(out, [1, 5]);
    let job = s.take_job(1);
    s.reply(1, job.run_reply());
    let out: Vec<u64> = s.held.iter().map(|(id, _)| *id).collect();
    assert_eq!(out, [5, 9]);
    s.finish();
    let answered: Vec<u32> = s.heard().responses.iter().map(|r| r.0).collect();
    assert_eq!(answered, [1, 5, 9]);
    assert!(!s.closed);
}

/// A stream answered with a file waits, holding nothing, while the connection holds its share
/// of files ([`Limits::files_per_connection`]) or while no window is open for it.
#[test]
fn files_past_the_connections_share_are_opened_as_earlier_ones_end() {
    let mut s = Server::new(H2Config::default());
    s.limits.files_per_connection = 2;
    s.files = vec![("a.txt".into(), vec![b'a'; 100_000])];
    started(&mut s);
    s.hold_files = true;
    let mut c = Client::default();
    for id in [1, 3, 5, 7] {
        c.get(id, "/files/a.txt");
    }
    s.feed(&c.take());
    let asked: Vec<u64> = s.held_files.iter().map(|(id, _)| *id).collect();
    assert_eq!(asked, [1, 3], "two files at a time");
    // The two are opened, and their bodies wait for windows (65,535 bytes each went out).
    s.open_files();
    s.hold_files = true;
    assert!(
        s.held_files.is_empty(),
        "none more while 1 and 3 are unfinished"
    );
    c.window_update(0, 1 << 20).window_update(1, 1 << 20);
    s.feed(&c.take());
    let asked: Vec<u64> = s.held_files.iter().map(|(id, _)| *id).collect();
    assert_eq!(asked, [5], "1 ended: 5's turn");
    s.open_files();
    c.window_update(3, 1 << 20).window_update(5, 1 << 20);
    s.hold_files = true;
    s.feed(&c.take());
    let asked: Vec<u64> = s.held_files.iter().map(|(id, _)| *id).collect();
    assert_eq!(asked, [7]);
    s.open_files();
    c.window_update(7, 1 << 20);
    s.feed(&c.take());
    let heard = s.heard();
    let mut answered: Vec<u32> = heard.responses.iter().map(|r| r.0).collect();
    answered.sort();
    assert_eq!(answered, [1, 3, 5, 7]);
    assert!(heard.responses.iter().all(|r| r.3.len() == 100_000 && r.4));
}

#[test]
fn an_answer_for_a_stream_the_client_reset_is_dropped_and_frees_its_slot() {
    let config = H2Config {
        max_concurrent_streams: 2,
        ..H2Config::default()
    };
    let mut s = Server::new(config);
    started(&mut s);
    let mut c = Client::default();
    c.get(1, "/test/slow").get(3, "/test/slow");
    frame::write_rst(&mut c.bytes, 1, ErrorCode::CANCEL);
    c.get(5, "/");
    s.feed(&c.take());
    // Stream 1's job still runs: it counts, so 5 is refused.
    assert_eq!(s.heard().resets, [(5, code_named("REFUSED_STREAM"))]);
    let job = s.take_job(1);
    s.reply(1, job.run_reply());
    assert!(
        s.heard().responses.is_empty(),
        "no answer on a reset stream"
    );
    s.feed(&Client::default().get(7, "/").take());
    let heard = s.heard();
    assert_eq!((heard.responses[0].0, heard.responses[0].1), (7, 200));
    let job = s.take_job(3);
    s.reply(3, job.run_reply());
    assert_eq!(s.heard().responses.len(), 2);
    assert_eq!(s.conn.open_streams(), 0);
}

/// RFC 9113 §5.1, "closed": a frame other than PRIORITY after the client's own RST_STREAM is a
/// stream error STREAM_CLOSED, also while the stream's job is still out (h2spec 5.1/8 and
/// 5.1/9 against an ASGI app, whose jobs are all out until the app answers: issue 43). The
/// stream was kept for its job, which once made it answer nothing at all.
#[test]
fn frames_after_the_clients_reset_are_stream_closed_while_its_job_is_out() {
    let mut s = sink();
    // DATA after the reset: a stream error, and the connection lives.
    let mut c = post(1, "/up");
    frame::write_rst(&mut c.bytes, 1, ErrorCode::CANCEL);
    c.data(1, b"late", false);
    s.feed(&c.take());
    assert_eq!(s.conn.jobs_out(), 1, "the job is still out");
    assert_eq!(s.heard().resets, [(1, code_named("STREAM_CLOSED"))]);
    assert!(!s.closed);
    // More DATA crossed berth's RST_STREAM: dropped, not answered again (§5.4.2).
    s.feed(&Client::default().data(1, b"later", false).take());
    assert_eq!(s.heard().resets.len(), 1);
    assert!(!s.closed);
    // HEADERS after the reset: STREAM_CLOSED too (a connection error, as for a stream gone).
    let mut c = post(3, "/up");
    frame::write_rst(&mut c.bytes, 3, ErrorCode::CANCEL);
    c.headers(3, &[("x-trailer", "late")], true);
    s.feed(&c.take());
    assert_eq!(
        s.heard().goaway.map(|(_, code)| code),
        Some(code_named("STREAM_CLOSED"))
    );
}

/// The same when the application answered before the body was all in (an ASGI app that does
/// not read it): berth ends the stream with RST_STREAM NO_ERROR (§8.1), and frames that cross
/// that are dropped; but frames the client sends after its own RST_STREAM did not cross
/// anything, and are STREAM_CLOSED (§5.1). The race h2spec 5.1/8 lost now and then.
#[test]
fn frames_after_the_clients_reset_of_a_stream_answered_early_are_stream_closed() {
    let mut s = sink();
    s.feed(&post(1, "/up").take());
    let job = s.take_job(1);
    s.reply(1, job.run_reply());
    let heard = s.heard();
    assert_eq!(heard.responses.len(), 1, "answered before the body came");
    assert_eq!(heard.resets, [(1, NO_ERROR)]);
    // DATA that crossed berth's RST_STREAM: dropped.
    s.feed(&Client::default().data(1, b"crossed", false).take());
    assert_eq!(s.heard().resets.len(), 1);
    // The client's own RST_STREAM, then DATA: STREAM_CLOSED.
    let mut c = Client::default();
    frame::write_rst(&mut c.bytes, 1, ErrorCode::CANCEL);
    c.data(1, b"late", true);
    s.feed(&c.take());
    assert_eq!(
        s.heard().resets,
        [(1, NO_ERROR), (1, code_named("STREAM_CLOSED"))]
    );
    assert!(!s.closed);
}

trait RunReply {
    fn run_reply(self) -> Reply;
}

impl RunReply for TestJob {
    fn run_reply(self) -> Reply {
        berth_proto::http::Job::run(self)
    }
}

// --- files ---------------------------------------------------------------------------------

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn with_files(files: &[(&str, Vec<u8>)]) -> Server {
    let mut server = Server::new(H2Config::default());
    server.files = files
        .iter()
        .map(|(p, b)| (p.to_string(), b.clone()))
        .collect();
    started(&mut server);
    server
}

#[test]
fn a_file_is_read_as_the_windows_open_and_no_further() {
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut server = with_files(&[("big.bin", body.clone())]);
    server.feed(&Client::default().get(1, "/files/big.bin").take());
    let heard = server.heard();
    let (id, status, fields, got, ended) = &heard.responses[0];
    assert_eq!((*id, *status, *ended), (1, 200, false));
    assert_eq!(field(fields, "content-length"), Some("200000"));
    assert!(field(fields, "etag").is_some());
    assert_eq!(field(fields, "accept-ranges"), Some("bytes"));
    // The default windows: 65,535 bytes sent, nothing more read.
    assert_eq!(got.len(), 65_535);
    assert!(server.conn.buffered() <= 65_535, "read past the window");
    server.feed(
        &Client::default()
            .window_update(0, 200_000)
            .window_update(1, 200_000)
            .take(),
    );
    let heard = server.heard();
    let (_, _, _, got, ended) = &heard.responses[0];
    assert!(*ended);
    assert_eq!(got, &body);
    assert_eq!(server.conn.open_streams(), 0);
}

#[test]
fn a_file_answer_keeps_ranges_conditions_and_head_as_http1_does() {
    let body = b"0123456789abcdefghij".to_vec();
    let mut server = with_files(&[("a.txt", body.clone())]);
    let mut c = Client::default();
    let mut range = h2_support::request_fields("GET", "/files/a.txt");
    range.push(("range", "bytes=10-14"));
    c.headers(1, &range, true);
    c.headers(3, &h2_support::request_fields("HEAD", "/files/a.txt"), true);
    c.get(5, "/files/missing.txt");
    server.feed(&c.take());
    let heard = server.heard();
    let by = |id| heard.responses.iter().find(|r| r.0 == id).unwrap().clone();
    let (_, status, fields, got, ended) = by(1);
    assert_eq!((status, got.as_slice(), ended), (206, &b"abcde"[..], true));
    assert_eq!(field(&fields, "content-range"), Some("bytes 10-14/20"));
    let (_, status, fields, got, ended) = by(3);
    assert_eq!((status, got.len(), ended), (200, 0, true));
    assert_eq!(field(&fields, "content-length"), Some("20"));
    let etag = field(&fields, "etag").unwrap().to_string();
    assert_eq!(by(5).1, 404);
    // No HTTP/1.1 field HTTP/2 forbids.
    for (name, _) in &fields {
        assert!(!["connection", "keep-alive", "transfer-encoding"].contains(&name.as_str()));
    }
    let mut again = h2_support::request_fields("GET", "/files/a.txt");
    again.push(("if-none-match", &etag));
    server.feed(&Client::default().headers(7, &again, true).take());
    let heard = server.heard();
    let (_, status, _, got, ended) = heard.responses.iter().find(|r| r.0 == 7).unwrap();
    assert_eq!((*status, got.len(), *ended), (304, 0, true));
}

#[test]
fn a_file_is_compressed_on_the_fly_without_chunked_framing() {
    let text: Vec<u8> = b"berth serves files over HTTP/2. "
        .iter()
        .copied()
        .cycle()
        .take(100_000)
        .collect();
    let mut server = with_files(&[("t.txt", text.clone())]);
    let mut req = h2_support::request_fields("GET", "/files/t.txt");
    req.push(("accept-encoding", "zstd"));
    server.feed(
        &Client::default()
            .window_update(0, 1 << 20)
            .settings(&[(setting::INITIAL_WINDOW_SIZE, 1 << 20)])
            .headers(1, &req, true)
            .take(),
    );
    let heard = server.heard();
    let (_, status, fields, got, ended) = &heard.responses[0];
    assert_eq!((*status, *ended), (200, true));
    assert_eq!(field(fields, "content-encoding"), Some("zstd"));
    assert_eq!(field(fields, "vary"), Some("Accept-Encoding"));
    assert_eq!(field(fields, "content-length"), None);
    assert!(field(fields, "etag").unwrap().starts_with("W/"));
    assert_eq!(zstd::decode_all(&got[..]).unwrap(), text);
}

#[test]
fn a_file_stream_the_client_resets_before_it_is_opened_is_dropped() {
    let mut server = with_files(&[("a.txt", b"hello".to_vec())]);
    server.hold_files = true;
    let mut c = Client::default();
    c.get(1, "/files/a.txt");
    frame::write_rst(&mut c.bytes, 1, ErrorCode::CANCEL);
    c.get(3, "/files/a.txt");
    server.feed(&c.take());
    assert_eq!(server.held_files.len(), 2);
    server.open_files();
    let heard = server.heard();
    assert!(heard.responses.iter().all(|r| r.0 != 1));
    let r3 = heard.responses.iter().find(|r| r.0 == 3).unwrap();
    assert_eq!((r3.1, r3.3.as_slice(), r3.4), (200, &b"hello"[..], true));
    assert_eq!(server.conn.open_streams(), 0);
}

// --- server and date ------------------------------------------------------------------------

#[test]
fn every_answer_carries_server_and_date_unless_switched_off() {
    for on in [true, false] {
        let mut server = with_files(&[("a.txt", b"a".to_vec())]);
        server.limits.server_header = on;
        server.limits.date_header = on;
        server.limits.max_body_bytes = 10;
        server.hold = false;
        let mut c = Client::default();
        c.get(1, "/")
            .get(3, "/files/a.txt")
            .get(5, "/test/slow")
            .get(7, "/nowhere");
        c.headers(
            9,
            &[
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/echo"),
                (":authority", "x"),
                ("content-length", "100"),
            ],
            false,
        );
        server.feed(&c.take());
        let heard = server.heard();
        assert_eq!(heard.responses.len(), 5, "{heard:?}");
        for (id, status, fields, _, _) in &heard.responses {
            let date = std::str::from_utf8(h2_support::DATE).unwrap();
            let want = |v| on.then_some(v);
            assert_eq!(field(fields, "server"), want("berth"), "{id} {status}");
            assert_eq!(field(fields, "date"), want(date), "{id} {status}");
            assert_eq!(
                fields.iter().filter(|(n, _)| n == "date").count(),
                usize::from(on)
            );
        }
    }
}

#[test]
fn answer_fields_are_lowercased_and_connection_fields_left_out() {
    let mut server = with_files(&[]);
    server.feed(
        &Client::default()
            .get(1, "/fields")
            .get(3, "/nothing")
            .take(),
    );
    let heard = server.heard();
    let (_, status, fields, body, ended) = &heard.responses[0];
    assert_eq!((*status, body.as_slice(), *ended), (200, &b"ok"[..], true));
    assert_eq!(field(fields, "x-mixed-case"), Some("v"));
    let long = h2_support::LONG_NAME.to_ascii_lowercase();
    assert_eq!(field(fields, &long), Some("w"));
    assert_eq!(field(fields, "content-length"), Some("2"));
    for (name, _) in fields {
        assert_eq!(name, &name.to_ascii_lowercase());
        assert!(!["connection", "transfer-encoding"].contains(&name.as_str()));
    }
    // 204: no content-length (RFC 9110 §8.6), no body.
    let (_, status, fields, body, ended) = &heard.responses[1];
    assert_eq!((*status, body.len(), *ended), (204, 0, true));
    assert_eq!(field(fields, "content-length"), None);
}

/// The lengths of the HEADERS frames in `out`, in order.
fn headers_lengths(mut out: &[u8]) -> Vec<usize> {
    let mut lengths = Vec::new();
    while let Some(h) = frame::Header::parse(out) {
        if h.kind == frame::kind::HEADERS {
            lengths.push(h.len as usize);
        }
        out = &out[frame::HEADER_LEN + h.len as usize..];
    }
    lengths
}

#[test]
fn repeated_answer_fields_are_indexed_within_the_clients_table() {
    let mut server = with_files(&[]);
    server.feed(&Client::default().get(1, "/").get(3, "/").take());
    let lengths = headers_lengths(&server.output);
    // `server`, `date` and `content-type` are literals the first time, a byte each after.
    assert_eq!(lengths.len(), 2);
    assert!(lengths[1] + 40 <= lengths[0], "{lengths:?}");
    // A client that allows no table: told at once, and nothing is indexed from then on.
    server.feed(
        &Client::default()
            .settings(&[(setting::HEADER_TABLE_SIZE, 0)])
            .get(5, "/")
            .get(7, "/")
            .take(),
    );
    let lengths = headers_lengths(&server.output);
    assert_eq!(lengths.len(), 4);
    assert_eq!(
        lengths[3] + 1,
        lengths[2],
        "the size update, then the same literals"
    );
    let heard = server.heard();
    for (id, status, fields, body, _) in &heard.responses {
        assert_eq!(*status, 200, "{id}");
        assert_eq!(field(fields, "server"), Some("berth"), "{id}");
        assert_eq!(
            field(fields, "content-type"),
            Some("text/plain; charset=utf-8"),
            "{id}"
        );
        assert_eq!(body, b"Hello, World!", "{id}");
    }
}

// --- Alt-Svc ----------------------------------------------------------------------------

/// A connection whose driver gives an `Alt-Svc` value (a TLS listener with an HTTP/3 twin)
/// carries it on every answer: the handler's, a refusal, a file's; one without carries none.
#[test]
fn every_answer_carries_the_alt_svc_the_driver_gives() {
    let alt_svc = |s: &mut Server<_>| {
        let mut c = Client::default();
        c.preface()
            .get(1, "/")
            .get(3, "/missing")
            .get(5, "/files/a.txt");
        s.feed(&c.take());
        let heard = s.heard();
        assert_eq!(heard.responses.len(), 3);
        heard
            .responses
            .iter()
            .map(|(_, status, fields, _, _)| {
                let v = fields
                    .iter()
                    .find(|(n, _)| n == "alt-svc")
                    .map(|(_, v)| v.clone());
                (*status, v)
            })
            .collect::<Vec<_>>()
    };
    let mut s = Server::new(H2Config::default());
    s.files = vec![("a.txt".to_owned(), b"a".to_vec())];
    s.alt_svc = Some(b"h3=\":8443\"; ma=86400");
    let want = Some("h3=\":8443\"; ma=86400".to_owned());
    assert_eq!(
        alt_svc(&mut s),
        [(200, want.clone()), (404, want.clone()), (200, want)]
    );
    let mut s = Server::new(H2Config::default());
    s.files = vec![("a.txt".to_owned(), b"a".to_vec())];
    assert_eq!(alt_svc(&mut s), [(200, None), (404, None), (200, None)]);
}
