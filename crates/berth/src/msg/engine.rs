//! The engine and its polling API, after seed 003: listen on any mix of endpoints, connect to
//! servers, then call [`Engine::io_iteration`] in a loop and act on the sets it returns.
//!
//! ```no_run
//! use berth::msg::{Endpoint, Engine, EngineConfig};
//! let mut engine = Engine::new(EngineConfig::default())?;
//! engine.listen(&Endpoint::parse("tcp://127.0.0.1:9100").unwrap())?;
//! loop {
//!     let r = engine.io_iteration(None)?;
//!     for client in r.clients_have_data_to_read {
//!         for msg in engine.messages(client) {
//!             engine.send_message(client, &msg); // echo
//!         }
//!     }
//! }
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::{HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::TcpStream as StdTcpStream;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::msg::frame::{encode, CONTROL_BIT, HEADER_LEN};
use berth_proto::msg::handshake::{parse_control, OK_FRAME};
use berth_proto::msg::{Name, Peer, Piece, Transport};
use mio::net::{TcpListener, TcpStream, UdpSocket, UnixListener, UnixStream};
use mio::{Events, Poll, Token, Waker};

use super::client::{ClientId, Stream};
use super::core::{Arrival, Core, EngineConfig, ListenSock, Listener, Note, Sink};
use super::stats::MsgStats;
use crate::net::tls::{TlsAcceptor, TlsConnector, TlsSettings, TlsStream};
use crate::net::{
    bind_tcp, bind_udp, bind_unix, Acceptor, Addr, Endpoint, ListenConfig, Scheme, Socket,
    SocketFile, TlsFiles,
};

const WAKER: Token = Token(usize::MAX);

/// What one [`Engine::io_iteration`] saw, named as in seed 003.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IoIterationResult {
    /// Clients admitted under a name given in advance (`--expect`).
    pub newly_connected_expected_clients: HashSet<ClientId>,
    /// Clients admitted under any other name, or anonymously.
    pub newly_connected_unknown_clients: HashSet<ClientId>,
    /// Admitted clients that are gone (their ids are dead from now on).
    pub clients_with_disconnected_connection: HashSet<ClientId>,
    /// Clients with whole messages waiting in [`Engine::messages`].
    pub clients_have_data_to_read: HashSet<ClientId>,
    /// Clients whose output queue has been written out completely.
    pub clients_with_empty_output_fifo: HashSet<ClientId>,
}

impl IoIterationResult {
    fn is_empty(&self) -> bool {
        self.newly_connected_expected_clients.is_empty()
            && self.newly_connected_unknown_clients.is_empty()
            && self.clients_with_disconnected_connection.is_empty()
            && self.clients_have_data_to_read.is_empty()
            && self.clients_with_empty_output_fifo.is_empty()
    }
}

/// Why [`Engine::connect`] failed.
#[derive(Debug)]
pub enum ConnectError {
    /// The socket could not be opened, or broke during the handshake.
    Io(io::Error),
    /// The server refused us, with its code and explanation.
    Refused {
        /// The refusal code, e.g. `name-taken`.
        code: String,
        /// The server's explanation.
        text: String,
    },
    /// The server's answer was not the protocol's.
    Protocol(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Io(e) => write!(f, "{e}"),
            ConnectError::Refused { code, text } if text.is_empty() => write!(f, "refused: {code}"),
            ConnectError::Refused { code, text } => write!(f, "refused: {code} ({text})"),
            ConnectError::Protocol(s) => write!(f, "protocol error: {s}"),
        }
    }
}

impl std::error::Error for ConnectError {}

impl From<io::Error> for ConnectError {
    fn from(e: io::Error) -> Self {
        ConnectError::Io(e)
    }
}

/// Gathers what happens into an [`IoIterationResult`] and inboxes.
#[derive(Default)]
struct Collector {
    result: IoIterationResult,
}

