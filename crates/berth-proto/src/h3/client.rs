//! HTTP/3's client role, sans-IO, beside the server's ([`Connection`](super::Connection)):
//! requests out as QUIC stream bytes, answers in as [`Event`]s, for tests (a Pair with the
//! server in memory) and over real QUIC for `berth bench --h3` and `berth_lab::bench::h3::fetch`
//! (berth-lab's QUIC driver). It speaks through the same pieces as
//! the server: [`FrameReader`], QPACK's [`Decoder`] (with a table the server may use,
//! blocked streams bounded) and [`Encoder`], the same [`Quic`] orders out.
//!
//! ```text
//!   request(method, path, fields, body) ──> Quic::Send(HEADERS, DATA, FIN) on 0, 4, 8, ..
//!   recv(stream, bytes, fin) ──> FrameReader ──> Event::Head | Data | Trailers | End
//!        server control (3)  ──> SETTINGS first, GOAWAY ──> Event::GoAway
//!        server encoder      ──> qpack::Decoder (unblocks answers)
//! ```
//!
//! Call order: [`Client::request`] (and [`Client::send_data`] for a body sent later), then
//! do every [`Client::poll_quic`]; hand QUIC's bytes to [`Client::recv`], call
//! [`Client::process`], and read [`Client::poll_event`] until it is empty.
//!
//! Requests use the static table, or a dynamic table once the server allows one
//! ([`Client::with_table`]).
//!
//! What it does **not** do: pushes (it never raises MAX_PUSH_ID, so the server may push
//! nothing, RFC 9114 §4.6), or 1xx answers other than skipping them.

use std::collections::{BTreeMap, VecDeque};

use super::connection::Quic;
use super::error::{Error, ErrorCode, H3Error};
use super::frame::{self, kind, Event as Read, Frame, FrameReader, StreamKind};
use super::qpack::{Decoded, Decoder, DecoderConfig, Encoder, Field};
use super::settings::Settings;
use super::stream::{self, Accept, PeerStreams, UniStream};
use super::Role;

/// What the server said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An answer's head: its status and the other fields, as decoded.
    Head {
        /// The request stream.
        stream: u64,
        /// `:status`.
        status: u16,
        /// The regular fields.
        fields: Vec<Field>,
    },
    /// Body bytes of the answer.
    Data {
        /// The request stream.
        stream: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The answer's trailers.
    Trailers {
        /// The request stream.
        stream: u64,
        /// The fields.
        fields: Vec<Field>,
    },
    /// The answer is complete (FIN).
    End {
        /// The request stream.
        stream: u64,
    },
    /// The server reset the stream (RESET_STREAM), or the client did for a bad answer.
    Reset {
        /// The request stream.
        stream: u64,
        /// The code.
        code: ErrorCode,
    },
    /// The server's GOAWAY: requests at or past this stream id were not and will not be
    /// served.
    GoAway(u64),
    /// The connection is closed with this error (by the client, for the server's mistake).
    Closed(ErrorCode),
}

/// Where an answer's receiving side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Head,
    Body,
    Trailers,
}

#[derive(Debug)]
struct Exchange {
    reader: FrameReader,
    inbox: Vec<u8>,
    fin: bool,
    phase: Phase,
    blocked: bool,
}

#[derive(Debug)]
struct Uni {
    ty: Option<UniStream>,
    control: Option<FrameReader>,
    inbox: Vec<u8>,
    fin: bool,
}

/// Our control stream and QPACK decoder stream (a client's first two unidirectional ones;
/// the encoder stream, if a table is used, is the next: 10).
const CONTROL: u64 = 2;
const DECODER: u64 = 6;
const ENCODER: u64 = 10;

/// One HTTP/3 connection's client state. See the [module docs](self).
#[derive(Debug)]
pub struct Client {
    config: DecoderConfig,
    scheme: String,
    authority: String,
    started: bool,
    closed: bool,
    decoder: Decoder,
    encoder: Encoder,
    peer_streams: PeerStreams,
    uni: BTreeMap<u64, Uni>,
    peer_settings: Option<Settings>,
    streams: BTreeMap<u64, Exchange>,
    next_stream: u64,
    actions: VecDeque<Quic>,
    events: VecDeque<Event>,
    /// The dynamic table capacity requests may use, once the server's SETTINGS allow it
    /// ([`Client::with_table`]); 0: static table only.
    table: u64,
}

