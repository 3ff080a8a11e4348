//! Fuzz-style test of [`Connection`]: the conversation vectors of `testdata/h2`, mutated
//! (bits flipped, frames cut, dropped, duplicated and swapped, lengths made random or huge,
//! windows pushed to 2^31-1, SETTINGS at their extremes, random frames and bytes), fed in
//! random pieces with jobs answered in random order, time passing and drains in between. A
//! fixed-seed PRNG written here makes every run the same; `BERTH_FUZZ_CASES` sets how many
//! inputs (default 20,000, about 2 s), `BERTH_FUZZ_SEED` the seed.
//!
//! Checked after every call: no panic; open streams within SETTINGS_MAX_CONCURRENT_STREAMS;
//! the HPACK table within SETTINGS_HEADER_TABLE_SIZE; bytes buffered within what the limits
//! allow per stream; output per call within the high-water mark plus one frame's worth; a
//! close only with a GOAWAY written, and nothing after an error's GOAWAY. At the end (input in,
//! jobs answered) the connection is closed with a GOAWAY, or reading with a deadline whose
//! expiry closes it with a GOAWAY. The output, decoded, is valid frames throughout.
//!
//! A `cargo fuzz` target for this is not here: `fuzz/` builds against `berth` with nightly and
//! sanitizers, and this test runs in every `cargo test` instead.

mod h2_support;

use std::time::{Duration, Instant};

use berth_proto::h2::frame::{self, kind, setting, Header, HEADER_LEN, PREFACE};
use berth_proto::h2::{Connection, H2Config};
use berth_proto::http::Action;
use berth_proto::http::{Context, Handler, Job, Limits, Reply, Timeouts};
use berth_proto::switch::{KeptBodies, KeptBody};

use h2_support::vectors::{self, bytes_of};
use h2_support::{hear, Client, Demo, Sink, TestJob, DATE};

/// splitmix64: small, fast, and good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A conversation as the preface and whole frames (what is left over: one last piece).
fn split_frames(bytes: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let (head, mut rest) = if bytes.starts_with(PREFACE) {
        (PREFACE.to_vec(), &bytes[PREFACE.len()..])
    } else {
        return (Vec::new(), vec![bytes.to_vec()]);
    };
    let mut frames = Vec::new();
    while let Some(h) = Header::parse(rest) {
        let end = (HEADER_LEN + h.len as usize).min(rest.len());
        frames.push(rest[..end].to_vec());
        rest = &rest[end..];
    }
    if !rest.is_empty() {
        frames.push(rest.to_vec());
    }
    (head, frames)
}

