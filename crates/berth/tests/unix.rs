//! HTTP over a UNIX stream socket, in every model (`Settings::addr` = `Addr::Unix`), over real
//! sockets: requests with std's `UnixStream` and with `curl --unix-socket` (GET, two requests
//! on one connection, a POST body); the socket file as nginx and uvicorn users expect it (a
//! stale one replaced, a live one refused with "already in use", anything else at the path
//! left alone, the file removed when the server stops); and clients that reset, half-close or
//! crowd in leave no connection open behind them.

use std::io::Write;
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use berth::app::{Demo, DemoConfig};
use berth::drive::{serve, Model, Server, Settings};
use berth::net::Addr;
use berth::stats::Stats;
use berth_testkit::{per_model, read_until, require, wait_for, ReadEnd, LIMIT};

// One test per case and model of the registry (`case::uring`): see `per_model!`.
berth::with_models!(per_model! {
    get_keep_alive_and_post_over_std_unix_stream,
    curl_over_the_unix_socket,
    a_stale_file_is_replaced_a_live_one_refused_and_the_file_goes_at_stop,
    resets_half_closes_and_crowds_leave_nothing_open,
});

/// A fresh directory for this test's socket, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("berth-unix-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn sock(&self) -> PathBuf {
        self.0.join("http.sock")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The demo served by `model` on the UNIX socket `path`, with the settings the per-model suites
/// use (1 accept thread, 4 workers, 2 prefork processes).
fn start(model: Model, path: &Path) -> Result<(Server, Arc<Stats>), berth::net::BindError> {
    let mut settings = Settings::new(model, "127.0.0.1:0".parse().unwrap());
    settings.addr = Addr::Unix(path.to_owned());
    settings.common.accept_threads = 1;
    settings.common.sizing.capacity = 1024;
    settings.common.workers = 4;
    settings.models.threaded.max_threads = 256;
    settings.models.forked.max_children = 256;
    settings.models.prefork.processes = 2;
    let stats = settings.new_stats().expect("counters");
    let demo = Demo::new(DemoConfig::default(), stats.clone());
    let (server, bound) = serve(&settings, demo, stats.clone())?;
    assert_eq!(bound, Addr::Unix(path.to_owned()), "{model}");
    Ok((server, stats))
}

fn connect(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).expect("connect");
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.set_write_timeout(Some(LIMIT)).unwrap();
    s
}

/// Reads one response with a `Content-Length`: its status and body.
fn response(s: &mut UnixStream) -> (u16, Vec<u8>) {
    let mut buf = Vec::new();
    let head_end = |b: &[u8]| b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let end = read_until(s, &mut buf, LIMIT, |b| head_end(b).is_some()).unwrap();
    assert_eq!(end, ReadEnd::Done, "no response head: {buf:?}");
    let at = head_end(&buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..at]).to_ascii_lowercase();
    let status = head[9..12].parse().expect("a status");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let end = read_until(s, &mut buf, LIMIT, |b| b.len() >= at + len).unwrap();
    assert_eq!(end, ReadEnd::Done, "body cut short: {buf:?}");
    (status, buf[at..at + len].to_vec())
}

