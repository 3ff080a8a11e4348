//! `berth lab`: every berth model and every installed peer, one after another, under the same
//! load shapes, measured the same way.
//!
//! For each server and shape the lab starts the server fresh (so memory figures belong to that
//! shape alone), waits until it answers, optionally warms it up, and runs [`crate::bench`]
//! against it while sampling the server's CPU time and memory from `/proc` ([`procstat`]) and
//! the lab's own CPU time. A row whose load generator was 90% busy or more is marked
//! client-bound: its requests/s measured the generator, and only its CPU time per request says
//! something about the server.

mod chart;
mod notes;
pub mod pin;
pub mod procstat;
mod servers;
pub mod shapes;
mod table;
mod tls;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::bench::{self, BenchConfig, Limit, Report, RequestSpec, Target};
pub use servers::{ServerDef, Skipped};
use shapes::{Shape, SHAPES};

/// Load generator CPU use, as a share of its cores, at or above which a row is client-bound.
pub const CLIENT_BOUND: f64 = 0.9;

/// A lab run.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Seconds per measured run.
    pub duration: Duration,
    /// Untimed load before each measured run (none in quick mode).
    pub warmup: Duration,
    /// Where `lab.json`, `lab.svg` and the servers' logs go.
    pub out: PathBuf,
    /// Only these servers and/or shapes (empty: all).
    pub only: Vec<String>,
    /// The berth binary whose models are measured.
    pub berth: PathBuf,
    /// berth's model names.
    pub models: Vec<String>,
    /// Directory with the peers' sources.
    pub peers: PathBuf,
    /// The Python that runs the Python peers (`--python`); `None`: `python3` on the path.
    pub python: Option<PathBuf>,
    /// The command line, recorded in `lab.json`.
    pub command: String,
}

/// One server under one shape.
#[derive(Debug, Clone)]
pub struct Row {
    /// Server name.
    pub server: String,
    /// `berth` or `peer`.
    pub kind: &'static str,
    /// The shape.
    pub shape: Shape,
    /// What the load generator measured.
    pub report: Report,
    /// CPU time the server's processes used under load (warm-up included), less what starting
    /// and stopping it costs.
    pub server_cpu: Duration,
    /// Time under load that `server_cpu` covers: the measured run and the warm-up.
    pub window: Duration,
    /// Requests answered in that time.
    pub requests_for_cpu: u64,
    /// Highest resident memory of the server's processes seen during the run, in bytes.
    pub peak_rss: u64,
    /// The load generator's CPU use as a share of its cores (1.0 = all of them, all the time).
    pub client_busy: f64,
}

impl Row {
    /// Server CPU as a percentage of one core.
    pub fn server_cpu_percent(&self) -> f64 {
        100.0 * self.server_cpu.as_secs_f64() / self.window.as_secs_f64().max(1e-9)
    }

    /// Server CPU microseconds per answered request.
    pub fn cpu_us_per_request(&self) -> Option<f64> {
        (self.requests_for_cpu > 0)
            .then(|| self.server_cpu.as_secs_f64() * 1e6 / self.requests_for_cpu as f64)
    }

    /// The load generator, not the server, was the bottleneck.
    pub fn client_bound(&self) -> bool {
        self.client_busy >= CLIENT_BOUND
    }
}

/// A server/shape pair that could not be measured.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Server name.
    pub server: String,
    /// Shape name.
    pub shape: &'static str,
    /// What went wrong.
    pub error: String,
}

/// A server left out of a shape because it does not serve that shape's route.
#[derive(Debug, Clone)]
pub struct NotRun {
    /// Server name.
    pub server: String,
    /// Shape name.
    pub shape: &'static str,
    /// Why.
    pub why: String,
}

/// Everything a lab run produced.
#[derive(Debug, Clone)]
pub struct LabReport {
    /// How the lab ran.
    pub config: LabConfig,
    /// Where server and load generator ran.
    pub pinning: pin::Pinning,
    /// Measured rows, in table order.
    pub rows: Vec<Row>,
    /// Peers not run, and why.
    pub skipped: Vec<Skipped>,
    /// Runs that failed.
    pub failures: Vec<Failure>,
    /// Server/shape pairs left out because the server does not serve the route.
    pub not_run: Vec<NotRun>,
}

