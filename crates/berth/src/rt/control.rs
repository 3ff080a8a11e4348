//! Drain and stop: how a running server is asked to stop, and how its threads learn of it.
//! One [`Control`] per server, shared (in an `Arc`) by the handle that stops it — an HTTP
//! model's [`Server`](crate::drive::Server) or a [`MsgServer`](crate::msg::MsgServer) — and
//! every thread that serves.
//!
//! Two requests: *stop now* (close everything at once) and *drain* (take nothing new, let
//! what is in flight finish, until a deadline after which it is a stop now). Asking sets the
//! flags, then wakes every poll registered with [`Control::wake_on_stop`] and runs every hook
//! registered with [`Control::on_stop`] (closing a blocking listener, shutting sockets a
//! blocked thread reads): a thread never has to poll the flags on a timer to see a stop.
//!
//! What it does not own: what "finish in flight" means for a protocol (each driver and the
//! msg engine decide), or the threads themselves (their handle joins them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mio::Waker;

/// What "in flight" includes for a drain in the event-loop models (`evloop`, `uring`): a
/// connection accepted and not yet answered anything is a client whose request is on its way
/// (or already in the socket), as nginx and uvicorn count it. It gets this long from the
/// drain's start to bring its request, which is then served as the connection's last
/// (`Connection: close`); one that sends nothing in this time is closed. A client that
/// connected before the drain sends its request within a round trip.
pub(crate) const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Something to run when a stop or a drain is asked for.
type Hook = Box<dyn Fn(StopKind) + Send + Sync>;

/// Which kind of stop a hook is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopKind {
    /// Close everything now.
    Now,
    /// Take nothing new; let what is in flight finish.
    Drain,
}

/// How a running server is being asked to stop, shared by its handle and its threads.
#[derive(Default)]
pub(crate) struct Control {
    /// Bumped by [`Control::renew`]: processes that hold a copy of the configuration
    /// (prefork's workers) are to be replaced by fresh ones.
    renewals: std::sync::atomic::AtomicU64,
    stop: AtomicBool,
    drain: AtomicBool,
    deadline: Mutex<Option<Instant>>,
    /// Polls to wake when a stop is asked for.
    wakers: Mutex<Vec<Arc<Waker>>>,
    /// Run when a stop is asked for, after the flags are set and the polls woken.
    hooks: Mutex<Vec<Hook>>,
}

/// Locks, ignoring poisoning: every change under these locks is one call, so a panic while
/// one is held leaves it consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Control {
    /// Stop accepting: a stop or a drain was asked for.
    /// Asks for long-lived worker processes to be replaced (their configuration, a TLS
    /// certificate, was reloaded in this one).
    pub(crate) fn renew(&self) {
        self.renewals.fetch_add(1, Ordering::AcqRel);
    }

    /// How many renewals have been asked for.
    pub(crate) fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Acquire)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.drain.load(Ordering::Acquire)
    }

    /// A drain is under way (finish what is in flight, take nothing new).
    pub(crate) fn draining(&self) -> bool {
        self.drain.load(Ordering::Acquire)
    }

    /// Stop everything now: asked to, or the drain's deadline has passed.
    pub(crate) fn stop_now(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.deadline().is_some_and(|d| Instant::now() >= d)
    }

    /// When a drain must be over, if one was asked for.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        *lock(&self.deadline)
    }

    /// Wakes these polls whenever a stop or a drain is asked for. Register them before any
    /// thread may ask (a thread that reads the flags and then blocks relies on the wake).
    pub(crate) fn wake_on_stop(&self, wakers: impl IntoIterator<Item = Arc<Waker>>) {
        lock(&self.wakers).extend(wakers);
    }

    /// Runs `hook` whenever a stop or a drain is asked for (after the flags are set and the
    /// polls woken): closing a listener a thread blocks in, shutting connections' sockets.
    pub(crate) fn on_stop(&self, hook: impl Fn(StopKind) + Send + Sync + 'static) {
        lock(&self.hooks).push(Box::new(hook));
    }

    /// Runs `hook` on a stop or a drain before the hooks registered so far (which may close
    /// listeners): what must happen while the server still listens.
    pub(crate) fn on_stop_first(&self, hook: impl Fn(StopKind) + Send + Sync + 'static) {
        lock(&self.hooks).insert(0, Box::new(hook));
    }

    /// Asks every thread to stop now.
    pub(crate) fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        self.notify(StopKind::Now);
    }

    /// Asks every thread to drain: take nothing new, finish what is in flight, and stop
    /// everything once `timeout` has passed. At the deadline the stop is asked for like any
    /// other ([`Control::shutdown`]: polls woken, hooks run with [`StopKind::Now`]), so that a
    /// thread blocked on a connection that never finishes (a peer that stopped reading, in a
    /// blocking model) is woken too, not only threads that look at [`Control::stop_now`].
    pub(crate) fn drain(self: &Arc<Self>, timeout: Duration) {
        *lock(&self.deadline) = Some(Instant::now() + timeout);
        self.drain.store(true, Ordering::Release);
        self.notify(StopKind::Drain);
        let ctl = Arc::downgrade(self);
        let _ = std::thread::Builder::new()
            .name("berth-deadline".into())
            .spawn(move || {
                std::thread::sleep(timeout);
                // Gone: the server stopped before its deadline.
                if let Some(ctl) = ctl.upgrade() {
                    if !ctl.stop.load(Ordering::Acquire) {
                        ctl.shutdown();
                    }
                }
            });
    }

    fn notify(&self, kind: StopKind) {
        for waker in lock(&self.wakers).iter() {
            let _ = waker.wake();
        }
        for hook in lock(&self.hooks).iter() {
            hook(kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_drain_stops_accepting_and_becomes_a_stop_at_its_deadline() {
        let ctl = Arc::new(Control::default());
        assert!(!ctl.stopping() && !ctl.stop_now() && ctl.deadline().is_none());
        ctl.drain(Duration::from_millis(30));
        assert!(ctl.stopping() && ctl.draining());
        assert!(!ctl.stop_now(), "in flight may finish until the deadline");
        std::thread::sleep(Duration::from_millis(40));
        assert!(ctl.stop_now());
    }

    #[test]
    fn asking_wakes_the_polls_and_runs_the_hooks() {
        let ctl = Control::default();
        let mut poll = mio::Poll::new().unwrap();
        ctl.wake_on_stop([Arc::new(
            Waker::new(poll.registry(), mio::Token(7)).unwrap(),
        )]);
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        ctl.on_stop(move |kind| {
            assert_eq!(kind, StopKind::Now);
            s.fetch_add(1, Ordering::Relaxed);
        });
        ctl.shutdown();
        assert!(ctl.stop_now() && !ctl.draining());
        assert_eq!(seen.load(Ordering::Relaxed), 1);
        let mut events = mio::Events::with_capacity(4);
        poll.poll(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(events.iter().next().map(|e| e.token()), Some(mio::Token(7)));
    }
}
