//! A client's output queue: bytes waiting for the socket, lazily produced sequences, and at
//! most one message being streamed in, all in send order.
//!
//! Small messages are copied into shared blocks so that one `writev` carries many; a message of
//! `OWN_BLOCK` bytes or more travels in a block of its own, handed over without copying when
//! the caller gives up its `Vec`. A lazy sequence ([`Produce`]) is asked for more only when the
//! bytes ahead of it run low, so a million messages never sit in memory at once.
//!
//! A streamed message (a relay passing a 1 GiB frame through) must not have other frames
//! spliced into its payload: while one is open, whole messages and sequences wait in `behind`
//! and move into line when its last byte is in.
//!
//! WebSocket clients that agreed permessage-deflate (RFC 7692) get each whole message of the
//! agreed threshold or more compressed as it is queued (RSV1 set): short streams too, once
//! gathered. A stream longer than [`WS_ASSEMBLE`] goes uncompressed (RSV1 clear, which the RFC
//! allows per message): its header is sent before its payload has arrived, and compressing it
//! would mean holding it or fragmenting it. The engine agrees no server context takeover, so
//! each message is compressed alone and the order in which they are compressed (a sequence's
//! messages are made after what was queued behind it) does not matter.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};

use bytes::Bytes;

use berth_proto::msg::frame::header;
use berth_proto::ws::deflate::{Agreed, Compressor};
use berth_proto::ws::frame::{write_header, Opcode};

/// Messages at least this long get a block of their own instead of being copied into one.
const OWN_BLOCK: usize = 16 * 1024;
/// Messages whose memory stays their owner's ([`OutQueue::push_shared`]) are written from it
/// from this size up; smaller ones are cheaper copied into a block with their neighbours.
pub(crate) const SHARE_FROM: usize = OWN_BLOCK;
/// Written-out blocks from this size up are offered back to the engine for reuse.
pub(crate) const RECYCLE_FROM: usize = 1 << 20;
/// Most slices per `writev`.
const MAX_SLICES: usize = 64;
/// Bytes a lazy sequence is asked for at a time.
const PRODUCE_BUDGET: usize = 64 * 1024;

/// How messages are put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// 8-byte length, then the payload.
    Frames,
    /// The bytes as they are.
    Raw,
    /// One datagram per message, after its kind byte (`D`).
    Datagram,
    /// One WebSocket message per message (server frames, unmasked): text when the bytes are
    /// UTF-8, else binary. A streamed message is one frame of its announced length; one of
    /// up to [`WS_ASSEMBLE`] bytes is gathered first so that its bytes can choose.
    WebSocket,
}

/// Streamed messages to a WebSocket client up to this long are gathered whole before they are
/// framed, so that text goes as text (a browser's `onmessage` gets a string); longer ones go
/// as binary frames as they arrive.
pub(crate) const WS_ASSEMBLE: u64 = 64 * 1024;

/// A lazily produced sequence of messages.
pub(crate) trait Produce: Send {
    /// Appends messages to `out` (through `put`) until about `budget` bytes were added or the
    /// sequence ends; returns `false` once it has ended.
    fn produce(&mut self, put: &mut dyn FnMut(&[u8]), budget: usize) -> bool;
}

/// Any iterator of byte strings is a [`Produce`].
pub(crate) struct IterProducer<I>(pub(crate) I);

impl<I> Produce for IterProducer<I>
where
    I: Iterator + Send,
    I::Item: AsRef<[u8]>,
{
    fn produce(&mut self, put: &mut dyn FnMut(&[u8]), budget: usize) -> bool {
        let mut added = 0;
        while added < budget {
            match self.0.next() {
                Some(m) => {
                    let m = m.as_ref();
                    added += m.len() + 8;
                    put(m);
                }
                None => return false,
            }
        }
        true
    }
}

enum Item {
    Bytes {
        data: Vec<u8>,
        pos: usize,
    },
    /// A message whose memory belongs to someone else (a Python `bytes` object): written from
    /// where it lies, released once written.
    Shared {
        data: Bytes,
        pos: usize,
    },
    Lazy(Box<dyn Produce>),
    /// This many zero bytes, drawn like a lazy sequence: the rest of a stream that was cut.
    Fill(u64),
}

