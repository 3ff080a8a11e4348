//! Issue 40's HTTP/2 faults, over real sockets in every model they apply to: streams that held a
//! file descriptor and an encoder each past their windows, one connection's streams that held
//! every worker, and resets that did not cancel queued jobs; and, found since, streams whose
//! bodies, taken whole, were granted window without bound. Each case failed before its fix.
//!
//! What the server holds is read from the kernel, not from berth: the descriptors of this test
//! process (which runs the server) that point at the case's own file.

#[path = "support/server.rs"]
mod server;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use berth::drive::{Model, Timeouts};
use berth::proto::http::Compress;
use berth_testkit::h2::frame;
use berth_testkit::per_model;
use server::{Opts, IO_TIMEOUT};

berth::with_models!(per_model! {
    zero_window_streams_hold_a_bounded_number_of_files,
    compressed_streams_past_their_window_hold_little_and_meet_the_write_timeout,
    one_connection_cannot_hold_every_worker,
    a_reset_stream_s_queued_job_is_cancelled_at_once,
    many_bodies_taken_whole_hold_about_one_body_limit,
});

// Raw frames (RFC 9113 §4.1).
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// An HPACK literal field without indexing (each block stands alone).
fn literal(b: &mut Vec<u8>, name: &str, value: &str) {
    b.push(0);
    b.push(name.len() as u8);
    b.extend_from_slice(name.as_bytes());
    b.push(value.len() as u8);
    b.extend_from_slice(value.as_bytes());
}

/// `GET path` (`:method GET`, `:scheme http` from the static table), with `extra` fields.
fn get(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut b = vec![0x82, 0x86];
    literal(&mut b, ":path", path);
    literal(&mut b, ":authority", "x");
    for (k, v) in extra {
        literal(&mut b, k, v);
    }
    b
}

/// Connects with the preface and SETTINGS (INITIAL_WINDOW_SIZE = `window`, if given).
fn open(addr: SocketAddr, window: Option<u32>) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    let mut settings = Vec::new();
    if let Some(w) = window {
        settings.extend_from_slice(&4u16.to_be_bytes());
        settings.extend_from_slice(&w.to_be_bytes());
    }
    frame(&mut out, SETTINGS, 0, 0, &settings);
    s.write_all(&out).unwrap();
    s
}

/// Reads frames as they come, calling `each(kind, flags, stream, payload)`, until it returns
/// false or the connection ends (`false` then).
fn read_frames(s: &mut TcpStream, mut each: impl FnMut(u8, u8, u32, &[u8]) -> bool) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        while buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() < 9 + len {
                break;
            }
            let id = u32::from_be_bytes(buf[5..9].try_into().unwrap()) & 0x7fff_ffff;
            if !each(buf[3], buf[4], id, &buf[9..9 + len]) {
                return true;
            }
            buf.drain(..9 + len);
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A frame that ends its stream: DATA, or HEADERS for an answer without a body.
fn ends_stream(kind: u8, flags: u8) -> bool {
    (kind == DATA || kind == HEADERS) && flags & END_STREAM != 0
}

/// Sends a PING and reads until its ACK: every frame sent before it has been processed (a
/// connection takes its frames in order). Returns what came before the ACK.
fn ping_through(s: &mut TcpStream) -> Vec<(u8, u32)> {
    let mut out = Vec::new();
    frame(&mut out, PING, 0, 0, b"berth!!!");
    s.write_all(&out).unwrap();
    let mut seen = Vec::new();
    let acked = read_frames(s, |kind, flags, id, payload| {
        if kind == PING && flags & ACK != 0 && payload == b"berth!!!" {
            return false;
        }
        seen.push((kind, id));
        true
    });
    assert!(acked, "the connection ended before the PING's ACK");
    seen
}

/// Descriptors open on `path` in any process (the server runs in this one, or in the
/// children of the models that fork; the path is the case's own).
fn fds_on(path: &Path) -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .filter_map(|p| p.ok())
        // Numbered entries only: `self` and `thread-self` are this process again.
        .filter(|p| {
            p.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|p| std::fs::read_dir(p.path().join("fd")).ok())
        .flatten()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target == path)
        .count()
}

/// A directory of the case's own with `page.txt`: `len` bytes of text that compresses.
fn root_with_page(case: &str, m: Model, len: usize) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "berth-h2faults-{case}-{}-{}",
        m.name(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let line = b"berth serves this line again and again, a page that compresses well.\n";
    let text: Vec<u8> = line.iter().copied().cycle().take(len).collect();
    let page = dir.join("page.txt");
    std::fs::write(&page, text).unwrap();
    (dir.clone(), page.canonicalize().unwrap())
}