/// Runs the lab, telling `progress` about each step (one line each).
pub fn run(config: &LabConfig, progress: &mut dyn FnMut(&str)) -> Result<LabReport, String> {
    std::fs::create_dir_all(config.out.join("logs"))
        .map_err(|e| format!("cannot create {}: {e}", config.out.display()))?;
    let pinning = pin::Pinning::plan();
    pinning
        .enter_client()
        .map_err(|e| format!("cannot pin the load generator: {e}"))?;
    progress(&pinning.describe());

    // Servers get absolute paths, valid whatever directory they run in.
    let absolute = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let out = absolute(&config.out);
    // `--only` is checked first, and peers it leaves out are not even looked for (nor built).
    let known: Vec<&str> = config
        .models
        .iter()
        .map(String::as_str)
        .chain(servers::PEERS)
        .collect();
    check_only(config, &known)?;
    let picks_server = config.only.iter().any(|n| known.contains(&n.as_str()));
    let wanted = |name: &str| !picks_server || config.only.iter().any(|n| n == name);
    let mut servers = servers::berth_models(&config.berth, &config.models);
    let (peers, mut skipped) = servers::peers(
        &absolute(&config.peers),
        &servers::build_dir(&config.berth),
        &servers::Tools::from_env().with_python(config.python.clone()),
        &wanted,
        progress,
    );
    servers.extend(peers);
    let (servers, shapes) = select(config, servers, &mut skipped)?;
    for s in &skipped {
        progress(&format!("skipping {}: {}", s.name, s.why));
    }

    // The TLS shapes' certificate, made once for the run: every server serves the same one.
    let tls = if shapes.iter().any(Shape::tls) {
        Some(tls::TlsFiles::make(&out.join("tls"))?)
    } else {
        None
    };
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let logs = out.join("logs");
    let baselines: Vec<Duration> = servers
        .iter()
        .map(|s| baseline(&pinning, s, &logs))
        .collect();
    let mut not_run = Vec::new();
    for shape in &shapes {
        for (server, &baseline) in servers.iter().zip(&baselines) {
            if !server.routes.contains(&shape.route) {
                not_run.push(NotRun {
                    server: server.name.clone(),
                    shape: shape.name,
                    why: server
                        .routes_note
                        .unwrap_or("does not serve this route")
                        .to_owned(),
                });
                continue;
            }
            let tls = tls.as_ref().filter(|_| shape.tls());
            match measure(config, &pinning, server, shape, tls, &logs, baseline) {
                Ok(row) => {
                    progress(&format!(
                        "{:<16} {:<16} {:>10.0} req/s  p99 {:>8.2} ms  server CPU {:>5.1}%{}",
                        row.server,
                        shape.name,
                        row.report.requests_per_sec(),
                        row.report.latency().p99 as f64 / 1000.0,
                        row.server_cpu_percent(),
                        if row.client_bound() {
                            "  client-bound"
                        } else {
                            ""
                        }
                    ));
                    rows.push(row);
                }
                Err(error) => {
                    progress(&format!(
                        "{:<16} {:<16} failed: {error}",
                        server.name, shape.name
                    ));
                    failures.push(Failure {
                        server: server.name.clone(),
                        shape: shape.name,
                        error,
                    });
                }
            }
        }
    }
    Ok(LabReport {
        config: config.clone(),
        pinning,
        rows,
        skipped,
        failures,
        not_run,
    })
}

/// Refuses an `--only` name that is neither a server (`known`) nor a shape, listing both.
fn check_only(config: &LabConfig, known: &[&str]) -> Result<(), String> {
    for name in &config.only {
        if !known.contains(&name.as_str()) && !SHAPES.iter().any(|s| s.name == name) {
            let shapes: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
            return Err(format!(
                "--only {name}: no such server or shape (servers: {}; shapes: {})",
                known.join(", "),
                shapes.join(", ")
            ));
        }
    }
    Ok(())
}