impl Item {
    /// The bytes of a block not yet written; `None` for what is yet to be produced.
    fn unwritten(&self) -> Option<&[u8]> {
        match self {
            Item::Bytes { data, pos } => Some(&data[*pos..]),
            Item::Shared { data, pos } => Some(&data[*pos..]),
            Item::Lazy(_) | Item::Fill(_) => None,
        }
    }
}

/// What a fill is drawn from, [`PRODUCE_BUDGET`] bytes at a time.
static ZEROS: [u8; PRODUCE_BUDGET] = [0; PRODUCE_BUDGET];

/// The queue.
pub(crate) struct OutQueue {
    framing: Framing,
    items: VecDeque<Item>,
    /// What waits for the open stream to end.
    behind: VecDeque<Item>,
    /// Payload bytes the open stream still expects, if one is open.
    open: Option<u64>,
    /// The open stream's bytes, gathered (WebSocket framing, short streams: see
    /// [`WS_ASSEMBLE`]).
    gathering: Option<Vec<u8>>,
    /// Bytes in `Bytes` items in `items`: what can be written now.
    ready: usize,
    /// Bytes in `Bytes` items in `behind`: what waits for the open stream to end.
    held: usize,
    /// Lazy sequences in the queue.
    lazies: usize,
    /// A written-out block kept for the next small messages.
    spare: Vec<u8>,
    /// A large block written out, for the engine to reuse (see [`OutQueue::take_recycled`]).
    recycled: Option<Vec<u8>>,
    /// permessage-deflate, when a WebSocket client agreed it (see the module's note). Boxed:
    /// most queues have none.
    deflate: Option<Box<Compressor>>,
}

impl OutQueue {
    pub(crate) fn new(framing: Framing) -> OutQueue {
        OutQueue {
            framing,
            items: VecDeque::new(),
            behind: VecDeque::new(),
            open: None,
            gathering: None,
            ready: 0,
            held: 0,
            lazies: 0,
            spare: Vec::new(),
            recycled: None,
            deflate: None,
        }
    }

    /// Compresses the WebSocket messages queued from now on as `agreed` says (the client's
    /// opening handshake agreed permessage-deflate). The agreement must be without server
    /// context takeover (see the module's note).
    pub(crate) fn set_deflate(&mut self, agreed: Option<Agreed>) {
        debug_assert!(agreed.is_none_or(|a| a.server_no_context_takeover));
        self.deflate = agreed
            .filter(|_| self.framing == Framing::WebSocket)
            .map(|a| Box::new(Compressor::new(a)));
    }

    /// Whether a whole message of `len` bytes is sent compressed.
    fn compresses(&self, len: usize) -> bool {
        self.deflate.as_ref().is_some_and(|d| d.compresses(len))
    }

    /// Bytes waiting to be written, held ones included (not counting what lazy sequences have
    /// yet to produce).
    pub(crate) fn queued(&self) -> usize {
        self.ready + self.held
    }

    /// Bytes that can be written now: [`OutQueue::queued`] without what waits behind an open
    /// stream. Only the stream's own sender can make held bytes move, so backpressure on that
    /// sender must look at this figure, not the total (or it would wait for itself).
    pub(crate) fn ready(&self) -> usize {
        self.ready
    }

    /// Something could be written now, or soon without anyone else's help: ready bytes, or a
    /// lazy sequence to draw from. (An open stream with nothing ready waits for its sender,
    /// not for this queue's reader.)
    pub(crate) fn has_output(&self) -> bool {
        self.ready > 0 || self.lazies > 0
    }

    /// Nothing is waiting: no bytes, no sequence, no open stream.
    pub(crate) fn is_empty(&self) -> bool {
        self.queued() == 0 && self.lazies == 0 && self.open.is_none()
    }

    /// Whether a streamed message is open.
    pub(crate) fn stream_open(&self) -> bool {
        self.open.is_some()
    }

    /// Queues one whole message.
    pub(crate) fn push_message(&mut self, msg: &[u8]) {
        let framing = self.framing;
        let mut deflate = self.deflate.take();
        let (line, count, spare) = self.line();
        *count += put(line, spare, framing, deflate.as_deref_mut(), msg);
        self.deflate = deflate;
    }

    /// Where whole messages go now: behind the open stream if there is one, else in line;
    /// with the byte count that line adds to.
    /// Also lends the spare block, which the caller appends with.
    fn line(&mut self) -> (&mut VecDeque<Item>, &mut usize, &mut Vec<u8>) {
        if self.open.is_some() {
            (&mut self.behind, &mut self.held, &mut self.spare)
        } else {
            (&mut self.items, &mut self.ready, &mut self.spare)
        }
    }

