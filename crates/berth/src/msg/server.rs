//! A handler served by several engine threads (`berth msg serve -A N`), in the shape of the
//! HTTP `evloop` model: each thread has its own poll and its own `SO_REUSEPORT` listener on
//! every TCP endpoint, so the kernel spreads connections over them; UNIX and UDP endpoints
//! are served by the first thread. The threads share one [`Directory`] of names (a name is
//! unique in the process, and reachable from every thread) and reach each other's clients
//! through [`Mailboxes`].
//!
//! A server is stopped through the drain/stop control the HTTP models use (`rt::Control`):
//! [`MsgServer::stop`] is a drain (the graceful shutdown of [`Engine::serve`], within the
//! server's grace), [`MsgServer::stop_now`] closes everything at once. Either wakes every
//! engine thread through its poll's `Waker`; an idle thread blocks in its poll and never looks
//! at a flag on a timer.
//!
//! A thread that panics (in the engine or in a handler) stops every other thread: a server
//! must never stay up serving part of its clients with a dead port. [`MsgServer::join`] then
//! returns the panic as an error, so `berth msg serve` exits 1 with the cause.
//!
//! What crosses threads: whole messages, streamed messages in pieces of one read each, and
//! closes, with backpressure counted in bytes (see `directory`): a relay across threads holds
//! what one within a thread holds, plus at most `out_high` in flight per sender.

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::cluster::{Link, Running};
use super::core::EngineConfig;
use super::directory::{Directory, Mailboxes};
use super::engine::Engine;
use super::handler::MsgHandler;
use super::stats::MsgStats;
use crate::net::tls::{TlsAcceptor, TlsError, TlsLoaded, TlsSettings};
use crate::net::{Addr, Endpoint};
use crate::rt::Control;

/// Posts each engine's mailbox holds before senders wait.
const MAILBOX: usize = 1024;

/// A running multi-threaded message server.
pub struct MsgServer {
    /// The endpoints listened on, ports resolved.
    pub endpoints: Vec<Endpoint>,
    stats: Arc<MsgStats>,
    stopper: Stopper,
    threads: Vec<JoinHandle<io::Result<()>>>,
    /// The TLS of every `tls://` listener of every thread, each once.
    tls: Vec<TlsAcceptor>,
    /// The link to the cluster, in one.
    cluster: Option<Running>,
}

/// Asks a [`MsgServer`]'s threads to shut down; cheap to clone and to send to another thread
/// (e.g. one waiting for a signal while the main thread waits in [`MsgServer::join`]). It
/// works through the server's drain/stop control, the one the HTTP models use: asking wakes
/// every engine thread at once.
#[derive(Clone)]
pub struct Stopper {
    ctl: Arc<Control>,
    grace: Duration,
}

impl Stopper {
    /// Asks every thread to shut down gracefully (returns at once): a drain of the server's
    /// grace. Listening stops, clients finish the message they are sending, then each gets
    /// its queued output and the `shutdown` frame; whoever is left when the grace is over is
    /// closed.
    pub fn stop(&self) {
        self.ctl.drain(self.grace);
    }

    /// Asks every thread to stop now (returns at once): listening stops and every client is
    /// closed as it is, without the `shutdown` frame. Also ends a graceful stop under way.
    pub fn stop_now(&self) {
        self.ctl.shutdown();
    }
}

/// The message a panic was raised with.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

