//! The HTTP/2 client role (RFC 9113), sans-IO: the other end of [`Connection`](super::Connection).
//! Bytes in ([`Client::recv`]), bytes out ([`Client::poll_transmit`]), events out
//! ([`Client::poll_event`]); no socket, no clock, no thread. The testkit's blocking client and
//! `berth bench --h2`'s mio loop are both thin drivers of it, and the protocol tests join it
//! to the server in memory (`tests/h2_support/pair.rs`).
//!
//! ```text
//!   Client::new ──> preface, SETTINGS [, WINDOW_UPDATE]        ──┐
//!   open / request ──> HEADERS [+ CONTINUATION past the frame size] ├─> poll_transmit(out) ──> peer
//!   send_data / send_trailers ──> DATA within both windows, trailers ┘        │
//!   write_frame / write_raw ──> any bytes at all (attack tests) ──────────────┘
//!
//!   peer ──> recv(bytes) ──> SETTINGS and PING acknowledged, windows tracked, WINDOW_UPDATE
//!                            sent as DATA is taken (unless the windows are kept shut)
//!                        └─> poll_event: Settings, Head, Data, Trailers, Reset, GoAway, ...
//! ```
//!
//! Call order, as quinn-proto documents its own: mutators (`open`, `send_data`, `reset`,
//! `write_frame`) and `recv` in any order; then `poll_event` until `None` and
//! `poll_transmit` to collect what to write. Nothing here waits on time: there is no client
//! timer in RFC 9113 that the callers need (request timeouts are theirs), so no method takes
//! a `now`.
//!
//! What it does **not** do, on purpose: keep to the peer's SETTINGS_MAX_CONCURRENT_STREAMS
//! (a test may want to go past it; [`Client::peer`] says what it is, and a load generator
//! keeps to it itself), accept a push (it sends SETTINGS_ENABLE_PUSH 0, so a PUSH_PROMISE is
//! the peer's error), prioritise, or index its own fields unless asked
//! ([`Request::indexed`]). A peer's protocol error is returned by `recv` as a
//! [`ProtocolError`]; the client does not write a GOAWAY for it (its caller closes, and a
//! test sees the error rather than a frame).

mod recv;

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::frame::{self, setting, ErrorCode};
use super::hpack::{self, Decoder, ListLimits};

/// The client's ids: odd, from 1, at most 2^31 - 1 (RFC 9113 §5.1.1).
const LAST_STREAM_ID: u32 = (1 << 31) - 1;

/// The dynamic table the client lets the server's encoder use: the RFC's default, which it
/// does not change (SETTINGS_HEADER_TABLE_SIZE is never sent).
const HEADER_TABLE: usize = 4096;

/// When the client opens windows it has taken data from ([`ClientConfig::windows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Windows {
    /// A WINDOW_UPDATE for the connection and for the stream once this many bytes have been
    /// received on it since the last one (1: after every DATA frame, as a careful client does;
    /// half the window: as h2load does, fewer frames).
    Refill {
        /// Bytes received before an update is sent.
        every: u32,
    },
    /// Never: the windows stay at what the SETTINGS (and the first WINDOW_UPDATE) gave, for
    /// tests of a server facing a reader that stopped.
    Shut,
}

/// How a client starts and reads.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// SETTINGS entries sent after the preface (`frame::setting` ids), after
    /// SETTINGS_ENABLE_PUSH 0, which is always sent. SETTINGS_INITIAL_WINDOW_SIZE and
    /// SETTINGS_MAX_FRAME_SIZE here are also what the client holds the server to.
    pub settings: Vec<(u16, u32)>,
    /// The connection's receive window: above the RFC's 65,535, a WINDOW_UPDATE on stream 0
    /// follows the SETTINGS to raise it (the connection window has no SETTINGS entry).
    pub connection_window: u32,
    /// When windows are opened again.
    pub windows: Windows,
    /// Whether [`Event::Data`] carries the bytes (`false`: only their length, for a load
    /// generator that needs no body and should not copy one).
    pub keep_data: bool,
    /// What a response head or trailer block may hold before fields are dropped (the block
    /// is still decoded whole, to keep HPACK in step). `max_fields: 1` keeps `:status` alone,
    /// which comes first (RFC 9113 §8.3).
    pub head_limits: ListLimits,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            settings: Vec::new(),
            connection_window: frame::DEFAULT_WINDOW,
            windows: Windows::Refill { every: 1 },
            keep_data: true,
            head_limits: ListLimits {
                max_size: 1 << 20,
                max_fields: 1000,
            },
        }
    }
}