fn get_keep_alive_and_post_over_std_unix_stream(model: Model) {
    let dir = Dir::new(&format!("std-{model}"));
    let (server, _) = start(model, &dir.sock()).unwrap();
    let mut s = connect(&dir.sock());
    s.write_all(b"GET /hello/world HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(
        response(&mut s),
        (200, b"Hello, World!".to_vec()),
        "{model}"
    );
    // The same connection, kept alive: a POST with a body.
    let body = br#"{"a": "abc", "b": [1, 2]}"#;
    write!(
        s,
        "POST /reverse HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let (status, answer) = response(&mut s);
    assert_eq!(status, 200, "{model}");
    assert_eq!(answer, br#"{"data":["cba",[2,1]]}"#, "{model}");
    drop(s);
    server.shutdown();
    server.join();
}

fn curl_over_the_unix_socket(model: Model) {
    require("curl");
    let dir = Dir::new(&format!("curl-{model}"));
    let (server, _) = start(model, &dir.sock()).unwrap();
    let sock = dir.sock();
    let curl = |args: &[&str]| {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "20", "--unix-socket"])
            .arg(&sock)
            .args(args)
            .output()
            .expect("curl runs");
        assert!(out.status.success(), "{model}: curl {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    // Two URLs in one curl: the second reuses the connection (no new connect).
    let out = curl(&[
        "http://localhost/hello/world",
        "http://localhost/hello/world",
        "-w",
        " connects=%{num_connects}\n",
    ]);
    assert_eq!(
        out, "Hello, World! connects=1\nHello, World! connects=0\n",
        "{model}"
    );
    let out = curl(&["-d", r#"{"a": "héllo"}"#, "http://localhost/reverse"]);
    assert_eq!(out, r#"{"data":["olléh"]}"#, "{model}");
    server.drain(Duration::from_secs(5));
    server.join();
    assert!(!sock.exists(), "{model}: the socket file is left behind");
}

fn a_stale_file_is_replaced_a_live_one_refused_and_the_file_goes_at_stop(model: Model) {
    let dir = Dir::new(&format!("file-{model}"));
    let sock = dir.sock();
    // What a server that crashed leaves: a socket file nobody accepts on.
    drop(UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let (server, _) = start(model, &sock).expect("a stale socket file is replaced");
    connect(&sock);
    // A second server on the same path is refused, and the first one keeps serving.
    let err = start(model, &sock).map(|_| ()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("address unix://{} already in use", sock.display()),
        "{model}"
    );
    let mut s = connect(&sock);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(response(&mut s).0, 200, "{model}");
    drop(s);
    // A clean stop removes the file.
    server.drain(Duration::from_secs(5));
    server.join();
    assert!(!sock.exists(), "{model}: the socket file is left behind");
}

fn resets_half_closes_and_crowds_leave_nothing_open(model: Model) {
    let dir = Dir::new(&format!("attack-{model}"));
    let sock = dir.sock();
    let (server, stats) = start(model, &sock).unwrap();
    // Half-close: the request, then our end of the stream; the answer still comes, then the
    // server's end.
    let mut s = connect(&sock);
    s.write_all(b"GET /hello/world HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(
        response(&mut s),
        (200, b"Hello, World!".to_vec()),
        "{model}"
    );
    let mut rest = Vec::new();
    assert_eq!(
        read_until(&mut s, &mut rest, LIMIT, |_| false).unwrap(),
        ReadEnd::Closed,
        "{model}: not closed after a half-close"
    );
    // Clients that leave mid-request, or with the answer unread (a UNIX socket closed with
    // bytes unread is reset), or before the slow job's answer.
    for request in [
        &b"GET /hello/wor"[..],
        b"GET /hello/world HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /test/slow HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /reverse HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\"",
    ] {
        for _ in 0..8 {
            let mut s = connect(&sock);
            s.write_all(request).unwrap();
        }
    }
    // A crowd at once (fewer at a time for `single`, which serves one connection at a time
    // and lets the others wait in the backlog).
    let crowd = if model.caps().concurrent { 64 } else { 8 };
    let mut open: Vec<UnixStream> = (0..crowd)
        .map(|_| {
            let mut s = connect(&sock);
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    for s in &mut open {
        assert_eq!(response(s).0, 200, "{model}");
    }
    drop(open);
    // Everything that came is closed again, and the server still answers.
    assert!(
        wait_for(LIMIT, || stats.snapshot().connections_open == 0),
        "{model}: connections left open: {:?}",
        stats.snapshot()
    );
    let mut s = connect(&sock);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(response(&mut s).0, 200, "{model}");
    drop(s);
    server.shutdown();
    server.join();
    assert!(!sock.exists(), "{model}");
}

/// A path whose directory does not exist, and a path holding something other than a socket:
/// refused with a reason that names the path, and what is there is left alone.
#[test]
fn a_missing_directory_or_a_file_at_the_path_is_refused_with_its_reason() {
    let dir = Dir::new("refused");
    let missing = dir.0.join("no/such/dir/http.sock");
    let err = start(Model::Evloop, &missing).map(|_| ()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot listen on unix://{}: the directory {} does not exist",
            missing.display(),
            missing.parent().unwrap().display()
        )
    );
    let file = dir.0.join("precious.txt");
    std::fs::write(&file, b"keep me").unwrap();
    let err = start(Model::Evloop, &file).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("is not a socket"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}
