//! Reading: a stream client's bytes through its protocol (keyword, frames, control frames
//! from a server we connected to, or raw bytes) to the sink, as pieces or whole messages.

use std::io;

use berth_proto::msg::{Ending, Event, Piece};

use super::{ClientId, Core, Io, Phase, Proto, Sink};
use crate::net::Transport;

/// A held message's payload with at least this many bytes still to come is read straight into
/// its buffer instead of through a read buffer, saving a copy of every byte of it.
const DIRECT_FROM: u64 = 64 * 1024;
/// How much room beyond the payload such a read may have: what it brings past the payload
/// (the next frames) is copied out again, so a buffer much larger than its message reads
/// through a read buffer instead.
const DIRECT_SLACK: u64 = 64 * 1024;

impl Core {
    /// Reads from a stream client until it would block, is paused, or is gone.
    pub(super) fn pump(&mut self, id: ClientId, sink: &mut dyn Sink) {
        loop {
            let Some(c) = self.clients.get_mut(id.key()).filter(|c| c.gen == id.gen()) else {
                return;
            };
            if c.held_debt > 0 && !c.paused && c.out.queued() == 0 {
                // (A queue of its own still holding bytes may hold the delivered buffer
                // itself, an echo: then `flush` repays once it is written out.)
                self.repay(id);
                continue;
            }
            // A closing client is not read until its output is out; then it lingers, and what
            // it still sends is read and dropped.
            let closing = matches!(c.phase, Phase::Closing | Phase::Lingering);
            if c.phase == Phase::Closing || (c.paused && c.phase != Phase::Lingering) {
                return;
            }
            // Shutting down, a client is read only to finish the message it is sending.
            if self.stopping && c.phase == Phase::Open && !c.mid_message() {
                return;
            }
            let Io::Stream {
                stream,
                proto,
                hup,
                readable,
            } = &mut c.io
            else {
                return;
            };
            if !*readable || *hup || matches!(proto, Proto::Undecided) {
                // (An undecided connection is read once decided: its first bytes say nothing
                // until the application has said how to read them.)
                return;
            }
            if c.hold.is_some_and(|h| !h.reserved) {
                // Resumed for another reason; its turn for the held budget has not come.
                c.paused = true;
                return;
            }
            if !closing && c.hold.is_some() {
                if let Proto::Server(session) = proto {
                    let left = session.payload_left();
                    let spare = (c.assembling.capacity() - c.assembling.len()) as u64;
                    if left >= DIRECT_FROM && spare >= left && spare - left <= DIRECT_SLACK {
                        let start = c.assembling.len();
                        match stream.read_spare(&mut c.assembling) {
                            Ok(0) => {}
                            Ok(n) => {
                                let payload = n.min(left as usize);
                                session.skip_payload(payload as u64);
                                self.held_read(id, start + payload, n, sink);
                                continue;
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                *readable = false;
                                return;
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            Err(e) => {
                                log::debug!("client {id}: read failed: {e}");
                                return self.remove(id);
                            }
                        }
                        // End of stream: as below.
                        *hup = true;
                        *readable = false;
                        return self.peer_closed(id);
                    }
                }
            }
            let mut buf = self.pool.take();
            match stream.read_spare(&mut buf) {
                Ok(0) => {
                    *hup = true;
                    *readable = false;
                    self.pool.put(buf);
                    return self.peer_closed(id);
                }
                Ok(_) if closing => self.pool.put(buf),
                Ok(_) => {
                    self.deliver(id, &buf, sink);
                    let n = buf.len();
                    self.pool.put(buf);
                    self.note_input(id, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    *readable = false;
                    self.pool.put(buf);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.pool.put(buf),
                Err(e) => {
                    self.pool.put(buf);
                    log::debug!("client {id}: read failed: {e}");
                    return self.remove(id);
                }
            }
        }
    }

    /// A read straight into a held message's buffer (see [`DIRECT_FROM`]) left its payload up
    /// to `end`: what the read brought beyond it (the next frames) goes through the protocol
    /// as any read's bytes do, and so does the message's end if this completed it.
    fn held_read(&mut self, id: ClientId, end: usize, read: usize, sink: &mut dyn Sink) {
        let mut rest = self.pool.take();
        let Some(c) = self.clients.get_mut(id.key()).filter(|c| c.gen == id.gen()) else {
            return self.pool.put(rest);
        };
        rest.extend_from_slice(&c.assembling[end..]);
        c.assembling.truncate(end);
        let done = match &c.io {
            Io::Stream {
                proto: Proto::Server(session),
                ..
            } => session.payload_left() == 0,
            _ => false,
        };
        if done || !rest.is_empty() {
            self.deliver(id, &rest, sink);
        }
        self.pool.put(rest);
        self.note_input(id, read);
    }

    /// The peer will send nothing more. An open client with output still queued gets it
    /// (it may have half-closed and be waiting for answers); anything else goes now.
    /// One that stops in the middle of a message is told so (`error incomplete`): it may
    /// still be reading.
    pub(super) fn peer_closed(&mut self, id: ClientId) {
        let Some(c) = self.get_mut(id) else { return };
        if c.phase == Phase::Open && c.inside_message() && !c.out.stream_open() {
            let text = "the connection's sending side closed in the middle of a message";
            log::info!("client {id}: {text}");
            return self.end(id, Ending::Incomplete, text);
        }
        if c.phase == Phase::Open && !c.out.is_empty() && !c.out.stream_open() {
            c.phase = Phase::Closing;
            self.dirty.push(id);
        } else {
            self.remove(id);
        }
    }

    /// Passes a read's bytes through the client's protocol to the sink.
    pub(super) fn deliver(&mut self, id: ClientId, input: &[u8], sink: &mut dyn Sink) {
        self.source = Some(id);
        let mut pos = 0;
        // A message found whole in this read: handed over without copying.
        let mut direct: Option<(usize, usize)> = None;
        let stopping = self.stopping;
        while let Some(c) = self.get_mut(id) {
            if c.phase == Phase::Closing {
                break;
            }
            let Io::Stream { proto, .. } = &mut c.io else {
                break;
            };
            let piece = match proto {
                Proto::Raw => {
                    if pos == input.len() {
                        break;
                    }
                    pos = input.len();
                    self.stats.message(input.len());
                    self.whole_or_pieces(id, input, sink);
                    continue;
                }
                Proto::Server(session) => {
                    if stopping && session.at_boundary() {
                        // Messages sent after the shutdown began are not taken.
                        break;
                    }
                    let (n, event) = session.next(&input[pos..]);
                    pos += n;
                    match event {
                        None => break,
                        Some(Event::Keyword(k)) => {
                            self.handshake(id, Ok(k));
                            continue;
                        }
                        Some(Event::BadKeyword(r)) => {
                            self.handshake(id, Err(r));
                            continue;
                        }
                        Some(Event::BadFrame(e)) => {
                            self.end(id, e.ending(), &e.to_string());
                            break;
                        }
                        Some(Event::Piece(p)) => p,
                    }
                }
                Proto::Ws(_) => {
                    self.deliver_ws(id, &input[pos..], sink);
                    break;
                }
                // Never read (see `pump`).
                Proto::Undecided => break,
                Proto::Outbound(decoder) => match decoder.next(&input[pos..]) {
                    Ok((_, None)) => break,
                    Ok((n, Some(p))) => {
                        pos += n;
                        p
                    }
                    Err(e) => {
                        log::warn!("server {id} sent a frame over our limit: {e}");
                        self.remove(id);
                        break;
                    }
                },
            };
            self.piece(id, piece, pos, &mut direct, input, sink);
        }
        self.source = None;
    }

    /// One piece of a framed message, to a streaming sink as it is, or assembled.
    pub(super) fn piece(
        &mut self,
        id: ClientId,
        piece: Piece<'_>,
        pos: usize,
        direct: &mut Option<(usize, usize)>,
        input: &[u8],
        sink: &mut dyn Sink,
    ) {
        let c = self.get_mut(id).expect("delivering to a live client");
        if let Piece::Control(_) = piece {
            c.in_control = true;
            c.assembling.clear();
            return;
        }
        if c.in_control {
            match piece {
                Piece::Chunk(b) => c.assembling.extend_from_slice(b),
                Piece::End => {
                    let text = String::from_utf8_lossy(&c.assembling).into_owned();
                    log::info!("server {id} ends the connection: {text}");
                    c.ending = Some(text);
                    c.in_control = false;
                    c.assembling.clear();
                }
                _ => {}
            }
            return;
        }
        if c.hold.is_some() {
            match piece {
                Piece::Chunk(b) => self.hold_chunk(id, b),
                Piece::End => self.deliver_held(id, sink),
                _ => {}
            }
            return;
        }
        let streams = sink.streams();
        if let Piece::Start(len) = piece {
            self.stats.message(len as usize);
            // A message all in this read passes straight through; a longer one is received
            // whole first (see `hold`), unless a streaming handler gets it as it comes because
            // it is over `max_held`.
            let here = len <= (input.len() - pos) as u64;
            let streamed = streams && len > self.config.max_held;
            if !here && !streamed {
                return self.begin_hold(id, len);
            }
            if let Some(c) = self.get_mut(id) {
                c.arriving = !here;
            }
        }
        if streams {
            let end = matches!(piece, Piece::End);
            sink.piece(self, id, piece);
            if end {
                if let Some(c) = self.get_mut(id) {
                    c.arriving = false;
                }
            }
            return;
        }
        let c = self.get_mut(id).expect("delivering to a live client");
        match piece {
            Piece::Start(len) => {
                c.announced = len;
                c.assembling.clear();
                *direct = None;
            }
            Piece::Chunk(b) => {
                if c.assembling.is_empty() && direct.is_none() && b.len() as u64 == c.announced {
                    *direct = Some((pos - b.len(), pos));
                } else {
                    if let Some((from, to)) = direct.take() {
                        c.assembling.extend_from_slice(&input[from..to]);
                    }
                    c.assembling.extend_from_slice(b);
                }
            }
            Piece::End => {
                if let Some((from, to)) = direct.take() {
                    sink.message(self, id, &input[from..to]);
                } else {
                    let whole = std::mem::take(&mut c.assembling);
                    sink.message(self, id, &whole);
                    if let Some(c) = self.get_mut(id) {
                        // Keep a modest buffer for the next message; free a big one.
                        if whole.capacity() <= 1 << 20 {
                            let mut whole = whole;
                            whole.clear();
                            c.assembling = whole;
                        }
                    }
                }
            }
            Piece::Control(_) => {}
        }
    }

    /// Bytes that are one message by construction (a raw read, a datagram).
    pub(super) fn whole_or_pieces(&mut self, id: ClientId, bytes: &[u8], sink: &mut dyn Sink) {
        if sink.streams() {
            sink.piece(self, id, Piece::Start(bytes.len() as u64));
            if !bytes.is_empty() {
                sink.piece(self, id, Piece::Chunk(bytes));
            }
            sink.piece(self, id, Piece::End);
        } else {
            sink.message(self, id, bytes);
        }
    }
}