/// A request head to encode: pseudo-fields, then regular fields (lowercase names, RFC 9113
/// §8.2.1). Encoded without indexing (every block stands alone) unless [`Request::indexed`].
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `:method`.
    pub method: &'a [u8],
    /// `:scheme`.
    pub scheme: &'a [u8],
    /// `:path`.
    pub path: &'a [u8],
    /// `:authority`, if sent.
    pub authority: Option<&'a [u8]>,
    /// Regular fields, in order.
    pub fields: &'a [(&'a [u8], &'a [u8])],
    /// `:authority` and the regular fields as literals *with incremental indexing* (RFC 7541
    /// §6.2.1), as browsers and curl send them: each goes into the server's dynamic table.
    pub indexed: bool,
}

impl Request<'_> {
    /// Appends the header block.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let pseudo: [(&[u8], &[u8]); 3] = [
            (b":method", self.method),
            (b":scheme", self.scheme),
            (b":path", self.path),
        ];
        hpack::encode(pseudo, out);
        let rest = self
            .authority
            .map(|a| (&b":authority"[..], a))
            .into_iter()
            .chain(self.fields.iter().copied());
        if !self.indexed {
            return hpack::encode(rest, out);
        }
        for (name, value) in rest {
            // The name by its static index when the table has it (RFC 7541 §6.2.1).
            match hpack::STATIC.iter().position(|(n, _)| n.as_bytes() == name) {
                Some(i) => hpack::encode_int(out, 0x40, 6, i + 1),
                None => {
                    hpack::encode_int(out, 0x40, 6, 0);
                    hpack::encode_str(out, name);
                }
            }
            hpack::encode_str(out, value);
        }
    }
}

/// The server's SETTINGS, as last received (the RFC's initial values before any came).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerSettings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS (`None`: not said, no limit).
    pub max_streams: Option<u32>,
    /// SETTINGS_INITIAL_WINDOW_SIZE.
    pub initial_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE.
    pub max_frame: u32,
    /// SETTINGS frames received so far (0: the server's first has not come).
    pub received: u32,
}

/// What the client heard, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A SETTINGS frame from the server was applied and acknowledged ([`Client::peer`] holds
    /// the result); `first` for the one that opens the connection.
    Settings {
        /// The server's first SETTINGS.
        first: bool,
    },
    /// The server acknowledged the client's SETTINGS.
    SettingsAcked,
    /// A PING acknowledgement.
    Pong([u8; 8]),
    /// The final response head.
    Head {
        /// Stream.
        stream: u32,
        /// `:status`.
        status: u16,
        /// The other fields, in order (as far as [`ClientConfig::head_limits`] keeps them).
        fields: Vec<(Vec<u8>, Vec<u8>)>,
        /// END_STREAM: no body follows.
        end_stream: bool,
    },
    /// A DATA frame.
    Data {
        /// Stream.
        stream: u32,
        /// The bytes, padding dropped (empty unless [`ClientConfig::keep_data`]).
        data: Vec<u8>,
        /// Their length (padding not counted).
        len: usize,
        /// END_STREAM.
        end_stream: bool,
    },
    /// The trailer block, which ends the stream.
    Trailers {
        /// Stream.
        stream: u32,
        /// Its fields.
        fields: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// RST_STREAM from the server.
    Reset {
        /// Stream.
        stream: u32,
        /// Why.
        code: ErrorCode,
    },
    /// GOAWAY: streams above `last_stream` were never processed, and the client has
    /// forgotten them (it sends nothing more on them).
    GoAway {
        /// The last stream the server processed (or may).
        last_stream: u32,
        /// Why.
        code: ErrorCode,
        /// Its debug data.
        debug: Vec<u8>,
    },
}

/// The server broke RFC 9113 (or RFC 7541): the connection cannot go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolError {
    /// The error code a GOAWAY for it would carry.
    pub code: ErrorCode,
    /// What was wrong.
    pub reason: &'static str,
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (error code {:#x})", self.reason, self.code.0)
    }
}

impl std::error::Error for ProtocolError {}

