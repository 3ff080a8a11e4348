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
//! | [`uring`] | `-A` threads, each with its own listener and io_uring (multishot accept and receive) | `-w` workers, FIFO queue |
//!
//! Whatever the model, a connection is served by the one session pump (`pump`: reads, the HTTP
//! session or what it was upgraded to, writes, file bodies), over the transport its listener
//! chose ([`ListenConfig::transport`](crate::net::ListenConfig::transport)); a model decides
//! only how it waits for I/O, where jobs run and who opens files.
//!
//! [`serve`] starts any of them from [`Settings`]; each module's `spawn` is the direct route.
//! The models are listed once, in the registry below; [`registry`] says what a model is
//! ([`Driver`]) and how to add one.

mod accept;
pub mod blocking;
mod body;
mod common;
mod loops;
mod pump;
pub mod quic;
pub mod registry;
mod stall;
mod workers;

// The model registry: one line per model, `module::DriverType`, in the order tables list them.
// It declares each module and generates `Model`, `ModelConfigs` and the one match from a model to
// its driver (see `registry`).
registry::models! {
    single::Single,
    threaded::Threaded,
    forked::Forked,
    prefork::Prefork,
    evloop::Evloop,
    actor::Actor,
    uring::Uring,
}

use std::sync::Arc;
use std::thread::JoinHandle;

use berth_proto::http::Handler;

use crate::rt::Control;

pub use common::Common;
pub use registry::{serve, AcceptThreads, Caps, Driver, Flag, FlagInfo, Info, Needs, Settings};

/// How long a connection may take at each stage; the rules that apply the values are the
/// HTTP session's (`Session::poll_timeout`), so every model times connections alike.
pub use berth_proto::http::Timeouts;

/// Runs a job, turning a panic into a 500 reply: a failing job costs its own request, never the
/// worker or connection thread that ran it. (The panic message itself is printed once, by the
/// panic hook.) Every model runs its jobs through here, so every model counts them the same
/// way: running while they run, then done.
pub(crate) fn run_job<J: berth_proto::http::Job>(
    job: J,
    stats: &crate::stats::Stats,
) -> berth_proto::http::Reply {
    stats.job_started();
    // A deferred job (answered by another thread) is waited for here: only the models that run
    // jobs inline call this with one (the event loops start them, see `workers::offload`).
    let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| blocking::run_here(job)))
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
    fn files(&self) -> crate::files::Files {
        crate::files::Files::none()
    }

    /// Wraps each fork of a process that will serve (the `forked` and `prefork` models fork
    /// from a thread of their own): `fork` forks and says whether the caller is now the new
    /// process (false in the parent, and when the fork failed). A service whose state must be
    /// readied for a fork runs its handlers around the call (berth-py: CPython's before- and
    /// after-fork handlers, as `os.fork()` runs them, without which a child could wait forever
    /// for a lock the parent held at the fork). The default only calls it.
    fn around_fork(&self, fork: &mut dyn FnMut() -> bool) {
        fork();
    }
}

/// A running server: stop it with [`Server::shutdown`] (now) or [`Server::drain`] (gracefully),
/// wait for it with [`Server::join`].
pub struct Server {
    /// The stop flags its threads read, and who to wake and what to run when a stop is asked
    /// for (models register their wakers and hooks here).
    ctl: Arc<Control>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    fn new(ctl: Arc<Control>, threads: Vec<JoinHandle<()>>) -> Self {
        Server { ctl, threads }
    }

    /// Asks every thread to stop now. Open connections are closed.
    pub fn shutdown(&self) {
        self.ctl.shutdown();
    }

    /// Stops gracefully: listeners close at once (new connections are refused), idle
    /// keep-alive connections are closed, requests in flight — jobs included — are answered;
    /// whatever is still open after `timeout` is closed. Follow with [`Server::join`].
    pub fn drain(&self, timeout: std::time::Duration) {
        self.ctl.drain(timeout);
    }

    /// After the configuration it serves with was reloaded (a TLS certificate, on SIGHUP):
    /// models that keep copies of it in long-lived worker processes (`prefork`) replace those
    /// workers, a new one started before each old one drains, so no connection is refused.
    /// The others share the reloaded configuration already.
    pub fn renew_workers(&self) {
        self.ctl.renew();
    }

    /// What stops it from another thread ([`Control::shutdown`]) while this one waits in
    /// [`Server::join`].
    pub(crate) fn stopper(&self) -> Arc<Control> {
        self.ctl.clone()
    }

    /// A handle that stops the server now from any thread ([`Server::shutdown`]) while another
    /// waits in [`Server::join`]: a second signal during a drain, say.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.ctl.clone())
    }

    /// Waits until every thread has stopped.
    pub fn join(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Stops a [`Server`] now, from any thread ([`Server::stop_handle`]).
#[derive(Clone)]
pub struct StopHandle(Arc<Control>);

impl StopHandle {
    /// As [`Server::shutdown`]: every connection is closed now, reset where bytes were still
    /// waiting for the peer.
    pub fn stop(&self) {
        self.0.shutdown();
    }
}

impl std::fmt::Debug for StopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopHandle")
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
