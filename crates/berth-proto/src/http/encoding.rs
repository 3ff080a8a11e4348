//! Content codings (RFC 9110 §8.4, §12.5.3): what a client accepts, and streaming encoders.
//!
//! ```text
//!   Accept-Encoding ──> Accepted::parse ──> Accepted::pick(what exists) ──> Some(Coding) | None
//!   file bytes ──> Encoder::encode(chunk, out) ... Encoder::finish(out) ──> gzip | br | zstd
//! ```
//!
//! The encoders are state machines over slices: bytes in, encoded bytes appended to a `Vec`,
//! no I/O. A driver feeds them a file a chunk at a time and sends what comes out, so a body is
//! never held whole; their state is bounded by the window each is given (gzip 32 KiB plus
//! zlib's hash tables, brotli `lgwin` 18, zstd the file's size or less).

use std::io::Write;

use zlib_rs::{Deflate, DeflateConfig, DeflateFlush};

/// A content coding berth can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coding {
    /// Brotli (RFC 7932).
    Br,
    /// Zstandard (RFC 8878).
    Zstd,
    /// gzip (RFC 1952).
    Gzip,
}

impl Coding {
    /// Every coding, in the server's order of preference when the client weighs them alike:
    /// the smallest output first.
    pub const ALL: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    /// Its token in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The file name suffix of a precompressed sibling (`a.css.br`).
    pub fn suffix(self) -> &'static str {
        match self {
            Coding::Br => ".br",
            Coding::Zstd => ".zst",
            Coding::Gzip => ".gz",
        }
    }

    /// Its place in [`Coding::ALL`].
    pub fn index(self) -> usize {
        match self {
            Coding::Br => 0,
            Coding::Zstd => 1,
            Coding::Gzip => 2,
        }
    }
}

/// What a request's `Accept-Encoding` allows, as q-values in thousandths (0 = refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    codings: [u16; 3],
    /// `identity`'s weight: as listed, else `*`'s if `*` is listed, else 1 (acceptable, and
    /// preferred to nothing, but to any coding the client lists).
    identity: u16,
}

impl Default for Accepted {
    /// No `Accept-Encoding`: identity only. RFC 9110 §12.5.3 lets a server send any coding then,
    /// but no server does (a client that says nothing may decode nothing).
    fn default() -> Self {
        Accepted {
            codings: [0; 3],
            identity: 1000,
        }
    }
}

impl Accepted {
    /// Parses every `Accept-Encoding` field value of a request (`None`: the field is absent).
    /// Codings are case-insensitive, `x-gzip` is `gzip`, a malformed `q` counts as 0, unknown
    /// codings are ignored; a coding not listed takes `*`'s weight.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Accepted {
        let mut listed: [Option<u16>; 3] = [None; 3];
        let (mut identity, mut star, mut any) = (None, None, false);
        for value in values {
            any = true;
            for element in value.split(|&b| b == b',') {
                let mut parts = element.split(|&b| b == b';');
                let name = super::request::trim(parts.next().unwrap_or_default());
                if name.is_empty() {
                    continue;
                }
                let mut q = 1000;
                for param in parts {
                    let param = super::request::trim(param);
                    if let Some(v) = param.strip_prefix(b"q=").or(param.strip_prefix(b"Q=")) {
                        q = qvalue(v).unwrap_or(0);
                    }
                }
                let slot = match name.to_ascii_lowercase().as_slice() {
                    b"br" => &mut listed[0],
                    b"zstd" => &mut listed[1],
                    b"gzip" | b"x-gzip" => &mut listed[2],
                    b"identity" => &mut identity,
                    b"*" => &mut star,
                    _ => continue,
                };
                // Listed twice: the first one counts, as for most parsers.
                slot.get_or_insert(q);
            }
        }
        if !any {
            return Accepted::default();
        }
        Accepted {
            codings: listed.map(|q| q.or(star).unwrap_or(0)),
            identity: identity.or(star).unwrap_or(1),
        }
    }

    /// The weight of `coding` (thousandths; 0: refused).
    pub fn q(&self, coding: Coding) -> u16 {
        self.codings[coding.index()]
    }

    /// Whether the client takes the content as it is (`identity;q=0`, or `*;q=0` without
    /// `identity`, refuse it).
    pub fn identity_ok(&self) -> bool {
        self.identity > 0
    }

    /// Whether the client accepts any coding at all (then a plain answer varies with
    /// `Accept-Encoding` where a coded one exists).
    pub fn any(&self) -> bool {
        self.codings.iter().any(|&q| q > 0)
    }

    /// The coding to send among those `available`: the highest weight, the server's order
    /// ([`Coding::ALL`]) among equals; `None` when identity weighs more than any of them or
    /// none is accepted.
    pub fn pick(&self, mut available: impl FnMut(Coding) -> bool) -> Option<Coding> {
        self.preferred().find(|&c| available(c))
    }

    /// The codings the client would take over the content as it is, best first: by weight,
    /// the server's order ([`Coding::ALL`]) among equals. A caller that must look for each
    /// (a precompressed file) stops at the first it finds.
    pub fn preferred(&self) -> impl Iterator<Item = Coding> {
        let mut order = Coding::ALL;
        // A stable sort keeps the server's order among equal weights.
        order.sort_by_key(|&c| std::cmp::Reverse(self.q(c)));
        let (codings, identity) = (self.codings, self.identity);
        order
            .into_iter()
            .filter(move |&c| codings[c.index()] > 0 && codings[c.index()] >= identity)
    }
}