/// What the client still has to send on a stream.
#[derive(Debug, Default)]
struct Outgoing {
    /// Body bytes queued, from `pos`.
    body: Vec<u8>,
    pos: usize,
    /// Largest DATA payload to send at once (the peer's frame size caps it too).
    chunk: usize,
    /// END_STREAM once `body` is sent (on the last DATA, or an empty one).
    end: bool,
    /// A trailer block to send after the body, ending the stream.
    trailers: Option<Vec<u8>>,
}

/// Where a stream's answer is (RFC 9113 §8.1: interim heads, the head, DATA, trailers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// No final head yet.
    Awaited,
    /// The head came: DATA or trailers next.
    Body,
    /// END_STREAM came.
    Done,
}

/// One stream the client opened and has not forgotten.
#[derive(Debug)]
struct Stream {
    /// The server's window for it.
    send_window: i64,
    /// Our window for it, and what was taken since the last WINDOW_UPDATE.
    recv_window: i64,
    unacked: u32,
    /// Everything to send is sent (END_STREAM written).
    sent_all: bool,
    out: Outgoing,
    answer: Answer,
}

/// A stream id hasher: ids are distinct odd numbers, and a multiply spreads them over the
/// table's bits (SipHash would cost a load generator more than the rest of a lookup).
#[derive(Debug, Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, id: u32) {
        self.0 = u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by stream id, hashed with [`IdHasher`] (the client's own, and a caller's
/// per-stream state).
pub type StreamMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

type Streams = StreamMap<Stream>;

/// A header block arriving in several frames (HEADERS, then CONTINUATION).
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    bytes: Vec<u8>,
}

/// One client connection's HTTP/2 state. See the [module docs](self) for the call order.
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    /// Bytes to write, in order.
    out: Vec<u8>,
    /// Input received and not yet a whole frame.
    input: Vec<u8>,
    events: VecDeque<Event>,
    decoder: Decoder,
    /// Reused for each decoded block.
    fields: Vec<hpack::Field>,
    streams: Streams,
    /// Streams with something left to send, oldest first (some may have gone since).
    blocked: VecDeque<u32>,
    next_id: u32,
    peer: PeerSettings,
    /// The server's window for the connection.
    send_window: i64,
    /// Our window for the connection, and what was taken since the last WINDOW_UPDATE.
    recv_window: i64,
    conn_unacked: u32,
    /// What the client's own SETTINGS promised: the stream window and frame size it holds
    /// the server to.
    local_window: u32,
    local_max_frame: u32,
    block: Option<Block>,
    goaway: Option<u32>,
    /// A protocol error ended the connection: `recv` takes nothing more.
    broken: Option<ProtocolError>,
}

impl Client {
    /// A new connection: the preface, SETTINGS and (if the connection window is raised) a
    /// WINDOW_UPDATE are queued for [`Client::poll_transmit`], so a caller may add its first
    /// streams and write all of it at once, as nghttp2 and browsers do.
    pub fn new(config: ClientConfig) -> Client {
        let mut out = frame::PREFACE.to_vec();
        let mut params = vec![(setting::ENABLE_PUSH, 0)];
        params.extend_from_slice(&config.settings);
        frame::write_settings(&mut out, &params);
        let mut local_window = frame::DEFAULT_WINDOW;
        let mut local_max_frame = frame::DEFAULT_MAX_FRAME;
        for &(id, value) in &config.settings {
            match id {
                setting::INITIAL_WINDOW_SIZE => local_window = value,
                setting::MAX_FRAME_SIZE => local_max_frame = value,
                _ => {}
            }
        }
        if config.connection_window > frame::DEFAULT_WINDOW {
            let raise = config.connection_window - frame::DEFAULT_WINDOW;
            frame::write_window_update(&mut out, 0, raise);
        }
        Client {
            out,
            input: Vec::new(),
            events: VecDeque::new(),
            decoder: Decoder::new(HEADER_TABLE),
            fields: Vec::new(),
            streams: Streams::default(),
            blocked: VecDeque::new(),
            next_id: 1,
            peer: PeerSettings {
                max_streams: None,
                initial_window: frame::DEFAULT_WINDOW,
                max_frame: frame::DEFAULT_MAX_FRAME,
                received: 0,
            },
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(config.connection_window.max(frame::DEFAULT_WINDOW)),
            conn_unacked: 0,
            local_window,
            local_max_frame,
            block: None,
            goaway: None,
            broken: None,
            config,
        }
    }

