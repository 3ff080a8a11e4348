//! `berth lab --quick` end to end: every berth model and every peer installed here, under every
//! load shape, within the two minutes the quick lab promises; `lab.json` has a row for each
//! model and shape, every row served requests, and the table and chart are written.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Berth;

const MODELS: [&str; 6] = ["single", "threaded", "forked", "prefork", "evloop", "actor"];
const SHAPES: [&str; 6] = [
    "hello",
    "hello-pipelined",
    "hello-close",
    "reverse",
    "reverse-1000",
    "slow",
];

#[test]
fn quick_lab_measures_every_model_under_every_shape() {
    let out = std::env::temp_dir().join(format!("berth-lab-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let started = Instant::now();
    let mut lab = Berth::spawn_in(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")),
        &["lab", "--quick", "--out", &out.to_string_lossy()],
    );
    // Two minutes is the promise; the deadline only keeps a hang from stalling CI.
    let status = lab
        .wait_exit(Duration::from_secs(170))
        .unwrap_or_else(|| panic!("berth lab --quick still running after 170 s"));
    let elapsed = started.elapsed();
    let stdout = lab.rest_of_stdout();
    let stderr = lab.stderr();
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(
        elapsed < Duration::from_secs(120),
        "quick lab took {elapsed:?}\n{stderr}"
    );

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("lab.json")).unwrap()).unwrap();
    let rows = json["rows"].as_array().unwrap();
    for model in MODELS {
        for shape in SHAPES {
            let row = rows
                .iter()
                .find(|r| r["server"] == model && r["shape"] == shape)
                .unwrap_or_else(|| panic!("no row for {model} / {shape}\n{stderr}"));
            assert_eq!(row["kind"], "berth");
            assert!(row["server_cpu_s"].as_f64().unwrap() >= 0.0);
            assert!(row["peak_rss_bytes"].as_u64().unwrap() > 0, "{row}");
        }
    }
    for row in rows {
        assert!(
            row["requests"].as_u64().unwrap() > 0,
            "{} / {} served nothing: {row}",
            row["server"],
            row["shape"]
        );
    }
    // Peers that ran are peers, and every peer left out says what to install.
    for row in rows
        .iter()
        .filter(|r| !MODELS.contains(&r["server"].as_str().unwrap()))
    {
        assert_eq!(row["kind"], "peer");
    }
    for skipped in json["skipped"].as_array().unwrap() {
        assert!(
            skipped["why"].as_str().unwrap().contains("install"),
            "{skipped}"
        );
    }
    assert_eq!(
        json["failures"].as_array().unwrap().len(),
        0,
        "{}",
        json["failures"]
    );
    assert!(json["machine"]["cores"].as_u64().unwrap() >= 1);

    for shape in SHAPES {
        assert!(
            stdout.contains(&format!("[{shape}]")),
            "table lacks {shape}: {stdout}"
        );
    }
    let svg = std::fs::read_to_string(out.join("lab.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("evloop") && svg.contains("requests/s"));
    let _ = std::fs::remove_dir_all(&out);
}
