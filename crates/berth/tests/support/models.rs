//! Test support: starts any concurrency model in-process through [`berth::drive::serve`] on
//! `127.0.0.1:0`, with counters from [`Settings::new_stats`] (shared memory for `forked` and
//! `prefork`, so the test sees the children's counts), and reads `/proc` to find the processes
//! and listening sockets a server made.
//!
//! Include it next to `support/server.rs`, whose clients it hands out:
//!
//! ```ignore
//! #[path = "support/server.rs"]
//! mod server;
//! #[path = "support/models.rs"]
//! mod models;
//! ```
//!
//! A started server is listening when [`Opts::start`] returns: for `prefork` that means every
//! child has bound its listener (seen in `/proc/net/tcp`), so no test request is spent on
//! probing and the counters start at zero.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth::app::{Demo, DemoConfig};
use berth::drive::files::Files;
use berth::drive::{serve, Model, Server, Settings, Timeouts};
use berth::proto::http::Limits;
use berth::stats::{Snapshot, Stats};

use crate::server::{wait_for, Client, WAIT_TIMEOUT};

/// How a model is started. Defaults suit most cases: 20 ms slow jobs, 4 workers (event-loop
/// models), 1 accept thread, 1024 slots, 256 threads or children, 2 prefork processes; timeouts
/// are the models' defaults.
#[derive(Debug, Clone)]
pub struct Opts {
    /// The model.
    pub model: Model,
    /// How long a `/test/slow` job takes.
    pub slow: Duration,
    /// Worker threads (`evloop`, and per process in `prefork`).
    pub workers: usize,
    /// Accept threads (`evloop`, and per process in `prefork`).
    pub accept_threads: usize,
    /// Connection slots per accept thread (`evloop`, `prefork`).
    pub capacity: usize,
    /// Thread cap of `threaded`.
    pub max_threads: usize,
    /// Process cap of `forked`.
    pub max_children: usize,
    /// Worker processes of `prefork`.
    pub processes: usize,
    /// Request limits (every model).
    pub limits: Limits,
    /// Header, body, idle and write timeouts (every model); the models' defaults if `None`.
    pub timeouts: Option<Timeouts>,
    /// Root of `/files`; none by default (every file is then 404).
    pub files: Option<PathBuf>,
}

impl Opts {
    /// The defaults for `model`.
    pub fn new(model: Model) -> Opts {
        Opts {
            model,
            slow: Duration::from_millis(20),
            workers: 4,
            accept_threads: 1,
            capacity: 1024,
            max_threads: 256,
            max_children: 256,
            processes: 2,
            limits: Limits::default(),
            timeouts: None,
            files: None,
        }
    }

    /// Serves `/files` from `root`.
    pub fn files(mut self, root: impl Into<PathBuf>) -> Opts {
        self.files = Some(root.into());
        self
    }

    /// Timeouts of every model.
    pub fn timeouts(mut self, t: Timeouts) -> Opts {
        self.timeouts = Some(t);
        self
    }

    /// Duration of a `/test/slow` job.
    pub fn slow(mut self, d: Duration) -> Opts {
        self.slow = d;
        self
    }

    /// Worker threads of the event-loop models.
    pub fn workers(mut self, n: usize) -> Opts {
        self.workers = n;
        self
    }

    /// Slots per accept thread of the event-loop models.
    pub fn capacity(mut self, n: usize) -> Opts {
        self.capacity = n;
        self
    }

    /// Thread cap of `threaded`.
    pub fn max_threads(mut self, n: usize) -> Opts {
        self.max_threads = n;
        self
    }

    /// Process cap of `forked`.
    pub fn max_children(mut self, n: usize) -> Opts {
        self.max_children = n;
        self
    }

    /// Worker processes of `prefork`.
    pub fn processes(mut self, n: usize) -> Opts {
        self.processes = n;
        self
    }

    /// Request limits.
    pub fn limits(mut self, limits: Limits) -> Opts {
        self.limits = limits;
        self
    }

    /// The [`Settings`] these options stand for, on `127.0.0.1:0`.
    pub fn settings(&self) -> Settings {
        let mut s = Settings::new(self.model, "127.0.0.1:0".parse().unwrap());
        s.accept_threads = self.accept_threads;
        s.evloop.capacity = self.capacity;
        s.evloop.workers = self.workers;
        s.evloop.limits = self.limits;
        if let Some(t) = self.timeouts {
            s.evloop.timeouts = t;
        }
        s.max_threads = self.max_threads;
        s.max_children = self.max_children;
        s.processes = self.processes;
        s
    }