    // Getters.

    /// The server's SETTINGS as last received.
    pub fn peer(&self) -> PeerSettings {
        self.peer
    }

    /// The id the next stream will have (ids only grow; past 2^31 - 1 none is left).
    pub fn next_stream_id(&self) -> u32 {
        self.next_id
    }

    /// Streams opened and not yet over (answered and sent, reset, or dropped by a GOAWAY).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The last stream of the GOAWAY received, if one came.
    pub fn goaway(&self) -> Option<u32> {
        self.goaway
    }

    // Mutators.

    /// Opens a stream with the header block `block` (HPACK, see [`Request::encode`]): HEADERS,
    /// and CONTINUATION past the server's frame size. `end_stream`: no body follows. Returns
    /// its id, or `None` when the ids are spent (the connection must be made again).
    pub fn open(&mut self, block: &[u8], end_stream: bool) -> Option<u32> {
        let id = self.next_id;
        if id > LAST_STREAM_ID {
            return None;
        }
        self.next_id += 2;
        frame::write_headers(
            &mut self.out,
            id,
            block,
            end_stream,
            self.peer.max_frame as usize,
        );
        self.streams.insert(
            id,
            Stream {
                send_window: i64::from(self.peer.initial_window),
                recv_window: i64::from(self.local_window),
                unacked: 0,
                sent_all: end_stream,
                out: Outgoing {
                    chunk: usize::MAX,
                    ..Outgoing::default()
                },
                answer: Answer::Awaited,
            },
        );
        Some(id)
    }

    /// Opens a stream for `req` with `body` ([`Client::open`], then [`Client::send_data`]
    /// unless the body is empty and `end_stream` is set). Returns its id.
    pub fn request(&mut self, req: &Request<'_>, body: &[u8], end_stream: bool) -> Option<u32> {
        let mut block = Vec::with_capacity(64);
        req.encode(&mut block);
        let id = self.open(&block, end_stream && body.is_empty())?;
        if !body.is_empty() || !end_stream {
            self.send_data(id, body, end_stream);
        }
        Some(id)
    }

    /// Queues `data` on `stream`, with END_STREAM after it if `end_stream`: it goes out in
    /// DATA frames as far as the server's windows and frame size allow, the rest as they
    /// open. Nothing is queued on a stream that is over or already ended.
    pub fn send_data(&mut self, stream: u32, mut data: &[u8], end_stream: bool) {
        let Some(s) = self.streams.get_mut(&stream) else {
            return;
        };
        if s.sent_all || s.out.end {
            return;
        }
        if self.blocked.is_empty() && s.out.pos == s.out.body.len() {
            // Nothing waits ahead of it: straight from the caller's bytes as far as the
            // windows go, with no copy into the stream (a load generator's every request).
            let windows = (&mut self.send_window, &mut s.send_window);
            let max_frame = self.peer.max_frame as usize;
            let n = write_within(
                &mut self.out,
                stream,
                data,
                end_stream,
                windows,
                max_frame,
                s.out.chunk,
            );
            data = &data[n..];
            if n > 0 && data.is_empty() {
                s.sent_all = end_stream;
                self.forget_if_over(stream);
                return;
            }
        }
        if s.out.pos == s.out.body.len() {
            s.out.body.clear();
            s.out.pos = 0;
        }
        s.out.body.extend_from_slice(data);
        s.out.end = end_stream;
        self.blocked.push_back(stream);
        self.send_pending();
    }

    /// Changes when windows are opened again, from now on (a test may shut them after the
    /// connection started).
    pub fn set_windows(&mut self, windows: Windows) {
        self.config.windows = windows;
    }

