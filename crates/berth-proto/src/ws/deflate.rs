//! permessage-deflate (RFC 7692), server side: the offer read from `Sec-WebSocket-Extensions`
//! and answered ([`negotiate`]), messages compressed as they are sent ([`Compressor`]) and
//! inflated as their frames arrive ([`Decompressor`]), on zlib-rs (raw deflate, window bits
//! and memLevel under our control).
//!
//! ```text
//!   offer ──> negotiate(config) ──> Agreed + the response's field value
//!   send:    message ≥ threshold ──> deflate, sync flush, drop 00 00 ff ff ──> RSV1 frame
//!            message < threshold ──> an ordinary frame (RSV1 clear)
//!   receive: RSV1 frame's payload, read by read ──> inflate (output capped at the message
//!            limit + 1 byte: past the limit, 1009) ──> at the message's end, 00 00 ff ff
//! ```
//!
//! Memory. zlib-rs's deflate state is at least 128 KiB whatever the window (a hash table of
//! 64 Ki entries), so a compressor per connection cannot fit the 64 KiB budget with any window.
//! By default the server therefore answers `server_no_context_takeover` (RFC 7692 §7.1.1.1
//! lets it, offered or not) and compresses with a compressor taken from a process-wide pool
//! for the time of one message, reset and put back after it: a connection holds no deflate
//! state at all, and the pool holds as many compressors as messages were ever compressed at
//! once (at most [`POOL_MAX`] are kept). Its inflater (32 KiB window and
//! the state, about 43 KiB, measured in `tests/ws_deflate_memory.rs`) is allocated at the first
//! compressed message, and let go after each message when `client_no_context_takeover` was
//! agreed. [`DeflateConfig::server_context_takeover`] gives each connection its own
//! compressor instead (better ratios for small, similar messages; about 300 KiB more each).

use std::sync::{Mutex, PoisonError};

use zlib_rs::{Deflate, DeflateConfig as ZConfig, DeflateFlush, Inflate, InflateFlush, Status};

use super::frame::{self, Opcode, Violation};

/// The empty stored block a sync flush ends with, which RFC 7692 §7.2.1 strips from a message
/// and §7.2.2 puts back before inflating it.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// Largest piece of inflated output made at once (the message buffer grows by at most this
/// much per step, and never past the message limit and one byte).
const INFLATE_STEP: usize = 64 * 1024;

/// The server's permessage-deflate settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateConfig {
    /// Negotiate permessage-deflate at all (`--ws-deflate on|off`).
    pub enabled: bool,
    /// Largest LZ77 window, as bits (8..=15), for both directions: the server compresses with
    /// at most this window, and asks the client for at most this one (`client_max_window_bits`;
    /// an offer that does not let the server ask is declined when this is below 15).
    pub max_window_bits: u8,
    /// zlib's memLevel (1..=9) for the server's compressor: the size of its literal buffers.
    pub mem_level: u8,
    /// Compression level (0..=9; 1, as nginx's default gzip level, is zlib-rs's fast path).
    pub level: u8,
    /// Messages shorter than this many bytes are sent uncompressed (RSV1 clear).
    pub threshold: usize,
    /// Keep the LZ77 window from one sent message to the next (a compressor per connection,
    /// about 300 KiB) instead of answering `server_no_context_takeover` (one compressor per
    /// thread, nothing held per connection). A client that asks for no context takeover gets
    /// it either way.
    pub server_context_takeover: bool,
}

impl Default for DeflateConfig {
    fn default() -> Self {
        DeflateConfig {
            enabled: true,
            max_window_bits: 15,
            mem_level: 8,
            level: 1,
            threshold: 256,
            server_context_takeover: false,
        }
    }
}

/// What was agreed with a client, and what the server does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreed {
    /// The server starts each message with an empty window.
    pub server_no_context_takeover: bool,
    /// The client starts each message with an empty window: the inflater is let go between
    /// messages.
    pub client_no_context_takeover: bool,
    /// The window the server compresses with (9..=15: zlib's 9 never reaches further back
    /// than 250 bytes, so it serves an agreed 8 too).
    pub server_window_bits: u8,
    /// The window the client may use (8..=15).
    pub client_window_bits: u8,
    /// memLevel of the compressor.
    pub mem_level: u8,
    /// Compression level.
    pub level: u8,
    /// Messages shorter than this are sent uncompressed.
    pub threshold: usize,
}

/// One parameter of an extension offer: its name and value (unquoted), if it has one.
type Param<'a> = (&'a str, Option<String>);

