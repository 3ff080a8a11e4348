//! The QPACK interop files of `testdata/qpack` (from qpackers/qifs; see its README): six
//! other encoders' output for the same 18 requests, decoded and compared with the original
//! `.qif`, each file with its encoder stream given whole, a byte at a time, and every piece
//! cut at each offset. Those encoders write some sections before the inserts they need, so
//! streams block and unblock along the way. Then the error files, and berth's own encoder
//! over the same requests, delivered in orders that block.

use std::collections::BTreeMap;

use super::tests_rfc::fields;
use super::*;
use crate::h3::error::{Error, ErrorCode};

fn path(rel: &str) -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/qpack/").to_owned() + rel
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A `.qif`: header lists separated by blank lines, `name<TAB>value` lines, `#` comments.
fn qif(text: &str) -> Vec<Vec<Field>> {
    let mut lists = vec![];
    let mut list = vec![];
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        if line.is_empty() {
            if !list.is_empty() {
                lists.push(std::mem::take(&mut list));
            }
            continue;
        }
        let (n, v) = line.split_once('\t').expect("name<TAB>value");
        list.push((n, v));
    }
    if !list.is_empty() {
        lists.push(list);
    }
    lists.iter().map(|l| fields(l)).collect()
}

/// The offline interop format: (stream ID: u64, length: u32, bytes) blocks.
fn blocks(mut file: &[u8]) -> Vec<(u64, &[u8])> {
    let mut out = vec![];
    while !file.is_empty() {
        let stream = u64::from_be_bytes(file[..8].try_into().unwrap());
        let len = u32::from_be_bytes(file[8..12].try_into().unwrap()) as usize;
        out.push((stream, &file[12..12 + len]));
        file = &file[12 + len..];
    }
    out
}

/// `<name>.<capacity>.<blocked>.<ack>`: the decoder's settings.
fn config_of(name: &str) -> DecoderConfig {
    let parts: Vec<&str> = name.rsplitn(4, '.').collect();
    DecoderConfig {
        max_table_capacity: parts[2].parse().unwrap(),
        max_blocked_streams: parts[1].parse().unwrap(),
        max_field_section_size: 64 * 1024,
    }
}

#[derive(Clone, Copy)]
enum Cut {
    Whole,
    Bytewise,
    At(usize),
}

/// What a run gives: each stream's fields, and the decoder stream's bytes.
type Run = (BTreeMap<u64, Vec<Field>>, Vec<u8>);

/// A decoder for an interop file. Those files predate RFC 9204 §3.2.3 ("The initial
/// capacity of the dynamic table is zero"): their encoders took the table to start at its
/// maximum and send no Set Dynamic Table Capacity. What they assumed is given first here,
/// unless the file sets it itself; the decoder is RFC 9204's.
fn decoder_for(file: &[u8], config: DecoderConfig) -> Decoder {
    let mut d = Decoder::new(config);
    let sets_capacity = blocks(file)
        .iter()
        .find(|(s, _)| *s == 0)
        .is_some_and(|(_, data)| data[0] & 0xe0 == 0x20);
    if config.max_table_capacity > 0 && !sets_capacity {
        let mut set = Vec::new();
        instruction::EncoderInstruction::<&[u8]>::SetCapacity(config.max_table_capacity)
            .write(false, &mut set);
        d.handle_encoder_stream(&set).unwrap();
    }
    d
}

fn decode_file(file: &[u8], config: DecoderConfig, cut: Cut) -> Result<Run, Error> {
    let mut d = decoder_for(file, config);
    let mut got = BTreeMap::new();
    let mut decoder_stream = Vec::new();
    for (stream, data) in blocks(file) {
        if stream == 0 {
            match cut {
                Cut::Whole => d.handle_encoder_stream(data)?,
                Cut::Bytewise => {
                    for b in data.chunks(1) {
                        d.handle_encoder_stream(b)?;
                    }
                }
                Cut::At(i) => {
                    let (a, b) = data.split_at(i.min(data.len()));
                    d.handle_encoder_stream(a)?;
                    d.handle_encoder_stream(b)?;
                }
            }
            while let Some((s, decoded)) = d.poll_unblocked() {
                let Decoded::Fields(f) = decoded else {
                    panic!("stream {s}: {decoded:?}")
                };
                assert!(got.insert(s, f).is_none());
            }
        } else {
            match d.decode(stream, data)? {
                Decoded::Fields(f) => assert!(got.insert(stream, f).is_none()),
                Decoded::Blocked => {}
                Decoded::TooLarge => panic!("stream {stream} too large"),
            }
        }
        d.write_decoder_stream(&mut decoder_stream);
    }
    assert_eq!(d.blocked_streams(), 0, "every blocked stream was unblocked");
    Ok((got, decoder_stream))
}