    /// Queues one whole message, taking its buffer (no copy when it is large).
    pub(crate) fn push_owned(&mut self, msg: Vec<u8>) {
        if msg.len() < OWN_BLOCK || self.framing == Framing::Datagram || self.compresses(msg.len())
        {
            return self.push_message(&msg);
        }
        self.push_block(Item::Bytes { data: msg, pos: 0 });
    }

    /// Queues one whole message whose memory stays its owner's: a large one is written from
    /// there (no copy), a small one is copied into a block like any other.
    pub(crate) fn push_shared(&mut self, msg: Bytes) {
        if msg.len() < SHARE_FROM || self.framing == Framing::Datagram || self.compresses(msg.len())
        {
            return self.push_message(&msg);
        }
        self.push_block(Item::Shared { data: msg, pos: 0 });
    }

    /// Queues a whole message that travels as a block of its own (`Bytes` or `Shared`), its
    /// header (for framings that have one) copied in ahead of it.
    fn push_block(&mut self, block: Item) {
        let msg = block.unwritten().expect("a block of bytes");
        let len = msg.len();
        let head = match self.framing {
            Framing::Frames => Some(header(len as u64).to_vec()),
            Framing::WebSocket => Some(ws_header(msg, len as u64)),
            Framing::Raw | Framing::Datagram => None,
        };
        let (line, count, spare) = self.line();
        if let Some(head) = head {
            *count += append(line, spare, &head);
        }
        *count += len;
        line.push_back(block);
    }

    /// Queues bytes that are already wire format (a handshake answer, a control frame),
    /// behind an open stream like any whole message.
    pub(crate) fn push_wire(&mut self, bytes: &[u8]) {
        if self.framing == Framing::Datagram {
            self.ready += bytes.len();
            let data = bytes.to_vec();
            return self.items.push_back(Item::Bytes { data, pos: 0 });
        }
        let (line, count, spare) = self.line();
        *count += append(line, spare, bytes);
    }

    /// Queues a lazy sequence behind everything queued so far.
    pub(crate) fn push_lazy(&mut self, producer: Box<dyn Produce>) {
        self.lazies += 1;
        if self.open.is_some() {
            self.behind.push_back(Item::Lazy(producer));
        } else {
            self.items.push_back(Item::Lazy(producer));
        }
    }

    /// Opens a streamed message of `len` payload bytes; `false` if one is already open (the
    /// caller must wait or send whole). Datagram queues cannot stream.
    pub(crate) fn open_stream(&mut self, len: u64) -> bool {
        if self.open.is_some() || self.framing == Framing::Datagram {
            return false;
        }
        match self.framing {
            Framing::Frames => self.ready += append(&mut self.items, &mut self.spare, &header(len)),
            Framing::WebSocket if len <= WS_ASSEMBLE => {
                self.gathering = Some(Vec::with_capacity(len as usize));
            }
            Framing::WebSocket => {
                // Too long to gather: binary, whatever its bytes.
                let header = ws_header(&[0xff], len);
                self.ready += append(&mut self.items, &mut self.spare, &header);
            }
            Framing::Raw | Framing::Datagram => {}
        }
        self.open = Some(len);
        self.close_stream_if_done();
        true
    }

    /// Adds payload to the open stream (at most what it still expects; the rest is dropped and
    /// the count of bytes taken returned).
    pub(crate) fn stream_chunk(&mut self, bytes: &[u8]) -> usize {
        let Some(left) = self.open else { return 0 };
        let take = bytes.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        match &mut self.gathering {
            Some(gathered) => gathered.extend_from_slice(&bytes[..take]),
            None => self.ready += append(&mut self.items, &mut self.spare, &bytes[..take]),
        }
        self.open = Some(left - take as u64);
        self.close_stream_if_done();
        take
    }

