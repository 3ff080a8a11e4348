//! std clients speaking the message protocol's bytes (docs/msg-protocol.md): a frame is an
//! 8-byte little-endian length word (the top bit set for a control frame) and its payload; and
//! engines served on a thread of their own that stop when dropped.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use berth::app::relay::EchoRelay;
use berth::msg::{Address, Endpoint, Engine, EngineConfig, MsgHandler};

/// Read timeout of every client made here: only a guard against hangs.
pub const WAIT: Duration = Duration::from_secs(10);

// ----- a std client ------------------------------------------------------------------------

/// A frame as a client sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A data frame's payload.
    Data(Vec<u8>),
    /// A control frame's text (`refused name-taken ...`).
    Control(String),
}

impl Frame {
    /// The payload's bytes, of either kind.
    pub fn payload(&self) -> &[u8] {
        match self {
            Frame::Data(p) => p,
            Frame::Control(t) => t.as_bytes(),
        }
    }
}

/// The top bit of the length word: a control frame.
pub const CONTROL: u64 = 1 << 63;

/// A data frame carrying `payload`.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(payload);
    f
}

/// A control frame carrying `text`.
pub fn control_frame(text: &str) -> Vec<u8> {
    let mut f = (text.len() as u64 | CONTROL).to_le_bytes().to_vec();
    f.extend_from_slice(text.as_bytes());
    f
}

/// Reads one frame: its length word as sent (with [`CONTROL`] for a control frame) and its
/// payload.
pub fn try_read_frame_raw(s: &mut impl Read) -> std::io::Result<(u64, Vec<u8>)> {
    let mut head = [0u8; 8];
    s.read_exact(&mut head)?;
    let len = u64::from_le_bytes(head);
    let mut payload = vec![0; (len & !CONTROL) as usize];
    s.read_exact(&mut payload)?;
    Ok((len, payload))
}

/// [`try_read_frame_raw`], panicking if the frame does not come whole.
pub fn read_frame_raw(s: &mut impl Read) -> (u64, Vec<u8>) {
    try_read_frame_raw(s).unwrap_or_else(|e| panic!("reading a frame: {e}"))
}

/// Reads one frame.
pub fn read_frame(s: &mut impl Read) -> std::io::Result<Frame> {
    let (len, payload) = try_read_frame_raw(s)?;
    Ok(if len & CONTROL != 0 {
        Frame::Control(String::from_utf8(payload).unwrap())
    } else {
        Frame::Data(payload)
    })
}

