//! `berth lab`: runs the lab with this binary's models and writes its three outputs.

use std::path::PathBuf;
use std::time::Duration;

use berth::drive::Model;
use berth_lab::lab::{self, LabConfig};

use crate::args::{usage_error, LabArgs};

/// Runs every server under every shape; the table goes to stdout, progress to stderr.
pub fn run(opts: LabArgs) -> Result<(), String> {
    let berth =
        std::env::current_exe().map_err(|e| format!("cannot find the berth binary: {e}"))?;
    let peers = opts.peers.clone().unwrap_or_else(default_peers);
    if !peers.is_dir() {
        usage_error("lab", &format!("no peers directory at {}", peers.display()));
    }
    let config = LabConfig {
        duration: opts.duration.unwrap_or(if opts.quick {
            // About a hundred runs (fifteen servers, eight to fourteen shapes each) and
            // their starts and stops fit two minutes with runs this short.
            Duration::from_millis(750)
        } else {
            Duration::from_secs(10)
        }),
        warmup: opts.warmup.unwrap_or(if opts.quick {
            Duration::ZERO
        } else {
            Duration::from_secs(1)
        }),
        out: opts.out.clone(),
        only: opts.only.clone(),
        berth,
        models: Model::ALL.iter().map(|m| m.name().to_owned()).collect(),
        peers,
        python: opts.python.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let report = lab::run(&config, &mut |line| eprintln!("lab: {line}")).inspect_err(|e| {
        if e.starts_with("--only") {
            usage_error("lab", e)
        }
    })?;
    print!("{}", report.to_table());
    let json = config.out.join("lab.json");
    let svg = config.out.join("lab.svg");
    std::fs::write(&json, format!("{:#}\n", report.to_json()))
        .map_err(|e| format!("cannot write {}: {e}", json.display()))?;
    std::fs::write(&svg, report.to_svg()?)
        .map_err(|e| format!("cannot write {}: {e}", svg.display()))?;
    println!("\nwrote {} and {}", json.display(), svg.display());
    Ok(())
}

/// `./peers` when run from the source tree's root, else the source tree's own.
fn default_peers() -> PathBuf {
    let here = PathBuf::from("peers");
    if here.is_dir() {
        return here;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../peers")
}