impl Sink for Collector {
    fn streams(&self) -> bool {
        false
    }
    fn message(&mut self, core: &mut Core, id: ClientId, msg: &[u8]) {
        core.inbox_push(id, msg);
        self.result.clients_have_data_to_read.insert(id);
    }
    fn message_owned(&mut self, core: &mut Core, id: ClientId, msg: Vec<u8>) {
        core.inbox_push_owned(id, msg);
        self.result.clients_have_data_to_read.insert(id);
    }
    fn piece(&mut self, _: &mut Core, _: ClientId, _: Piece<'_>) {}
    fn note(&mut self, _: &mut Core, note: Note) {
        let r = &mut self.result;
        match note {
            Note::Connected(id, Arrival::Expected) => {
                r.newly_connected_expected_clients.insert(id);
            }
            Note::Connected(id, Arrival::Unknown | Arrival::Anonymous) => {
                r.newly_connected_unknown_clients.insert(id);
            }
            Note::Connected(_, Arrival::Outbound) => {}
            Note::Drained(id) => {
                r.clients_with_empty_output_fifo.insert(id);
            }
            Note::Lost(id, _, _) => {
                r.clients_with_disconnected_connection.insert(id);
            }
        }
    }
}

/// A message engine: listeners, clients, and servers it is a client of, on one thread.
pub struct Engine {
    poll: Poll,
    events: Events,
    pub(crate) core: Core,
    collector: Collector,
    due: Vec<usize>,
    waker: Arc<Waker>,
}

impl Engine {
    /// An engine with no listeners yet.
    pub fn new(config: EngineConfig) -> io::Result<Engine> {
        Engine::with_stats(config, Arc::default())
    }

    /// An engine counting into `stats` (shared with other engines of one server).
    pub fn with_stats(config: EngineConfig, stats: Arc<MsgStats>) -> io::Result<Engine> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let registry = poll.registry().try_clone()?;
        Ok(Engine {
            poll,
            events: Events::with_capacity(1024),
            core: Core::new(registry, config, stats),
            collector: Collector::default(),
            due: Vec::new(),
            waker,
        })
    }

    /// Starts listening on `endpoint`; returns it with the port the system chose for port 0.
    /// A TCP or UDP port another process listens on is refused ("already in use") unless
    /// [`EngineConfig::listen`]'s `exclusive` is off, to share it. `quic://` is refused
    /// (`Unsupported`): the engine does not serve it yet.
    pub fn listen(&mut self, endpoint: &Endpoint) -> io::Result<Endpoint> {
        self.listen_on(endpoint, self.core.config.listen.exclusive)
    }

    /// Listens on a TCP endpoint another engine of this process already listens on (the
    /// threads of one [`MsgServer`](super::MsgServer)): no check that the port is unshared.
    pub(crate) fn join_listen(&mut self, endpoint: &Endpoint) -> io::Result<Endpoint> {
        self.listen_on(endpoint, false)
    }

