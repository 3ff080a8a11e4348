//! The QPACK decoder (RFC 9204 §2.2): the peer's encoder stream in, field sections per
//! stream in, decoded fields (or "blocked") out, and the decoder stream's instructions out
//! for the caller to send.

use std::collections::{BTreeMap, VecDeque};

use super::field::{decode_insert_count, FieldLine, Prefix};
use super::instruction::{DecoderInstruction, EncoderInstruction};
use super::prim::Short;
use super::static_table;
use super::table::{entry_size, Entry, Table};
use super::{Field, ENTRY_OVERHEAD};
use crate::h3::error::{Error, ErrorCode, H3Error};

/// What berth's decoder allows its peer's encoder, as berth's SETTINGS announce it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderConfig {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY: the largest dynamic table the peer may set
    /// (§3.2.3). 0 keeps the decoder to the static table.
    pub max_table_capacity: u64,
    /// SETTINGS_QPACK_BLOCKED_STREAMS: how many streams may wait for the encoder stream at
    /// once (§2.1.2); one more is a connection error of type QPACK_DECOMPRESSION_FAILED.
    pub max_blocked_streams: u64,
    /// The largest decoded field section, each field counted as name + value + 32 (RFC 9114
    /// §4.2.2), as SETTINGS_MAX_FIELD_SECTION_SIZE announces it. A larger one is
    /// [`Decoded::TooLarge`]: the request is answered 431, the connection goes on.
    pub max_field_section_size: u64,
}

impl Default for DecoderConfig {
    /// 4096 bytes of table (HPACK's default, and what nginx, h2o and quiche allow), 16
    /// blocked streams (quiche's and nginx's 16; h2o 100), 16 KiB of field section (berth's
    /// HTTP/1.1 head limit and HTTP/2 list size).
    fn default() -> Self {
        DecoderConfig {
            max_table_capacity: 4096,
            max_blocked_streams: 16,
            max_field_section_size: 16 * 1024,
        }
    }
}

/// What decoding a field section gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// The field lines, in order (§2.2: "MUST emit field lines in the order their
    /// representations appear"). Names and values are as sent; checking them (lowercase,
    /// pseudo-fields) is HTTP/3's, not QPACK's.
    Fields(Vec<Field>),
    /// The section needs entries the encoder stream has not brought yet (§2.1.2). The
    /// decoder keeps it, and gives its result from [`Decoder::poll_unblocked`] once they
    /// arrive. Meanwhile the stream's data should stay in its flow-control window (§2.2.1):
    /// read nothing more from that stream.
    Blocked,
    /// Larger than [`DecoderConfig::max_field_section_size`]: nothing kept (RFC 9114 §4.2.2:
    /// answer 431). Decoding stopped there; the section is still acknowledged, since the
    /// decoder needs nothing more from it.
    TooLarge,
}

/// A section waiting for the encoder stream.
#[derive(Debug)]
struct Blocked {
    required: u64,
    section: Vec<u8>,
}

/// The decoding side of a connection's QPACK (see the [module docs](super) for the order of
/// calls).
#[derive(Debug)]
pub struct Decoder {
    config: DecoderConfig,
    /// `floor(max_table_capacity / 32)` (§4.5.1.1).
    max_entries: u64,
    table: Table,
    /// Inserts the encoder has been told about (Section Acknowledgments and Insert Count
    /// Increments sent): §2.1.4's Known Received Count, as this side tracks it.
    known_received: u64,
    /// The encoder stream's bytes past the last whole instruction.
    partial: Vec<u8>,
    /// Blocked sections by stream (at most one per stream: the stream is not read further
    /// until it is decoded).
    blocked: BTreeMap<u64, Blocked>,
    /// Sections unblocked and decoded, for `poll_unblocked`.
    ready: VecDeque<(u64, Decoded)>,
    /// Decoder-stream instructions not yet handed to the caller.
    pending: Vec<u8>,
}

fn failed(reason: &'static str) -> Error {
    Error::Peer(H3Error::conn(ErrorCode::QPACK_DECOMPRESSION_FAILED, reason))
}

