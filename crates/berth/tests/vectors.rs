//! Runs every HTTP/1.1 vector of `testdata/http1` through the sans-IO
//! [`Session`](berth_proto::http::Session) with the demo application: no sockets, no threads
//! but the one that runs the case, a fixed Date.
//!
//! Each vector runs several ways, and must give the same responses every way:
//!
//! | way | input | jobs |
//! |---|---|---|
//! | `whole` | the vector in one `process` call | run inline at once |
//! | `bytewise` | one byte per `process` call | run inline at once |
//! | `pipelined` | vector + [`FOLLOWUP_REQUEST`] in one call | run inline at once |
//! | `bytewise-pipelined` | vector + follow-up, a byte per call | run inline at once |
//! | `split` | vector + follow-up in two calls, for every split point | run inline at once |
//! | `late-jobs` | vector + follow-up, a byte per call | held until all input is in |
//! | `high-water-1` | vector + follow-up in one call, `output_high_water = 1` | run inline at once |
//!
//! With the follow-up appended, a case that keeps the connection open must answer it
//! `200 Hello, World!` after its own responses; a case that closes must answer nothing more.
//! `incomplete` cases run without the follow-up (it would become part of the unfinished
//! request). Run one case with `BERTH_VECTOR=<name> cargo test -p berth --test vectors --
//! --nocapture`.

#[path = "support/vectors.rs"]
mod vectors;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use berth::app::{Demo, DemoConfig, DemoHandler};
use berth::drive::Service;
use berth::files::Files;
use berth::stats::Stats;
use berth_proto::http::{FileError, FileMeta, FileRequest, Limits};
use berth_proto::switch::{FileSource, NoFiles, Pump};

use vectors::{check_stream, escape, Case, Expected, FilesRoot, FIXED_DATE, FOLLOWUP_REQUEST};

/// A case (all of its ways) that takes longer than this counts as a hang.
const CASE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Whole,
    Bytewise,
    Pipelined,
    BytewisePipelined,
    Split,
    LateJobs,
    HighWater1,
}

const WAYS: [Way; 7] = [
    Way::Whole,
    Way::Bytewise,
    Way::Pipelined,
    Way::BytewisePipelined,
    Way::Split,
    Way::LateJobs,
    Way::HighWater1,
];

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Whole => "whole",
            Way::Bytewise => "bytewise",
            Way::Pipelined => "pipelined",
            Way::BytewisePipelined => "bytewise-pipelined",
            Way::Split => "split",
            Way::LateJobs => "late-jobs",
            Way::HighWater1 => "high-water-1",
        }
    }

    /// Whether this way appends [`FOLLOWUP_REQUEST`] (when the case allows it).
    fn follows_up(self) -> bool {
        !matches!(self, Way::Whole | Way::Bytewise)
    }

    /// Ways that exist only to append the follow-up are skipped for `incomplete` cases.
    fn needs_followup(self) -> bool {
        matches!(self, Way::Pipelined | Way::BytewisePipelined)
    }
}

/// One simulated connection: the demo application under berth-proto's in-memory
/// [`Pump`], which runs the step loop and checks the rules every driver relies on.
struct Conn {
    pump: Pump<DemoHandler>,
    /// The case's files (none: every file is missing).
    files: Box<dyn FileSource>,
}

/// A case's files as the pump reads them: opened by berth's own [`Files`] (its rules and
/// precompressed siblings), read with `pread`.
struct DirFiles {
    files: Files,
    open: Option<berth::files::BodyFile>,
}

impl FileSource for DirFiles {
    fn open(&mut self, req: &FileRequest) -> Result<FileMeta, FileError> {
        let found = self.files.open(req)?;
        self.open = Some(found.file);
        Ok(found.meta)
    }

    fn read(&mut self, offset: u64, len: u64, out: &mut Vec<u8>) {
        use std::os::unix::fs::FileExt;
        let file = self.open.as_ref().expect("a read after an open");
        let start = out.len();
        out.resize(start + len as usize, 0);
        file.read_exact_at(&mut out[start..], offset)
            .expect("reading a vector's file");
    }
}

impl Conn {
    fn new(case: &Case, limits: Limits, hold_jobs: bool, root: Option<&FilesRoot>) -> Conn {
        let demo = Demo::new(
            DemoConfig {
                slow_duration: Duration::from_millis(1),
                offload_slow: true,
                compress: case.compress,
                ..Default::default()
            },
            Arc::new(Stats::new(1)),
        );
        let files: Box<dyn FileSource> = match root {
            Some(root) => Box::new(DirFiles {
                files: Files::new(&root.0).expect("the case's files root"),
                open: None,
            }),
            None => Box::new(NoFiles),
        };
        Conn {
            pump: Pump::new(demo.handler(0), limits, FIXED_DATE, hold_jobs),
            files,
        }
    }

