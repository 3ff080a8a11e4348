//! The QPACK encoder (RFC 9204 §2.1): field sections out, encoder-stream instructions out,
//! the peer decoder's instructions in.
//!
//! Until [`Encoder::set_capacity`] gives it a table, it uses the static table and literals
//! only, which never blocks the peer and needs no encoder stream; that is where a server can
//! start. With a table it works in one pass (RFC 9204 Appendix C): the Base is the Insert
//! Count when the section starts, fields it finds in the dynamic table are referenced, and
//! fields worth keeping are inserted and referenced after the Base. It keeps the rules that
//! make this safe:
//!
//! - an entry is evicted only once the decoder has acknowledged it and no unacknowledged
//!   section references it (§2.1.1); an insert that would need more is not made (the field
//!   goes as a literal);
//! - an entry the decoder has not acknowledged is referenced only when the stream may block:
//!   no more streams at risk than the peer's SETTINGS_QPACK_BLOCKED_STREAMS (§2.1.2);
//! - sensitive fields (`authorization`, `cookie`, `set-cookie`, `proxy-authorization`) are
//!   never put in the table and go as literals with the N bit (§7.1.3).
//!
//! It never duplicates entries on its own (§2.1.1.1's "draining" heuristic is not
//! implemented): an often-referenced old entry may keep later inserts out, which costs
//! compression, never correctness. [`Encoder::duplicate`] and [`Encoder::insert`] exist for a
//! caller that wants to place entries itself.

use std::collections::{BTreeMap, VecDeque};

use super::field::{write_prefix, FieldLine};
use super::instruction::{DecoderInstruction, EncoderInstruction};
use super::static_table::{self, Match};
use super::table::{entry_size, Entry, Table};
use super::ENTRY_OVERHEAD;
use crate::h3::error::{Error, ErrorCode, H3Error};

/// Names whose fields are never indexed (§7.1.3: "such as the Cookie or Authorization
/// header fields"), and carry the N bit.
const SENSITIVE: [&[u8]; 4] = [
    b"authorization",
    b"cookie",
    b"proxy-authorization",
    b"set-cookie",
];

/// Names whose values are nearly always new (a length, a validator, a range): inserting
/// them would only churn the table.
const UNIQUE: [&[u8]; 6] = [
    b"age",
    b"content-length",
    b"content-range",
    b"etag",
    b"last-modified",
    b"location",
];

fn is_sensitive(name: &[u8]) -> bool {
    SENSITIVE.contains(&name)
}

/// Encodes with the static table alone: a full match is one index, a name match a literal
/// with a static name reference, anything else a literal with a literal name. Stateless,
/// never blocking, no encoder stream. Sensitive fields carry the N bit (§7.1.3).
pub fn encode_static<'a>(
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    huffman: bool,
    out: &mut Vec<u8>,
) {
    write_prefix(0, 0, 0, out);
    for (name, value) in fields {
        static_line(name, value, is_sensitive(name), huffman, out);
    }
}

/// One field as the static table allows: an index, or a literal with or without a static
/// name reference.
fn static_line(name: &[u8], value: &[u8], never_index: bool, huffman: bool, out: &mut Vec<u8>) {
    match static_table::find(name, value) {
        Match::Full(i) => FieldLine::<&[u8]>::Indexed {
            static_table: true,
            index: i as u64,
        }
        .write(huffman, out),
        Match::Name(i) => FieldLine::LiteralNameRef {
            never_index,
            static_table: true,
            index: i as u64,
            value,
        }
        .write(huffman, out),
        Match::None => FieldLine::LiteralName {
            never_index,
            name,
            value,
        }
        .write(huffman, out),
    }
}

/// A section sent and not yet acknowledged: what it pins.
#[derive(Debug)]
struct Unacked {
    required: u64,
    /// Absolute indices it references (each reference counted once per use).
    refs: Vec<u64>,
}