fn encoder_stream(reason: &'static str) -> Error {
    Error::Peer(H3Error::conn(ErrorCode::QPACK_ENCODER_STREAM_ERROR, reason))
}

/// A field section's primitive cut short or malformed. The section is whole, so running
/// out is the encoder's error, as is bad Huffman; an integer past berth's limit is §7.4's
/// "value larger than it is able to decode": a stream error on a request stream.
fn section_error(e: Short) -> Error {
    Error::Peer(match e {
        Short::Incomplete => H3Error::conn(
            ErrorCode::QPACK_DECOMPRESSION_FAILED,
            "a field section ends inside a representation",
        ),
        Short::Huffman => H3Error::conn(
            ErrorCode::QPACK_DECOMPRESSION_FAILED,
            "a Huffman string that does not decode",
        ),
        Short::TooLarge => H3Error::stream(
            ErrorCode::QPACK_DECOMPRESSION_FAILED,
            "an integer past berth's limit in a field section",
        ),
    })
}

impl Decoder {
    /// A decoder that allows its peer what `config` says (and berth's SETTINGS must say
    /// the same).
    pub fn new(config: DecoderConfig) -> Self {
        Decoder {
            config,
            max_entries: config.max_table_capacity / ENTRY_OVERHEAD as u64,
            table: Table::default(),
            known_received: 0,
            partial: Vec::new(),
            blocked: BTreeMap::new(),
            ready: VecDeque::new(),
            pending: Vec::new(),
        }
    }

    /// The settings it was made with.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// Entries the peer's encoder has inserted so far.
    pub fn insert_count(&self) -> u64 {
        self.table.insert_count()
    }

    /// The dynamic table's size in bytes (§3.2.1) and capacity.
    pub fn table_size(&self) -> (usize, usize) {
        (self.table.size(), self.table.capacity())
    }

    /// Streams blocked now.
    pub fn blocked_streams(&self) -> usize {
        self.blocked.len()
    }

    /// Bytes held for the peer: the encoder stream's unfinished instruction (at most about
    /// four times the table capacity: a string that could not fit is refused from its
    /// length) and the blocked sections (at most the blocked streams times the frame size
    /// limit). For a connection's memory accounting.
    pub fn buffered(&self) -> usize {
        self.partial.len()
            + self
                .blocked
                .values()
                .map(|b| b.section.len())
                .sum::<usize>()
    }