/// Reads a client's `Sec-WebSocket-Extensions` fields (`values`, in order) and accepts the
/// first permessage-deflate offer `config` can serve: the agreement, and the response's field
/// value. Offers that break RFC 7692 §7 (an unknown or repeated parameter, a bad value) or
/// that the configuration cannot serve are declined, never the handshake: `None` if none is
/// left (the connection then goes on uncompressed).
pub fn negotiate<'a>(
    values: impl IntoIterator<Item = &'a [u8]>,
    config: &DeflateConfig,
) -> Option<(Agreed, String)> {
    if !config.enabled {
        return None;
    }
    for value in values {
        let Ok(value) = std::str::from_utf8(value) else {
            continue;
        };
        for element in split_outside_quotes(value, ',') {
            let Some((name, params)) = parse_extension(element) else {
                continue;
            };
            if !name.eq_ignore_ascii_case("permessage-deflate") {
                continue;
            }
            if let Some(accepted) = accept_offer(&params, config) {
                return Some(accepted);
            }
        }
    }
    None
}

/// The response to one offer, or `None` to decline it (RFC 7692 §7: unknown, repeated or
/// badly valued parameters, or a configuration the server does not support).
fn accept_offer(params: &[Param<'_>], config: &DeflateConfig) -> Option<(Agreed, String)> {
    let cap = config.max_window_bits.clamp(8, 15);
    let (mut server_nct, mut client_nct) = (false, false);
    let mut server_bits: Option<u8> = None;
    // None: not offered; Some(None): offered without a value.
    let mut client_bits: Option<Option<u8>> = None;
    for (i, (name, value)) in params.iter().enumerate() {
        if params[..i]
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            return None;
        }
        match name.to_ascii_lowercase().as_str() {
            "server_no_context_takeover" if value.is_none() => server_nct = true,
            "client_no_context_takeover" if value.is_none() => client_nct = true,
            "server_max_window_bits" => server_bits = Some(window_bits(value.as_deref()?)?),
            "client_max_window_bits" => {
                client_bits = Some(match value {
                    None => None,
                    Some(v) => Some(window_bits(v)?),
                })
            }
            _ => return None,
        }
    }
    let server_nct = server_nct || !config.server_context_takeover;
    // The server's window: what the client allows, within the cap. Said when the client asked,
    // or when the cap is below the default (RFC 7692 §7.1.2.1).
    let server_window = server_bits.map_or(cap, |b| b.min(cap));
    let say_server_window = server_bits.is_some() || cap < 15;
    // The client's window: only limited if the client said it can be (§7.1.2.2).
    let client_window = match client_bits {
        None if cap < 15 => return None,
        None => 15,
        Some(None) => cap,
        Some(Some(b)) => b.min(cap),
    };
    let say_client_window = matches!(client_bits, Some(Some(_))) || client_window < 15;
    let mut response = String::from("permessage-deflate");
    if server_nct {
        response.push_str("; server_no_context_takeover");
    }
    if client_nct {
        response.push_str("; client_no_context_takeover");
    }
    if say_server_window {
        response.push_str(&format!("; server_max_window_bits={server_window}"));
    }
    if say_client_window {
        response.push_str(&format!("; client_max_window_bits={client_window}"));
    }
    let agreed = Agreed {
        server_no_context_takeover: server_nct,
        client_no_context_takeover: client_nct,
        server_window_bits: server_window.max(9),
        client_window_bits: client_window,
        mem_level: config.mem_level.clamp(1, 9),
        level: config.level.min(9),
        threshold: config.threshold,
    };
    Some((agreed, response))
}

/// A window-bits value: a decimal 8..=15 without leading zeros (RFC 7692 §7.1.2).
fn window_bits(value: &str) -> Option<u8> {
    match value.as_bytes() {
        [b'8'] => Some(8),
        [b'9'] => Some(9),
        [b'1', d @ b'0'..=b'5'] => Some(10 + d - b'0'),
        _ => None,
    }
}

/// `value` split at `sep` where it is not inside a quoted-string.
fn split_outside_quotes(value: &str, sep: char) -> Vec<&str> {
    let (mut parts, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in value.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                parts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&value[start..]);
    parts
}

/// `extension-token *( ";" extension-param )` (RFC 6455 §9.1), or `None` if it is not one.
fn parse_extension(element: &str) -> Option<(&str, Vec<Param<'_>>)> {
    let mut parts = split_outside_quotes(element, ';').into_iter();
    let name = parts.next()?.trim();
    if !is_token(name) {
        return None;
    }
    let mut params = Vec::new();
    for part in parts {
        let (pname, value) = match part.split_once('=') {
            None => (part.trim(), None),
            Some((n, v)) => (n.trim(), Some(unquote(v.trim())?)),
        };
        if !is_token(pname) {
            return None;
        }
        params.push((pname, value));
    }
    Some((name, params))
}