/// Waits for every descriptor on `path` to be closed.
fn files_closed(m: Model, path: &Path) {
    assert!(
        berth_testkit::wait::wait_for(IO_TIMEOUT, || fds_on(path) == 0),
        "{m:?}: {} descriptors still open on the file",
        fds_on(path)
    );
}

/// A server with `--compress` and a 1 MiB page, write timeout `write`, and a client with
/// one-byte windows whose `streams` streams ask for the page with `accept-encoding: br` and
/// never read: the server, the client's socket once all its frames were processed, what came
/// back before that, and the case's directory and page.
fn greedy_br(
    case: &str,
    m: Model,
    write: Duration,
    streams: u32,
) -> (
    server::ModelServer,
    TcpStream,
    Vec<(u8, u32)>,
    PathBuf,
    PathBuf,
) {
    let (root, page) = root_with_page(case, m, 1 << 20);
    let server = Opts::new(m)
        .files(&root)
        .compress(Some(Compress::default()))
        .timeouts(Timeouts {
            write,
            ..Timeouts::default()
        })
        .start();
    let mut s = open(server.addr, Some(1));
    let mut out = Vec::new();
    for i in 0..streams {
        let block = get("/files/page.txt", &[("accept-encoding", "br")]);
        frame(
            &mut out,
            HEADERS,
            END_HEADERS | END_STREAM,
            2 * i + 1,
            &block,
        );
    }
    s.write_all(&out).unwrap();
    let seen = ping_through(&mut s);
    (server, s, seen, root, page)
}

/// An honest HTTP/1.1 request on a connection of its own: its status line.
fn honest_get(addr: SocketAddr, path: &str) -> String {
    let mut c = server::connect(addr);
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    text.lines().next().unwrap_or("").to_string()
}

/// 128 streams ask for a file on a connection whose windows are shut (SETTINGS_INITIAL_WINDOW
/// _SIZE 0), and never read: the connection holds at most `files_per_connection` (8) of them
/// open, not one per stream, and gives them all back once the write timeout ends it. Before the
/// fix: 128 descriptors (13,000 for 100 such connections, and honest clients starved at the
/// process's limit).
fn zero_window_streams_hold_a_bounded_number_of_files(m: Model) {
    let (root, page) = root_with_page("zero", m, 64 * 1024);
    let server = Opts::new(m)
        .files(&root)
        .timeouts(Timeouts {
            write: Duration::from_secs(1),
            ..Timeouts::default()
        })
        .start();
    let mut s = open(server.addr, Some(0));
    let mut out = Vec::new();
    for i in 0..128u32 {
        frame(
            &mut out,
            HEADERS,
            END_HEADERS | END_STREAM,
            2 * i + 1,
            &get("/files/page.txt", &[]),
        );
    }
    s.write_all(&out).unwrap();
    ping_through(&mut s);
    // None of them can send: none need hold its file yet (8 at most may).
    let held = fds_on(&page);
    assert!(
        held <= 8,
        "{m:?}: {held} descriptors open on the file for one connection"
    );
    // Others are served meanwhile.
    assert_eq!(
        honest_get(server.addr, "/hello/world"),
        "HTTP/1.1 200 OK",
        "{m:?}"
    );
    // The window stays shut past the write timeout: the connection is ended, its files closed.
    read_frames(&mut s, |_, _, _, _| true);
    files_closed(m, &page);
    std::fs::remove_dir_all(root).unwrap();
}