impl MsgServer {
    /// Starts `threads` engines serving handlers made by `make(thread)` on `endpoints`. At
    /// shutdown ([`MsgServer::stop`]) each client gets its queued output and the `shutdown`
    /// frame, for up to `grace`.
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
        // Each engine holds its share of the budget: no lock or shared counter on the path
        // of every large message.
        let config = EngineConfig {
            max_held_total: (config.max_held_total / threads as u64).max(1),
            ..config
        };
        let stats = Arc::new(MsgStats::default());
        let directory = Arc::new(Directory::new(threads));
        let mut engines = Vec::with_capacity(threads);
        let mut bound: Vec<Endpoint> = Vec::new();
        for t in 0..threads {
            let mut engine = Engine::with_stats(config.clone(), stats.clone())?;
            for (i, e) in endpoints.iter().enumerate() {
                match (&e.address, t) {
                    (_, 0) => bound.push(engine.listen(e)?),
                    // Later threads join the port the first one bound (port 0 resolved).
                    (Addr::Tcp(_), _) => {
                        engine.join_listen(&bound[i])?;
                    }
                    _ => {}
                }
            }
            engines.push(engine);
        }
        let mut tls: Vec<TlsAcceptor> = Vec::new();
        for acceptor in engines.iter().flat_map(Engine::tls_acceptors) {
            if !tls.contains(&acceptor) {
                tls.push(acceptor);
            }
        }
        let wakers: Vec<_> = engines.iter().map(|e| e.waker()).collect();
        // In a cluster, the link to NATS: connected now, so that a NATS out of reach is a
        // startup error with its cause.
        let (link, link_box) = match &config.cluster {
            Some(cluster) => {
                let (link, mailbox) = Link::connect(cluster, directory.clone())?;
                (Some(link), Some(mailbox))
            }
            None => (None, None),
        };
        let mail = (threads > 1 || link.is_some())
            .then(|| Mailboxes::new(wakers.clone(), MAILBOX, link_box));
        let cluster = match (link, &mail) {
            (Some(link), Some((boxes, _))) => Some(link.run(boxes.clone())?),
            _ => None,
        };
        // Before any thread runs: one that panics asks every other to stop.
        let ctl = Arc::new(Control::default());
        ctl.wake_on_stop(wakers);
        let stopper = Stopper { ctl, grace };
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
            let (stopper, make) = (stopper.clone(), make.clone());
            let handle = std::thread::Builder::new()
                .name(format!("berth-msg-{t}"))
                .spawn(move || {
                    let run = AssertUnwindSafe(|| {
                        let mut handler = make(t);
                        engine.serve_until(&mut handler, &stopper.ctl)
                    });
                    std::panic::catch_unwind(run).unwrap_or_else(|panic| {
                        let what = panic_text(panic.as_ref());
                        log::error!("engine thread {t} panicked: {what}; stopping the server");
                        stopper.stop();
                        Err(io::Error::other(format!(
                            "engine thread {t} panicked: {what}"
                        )))
                    })
                })?;
            handles.push(handle);
        }
        Ok(MsgServer {
            endpoints: bound,
            stats,
            stopper,
            threads: handles,
            tls,
            cluster,
        })
    }

    /// A handle that reloads the certificates of the server's `tls://` listeners from
    /// elsewhere (a signal thread).
    pub fn tls_reloader(&self) -> TlsReloader {
        TlsReloader {
            tls: self.tls.clone(),
        }
    }

    /// The counters of all threads.
    pub fn stats(&self) -> &Arc<MsgStats> {
        &self.stats
    }

    /// Asks every thread to shut down gracefully (returns at once; see [`Stopper::stop`] and
    /// [`MsgServer::join`]).
    pub fn stop(&self) {
        self.stopper.stop();
    }

    /// Asks every thread to stop now, closing every client at once (see
    /// [`Stopper::stop_now`]).
    pub fn stop_now(&self) {
        self.stopper.stop_now();
    }

    /// A handle that stops the server from elsewhere.
    pub fn stopper(&self) -> Stopper {
        self.stopper.clone()
    }

    /// Waits for every thread, which end after [`MsgServer::stop`] or once one of them has
    /// panicked; the first error any of them met (a panic included), if one did.
    pub fn join(self) -> io::Result<()> {
        let mut result = Ok(());
        let cluster = self.cluster;
        for t in self.threads {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("an engine thread panicked")));
            if result.is_ok() {
                result = r;
            }
        }
        // The engines are done: this node's names leave the cluster.
        if let Some(link) = cluster {
            link.stop();
        }
        result
    }
}

/// Reloads the TLS files of a [`MsgServer`]'s `tls://` listeners ([`MsgServer::tls_reloader`]).
#[derive(Clone)]
pub struct TlsReloader {
    tls: Vec<TlsAcceptor>,
}

impl TlsReloader {
    /// Reads every file of every `tls://` listener again (SIGHUP in `berth msg serve`): the
    /// certificate chain, the key and the client CA, for every engine thread. All or nothing:
    /// each set of files is read once and built into a configuration, and only when every one
    /// of them loaded are they all put in use (new handshakes get them; clients already
    /// connected keep the names they were admitted under). On any error nothing changes.
    ///
    /// `Ok`: the files read, one entry (a [`TlsSettings::files`] line) per set, none when no
    /// listener speaks TLS. `Err`: why each set that failed did.
    ///
    /// [`TlsSettings::files`]: crate::net::tls::TlsSettings::files
    pub fn reload(&self) -> Result<Vec<String>, Vec<TlsError>> {
        // Engine threads each build their own acceptor for a listener naming its own files:
        // the same files are read once, so every thread gets the same bytes even if a file
        // is being replaced meanwhile.
        let mut sets: Vec<(&TlsSettings, Result<TlsLoaded, TlsError>)> = Vec::new();
        for acceptor in &self.tls {
            if !sets.iter().any(|(s, _)| *s == acceptor.settings()) {
                sets.push((acceptor.settings(), acceptor.load()));
            }
        }
        let failed: Vec<TlsError> = sets
            .iter()
            .filter_map(|(_, r)| r.as_ref().err().cloned())
            .collect();
        if !failed.is_empty() {
            return Err(failed);
        }
        for acceptor in &self.tls {
            let (_, loaded) = sets
                .iter()
                .find(|(s, _)| *s == acceptor.settings())
                .expect("every acceptor's files were loaded");
            acceptor.install(loaded.as_ref().expect("none failed"));
        }
        Ok(sets.iter().map(|(s, _)| s.files()).collect())
    }
}