    /// [`OutQueue::stream_chunk`], but written straight to `w` behind what is queued, as far as
    /// the socket takes it in one `writev`; only the rest is copied into the queue. A large
    /// relayed payload then goes from the read buffer to the socket without a copy of ours.
    /// Falls back to queueing when a lazy sequence waits (it must go first) or on any error
    /// (the next flush meets it again).
    pub(crate) fn stream_chunk_through(&mut self, w: &mut impl Write, bytes: &[u8]) -> usize {
        let Some(left) = self.open else { return 0 };
        let bytes = &bytes[..bytes.len().min(usize::try_from(left).unwrap_or(usize::MAX))];
        // Everything queued must fit in the same `writev`, ahead of the chunk, or the chunk
        // could overtake it.
        if self.lazies > 0
            || self.framing == Framing::Datagram
            || self.gathering.is_some()
            || self.items.len() >= MAX_SLICES
        {
            return self.stream_chunk(bytes);
        }
        let mut slices = [IoSlice::new(&[]); MAX_SLICES];
        let mut n = 0;
        for item in &self.items {
            if let Some(bytes) = item.unwritten() {
                slices[n] = IoSlice::new(bytes);
                n += 1;
            }
        }
        slices[n] = IoSlice::new(bytes);
        let written = w.write_vectored(&slices[..=n]).unwrap_or(0);
        // The slices ahead of the chunk are exactly the ready bytes (no lazy items here), so
        // whatever the socket took beyond them came from the chunk. Held bytes were not
        // offered and must not be counted.
        let from_queue = written.min(self.ready);
        if from_queue > 0 {
            self.consume(from_queue);
        }
        let direct = written - from_queue;
        self.ready += append(&mut self.items, &mut self.spare, &bytes[direct..]);
        self.open = Some(left - bytes.len() as u64);
        self.close_stream_if_done();
        bytes.len()
    }

    /// Ends the open stream early, its sender being unable to finish it (issue 29): the rest
    /// of its announced length is zero bytes, drawn as the queue drains (never held in
    /// memory), so that the receiver's framing survives; what waited behind the stream follows
    /// it. Returns the bytes filled (0: no stream was open).
    pub(crate) fn cut_stream(&mut self) -> u64 {
        let Some(left) = self.open else { return 0 };
        match &mut self.gathering {
            // At most `WS_ASSEMBLE` bytes in all.
            Some(gathered) => gathered.resize(gathered.len() + left as usize, 0),
            None if left > 0 => {
                self.lazies += 1;
                self.items.push_back(Item::Fill(left));
            }
            None => {}
        }
        self.open = Some(0);
        self.close_stream_if_done();
        left
    }

    fn close_stream_if_done(&mut self) {
        if self.open == Some(0) {
            self.open = None;
            if let Some(whole) = self.gathering.take() {
                self.ready += put(
                    &mut self.items,
                    &mut self.spare,
                    self.framing,
                    self.deflate.as_deref_mut(),
                    &whole,
                );
            }
            self.items.append(&mut self.behind);
            self.ready += std::mem::take(&mut self.held);
        }
    }

    /// Asks lazy sequences for more while fewer than `low` bytes are ready ahead of them.
    pub(crate) fn refill(&mut self, low: usize) {
        loop {
            let mut ahead = 0;
            let Some(at) = self.items.iter().position(|item| match item.unwritten() {
                Some(bytes) => {
                    ahead += bytes.len();
                    false
                }
                None => true,
            }) else {
                return;
            };
            if ahead >= low {
                return;
            }
            let mut producer = match self.items.remove(at) {
                Some(Item::Lazy(producer)) => producer,
                Some(Item::Fill(left)) => {
                    self.fill_at(at, left);
                    continue;
                }
                _ => unreachable!("position found a lazy item"),
            };
            let mut made = VecDeque::new();
            let mut spare = std::mem::take(&mut self.spare);
            let framing = self.framing;
            let mut deflate = self.deflate.as_deref_mut();
            let mut added = 0;
            let more = producer.produce(
                &mut |m| added += put(&mut made, &mut spare, framing, deflate.as_deref_mut(), m),
                PRODUCE_BUDGET,
            );
            self.spare = spare;
            self.ready += added;
            if more {
                self.items.insert(at, Item::Lazy(producer));
            } else {
                self.lazies -= 1;
            }
            for (i, item) in made.into_iter().enumerate() {
                self.items.insert(at + i, item);
            }
            if more && added == 0 {
                // A sequence that yields nothing yet says it has more: ask again next time.
                return;
            }
        }
    }

    /// Draws one budget of zeros from a fill at `at` (taken out of the queue), putting the
    /// rest of it back behind them.
    fn fill_at(&mut self, at: usize, left: u64) {
        let n = left.min(PRODUCE_BUDGET as u64) as usize;
        let mut made = VecDeque::new();
        self.ready += append(&mut made, &mut self.spare, &ZEROS[..n]);
        if left > n as u64 {
            made.push_back(Item::Fill(left - n as u64));
        } else {
            self.lazies -= 1;
        }
        for (i, item) in made.into_iter().enumerate() {
            self.items.insert(at + i, item);
        }
    }