/// A parameter's value: a token, or a quoted-string whose content is a token (RFC 6455 §9.1).
fn unquote(v: &str) -> Option<String> {
    let text = match v.strip_prefix('"') {
        None => v.to_owned(),
        Some(rest) => {
            let inner = rest.strip_suffix('"')?;
            let (mut out, mut escaped) = (String::new(), false);
            for c in inner.chars() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '"' if !escaped => return None,
                    c => {
                        out.push(c);
                        escaped = false;
                    }
                }
            }
            if escaped {
                return None;
            }
            out
        }
    };
    is_token(&text).then_some(text)
}

/// RFC 7230's token: one or more tchar.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn new_deflate(window_bits: u8, mem_level: u8, level: u8) -> Deflate {
    Deflate::new_with_config(ZConfig {
        level: i32::from(level),
        window_bits: -i32::from(window_bits),
        mem_level: i32::from(mem_level),
        ..ZConfig::default()
    })
}

/// Most idle compressors the pool keeps (about 380 KiB each with window 15 and memLevel 8).
pub const POOL_MAX: usize = 64;

/// Idle compressors for connections without server context takeover, each under its
/// (window bits, memLevel, level), reset.
static POOL: Mutex<Vec<(PoolKey, Deflate)>> = Mutex::new(Vec::new());

/// A pooled compressor's window bits, memLevel and level.
type PoolKey = (u8, u8, u8);

/// A reset compressor for `key`, from the pool or new.
fn take_pooled(key: PoolKey) -> Deflate {
    let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
    match pool.iter().rposition(|(k, _)| *k == key) {
        Some(at) => pool.swap_remove(at).1,
        None => {
            drop(pool);
            new_deflate(key.0, key.1, key.2)
        }
    }
}

/// Puts a compressor back (reset), unless the pool is full.
fn put_back(key: PoolKey, mut deflate: Deflate) {
    deflate.reset();
    let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
    if pool.len() < POOL_MAX {
        pool.push((key, deflate));
    }
}

/// Sends messages compressed as agreed.
pub struct Compressor {
    agreed: Agreed,
    /// The connection's own compressor (server context takeover), made at its first use.
    own: Option<Deflate>,
}

impl Compressor {
    /// A compressor for a connection that agreed `agreed`.
    pub fn new(agreed: Agreed) -> Compressor {
        Compressor { agreed, own: None }
    }

    /// Whether a message of `len` bytes is sent compressed.
    pub fn compresses(&self, len: usize) -> bool {
        len >= self.agreed.threshold
    }

    /// Appends `payload` as one message (a single frame): compressed with RSV1 set if it is
    /// not below the threshold, as it is otherwise.
    pub fn write_message(&mut self, out: &mut Vec<u8>, opcode: Opcode, payload: &[u8]) {
        if !self.compresses(payload.len()) {
            frame::write_frame(out, opcode, payload);
            return;
        }
        // Room for the longest header in front; the compressed bytes go behind it and are
        // moved up once their length (so the header's) is known.
        let start = out.len();
        out.resize(start + 10, 0);
        let a = self.agreed;
        let key = (a.server_window_bits, a.mem_level, a.level);
        if a.server_no_context_takeover {
            let mut deflate = take_pooled(key);
            compress(&mut deflate, payload, out);
            put_back(key, deflate);
        } else {
            let deflate = self
                .own
                .get_or_insert_with(|| new_deflate(key.0, key.1, key.2));
            compress(deflate, payload, out);
        }
        let len = out.len() - start - 10;
        let (head, n) = frame::header_bytes_rsv1(true, true, opcode, len as u64);
        out[start + 10 - n..start + 10].copy_from_slice(&head[..n]);
        out.copy_within(start + 10 - n.., start);
        out.truncate(start + n + len);
    }
}

/// Appends `payload` deflated and sync-flushed to `out`, without the flush's 00 00 ff ff.
fn compress(deflate: &mut Deflate, payload: &[u8], out: &mut Vec<u8>) {
    // A stream error cannot come from a valid compressor fed a sync flush; were it to, what
    // was made so far goes out and the client's inflater finds the message bad (1007).
    let _ = crate::zlib::deflate_into(deflate, payload, out, DeflateFlush::SyncFlush);
    if out.ends_with(&TAIL) {
        out.truncate(out.len() - TAIL.len());
    }
}