    fn listen_on(&mut self, endpoint: &Endpoint, exclusive: bool) -> io::Result<Endpoint> {
        if endpoint.scheme() == Scheme::Quic {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{endpoint}: quic:// is not served by the msg engine yet"),
            ));
        }
        let mut bound = endpoint.clone();
        let sock = match &endpoint.address {
            Addr::Tcp(addr) => {
                // The first TCP endpoint takes a socket the service manager passed.
                let first_tcp = !self
                    .core
                    .listeners
                    .iter()
                    .any(|l| matches!(l.endpoint.address, Addr::Tcp(_)));
                let listen = &self.core.config.listen;
                let config = ListenConfig {
                    // Always, so that the engine threads of a server share the port.
                    reuse_port: true,
                    exclusive,
                    inherited: listen.inherited.clone().filter(|_| first_tcp),
                    ..listen.clone()
                };
                let l = bind_tcp(*addr, 1, config)
                    .map_err(|e| io::Error::new(e.source.kind(), e.to_string()))?
                    .remove(0);
                bound.address = Addr::Tcp(l.local_addr()?);
                ListenSock::Tcp(TcpListener::from_std(l))
            }
            Addr::Unix(path) => {
                let listener = UnixListener::from_std(bind_unix(path)?);
                ListenSock::Unix(listener, SocketFile::bound(path)?)
            }
            Addr::Udp(addr) => {
                let s = bind_udp(*addr, !self.core.config.listen.exclusive)?;
                bound.address = Addr::Udp(s.local_addr()?);
                ListenSock::Udp(UdpSocket::from_std(s))
            }
        };
        let mut listener = Listener::new(bound.clone(), sock);
        if let Some(files) = &endpoint.tls {
            listener.transport = Acceptor::Tls(self.tls_for(files)?);
        }
        self.core.add_listener(listener)?;
        Ok(bound)
    }

    /// The TLS of every `tls://` listener of this engine (a clone of each: reloading one
    /// reloads the listener's).
    pub fn tls_acceptors(&self) -> Vec<TlsAcceptor> {
        self.core
            .listeners
            .iter()
            .filter_map(|l| match &l.transport {
                Acceptor::Tls(tls) => Some(tls.clone()),
                _ => None,
            })
            .collect()
    }

    /// The TLS of a `tls://` listener: its own files, else the engine's
    /// (`EngineConfig::listen`'s `transport`).
    fn tls_for(&self, files: &TlsFiles) -> io::Result<TlsAcceptor> {
        let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => {
                let settings = TlsSettings {
                    alpn: Vec::new(),
                    client_ca: files.client_ca.clone(),
                    ..TlsSettings::http(cert, key)
                };
                TlsAcceptor::new(settings).map_err(|e| invalid(format!("TLS: {e}")))
            }
            (None, None) => match &self.core.config.listen.transport {
                Acceptor::Tls(tls) => Ok(tls.clone()),
                Acceptor::Plain => Err(invalid(
                    "a tls:// endpoint needs cert= and key= (or --tls-cert and --tls-key)".into(),
                )),
            },
            _ => Err(invalid(
                "a tls:// endpoint needs both cert= and key=".into(),
            )),
        }
    }

    /// Connects to a server as client `name` (any bytes; empty: anonymous), waiting up to
    /// `timeout` for its answer. The server is then a client of this engine like any other:
    /// send to it, read from it, hear when it goes.
    pub fn connect(
        &mut self,
        endpoint: &Endpoint,
        name: impl AsRef<[u8]>,
        timeout: Duration,
    ) -> Result<ClientId, ConnectError> {
        if endpoint.websocket.is_some() {
            return Err(ConnectError::Protocol(format!(
                "{endpoint}: WebSocket endpoints are for listening (berth connects over tcp://, \
                 tls://, unix:// or udp://)"
            )));
        }
        let name = name.as_ref();
        let label = endpoint.to_string();
        let (stream, peer) = match &endpoint.address {
            Addr::Tcp(addr) if endpoint.tls.is_some() => {
                let files = endpoint.tls.as_ref().expect("matched");
                let ca =
                    match (&files.ca, files.insecure) {
                        (Some(ca), _) => Some(ca.as_path()),
                        (None, true) => None,
                        (None, false) => return Err(ConnectError::Protocol(
                            "a tls:// client needs ?ca=FILE to verify the server (or ?insecure)"
                                .to_owned(),
                        )),
                    };
                let connector = match (&files.cert, &files.key) {
                    (Some(cert), Some(key)) => TlsConnector::with_identity(ca, &[], cert, key),
                    _ => TlsConnector::new(ca, &[]),
                }
                .map_err(|e| ConnectError::Protocol(format!("TLS: {e}")))?;
                let s = StdTcpStream::connect_timeout(addr, timeout)?;
                s.set_nodelay(self.core.config.listen.nodelay)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                let mut tls = connector.connect(&endpoint.host, s)?;
                tls.complete_handshake()?;
                handshake(&mut tls, name, timeout)?;
                tls.get_ref().set_nonblocking(true)?;
                let peer = Peer {
                    transport: Transport::Tls,
                    ip: Some(addr.ip()),
                };
                (
                    Stream::Tls(Box::new(
                        tls.map_socket(|s| Socket::Tcp(TcpStream::from_std(s))),
                    )),
                    peer,
                )
            }
            Addr::Tcp(addr) => {
                let mut s = StdTcpStream::connect_timeout(addr, timeout)?;
                s.set_nodelay(self.core.config.listen.nodelay)?;
                handshake(&mut s, name, timeout)?;
                s.set_nonblocking(true)?;
                let peer = Peer {
                    transport: Transport::Tcp,
                    ip: Some(addr.ip()),
                };
                (Stream::Plain(Socket::Tcp(TcpStream::from_std(s))), peer)
            }
            Addr::Unix(path) => {
                let mut s = StdUnixStream::connect(path)?;
                handshake(&mut s, name, timeout)?;
                s.set_nonblocking(true)?;
                let peer = Peer {
                    transport: Transport::Unix,
                    ip: None,
                };
                (Stream::Plain(Socket::Unix(UnixStream::from_std(s))), peer)
            }
            Addr::Udp(_) if endpoint.tls.is_some() => {
                return Err(ConnectError::Protocol(
                    "client mode does not speak quic:// yet; connect with tls:// or tcp://"
                        .to_owned(),
                ))
            }
            Addr::Udp(_) => {
                return Err(ConnectError::Protocol(
                    "client mode speaks tcp:// and unix://; use a datagram socket for udp://"
                        .to_owned(),
                ))
            }
        };
        Ok(self.core.add_outbound(stream, peer, label)?)
    }

    /// Queues one message to `client`. `false` if the client is gone (or closing).
    pub fn send_message(&mut self, client: ClientId, msg: &[u8]) -> bool {
        self.core.send(client, msg)
    }

    /// Queues one message whose memory stays with its owner until it is written: a message of
    /// 16 KiB or more goes to the socket from where it lies, without being copied into the
    /// queue, and `msg` is dropped once the socket has taken it (a binding passes its
    /// language's immutable byte strings this way). `false` if the client is gone.
    pub fn send_shared<T>(&mut self, client: ClientId, msg: T) -> bool
    where
        T: AsRef<[u8]> + Send + 'static,
    {
        self.core.send_shared(client, msg)
    }

    /// Queues a sequence of messages to `client`, drawn lazily as its queue drains: a million
    /// messages are never in memory at once. `false` if the client is gone.
    pub fn send_messages<I>(&mut self, client: ClientId, messages: I) -> bool
    where
        I: IntoIterator,
        I::IntoIter: Send + 'static,
        I::Item: AsRef<[u8]>,
    {
        self.core.send_messages(client, messages)
    }

    /// Runs one round of I/O: waits up to `timeout` (`None`: until something happens) for
    /// readiness, reads, writes, times out, and reports what happened.
    pub fn io_iteration(&mut self, timeout: Option<Duration>) -> io::Result<IoIterationResult> {
        // Messages of clients that left in the last round were the last round's to take.
        self.core.left_inboxes.clear();
        let mut collector = std::mem::take(&mut self.collector);
        self.core.settle(&mut collector);
        let timeout = if collector.result.is_empty() {
            timeout
        } else {
            Some(Duration::ZERO)
        };
        let result = self.turn(timeout, &mut collector);
        self.collector = Collector::default();
        result.map(|()| collector.result)
    }

    /// One round: poll, handle every event, expire timers, settle.
    pub(crate) fn turn(
        &mut self,
        timeout: Option<Duration>,
        sink: &mut dyn Sink,
    ) -> io::Result<()> {
        let config = &self.core.config;
        self.core.limit = match sink.streams() {
            true => config.max_streamed,
            false => config.max_message,
        };
        self.core.settle(sink);
        let timeout = match (timeout, self.core.timer_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        self.core.now = Instant::now();
        for event in self.events.iter() {
            if event.token() == WAKER {
                continue;
            }
            let readable = event.is_readable() || event.is_read_closed() || event.is_error();
            let writable = event.is_writable() || event.is_write_closed();
            self.core.ready(event.token(), readable, writable, sink);
        }
        self.core.expire(&mut self.due);
        self.core.settle(sink);
        Ok(())
    }

    /// From now on (`on`), connections accepted on framed TCP, TLS and UNIX listeners wait
    /// for the application to decide, per connection, how they are read ([`Engine::decide`]):
    /// each is listed once by [`Engine::undecided`] and is not read until decided. Its
    /// handshake timeout runs from its accept, through the decision. (FI-ASockIOCore's
    /// `raw_checker_for_new_incoming_connections`; raw and WebSocket listeners are not asked.)
    pub fn deciding(&mut self, on: bool) {
        self.core.deciding = on;
    }

    /// Takes the connections accepted since the last call that wait for [`Engine::decide`].
    pub fn undecided(&mut self) -> Vec<ClientId> {
        std::mem::take(&mut self.core.undecided)
    }

    /// Decides how an undecided connection is read: `raw`, it is admitted at once (reported
    /// among the newly connected unknown clients, anonymous) and its bytes are messages as
    /// they come, its output unframed; else it starts the keyword handshake as on any framed
    /// listener. `false` if it is gone (closed, timed out) or not undecided. To refuse one,
    /// [`Engine::close`] it.
    pub fn decide(&mut self, client: ClientId, raw: bool) -> bool {
        self.core.decide_framing(client, raw)
    }

    /// The address of a TCP, TLS or UDP client's peer (`None` for UNIX sockets).
    pub fn peer_addr(&self, client: ClientId) -> Option<std::net::SocketAddr> {
        self.core.peer_addr(client)
    }

    /// Expects a client named `name` from now on (as `--expect` does at startup): when it
    /// connects it is reported among [`IoIterationResult::newly_connected_expected_clients`].
    pub fn expect(&mut self, name: Name) {
        self.core.config.policy.expected.insert(name);
    }

    /// Takes the whole messages `client` has sent since the last call.
    pub fn messages(&mut self, client: ClientId) -> VecDeque<Vec<u8>> {
        self.core.take_inbox(client)
    }

    /// Gives back the buffer of a message taken with [`Engine::messages`] once its bytes are
    /// elsewhere: a large one is kept for the next large message, which then needs no new
    /// allocation.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.core.pool_put(Some(buf));
    }

    /// Closes `client` once its queued output is written.
    pub fn close(&mut self, client: ClientId) {
        self.core.close(client);
    }

    /// The name `client` registered under (for a server we connected to: its endpoint). A
    /// name is bytes: [`Name::as_str`] if you expect UTF-8; `Display` shows it escaped.
    pub fn name(&self, client: ClientId) -> Option<&Name> {
        self.core.get(client)?.name.as_ref()
    }

    /// The client registered under `name` (its bytes, as the client sent them: a `&str`, a
    /// byte string or a [`Name`]).
    pub fn client(&self, name: impl AsRef<[u8]>) -> Option<ClientId> {
        self.core.lookup(name.as_ref())
    }

    /// Bytes queued to `client` and not yet written.
    pub fn pending_output(&self, client: ClientId) -> usize {
        self.core.get(client).map_or(0, |c| c.out.queued())
    }

    /// Live clients (including servers this engine connected to).
    pub fn client_count(&self) -> usize {
        self.core.clients.len()
    }

    /// The endpoints this engine listens on, ports resolved.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        self.core
            .listeners
            .iter()
            .map(|l| l.endpoint.clone())
            .collect()
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<MsgStats> {
        &self.core.stats
    }

    /// Wakes a blocked [`Engine::io_iteration`] from another thread.
    pub fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    /// Stops listening, ends every client with the `shutdown` frame after its queued output,
    /// and runs I/O until they are all gone or `timeout` passes.
    pub fn shutdown(&mut self, timeout: Duration) -> io::Result<()> {
        let mut sink = Collector::default();
        self.shutdown_with(
            timeout,
            || false,
            |engine, wait| engine.turn(Some(wait), &mut sink),
        )
    }

    /// The shutdown both APIs share: clients finish the message they are sending (for up to
    /// half of `grace`), then everyone gets the `shutdown` frame after its queued output, and
    /// I/O runs (through `turn`) until they are gone or `grace` has passed. Listening stops at
    /// once; once `abort` says so (a stop now), the rest is skipped and whatever is still open
    /// is closed when the engine is dropped.
    pub(crate) fn shutdown_with(
        &mut self,
        grace: Duration,
        abort: impl Fn() -> bool,
        mut turn: impl FnMut(&mut Engine, Duration) -> io::Result<()>,
    ) -> io::Result<()> {
        self.core.begin_shutdown();
        let start = Instant::now();
        let (force_at, deadline) = (start + grace / 2, start + grace);
        loop {
            if abort() {
                return Ok(());
            }
            let now = Instant::now();
            let ended = self.core.shutdown_step(now >= force_at);
            if (ended && self.core.clients.is_empty()) || now >= deadline {
                return Ok(());
            }
            // Short turns while waiting for the other threads to go quiet.
            let wait = if ended { 50 } else { 5 };
            let left = deadline.saturating_duration_since(now);
            turn(self, left.min(Duration::from_millis(wait)))?;
        }
    }
}