    /// Takes bytes of the peer's encoder stream, in whatever pieces they come. Whole
    /// instructions change the table; the rest waits for the next call. Sections this
    /// unblocks are decoded at once, their results queued for [`Decoder::poll_unblocked`].
    ///
    /// Errors are the peer's: QPACK_ENCODER_STREAM_ERROR for a bad instruction (a capacity
    /// past berth's setting, a reference to an entry that is not there, an entry larger
    /// than the table, §3.2, §4.3), or QPACK_DECOMPRESSION_FAILED from an unblocked
    /// section. Both end the connection.
    pub fn handle_encoder_stream(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.partial.extend_from_slice(bytes);
        let mut at = 0;
        let result = loop {
            let capacity = self.table.capacity() as u64;
            match EncoderInstruction::parse(&self.partial[at..], capacity) {
                Ok(Some((instruction, n))) => {
                    at += n;
                    // Sections are unblocked after each instruction, not after each call:
                    // what a section decodes to must not depend on how QUIC cut the
                    // stream (a later instruction may evict what it needs; §2.1.1 forbids
                    // that to the encoder, but the result must not vary with it).
                    if let Err(e) = self.apply(instruction).and_then(|()| self.unblock()) {
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

    /// One encoder instruction.
    fn apply(&mut self, instruction: EncoderInstruction) -> Result<(), Error> {
        match instruction {
            EncoderInstruction::SetCapacity(c) => {
                if c > self.config.max_table_capacity {
                    return Err(encoder_stream("a table capacity past SETTINGS"));
                }
                self.table.set_capacity(c as usize);
            }
            EncoderInstruction::InsertWithNameRef {
                static_table,
                index,
                value,
            } => {
                let name = if static_table {
                    static_table::get(index)
                        .ok_or(encoder_stream("a static index past the table"))?
                        .0
                        .to_vec()
                } else {
                    // Copied before the insert, which may evict the entry it names (§3.2.2).
                    let abs = self
                        .table
                        .relative(index)
                        .ok_or(encoder_stream("a name reference to no entry"))?;
                    self.table
                        .get(abs)
                        .map(|e| e.name.clone())
                        .unwrap_or_default()
                };
                self.insert(Entry { name, value })?;
            }
            EncoderInstruction::InsertWithLiteralName { name, value } => {
                self.insert(Entry { name, value })?;
            }
            EncoderInstruction::Duplicate(index) => {
                let entry = self
                    .table
                    .relative(index)
                    .and_then(|abs| self.table.get(abs))
                    .cloned()
                    .ok_or(encoder_stream("a duplicate of no entry"))?;
                self.insert(entry)?;
            }
        }
        Ok(())
    }

    fn insert(&mut self, entry: Entry) -> Result<(), Error> {
        self.table
            .insert(entry)
            .map(|_| ())
            .ok_or(encoder_stream("an entry larger than the table capacity"))
    }

    /// Decodes the sections that the inserts so far unblock.
    fn unblock(&mut self) -> Result<(), Error> {
        if self.blocked.is_empty() {
            return Ok(());
        }
        let count = self.table.insert_count();
        let ready: Vec<u64> = self
            .blocked
            .iter()
            .filter(|(_, b)| b.required <= count)
            .map(|(&s, _)| s)
            .collect();
        for stream in ready {
            if let Some(b) = self.blocked.remove(&stream) {
                let decoded = self.decode(stream, &b.section)?;
                self.ready.push_back((stream, decoded));
            }
        }
        Ok(())
    }

    /// Decodes the encoded field section of a HEADERS (or PUSH_PROMISE) frame on `stream`:
    /// the fields, [`Decoded::Blocked`], or [`Decoded::TooLarge`].
    ///
    /// A peer's error (QPACK_DECOMPRESSION_FAILED: a malformed section, a reference to an
    /// entry evicted or at or past the Required Insert Count, one blocked stream more than
    /// allowed; §2.1.2, §2.2.3, §4.5) ends the connection, except for an integer past
    /// berth's limit, a stream error ([`H3Error::stream`]). A second section on a stream
    /// that is blocked is the caller's mistake ([`Error::Misuse`]): that stream must not be
    /// read until [`Decoder::poll_unblocked`] gives its first.
    pub fn decode(&mut self, stream: u64, section: &[u8]) -> Result<Decoded, Error> {
        if self.blocked.contains_key(&stream) {
            return Err(Error::Misuse("a section on a stream still blocked"));
        }
        let mut buf = section;
        let prefix = Prefix::parse(&mut buf).map_err(section_error)?;
        let required = decode_insert_count(
            prefix.encoded_insert_count,
            self.max_entries,
            self.table.insert_count(),
        )
        .ok_or(failed("an impossible Required Insert Count"))?;
        let base = prefix
            .base(required)
            .ok_or(failed("a negative Base (sign set, Delta Base >= RIC)"))?;
        if required > self.table.insert_count() {
            if self.blocked.len() as u64 >= self.config.max_blocked_streams {
                return Err(failed("more blocked streams than SETTINGS allow"));
            }
            self.blocked.insert(
                stream,
                Blocked {
                    required,
                    section: section.to_vec(),
                },
            );
            return Ok(Decoded::Blocked);
        }
        let decoded = self.lines(buf, required, base)?;
        if required != 0 {
            // §4.4.1: acknowledge every section with a non-zero Required Insert Count.
            DecoderInstruction::SectionAck(stream).write(&mut self.pending);
            self.known_received = self.known_received.max(required);
        }
        Ok(decoded)
    }

    /// The representations after the prefix.
    fn lines(&self, mut buf: &[u8], required: u64, base: u64) -> Result<Decoded, Error> {
        let max = self.config.max_field_section_size;
        let mut size: u64 = 0;
        let mut fields = Vec::new();
        // An absolute index is good if below the Required Insert Count (§2.2.3) and still
        // in the table (not evicted).
        let dynamic = |abs: Option<u64>| -> Result<&Entry, Error> {
            abs.filter(|&a| a < required)
                .and_then(|a| self.table.get(a))
                .ok_or(failed("a reference to an evicted or future entry"))
        };
        let relative = |i: u64| base.checked_sub(1).and_then(|b| b.checked_sub(i));
        let post_base = |i: u64| base.checked_add(i);
        while !buf.is_empty() {
            let line = FieldLine::parse(&mut buf).map_err(section_error)?;
            let (name, value) = match line {
                FieldLine::Indexed {
                    static_table: true,
                    index,
                } => {
                    let (n, v) =
                        static_table::get(index).ok_or(failed("a static index past the table"))?;
                    (n.to_vec(), v.to_vec())
                }
                FieldLine::Indexed {
                    static_table: false,
                    index,
                } => {
                    let e = dynamic(relative(index))?;
                    (e.name.clone(), e.value.clone())
                }
                FieldLine::IndexedPostBase { index } => {
                    let e = dynamic(post_base(index))?;
                    (e.name.clone(), e.value.clone())
                }
                FieldLine::LiteralNameRef {
                    static_table,
                    index,
                    value,
                    ..
                } => {
                    let name = if static_table {
                        static_table::get(index)
                            .ok_or(failed("a static index past the table"))?
                            .0
                    } else {
                        &dynamic(relative(index))?.name
                    };
                    (name.to_vec(), value)
                }
                FieldLine::LiteralPostBaseNameRef { index, value, .. } => {
                    (dynamic(post_base(index))?.name.clone(), value)
                }
                FieldLine::LiteralName { name, value, .. } => (name, value),
            };
            size = size.saturating_add(entry_size(&name, &value) as u64);
            if size > max {
                return Ok(Decoded::TooLarge);
            }
            fields.push(Field { name, value });
        }
        Ok(Decoded::Fields(fields))
    }

    /// The result of a section that was [`Decoded::Blocked`] and no longer is, with its
    /// stream; `None` when there is none. Call after [`Decoder::handle_encoder_stream`].
    pub fn poll_unblocked(&mut self) -> Option<(u64, Decoded)> {
        self.ready.pop_front()
    }

    /// The stream was reset, or its reading abandoned, before all its sections were decoded
    /// (§2.2.2.2): a section it had blocked is dropped, and a Stream Cancellation is queued
    /// so that the encoder can release the entries it referenced. With a table capacity of
    /// 0 nothing is queued (§2.2.2.2: "MAY omit sending Stream Cancellations").
    pub fn cancel_stream(&mut self, stream: u64) {
        self.blocked.remove(&stream);
        self.ready.retain(|(s, _)| *s != stream);
        if self.config.max_table_capacity != 0 {
            DecoderInstruction::StreamCancel(stream).write(&mut self.pending);
        }
    }

    /// Appends the decoder-stream bytes to send: Section Acknowledgments and Stream
    /// Cancellations in the order they arose, then one Insert Count Increment for the
    /// inserts no acknowledgment has covered (§2.2.2.3, §4.4.3). Sending the increment here
    /// rather than after each insert lets acknowledgments stand in for it, as §2.2.2.3
    /// suggests; call this after each batch of input.
    pub fn write_decoder_stream(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.pending);
        let count = self.table.insert_count();
        if count > self.known_received {
            DecoderInstruction::InsertCountIncrement(count - self.known_received).write(out);
            self.known_received = count;
        }
    }

    /// Whether [`Decoder::write_decoder_stream`] would write anything.
    pub fn has_decoder_stream_output(&self) -> bool {
        !self.pending.is_empty() || self.table.insert_count() > self.known_received
    }
}
