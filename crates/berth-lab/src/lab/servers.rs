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

use super::pin::Pinning;
use super::shapes::Route;

/// How long a server may take to answer its first request.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a server may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// How to start one server; `{port}` in an argument is replaced by the port.
#[derive(Debug, Clone)]
enum Launch {
    Argv(Vec<String>),
    /// nginx needs a config file naming the port: written from the template at each start.
    Nginx {
        bin: PathBuf,
        template: PathBuf,
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
pub const PEERS: [&str; 6] = [
    "python-threaded",
    "python-asyncio",
    "python-uvloop",
    "node",
    "go",
    "nginx",
];

/// A peer that cannot run here, and what to install.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// The peer's name.
    pub name: String,
    /// Why, and how to fix it.
    pub why: String,
}

const ALL_ROUTES: &[Route] = &[Route::Hello, Route::Reverse, Route::Slow];

/// berth's models, each with the settings seed 001 ran its stress with (300 workers for slow
/// jobs); the rest are defaults.
pub fn berth_models(berth: &Path, models: &[String]) -> Vec<ServerDef> {
    models
        .iter()
        .map(|m| ServerDef {
            name: m.clone(),
            kind: "berth",
            routes: ALL_ROUTES,
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

/// The peers in `peers_dir` that `wanted` names and whose runtime is installed, and the ones
/// skipped with the reason. Peers not wanted are neither looked for nor built. The Go peer is
/// compiled into `build_dir` (a build directory, not the lab's results) unless the binary there
/// is newer than its source.
pub fn peers(
    peers_dir: &Path,
    build_dir: &Path,
    wanted: &dyn Fn(&str) -> bool,
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
                routes_note: (name == "nginx").then_some(
                    "serves GET /hello/world only: its config is a bare `return 200`, with no \
                     application for /reverse or /test/slow",
                ),
                launch,
            }),
            Err(why) => skipped.push(Skipped {
                name: name.to_owned(),
                why,
            }),
        }
    };
    let script = |file: &str| peers_dir.join(file).to_string_lossy().into_owned();
    let python = which("python3").ok_or("python3 not found (apt-get install python3)".to_owned());
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
    add("node", ALL_ROUTES, &mut || {
        which("node")
            .map(|node| Launch::Argv(vec![node, script("node_http.js"), "{port}".into()]))
            .ok_or_else(|| "node not found (apt-get install nodejs)".to_owned())
    });
    add("go", ALL_ROUTES, &mut || build_go(peers_dir, build_dir));
    add("nginx", &[Route::Hello], &mut || {
        which("nginx")
            .or_else(|| {
                Path::new("/usr/sbin/nginx")
                    .exists()
                    .then(|| "/usr/sbin/nginx".into())
            })
            .map(|bin| Launch::Nginx {
                bin: bin.into(),
                template: peers_dir.join("nginx.conf.in"),
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

fn build_go(peers_dir: &Path, build_dir: &Path) -> Result<Launch, String> {
    let go = which("go").ok_or("go not found (apt-get install golang-go)")?;
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

fn which(program: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .map(|p| p.to_string_lossy().into_owned())
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
}

impl ServerDef {
    /// Starts the server on a free port, its output going to `work_dir/<name>.log`, and waits
    /// until it answers `GET /hello/world`.
    pub fn start(&self, pin: &Pinning, work_dir: &Path) -> Result<Running, String> {
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let log = work_dir.join(format!("{}.log", self.name));
        let log_file = fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err_file = log_file.try_clone().map_err(|e| e.to_string())?;
        let argv: Vec<String> = match &self.launch {
            Launch::Argv(argv) => argv
                .iter()
                .map(|a| a.replace("{port}", &port.to_string()))
                .collect(),
            Launch::Nginx { bin, template } => {
                let dir = work_dir.join("nginx");
                fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let conf = fs::read_to_string(template)
                    .map_err(|e| format!("{}: {e}", template.display()))?
                    .replace("@PORT@", &port.to_string())
                    .replace("@DIR@", &dir.to_string_lossy());
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
            if answers(self.addr) {
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

/// Whether something at `addr` answers a GET with an HTTP response.
fn answers(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let req = format!("GET /hello/world HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
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