impl Client {
    /// A client whose decoder allows the server what `config` says (announced in its
    /// SETTINGS at the first request or `process`).
    pub fn new(config: DecoderConfig) -> Self {
        Client {
            config,
            scheme: "https".to_owned(),
            authority: "localhost".to_owned(),
            started: false,
            closed: false,
            decoder: Decoder::new(config),
            encoder: Encoder::new(),
            peer_streams: PeerStreams::default(),
            uni: BTreeMap::new(),
            peer_settings: None,
            streams: BTreeMap::new(),
            next_stream: 0,
            actions: VecDeque::new(),
            events: VecDeque::new(),
            table: 0,
        }
    }

    /// Requests use a dynamic table of up to `capacity` bytes (within the server's
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY) once its SETTINGS come, through an encoder
    /// stream opened then; before, and with 0, the static table only. Needs a decoder
    /// table of our own (the encoder stream is the third unidirectional stream, id 10).
    pub fn with_table(mut self, capacity: u64) -> Self {
        self.table = capacity;
        self
    }

    /// The dynamic table's inserts made, and those the server acknowledged (RFC 9204
    /// §2.1.4's Known Received Count).
    pub fn qpack_inserts(&self) -> (u64, u64) {
        (
            self.encoder.insert_count(),
            self.encoder.known_received_count(),
        )
    }

    /// The server's SETTINGS, once they came.
    pub fn peer_settings(&self) -> Option<&Settings> {
        self.peer_settings.as_ref()
    }

    /// Requests whose answer is not complete.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The next thing to ask of QUIC.
    pub fn poll_quic(&mut self) -> Option<Quic> {
        self.actions.pop_front()
    }

    /// The next thing the server said.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        let settings = Settings {
            qpack_max_table_capacity: self.config.max_table_capacity,
            max_field_section_size: Some(self.config.max_field_section_size),
            qpack_blocked_streams: self.config.max_blocked_streams,
        };
        let mut bytes = Vec::new();
        // Our own type and settings always write.
        let _ = UniStream::Control.write(&mut bytes);
        let _ = settings.write_frame(None, &mut bytes);
        self.actions.push_back(Quic::Open { stream: CONTROL });
        self.send(CONTROL, bytes, false);
        if self.config.max_table_capacity > 0 {
            let mut bytes = Vec::new();
            let _ = UniStream::QpackDecoder.write(&mut bytes);
            self.actions.push_back(Quic::Open { stream: DECODER });
            self.send(DECODER, bytes, false);
        }
    }

    fn send(&mut self, stream: u64, bytes: Vec<u8>, fin: bool) {
        self.actions.push_back(Quic::Send { stream, bytes, fin });
    }

    /// The `:scheme` and `:authority` of the requests from now on (`https` and `localhost`
    /// until set).
    pub fn set_origin(&mut self, scheme: &str, authority: &str) {
        self.scheme = scheme.to_owned();
        self.authority = authority.to_owned();
    }

    /// Sends a request on the next request stream and returns its id: the pseudo-fields
    /// from `method`, the origin ([`Client::set_origin`]) and `path`, then `fields` (names
    /// lowercase), then `body` as one DATA frame if not empty; FIN if `end` (else send the
    /// rest with [`Client::send_data`]).
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        fields: &[(&str, &[u8])],
        body: &[u8],
        end: bool,
    ) -> u64 {
        self.start();
        let id = self.next_stream;
        self.next_stream += 4;
        let pseudo = [
            (":method", method.as_bytes()),
            (":scheme", self.scheme.as_bytes()),
            (":authority", self.authority.as_bytes()),
            (":path", path.as_bytes()),
        ];
        let mut section = Vec::new();
        self.encoder.encode(
            id,
            pseudo.iter().chain(fields).map(|(n, v)| (n.as_bytes(), *v)),
            &mut section,
        );
        if self.encoder.has_encoder_stream_output() {
            // The inserts the section references go first (QUIC may still bring them after
            // it: the server then blocks the stream until they come).
            let mut inserts = Vec::new();
            self.encoder.write_encoder_stream(&mut inserts);
            self.send(ENCODER, inserts, false);
        }
        let mut bytes = Vec::with_capacity(section.len() + body.len() + 16);
        frame::write_header(kind::HEADERS, section.len() as u64, &mut bytes);
        bytes.extend_from_slice(&section);
        if !body.is_empty() {
            frame::write_data_header(body.len() as u64, &mut bytes);
            bytes.extend_from_slice(body);
        }
        self.send(id, bytes, end);
        self.streams.insert(
            id,
            Exchange {
                reader: FrameReader::new(StreamKind::Request, Role::Client, 1 << 20),
                inbox: Vec::new(),
                fin: false,
                phase: Phase::Head,
                blocked: false,
            },
        );
        id
    }

    /// More of a request's body, FIN if `fin`.
    pub fn send_data(&mut self, stream: u64, body: &[u8], fin: bool) {
        let mut bytes = Vec::with_capacity(body.len() + 8);
        if !body.is_empty() {
            frame::write_data_header(body.len() as u64, &mut bytes);
            bytes.extend_from_slice(body);
        }
        self.send(stream, bytes, fin);
    }

    /// Bytes QUIC brought for `stream`, in order; `fin` with the last.
    pub fn recv(&mut self, stream: u64, bytes: &[u8], fin: bool) {
        if self.closed {
            return;
        }
        if stream::is_unidirectional(stream) {
            if stream::opened_by(stream, Role::Client) {
                return;
            }
            let u = self.uni.entry(stream).or_insert(Uni {
                ty: None,
                control: None,
                inbox: Vec::new(),
                fin: false,
            });
            u.inbox.extend_from_slice(bytes);
            u.fin |= fin;
        } else if let Some(s) = self.streams.get_mut(&stream) {
            s.inbox.extend_from_slice(bytes);
            s.fin |= fin;
        }
    }

    /// The server reset `stream` (RESET_STREAM).
    pub fn reset(&mut self, stream: u64, code: u64) {
        if self.streams.remove(&stream).is_some() {
            self.decoder.cancel_stream(stream);
            self.events.push_back(Event::Reset {
                stream,
                code: ErrorCode(code),
            });
        }
    }

    /// Reads what came, into events.
    pub fn process(&mut self) {
        self.start();
        if self.closed {
            return;
        }
        if let Err(e) = self.work() {
            self.closed = true;
            self.streams.clear();
            self.actions.push_back(Quic::Close {
                code: e.code,
                reason: e.reason,
            });
            self.events.push_back(Event::Closed(e.code));
            return;
        }
        if self.decoder.has_decoder_stream_output() {
            let mut bytes = Vec::new();
            self.decoder.write_decoder_stream(&mut bytes);
            if self.config.max_table_capacity > 0 {
                self.send(DECODER, bytes, false);
            }
        }
    }

    fn work(&mut self) -> Result<(), H3Error> {
        let ids: Vec<u64> = self.uni.keys().copied().collect();
        for id in ids {
            self.read_uni(id)?;
        }
        while let Some((id, decoded)) = self.decoder.poll_unblocked() {
            if let Some(s) = self.streams.get_mut(&id) {
                s.blocked = false;
                self.section(id, decoded);
            }
        }
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            self.read_stream(id)?;
        }
        Ok(())
    }

    fn read_uni(&mut self, id: u64) -> Result<(), H3Error> {
        let Some(u) = self.uni.get_mut(&id) else {
            return Ok(());
        };
        let mut inbox = std::mem::take(&mut u.inbox);
        if u.ty.is_none() {
            let Some((ty, n)) = UniStream::parse(&inbox) else {
                u.inbox = inbox;
                return Ok(());
            };
            inbox.drain(..n);
            u.ty = Some(ty);
            match self.peer_streams.open(ty, Role::Client)? {
                Accept::Read(UniStream::Control) => {
                    u.control = Some(FrameReader::new(StreamKind::Control, Role::Client, 4096));
                }
                Accept::Read(_) => {}
                Accept::Ignore(code) => {
                    self.actions.push_back(Quic::Stop { stream: id, code });
                }
            }
        }
        match (u.ty, &mut u.control) {
            (Some(UniStream::Control), Some(reader)) => {
                let mut at = 0;
                loop {
                    let (used, ev) = reader.read(&inbox[at..])?;
                    at += used;
                    match ev {
                        None => break,
                        Some(Read::Frame(Frame::Settings(s))) => {
                            self.peer_settings = Some(s);
                            self.encoder
                                .peer_settings(s.qpack_max_table_capacity, s.qpack_blocked_streams)
                                .map_err(peer)?;
                            let capacity = self.table.min(s.qpack_max_table_capacity);
                            if capacity > 0 && self.config.max_table_capacity > 0 {
                                self.encoder.set_capacity(capacity).map_err(peer)?;
                                let mut bytes = Vec::new();
                                let _ = UniStream::QpackEncoder.write(&mut bytes);
                                self.encoder.write_encoder_stream(&mut bytes);
                                self.actions.push_back(Quic::Open { stream: ENCODER });
                                self.actions.push_back(Quic::Send {
                                    stream: ENCODER,
                                    bytes,
                                    fin: false,
                                });
                            }
                        }
                        Some(Read::Frame(Frame::Goaway(id))) => {
                            self.events.push_back(Event::GoAway(id));
                        }
                        Some(_) => {}
                    }
                }
            }
            (Some(UniStream::QpackEncoder), _) => {
                self.decoder.handle_encoder_stream(&inbox).map_err(peer)?;
            }
            (Some(UniStream::QpackDecoder), _) => {
                self.encoder.handle_decoder_stream(&inbox).map_err(peer)?;
            }
            // Pushes are never allowed (no MAX_PUSH_ID), and unknown types are stopped.
            _ => {}
        }
        if u.fin {
            let ty = u.ty;
            self.uni.remove(&id);
            if let Some(ty) = ty {
                self.peer_streams.closed(ty)?;
            }
        }
        Ok(())
    }

    fn read_stream(&mut self, id: u64) -> Result<(), H3Error> {
        loop {
            let Some(s) = self.streams.get_mut(&id) else {
                return Ok(());
            };
            if s.blocked {
                return Ok(());
            }
            let mut inbox = std::mem::take(&mut s.inbox);
            let read = s.reader.read(&inbox).map(|(used, ev)| {
                let ev = ev.map(|ev| match ev {
                    Read::Data { chunk, .. } => (kind::DATA, chunk.to_vec()),
                    Read::Frame(Frame::Headers(section)) => (kind::HEADERS, section.to_vec()),
                    Read::Oversized { .. } => (kind::PUSH_PROMISE, Vec::new()),
                    Read::Frame(_) => (u64::MAX, Vec::new()),
                });
                (used, ev)
            });
            let (used, ev) = read?;
            inbox.drain(..used);
            s.inbox = inbox;
            let Some((k, bytes)) = ev else {
                if s.fin {
                    s.reader.finish()?;
                    if s.phase == Phase::Head {
                        return Err(H3Error::conn(
                            ErrorCode::H3_FRAME_UNEXPECTED,
                            "an answer stream ended without HEADERS",
                        ));
                    }
                    self.streams.remove(&id);
                    self.events.push_back(Event::End { stream: id });
                }
                return Ok(());
            };
            match (s.phase, k) {
                (Phase::Head | Phase::Body, kind::HEADERS) => {
                    if s.phase == Phase::Body {
                        s.phase = Phase::Trailers;
                    }
                    match self.decoder.decode(id, &bytes).map_err(peer)? {
                        Decoded::Blocked => s.blocked = true,
                        decoded => self.section(id, decoded),
                    }
                }
                (Phase::Body, kind::DATA) => {
                    self.events.push_back(Event::Data { stream: id, bytes });
                }
                (_, kind::DATA | kind::HEADERS) => {
                    return Err(H3Error::conn(
                        ErrorCode::H3_FRAME_UNEXPECTED,
                        "an answer's frames out of order",
                    ));
                }
                (_, kind::PUSH_PROMISE) => {
                    // Oversized: a stream error, the answer is not read.
                    self.abandon(id, ErrorCode::H3_EXCESSIVE_LOAD);
                    return Ok(());
                }
                _ => {}
            }
        }
    }

    /// A field section decoded: the head (1xx ones skipped) or the trailers.
    fn section(&mut self, id: u64, decoded: Decoded) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let Decoded::Fields(mut fields) = decoded else {
            self.abandon(id, ErrorCode::H3_EXCESSIVE_LOAD);
            return;
        };
        if s.phase == Phase::Trailers {
            self.events
                .push_back(Event::Trailers { stream: id, fields });
            return;
        }
        let status = fields
            .first()
            .filter(|f| f.name == b":status")
            .and_then(|f| std::str::from_utf8(&f.value).ok())
            .and_then(|v| v.parse::<u16>().ok())
            .filter(|s| (100..1000).contains(s));
        let Some(status) = status else {
            self.abandon(id, ErrorCode::H3_MESSAGE_ERROR);
            return;
        };
        if status < 200 {
            // Informational: the final head follows.
            return;
        }
        fields.remove(0);
        s.phase = Phase::Body;
        self.events.push_back(Event::Head {
            stream: id,
            status,
            fields,
        });
    }

    /// A malformed answer: the stream is stopped and reset (a stream error).
    fn abandon(&mut self, id: u64, code: ErrorCode) {
        self.streams.remove(&id);
        self.decoder.cancel_stream(id);
        self.actions.push_back(Quic::Stop { stream: id, code });
        self.actions.push_back(Quic::Reset { stream: id, code });
        self.events.push_back(Event::Reset { stream: id, code });
    }
}

