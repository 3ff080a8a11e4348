//! The concurrency models. Each driver takes bound listeners and a [`Service`] and moves bytes
//! between sockets and sans-IO sessions its own way; the protocol and the application are the
//! same under all of them.
//!
//! | model | who reads and writes | where slow jobs run |
//! |---|---|---|
//! | [`single`] | one thread, one connection at a time | inline, on that thread |
//! | [`threaded`] | a thread per connection | inline, on the connection's thread |
//! | [`forked`] | a process per connection | inline, in the connection's process |
//! | [`prefork`] | N processes, each an event loop on its own `SO_REUSEPORT` listener | each process's workers |
//! | [`evloop`] | `-A` threads, each with its own listener and mio loop | `-w` workers, FIFO queue |
//! | [`actor`] | an actor per connection, run by `-A` scheduler threads a batch at a time | `-w` workers, FIFO queue |
//!
//! [`serve`] starts any of them from [`Settings`]; each module's `spawn` is the direct route.

mod accept;
pub mod actor;
pub mod blocking;
pub mod clock;
mod conn;
pub mod daemon;
pub mod evloop;
pub mod files;
pub mod forked;
mod model;
pub(crate) mod pool;
pub mod prefork;
pub mod signal;
pub mod single;
pub mod threaded;
mod workers;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use berth_proto::http::Handler;

pub use model::{serve, Model, Settings};

/// How long a connection may take at each stage before the server gives up on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From the first byte of a request until its head is complete (slowloris defence: it is
    /// not extended by each byte). Expiry: 408, then close.
    pub header: std::time::Duration,
    /// Longest silence while a request body arrives. Expiry: 408, then close.
    pub body: std::time::Duration,
    /// Longest silence between requests on a keep-alive connection. Expiry: close.
    pub idle: std::time::Duration,
    /// Longest time a pending response may make no progress (the peer stopped reading).
    /// Expiry: close.
    pub write: std::time::Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        use std::time::Duration;
        Timeouts {
            header: Duration::from_secs(10),
            body: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            write: Duration::from_secs(30),
        }
    }
}

/// Runs a job, turning a panic into a 500 reply: a failing job costs its own request, never the
/// worker or connection thread that ran it. (The panic message itself is printed once, by the
/// panic hook.) Every model runs its jobs through here, so every model counts them the same
/// way: running while they run, then done.
pub(crate) fn run_job<J: berth_proto::http::Job>(
    job: J,
    stats: &crate::stats::Stats,
) -> berth_proto::http::Reply {
    stats.job_started();
    let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()))
        .unwrap_or_else(|_| {
            log::debug!("a job panicked; answered 500");
            berth_proto::http::Reply::failed()
        });
    stats.job_finished();
    reply
}

/// What a driver serves: a factory of per-thread [`Handler`]s.
pub trait Service: Clone + Send + Sync + 'static {
    /// The handler type. Each I/O thread gets its own, so it may keep mutable scratch state.
    type Handler: Handler;

    /// Makes the handler for I/O thread number `thread`.
    fn handler(&self, thread: usize) -> Self::Handler;

    /// Bytes written to a connection refused at capacity, just before it is closed.
    fn refusal(&self) -> &'static [u8] {
        b""
    }

    /// Where the files of [`Handled::File`](berth_proto::http::Handled::File) answers are
    /// opened. The default has no root: every file request is answered 404.
    fn files(&self) -> files::Files {
        files::Files::none()
    }
}

/// How a running server is being asked to stop, shared by its [`Server`] handle and its
/// threads.
#[derive(Default)]
pub(crate) struct Control {
    stop: AtomicBool,
    drain: AtomicBool,
    deadline: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Control {
    /// Stop accepting: a stop or a drain was asked for.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.drain.load(Ordering::Acquire)
    }

    /// A drain is under way (finish what is in flight, take nothing new).
    pub(crate) fn draining(&self) -> bool {
        self.drain.load(Ordering::Acquire)
    }

    /// Stop everything now: asked to, or the drain's deadline has passed.
    pub(crate) fn stop_now(&self) -> bool {
        self.stop.load(Ordering::Acquire)
            || self
                .deadline()
                .is_some_and(|d| std::time::Instant::now() >= d)
    }

    /// When a drain must be over, if one was asked for.
    pub(crate) fn deadline(&self) -> Option<std::time::Instant> {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Which kind of stop a [`Server`] hook is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopKind {
    /// Close everything now.
    Now,
    /// Take nothing new; let what is in flight finish.
    Drain,
}

/// A running server: stop it with [`Server::shutdown`] (now) or [`Server::drain`] (gracefully),
/// wait for it with [`Server::join`].
pub struct Server {
    ctl: Arc<Control>,
    wakers: Vec<Arc<mio::Waker>>,
    /// Run when a stop is asked for, after the flags are set: wake blocked threads, signal
    /// children.
    hooks: Vec<Box<dyn Fn(StopKind) + Send + Sync>>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    fn new(ctl: Arc<Control>, threads: Vec<JoinHandle<()>>) -> Self {
        Server {
            ctl,
            wakers: Vec::new(),
            hooks: Vec::new(),
            threads,
        }
    }

    /// Asks every thread to stop now. Open connections are closed.
    pub fn shutdown(&self) {
        self.ctl.stop.store(true, Ordering::Release);
        self.notify(StopKind::Now);
    }

    /// Stops gracefully: listeners close at once (new connections are refused), idle
    /// keep-alive connections are closed, requests in flight — jobs included — are answered;
    /// whatever is still open after `timeout` is closed. Follow with [`Server::join`].
    pub fn drain(&self, timeout: std::time::Duration) {
        *self.ctl.deadline.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(std::time::Instant::now() + timeout);
        self.ctl.drain.store(true, Ordering::Release);
        self.notify(StopKind::Drain);
    }

    fn notify(&self, kind: StopKind) {
        for waker in &self.wakers {
            let _ = waker.wake();
        }
        for hook in &self.hooks {
            hook(kind);
        }
    }

    /// Waits until every thread has stopped.
    pub fn join(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.shutdown();
            for t in self.threads.drain(..) {
                let _ = t.join();
            }
        }
    }
}