/// `0`, `0.5`, `1.000`... (RFC 9110 §12.4.2) in thousandths; `None` if malformed.
fn qvalue(v: &[u8]) -> Option<u16> {
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (&v[..dot], &v[dot + 1..]),
        None => (v, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut milli = 0u16;
    for i in 0..3 {
        milli = milli * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(milli),
        b"1" if milli == 0 => Some(1000),
        _ => None,
    }
}

/// Whether a response of this Content-Type is worth compressing: text, and the structured or
/// script formats that are text underneath (JSON, JavaScript, XML, SVG, wasm, ...). Images,
/// audio, video, fonts and archives are compressed already.
pub fn compressible(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence.as_str(),
            "application/json"
                | "application/javascript"
                | "application/xml"
                | "application/wasm"
                | "application/manifest+json"
                | "image/svg+xml"
                | "image/vnd.microsoft.icon"
                | "image/x-icon"
                | "font/ttf"
                | "font/otf"
        )
}

/// Settings of on-the-fly compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compress {
    /// 1 (fastest) to 9 (smallest), used as it is by gzip, brotli and zstd (all three take
    /// it; beyond 9 brotli and zstd grow slow for little gain).
    pub level: u8,
    /// Smaller bodies are sent as they are: under about a kilobyte the coding's own framing
    /// and the chunked framing eat most of the gain.
    pub min_size: u64,
}

impl Default for Compress {
    fn default() -> Self {
        Compress {
            level: 5,
            min_size: 1024,
        }
    }
}

/// Brotli's window: 256 KiB (`lgwin` 18) rather than its default 4 MiB, so a connection that
/// compresses holds well under a megabyte of encoder state.
const BROTLI_LGWIN: u32 = 18;
/// Brotli's own output buffer.
const BROTLI_BUFFER: usize = 16 * 1024;

/// A streaming encoder for one body.
pub struct Encoder {
    inner: Inner,
}

enum Inner {
    Gzip(Box<Deflate>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(Box<zstd::stream::write::Encoder<'static, Vec<u8>>>),
    /// Finished (or failed): takes nothing more.
    Done,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.inner {
            Inner::Gzip(_) => "Encoder(gzip)",
            Inner::Br(_) => "Encoder(br)",
            Inner::Zstd(_) => "Encoder(zstd)",
            Inner::Done => "Encoder(done)",
        })
    }
}

/// An encoder that failed (out of memory, or a library error): the body cannot be finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeError(pub String);

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "compression failed: {}", self.0)
    }
}

impl std::error::Error for EncodeError {}

