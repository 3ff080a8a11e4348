//! cargo +nightly fuzz run h3_qpack
//!
//! The QPACK decoder against an arbitrary peer encoder: the input is a script of encoder
//! stream pieces, field sections on a few streams, and cancellations. It must never panic,
//! keep every limit it announces (table capacity, blocked streams, decoded section size,
//! bytes held), write only well-formed decoder-stream instructions, and give the same
//! results whether each encoder-stream piece comes whole or a byte at a time.
#![no_main]

use berth::proto::h3::error::Error;
use berth::proto::h3::qpack::instruction::DecoderInstruction;
use berth::proto::h3::qpack::{Decoded, Decoder, DecoderConfig, ENTRY_OVERHEAD};
use libfuzzer_sys::fuzz_target;

/// Small limits, so that eviction, blocking and the size limit are all reached.
fn config(b: u8) -> DecoderConfig {
    DecoderConfig {
        max_table_capacity: [0, 64, 220, 512][usize::from(b & 3)],
        max_blocked_streams: u64::from((b >> 2) & 3),
        max_field_section_size: [64, 256, 1024, 4096][usize::from((b >> 4) & 3)],
    }
}

/// One step of the script: `[tag, len, bytes...]`. Tag low two bits: 0 or 1 an encoder
/// stream piece, 2 a field section, 3 a cancellation; the next bits pick the stream.
enum Step<'a> {
    Encoder(&'a [u8]),
    Section(u64, &'a [u8]),
    Cancel(u64),
}

fn script(mut data: &[u8]) -> Vec<Step<'_>> {
    let mut steps = Vec::new();
    while let [tag, len, rest @ ..] = data {
        let n = usize::from(*len).min(rest.len());
        let (bytes, tail) = rest.split_at(n);
        let stream = u64::from(tag >> 2 & 7) * 4;
        steps.push(match tag & 3 {
            0 | 1 => Step::Encoder(bytes),
            2 => Step::Section(stream, bytes),
            _ => Step::Cancel(stream),
        });
        data = tail;
    }
    steps
}

/// Runs the script; what each step gave, as text, to compare runs.
fn run(cfg: DecoderConfig, steps: &[Step<'_>], bytewise: bool) -> Vec<String> {
    let mut d = Decoder::new(cfg);
    let mut log = Vec::new();
    let mut blocked_on = std::collections::BTreeSet::new();
    for step in steps {
        let result = match *step {
            Step::Encoder(bytes) => {
                if bytewise {
                    bytes.chunks(1).try_for_each(|b| d.handle_encoder_stream(b))
                } else {
                    d.handle_encoder_stream(bytes)
                }
            }
            Step::Section(stream, _) if blocked_on.contains(&stream) => {
                // The connection reads nothing more from a blocked stream.
                Ok(())
            }
            Step::Section(stream, bytes) => d.decode(stream, bytes).map(|decoded| {
                check(&cfg, &decoded);
                if decoded == Decoded::Blocked {
                    blocked_on.insert(stream);
                }
                log.push(format!("{stream}: {decoded:?}"));
            }),
            Step::Cancel(stream) => {
                d.cancel_stream(stream);
                blocked_on.remove(&stream);
                Ok(())
            }
        };
        if let Err(e) = result {
            assert!(!matches!(e, Error::Misuse(_)), "{e}");
            log.push(format!("error {e}"));
            return log;
        }
        while let Some((stream, decoded)) = d.poll_unblocked() {
            check(&cfg, &decoded);
            assert!(blocked_on.remove(&stream));
            log.push(format!("unblocked {stream}: {decoded:?}"));
        }
        let (size, capacity) = d.table_size();
        assert!(size <= capacity && capacity as u64 <= cfg.max_table_capacity);
        assert!(d.blocked_streams() as u64 <= cfg.max_blocked_streams);
        // One unfinished instruction (two strings of at most ~4x the capacity) plus the
        // blocked sections (each under 256 bytes here).
        assert!(d.buffered() <= 8 * capacity + 64 + 256 * d.blocked_streams());
        let mut out = Vec::new();
        d.write_decoder_stream(&mut out);
        let mut rest = &out[..];
        while !rest.is_empty() {
            let (_, n) = DecoderInstruction::parse(rest)
                .unwrap()
                .expect("whole instructions");
            rest = &rest[n..];
        }
        log.push(format!("decoder stream {out:02x?}"));
    }
    log
}

fn check(cfg: &DecoderConfig, decoded: &Decoded) {
    if let Decoded::Fields(fields) = decoded {
        let size: usize = fields
            .iter()
            .map(|f| f.name.len() + f.value.len() + ENTRY_OVERHEAD)
            .sum();
        assert!(size as u64 <= cfg.max_field_section_size);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&b, rest)) = data.split_first() else {
        return;
    };
    let cfg = config(b);
    let steps = script(rest);
    let whole = run(cfg, &steps, false);
    let bytewise = run(cfg, &steps, true);
    assert_eq!(whole, bytewise);
});