    /// Bytes arrive from the peer.
    fn feed(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.pump
            .feed(bytes, &mut *self.files)
            .map_err(|v| v.to_string())
    }

    /// All input is in: run a held job, if any.
    fn finish(&mut self) -> Result<(), String> {
        self.pump
            .finish(&mut *self.files)
            .map_err(|v| v.to_string())
    }

    /// Checks the connection's end state and everything written against `expected`.
    fn verify(&mut self, case: &Case, expected: &[Expected]) -> Result<(), String> {
        check_stream(self.pump.written(), expected, case.close, Some(FIXED_DATE))?;
        if case.close {
            if !self.pump.is_closed() {
                return Err("the connection was not closed".into());
            }
            // Anything arriving after the close must be ignored.
            self.feed(FOLLOWUP_REQUEST)?;
        } else {
            if self.pump.is_closed() || self.pump.session().is_some_and(|s| s.is_closed()) {
                return Err("the connection was closed".into());
            }
            if self.pump.is_waiting() {
                return Err("a job is still outstanding".into());
            }
            if !case.incomplete && !self.pump.unread().is_empty() {
                return Err(format!(
                    "every request was answered but input still holds {}",
                    escape(self.pump.unread())
                ));
            }
        }
        Ok(())
    }
}

/// Runs `case` one `way`; `Err` says what went wrong, with what was written.
fn run_way(case: &Case, way: Way) -> Result<(), String> {
    let (bytes, expected) = if way.follows_up() && case.allows_followup() {
        case.with_followup()
    } else {
        (case.request.clone(), case.responses.clone())
    };
    let mut limits = case.limits();
    if way == Way::HighWater1 {
        limits.output_high_water = 1;
    }
    let root = case.files_root();
    let run = |reads: &[&[u8]]| -> Result<(), String> {
        let mut conn = Conn::new(case, limits, way == Way::LateJobs, root.as_ref());
        let result = reads
            .iter()
            .try_for_each(|r| conn.feed(r))
            .and_then(|()| conn.finish())
            .and_then(|()| conn.verify(case, &expected));
        result.map_err(|e| format!("{e}\n      wrote: {}", escape(conn.pump.written())))
    };
    match way {
        Way::Whole | Way::Pipelined | Way::HighWater1 => run(&[&bytes]),
        Way::Bytewise | Way::BytewisePipelined | Way::LateJobs => {
            let reads: Vec<&[u8]> = bytes.chunks(1).collect();
            run(&reads)
        }
        Way::Split => (1..bytes.len()).try_for_each(|at| {
            let (a, b) = bytes.split_at(at);
            run(&[a, b]).map_err(|e| format!("split at {at}: {e}"))
        }),
    }
}

/// Runs every way of `case`; returns one message per failing way.
fn run_case(case: &Case) -> Vec<String> {
    let mut errors = Vec::new();
    for way in WAYS {
        if way.needs_followup() && !case.allows_followup() {
            continue;
        }
        match catch_unwind(AssertUnwindSafe(|| run_way(case, way))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(format!("[{}] {e}", way.name())),
            Err(panic) => errors.push(format!("[{}] PANIC: {}", way.name(), panic_text(&*panic))),
        }
    }
    errors
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(non-string panic)".into())
}

/// Runs `f` on its own thread and waits at most `timeout` for it, so that a hang is reported
/// rather than stalling the suite. `None` on timeout; the thread is then left running (the
/// test fails anyway).
fn with_timeout<T: Send + 'static>(
    name: &str,
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn test thread");
    rx.recv_timeout(timeout).ok()
}

/// Runs every way of `case` under [`CASE_TIMEOUT`].
fn run_case_guarded(case: &Case) -> Vec<String> {
    let owned = case.clone();
    with_timeout(&case.name, CASE_TIMEOUT, move || run_case(&owned))
        .unwrap_or_else(|| vec![format!("HANG: no result after {CASE_TIMEOUT:?}")])
}