/// Inflates compressed messages as their frames arrive.
pub struct Decompressor {
    agreed: Agreed,
    /// Made at the first compressed message; let go after each one without client context
    /// takeover.
    inflate: Option<Inflate>,
    /// The stream ended inside this message (a block with BFINAL set): the rest of the
    /// message is ignored, and the inflater starts afresh with the next.
    ended: bool,
}

impl Decompressor {
    /// A decompressor for a connection that agreed `agreed`.
    pub fn new(agreed: Agreed) -> Decompressor {
        Decompressor {
            agreed,
            inflate: None,
            ended: false,
        }
    }

    /// Whether an inflater is held (its memory: about 43 KiB).
    pub fn is_holding(&self) -> bool {
        self.inflate.is_some()
    }

    /// Inflates `data`, the next bytes of a compressed message, appending to `out`, which is
    /// never let grow past `limit` and one byte: a message that inflates past `limit` is a
    /// 1009, bad deflate data a 1007.
    pub fn inflate(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), Violation> {
        if self.ended {
            return Ok(());
        }
        // Inflating with the largest window reads whatever window the client kept to.
        let inflate = self.inflate.get_or_insert_with(|| Inflate::new(false, 15));
        let mut input = data;
        // The output is zeroed before zlib writes it: room in proportion to the input (a
        // small frame must not zero 64 KiB), doubled while zlib fills it.
        let mut step = (input.len() * 4).clamp(256, INFLATE_STEP);
        loop {
            let room = (limit.saturating_sub(out.len()) + 1).min(step);
            step = (step * 2).min(INFLATE_STEP);
            let start = out.len();
            out.resize(start + room, 0);
            let (in0, out0) = (inflate.total_in(), inflate.total_out());
            let status = inflate.decompress(input, &mut out[start..], InflateFlush::SyncFlush);
            let used = (inflate.total_in() - in0) as usize;
            let made = (inflate.total_out() - out0) as usize;
            out.truncate(start + made);
            input = &input[used..];
            if out.len() > limit {
                return Err(Violation {
                    code: 1009,
                    why: "message too big (inflated)",
                });
            }
            match status {
                Err(_) => {
                    return Err(Violation {
                        code: 1007,
                        why: "compressed data that does not inflate",
                    })
                }
                Ok(Status::StreamEnd) => {
                    self.ended = true;
                    return Ok(());
                }
                // The room was filled: there may be more to come out.
                _ if made == room => continue,
                _ if input.is_empty() => return Ok(()),
                // Input left, room left, and nothing moved: zlib is stuck on it.
                _ if used == 0 && made == 0 => {
                    return Err(Violation {
                        code: 1007,
                        why: "compressed data that does not inflate",
                    })
                }
                _ => continue,
            }
        }
    }

