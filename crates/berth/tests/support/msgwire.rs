//! Test support: std clients speaking the message protocol's bytes (docs/msg-protocol.md), and
//! engines served on a thread of their own that stop when dropped.
//!
//! Include it with `#[path = "support/msgwire.rs"] mod msgwire;`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use berth::app::relay::EchoRelay;
use berth::msg::{Address, Endpoint, Engine, EngineConfig, MsgHandler};

pub const WAIT: Duration = Duration::from_secs(10);

// ----- a std client ------------------------------------------------------------------------

/// A frame as a client sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    Data(Vec<u8>),
    Control(String),
}

pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(payload);
    f
}

pub fn read_frame(s: &mut impl Read) -> std::io::Result<Frame> {
    let mut head = [0u8; 8];
    s.read_exact(&mut head)?;
    let len = u64::from_le_bytes(head);
    let control = len & (1 << 63) != 0;
    let mut payload = vec![0; (len & !(1 << 63)) as usize];
    s.read_exact(&mut payload)?;
    Ok(if control {
        Frame::Control(String::from_utf8(payload).unwrap())
    } else {
        Frame::Data(payload)
    })
}

pub fn tcp(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

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
pub fn hello_bytes<S: Read + Write>(mut s: S, name: &[u8]) -> (S, Frame) {
    s.write_all(&frame(name)).unwrap();
    let answer = read_frame(&mut s).unwrap();
    (s, answer)
}

/// The code of a control frame (`refused name-taken ...` -> `name-taken`).
pub fn code(f: &Frame) -> &str {
    match f {
        Frame::Control(t) => t.split(' ').nth(1).unwrap_or(""),
        Frame::Data(_) => panic!("expected a control frame, got {f:?}"),
    }
}

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

pub fn tcp_endpoint() -> Endpoint {
    Endpoint::parse("tcp://127.0.0.1:0").unwrap()
}

pub fn addr_of(e: &Endpoint) -> SocketAddr {
    match e.address {
        Address::Tcp(a) | Address::Udp(a) => a,
        Address::Unix(_) => panic!("not an IP endpoint"),
    }
}

pub fn socket_path(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("berth-msg-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("s.sock")
}

/// A handler-served engine on its own thread; stops when dropped.
pub struct Served {
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