/// Applies `--only` (already checked by [`check_only`]): each name picks a server or a shape.
fn select(
    config: &LabConfig,
    servers: Vec<ServerDef>,
    skipped: &mut Vec<Skipped>,
) -> Result<(Vec<ServerDef>, Vec<Shape>), String> {
    let server_names: Vec<&str> = servers
        .iter()
        .map(|s| s.name.as_str())
        .chain(skipped.iter().map(|s| s.name.as_str()))
        .chain(servers::PEERS)
        .collect();
    let picks_server = config
        .only
        .iter()
        .any(|n| server_names.contains(&n.as_str()));
    let picks_shape = config
        .only
        .iter()
        .any(|n| SHAPES.iter().any(|s| s.name == n));
    let wanted = |name: &str| config.only.iter().any(|n| n == name);
    let servers = servers
        .into_iter()
        .filter(|s| !picks_server || wanted(&s.name))
        .collect();
    if picks_server {
        skipped.retain(|s| wanted(&s.name));
    }
    let shapes = SHAPES
        .iter()
        .filter(|s| !picks_shape || wanted(s.name))
        .copied()
        .collect();
    Ok((servers, shapes))
}

fn bench_config(
    config: &LabConfig,
    pinning: &pin::Pinning,
    shape: &Shape,
    tls: Option<&tls::TlsFiles>,
    addr: std::net::SocketAddr,
    time: Duration,
) -> Result<BenchConfig, String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let target = Target::parse(&format!("{scheme}://{addr}{}", shape.path))?;
    let mut b = BenchConfig::new(target);
    // The load generator verifies the server's certificate, as a real client would.
    b.ca = tls.map(|t| t.ca.clone());
    b.request = RequestSpec {
        method: shape.method.to_owned(),
        headers: if shape.body.is_empty() {
            Vec::new()
        } else {
            vec![("Content-Type".to_owned(), "application/json".to_owned())]
        },
        body: shape.body.to_vec(),
    };
    b.connections = shape.connections;
    b.threads = pinning.load_threads();
    b.limit = Limit::Duration(time);
    b.keep_alive = shape.keep_alive;
    b.pipeline = shape.pipeline;
    // A stalled server shows up as timeouts within the run rather than as a silent gap.
    b.timeout = config.duration.max(Duration::from_secs(2));
    Ok(b)
}

/// CPU a server uses just to start, answer the readiness probe and stop: subtracted from each
/// run's total, which is only known once the server has exited.
fn baseline(pinning: &pin::Pinning, server: &ServerDef, logs: &std::path::Path) -> Duration {
    let before = procstat::children_cpu();
    match server.start(pinning, logs, None) {
        Ok(running) => {
            running.stop();
            procstat::children_cpu().saturating_sub(before)
        }
        Err(_) => Duration::ZERO,
    }
}