    /// The compressed message is complete: its tail (00 00 ff ff) is inflated, and the
    /// inflater made ready for the next message.
    pub fn finish(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<(), Violation> {
        let result = self.inflate(&TAIL, out, limit);
        if self.ended || self.agreed.client_no_context_takeover || result.is_err() {
            self.inflate = None;
        }
        self.ended = false;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(value: &str) -> Option<(Agreed, String)> {
        negotiate([value.as_bytes()], &DeflateConfig::default())
    }

    fn with(value: &str, config: DeflateConfig) -> Option<String> {
        negotiate([value.as_bytes()], &config).map(|(_, r)| r)
    }

    #[test]
    fn offers_are_answered_with_the_agreed_parameters() {
        let (agreed, response) = offer("permessage-deflate").unwrap();
        assert_eq!(response, "permessage-deflate; server_no_context_takeover");
        assert_eq!(
            (agreed.server_window_bits, agreed.client_window_bits),
            (15, 15)
        );
        assert!(!agreed.client_no_context_takeover);
        // What Python's websockets and browsers offer.
        let (_, r) = offer("permessage-deflate; client_max_window_bits").unwrap();
        assert_eq!(r, "permessage-deflate; server_no_context_takeover");
        let (a, r) = offer(
            "permessage-deflate; client_no_context_takeover; server_no_context_takeover; \
             server_max_window_bits=10; client_max_window_bits=12",
        )
        .unwrap();
        assert_eq!(
            r,
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover; \
             server_max_window_bits=10; client_max_window_bits=12"
        );
        assert_eq!((a.server_window_bits, a.client_window_bits), (10, 12));
        assert!(a.client_no_context_takeover && a.server_no_context_takeover);
        // Window 8: agreed as 8, compressed with zlib's 9 (which reaches back 250 bytes).
        let (a, r) = offer("permessage-deflate; server_max_window_bits=8").unwrap();
        assert!(r.ends_with("; server_max_window_bits=8"), "{r}");
        assert_eq!(a.server_window_bits, 9);
        // Quoted values, any case, spaces around.
        let (a, _) = offer(" Permessage-Deflate ;Server_Max_Window_Bits=\"11\" ").unwrap();
        assert_eq!(a.server_window_bits, 11);
    }

    #[test]
    fn bad_offers_are_declined_and_the_next_one_taken() {
        for bad in [
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; server_max_window_bits=7",
            "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits=010",
            "permessage-deflate; client_max_window_bits=0x9",
            "permessage-deflate; client_max_window_bits=\"1 0\"",
            "permessage-deflate; server_no_context_takeover=1",
            "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
            "permessage-deflate; x_unknown",
            "permessage-deflate; server_max_window_bits=\"10",
            "permessage-deflate;; client_max_window_bits",
            "x-webkit-deflate-frame",
            "",
        ] {
            assert_eq!(offer(bad), None, "{bad}");
        }
        // Several offers in one field and across fields: the first good one, in order.
        let field = "foo, permessage-deflate; server_max_window_bits=20, \
                     permessage-deflate; server_max_window_bits=9; x=\"a,b\", \
                     permessage-deflate; server_max_window_bits=12, permessage-deflate";
        let (a, _) = offer(field).unwrap();
        assert_eq!(a.server_window_bits, 12);
        let (a, _) = negotiate(
            [
                b"permessage-deflate; bogus".as_slice(),
                b"permessage-deflate; server_max_window_bits=13",
            ],
            &DeflateConfig::default(),
        )
        .unwrap();
        assert_eq!(a.server_window_bits, 13);
    }

    #[test]
    fn the_agreed_server_window_is_kept_to() {
        // Text whose repeats lie 300 to 3000 bytes apart: a 32 KiB window would reach them.
        let text: Vec<u8> = (0..60_000u32)
            .map(|i| b"abcdefghijklmnopqrstuvwxyz"[((i * 7919) % 2311 % 26) as usize])
            .collect();
        for (offer, bits) in [
            ("permessage-deflate; server_max_window_bits=8", 8),
            ("permessage-deflate; server_max_window_bits=9", 9),
            ("permessage-deflate; server_max_window_bits=12", 12),
        ] {
            for level in [1, 6, 9] {
                let config = DeflateConfig {
                    level,
                    ..DeflateConfig::default()
                };
                let (agreed, _) = negotiate([offer.as_bytes()], &config).unwrap();
                let mut out = Vec::new();
                Compressor::new(agreed).write_message(&mut out, Opcode::Binary, &text);
                let h = frame::parse_header(&out).unwrap().unwrap();
                let mut input = out[h.header_len..].to_vec();
                input.extend_from_slice(&TAIL);
                // An inflater with just the agreed window (zlib's smallest raw one is 9, and
                // 8 means distances of at most 256, which 9 reads too).
                let mut inflate = Inflate::new(false, bits.max(9));
                let mut plain = vec![0; text.len() + 16];
                inflate
                    .decompress(&input, &mut plain, InflateFlush::SyncFlush)
                    .unwrap_or_else(|e| panic!("{offer} level {level}: {e:?}"));
                plain.truncate(inflate.total_out() as usize);
                assert_eq!(plain, text, "{offer} level {level}");
            }
        }
    }

    #[test]
    fn the_configuration_turns_it_off_and_caps_the_windows() {
        let off = DeflateConfig {
            enabled: false,
            ..DeflateConfig::default()
        };
        assert_eq!(with("permessage-deflate", off), None);
        let capped = DeflateConfig {
            max_window_bits: 10,
            ..DeflateConfig::default()
        };
        // A client that does not let the server limit its window: declined.
        assert_eq!(with("permessage-deflate", capped), None);
        assert_eq!(
            with("permessage-deflate; client_max_window_bits", capped).unwrap(),
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=10; \
             client_max_window_bits=10"
        );
        assert_eq!(
            with(
                "permessage-deflate; client_max_window_bits=9; server_max_window_bits=12",
                capped
            )
            .unwrap(),
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=10; \
             client_max_window_bits=9"
        );
        let keep = DeflateConfig {
            server_context_takeover: true,
            ..DeflateConfig::default()
        };
        assert_eq!(
            with("permessage-deflate", keep).unwrap(),
            "permessage-deflate"
        );
        assert_eq!(
            with("permessage-deflate; server_no_context_takeover", keep).unwrap(),
            "permessage-deflate; server_no_context_takeover"
        );
    }
}
