//! The servers the lab measures: berth's models, and the peers in `peers/` whose runtime is
//! installed. Each run starts a server as the leader of a new process group on a free port,
//! waits until it answers, and stops the whole group afterwards. A server follows the lab: if
//! the lab dies without stopping it (SIGKILL), the kernel sends it SIGTERM
//! (`PR_SET_PDEATHSIG`), so no server is left holding a core and a port.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use berth::net::tls::TlsConnector;

use super::pin::Pinning;
use super::shapes::Route;
use super::tls::TlsFiles;

/// How long a server may take to answer its first request.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a server may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// How to start one server; `{port}` in an argument is replaced by the port.
#[derive(Debug, Clone)]
enum Launch {
    /// A command line; under a TLS shape, berth's `--tls-cert` and `--tls-key` follow it.
    Argv(Vec<String>),
    /// nginx needs a config file naming the port: written from the template at each start
    /// (`tls_template` under a TLS shape).
    Nginx {
        bin: PathBuf,
        template: PathBuf,
        tls_template: PathBuf,
    },
}

/// A server the lab can run.
#[derive(Debug, Clone)]
pub struct ServerDef {
    /// Name in tables, `--only` and `lab.json`.
    pub name: String,
    /// `berth` for berth's models, `peer` for the others.
    pub kind: &'static str,
    /// Routes it serves.
    pub routes: &'static [Route],
    /// Why it serves only `routes`, when that is not all of them: said where a shape it
    /// cannot run leaves it out.
    pub routes_note: Option<&'static str>,
    launch: Launch,
}

/// Every peer the lab knows, whether installed here or not (the names `--only` takes).
pub const PEERS: [&str; 10] = [
    "python-threaded",
    "python-asyncio",
    "python-uvloop",
    "granian",
    "berth-asgi",
    "node",
    "go",
    "rust-hyper",
    "rust-hyper-mt",
    "nginx",
];

/// Where the lab looks for the peers' runtimes and compilers: the directories of `PATH` (and
/// `/usr/sbin`, where Debian puts nginx), and cargo at `$CARGO` when that is set (as cargo sets
/// it for what it runs), else on the path. A test gives other places, to see peers skipped.
#[derive(Debug, Clone)]
pub struct Tools {
    dirs: Vec<PathBuf>,
    cargo: Option<PathBuf>,
    /// The Python that runs the Python peers (`berth lab --python`); else `python3` on the
    /// path.
    python: Option<PathBuf>,
}

impl Tools {
    /// The tools of this process's environment.
    pub fn from_env() -> Tools {
        let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        dirs.push("/usr/sbin".into());
        Tools {
            dirs,
            cargo: std::env::var_os("CARGO").map(PathBuf::from),
            python: None,
        }
    }

    /// These tools, with `python` running the Python peers (a venv's, where berth-py and
    /// granian are installed) instead of the `python3` on the path.
    pub fn with_python(mut self, python: Option<PathBuf>) -> Tools {
        self.python = python;
        self
    }

    /// The Python for the Python peers, or why there is none.
    fn python(&self) -> Result<String, String> {
        match &self.python {
            Some(path) if path.is_file() => Ok(path.to_string_lossy().into_owned()),
            Some(path) => Err(format!(
                "--python {}: no such file (give a Python, e.g. target/py-venv/bin/python,                  or install python3)",
                path.display()
            )),
            None => self
                .find("python3")
                .ok_or("python3 not found (apt-get install python3, or --python PATH)".to_owned()),
        }
    }

    /// Programs looked for in `dirs` only, cargo included.
    #[cfg(test)]
    pub fn in_dirs(dirs: Vec<PathBuf>) -> Tools {
        Tools {
            dirs,
            cargo: None,
            python: None,
        }
    }

    /// The path of `program`, if one of the directories has it.
    fn find(&self, program: &str) -> Option<String> {
        if program == "cargo" {
            if let Some(cargo) = &self.cargo {
                return cargo
                    .is_file()
                    .then(|| cargo.to_string_lossy().into_owned());
            }
        }
        self.dirs
            .iter()
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
            .map(|p| p.to_string_lossy().into_owned())
    }
}

/// A peer that cannot run here, and what to install.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// The peer's name.
    pub name: String,
    /// Why, and how to fix it.
    pub why: String,
}

const ALL_ROUTES: &[Route] = &[Route::Hello, Route::Reverse, Route::Slow];

/// berth's routes: all the demo's, and hello world over TLS.
const BERTH_ROUTES: &[Route] = &[Route::Hello, Route::Reverse, Route::Slow, Route::HelloTls];