/// The client's side of the handshake, blocking: keyword out, `OK` or a refusal back. Reads
/// exactly the answer, so frames the server sends right behind it stay in the socket.
fn handshake<S: Read + Write + SetTimeout>(
    s: &mut S,
    name: &[u8],
    timeout: Duration,
) -> Result<(), ConnectError> {
    s.set_timeouts(Some(timeout))?;
    let mut frame = Vec::with_capacity(HEADER_LEN + name.len());
    encode(name, &mut frame);
    s.write_all(&frame)?;
    let mut head = [0u8; HEADER_LEN];
    s.read_exact(&mut head)?;
    let len = u64::from_le_bytes(head);
    if len & CONTROL_BIT != 0 {
        let len = len & !CONTROL_BIT;
        if len > 4096 {
            return Err(ConnectError::Protocol(format!(
                "control frame of {len} bytes"
            )));
        }
        let mut payload = vec![0; len as usize];
        s.read_exact(&mut payload)?;
        return Err(match parse_control(&payload) {
            Some(c) => ConnectError::Refused {
                code: c.code,
                text: c.text,
            },
            None => ConnectError::Protocol("unreadable control frame".to_owned()),
        });
    }
    if head != OK_FRAME[..HEADER_LEN] {
        return Err(ConnectError::Protocol(format!(
            "expected OK, got a frame of {len} bytes"
        )));
    }
    let mut ok = [0u8; 2];
    s.read_exact(&mut ok)?;
    if ok != OK_FRAME[HEADER_LEN..] {
        return Err(ConnectError::Protocol(format!("expected OK, got {ok:?}")));
    }
    s.set_timeouts(None)?;
    Ok(())
}

