//! A handler served by several engine threads (`berth msg serve -A N`), in the shape of the
//! HTTP `evloop` model: each thread has its own poll and its own `SO_REUSEPORT` listener on
//! every TCP endpoint, so the kernel spreads connections over them; UNIX and UDP endpoints
//! are served by the first thread. The threads share one [`Directory`] of names (a name is
//! unique in the process, and reachable from every thread) and reach each other's clients
//! through [`Mailboxes`].
//!
//! What crosses threads: whole messages and closes. A message streamed to a client of another
//! thread is not passed through in pieces (its handler is told `open_stream` failed, and the
//! demo then holds the message whole up to its limit).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::Waker;

use super::core::EngineConfig;
use super::directory::{Directory, Mailboxes};
use super::endpoint::{Address, Endpoint};
use super::engine::Engine;
use super::handler::MsgHandler;
use super::stats::MsgStats;

/// Posts each engine's mailbox holds before senders wait.
const MAILBOX: usize = 1024;
/// How often a serving thread looks at the stop flag when nothing happens.
const TICK: Duration = Duration::from_millis(500);

/// A running multi-threaded message server.
pub struct MsgServer {
    /// The endpoints listened on, ports resolved.
    pub endpoints: Vec<Endpoint>,
    stats: Arc<MsgStats>,
    stop: Arc<AtomicBool>,
    wakers: Vec<Arc<Waker>>,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

impl MsgServer {
    /// Starts `threads` engines serving handlers made by `make(thread)` on `endpoints`. At
    /// shutdown each client gets its queued output and the `shutdown` frame, for up to
    /// `grace`.
    pub fn spawn<H, F>(
        endpoints: &[Endpoint],
        config: EngineConfig,
        threads: usize,
        grace: Duration,
        make: F,
    ) -> io::Result<MsgServer>
    where
        H: MsgHandler + 'static,
        F: Fn(usize) -> H + Send + Sync + 'static,
    {
        let threads = threads.clamp(1, 128);
        let stats = Arc::new(MsgStats::default());
        let directory = Arc::new(Directory::default());
        let mut engines = Vec::with_capacity(threads);
        let mut bound: Vec<Endpoint> = Vec::new();
        for t in 0..threads {
            let mut engine = Engine::with_stats(config.clone(), stats.clone())?;
            for (i, e) in endpoints.iter().enumerate() {
                match (&e.address, t) {
                    (_, 0) => bound.push(engine.listen(e)?),
                    // Later threads join the port the first one bound (port 0 resolved).
                    (Address::Tcp(_), _) => {
                        engine.join_listen(&bound[i])?;
                    }
                    _ => {}
                }
            }
            engines.push(engine);
        }
        let wakers: Vec<_> = engines.iter().map(|e| e.waker()).collect();
        let mail = (threads > 1).then(|| Mailboxes::new(wakers.clone(), MAILBOX));
        let stop = Arc::new(AtomicBool::new(false));
        let make = Arc::new(make);
        let mut handles = Vec::with_capacity(threads);
        let mut receivers = mail.as_ref().map(|(_, rx)| rx.clone().into_iter());
        for (t, mut engine) in engines.into_iter().enumerate() {
            let mailbox = match (&mail, &mut receivers) {
                (Some((boxes, _)), Some(rx)) => {
                    Some((boxes.clone(), rx.next().expect("one per thread")))
                }
                _ => None,
            };
            engine.core.join(t, directory.clone(), mailbox);
            let (stop, make) = (stop.clone(), make.clone());
            let handle = std::thread::Builder::new()
                .name(format!("berth-msg-{t}"))
                .spawn(move || {
                    let mut handler = make(t);
                    engine.serve(&mut handler, &stop, TICK, grace)
                })?;
            handles.push(handle);
        }
        Ok(MsgServer {
            endpoints: bound,
            stats,
            stop,
            wakers,
            threads: handles,
        })
    }

    /// The counters of all threads.
    pub fn stats(&self) -> &Arc<MsgStats> {
        &self.stats
    }

    /// Asks every thread to shut down (returns at once; see [`MsgServer::join`]).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in &self.wakers {
            let _ = w.wake();
        }
    }

    /// Waits for every thread; the first error any of them met, if one did.
    pub fn join(self) -> io::Result<()> {
        let mut result = Ok(());
        for t in self.threads {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("an engine thread panicked")));
            if result.is_ok() {
                result = r;
            }
        }
        result
    }
}
