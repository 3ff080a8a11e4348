//! cargo +nightly fuzz run h3_connection
//!
//! The HTTP/3 connection (server role) against an arbitrary client: the input is a script of
//! stream pieces (request streams 0, 4, .., 28; the client's unidirectional streams 2, 6, 10,
//! 14, whose first byte says their type), with or without FIN, resets and STOP_SENDINGs, fed
//! to `h3::Connection` with berth's demo application the way a driver does: jobs run at once,
//! files are never found, pulled bodies are kept whole. It must never panic, never loop, never
//! write a stream's bytes after its FIN, and the bytes it asks QUIC to send stay bounded by
//! what came in (no amplification out of nothing).
#![no_main]

#[allow(dead_code)]
mod common;

use std::time::Instant;

use berth::proto::h3::{Connection, H3Config, Quic};
use berth::proto::http::{Action, Context, FileError, Job, Pulled};
use libfuzzer_sys::fuzz_target;

/// One step of the script: `[tag, len, bytes...]`. Tag bits 0-2 pick the stream (0-3: a
/// request stream, 4-7: a unidirectional one), bit 3 a FIN, bits 4-5: 0 and 1 bytes, 2 a
/// reset, 3 a STOP_SENDING.
fn stream(tag: u8) -> u64 {
    let pick = u64::from(tag & 7);
    if pick < 4 {
        pick * 4 + u64::from(tag >> 6) * 16
    } else {
        (pick - 4) * 4 + 2
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = common::limits();
    let mut handler = common::handler();
    let mut conn = Connection::new(H3Config::default());
    let cx = Context {
        limits: &limits,
        date: common::DATE,
        stream_bodies: false,
        now: Instant::now(),
        alt_svc: None,
    };
    let mut finished = std::collections::BTreeSet::new();
    let (mut sent, mut received) = (0usize, 0usize);
    let mut rest = data;
    let mut step = conn.process(&cx, &mut handler);
    loop {
        // Whatever the connection asked for, done as a driver does.
        let mut spins = 0;
        loop {
            spins += 1;
            assert!(spins < 10_000, "no progress");
            step = match step {
                Action::Read | Action::Close => break,
                Action::Flush | Action::Switched => panic!("HTTP/3 neither flushes nor switches"),
                Action::Offload { stream, job } => {
                    conn.complete(stream, job.run(), &cx, &mut handler)
                }
                Action::Open { stream, request } => {
                    conn.file(stream, &request, Err(FileError::NotFound), &cx, &mut handler)
                }
                Action::Body { .. } => panic!("a body with no file opened"),
                Action::Stream { stream, streamed } => {
                    // The producer's bytes so far, then its end.
                    let mut bytes = Vec::new();
                    let _ = streamed.take(&mut bytes, 1 << 16);
                    let trailers = streamed.take_trailers();
                    conn.pulled(stream, &mut bytes, Pulled::Ended, trailers, &cx, &mut handler)
                }
                Action::Pull { stream, .. } => {
                    conn.pulled(stream, &mut Vec::new(), Pulled::Failed, Vec::new(), &cx, &mut handler)
                }
            };
        }
        while let Some(order) = conn.poll_quic() {
            if let Quic::Send { stream, bytes, fin } = order {
                assert!(!finished.contains(&stream), "bytes after FIN on {stream}");
                sent += bytes.len();
                if fin {
                    finished.insert(stream);
                }
            }
        }
        // Answers are small here (the demo's, and refusals): a few KiB a request at most, and
        // the control and QPACK streams' first bytes.
        assert!(sent <= 4096 + received * 64 + 64 * 1024, "{sent} bytes out for {received} in");
        let [tag, len, tail @ ..] = rest else { break };
        let n = usize::from(*len).min(tail.len());
        let (bytes, next) = tail.split_at(n);
        rest = next;
        let id = stream(*tag);
        match (tag >> 4) & 3 {
            0 | 1 => {
                received += bytes.len();
                conn.recv(id, bytes, tag & 8 != 0);
            }
            2 => conn.reset(id, 0x10c),
            _ => conn.stopped(id, 0x10c),
        }
        step = conn.process(&cx, &mut handler);
    }
});