/// The encoding side of a connection's QPACK (see the [module docs](self)).
#[derive(Debug)]
pub struct Encoder {
    table: Table,
    /// Outstanding references per entry, aligned with the table: `pins[i]` is for absolute
    /// index `table.first() + i`.
    pins: VecDeque<u32>,
    /// The peer decoder's SETTINGS_QPACK_MAX_TABLE_CAPACITY and _BLOCKED_STREAMS, once known.
    peer: Option<(u64, u64)>,
    /// `floor(peer max capacity / 32)` (§4.5.1.1).
    max_entries: u64,
    /// Inserts the decoder has acknowledged (§2.1.4).
    known_received: u64,
    /// Sections with dynamic references awaiting acknowledgment, per stream, oldest first.
    unacked: BTreeMap<u64, VecDeque<Unacked>>,
    /// The decoder stream's bytes past the last whole instruction.
    partial: Vec<u8>,
    /// Encoder-stream bytes not yet handed to the caller.
    pending: Vec<u8>,
    huffman: bool,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

fn decoder_stream(reason: &'static str) -> Error {
    Error::Peer(H3Error::conn(ErrorCode::QPACK_DECODER_STREAM_ERROR, reason))
}

impl Encoder {
    /// An encoder with no dynamic table, Huffman-coding strings where that is shorter.
    pub fn new() -> Self {
        Encoder {
            table: Table::default(),
            pins: VecDeque::new(),
            peer: None,
            max_entries: 0,
            known_received: 0,
            unacked: BTreeMap::new(),
            partial: Vec::new(),
            pending: Vec::new(),
            huffman: true,
        }
    }

    /// Whether strings are Huffman-coded when that is shorter (the default) or always sent
    /// as they are (cheaper on CPU; RFC 9204 Appendix B's examples are written so).
    pub fn set_huffman(&mut self, huffman: bool) {
        self.huffman = huffman;
    }

    /// The peer's SETTINGS arrived: its decoder's SETTINGS_QPACK_MAX_TABLE_CAPACITY and
    /// SETTINGS_QPACK_BLOCKED_STREAMS. Until then the table's capacity can only be 0
    /// (§3.2.3). Telling it twice is the caller's mistake: SETTINGS come once.
    pub fn peer_settings(
        &mut self,
        max_table_capacity: u64,
        blocked_streams: u64,
    ) -> Result<(), Error> {
        if self.peer.is_some() {
            return Err(Error::Misuse("the peer's settings given twice"));
        }
        self.peer = Some((max_table_capacity, blocked_streams));
        self.max_entries = max_table_capacity / ENTRY_OVERHEAD as u64;
        Ok(())
    }

    /// Sets the dynamic table's capacity, at most the peer's maximum, and queues the Set
    /// Dynamic Table Capacity instruction (§4.3.1). A capacity past the peer's maximum, or a
    /// cut that would evict entries still unacknowledged or referenced (§2.1.1), is refused
    /// ([`Error::Misuse`]); the latter may succeed once the decoder has caught up.
    pub fn set_capacity(&mut self, capacity: u64) -> Result<(), Error> {
        let max = self.peer.map_or(0, |(max, _)| max);
        if capacity > max {
            return Err(Error::Misuse("a table capacity past the peer's maximum"));
        }
        let capacity = capacity as usize;
        if capacity == self.table.capacity() {
            return Ok(());
        }
        let n = self.table.evictions_to(capacity);
        if !self.evictable(n) {
            return Err(Error::Misuse(
                "a capacity that would evict entries the decoder still needs",
            ));
        }
        self.table.set_capacity(capacity);
        self.pins.drain(..n);
        EncoderInstruction::<&[u8]>::SetCapacity(capacity as u64)
            .write(self.huffman, &mut self.pending);
        Ok(())
    }

    /// The table's capacity now.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// The dynamic table's size in bytes (§3.2.1).
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// Entries inserted so far.
    pub fn insert_count(&self) -> u64 {
        self.table.insert_count()
    }

    /// Inserts the decoder has acknowledged.
    pub fn known_received_count(&self) -> u64 {
        self.known_received
    }

    /// Streams whose unacknowledged sections may be blocked at the decoder (§2.1.2).
    pub fn blocking_streams(&self) -> usize {
        self.unacked
            .values()
            .filter(|q| q.iter().any(|s| s.required > self.known_received))
            .count()
    }

    /// Whether the oldest `n` entries may all be evicted: acknowledged, and referenced by no
    /// unacknowledged section (§2.1.1).
    fn evictable(&self, n: usize) -> bool {
        (0..n).all(|i| {
            let abs = self.table.first() + i as u64;
            abs < self.known_received && self.pins.get(i) == Some(&0)
        })
    }