    /// Sends `stream`'s body in DATA frames of at most `n` bytes (a small one makes a body
    /// arrive in several frames).
    pub fn set_chunk(&mut self, stream: u32, n: usize) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.out.chunk = n.max(1);
        }
    }

    /// Queues trailers (`fields`, lowercase names) after `stream`'s body: a header block
    /// with END_STREAM.
    pub fn send_trailers(&mut self, stream: u32, fields: &[(&[u8], &[u8])]) {
        let Some(s) = self.streams.get_mut(&stream) else {
            return;
        };
        if s.sent_all || s.out.end {
            return;
        }
        let mut block = Vec::new();
        hpack::encode(fields.iter().copied(), &mut block);
        s.out.trailers = Some(block);
        s.out.end = true;
        self.blocked.push_back(stream);
        self.send_pending();
    }

    /// Resets `stream` (RST_STREAM with `code`) and forgets it: what the server still sends
    /// on it is taken against the connection's window and reported as for any stream.
    pub fn reset(&mut self, stream: u32, code: ErrorCode) {
        frame::write_rst(&mut self.out, stream, code);
        self.streams.remove(&stream);
    }

    /// Sends a PING with `data` (its acknowledgement comes as [`Event::Pong`]).
    pub fn ping(&mut self, data: [u8; 8]) {
        frame::write_header(&mut self.out, 8, frame::kind::PING, 0, 0);
        self.out.extend_from_slice(&data);
    }

    /// Appends one frame as given, checked against nothing: for the attack tests, which
    /// write what no client of good faith would. The client's state does not follow it
    /// (a HEADERS written so opens no stream it knows).
    pub fn write_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        frame::write_header(&mut self.out, payload.len(), kind, flags, stream);
        self.out.extend_from_slice(payload);
    }

    /// Appends raw bytes to the output, after what is already queued.
    pub fn write_raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    // Output.

    /// Moves everything queued to write into `out` (appended).
    pub fn poll_transmit(&mut self, out: &mut Vec<u8>) {
        if out.is_empty() {
            // The common case: no copy, and each buffer keeps its capacity.
            std::mem::swap(out, &mut self.out);
        } else {
            out.append(&mut self.out);
        }
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Sends what the windows allow of the queued bodies and trailers, oldest stream first.
    fn send_pending(&mut self) {
        let max_frame = self.peer.max_frame as usize;
        while let Some(&id) = self.blocked.front() {
            let Some(s) = self.streams.get_mut(&id) else {
                self.blocked.pop_front();
                continue;
            };
            // A stream queued twice is done the first time.
            if !s.sent_all {
                let o = &mut s.out;
                let plain_end = o.end && o.trailers.is_none();
                let windows = (&mut self.send_window, &mut s.send_window);
                let rest = &o.body[o.pos..];
                let n = write_within(
                    &mut self.out,
                    id,
                    rest,
                    plain_end,
                    windows,
                    max_frame,
                    o.chunk,
                );
                o.pos += n;
                if o.pos < o.body.len() {
                    // Blocked on a window: the rest waits for a WINDOW_UPDATE or SETTINGS.
                    return;
                }
                o.body = Vec::new();
                o.pos = 0;
                if o.end {
                    // END_STREAM went on the last DATA, or goes on the trailers or on an
                    // empty DATA frame.
                    match o.trailers.take() {
                        Some(block) => {
                            frame::write_headers(&mut self.out, id, &block, true, max_frame)
                        }
                        None if n == 0 => frame::write_data(&mut self.out, id, &[], true),
                        None => {}
                    }
                    s.sent_all = true;
                }
            }
            self.blocked.pop_front();
            self.forget_if_over(id);
        }
    }

    /// Drops `id` once both directions are done: the answer ended and everything was sent.
    fn forget_if_over(&mut self, id: u32) {
        if self
            .streams
            .get(&id)
            .is_some_and(|s| s.sent_all && s.answer == Answer::Done)
        {
            self.streams.remove(&id);
        }
    }
}

/// Writes DATA frames of `bytes` on stream `id` as far as both `windows` (the connection's,
/// the stream's), the peer's frame size and `chunk` allow, with END_STREAM on the last if
/// `end` and all of `bytes` went. Returns how many bytes went.
fn write_within(
    out: &mut Vec<u8>,
    id: u32,
    bytes: &[u8],
    end: bool,
    windows: (&mut i64, &mut i64),
    max_frame: usize,
    chunk: usize,
) -> usize {
    let mut sent = 0;
    while sent < bytes.len() {
        let room = (*windows.0).min(*windows.1).max(0) as usize;
        let n = (bytes.len() - sent).min(room).min(max_frame).min(chunk);
        if n == 0 {
            break;
        }
        let last = end && sent + n == bytes.len();
        frame::write_data(out, id, &bytes[sent..sent + n], last);
        sent += n;
        *windows.0 -= n as i64;
        *windows.1 -= n as i64;
    }
    sent
}

#[cfg(test)]
mod tests;