    /// How many listening sockets the server has once it is fully up.
    pub fn listeners(&self) -> usize {
        match self.model {
            Model::Single | Model::Threaded | Model::Forked | Model::Actor => 1,
            Model::Evloop => self.accept_threads,
            Model::Prefork => self.processes * self.accept_threads,
        }
    }

    /// Starts the server with the demo app (`/test/slow` offloaded, as the vectors assume) and
    /// waits (bounded) until every listener it should have is listening.
    pub fn start(self) -> ModelServer {
        let settings = self.settings();
        let stats = settings.new_stats().expect("counters");
        let app = DemoConfig {
            slow_duration: self.slow,
            offload_slow: true,
        };
        let files = match &self.files {
            Some(root) => Files::new(root).expect("files root"),
            None => Files::none(),
        };
        let demo = Demo::new(app, stats.clone()).with_files(files);
        let (server, addr) = serve(&settings, demo, stats.clone())
            .unwrap_or_else(|e| panic!("{}: serve: {e}", self.model));
        let srv = ModelServer {
            model: self.model,
            addr,
            stats,
            server: Some(server),
            opts: self,
        };
        srv.wait_listening();
        srv
    }
}

/// A running server of some model; shut down and joined when dropped.
pub struct ModelServer {
    /// The model.
    pub model: Model,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its counters (shared with its children for `forked` and `prefork`).
    pub stats: Arc<Stats>,
    /// The options it was started with.
    pub opts: Opts,
    server: Option<Server>,
}

impl ModelServer {
    /// Starts `model` with the default [`Opts`].
    pub fn start(model: Model) -> ModelServer {
        Opts::new(model).start()
    }

    /// Reads the counters.
    pub fn snapshot(&self) -> Snapshot {
        self.stats.snapshot()
    }

    /// Waits (bounded) until the counters satisfy `cond`; panics with the last snapshot if not.
    pub fn wait_stats(&self, what: &str, cond: impl Fn(&Snapshot) -> bool) -> Snapshot {
        let mut last = self.snapshot();
        let ok = wait_for(WAIT_TIMEOUT, || {
            last = self.snapshot();
            cond(&last)
        });
        assert!(
            ok,
            "{}: timed out waiting for {what}; last stats: {last:?}",
            self.model
        );
        last
    }

    /// A connected client.
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// Waits (bounded) until the port has as many listening sockets as the model makes. Only
    /// `prefork` can be behind: the other models listen before `serve` returns (and reading
    /// `/proc/net/tcp` costs tens of milliseconds when many connections sit in TIME_WAIT).
    pub fn wait_listening(&self) {
        if self.model != Model::Prefork {
            return;
        }
        let want = self.opts.listeners();
        let port = self.addr.port();
        let ok = wait_for(WAIT_TIMEOUT, || listeners_on(port) >= want);
        assert!(
            ok,
            "{}: {} of {want} listener(s) on port {port} after {WAIT_TIMEOUT:?}",
            self.model,
            listeners_on(port)
        );
    }

    /// Stops the server and waits for it (children included).
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown();
            server.join();
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// The value of an unlabelled metric in Prometheus text; panics if it is missing.
pub fn metric(text: &str, name: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("metric {name}: {e} in:\n{text}"))
}

/// Sockets in state LISTEN on `port` (any address, IPv4 or IPv6), from `/proc/net/tcp{,6}`.
pub fn listeners_on(port: u16) -> usize {
    let suffix = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|text| {
            text.lines()
                .skip(1)
                .filter(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    f.len() > 3 && f[1].ends_with(&suffix) && f[3] == "0A"
                })
                .count()
        })
        .sum()
}

/// One process as `/proc/PID/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    /// Process id.
    pub pid: i32,
    /// Parent's process id.
    pub ppid: i32,
    /// State letter: `R`, `S`, `D`, `Z` (zombie), ...
    pub state: char,
}

/// Reads `/proc/PID/stat`; `None` if the process is gone.
pub fn proc_stat(pid: i32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) S ppid ...`: comm may hold spaces and parentheses, so split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(Proc { pid, ppid, state })
}

/// Every process whose parent is `parent`, zombies included.
pub fn children_of(parent: i32) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc_stat)
        .filter(|p| p.ppid == parent)
        .collect()
}

/// This process's id.
pub fn my_pid() -> i32 {
    std::process::id() as i32
}

/// Whether `pid` still exists as a process (zombies count: they are not reaped yet).
pub fn exists(pid: i32) -> bool {
    proc_stat(pid).is_some()
}
