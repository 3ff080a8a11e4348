//! `berth lab --quick` end to end: every berth model and every peer installed here, under every
//! load shape, within the two minutes the quick lab promises; `lab.json` has a row for each
//! model and shape, every row served requests, and the table and chart are written. The hyper
//! peer is left to its skip path (a cargo that does not exist): building it is not CI's work.

mod common;

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use berth::drive::Model;
use common::Berth;

const SHAPES: [&str; 10] = [
    "hello",
    "hello-pipelined",
    "hello-close",
    "reverse",
    "reverse-1000",
    "slow",
    "hello-tls",
    "hello-tls-close",
    "hello-h2",
    "hello-h2-tls",
];

#[test]
fn quick_lab_measures_every_model_under_every_shape() {
    let out = std::env::temp_dir().join(format!("berth-lab-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    // The deadline only keeps a hang from stalling CI; how quick the run is comes from what it
    // was told to do (below), not from the clock of a machine that may be loaded.
    let (status, stdout, stderr) = run_lab(
        &["lab", "--quick", "--out", &out.to_string_lossy()],
        Duration::from_secs(600),
    );
    assert!(status.success(), "{stdout}\n{stderr}");

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("lab.json")).unwrap()).unwrap();
    // Quick: 0.75 s per measured run and no warm-up (the two minutes the promise rests on).
    assert_eq!(json["duration_s"], 0.75, "{}", json["duration_s"]);
    assert_eq!(json["warmup_s"], 0.0, "{}", json["warmup_s"]);
    let rows = json["rows"].as_array().unwrap();
    let models = Model::ALL.map(Model::name);
    for model in models {
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
    // A row that served nothing is a failure only if something went wrong in it: in a run of
    // 0.75 s on a loaded machine, a shape that forks a process per connection or shakes hands
    // with TLS may end before its first answer, with every connection made and no error. Every
    // server must have served something, though.
    for row in rows {
        if row["requests"].as_u64().unwrap() == 0 {
            assert_eq!(
                row["errors"].as_u64().unwrap(),
                0,
                "{} / {} failed and served nothing: {row}",
                row["server"],
                row["shape"]
            );
            assert!(
                row["bench"]["connects"].as_u64().unwrap() > 0,
                "{} / {} connected nothing: {row}",
                row["server"],
                row["shape"]
            );
        }
    }
    let servers: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["server"].as_str().unwrap()).collect();
    for server in servers {
        let served: u64 = rows
            .iter()
            .filter(|r| r["server"] == server)
            .map(|r| r["requests"].as_u64().unwrap())
            .sum();
        assert!(served > 0, "{server} served nothing in any shape\n{stderr}");
    }
    // Peers that ran are peers, and every peer left out says what to install.
    for row in rows
        .iter()
        .filter(|r| !models.contains(&r["server"].as_str().unwrap()))
    {
        assert_eq!(row["kind"], "peer");
    }
    for skipped in json["skipped"].as_array().unwrap() {
        assert!(
            skipped["why"].as_str().unwrap().contains("install"),
            "{skipped}"
        );
    }
    // Without cargo the hyper peers are skipped, not failed, and the lab says why.
    for hyper in ["rust-hyper", "rust-hyper-mt"] {
        assert!(
            stderr.contains(&format!("skipping {hyper}: cargo not found")),
            "{stderr}"
        );
        assert!(!rows.iter().any(|r| r["server"] == hyper));
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
    // Errors are explained where they have a known cause: single's read errors.
    for row in rows.iter().filter(|r| r["server"] == "single") {
        if row["bench"]["errors"]["read"].as_u64().unwrap() > row["errors"].as_u64().unwrap() / 2 {
            assert!(row["errors_note"]
                .as_str()
                .unwrap()
                .contains("one connection at a time"));
            assert!(
                stdout.contains("errors: ") && stdout.contains(" read [1]"),
                "{stdout}"
            );
            assert!(stdout.contains("\n[1] single serves one connection at a time"));
        }
    }
    // The TLS and HTTP/2 shapes compare berth with nginx (and hyper, skipped here) only: the
    // other peers are left out, saying so.
    for row in rows.iter().filter(|r| {
        let shape = r["shape"].as_str().unwrap();
        (shape.contains("tls") || shape.contains("h2")) && r["kind"] == "peer"
    }) {
        assert_eq!(row["server"], "nginx", "{row}");
    }
    if rows.iter().any(|r| r["server"] == "node") {
        assert!(
            stdout.contains("node (serves plain HTTP/1.1 only"),
            "{stdout}"
        );
    }
    // The HTTP/2 shapes were run over HTTP/2: every answer counted, none lost to a reset or
    // a GOAWAY, in every model and in nginx if it ran.
    for row in rows
        .iter()
        .filter(|r| r["shape"].as_str().unwrap().starts_with("hello-h2"))
    {
        let bench = &row["bench"];
        assert_eq!(bench["http2"], true, "{row}");
        assert_eq!(bench["streams"], 10, "{row}");
        assert_eq!(bench["errors"]["reset"], 0, "{row}");
        assert_eq!(bench["errors"]["goaway"], 0, "{row}");
        assert_eq!(bench["errors"]["protocol"], 0, "{row}");
    }
    // A peer left out of a shape is named, with the reason.
    if rows.iter().any(|r| r["server"] == "nginx") {
        let not_run = json["not_run"].as_array().unwrap();
        for shape in ["reverse", "reverse-1000", "slow"] {
            assert!(
                not_run
                    .iter()
                    .any(|n| n["server"] == "nginx" && n["shape"] == shape),
                "{not_run:?}"
            );
        }
        assert!(
            stdout.contains("not run: nginx (serves GET /hello/world only"),
            "{stdout}"
        );
    }
    let svg = std::fs::read_to_string(out.join("lab.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("evloop"));
    for part in [
        "requests/s",
        "p99 latency, ms (log scale)",
        "server CPU µs per request",
        "errors",
        "berth model",
        "peer server",
        "client-bound",
    ] {
        assert!(svg.contains(part), "the chart lacks {part:?}");
    }
    // --out holds results only: the Go peer is built elsewhere (under target/).
    let entries: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !entries.iter().any(|e| e.contains("go-peer")),
        "{entries:?}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Runs `berth ARGS` from the repository's root with a cargo that does not exist (so the hyper
/// peer takes its skip path), stdout and stderr to files; kills it at `limit`.
fn run_lab(args: &[&str], limit: Duration) -> (ExitStatus, String, String) {
    let dir = std::env::temp_dir().join(format!("berth-lab-output-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(common::BIN)
        .args(args)
        .current_dir(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
        .env("CARGO", dir.join("no-cargo-here"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "berth {} still running after {limit:?}: {}",
                args.join(" "),
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let result = (status, read(&out), read(&err));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

#[test]
fn servers_follow_a_lab_killed_with_sigkill() {
    use common::procs::{alive, children_of};
    use common::wait_for;
    let out = std::env::temp_dir().join(format!("berth-lab-kill-{}", std::process::id()));
    let mut lab = Berth::spawn(&[
        "lab",
        "--only",
        "evloop,hello",
        "--duration",
        "20s",
        "--warmup",
        "0",
        "--out",
        &out.to_string_lossy(),
    ]);
    // The measured run's server (the baseline run's comes and goes first).
    let mut servers = Vec::new();
    let started = wait_for(Duration::from_secs(20), || {
        servers = children_of(lab.pid()).iter().map(|p| p.pid).collect();
        !servers.is_empty()
    });
    assert!(started, "the lab started no server");
    std::thread::sleep(Duration::from_millis(1500));
    servers = children_of(lab.pid()).iter().map(|p| p.pid).collect();
    assert!(
        !servers.is_empty(),
        "no server running 1.5 s into a 20 s run"
    );
    lab.signal("KILL");
    lab.wait(Duration::from_secs(10));
    let gone = wait_for(Duration::from_secs(5), || {
        servers.iter().all(|&p| !alive(p))
    });
    let left: Vec<i32> = servers.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        common::signal(p, "KILL");
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        gone,
        "servers left running after the lab was killed: {left:?}"
    );
}