/// A TCP client of `addr` whose reads time out after [`WAIT`].
pub fn tcp(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// A UNIX-socket client of `path` whose reads time out after [`WAIT`].
pub fn unix_client(path: &std::path::Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// Connects and sends a keyword; returns the stream and the server's answer.
pub fn hello<S: Read + Write>(s: S, name: &str) -> (S, Frame) {
    hello_bytes(s, name.as_bytes())
}

/// [`hello`] with a keyword of any bytes.
pub fn hello_bytes<S: Read + Write>(s: S, name: &[u8]) -> (S, Frame) {
    try_hello(s, name).unwrap_or_else(|e| panic!("hello: {e}"))
}

/// Sends the keyword `name` and reads the answer; `Err` if the connection ends first (a TLS
/// alert after the handshake included).
pub fn try_hello<S: Read + Write>(mut s: S, name: &[u8]) -> std::io::Result<(S, Frame)> {
    s.write_all(&frame(name))?;
    let answer = read_frame(&mut s)?;
    Ok((s, answer))
}

/// The code of a control frame (`refused name-taken ...` -> `name-taken`).
pub fn code(f: &Frame) -> &str {
    match f {
        Frame::Control(t) => t.split(' ').nth(1).unwrap_or(""),
        Frame::Data(_) => panic!("expected a control frame, got {f:?}"),
    }
}

/// The answer to an admitted keyword: a data frame `OK`.
pub fn ok() -> Frame {
    Frame::Data(b"OK".to_vec())
}

/// Reads until the peer closes; true if it closed (rather than timing out).
pub fn closes(s: &mut impl Read) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

// ----- servers -----------------------------------------------------------------------------

/// `tcp://127.0.0.1:0`.
pub fn tcp_endpoint() -> Endpoint {
    Endpoint::parse("tcp://127.0.0.1:0").unwrap()
}

/// The socket address of a TCP (or UDP) endpoint.
pub fn addr_of(e: &Endpoint) -> SocketAddr {
    match e.address {
        Address::Tcp(a) | Address::Udp(a) => a,
        Address::Unix(_) => panic!("not an IP endpoint"),
    }
}

/// A UNIX socket's path in a fresh directory of its own, named after this process and `tag`.
pub fn socket_path(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("berth-msg-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("s.sock")
}

/// A handler-served engine on its own thread; stops when dropped.
pub struct Served {
    /// The endpoints it listens on, with the ports the system gave.
    pub endpoints: Vec<Endpoint>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// Serves `handler` on `endpoints` with `config`, on a thread of its own.
pub fn serve<H: MsgHandler + Send + 'static>(
    config: EngineConfig,
    endpoints: &[Endpoint],
    mut handler: H,
) -> Served {
    let mut engine = Engine::new(config).unwrap();
    let endpoints = endpoints
        .iter()
        .map(|e| engine.listen(e).unwrap())
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = thread::spawn(move || {
        engine
            .serve(
                &mut handler,
                &flag,
                Duration::from_millis(20),
                Duration::from_secs(2),
            )
            .unwrap();
    });
    Served {
        endpoints,
        stop,
        thread: Some(thread),
    }
}

/// [`serve`] with berth's echo relay (the demo handler: echo, `@name` relays).
pub fn echo(config: EngineConfig, endpoints: &[Endpoint]) -> Served {
    serve(config, endpoints, EchoRelay::new(64 << 20))
}

/// A client whose receive buffer is held to `bytes` (the kernel would otherwise let it grow to
/// `tcp_rmem`'s maximum, 32 MiB on some machines): a client that does not read then backs up
/// into the server quickly.
pub fn tcp_small_window(addr: SocketAddr, bytes: usize) -> TcpStream {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .unwrap();
    socket.set_recv_buffer_size(bytes).unwrap();
    socket.connect(&addr.into()).unwrap();
    let s: TcpStream = socket.into();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

// ----- a std echo server, not berth -----------------------------------------------------------

/// What the in-test server does besides echoing.
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    /// Answer the keyword with a control frame carrying this payload, then close.
    pub refuse: Option<String>,
    /// Flip this payload byte in every echo.
    pub corrupt_at: Option<u64>,
    /// Echo one byte less than was sent (the header says so too).
    pub shorten: bool,
    /// Read messages but never echo them.
    pub silent: bool,
}

/// A berth-framing echo server (the keyword, `OK`, then every message back) on std threads, a thread per connection.
pub struct EchoServer {
    /// `tcp://127.0.0.1:PORT` or `unix:///path`.
    pub endpoint: String,
    /// Messages echoed (fully written back).
    pub echoed: Arc<AtomicU64>,
    /// Every keyword received.
    pub names: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl EchoServer {
    /// On `127.0.0.1:0`.
    pub fn tcp(b: Behaviour) -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let endpoint = format!("tcp://{}", listener.local_addr().unwrap());
        EchoServer::start(endpoint, b, move || listener.accept().map(|(s, _)| s))
    }

    /// On a UNIX socket at `path` (replacing a file there).
    pub fn unix(b: Behaviour, path: &Path) -> EchoServer {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).expect("bind unix");
        let endpoint = format!("unix://{}", path.display());
        EchoServer::start(endpoint, b, move || listener.accept().map(|(s, _)| s))
    }

    /// Serves every connection `accept` returns on a thread of its own, for ever (the
    /// listener lives as long as the test process).
    pub fn start<S: Read + Write + Send + 'static>(
        endpoint: String,
        b: Behaviour,
        accept: impl Fn() -> io::Result<S> + Send + 'static,
    ) -> EchoServer {
        let server = EchoServer {
            endpoint,
            echoed: Arc::default(),
            names: Arc::default(),
        };
        let (echoed, names) = (server.echoed.clone(), server.names.clone());
        thread::spawn(move || loop {
            // A failed accept (a client gone before it was taken) is skipped.
            let Ok(s) = accept() else { continue };
            let (b, echoed, names) = (b.clone(), echoed.clone(), names.clone());
            thread::spawn(move || echo_one(s, &b, &echoed, &names));
        });
        server
    }

    /// Every keyword received, as text.
    pub fn names(&self) -> BTreeSet<String> {
        self.names
            .lock()
            .unwrap()
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect()
    }
}

/// Serves one connection; any I/O error (the client left) just ends it.
fn echo_one<S: Read + Write>(s: S, b: &Behaviour, echoed: &AtomicU64, names: &Mutex<Vec<Vec<u8>>>) {
    let _ = serve_io(s, b, echoed, names);
}

fn serve_io<S: Read + Write>(
    mut s: S,
    b: &Behaviour,
    echoed: &AtomicU64,
    names: &Mutex<Vec<Vec<u8>>>,
) -> io::Result<()> {
    let mut head = [0u8; 8];
    s.read_exact(&mut head)?;
    let len = u64::from_le_bytes(head);
    if len > 255 {
        return Ok(());
    }
    let mut name = vec![0; len as usize];
    s.read_exact(&mut name)?;
    names.lock().unwrap().push(name);
    if let Some(text) = &b.refuse {
        s.write_all(&control_frame(text))?;
        return Ok(());
    }
    s.write_all(&frame(b"OK"))?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        s.read_exact(&mut head)?;
        let len = u64::from_le_bytes(head);
        let echo_len = if b.shorten {
            len.saturating_sub(1)
        } else {
            len
        };
        if !b.silent {
            s.write_all(&echo_len.to_le_bytes())?;
        }
        // Streamed through a small buffer: a 9 MB message is echoed as it arrives.
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(buf.len() as u64) as usize;
            s.read_exact(&mut buf[..n])?;
            if let Some(k) = b.corrupt_at.filter(|k| (at..at + n as u64).contains(k)) {
                buf[(k - at) as usize] ^= 0x20;
            }
            let keep = (echo_len - at).min(n as u64) as usize;
            if !b.silent {
                s.write_all(&buf[..keep])?;
            }
            at += n as u64;
        }
        if !b.silent {
            echoed.fetch_add(1, Relaxed);
        }
    }
}