impl Encoder {
    /// An encoder for `coding` at `level` (1–9) for a body of `size` bytes, if known (zstd
    /// sizes its window to it, and holds the body to it).
    pub fn new(coding: Coding, level: u8, size: Option<u64>) -> Result<Encoder, EncodeError> {
        let level = level.clamp(1, 9);
        let inner = match coding {
            Coding::Gzip => Inner::Gzip(Box::new(Deflate::new_with_config(DeflateConfig {
                level: i32::from(level),
                // 15 bits of window, and 16 more: a gzip header and trailer.
                window_bits: 31,
                ..DeflateConfig::default()
            }))),
            Coding::Br => Inner::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BROTLI_BUFFER,
                u32::from(level),
                BROTLI_LGWIN,
            ))),
            Coding::Zstd => {
                let mut z = zstd::stream::write::Encoder::new(Vec::new(), i32::from(level))
                    .map_err(|e| EncodeError(e.to_string()))?;
                z.set_pledged_src_size(size)
                    .map_err(|e| EncodeError(e.to_string()))?;
                z.include_checksum(false)
                    .map_err(|e| EncodeError(e.to_string()))?;
                Inner::Zstd(Box::new(z))
            }
        };
        Ok(Encoder { inner })
    }

    /// Takes all of `input`, appending to `out` whatever encoded bytes are ready (perhaps none:
    /// the encoders hold back up to a block).
    pub fn encode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.run(input, out, Mode::Take)
    }

    /// Takes all of `input` and appends everything it encodes to, so that a client can decode
    /// all it was sent so far (a sync flush; it costs a few bytes and some ratio): for a body
    /// streamed by an application, whose every message must reach the client when sent.
    pub fn flush(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.run(input, out, Mode::Flush)
    }

    /// Ends the body: appends the last encoded bytes and the coding's trailer.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.run(&[], out, Mode::Finish)
    }

    fn run(&mut self, input: &[u8], out: &mut Vec<u8>, mode: Mode) -> Result<(), EncodeError> {
        let failed = |e: &dyn std::fmt::Display| EncodeError(e.to_string());
        let flush = mode == Mode::Flush;
        let result = match &mut self.inner {
            Inner::Gzip(deflate) => deflate_into(deflate, input, out, mode),
            Inner::Br(w) => {
                let mut r = w.write_all(input).map_err(|e| failed(&e));
                if flush && r.is_ok() {
                    r = w.flush().map_err(|e| failed(&e));
                }
                out.append(w.get_mut());
                r
            }
            Inner::Zstd(z) => {
                let mut r = z.write_all(input).map_err(|e| failed(&e));
                if flush && r.is_ok() {
                    r = z.flush().map_err(|e| failed(&e));
                }
                out.append(z.get_mut());
                r
            }
            Inner::Done => Err(EncodeError("the body was finished".into())),
        };
        if result.is_err() {
            self.inner = Inner::Done;
            return result;
        }
        if mode == Mode::Finish {
            match std::mem::replace(&mut self.inner, Inner::Done) {
                Inner::Br(w) => out.append(&mut w.into_inner()),
                Inner::Zstd(z) => out.append(&mut z.finish().map_err(|e| failed(&e))?),
                _ => {}
            }
        }
        Ok(())
    }
}

/// A file body being encoded on the fly, as [`Action::Body`](super::Action::Body)'s
/// [`Encode`](super::files::Encode) asks: the file's bytes go in a piece at a time, the encoded
/// bytes come out framed as chunks (HTTP/1.1) or bare, and [`BodyEncoder::finish`] adds the
/// coding's trailer and the last chunk. The encoder is made at the first piece, so a body
/// never sent costs nothing.
#[derive(Debug)]
pub struct BodyEncoder {
    encode: super::files::Encode,
    size: u64,
    encoder: Option<Encoder>,
}

/// Room left in front of an encoded piece for its chunk-size line: 6 hex digits (pieces are
/// far below 16 MiB) and CRLF.
const CHUNK_HEAD: usize = 8;

impl BodyEncoder {
    /// For a body of `size` plain bytes.
    pub fn new(encode: super::files::Encode, size: u64) -> BodyEncoder {
        BodyEncoder {
            encode,
            size,
            encoder: None,
        }
    }

    /// Encodes `input`, the next plain bytes, appending what is ready to `out` (as one chunk;
    /// nothing if the encoder holds it all back).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.piece(out, |e, out| e.encode(input, out))
    }

    /// Ends the body: the encoder's last bytes and trailer, and the last chunk.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.piece(out, |e, out| e.finish(out))?;
        if self.encode.chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
        Ok(())
    }

    fn piece(
        &mut self,
        out: &mut Vec<u8>,
        f: impl FnOnce(&mut Encoder, &mut Vec<u8>) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        let encoder = match &mut self.encoder {
            Some(e) => e,
            None => self.encoder.insert(Encoder::new(
                self.encode.coding,
                self.encode.level,
                Some(self.size),
            )?),
        };
        if !self.encode.chunked {
            return f(encoder, out);
        }
        let start = out.len();
        out.resize(start + CHUNK_HEAD, 0);
        let result = f(encoder, out);
        let n = out.len() - start - CHUNK_HEAD;
        if result.is_err() || n == 0 {
            out.truncate(start);
            return result;
        }
        let head = format!("{n:x}\r\n");
        let at = start + CHUNK_HEAD - head.len();
        out[at..start + CHUNK_HEAD].copy_from_slice(head.as_bytes());
        out.copy_within(at.., start);
        out.truncate(out.len() - (at - start));
        out.extend_from_slice(b"\r\n");
        Ok(())
    }
}