fn frame_bytes(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_header(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

fn some_stream(rng: &mut Rng) -> u32 {
    match rng.below(6) {
        0 => 0,
        1 => 0x7fff_ffff,
        2 => 2 * rng.below(8) as u32,
        _ => 1 + 2 * rng.below(8) as u32,
    }
}

/// One mutation of the frame list.
fn mutate(rng: &mut Rng, frames: &mut Vec<Vec<u8>>, others: &[Vec<u8>]) {
    let n = frames.len();
    let at = rng.below(n + 1);
    match rng.below(14) {
        // A bit flipped.
        0 if n > 0 => {
            let f = &mut frames[rng.below(n)];
            if !f.is_empty() {
                let i = rng.below(f.len());
                f[i] ^= 1 << rng.below(8);
            }
        }
        // A byte made random.
        1 if n > 0 => {
            let f = &mut frames[rng.below(n)];
            if !f.is_empty() {
                let i = rng.below(f.len());
                f[i] = rng.next() as u8;
            }
        }
        // A frame cut short.
        2 if n > 0 => {
            let f = &mut frames[rng.below(n)];
            let keep = rng.below(f.len() + 1);
            f.truncate(keep);
        }
        // A frame duplicated.
        3 if n > 0 => {
            let f = frames[rng.below(n)].clone();
            frames.insert(at.min(n), f);
        }
        // A frame dropped.
        4 if n > 0 => {
            frames.remove(rng.below(n));
        }
        // Two frames swapped.
        5 if n > 1 => {
            let (a, b) = (rng.below(n), rng.below(n));
            frames.swap(a, b);
        }
        // A length field made random, or huge.
        6 if n > 0 => {
            let f = &mut frames[rng.below(n)];
            if f.len() >= 3 {
                let len: u32 = if rng.one_in(2) {
                    0xff_ffff
                } else {
                    rng.below(40_000) as u32
                };
                f[..3].copy_from_slice(&len.to_be_bytes()[1..]);
            }
        }
        // A window pushed to the top, or past it.
        7 => {
            let inc = if rng.one_in(2) {
                0x7fff_ffff
            } else {
                rng.next() as u32
            };
            let stream = some_stream(rng);
            frames.insert(
                at,
                frame_bytes(kind::WINDOW_UPDATE, 0, stream, &inc.to_be_bytes()),
            );
        }
        // SETTINGS at their extremes.
        8 => {
            let id = [
                setting::HEADER_TABLE_SIZE,
                setting::ENABLE_PUSH,
                setting::MAX_CONCURRENT_STREAMS,
                setting::INITIAL_WINDOW_SIZE,
                setting::MAX_FRAME_SIZE,
                setting::MAX_HEADER_LIST_SIZE,
                0x99,
            ][rng.below(7)];
            let value = [0, 1, 16_384, 65_535, 0x7fff_ffff, 0x8000_0000, u32::MAX][rng.below(7)];
            let mut out = Vec::new();
            frame::write_settings(&mut out, &[(id, value)]);
            frames.insert(at, out);
        }
        // A random frame.
        9 => {
            let len = rng.below(48);
            let payload = rng.bytes(len);
            let f = frame_bytes(
                rng.below(11) as u8,
                rng.next() as u8,
                some_stream(rng),
                &payload,
            );
            frames.insert(at, f);
        }
        // Random bytes.
        10 => {
            let len = rng.below(64);
            frames.insert(at, rng.bytes(len));
        }
        // A frame's stream id changed.
        11 if n > 0 => {
            let f = &mut frames[rng.below(n)];
            if f.len() >= HEADER_LEN {
                let id = some_stream(rng);
                f[5..9].copy_from_slice(&id.to_be_bytes());
            }
        }
        // A frame's flags changed.
        12 if n > 0 => {
            let f = &mut frames[rng.below(n)];
            if f.len() >= HEADER_LEN {
                f[4] = rng.next() as u8;
            }
        }
        // Frames of another conversation spliced in.
        _ => {
            let other = &others[rng.below(others.len())];
            let (_, theirs) = split_frames(other);
            if !theirs.is_empty() {
                let from = rng.below(theirs.len());
                let to = (from + 1 + rng.below(4)).min(theirs.len());
                for (i, f) in theirs[from..to].iter().enumerate() {
                    frames.insert((at + i).min(frames.len()), f.clone());
                }
            }
        }
    }
}

/// Seeds: every vector, and a few conversations the vectors do not have (bodies, streamed
/// answers, windows).
fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = vectors::all().iter().map(|(_, c)| bytes_of(c)).collect();
    let mut c = Client::default();
    c.preface();
    c.headers(
        1,
        &[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/echo"),
            (":authority", "x"),
            ("content-length", "5000"),
        ],
        false,
    );
    c.data(1, &[b'p'; 5000], true);
    c.get(3, "/stream").get(5, "/big").window_update(0, 200_000);
    c.window_update(3, 100_000).window_update(5, 1);
    out.push(c.take());
    let mut c = Client::default();
    c.preface().settings(&[(setting::INITIAL_WINDOW_SIZE, 1)]);
    c.get(1, "/big")
        .get(3, "/test/slow")
        .window_update(1, 70_000);
    out.push(c.take());
    out
}

/// Bounds checked after every call.
struct Bounds {
    config: H2Config,
    limits: Limits,
}

impl Bounds {
    fn check(&self, conn: &Connection, out: &[u8], what: &str) {
        let c = &self.config;
        assert!(
            conn.open_streams() <= c.max_concurrent_streams as usize,
            "{what}: {} streams open",
            conn.open_streams()
        );
        assert!(
            conn.table_size() <= c.header_table_size as usize,
            "{what}: HPACK table {}",
            conn.table_size()
        );
        // Each stream: a body up to the limit, or an answer (Demo's largest is 100,005 bytes;
        // a streamed one is taken 64 KiB at a time); one header block being received.
        let per_stream = self.limits.max_body_bytes.max(100_005 + 64 * 1024);
        let bound = conn.open_streams() * per_stream + 2 * c.max_header_list_size as usize;
        assert!(
            conn.buffered() <= bound,
            "{what}: {} bytes buffered for {} streams",
            conn.buffered(),
            conn.open_streams()
        );
        // The high-water mark, plus what one frame read or one DATA frame written can add
        // (the client may raise MAX_FRAME_SIZE to 16 MiB; Demo's answers are smaller).
        let slack = 128 * 1024;
        assert!(
            out.len() <= self.limits.output_high_water + slack,
            "{what}: {} bytes of output in one call",
            out.len()
        );
    }
}

/// Drives one connection through `input`, cut and interleaved at random.
struct Run<H: Handler<Job = TestJob>> {
    conn: Connection,
    handler: H,
    cx: Context<'static>,
    bounds: Bounds,
    input: Vec<u8>,
    output: Vec<u8>,
    held: Vec<(u64, TestJob)>,
    /// Streamed bodies kept for their streams, pulled as the connection asks.
    kept: KeptBodies<u64>,
    closed: bool,
}

impl<H: Handler<Job = TestJob>> Run<H> {
    fn new(handler: H, stream_bodies: bool) -> Self {
        let limits = Limits::default();
        let leaked: &'static Limits = Box::leak(Box::new(limits));
        Run {
            conn: Connection::new(H2Config::default()),
            handler,
            cx: Context {
                limits: leaked,
                date: DATE,
                stream_bodies,
                now: std::time::Instant::now(),
                alt_svc: None,
            },
            bounds: Bounds {
                config: H2Config::default(),
                limits,
            },
            input: Vec::new(),
            output: Vec::new(),
            held: Vec::new(),
            kept: KeptBodies::default(),
            closed: false,
        }
    }

    /// Takes one step's output and checks it, then follows the step.
    fn after(&mut self, mut step: Action<TestJob>, mut out: Vec<u8>, what: &str) {
        loop {
            self.bounds.check(&self.conn, &out, what);
            self.output.append(&mut out);
            match step {
                Action::Close => {
                    assert!(self.conn.is_closed(), "{what}: Close, and not closed");
                    self.closed = true;
                    return;
                }
                Action::Read => {
                    assert!(!self.conn.is_closed(), "{what}: Read, and closed");
                    return;
                }
                Action::Flush => {}
                Action::Switched => panic!("{what}: HTTP/2 never switches protocols"),
                Action::Body { stream, .. } => {
                    panic!("{what}: a file body for stream {stream}, and no file was found");
                }
                Action::Stream { stream, streamed } => {
                    self.kept.keep(stream, KeptBody::Producer(streamed));
                }
                Action::Pull { stream, max } => {
                    let conn = &self.conn;
                    let (mut bytes, pulled, trailers) = self
                        .kept
                        .pull(stream, max, |s| conn.pulls(s))
                        .unwrap_or_else(|| panic!("{what}: a pull for stream {stream}, no body"));
                    step = self.conn.pulled(
                        stream,
                        &mut bytes,
                        pulled,
                        trailers,
                        &mut self.input,
                        &mut out,
                        &self.cx,
                        &mut self.handler,
                    );
                    continue;
                }
                Action::Offload { stream, job } => {
                    assert!(stream % 2 == 1, "{what}: a job for stream {stream}");
                    self.held.push((stream, job));
                }
                Action::Open { stream, request } => {
                    assert!(stream % 2 == 1, "{what}: a file for stream {stream}");
                    step = self.conn.file(
                        stream,
                        &request,
                        Err(berth_proto::http::FileError::NotFound),
                        &mut self.input,
                        &mut out,
                        &self.cx,
                        &mut self.handler,
                    );
                    continue;
                }
            }
            step = self
                .conn
                .process(&mut self.input, &mut out, &self.cx, &mut self.handler);
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        if self.closed {
            return;
        }
        self.input.extend_from_slice(bytes);
        let mut out = Vec::new();
        let step = self
            .conn
            .process(&mut self.input, &mut out, &self.cx, &mut self.handler);
        self.after(step, out, "process");
    }

    fn answer_one(&mut self, rng: &mut Rng) {
        if self.closed || self.held.is_empty() {
            return;
        }
        let (stream, job) = self.held.remove(rng.below(self.held.len()));
        let reply: Reply = job.run();
        let mut out = Vec::new();
        let step = self.conn.complete(
            stream,
            reply,
            &mut self.input,
            &mut out,
            &self.cx,
            &mut self.handler,
        );
        self.after(step, out, "complete");
    }

    /// Polls for the deadline and, if `due` or it passes within `by`, expires.
    fn wait(&mut self, by: Duration, due: bool) -> Option<Instant> {
        if self.closed {
            return None;
        }
        let t = Timeouts::default();
        let deadline = self.conn.poll_timeout(&self.input, false, self.cx.now, &t);
        let Some(d) = deadline else {
            self.cx.now += by;
            return None;
        };
        if due || d <= self.cx.now + by {
            self.cx.now = self.cx.now.max(d);
            let mut out = Vec::new();
            let step = self
                .conn
                .expire(&mut self.input, &mut out, &self.cx, &mut self.handler);
            self.after(step, out, "expire");
        } else {
            self.cx.now += by;
        }
        deadline
    }

    /// The end: every job answered, then deadlines until the connection closes.
    fn end(&mut self, rng: &mut Rng, input: &[u8]) {
        while !self.held.is_empty() && !self.closed {
            self.answer_one(rng);
        }
        for _ in 0..4 {
            if self.closed {
                break;
            }
            assert!(
                self.conn.jobs_out() == 0,
                "jobs out after all were answered"
            );
            let d = self.wait(Duration::ZERO, true);
            assert!(
                d.is_some() || self.closed,
                "a connection left with no deadline and nothing out: {:?}\ninput {:02x?}",
                self.conn,
                input
            );
        }
        assert!(self.closed, "expiry does not close: {:?}", self.conn);
        if std::env::var("BERTH_FUZZ_SHOW").is_ok() {
            let h = hear(&self.output);
            eprintln!(
                "  answers {} resets {} goaway {:?} counts {:?}",
                h.responses.len(),
                h.resets.len(),
                h.goaway,
                self.conn.counts()
            );
        }
        if input.is_empty() {
            // Nothing ever came: the header timeout closes it without a word.
            return;
        }
        let heard = hear(&self.output);
        assert!(
            heard.goaway.is_some(),
            "closed without GOAWAY; input {input:02x?}"
        );
        // GOAWAY names the last stream taken up: no answer is past it.
        if let Some((last, _)) = heard.goaway {
            for r in &heard.responses {
                assert!(r.0 <= last, "stream {} answered past GOAWAY's {last}", r.0);
            }
        }
        // Nothing follows an error's GOAWAY.
        let last = last_frame_kind(&self.output);
        if heard.goaway.is_some_and(|g| g.1 != 0) {
            assert_eq!(last, Some(kind::GOAWAY), "frames after an error's GOAWAY");
        }
    }
}

fn last_frame_kind(mut out: &[u8]) -> Option<u8> {
    let mut last = None;
    while let Some(h) = Header::parse(out) {
        last = Some(h.kind);
        out = &out[HEADER_LEN + h.len as usize..];
    }
    last
}

fn run_one<H: Handler<Job = TestJob>>(run: &mut Run<H>, rng: &mut Rng, input: &[u8]) {
    let mut at = 0;
    while at < input.len() && !run.closed {
        let most = if rng.one_in(3) { 8 } else { 4096 };
        let piece = 1 + rng.below((input.len() - at).min(most));
        run.feed(&input[at..at + piece]);
        at += piece;
        match rng.below(12) {
            0 => run.answer_one(rng),
            1 => {
                let by = Duration::from_secs(rng.below(70) as u64);
                run.wait(by, false);
            }
            2 if rng.one_in(8) => {
                run.conn.close_after_response();
                run.feed(&[]);
            }
            _ => {}
        }
    }
    run.end(rng, input);
}

#[test]
fn mutated_conversations_end_in_a_valid_state_within_bounds() {
    let cases: usize = std::env::var("BERTH_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let seed: u64 = std::env::var("BERTH_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x6265_7274_6832);
    let seeds = seeds();
    let mut rng = Rng(seed);
    for case in 0..cases {
        let base = &seeds[rng.below(seeds.len())];
        let (mut head, mut frames) = split_frames(base);
        // The client's SETTINGS (and the frame after it) are mostly left alone, else most
        // cases end at the preface.
        if !head.is_empty() && !rng.one_in(10) {
            let keep = frames.len().min(1 + rng.below(2));
            for f in frames.drain(..keep) {
                head.extend_from_slice(&f);
            }
        }
        // Floods are long: keep a piece of them, so that cases stay many and quick.
        if frames.len() > 64 {
            let from = rng.below(frames.len() - 64);
            frames = frames[from..from + 64].to_vec();
        }
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut frames, &seeds);
        }
        let mut input = head;
        if rng.one_in(50) {
            // The preface itself damaged.
            let i = rng.below(PREFACE.len().min(input.len()).max(1));
            if let Some(b) = input.get_mut(i) {
                *b ^= 1 << rng.below(8);
            }
        }
        for f in &frames {
            input.extend_from_slice(f);
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut rng = Rng(seed ^ case as u64);
            if case % 3 == 2 {
                run_one(&mut Run::new(Sink, true), &mut rng, &input);
            } else {
                run_one(&mut Run::new(Demo, false), &mut rng, &input);
            }
        }));
        if std::env::var("BERTH_FUZZ_SHOW").is_ok() {
            eprintln!("case {case}: {} bytes", input.len());
        }
        if let Err(e) = result {
            eprintln!(
                "case {case} (seed {seed}) failed; input {} bytes:",
                input.len()
            );
            eprintln!("{input:02x?}");
            std::panic::resume_unwind(e);
        }
    }
}

#[test]
fn every_vector_ends_in_a_valid_state() {
    // The seeds themselves, unmutated, in one piece each, under both handlers.
    let mut rng = Rng(1);
    for input in seeds() {
        run_one(&mut Run::new(Demo, false), &mut rng, &input);
        run_one(&mut Run::new(Sink, true), &mut rng, &input);
    }
}