/// Starts `server`, runs `shape` against it (after the warm-up, if any), stops it.
///
/// Requests/s and latency come from the measured run alone. CPU time is the server's whole
/// life less its `baseline`, so it covers the warm-up too: CPU per request divides it by the
/// requests of both runs, and CPU % by both runs' time.
fn measure(
    config: &LabConfig,
    pinning: &pin::Pinning,
    server: &ServerDef,
    shape: &Shape,
    tls: Option<&tls::TlsFiles>,
    logs: &std::path::Path,
    baseline: Duration,
) -> Result<Row, String> {
    let cpu_before = procstat::children_cpu();
    let running = server.start(pinning, logs, tls)?;
    let result = (|| {
        let mut warm = (0, Duration::ZERO);
        if !config.warmup.is_zero() {
            let r = bench::run(&bench_config(
                config,
                pinning,
                shape,
                tls,
                running.addr,
                config.warmup,
            )?)?;
            warm = (r.tally.responses, r.elapsed);
        }
        let bench = bench_config(config, pinning, shape, tls, running.addr, config.duration)?;
        let peak = AtomicU64::new(procstat::group_rss(running.pgid));
        let done = AtomicBool::new(false);
        let own_before = procstat::own_cpu();
        let started = Instant::now();
        let report = std::thread::scope(|s| {
            s.spawn(|| {
                // Memory is sampled, not summed from per-process peaks: a forking model's
                // children do not all live at once.
                while !done.load(Relaxed) {
                    peak.fetch_max(procstat::group_rss(running.pgid), Relaxed);
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
            let report = bench::run(&bench);
            // Read at once: the sampler may take a moment to notice it should stop.
            let own = procstat::own_cpu().saturating_sub(own_before);
            let wall = started.elapsed();
            done.store(true, Relaxed);
            report.map(|r| (r, own, wall))
        })?;
        Ok::<_, String>((report, warm, peak.load(Relaxed)))
    })();
    running.stop();
    let ((report, own, wall), warm, peak) = result?;
    let server_cpu = procstat::children_cpu()
        .saturating_sub(cpu_before)
        .saturating_sub(baseline);
    let cores = pinning.load_threads() as f64;
    Ok(Row {
        server: server.name.clone(),
        kind: server.kind,
        shape: *shape,
        server_cpu,
        window: wall + warm.1,
        requests_for_cpu: report.tally.responses + warm.0,
        peak_rss: peak,
        client_busy: own.as_secs_f64() / (wall.as_secs_f64() * cores).max(1e-9),
        report,
    })
}

impl LabReport {
    /// The seeds' style of table, one block per shape.
    pub fn to_table(&self) -> String {
        table::render(self)
    }

    /// `lab.json`.
    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "server": r.server,
                    "kind": r.kind,
                    "shape": r.shape.name,
                    "requests": r.report.tally.responses,
                    "requests_per_sec": r.report.requests_per_sec(),
                    "latency_avg_ms": r.report.latency().mean / 1000.0,
                    "latency_p99_ms": r.report.latency().p99 as f64 / 1000.0,
                    "errors": r.report.tally.errors.total(),
                    "errors_note": notes::cause(r),
                    "server_cpu_s": r.server_cpu.as_secs_f64(),
                    "server_cpu_percent": r.server_cpu_percent(),
                    "server_cpu_us_per_request": r.cpu_us_per_request(),
                    "peak_rss_bytes": r.peak_rss,
                    "client_busy": r.client_busy,
                    "client_bound": r.client_bound(),
                    "bench": r.report.to_json(),
                })
            })
            .collect();
        let shapes: Vec<Value> = SHAPES
            .iter()
            .map(|s| {
                json!({
                    "name": s.name, "title": s.title, "method": s.method, "path": s.path,
                    "connections": s.connections, "pipeline": s.pipeline,
                    "keep_alive": s.keep_alive,
                })
            })
            .collect();
        json!({
            "command": self.config.command,
            "machine": machine(self.pinning.available.len()),
            "pinning": {
                "server_cores": self.pinning.server,
                "client_cores": self.pinning.client,
                "description": self.pinning.describe(),
            },
            "duration_s": self.config.duration.as_secs_f64(),
            "warmup_s": self.config.warmup.as_secs_f64(),
            "shapes": shapes,
            "rows": rows,
            "skipped": self.skipped.iter().map(|s| json!({"name": s.name, "why": s.why})).collect::<Vec<_>>(),
            "failures": self.failures.iter().map(|f| json!({"server": f.server, "shape": f.shape, "error": f.error})).collect::<Vec<_>>(),
            "not_run": self.not_run.iter().map(|n| json!({"server": n.server, "shape": n.shape, "why": n.why})).collect::<Vec<_>>(),
        })
    }

    /// `lab.svg`: requests/s (with errors), p99 latency (log scale) and server CPU µs per
    /// request for each server, one row of panels per shape, with a legend and the notes.
    pub fn to_svg(&self) -> Result<String, String> {
        chart::render(self)
    }
}

/// Cores (those this process may use) and kernel, for the record.
pub fn machine(cores: usize) -> Value {
    let uname = nix::sys::utsname::uname().ok();
    let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uname.as_ref().map(|u| f(u).to_string_lossy().into_owned())
    };
    json!({
        "cores": cores,
        "kernel": field(|u| u.release()),
        "system": field(|u| u.sysname()),
        "arch": field(|u| u.machine()),
    })
}