/// How far [`Encoder::run`] pushes what it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// As far as the encoder likes.
    Take,
    /// Everything taken, decodable (a sync flush).
    Flush,
    /// To the body's end.
    Finish,
}

fn deflate_into(
    deflate: &mut Deflate,
    input: &[u8],
    out: &mut Vec<u8>,
    mode: Mode,
) -> Result<(), EncodeError> {
    let flush = match mode {
        Mode::Take => DeflateFlush::NoFlush,
        Mode::Flush => DeflateFlush::SyncFlush,
        Mode::Finish => DeflateFlush::Finish,
    };
    crate::zlib::deflate_into(deflate, input, out, flush).map_err(|e| EncodeError(format!("{e:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(v: &str) -> Accepted {
        Accepted::parse([v.as_bytes()])
    }

    #[test]
    fn accept_encoding_weighs_codings() {
        let all = |_| true;
        assert_eq!(Accepted::parse(std::iter::empty()).pick(all), None);
        assert!(Accepted::parse(std::iter::empty()).identity_ok());
        assert_eq!(acc("gzip").pick(all), Some(Coding::Gzip));
        assert_eq!(acc("gzip, deflate, br, zstd").pick(all), Some(Coding::Br));
        assert_eq!(
            acc("gzip, br").pick(|c| c != Coding::Br),
            Some(Coding::Gzip)
        );
        assert_eq!(acc("br;q=0.5, gzip;q=0.8").pick(all), Some(Coding::Gzip));
        assert_eq!(acc("BR;Q=1.0, X-GZIP").pick(all), Some(Coding::Br));
        assert_eq!(acc("gzip;q=0").pick(all), None);
        assert_eq!(acc("*").pick(all), Some(Coding::Br));
        assert_eq!(acc("*;q=0.5, br;q=0").pick(all), Some(Coding::Zstd));
        assert_eq!(acc("").pick(all), None);
        assert!(acc("").identity_ok());
        // identity preferred over a coding the client weighs lower.
        assert_eq!(acc("gzip;q=0.5, identity").pick(all), None);
        assert_eq!(acc("gzip;q=0.5").pick(all), Some(Coding::Gzip));
        assert!(!acc("gzip;q=0.1, identity;q=0").identity_ok());
        assert_eq!(
            acc("gzip;q=0.1, identity;q=0").pick(all),
            Some(Coding::Gzip)
        );
        assert!(!acc("*;q=0").identity_ok());
        assert!(acc("*;q=0, identity").identity_ok());
        // Malformed weights refuse the coding.
        assert_eq!(acc("gzip;q=2").pick(all), None);
        assert_eq!(acc("gzip;q=0.1234").pick(all), None);
        assert_eq!(acc("gzip;q=abc").pick(all), None);
        // Two fields are one list.
        assert_eq!(
            Accepted::parse([&b"gzip;q=0.2"[..], b"zstd"]).pick(all),
            Some(Coding::Zstd)
        );
    }

    #[test]
    fn compressible_types() {
        for t in [
            "text/html; charset=utf-8",
            "application/json",
            "text/javascript; charset=utf-8",
            "image/svg+xml",
            "application/wasm",
            "application/ld+json",
        ] {
            assert!(compressible(t), "{t}");
        }
        for t in ["image/png", "application/gzip", "video/mp4", "font/woff2"] {
            assert!(!compressible(t), "{t}");
        }
    }

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| format!("line {i} of some compressible text\n").into_bytes())
            .collect()
    }

    fn encode_in_chunks(coding: Coding, data: &[u8], chunk: usize) -> Vec<u8> {
        let mut e = Encoder::new(coding, 5, Some(data.len() as u64)).unwrap();
        let mut out = Vec::new();
        for piece in data.chunks(chunk) {
            e.encode(piece, &mut out).unwrap();
        }
        e.finish(&mut out).unwrap();
        assert!(e.encode(b"x", &mut Vec::new()).is_err(), "finished");
        out
    }

    #[test]
    fn encoders_stream_and_round_trip() {
        let data = text(20_000);
        for chunk in [1, 1000, 16 * 1024, data.len()] {
            let gz = encode_in_chunks(Coding::Gzip, &data, chunk.max(977));
            assert_eq!(&gz[..2], &[0x1f, 0x8b], "a gzip member");
            assert!(gz.len() < data.len() / 4, "{}", gz.len());
            let mut back = Vec::new();
            std::io::Read::read_to_end(&mut zlib_gunzip(&gz), &mut back).ok();

            let br = encode_in_chunks(Coding::Br, &data, chunk.max(977));
            let mut plain = Vec::new();
            brotli::BrotliDecompress(&mut &br[..], &mut plain).unwrap();
            assert_eq!(plain, data);

            let zs = encode_in_chunks(Coding::Zstd, &data, chunk.max(977));
            assert_eq!(zstd::decode_all(&zs[..]).unwrap(), data);
        }
        // An empty body is a valid empty stream.
        let empty = encode_in_chunks(Coding::Zstd, b"", 1);
        assert!(zstd::decode_all(&empty[..]).unwrap().is_empty());
    }

    /// After a flush, what was sent decodes to everything taken so far (an application's
    /// streamed message reaches the client when sent), and the body still ends whole.
    #[test]
    fn a_flush_makes_all_taken_so_far_decodable() {
        use std::io::Read;
        let prefix = |coding: Coding, bytes: &[u8]| -> Vec<u8> {
            let mut reader: Box<dyn Read + '_> = match coding {
                Coding::Gzip => {
                    use zlib_rs::{Inflate, InflateFlush};
                    let mut inflate = Inflate::new(true, 31);
                    let mut out = vec![0u8; 1 << 20];
                    inflate
                        .decompress(bytes, &mut out, InflateFlush::SyncFlush)
                        .unwrap();
                    out.truncate(inflate.total_out() as usize);
                    return out;
                }
                Coding::Br => Box::new(brotli::Decompressor::new(bytes, 4096)),
                Coding::Zstd => Box::new(zstd::stream::read::Decoder::new(bytes).unwrap()),
            };
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            // Read what decodes; the stream is unfinished, so it ends in an error or EOF.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                out.extend_from_slice(&buf[..n]);
            }
            out
        };
        for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let mut e = Encoder::new(coding, 5, None).unwrap();
            let mut sent = Vec::new();
            let mut plain = Vec::new();
            for event in ["data: one\n\n", "data: two\n\n", "data: three\n\n"] {
                e.flush(event.as_bytes(), &mut sent).unwrap();
                plain.extend_from_slice(event.as_bytes());
                assert_eq!(prefix(coding, &sent), plain, "{coding:?}");
            }
            e.finish(&mut sent).unwrap();
            let whole = match coding {
                Coding::Gzip => prefix(coding, &sent),
                Coding::Br => {
                    let mut out = Vec::new();
                    brotli::BrotliDecompress(&mut &sent[..], &mut out).unwrap();
                    out
                }
                Coding::Zstd => zstd::decode_all(&sent[..]).unwrap(),
            };
            assert_eq!(whole, plain, "{coding:?}");
        }
    }

    #[test]
    fn a_body_is_framed_as_chunks() {
        use crate::http::files::Encode;
        let data = text(5000);
        let mut body = BodyEncoder::new(
            Encode {
                coding: Coding::Zstd,
                level: 3,
                chunked: true,
            },
            data.len() as u64,
        );
        let mut out = Vec::new();
        for piece in data.chunks(7000) {
            body.feed(piece, &mut out).unwrap();
        }
        body.finish(&mut out).unwrap();
        // Unframe: size line, bytes, CRLF ... 0 CRLF CRLF.
        let (mut rest, mut encoded) = (&out[..], Vec::new());
        loop {
            let line = rest.iter().position(|&b| b == b'\n').unwrap();
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..line - 1]).unwrap(), 16);
            let size = size.unwrap();
            rest = &rest[line + 1..];
            if size == 0 {
                assert_eq!(rest, b"\r\n");
                break;
            }
            encoded.extend_from_slice(&rest[..size]);
            assert_eq!(&rest[size..size + 2], b"\r\n");
            rest = &rest[size + 2..];
        }
        assert_eq!(zstd::decode_all(&encoded[..]).unwrap(), data);
    }

    /// gzip decoding with zlib-rs's inflate (window bits 31: the gzip wrapper).
    fn zlib_gunzip(gz: &[u8]) -> std::io::Cursor<Vec<u8>> {
        use zlib_rs::{Inflate, InflateFlush, Status};
        let mut inflate = Inflate::new(true, 31);
        let mut out = vec![0u8; 4 << 20];
        let status = inflate.decompress(gz, &mut out, InflateFlush::Finish);
        assert!(matches!(status, Ok(Status::StreamEnd)), "{status:?}");
        out.truncate(inflate.total_out() as usize);
        assert_eq!(out, text(20_000));
        std::io::Cursor::new(out)
    }
}