/// Read and write timeouts on either kind of std stream.
trait SetTimeout {
    fn set_timeouts(&mut self, t: Option<Duration>) -> io::Result<()>;
}

impl SetTimeout for StdTcpStream {
    fn set_timeouts(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
}

impl SetTimeout for TlsStream<StdTcpStream> {
    fn set_timeouts(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.get_ref().set_read_timeout(t)?;
        self.get_ref().set_write_timeout(t)
    }
}

impl SetTimeout for StdUnixStream {
    fn set_timeouts(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::client::{Io, Stream};

    /// `EngineConfig::nodelay` reaches the sockets: accepted connections inherit it from the
    /// listener, and a connection made in client mode gets it too (issue 30: FI-ASockIOCore's
    /// `use_nodelay_inet`, off by default there).
    #[test]
    fn nodelay_follows_the_config() {
        for nodelay in [true, false] {
            let mut config = EngineConfig::default();
            config.listen.nodelay = nodelay;
            let mut server = Engine::new(config.clone()).unwrap();
            let at = server
                .listen(&Endpoint::parse("tcp://127.0.0.1:0").unwrap())
                .unwrap();
            let mut client = Engine::new(config).unwrap();
            let waiter = std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    let r = server
                        .io_iteration(Some(Duration::from_millis(20)))
                        .unwrap();
                    if !r.newly_connected_unknown_clients.is_empty() || Instant::now() > deadline {
                        return server;
                    }
                }
            });
            let id = client.connect(&at, "n", Duration::from_secs(10)).unwrap();
            let server = waiter.join().unwrap();
            let nodelay_of = |engine: &Engine, key: usize| match &engine.core.clients[key].io {
                Io::Stream {
                    stream: Stream::Plain(Socket::Tcp(s)),
                    ..
                } => s.nodelay().unwrap(),
                _ => panic!("not a TCP client"),
            };
            let (key, _) = server.core.clients.iter().next().expect("accepted");
            assert_eq!(
                nodelay_of(&server, key),
                nodelay,
                "accepted, nodelay {nodelay}"
            );
            assert_eq!(
                nodelay_of(&client, id.key()),
                nodelay,
                "made, nodelay {nodelay}"
            );
        }
    }
}
