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
//!
//! [`serve`] starts any of them from [`Settings`]; each module's `spawn` is the direct route.

pub mod blocking;
pub mod clock;
pub mod evloop;
pub mod forked;
mod model;
pub mod prefork;
mod process;
pub(crate) mod shared;
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
/// panic hook.)
pub(crate) fn run_job<J: berth_proto::http::Job>(job: J) -> berth_proto::http::Reply {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run())).unwrap_or_else(|_| {
        log::debug!("a job panicked; answered 500");
        berth_proto::http::Reply::failed()
    })
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
}

/// A running server: stop it with [`Server::shutdown`], wait for it with [`Server::join`].
pub struct Server {
    stop: Arc<AtomicBool>,
    wakers: Vec<Arc<mio::Waker>>,
    /// Run by `shutdown` after the stop flag is set: wake blocked threads, signal children.
    hooks: Vec<Box<dyn Fn() + Send + Sync>>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    /// Asks every thread to stop. Open connections are closed.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        for waker in &self.wakers {
            let _ = waker.wake();
        }
        for hook in &self.hooks {
            hook();
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