/// As above with `--compress` and `accept-encoding: br` on a window of one byte: each stream
/// may send a byte at a time. Before the fix the encoder was fed the file a byte at a time for
/// every stream (25 CPU-seconds, 391 MB in 25 s, and the connection outlived its write timeout
/// stuck in that loop); now a stream reads a piece only when it can send, holds one piece's
/// output, and at most 8 streams of the connection hold a file and an encoder.
fn compressed_streams_past_their_window_hold_little_and_meet_the_write_timeout(m: Model) {
    let (server, s, seen, root, page) = greedy_br("br", m, Duration::from_secs(1), 128);
    let held = fds_on(&page);
    assert!(
        (1..=8).contains(&held),
        "{m:?}: {held} descriptors open on the file for one connection"
    );
    // What was sent before the PING's answer: heads, and a byte of DATA at most per stream.
    let data = seen.iter().filter(|(kind, _)| *kind == DATA).count();
    assert!(data <= 8, "{m:?}: {data} DATA frames past one-byte windows");
    assert_eq!(
        honest_get(server.addr, "/hello/world"),
        "HTTP/1.1 200 OK",
        "{m:?}"
    );
    // No window opens: the write timeout ends the connection (GOAWAY, then the close).
    let (tx, rx) = mpsc::channel();
    let mut reader = s.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut goaway = false;
        read_frames(&mut reader, |kind, _, _, _| {
            goaway |= kind == GOAWAY;
            true
        });
        let _ = tx.send(goaway);
    });
    let goaway = rx
        .recv_timeout(IO_TIMEOUT * 3)
        .unwrap_or_else(|_| panic!("{m:?}: the connection outlived its write timeout"));
    assert!(goaway, "{m:?}: told GOAWAY before the close");
    files_closed(m, &page);
    std::fs::remove_dir_all(root).unwrap();
}

/// One connection sends 16 `/test/slow` streams; then an honest client asks for one on a
/// connection of its own. Its job waits for at most the attacker's share of the workers
/// (`jobs_per_connection`, 2 here), not behind all 16: counted in answers, not seconds, the
/// attacker has at most 4 of its answers before the honest client has its own. Before the fix
/// all 16 of them came first (128 streams held the honest request 13.5-15.5 s, 30 s at worst).
/// `single` serves one connection at a time and the blocking models run a connection's jobs on
/// its own thread, so the queue this bounds is the worker pool's.
fn one_connection_cannot_hold_every_worker(m: Model) {
    if !m.needs().workers {
        return;
    }
    // One process (prefork): a second would give the honest client workers of its own.
    let server = Opts::new(m)
        .workers(2)
        .processes(1)
        .slow(Duration::from_millis(150))
        .start();
    let mut attacker = open(server.addr, None);
    let mut out = Vec::new();
    for i in 0..16u32 {
        frame(
            &mut out,
            HEADERS,
            END_HEADERS | END_STREAM,
            2 * i + 1,
            &get("/test/slow", &[]),
        );
    }
    attacker.write_all(&out).unwrap();
    ping_through(&mut attacker);
    // The order in which answers complete: the attacker's streams, and the honest request.
    let (tx, rx) = mpsc::channel::<&'static str>();
    let honest = {
        let (tx, addr) = (tx.clone(), server.addr);
        std::thread::spawn(move || {
            let status = honest_get(addr, "/test/slow");
            let _ = tx.send("honest");
            status
        })
    };
    let reader = std::thread::spawn(move || {
        let mut ended = 0;
        read_frames(&mut attacker, |kind, flags, _, _| {
            if ends_stream(kind, flags) {
                ended += 1;
                let _ = tx.send("attacker");
            }
            ended < 16
        });
    });
    let order: Vec<&str> = rx.iter().take(17).collect();
    assert_eq!(order.len(), 17, "{m:?}: every stream answered: {order:?}");
    let before = order.iter().position(|&w| w == "honest").expect("answered");
    assert!(
        before <= 4,
        "{m:?}: the honest request waited for {before} of one connection's jobs: {order:?}"
    );
    assert_eq!(honest.join().unwrap(), "HTTP/1.1 200 OK", "{m:?}");
    reader.join().unwrap();
}

/// Sixteen streams each send 60,000 bytes (within the first window) of bodies the handler
/// takes whole, with a body limit of 100,000: only the lowest stream is granted more window,
/// so the connection holds about one body limit however many streams send (before the fix
/// every stream was granted: one connection of 128 streams held 128 bodies of up to the
/// limit, 138 MB of RSS at `serve`'s 1m). Then every body ends, in turn, and is answered.
fn many_bodies_taken_whole_hold_about_one_body_limit(m: Model) {
    let server = Opts::new(m)
        .with_limits(|l| l.max_body_bytes = 100_000)
        .start();
    let mut s = open(server.addr, None);
    let streams: Vec<u32> = (0..16).map(|i| 2 * i + 1).collect();
    let mut out = Vec::new();
    for &id in &streams {
        let mut head = vec![0x83, 0x86]; // :method POST, :scheme http
        literal(&mut head, ":path", "/missing");
        literal(&mut head, ":authority", "x");
        frame(&mut out, HEADERS, END_HEADERS, id, &head);
        for _ in 0..4 {
            frame(&mut out, DATA, 0, id, &[b' '; 15_000]);
        }
    }
    s.write_all(&out).unwrap();
    let updated: Vec<u32> = ping_through(&mut s)
        .into_iter()
        .filter(|&(kind, id)| kind == WINDOW_UPDATE && id != 0)
        .map(|(_, id)| id)
        .collect();
    assert_eq!(
        updated,
        [1],
        "{m:?}: only the lowest stream is granted more window"
    );
    // Each body ends with more than its first window allowed: a stream can only end once it
    // has been granted, which it is as the streams before it are answered.
    let mut answered = 0;
    for &id in &streams {
        let mut out = Vec::new();
        frame(&mut out, DATA, END_STREAM, id, &[b' '; 10_000]);
        s.write_all(&out).unwrap();
        answered += ping_through(&mut s)
            .iter()
            .filter(|&&(kind, _)| kind == HEADERS)
            .count();
    }
    assert_eq!(answered, streams.len(), "{m:?}: every body is answered");
}