fn peer(e: Error) -> H3Error {
    match e {
        Error::Peer(e) => e,
        Error::Misuse(why) => H3Error::conn(ErrorCode::H3_INTERNAL_ERROR, why),
    }
}

/// One stream's answer, as [`Answers`] gathers it from a [`Client`]'s [`Event`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// `:status` (0 if the stream was reset before its head).
    pub status: u16,
    /// The head's other fields, as decoded (a name that is not UTF-8 lossily).
    pub fields: Vec<(String, Vec<u8>)>,
    /// The body, whole.
    pub body: Vec<u8>,
    /// The trailers, if any came.
    pub trailers: Vec<(String, Vec<u8>)>,
    /// The answer is complete (FIN).
    pub ended: bool,
    /// The stream was reset with this code instead.
    pub reset: Option<ErrorCode>,
}

impl Answer {
    /// The first value of field `name` (lowercase), as text.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// A connection's answers, gathered by stream from its client's [`Event`]s: what a caller
/// that wants whole answers (a test, a one-shot fetch) keeps instead of matching events itself.
#[derive(Debug, Default)]
pub struct Answers {
    /// Each stream's answer so far.
    pub by_stream: BTreeMap<u64, Answer>,
    /// The server's GOAWAY, if it sent one (the last one's id).
    pub goaway: Option<u64>,
    /// The connection closed with this error.
    pub closed: Option<ErrorCode>,
}

impl Answers {
    /// Takes every event `client` has; returns the streams whose answers ended (or were
    /// reset) meanwhile.
    pub fn gather(&mut self, client: &mut Client) -> Vec<u64> {
        let mut finished = Vec::new();
        while let Some(event) = client.poll_event() {
            match event {
                Event::Head {
                    stream,
                    status,
                    fields,
                } => {
                    let a = self.by_stream.entry(stream).or_default();
                    a.status = status;
                    a.fields = named(fields);
                }
                Event::Data { stream, bytes } => {
                    self.by_stream.entry(stream).or_default().body.extend(bytes)
                }
                Event::Trailers { stream, fields } => {
                    self.by_stream.entry(stream).or_default().trailers = named(fields)
                }
                Event::End { stream } => {
                    self.by_stream.entry(stream).or_default().ended = true;
                    finished.push(stream);
                }
                Event::Reset { stream, code } => {
                    self.by_stream.entry(stream).or_default().reset = Some(code);
                    finished.push(stream);
                }
                Event::GoAway(id) => self.goaway = Some(id),
                Event::Closed(code) => self.closed = Some(code),
            }
        }
        finished
    }
}

fn named(fields: Vec<Field>) -> Vec<(String, Vec<u8>)> {
    fields
        .into_iter()
        .map(|f| (String::from_utf8_lossy(&f.name).into_owned(), f.value))
        .collect()
}