/// berth's models, each with the settings seed 001 ran its stress with (300 workers for slow
/// jobs); the rest are defaults.
pub fn berth_models(berth: &Path, models: &[String]) -> Vec<ServerDef> {
    models
        .iter()
        .map(|m| ServerDef {
            name: m.clone(),
            kind: "berth",
            routes: BERTH_ROUTES,
            routes_note: None,
            launch: Launch::Argv(
                [
                    berth.to_string_lossy().as_ref(),
                    "serve",
                    "--model",
                    m,
                    "-p",
                    "{port}",
                    "-w",
                    "300",
                ]
                .map(String::from)
                .to_vec(),
            ),
        })
        .collect()
}

/// The peers in `peers_dir` that `wanted` names and whose runtime is installed (found through
/// `tools`), and the ones skipped with the reason. Peers not wanted are neither looked for nor
/// built. The compiled peers are built into `build_dir` (a build directory, not the lab's
/// results): Go's unless the binary there is newer than its source, hyper's by cargo, which
/// knows what is up to date (a minute the first time, `progress` says so).
pub fn peers(
    peers_dir: &Path,
    build_dir: &Path,
    tools: &Tools,
    wanted: &dyn Fn(&str) -> bool,
    progress: &mut dyn FnMut(&str),
) -> (Vec<ServerDef>, Vec<Skipped>) {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    let mut add = |name: &str,
                   routes: &'static [Route],
                   launch: &mut dyn FnMut() -> Result<Launch, String>| {
        if !wanted(name) {
            return;
        }
        match launch() {
            Ok(launch) => found.push(ServerDef {
                name: name.to_owned(),
                kind: "peer",
                routes,
                routes_note: Some(if name == "nginx" {
                    "serves GET /hello/world only (over TLS too): its config is a bare `return \
                     200`, with no application for /reverse or /test/slow"
                } else {
                    "serves plain HTTP only: the lab's TLS shapes compare berth with nginx"
                }),
                launch,
            }),
            Err(why) => skipped.push(Skipped {
                name: name.to_owned(),
                why,
            }),
        }
    };
    let script = |file: &str| peers_dir.join(file).to_string_lossy().into_owned();
    let python = tools.python();
    for (name, file) in [
        ("python-threaded", "python_threaded.py"),
        ("python-asyncio", "python_asyncio.py"),
    ] {
        add(name, ALL_ROUTES, &mut || {
            python
                .clone()
                .map(|py| Launch::Argv(vec![py, script(file), "{port}".into()]))
        });
    }
    add("python-uvloop", ALL_ROUTES, &mut || {
        python.clone().and_then(|py| {
            if succeeds(Command::new(&py).args(["-c", "import uvloop, httptools"])) {
                Ok(Launch::Argv(vec![
                    py,
                    script("python_uvloop.py"),
                    "{port}".into(),
                ]))
            } else {
                Err("needs uvloop and httptools (pip install uvloop httptools)".into())
            }
        })
    });
    // granian runs the same routes as an ASGI app, with the Python that runs the other peers.
    add("granian", ALL_ROUTES, &mut || {
        python.clone().and_then(|py| {
            if succeeds(Command::new(&py).args(["-c", "import granian"])) {
                Ok(Launch::Argv(
                    [
                        py.as_str(),
                        "-m",
                        "granian",
                        "--interface",
                        "asgi",
                        "--workers",
                        "1",
                        "--http",
                        "1",
                        "--no-ws",
                        "--log-level",
                        "warning",
                        "--working-dir",
                        &peers_dir.to_string_lossy(),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        "{port}",
                        "asgi_app:app",
                    ]
                    .map(String::from)
                    .to_vec(),
                ))
            } else {
                Err("needs granian (pip install granian)".into())
            }
        })
    });
    // berth's own ASGI front (`python -m berth`, crates/berth-py) on the same ASGI app as
    // granian: the Python peers' cost, with berth's engine under the application.
    add("berth-asgi", ALL_ROUTES, &mut || {
        python.clone().and_then(|py| {
            if succeeds(Command::new(&py).args(["-c", "import berth.asgi"])) {
                Ok(Launch::Argv(
                    [
                        py.as_str(),
                        "-m",
                        "berth",
                        "asgi_app:app",
                        "--interface",
                        "asgi",
                        "--app-dir",
                        &peers_dir.to_string_lossy(),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        "{port}",
                    ]
                    .map(String::from)
                    .to_vec(),
                ))
            } else {
                Err("needs berth's Python package (pip install ./crates/berth-py)".into())
            }
        })
    });
    add("node", ALL_ROUTES, &mut || {
        tools
            .find("node")
            .map(|node| Launch::Argv(vec![node, script("node_http.js"), "{port}".into()]))
            .ok_or_else(|| "node not found (apt-get install nodejs)".to_owned())
    });
    add("go", ALL_ROUTES, &mut || {
        build_go(peers_dir, build_dir, tools)
    });
    // One build serves both runtimes; built only if one of them is wanted.
    let mut hyper: Option<Result<String, String>> = None;
    for (name, flag) in [
        ("rust-hyper", None),
        ("rust-hyper-mt", Some("--multi-thread")),
    ] {
        add(name, ALL_ROUTES, &mut || {
            let bin = hyper
                .get_or_insert_with(|| build_hyper(peers_dir, build_dir, tools, progress))
                .clone()?;
            Ok(Launch::Argv(
                [Some(bin.as_str()), Some("{port}"), flag]
                    .into_iter()
                    .flatten()
                    .map(String::from)
                    .collect(),
            ))
        });
    }
    add("nginx", &[Route::Hello, Route::HelloTls], &mut || {
        tools
            .find("nginx")
            .map(|bin| Launch::Nginx {
                bin: bin.into(),
                template: peers_dir.join("nginx.conf.in"),
                tls_template: peers_dir.join("nginx-tls.conf.in"),
            })
            .ok_or_else(|| "nginx not found (apt-get install nginx-light)".to_owned())
    });
    (found, skipped)
}