/// The decoder stream a run wrote parses, acknowledges only streams that referenced the
/// table, once each, and its increments never pass the inserts.
fn check_decoder_stream(bytes: &[u8], streams: usize) {
    let mut rest = bytes;
    let mut acked = std::collections::BTreeSet::new();
    while !rest.is_empty() {
        let (i, n) = instruction::DecoderInstruction::parse(rest)
            .unwrap()
            .unwrap();
        rest = &rest[n..];
        match i {
            instruction::DecoderInstruction::SectionAck(s) => {
                assert!(s >= 1 && s as usize <= streams);
                assert!(acked.insert(s), "stream {s} acknowledged twice");
            }
            instruction::DecoderInstruction::InsertCountIncrement(n) => assert!(n > 0),
            instruction::DecoderInstruction::StreamCancel(s) => panic!("cancelled {s}"),
        }
    }
}

fn encoded_files() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path("encoded"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(".netbsd.out."))
        .collect();
    names.sort();
    assert_eq!(names.len(), 8, "{names:?}");
    names
}

#[test]
fn interop_files_decode_to_their_qif() {
    let want = qif(&String::from_utf8(read("netbsd.qif")).unwrap());
    assert_eq!(want.len(), 18);
    for name in encoded_files() {
        let file = read(&format!("encoded/{name}"));
        let config = config_of(&name);
        let (got, decoder_stream) = decode_file(&file, config, Cut::Whole).unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        for (i, list) in want.iter().enumerate() {
            assert_eq!(&got[&(i as u64 + 1)], list, "{name}: list {}", i + 1);
        }
        check_decoder_stream(&decoder_stream, want.len());
        // A byte at a time: the same fields, the same decoder stream.
        let bytewise = decode_file(&file, config, Cut::Bytewise).unwrap();
        assert_eq!(
            bytewise,
            (got.clone(), decoder_stream.clone()),
            "{name} bytewise"
        );
        // Every encoder-stream piece cut at each offset.
        let longest = blocks(&file)
            .iter()
            .filter(|(s, _)| *s == 0)
            .map(|(_, d)| d.len())
            .max()
            .unwrap_or(0);
        for at in 1..longest {
            let split = decode_file(&file, config, Cut::At(at)).unwrap();
            assert_eq!(split.0, got, "{name} split at {at}");
        }
    }
}

/// Some of these encoders write sections before the inserts they need: with fewer blocked
/// streams allowed than they assumed, the decoder refuses (§2.1.2), and that test fails
/// without the limit.
#[test]
fn interop_files_that_block_need_their_blocked_streams() {
    let mut refused = 0;
    for name in encoded_files() {
        let file = read(&format!("encoded/{name}"));
        let mut config = config_of(&name);
        // How many streams are blocked at the worst moment, with the limit generous.
        let generous = DecoderConfig {
            max_blocked_streams: u64::MAX,
            ..config
        };
        let mut d = decoder_for(&file, generous);
        let mut worst = 0;
        for (stream, data) in blocks(&file) {
            if stream == 0 {
                d.handle_encoder_stream(data).unwrap();
                while d.poll_unblocked().is_some() {}
            } else {
                d.decode(stream, data).unwrap();
            }
            worst = worst.max(d.blocked_streams() as u64);
        }
        assert!(
            worst <= config.max_blocked_streams,
            "{name}: {worst} blocked"
        );
        if worst == 0 {
            continue;
        }
        config.max_blocked_streams = worst - 1;
        let e = decode_file(&file, config, Cut::Whole).unwrap_err();
        assert!(
            matches!(e, Error::Peer(p) if p.code == ErrorCode::QPACK_DECOMPRESSION_FAILED && !p.stream),
            "{name}: {e:?}"
        );
        refused += 1;
    }
    assert!(refused >= 2, "at least two files block (ls-qpack, quinn)");
}

/// RFC 9204 Appendix B as the interop repository carries it (streams shifted by 4).
#[test]
fn the_appendix_b_interop_file() {
    let name = "rfc9204-appendix-b.out.220.100.1";
    let file = read(&format!("encoded/{name}"));
    for cut in [Cut::Whole, Cut::Bytewise] {
        let (got, _) = decode_file(&file, config_of(name), cut).unwrap();
        assert_eq!(got[&4], fields(&[(":path", "/index.html")]));
        assert_eq!(
            got[&8],
            fields(&[(":authority", "www.example.com"), (":path", "/sample/path")])
        );
        assert_eq!(
            got[&12],
            fields(&[
                (":authority", "www.example.com"),
                (":path", "/"),
                ("custom-key", "custom-value")
            ])
        );
    }
}

