//! cargo +nightly fuzz run h3_frame
//!
//! The HTTP/3 frame reader against arbitrary stream bytes: it must never panic, never
//! buffer past its limit whatever lengths are claimed, and give the same frames (or the
//! same error) whether the bytes come whole, split at two points the fuzzer picks, or a
//! byte at a time. Every frame it gives must write back to bytes that read as the same
//! frame.
#![no_main]

use berth::proto::h3::error::H3Error;
use berth::proto::h3::frame::{Event, Frame, FrameReader, Header, StreamKind};
use berth::proto::h3::Role;
use libfuzzer_sys::fuzz_target;

fn run(
    on: StreamKind,
    role: Role,
    max: usize,
    chunks: &[&[u8]],
) -> Result<(Vec<String>, bool), H3Error> {
    let mut r = FrameReader::new(on, role, max);
    let mut seen = Vec::new();
    let mut data = Vec::new();
    for chunk in chunks {
        let mut input = *chunk;
        loop {
            let (n, event) = r.read(input)?;
            assert!(n <= input.len());
            let more = event.is_some();
            match event {
                Some(Event::Data { chunk, end }) => {
                    data.extend_from_slice(chunk);
                    if end {
                        seen.push(format!("DATA {:02x?}", std::mem::take(&mut data)));
                    }
                }
                Some(Event::Frame(f)) => {
                    round_trip(&f);
                    seen.push(format!("{f:?}"));
                }
                Some(Event::Oversized { kind, len }) => {
                    assert!(len > max as u64);
                    seen.push(format!("oversized {kind} {len}"));
                }
                None => assert_eq!(n, input.len()),
            }
            input = &input[n..];
            if !more {
                break;
            }
        }
    }
    Ok((seen, r.finish().is_ok()))
}

fn round_trip(f: &Frame<'_>) {
    if matches!(f, Frame::Unknown { .. }) {
        return;
    }
    let mut out = Vec::new();
    f.write(&mut out).unwrap();
    let (h, n) = Header::parse(&out).unwrap();
    assert_eq!(Frame::parse(h.kind, &out[n..]).unwrap(), *f);
}

fuzz_target!(|data: &[u8]| {
    let [b, x, y, body @ ..] = data else { return };
    let on = [StreamKind::Control, StreamKind::Request, StreamKind::Push][usize::from(b % 3)];
    let role = if b & 4 == 0 {
        Role::Server
    } else {
        Role::Client
    };
    let max = [0, 8, 64, 1024][usize::from(b >> 3 & 3)];
    let whole = run(on, role, max, &[body]);
    let n = body.len();
    let (i, j) = {
        let (p, q) = (usize::from(*x) * n / 256, usize::from(*y) * n / 256);
        (p.min(q), p.max(q))
    };
    let split = run(on, role, max, &[&body[..i], &body[i..j], &body[j..]]);
    let bytewise: Vec<&[u8]> = body.chunks(1).collect();
    let single = run(on, role, max, &bytewise);
    // Errors carry a reason text; compare their codes and scope with the rest.
    let key = |r: &Result<(Vec<String>, bool), H3Error>| match r {
        Ok(v) => Ok(v.clone()),
        Err(e) => Err((e.code, e.stream)),
    };
    assert_eq!(key(&whole), key(&split), "split at {i},{j}");
    assert_eq!(key(&whole), key(&single), "byte by byte");
});
