//! The lab's table on stdout, in the seeds' style: one block per load shape, one line per
//! server, with the figures that decide a comparison side by side.

use std::fmt::Write as _;

use super::notes::{self, Notes};
use super::shapes::SHAPES;
use super::LabReport;

/// Renders the whole report.
pub fn render(r: &LabReport) -> String {
    let mut out = String::new();
    let machine = super::machine(r.pinning.available.len());
    let warmup = if r.config.warmup.is_zero() {
        String::new()
    } else {
        format!(" after {:.0} s warm-up", r.config.warmup.as_secs_f64())
    };
    let _ = writeln!(
        out,
        "berth lab: {} cores, {} {}; {}; {:.0} s per run{warmup}",
        machine["cores"],
        machine["system"].as_str().unwrap_or("?"),
        machine["kernel"].as_str().unwrap_or("?"),
        r.pinning.describe(),
        r.config.duration.as_secs_f64()
    );
    let _ = writeln!(out, "command: {}", r.config.command);
    let notes = Notes::of(r);
    for shape in SHAPES {
        let rows: Vec<_> = r
            .rows
            .iter()
            .filter(|row| row.shape.name == shape.name)
            .collect();
        let left_out = notes::not_run(r, shape.name);
        if rows.is_empty() && left_out.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{} [{}]", shape.title, shape.name);
        let _ = writeln!(
            out,
            "  {:<16} {:>10} {:>9} {:>9} {:>8} {:>8} {:>10} {:>10}  note",
            "server", "req/s", "avg ms", "p99 ms", "errors", "CPU %", "CPU us/req", "peak RSS"
        );
        for row in rows {
            let l = row.report.latency();
            let per_req = row
                .cpu_us_per_request()
                .map_or("-".to_owned(), |v| format!("{v:.1}"));
            let mut note = Vec::new();
            if row.client_bound() {
                note.push(format!(
                    "client-bound ({:.0}% busy)",
                    row.client_busy * 100.0
                ));
            }
            let errors = &row.report.tally.errors;
            if errors.total() > 0 {
                note.push(format!(
                    "errors: {}{}",
                    notes::error_kinds(errors),
                    notes.marker(row)
                ));
            }
            let _ = writeln!(
                out,
                "  {:<16} {:>10} {:>9.2} {:>9.2} {:>8} {:>8.1} {:>10} {:>10}  {}",
                row.server,
                notes::thousands(row.report.requests_per_sec().round() as u64),
                l.mean / 1000.0,
                l.p99 as f64 / 1000.0,
                notes::thousands(errors.total()),
                row.server_cpu_percent(),
                per_req,
                format!("{:.1} MiB", row.peak_rss as f64 / 1048576.0),
                note.join("; ")
            );
        }
        for server in left_out {
            let _ = writeln!(out, "  not run: {server}");
        }
    }
    for (n, text) in notes.list() {
        let _ = writeln!(out, "\n[{n}] {text}");
    }
    if !r.skipped.is_empty() {
        let _ = writeln!(out, "\nskipped:");
        for s in &r.skipped {
            let _ = writeln!(out, "  {}: {}", s.name, s.why);
        }
    }
    if !r.failures.is_empty() {
        let _ = writeln!(out, "\nfailed:");
        for f in &r.failures {
            let _ = writeln!(out, "  {} / {}: {}", f.server, f.shape, f.error);
        }
    }
    let _ = writeln!(
        out,
        "\nCPU % is the server's processes' CPU time over the run's wall time (100 = one core). \
         client-bound: the load generator was at least {:.0}% busy, so req/s measured it, not \
         the server; compare CPU us/req instead. Peak RSS adds up the server's processes, \
         so pages they share count once per process.",
        super::CLIENT_BOUND * 100.0
    );
    out
}