#[test]
fn http1_vectors() {
    let cases = vectors::load_http1();
    let filter = std::env::var("BERTH_VECTOR").ok();
    let mut ran = 0;
    let mut failed = Vec::new();
    let mut known = Vec::new();
    let mut fixed = Vec::new();
    for case in &cases {
        if filter.as_deref().is_some_and(|f| !case.name.contains(f)) {
            continue;
        }
        ran += 1;
        let errors = run_case_guarded(case);
        match (&case.known_bug, errors.is_empty()) {
            (None, true) => {}
            (None, false) => failed.push((case, errors)),
            (Some(_), false) => known.push((case, errors)),
            (Some(_), true) => fixed.push(case),
        }
    }
    for (case, errors) in &known {
        let why = case.known_bug.as_deref().unwrap_or_default();
        eprintln!("known bug {}: {why}", case.id());
        eprintln!(
            "    first failure: {}",
            errors[0].lines().next().unwrap_or_default()
        );
    }
    for (case, errors) in &failed {
        eprintln!("FAILED {}: {}", case.id(), escape(&case.request));
        for e in errors {
            eprintln!("    {e}");
        }
    }
    for case in &fixed {
        eprintln!(
            "FIXED {}: passes every way; remove its `known_bug` marker",
            case.id()
        );
    }
    eprintln!(
        "{ran} vector(s): {} passed, {} failed, {} known bug(s), {} known bug(s) now passing",
        ran - failed.len() - known.len() - fixed.len(),
        failed.len(),
        known.len(),
        fixed.len()
    );
    assert!(ran > 0, "no vector matched BERTH_VECTOR={filter:?}");
    assert!(
        failed.is_empty() && fixed.is_empty(),
        "{} vector(s) failed, {} known bug(s) now pass (see stderr)",
        failed.len(),
        fixed.len()
    );
}

/// Mutations of every vector (bytes changed, dropped, doubled, inserted; input cut short),
/// each run whole and in three reads: the session must never panic, spin or leave a job
/// hanging, whatever it answers. Deterministic: the same mutations every run.
#[test]
fn mutated_vectors_never_panic_or_spin() {
    let cases = vectors::load_http1();
    let problems = with_timeout("mutations", Duration::from_secs(120), move || {
        mutation_problems(&cases)
    })
    .unwrap_or_else(|| vec!["HANG: the mutation run did not finish in 120 s".into()]);
    for p in &problems {
        eprintln!("{p}");
    }
    assert!(
        problems.is_empty(),
        "{} mutated input(s) broke the session (see stderr)",
        problems.len()
    );
}

/// Runs 200 mutations of each case; one message per run that panicked or failed.
fn mutation_problems(cases: &[Case]) -> Vec<String> {
    const PER_CASE: usize = 200;
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut problems = Vec::new();
    // A case whose limits make the session livelock is a known bug already.
    for case in cases
        .iter()
        .filter(|c| c.limits.output_high_water != Some(0))
    {
        let root = case.files_root();
        for _ in 0..PER_CASE {
            let bytes = mutate(&case.request, &mut rng);
            let a = rng.below(bytes.len());
            let b = a + rng.below(bytes.len() - a);
            let limits = case.limits();
            for reads in [
                vec![&bytes[..]],
                vec![&bytes[..a], &bytes[a..b], &bytes[b..]],
            ] {
                let run = || -> Result<(), String> {
                    let mut conn = Conn::new(case, limits, false, root.as_ref());
                    reads.iter().try_for_each(|r| conn.feed(r))?;
                    conn.finish()?;
                    if conn.pump.is_waiting() {
                        return Err("a job is still outstanding".into());
                    }
                    Ok(())
                };
                let problem = match catch_unwind(AssertUnwindSafe(run)) {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => e,
                    Err(panic) => format!("PANIC: {}", panic_text(&*panic)),
                };
                problems.push(format!(
                    "{}: {} in {} read(s): {problem}",
                    case.id(),
                    escape(&bytes),
                    reads.len()
                ));
            }
        }
    }
    problems
}

/// A small deterministic PRNG (xorshift64), so the mutation test needs no dependency.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`, or 0 when `n` is 0.
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// `request` plus the follow-up, with one to three random edits.
fn mutate(request: &[u8], rng: &mut XorShift) -> Vec<u8> {
    const INTERESTING: &[u8] = b"\r\n: ;,0aAfF \t\0\x7f\xff";
    let mut bytes = request.to_vec();
    bytes.extend_from_slice(FOLLOWUP_REQUEST);
    for _ in 0..1 + rng.below(3) {
        let i = rng.below(bytes.len());
        match rng.below(5) {
            0 => bytes[i] = rng.next() as u8,
            1 => {
                bytes.remove(i);
            }
            2 => bytes.insert(i, INTERESTING[rng.below(INTERESTING.len())]),
            3 => bytes.insert(i, bytes[i]),
            _ => bytes.truncate(i.max(1)),
        }
        if bytes.is_empty() {
            bytes.push(b'G');
        }
    }
    bytes
}