    /// Writes what is ready to `w` until it would block or nothing is ready. Returns the bytes
    /// written; `WouldBlock` is not an error here.
    pub(crate) fn write_to(&mut self, w: &mut impl Write) -> io::Result<usize> {
        debug_assert!(self.framing != Framing::Datagram);
        let mut total = 0;
        loop {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let mut n = 0;
            for item in &self.items {
                let Some(bytes) = item.unwritten() else {
                    break;
                };
                slices[n] = IoSlice::new(bytes);
                n += 1;
                if n == MAX_SLICES {
                    break;
                }
            }
            if n == 0 {
                return Ok(total);
            }
            let written = match w.write_vectored(&slices[..n]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            total += written;
            self.consume(written);
        }
    }

    /// The next datagram to send (datagram framing).
    pub(crate) fn front_datagram(&self) -> Option<&[u8]> {
        match self.items.front() {
            Some(Item::Bytes { data, .. }) => Some(data),
            _ => None,
        }
    }

    /// Drops the datagram [`Self::front_datagram`] returned, once sent.
    pub(crate) fn pop_datagram(&mut self) {
        if let Some(Item::Bytes { data, .. }) = self.items.pop_front() {
            self.ready -= data.len();
        }
    }

    /// A large block (a message handed over whole, [`OutQueue::push_owned`]) that has been
    /// written out, if one has: its memory can take the next large message.
    pub(crate) fn take_recycled(&mut self) -> Option<Vec<u8>> {
        self.recycled.take()
    }

    /// Drops everything (the connection is gone).
    pub(crate) fn clear(&mut self) {
        self.items.clear();
        self.behind.clear();
        self.open = None;
        self.gathering = None;
        self.ready = 0;
        self.held = 0;
        self.lazies = 0;
    }

    fn consume(&mut self, mut n: usize) {
        self.ready -= n;
        while n > 0 {
            let (len, pos) = match self.items.front_mut() {
                Some(Item::Bytes { data, pos }) => (data.len(), pos),
                Some(Item::Shared { data, pos }) => (data.len(), pos),
                _ => unreachable!("wrote more than the queue held"),
            };
            let left = len - *pos;
            if n < left {
                *pos += n;
                return;
            }
            n -= left;
            if let Some(Item::Bytes { mut data, .. }) = self.items.pop_front() {
                if data.capacity() <= 4 * OWN_BLOCK && self.spare.capacity() == 0 {
                    data.clear();
                    self.spare = data;
                } else if data.capacity() >= RECYCLE_FROM && self.recycled.is_none() {
                    self.recycled = Some(data);
                }
            }
        }
    }
}

/// Appends `msg`, framed (compressed if `deflate` says so), to `line`; returns the bytes added.
fn put(
    line: &mut VecDeque<Item>,
    spare: &mut Vec<u8>,
    framing: Framing,
    deflate: Option<&mut Compressor>,
    msg: &[u8],
) -> usize {
    match framing {
        Framing::WebSocket if deflate.as_ref().is_some_and(|d| d.compresses(msg.len())) => {
            let deflate = deflate.expect("checked");
            let mut frame = Vec::new();
            deflate.write_message(&mut frame, ws_opcode(msg), msg);
            let n = frame.len();
            if n < OWN_BLOCK {
                append(line, spare, &frame)
            } else {
                // Large compressed messages travel in the buffer they were made in.
                line.push_back(Item::Bytes {
                    data: frame,
                    pos: 0,
                });
                n
            }
        }
        Framing::Frames => {
            append(line, spare, &header(msg.len() as u64)) + append(line, spare, msg)
        }
        Framing::Raw => append(line, spare, msg),
        Framing::WebSocket => {
            append(line, spare, &ws_header(msg, msg.len() as u64)) + append(line, spare, msg)
        }
        Framing::Datagram => {
            let mut data = Vec::with_capacity(msg.len() + 1);
            data.push(b'D');
            data.extend_from_slice(msg);
            let n = data.len();
            line.push_back(Item::Bytes { data, pos: 0 });
            n
        }
    }
}

/// The header of a WebSocket message of `len` bytes that starts with (or is) `msg`: text if
/// `msg` is UTF-8 (callers pass the whole message, or a non-UTF-8 byte for binary).
fn ws_header(msg: &[u8], len: u64) -> Vec<u8> {
    let opcode = ws_opcode(msg);
    let mut h = Vec::with_capacity(10);
    write_header(&mut h, true, opcode, len);
    h
}

/// A WebSocket message's opcode: text if its bytes are UTF-8, else binary.
fn ws_opcode(msg: &[u8]) -> Opcode {
    match std::str::from_utf8(msg) {
        Ok(_) => Opcode::Text,
        Err(_) => Opcode::Binary,
    }
}

/// Appends wire bytes to the last block when it is small, else to a new block.
fn append(line: &mut VecDeque<Item>, spare: &mut Vec<u8>, bytes: &[u8]) -> usize {
    if bytes.is_empty() {
        return 0;
    }
    if bytes.len() < OWN_BLOCK {
        if let Some(Item::Bytes { data, .. }) = line.back_mut() {
            if data.len() + bytes.len() <= OWN_BLOCK.max(data.capacity()) && data.len() < OWN_BLOCK
            {
                data.extend_from_slice(bytes);
                return bytes.len();
            }
        }
    }
    let mut data = std::mem::take(spare);
    if data.capacity() == 0 {
        data.reserve(bytes.len().max(OWN_BLOCK));
    }
    data.extend_from_slice(bytes);
    line.push_back(Item::Bytes { data, pos: 0 });
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `step` bytes per call and would block every other call.
    struct Trickle {
        got: Vec<u8>,
        step: usize,
        calls: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls % 2 == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.step);
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        /// Takes from every slice, as `writev` does, up to `step` in all.
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls % 2 == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.step - n);
                self.got.extend_from_slice(&b[..take]);
                n += take;
            }
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn drain(q: &mut OutQueue, w: &mut Trickle) {
        for _ in 0..1_000_000 {
            q.refill(4096);
            q.write_to(w).unwrap();
            if q.is_empty() {
                return;
            }
        }
        panic!("queue never drained");
    }

    fn frames(mut bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            out.push(bytes[8..8 + len].to_vec());
            bytes = &bytes[8 + len..];
        }
        out
    }

    #[test]
    fn messages_come_out_in_order_whatever_the_writes() {
        let mut q = OutQueue::new(Framing::Frames);
        q.push_message(b"one");
        q.push_owned(vec![7u8; 100_000]);
        q.push_lazy(Box::new(IterProducer((0..1000).map(|i| format!("m{i}")))));
        q.push_message(b"after");
        let mut w = Trickle {
            got: Vec::new(),
            step: 777,
            calls: 0,
        };
        drain(&mut q, &mut w);
        let got = frames(&w.got);
        assert_eq!(got.len(), 1003);
        assert_eq!(got[0], b"one");
        assert_eq!(got[1], vec![7u8; 100_000]);
        assert_eq!(got[2], b"m0");
        assert_eq!(got[1001], b"m999");
        assert_eq!(got[1002], b"after");
        assert_eq!(q.queued(), 0);
    }

    #[test]
    fn a_shared_message_is_written_from_its_owner_and_released_once_written() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        struct Owner(Vec<u8>, Arc<AtomicBool>);
        impl AsRef<[u8]> for Owner {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }
        impl Drop for Owner {
            fn drop(&mut self) {
                self.1.store(true, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicBool::new(false));
        let big = Bytes::from_owner(Owner(vec![9u8; 100_000], dropped.clone()));
        let at = big.as_ptr();
        let mut q = OutQueue::new(Framing::Frames);
        q.push_message(b"before");
        q.push_shared(big);
        q.push_shared(Bytes::from_static(b"small"));
        q.push_message(b"after");
        assert_eq!(q.queued(), 4 * 8 + 6 + 100_000 + 5 + 5);
        // Written from where it lies: the queue holds the owner's memory, not a copy.
        assert!(q
            .items
            .iter()
            .any(|i| i.unwritten().is_some_and(|b| b.as_ptr() == at)));
        let mut w = Trickle {
            got: Vec::new(),
            step: 4096,
            calls: 0,
        };
        drain(&mut q, &mut w);
        assert!(dropped.load(Ordering::SeqCst), "released once written");
        let got = frames(&w.got);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], b"before");
        assert_eq!(got[1], vec![9u8; 100_000]);
        assert_eq!(got[2], b"small");
        assert_eq!(got[3], b"after");
    }

    #[test]
    fn a_lazy_sequence_is_drawn_only_as_the_queue_drains() {
        let mut q = OutQueue::new(Framing::Frames);
        q.push_lazy(Box::new(IterProducer(std::iter::repeat_n(
            [1u8; 100], 1_000_000,
        ))));
        q.refill(4096);
        // One production budget's worth, not a million messages.
        assert!(q.queued() <= PRODUCE_BUDGET + 200, "{}", q.queued());
        assert!(!q.is_empty());
    }

    #[test]
    fn nothing_is_spliced_into_an_open_stream() {
        let mut q = OutQueue::new(Framing::Frames);
        assert!(q.open_stream(10));
        assert!(!q.open_stream(5));
        q.stream_chunk(b"01234");
        q.push_message(b"later");
        assert_eq!(q.stream_chunk(b"56789extra"), 5);
        q.push_message(b"last");
        let mut w = Trickle {
            got: Vec::new(),
            step: 3,
            calls: 0,
        };
        drain(&mut q, &mut w);
        assert_eq!(
            frames(&w.got),
            vec![b"0123456789".to_vec(), b"later".to_vec(), b"last".to_vec()]
        );
    }

    #[test]
    fn a_chunk_written_through_never_overtakes_what_is_queued() {
        for step in [1, 5, 100, 5000, 1 << 20] {
            let mut q = OutQueue::new(Framing::Frames);
            q.push_message(b"first");
            assert!(q.open_stream(30_000));
            let mut w = Trickle {
                got: Vec::new(),
                step,
                calls: 0,
            };
            let chunk: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
            for _ in 0..3 {
                assert_eq!(q.stream_chunk_through(&mut w, &chunk), 10_000);
            }
            q.push_message(b"last");
            drain(&mut q, &mut w);
            let want = [chunk.clone(), chunk.clone(), chunk.clone()].concat();
            assert_eq!(
                frames(&w.got),
                vec![b"first".to_vec(), want, b"last".to_vec()],
                "step {step}"
            );
        }
    }

    /// Issue 12: whole messages held behind an open stream were counted as written when the
    /// socket took a chunk written through, and `consume` then hit `unreachable!`.
    #[test]
    fn held_messages_are_not_counted_as_written_through() {
        let mut q = OutQueue::new(Framing::Frames);
        q.push_message(b"first");
        assert!(q.open_stream(20_000));
        q.push_owned(vec![9u8; 100_000]);
        q.push_message(b"small");
        q.push_wire(b"\x05\x00\x00\x00\x00\x00\x00\x80error");
        assert_eq!(q.ready(), 13 + 8);
        assert_eq!(q.queued(), 13 + 8 + 100_008 + 13 + 13);
        let mut w = Trickle {
            got: Vec::new(),
            step: 1 << 20,
            calls: 0,
        };
        let chunk = vec![1u8; 10_000];
        assert_eq!(q.stream_chunk_through(&mut w, &chunk), 10_000);
        assert_eq!(q.ready(), 0);
        assert_eq!(q.stream_chunk_through(&mut w, &chunk), 10_000);
        drain(&mut q, &mut w);
        let got = frames(&w.got[..w.got.len() - 13]);
        assert_eq!(
            got,
            vec![
                b"first".to_vec(),
                vec![1u8; 20_000],
                vec![9u8; 100_000],
                b"small".to_vec()
            ]
        );
        // The control frame came last, after the stream and what waited behind it.
        assert_eq!(
            &w.got[w.got.len() - 13..],
            b"\x05\x00\x00\x00\x00\x00\x00\x80error"
        );
        assert_eq!(q.queued(), 0);
    }

    #[test]
    fn datagrams_stay_one_per_message() {
        let mut q = OutQueue::new(Framing::Datagram);
        q.push_message(b"a");
        q.push_lazy(Box::new(IterProducer(["b", "c"].into_iter())));
        q.refill(1 << 20);
        let mut seen = Vec::new();
        while let Some(d) = q.front_datagram() {
            seen.push(d.to_vec());
            q.pop_datagram();
        }
        assert_eq!(seen, vec![b"Da".to_vec(), b"Db".to_vec(), b"Dc".to_vec()]);
        assert_eq!(q.queued(), 0);
        // The lazy sequence is spent and gone.
        q.refill(1 << 20);
        assert!(q.is_empty());
    }
}