/// With one worker, a connection's first `/test/slow` job runs and its second waits in the
/// queue; the client resets the second stream. Its job is dropped unrun and counted cancelled
/// at once (not when a worker reaches it), and only the first job runs. Before the fix the
/// reset stream's job ran anyway (15 HEADERS+RST pairs a second held an honest request 10.6 s).
fn a_reset_stream_s_queued_job_is_cancelled_at_once(m: Model) {
    if !m.needs().workers {
        return;
    }
    let server = Opts::new(m)
        .workers(1)
        .slow(Duration::from_millis(400))
        .start();
    let mut s = open(server.addr, None);
    let mut out = Vec::new();
    frame(
        &mut out,
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &get("/test/slow", &[]),
    );
    frame(
        &mut out,
        HEADERS,
        END_HEADERS | END_STREAM,
        3,
        &get("/test/slow", &[]),
    );
    s.write_all(&out).unwrap();
    ping_through(&mut s);
    let mut rst = Vec::new();
    frame(&mut rst, RST_STREAM, 0, 3, &8u32.to_be_bytes());
    s.write_all(&rst).unwrap();
    // Counted when the reset is read, not when a worker reaches the job.
    server.wait_stats("the reset stream's job cancelled", |s| {
        s.jobs_cancelled == 1
    });
    // Stream 1 is answered; stream 3 never is.
    let mut answered = Vec::new();
    read_frames(&mut s, |kind, flags, id, _| {
        if ends_stream(kind, flags) {
            answered.push(id);
        }
        answered.is_empty()
    });
    assert_eq!(answered, [1], "{m:?}");
    let snap = server.wait_stats("the first job done", |s| s.jobs_done == 1);
    assert_eq!(snap.jobs_cancelled, 1, "{m:?}: {snap:?}");
    // The connection goes on: another request on it is answered.
    let mut more = Vec::new();
    frame(
        &mut more,
        HEADERS,
        END_HEADERS | END_STREAM,
        5,
        &get("/hello/world", &[]),
    );
    s.write_all(&more).unwrap();
    let mut five = false;
    read_frames(&mut s, |kind, flags, id, _| {
        five = ends_stream(kind, flags) && id == 5;
        !five
    });
    assert!(five, "{m:?}: stream 5 answered");
    assert_eq!(
        server.snapshot().jobs_done,
        1,
        "{m:?}: the reset stream's job never ran"
    );
}

/// A drain does not wait for a connection whose client grants no window: its answers can never
/// finish, so the shutdown deadline ends it (before the fix, SIGTERM did not end such a
/// connection within 10 s: the encoder loop held its thread). The write timeout is long here,
/// so that only the drain's deadline can be what ends it.
#[test]
fn a_drain_ends_a_connection_that_grants_no_window_at_its_deadline() {
    for m in [Model::Evloop, Model::Uring, Model::Actor] {
        let (server, mut s, _, root, page) = greedy_br("drain", m, Duration::from_secs(600), 16);
        server.drain(Duration::from_secs(1));
        // GOAWAY, then the close, long before the write timeout.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            read_frames(&mut s, |_, _, _, _| true);
            let _ = tx.send(());
        });
        rx.recv_timeout(IO_TIMEOUT * 2)
            .unwrap_or_else(|_| panic!("{m:?}: the drain left the connection open"));
        files_closed(m, &page);
        std::fs::remove_dir_all(root).unwrap();
    }
}