/// Where the lab builds peers (the Go binary): beside the berth binary when it runs from a
/// cargo target directory (`target/release/lab-peers`), else in the user's cache directory;
/// never in `--out`, which holds results only.
pub fn build_dir(berth: &Path) -> PathBuf {
    let bin_dir = berth.parent().unwrap_or(Path::new("."));
    if bin_dir
        .ancestors()
        .any(|a| a.file_name() == Some("target".as_ref()))
    {
        return bin_dir.join("lab-peers");
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("berth").join("lab-peers")
}

fn build_go(peers_dir: &Path, build_dir: &Path, tools: &Tools) -> Result<Launch, String> {
    let go = tools
        .find("go")
        .ok_or("go not found (apt-get install golang-go)")?;
    let source = peers_dir.join("go_nethttp.go");
    let out = build_dir.join("go-peer");
    let launch = Launch::Argv(vec![out.to_string_lossy().into_owned(), "{port}".into()]);
    let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    if let (Some(built), Some(written)) = (modified(&out), modified(&source)) {
        if built >= written {
            return Ok(launch);
        }
    }
    fs::create_dir_all(build_dir)
        .map_err(|e| format!("cannot create {}: {e}", build_dir.display()))?;
    let status = Command::new(go)
        .arg("build")
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .env("GO111MODULE", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run go build: {e}"))?;
    if !status.status.success() {
        let err = String::from_utf8_lossy(&status.stderr);
        return Err(format!("go build failed: {}", err.trim()));
    }
    Ok(launch)
}

/// Builds `peers/rust-hyper` (its own Cargo project, outside berth's workspace) into
/// `build_dir/rust-hyper` and returns the binary's path. cargo fetches hyper and tokio from
/// crates.io the first time.
fn build_hyper(
    peers_dir: &Path,
    build_dir: &Path,
    tools: &Tools,
    progress: &mut dyn FnMut(&str),
) -> Result<String, String> {
    let cargo = tools.find("cargo").ok_or(
        "cargo not found, so the hyper peer cannot be built (install Rust: rustup, or \
         apt-get install cargo)",
    )?;
    let manifest = peers_dir.join("rust-hyper").join("Cargo.toml");
    let target = build_dir.join("rust-hyper");
    let bin = target.join("release").join("rust-hyper-peer");
    if !bin.exists() {
        progress("building the hyper peer (cargo build --release, about a minute the first time)");
    }
    let out = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty());
        return Err(format!(
            "cargo build --manifest-path {} failed: {}",
            manifest.display(),
            last.unwrap_or("(no output)").trim()
        ));
    }
    Ok(bin.to_string_lossy().into_owned())
}

fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A started server.
#[derive(Debug)]
pub struct Running {
    child: Child,
    /// The server's process group (its leader's pid).
    pub pgid: i32,
    /// Where it listens.
    pub addr: SocketAddr,
    log: PathBuf,
    /// The certificate it serves HTTPS with, if it does.
    tls: Option<TlsFiles>,
}

