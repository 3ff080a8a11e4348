//! berth's encoder against berth's decoder over a lossy-looking network: many requests,
//! each one or two sections (headers, trailers), fields drawn from a pool that hits the
//! static table, the dynamic table, sensitive and unique names; the encoder stream, the
//! sections and the decoder stream delivered in pseudo-random order and pieces, some
//! streams cancelled. Every section must decode to what was encoded, the decoder must never
//! refuse (the encoder keeps to its blocked streams and eviction rules), and in the end
//! every insert is acknowledged and nothing stays pinned.

use std::collections::{BTreeMap, VecDeque};

use super::*;

/// xorshift64*: deterministic, so a failure reproduces from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn field(rng: &mut Rng) -> (Vec<u8>, Vec<u8>) {
    let v = rng.below(6);
    let pick: (&str, String) = match rng.below(10) {
        0 => (":status", "200".into()),
        1 => (":status", format!("{}", 200 + v)),
        2 => (
            "content-type",
            ["text/html", "image/png", "x/y"][v % 3].into(),
        ),
        3 => ("server", "berth".into()),
        4 => ("x-custom", format!("value-{v}")),
        5 => (["x-a", "x-b", "x-c"][v % 3], "same".into()),
        6 => ("set-cookie", format!("id={v}")),
        7 => ("content-length", format!("{}", rng.next() % 100_000)),
        8 => ("x-long", "z".repeat(20 + 30 * v)),
        _ => ("date", format!("Sun, 06 Nov 1994 08:49:3{v} GMT")),
    };
    (pick.0.as_bytes().to_vec(), pick.1.into_bytes())
}

/// A field list as encoded.
type List = Vec<(Vec<u8>, Vec<u8>)>;

type Section = (u64, Vec<u8>, List);

fn trial(seed: u64) {
    let mut rng = Rng(seed | 1);
    let capacity = [0u64, 64, 220, 512, 4096][rng.below(5)];
    let blocked = [0u64, 1, 3, 100][rng.below(4)];
    let mut e = Encoder::new();
    e.set_huffman(rng.below(2) == 0);
    e.peer_settings(capacity, blocked).unwrap();
    e.set_capacity(capacity).unwrap();
    let mut d = Decoder::new(DecoderConfig {
        max_table_capacity: capacity,
        max_blocked_streams: blocked,
        max_field_section_size: 1 << 20,
    });
    let mut encoder_stream: Vec<u8> = vec![];
    let mut decoder_stream: Vec<u8> = vec![];
    // Per stream, sections not yet delivered, in order.
    let mut in_flight: BTreeMap<u64, VecDeque<Section>> = BTreeMap::new();
    let mut waiting: BTreeMap<u64, List> = BTreeMap::new();
    let mut decoded = 0;
    let requests = 40u64;
    let mut next = 0u64;
    loop {
        let done = next == requests && in_flight.is_empty() && waiting.is_empty();
        let quiet = encoder_stream.is_empty() && decoder_stream.is_empty();
        if done && quiet && !d.has_decoder_stream_output() {
            break;
        }
        match rng.below(6) {
            // A new request: headers, sometimes trailers.
            0 if next < requests => {
                let stream = 4 * next;
                next += 1;
                for _ in 0..1 + rng.below(2) {
                    let list: Vec<_> = (0..1 + rng.below(8)).map(|_| field(&mut rng)).collect();
                    let mut section = vec![];
                    e.encode(
                        stream,
                        list.iter().map(|(n, v)| (&n[..], &v[..])),
                        &mut section,
                    );
                    e.write_encoder_stream(&mut encoder_stream);
                    in_flight
                        .entry(stream)
                        .or_default()
                        .push_back((stream, section, list));
                }
                assert!(e.blocking_streams() as u64 <= blocked);
            }
            // Some encoder stream arrives.
            1 if !encoder_stream.is_empty() => {
                let n = 1 + rng.below(encoder_stream.len());
                let piece: Vec<u8> = encoder_stream.drain(..n).collect();
                d.handle_encoder_stream(&piece).unwrap();
                while let Some((s, got)) = d.poll_unblocked() {
                    let want = waiting.remove(&s).expect("a blocked stream");
                    assert_eq!(got, Decoded::Fields(fields_of(&want)), "seed {seed}");
                    decoded += 1;
                }
            }
            // A section arrives, on a stream not blocked.
            2 | 3 => {
                let ready: Vec<u64> = in_flight
                    .keys()
                    .copied()
                    .filter(|s| !waiting.contains_key(s))
                    .collect();
                if ready.is_empty() {
                    continue;
                }
                let s = ready[rng.below(ready.len())];
                let queue = in_flight.get_mut(&s).unwrap();
                let (_, section, list) = queue.pop_front().unwrap();
                if queue.is_empty() {
                    in_flight.remove(&s);
                }
                match d.decode(s, &section).unwrap() {
                    Decoded::Blocked => {
                        waiting.insert(s, list);
                    }
                    got => {
                        assert_eq!(got, Decoded::Fields(fields_of(&list)), "seed {seed}");
                        decoded += 1;
                    }
                }
            }
            // The decoder stream goes back, in pieces.
            4 => {
                d.write_decoder_stream(&mut decoder_stream);
                if !decoder_stream.is_empty() {
                    let n = 1 + rng.below(decoder_stream.len());
                    let piece: Vec<u8> = decoder_stream.drain(..n).collect();
                    e.handle_decoder_stream(&piece).unwrap();
                }
            }
            // Now and then a stream is reset.
            5 if rng.below(8) == 0 => {
                if let Some(&s) = in_flight.keys().next() {
                    in_flight.remove(&s);
                    waiting.remove(&s);
                    d.cancel_stream(s);
                }
            }
            _ => {
                // Nothing moved: let the end come by flushing the decoder stream.
                if next == requests && in_flight.is_empty() {
                    d.write_decoder_stream(&mut decoder_stream);
                    e.handle_decoder_stream(&decoder_stream).unwrap();
                    decoder_stream.clear();
                    if !encoder_stream.is_empty() {
                        d.handle_encoder_stream(&encoder_stream).unwrap();
                        encoder_stream.clear();
                        while let Some((s, got)) = d.poll_unblocked() {
                            let want = waiting.remove(&s).unwrap();
                            assert_eq!(got, Decoded::Fields(fields_of(&want)));
                            decoded += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(decoded > 0);
    assert_eq!(d.blocked_streams(), 0);
    assert_eq!(e.known_received_count(), e.insert_count(), "seed {seed}");
    assert_eq!(e.blocking_streams(), 0);
    // Nothing pinned: the whole table can be given up.
    assert!(e.set_capacity(0).is_ok(), "seed {seed}: {e:?}");
}

fn fields_of(list: &[(Vec<u8>, Vec<u8>)]) -> Vec<Field> {
    list.iter()
        .map(|(n, v)| Field {
            name: n.clone(),
            value: v.clone(),
        })
        .collect()
}

#[test]
fn encoder_and_decoder_agree_under_reordering() {
    for seed in 0..300 {
        trial(0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(seed + 1));
    }
}
