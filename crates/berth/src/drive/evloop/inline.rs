//! One `evloop` loop run by its caller instead of a thread of its own: for an embedder whose
//! own event loop must share the thread (a Python asyncio loop serving ASGI apps). The caller
//! watches [`Inline::fd`] (the loop's epoll descriptor, readable when the loop has work:
//! socket readiness, a finished job, a stop) in its own poll, and calls [`Inline::turn`] when
//! it is readable and now and then for the deadlines (the timing wheel's resolution, 100 ms:
//! `drive::loops::TIMER_RESOLUTION`).
//!
//! Deferred jobs started by the handler may be answered on the same thread (the embedder's
//! loop answers them between turns): an answer given while the loop is between turns wakes
//! its descriptor, so the caller's poll returns and the next turn writes it. A burst of answers
//! costs one wake-up.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use berth_proto::http::Handler;
use mio::Events;

use super::{Config, EventLoop, Own, WAKER};
use crate::drive::loops::{Loop, Parts, Runs, Started, Wiring};
use crate::drive::registry::{bind_one, bind_error};
use crate::drive::{Common, Service};
use crate::net::{Addr, BindError};
use crate::rt::Control;
use crate::stats::Stats;

/// An `evloop` loop with no thread: see the module docs.
pub struct Inline<H: Handler> {
    ev: EventLoop<H>,
    events: Events,
    ctl: Arc<Control>,
    over: bool,
}

impl<H: Handler> Inline<H> {
    /// Binds `addr` and makes a loop serving `service` on it, with `common.workers` workers
    /// for its offloaded jobs (deferred jobs need none). Returns the loop and the address
    /// bound. Nothing is served until the first [`Inline::turn`].
    pub fn bind<S: Service<Handler = H>>(
        addr: impl Into<Addr>,
        service: &S,
        common: &Common,
        config: &Config,
        stats: Arc<Stats>,
    ) -> Result<(Inline<H>, Addr), BindError> {
        let addr = &addr.into();
        let (listener, bound) = bind_one(addr, common)?;
        let make = || -> io::Result<Inline<H>> {
            let config = Own::config(common, config);
            let Started {
                mut polls,
                loops,
                mut replies,
                queue,
                workers,
                ..
            } = crate::drive::loops::start::<H::Job>(1, common, WAKER, &stats)?;
            let (Some(poll), Some(replies)) = (polls.pop(), replies.pop()) else {
                return Err(io::Error::other("no loop made"));
            };
            let waker = loops[0].waker.clone();
            // The workers stop when the queue's last sender (the loop's) is dropped.
            drop(workers);
            listener.set_nonblocking(true)?;
            let ctl = Arc::new(Control::default());
            ctl.wake_on_stop([waker]);
            let wiring = Wiring {
                id: config.first_thread,
                owner: 0,
                queue,
                loops,
                replies,
                stats,
            };
            let parts = Parts {
                wiring,
                poll,
                listener: Some(listener),
                ctl: ctl.clone(),
                config,
            };
            let events = Events::with_capacity(parts.config.own.events);
            Ok(Inline {
                ev: EventLoop::make(service, parts)?,
                events,
                ctl,
                over: false,
            })
        };
        let inline = make().map_err(bind_error(addr))?;
        // An inherited socket's file is its binder's to remove (see `drive::serve`).
        if common.listen.inherited.is_none() {
            crate::drive::registry::remove_on_stop(&inline.ctl, &bound);
        }
        Ok((inline, bound))
    }

    /// The descriptor to watch: readable when a [`Inline::turn`] has work.
    pub fn fd(&self) -> RawFd {
        self.ev.poll.as_raw_fd()
    }

    /// Does whatever is ready, without waiting; then marks the loop asleep, so that an answer
    /// given before the next turn wakes [`Inline::fd`]. False once the loop is over (stopped,
    /// or drained): every connection is closed then.
    pub fn turn(&mut self) -> io::Result<bool> {
        if self.over {
            return Ok(false);
        }
        if !self.ev.turn(&mut self.events, false)? {
            self.over = true;
            self.ev.close_all();
            return Ok(false);
        }
        // Answers that came in during the turn are written now rather than after a wake-up.
        let loops = self.ev.state.loops.clone();
        while !loops[self.ev.state.owner].about_to_sleep(|| !self.ev.state.replies.is_empty()) {
            self.ev.take_replies();
        }
        Ok(true)
    }

    /// Starts a graceful stop: no new connections; idle ones close; requests in flight are
    /// answered; whatever is left after `timeout` is closed. Keep turning until
    /// [`Inline::turn`] says the loop is over.
    pub fn drain(&self, timeout: std::time::Duration) {
        self.ctl.drain(timeout);
    }

    /// Stops now: the next turn closes every connection.
    pub fn shutdown(&self) {
        self.ctl.shutdown();
    }
}