impl ServerDef {
    /// Starts the server on a free port, its output going to `work_dir/<name>.log`, and waits
    /// until it answers `GET /hello/world`; with `tls`, over HTTPS with that certificate.
    pub fn start(
        &self,
        pin: &Pinning,
        work_dir: &Path,
        tls: Option<&TlsFiles>,
    ) -> Result<Running, String> {
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let log = work_dir.join(format!("{}.log", self.name));
        let log_file = fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err_file = log_file.try_clone().map_err(|e| e.to_string())?;
        let argv: Vec<String> = match &self.launch {
            Launch::Argv(argv) => {
                let mut argv: Vec<String> = argv
                    .iter()
                    .map(|a| a.replace("{port}", &port.to_string()))
                    .collect();
                if let Some(tls) = tls {
                    argv.extend([
                        "--tls-cert".to_owned(),
                        tls.cert.to_string_lossy().into_owned(),
                        "--tls-key".to_owned(),
                        tls.key.to_string_lossy().into_owned(),
                    ]);
                }
                argv
            }
            Launch::Nginx {
                bin,
                template,
                tls_template,
            } => {
                let dir = work_dir.join("nginx");
                fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let template = if tls.is_some() {
                    tls_template
                } else {
                    template
                };
                let path_of = |p: Option<&PathBuf>| {
                    p.map_or(String::new(), |p| p.to_string_lossy().into_owned())
                };
                let conf = fs::read_to_string(template)
                    .map_err(|e| format!("{}: {e}", template.display()))?
                    .replace("@PORT@", &port.to_string())
                    .replace("@DIR@", &dir.to_string_lossy())
                    .replace("@CERT@", &path_of(tls.map(|t| &t.cert)))
                    .replace("@KEY@", &path_of(tls.map(|t| &t.key)))
                    // No file shape in the lab: an empty directory of its own.
                    .replace("@FILES@", &dir.join("files").to_string_lossy());
                let path = dir.join("nginx.conf");
                fs::write(&path, conf).map_err(|e| e.to_string())?;
                vec![
                    bin.to_string_lossy().into_owned(),
                    "-c".into(),
                    path.to_string_lossy().into_owned(),
                    "-p".into(),
                    dir.to_string_lossy().into_owned(),
                ]
            }
        };
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(err_file)
            // Python's output is line-buffered only on a terminal; the log wants it now.
            .env("PYTHONUNBUFFERED", "1")
            .process_group(0);
        follow_lab(&mut cmd);
        let child = pin
            .spawn_server(&mut cmd)
            .map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
        let pgid = child.id() as i32;
        let mut running = Running {
            child,
            pgid,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
            tls: tls.cloned(),
        };
        if let Err(e) = running.wait_ready() {
            running.stop();
            return Err(e);
        }
        Ok(running)
    }
}