/// The error files (2018): refused as connection errors, except the two RFC 9204's static
/// table made valid (see testdata/qpack/README.md).
#[test]
fn error_files() {
    let config = DecoderConfig {
        max_table_capacity: 4096,
        max_blocked_streams: 100,
        max_field_section_size: 64 * 1024,
    };
    for i in 1..=12 {
        let file = read(&format!("errors/err{i}"));
        let result = decode_file(&file, config, Cut::Whole);
        match i {
            9 => assert_eq!(result.unwrap().0[&1], fields(&[(":authority", "")])),
            10 => assert_eq!(
                result.unwrap().0[&1],
                fields(&[("x-xss-protection", "1; mode=block")])
            ),
            _ => {
                let e = result.unwrap_err();
                let Error::Peer(p) = e else {
                    panic!("err{i}: {e:?}")
                };
                assert!(!p.stream || p.reason.contains("limit"), "err{i}: {p:?}");
                let stream = blocks(&file)[0].0;
                let want = if stream == 0 {
                    ErrorCode::QPACK_ENCODER_STREAM_ERROR
                } else {
                    ErrorCode::QPACK_DECOMPRESSION_FAILED
                };
                assert_eq!(p.code, want, "err{i}");
            }
        }
    }
}

/// berth's encoder over the same requests, at each setting the interop files use, its
/// output delivered three ways: in order; every section before any encoder-stream byte
/// (each stream blocks); and the encoder stream a byte at a time, interleaved. The decoder
/// stream goes back to the encoder each time, so acknowledgments drive what it references.
#[test]
fn berths_encoder_round_trips_the_interop_requests() {
    let lists = qif(&String::from_utf8(read("netbsd.qif")).unwrap());
    for (capacity, blocked) in [(0, 0), (256, 0), (256, 100), (512, 1), (4096, 100)] {
        for order in 0..3 {
            let mut e = Encoder::new();
            e.peer_settings(capacity, blocked).unwrap();
            e.set_capacity(capacity).unwrap();
            let mut d = Decoder::new(DecoderConfig {
                max_table_capacity: capacity,
                max_blocked_streams: blocked,
                max_field_section_size: 64 * 1024,
            });
            let mut got = BTreeMap::new();
            let mut held = vec![];
            let mut encoder_stream = vec![];
            for (i, list) in lists.iter().enumerate() {
                let stream = 4 * i as u64;
                let mut section = vec![];
                e.encode(
                    stream,
                    list.iter().map(|f| (&f.name[..], &f.value[..])),
                    &mut section,
                );
                e.write_encoder_stream(&mut encoder_stream);
                if order == 1 && i % 6 != 5 {
                    // Hold sections and encoder stream back, six requests at a time.
                    held.push((stream, section));
                    continue;
                }
                held.push((stream, section));
                if order == 2 {
                    for b in encoder_stream.chunks(1) {
                        d.handle_encoder_stream(b).unwrap();
                    }
                } else if order == 1 {
                    // Sections first: those that need the held inserts block.
                    for (s, section) in held.drain(..) {
                        match d.decode(s, &section).unwrap() {
                            Decoded::Fields(f) => assert!(got.insert(s, f).is_none()),
                            Decoded::Blocked => {}
                            Decoded::TooLarge => unreachable!(),
                        }
                    }
                    d.handle_encoder_stream(&encoder_stream).unwrap();
                }
                if order != 1 {
                    d.handle_encoder_stream(if order == 0 { &encoder_stream } else { &[] })
                        .unwrap();
                    for (s, section) in held.drain(..) {
                        let Decoded::Fields(f) = d.decode(s, &section).unwrap() else {
                            panic!("stream {s} blocked though its inserts came first")
                        };
                        assert!(got.insert(s, f).is_none());
                    }
                }
                encoder_stream.clear();
                while let Some((s, decoded)) = d.poll_unblocked() {
                    let Decoded::Fields(f) = decoded else {
                        panic!("{decoded:?}")
                    };
                    assert!(got.insert(s, f).is_none());
                }
                let mut feedback = vec![];
                d.write_decoder_stream(&mut feedback);
                e.handle_decoder_stream(&feedback).unwrap();
                assert!(e.blocking_streams() as u64 <= blocked);
            }
            assert_eq!(got.len(), lists.len(), "capacity {capacity} order {order}");
            for (i, list) in lists.iter().enumerate() {
                assert_eq!(&got[&(4 * i as u64)], list, "capacity {capacity} list {i}");
            }
            assert!(d.table_size().0 <= capacity as usize);
        }
    }
}