    /// Inserts `name: value` (a name found in the static or dynamic table is sent as a
    /// reference), queuing the instruction; its absolute index, or `None` when it does not
    /// fit without evicting an entry that must stay. For warming the table with fields
    /// every response will carry (`server`, say).
    pub fn insert(&mut self, name: &[u8], value: &[u8]) -> Option<u64> {
        let size = entry_size(name, value);
        let n = self.table.evictions_for(size)?;
        if !self.evictable(n) {
            return None;
        }
        let instruction = match static_table::find(name, value) {
            Match::Full(i) | Match::Name(i) => EncoderInstruction::InsertWithNameRef {
                static_table: true,
                index: i as u64,
                value,
            },
            Match::None => match self.table.find(name, value).1 {
                // The named entry may be among those this insert evicts: §3.2.2 allows it,
                // and the decoder copies the name first.
                Some(abs) => EncoderInstruction::InsertWithNameRef {
                    static_table: false,
                    index: self.table.insert_count() - 1 - abs,
                    value,
                },
                None => EncoderInstruction::InsertWithLiteralName { name, value },
            },
        };
        instruction.write(self.huffman, &mut self.pending);
        let abs = self.table.insert(Entry {
            name: name.to_vec(),
            value: value.to_vec(),
        })?;
        self.pins.drain(..n);
        self.pins.push_back(0);
        Some(abs)
    }

    /// Inserts a copy of the entry with absolute index `abs` (§4.3.4), so that sections can
    /// reference the copy and let the old one be evicted; the copy's index, or `None` when
    /// `abs` is gone or the copy does not fit.
    pub fn duplicate(&mut self, abs: u64) -> Option<u64> {
        let entry = self.table.get(abs)?.clone();
        let n = self.table.evictions_for(entry.size())?;
        // The original must outlive the eviction to be copied from the decoder's table.
        if !self.evictable(n) || abs < self.table.first() + n as u64 {
            return None;
        }
        let rel = self.table.insert_count() - 1 - abs;
        EncoderInstruction::<&[u8]>::Duplicate(rel).write(self.huffman, &mut self.pending);
        let copy = self.table.insert(entry)?;
        self.pins.drain(..n);
        self.pins.push_back(0);
        Some(copy)
    }

    fn pin(&mut self, abs: u64, delta: i32) {
        let i = abs.checked_sub(self.table.first()).map(|i| i as usize);
        // Pinned entries cannot be evicted, so one that is pinned is always still there.
        if let Some(p) = i.and_then(|i| self.pins.get_mut(i)) {
            *p = p.saturating_add_signed(delta);
        }
    }