impl Running {
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited at start ({status}): {}", self.log_tail()));
            }
            if answers(self.addr, self.tls.as_ref()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "did not answer within {READY_TIMEOUT:?}: {}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's last log line, for error messages.
    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(no output)");
        format!("{last} (log: {})", self.log.display())
    }

    /// Stops the whole process group: SIGTERM, then SIGKILL if it lingers.
    pub fn stop(mut self) {
        let group = Pid::from_raw(self.pgid);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Children the leader left behind go too.
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Makes the process `cmd` starts follow the lab: the kernel sends it SIGTERM when the thread
/// that started it (the lab's main thread, which outlives every run) is gone, the lab killed
/// included. If the lab died between the fork and that request, the server is not started.
fn follow_lab(cmd: &mut Command) {
    let lab = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: prctl and getppid are plain system calls, and the error it may return
    // is built from a raw errno without allocating.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
            if nix::unistd::getppid() != lab {
                return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Whether something at `addr` answers a GET with an HTTP response (over TLS, verified
/// against the lab's CA, with `tls`).
fn answers(addr: SocketAddr, tls: Option<&TlsFiles>) -> bool {
    let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    match tls {
        None => get_hello(s, addr),
        Some(files) => {
            let Ok(connector) = TlsConnector::new(Some(&files.ca), &[b"http/1.1"]) else {
                return false;
            };
            match connector.connect("127.0.0.1", s) {
                Ok(stream) => get_hello(stream, addr),
                Err(_) => false,
            }
        }
    }
}

fn get_hello(mut s: impl Read + Write, addr: SocketAddr) -> bool {
    let req = format!("GET /hello/world HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() || s.flush().is_err() {
        return false;
    }
    let mut head = [0u8; 8];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn peers_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../peers")
    }

    fn skipped_with(tools: &Tools, build: &Path) -> Vec<Skipped> {
        let mut lines = Vec::new();
        let (found, skipped) = peers(&peers_dir(), build, tools, &|_| true, &mut |l| {
            lines.push(l.to_owned())
        });
        let names: Vec<&str> = found
            .iter()
            .map(|s| s.name.as_str())
            .chain(skipped.iter().map(|s| s.name.as_str()))
            .collect();
        assert_eq!(names.len(), PEERS.len(), "{names:?}");
        skipped
    }

    fn why<'a>(skipped: &'a [Skipped], name: &str) -> &'a str {
        &skipped
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name} not skipped: {skipped:?}"))
            .why
    }

    /// With no toolchain at all, every peer is skipped (none fails), each saying what to
    /// install; the compiled peers are not built.
    #[test]
    fn peers_without_their_toolchains_are_skipped_with_what_to_install() {
        let build = std::env::temp_dir().join(format!("berth-lab-skip-{}", std::process::id()));
        let skipped = skipped_with(&Tools::in_dirs(Vec::new()), &build);
        assert_eq!(skipped.len(), PEERS.len(), "{skipped:?}");
        for s in &skipped {
            assert!(s.why.contains("install"), "{s:?}");
        }
        assert!(why(&skipped, "rust-hyper").starts_with("cargo not found"));
        assert!(why(&skipped, "rust-hyper-mt").starts_with("cargo not found"));
        assert!(why(&skipped, "granian").contains("python3 not found"));
        assert!(!build.exists(), "nothing is built without a compiler");
    }

    /// A Python without granian or uvloop runs the plain Python peers and skips those two;
    /// a cargo that cannot build skips both hyper peers with its error.
    #[test]
    fn a_missing_python_package_or_a_failed_build_skips_that_peer() {
        let dir = std::env::temp_dir().join(format!("berth-lab-fake-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for (name, script) in [
            ("python3", "#!/bin/sh\nexit 1\n"),
            (
                "cargo",
                "#!/bin/sh\necho 'error: no network' >&2\nexit 101\n",
            ),
        ] {
            let path = dir.join(name);
            fs::write(&path, script).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let skipped = skipped_with(&Tools::in_dirs(vec![dir.clone()]), &dir.join("build"));
        assert_eq!(
            why(&skipped, "granian"),
            "needs granian (pip install granian)"
        );
        assert!(why(&skipped, "berth-asgi").contains("pip install ./crates/berth-py"));
        assert!(why(&skipped, "python-uvloop").contains("pip install uvloop"));
        assert!(!skipped.iter().any(|s| s.name == "python-asyncio"));
        for name in ["rust-hyper", "rust-hyper-mt"] {
            let w = why(&skipped, name);
            assert!(w.contains("failed: error: no network"), "{w}");
        }
        let _ = fs::remove_dir_all(&dir);
    }

    /// `--python PATH` runs the Python peers with that Python (a venv's, where the packages
    /// are), not the `python3` on the path; a path that is not there says so.
    #[test]
    fn the_python_peers_run_with_the_python_given() {
        let dir = std::env::temp_dir().join(format!("berth-lab-python-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // On the path: a python3 without any package. Given: one with every package.
        let (bare, venv) = (dir.join("python3"), dir.join("venv-python"));
        for (path, script) in [
            (&bare, "#!/bin/sh\nexit 1\n"),
            (&venv, "#!/bin/sh\nexit 0\n"),
        ] {
            fs::write(path, script).unwrap();
            fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let build = dir.join("build");
        let tools = Tools::in_dirs(vec![dir.clone()]).with_python(Some(venv.clone()));
        let (found, skipped) = peers(&peers_dir(), &build, &tools, &|_| true, &mut |_| {});
        for name in ["granian", "berth-asgi", "python-uvloop", "python-asyncio"] {
            let def = found
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("{name} skipped: {skipped:?}"));
            let Launch::Argv(argv) = &def.launch else {
                panic!("{name}: {:?}", def.launch)
            };
            assert_eq!(argv[0], venv.to_string_lossy(), "{name}");
        }
        let missing = Tools::in_dirs(vec![dir.clone()]).with_python(Some(dir.join("nope")));
        let skipped = skipped_with(&missing, &build);
        assert!(why(&skipped, "granian").contains("--python"), "{skipped:?}");
        let _ = fs::remove_dir_all(&dir);
    }
}
