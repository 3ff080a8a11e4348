//! Runs every HTTP/2 conversation of `testdata/h2` through the sans-IO
//! [`Connection`](berth_proto::h2::Connection): whole, and split at every byte (for long
//! floods: a byte at a time and at sampled split points). Every way must hear the same
//! answers. Jobs are held until all input is in. See `testdata/h2/README.md` for the format.

mod h2_support;

use berth_proto::h2::H2Config;

use h2_support::vectors::{self, bytes_of, Case};
use h2_support::{code_named, hear, Heard, Server};

/// Runs the conversation with the input cut at `cuts`.
fn run(bytes: &[u8], cuts: &[usize]) -> (Heard, bool) {
    let mut server = Server::new(H2Config::default());
    let mut at = 0;
    for &cut in cuts.iter().chain([bytes.len()].iter()) {
        server.feed(&bytes[at..cut]);
        at = cut;
    }
    server.finish();
    (hear(&server.output), server.closed)
}

fn check(case: &Case, heard: &Heard, closed: bool, way: &str) {
    let name = &case.name;
    let mut got: Vec<_> = heard
        .responses
        .iter()
        .map(|(s, status, _, body, ended)| (*s, *status, body.clone(), *ended))
        .collect();
    got.sort_by_key(|r| r.0);
    if let Some(responses) = &case.responses {
        let mut want: Vec<_> = responses.iter().collect();
        want.sort_by_key(|r| r.stream);
        let shown: Vec<_> = got.iter().take(8).map(|r| (r.0, r.1)).collect();
        assert_eq!(
            got.len(),
            want.len(),
            "{name} ({way}): responses {shown:?}..., resets {:?}, goaway {:?}",
            &heard.resets[..heard.resets.len().min(8)],
            heard.goaway
        );
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0, g.1), (w.stream, w.status), "{name} ({way})");
            if let Some(body) = &w.body {
                assert_eq!(g.2, body.as_bytes(), "{name} ({way}): body");
            }
            if let Some(n) = w.body_length {
                assert_eq!(g.2.len(), n, "{name} ({way}): body length");
            }
            match w.ended {
                Some(ended) => assert_eq!(g.3, ended, "{name} ({way}): END_STREAM on {}", g.0),
                None => assert!(g.3 || closed, "{name} ({way}): stream {} not ended", g.0),
            }
        }
    }
    if let Some(resets) = &case.resets {
        let resets: Vec<(u32, u32)> = resets
            .iter()
            .map(|r| (r.stream, code_named(&r.code)))
            .collect();
        assert_eq!(heard.resets, resets, "{name} ({way}): resets");
    }
    assert_eq!(
        heard.goaway.map(|g| g.1),
        case.goaway.as_deref().map(code_named),
        "{name} ({way}): goaway"
    );
    assert_eq!(closed, case.close, "{name} ({way}): closed");
    if let Some(p) = case.pings {
        assert_eq!(heard.pings, p, "{name} ({way}): pings");
    }
    assert_eq!(heard.settings, 1, "{name} ({way}): one SETTINGS from berth");
}

#[test]
fn every_h2_vector_whole_and_split() {
    let only = std::env::var("BERTH_VECTOR").ok();
    let mut ran = 0;
    let mut names = std::collections::HashSet::new();
    for (_, case) in vectors::all() {
        assert!(names.insert(case.name.clone()), "duplicate {}", case.name);
        if only.as_ref().is_some_and(|o| *o != case.name) {
            continue;
        }
        let bytes = bytes_of(&case);
        let (heard, closed) = run(&bytes, &[]);
        check(&case, &heard, closed, "whole");
        let bytewise: Vec<usize> = (1..bytes.len()).collect();
        let (h, c) = run(&bytes, &bytewise);
        check(&case, &h, c, "bytewise");
        // Every split point for short conversations; a sample for floods.
        let step = (bytes.len() / 300).max(1);
        for cut in (1..bytes.len()).step_by(step) {
            let (h, c) = run(&bytes, &[cut]);
            check(&case, &h, c, &format!("split at {cut}"));
        }
        ran += 1;
    }
    assert!(ran > 0, "no vector ran");
}