    /// Encodes one field section for `stream` into `out` (a HEADERS frame's payload),
    /// queuing any inserts it makes on the encoder stream. The caller must send the
    /// encoder stream's bytes ([`Encoder::write_encoder_stream`]) for the peer to decode it.
    /// Names must be lowercase (RFC 9114 §4.2), which is the caller's to ensure.
    pub fn encode<'a>(
        &mut self,
        stream: u64,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut Vec<u8>,
    ) {
        let base = self.table.insert_count();
        let allowed = self.peer.map_or(0, |(_, blocked)| blocked);
        let at_risk = self
            .unacked
            .get(&stream)
            .is_some_and(|q| q.iter().any(|s| s.required > self.known_received));
        // §2.1.2: "An encoder MUST limit the number of streams that could become blocked to
        // the value of SETTINGS_QPACK_BLOCKED_STREAMS at all times."
        let may_block = at_risk || (self.blocking_streams() as u64) < allowed;
        let dynamic = self.table.capacity() > 0;
        let mut lines = Vec::new();
        let mut refs: Vec<u64> = Vec::new();
        for (name, value) in fields {
            let sensitive = is_sensitive(name);
            let stat = static_table::find(name, value);
            if let Match::Full(_) = stat {
                static_line(name, value, false, self.huffman, &mut lines);
                continue;
            }
            let usable = |this: &Self, abs: u64| abs < this.known_received || may_block;
            if dynamic && !sensitive {
                let (full, _) = self.table.find(name, value);
                let mut target = full.filter(|&abs| usable(self, abs));
                if full.is_none()
                    && !UNIQUE.contains(&name)
                    && entry_size(name, value) <= self.table.capacity() * 3 / 4
                {
                    target = self.insert(name, value).filter(|&abs| usable(self, abs));
                }
                if let Some(abs) = target {
                    self.pin(abs, 1);
                    refs.push(abs);
                    let line = if abs < base {
                        FieldLine::<&[u8]>::Indexed {
                            static_table: false,
                            index: base - 1 - abs,
                        }
                    } else {
                        FieldLine::IndexedPostBase { index: abs - base }
                    };
                    line.write(self.huffman, &mut lines);
                    continue;
                }
            }
            // A literal; its name by reference when a table has it.
            if let (Match::None, true) = (stat, dynamic) {
                if let Some(abs) = self.table.find(name, value).1.filter(|&a| usable(self, a)) {
                    self.pin(abs, 1);
                    refs.push(abs);
                    let line = if abs < base {
                        FieldLine::LiteralNameRef {
                            never_index: sensitive,
                            static_table: false,
                            index: base - 1 - abs,
                            value,
                        }
                    } else {
                        FieldLine::LiteralPostBaseNameRef {
                            never_index: sensitive,
                            index: abs - base,
                            value,
                        }
                    };
                    line.write(self.huffman, &mut lines);
                    continue;
                }
            }
            static_line(name, value, sensitive, self.huffman, &mut lines);
        }
        let required = refs.iter().max().map_or(0, |&abs| abs + 1);
        if required == 0 {
            write_prefix(0, 0, self.max_entries, out);
        } else {
            write_prefix(required, base, self.max_entries, out);
            self.unacked
                .entry(stream)
                .or_default()
                .push_back(Unacked { required, refs });
        }
        out.extend_from_slice(&lines);
    }

    /// Appends the encoder-stream bytes to send (inserts and capacity changes, in order).
    pub fn write_encoder_stream(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.pending);
    }

    /// Whether [`Encoder::write_encoder_stream`] would write anything.
    pub fn has_encoder_stream_output(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Takes bytes of the peer's decoder stream, in whatever pieces they come.
    ///
    /// Errors are the peer's, connection errors of type QPACK_DECODER_STREAM_ERROR
    /// (§4.4): an acknowledgment for a stream with no section awaiting one, an increment of
    /// zero or past the inserts sent.
    pub fn handle_decoder_stream(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.partial.extend_from_slice(bytes);
        let mut at = 0;
        let result = loop {
            match DecoderInstruction::parse(&self.partial[at..]) {
                Ok(Some((instruction, n))) => {
                    at += n;
                    if let Err(e) = self.apply(instruction) {
                        break Err(e);
                    }
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(Error::Peer(e)),
            }
        };
        self.partial.drain(..at);
        result
    }

    fn release(&mut self, section: Unacked) {
        for abs in section.refs {
            self.pin(abs, -1);
        }
    }

    fn apply(&mut self, instruction: DecoderInstruction) -> Result<(), Error> {
        match instruction {
            DecoderInstruction::SectionAck(stream) => {
                // §4.4.1: the earliest unacknowledged section on that stream.
                let queue = self.unacked.get_mut(&stream);
                let Some(section) = queue.and_then(|q| q.pop_front()) else {
                    return Err(decoder_stream(
                        "an acknowledgment with no section awaiting it",
                    ));
                };
                if self.unacked.get(&stream).is_some_and(|q| q.is_empty()) {
                    self.unacked.remove(&stream);
                }
                self.known_received = self.known_received.max(section.required);
                self.release(section);
            }
            DecoderInstruction::StreamCancel(stream) => {
                for section in self.unacked.remove(&stream).unwrap_or_default() {
                    self.release(section);
                }
            }
            DecoderInstruction::InsertCountIncrement(n) => {
                let count = self.known_received.checked_add(n);
                if n == 0 || count.is_none_or(|c| c > self.table.insert_count()) {
                    return Err(decoder_stream(
                        "an Insert Count Increment of 0 or past the inserts",
                    ));
                }
                self.known_received += n;
            }
        }
        Ok(())
    }
}
