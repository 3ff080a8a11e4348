//! Request bodies on their way to jobs, with the channel in the driver's hands (DESIGN §11:
//! wakes go through the driver). A codec that streams a body to its job makes the channel and
//! keeps neither end: the job gets the [`BodyStream`], the driver the [`StreamWriter`]
//! ([`Fed::Open`], through the codec's [`Passed`]). From then on the codec keeps an account of
//! plain numbers (`Feed`) and only says what to carry ([`Fed::Bytes`], [`Fed::End`],
//! [`Fed::Abort`]). The driver pushes into the writers it holds ([`Taps`]) and tells the codec
//! how much each job has yet to take ([`Taps::exchange`]), which is what the codec paces its
//! client by: HTTP/1.1 stops reading, HTTP/2 and HTTP/3 hold back window.
//!
//! ```text
//!   codec ── Passed: Fed::{Open, Bytes, End, Abort} ──> Taps (driver) ── push ──> job's BodyStream
//!     ^                                                  │ (room hook: the driver's waker)
//!     └──────────── feed_level(stream, queued, gone) ────┘ Taps::settle: after each carry,
//!                                                                       and when woken
//! ```

use std::sync::Arc;

use super::stream::{body_stream, BodyStream, StreamWriter, WINDOW};

/// What a codec passes on for one request body, in order.
#[derive(Debug)]
pub enum Fed {
    /// A body begins: the writer of the stream its job reads.
    Open(StreamWriter),
    /// Its next bytes.
    Bytes(Vec<u8>),
    /// It is complete.
    End,
    /// It was cut short (malformed, too large, reset, timed out): the job sees an aborted
    /// stream.
    Abort,
}

/// A codec's pieces of request bodies for the driver to carry, by stream, in order.
#[derive(Debug, Default)]
pub struct Passed(Vec<(u64, Fed)>);

impl Passed {
    /// Whether there is nothing to carry.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A codec's account of one body on its way to its job: plain numbers, no handle on the
/// channel.
#[derive(Debug)]
pub(crate) struct Feed {
    stream: u64,
    /// Bytes passed on that the job has not taken, as far as the codec knows: the driver's
    /// last word plus what was passed on since.
    queued: usize,
    /// Queued bytes at which the job is behind and the client is held back.
    mark: usize,
    /// The job dropped its stream: nothing more reaches it.
    gone: bool,
}

impl Feed {
    /// A body for `stream`'s job, behind at `mark` queued bytes ([`WINDOW`] if `None`): the
    /// account, and the job's end of the channel (the writer goes to `passed`).
    pub(crate) fn open(
        passed: &mut Passed,
        stream: u64,
        mark: Option<usize>,
    ) -> (Feed, BodyStream) {
        let (writer, body) = body_stream();
        let mark = mark.unwrap_or(WINDOW).max(1);
        // The writer's own mark decides when its room hook (the driver's waker) runs.
        writer.full_at(mark);
        passed.0.push((stream, Fed::Open(writer)));
        let feed = Feed {
            stream,
            queued: 0,
            mark,
            gone: false,
        };
        (feed, body)
    }

    /// Passes `bytes` on; false (the bytes dropped) once the job is known to be gone.
    pub(crate) fn push(&mut self, passed: &mut Passed, bytes: Vec<u8>) -> bool {
        if self.gone {
            return false;
        }
        if !bytes.is_empty() {
            self.queued += bytes.len();
            passed.0.push((self.stream, Fed::Bytes(bytes)));
        }
        true
    }

    /// The body is complete.
    pub(crate) fn end(self, passed: &mut Passed) {
        passed.0.push((self.stream, Fed::End));
    }

    /// The body is cut short.
    pub(crate) fn abort(self, passed: &mut Passed) {
        passed.0.push((self.stream, Fed::Abort));
    }

    /// The driver's word: the job has `queued` bytes yet to take, or is `gone`.
    pub(crate) fn level(&mut self, queued: usize, gone: bool) {
        self.queued = if gone { 0 } else { queued };
        self.gone |= gone;
    }

    /// Bytes the job has yet to take.
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    /// The job is behind: hold the client back until it takes some.
    pub(crate) fn is_full(&self) -> bool {
        !self.gone && self.queued >= self.mark
    }
}

/// A codec that streams request bodies to jobs as they arrive: what the driver's [`Taps`]
/// ask of it.
pub trait Feeding {
    /// The pieces it passed on, for the driver to carry.
    fn passed(&mut self) -> &mut Passed;
    /// The driver's word on stream `stream`'s body: its job has `queued` bytes yet to take,
    /// or is `gone`. False once the codec keeps no account of it (the driver drops the
    /// writer, which cuts the body short).
    fn feed_level(&mut self, stream: u64, queued: usize, gone: bool) -> bool;
}

/// The driver's side: the writers of one connection's request bodies, by stream.
#[derive(Debug, Default)]
pub struct Taps(Vec<(u64, StreamWriter)>);

impl Taps {
    /// Carries what `codec` passed on (`carry`), then tells it where each body stands
    /// (`settle`): after every call that may pass body on, and when woken before the
    /// next.
    pub fn exchange(
        &mut self,
        codec: &mut impl Feeding,
        wake: Option<&Arc<dyn Fn() + Send + Sync>>,
    ) {
        let passed = codec.passed();
        if passed.is_empty() && self.0.is_empty() {
            return;
        }
        self.carry(passed, wake);
        self.settle(|stream, queued, gone| codec.feed_level(stream, queued, gone));
    }

    /// Carries what the codec passed on into the writers; each new one wakes the driver
    /// through `wake` when its job makes room, if the driver has a waker (a driver without
    /// one looks again when it next runs the connection).
    fn carry(&mut self, passed: &mut Passed, wake: Option<&Arc<dyn Fn() + Send + Sync>>) {
        for (stream, fed) in passed.0.drain(..) {
            let at = self.0.iter().position(|(s, _)| *s == stream);
            match (fed, at) {
                (Fed::Open(writer), _) => {
                    if let Some(wake) = wake {
                        let wake = wake.clone();
                        writer.on_room(move || wake());
                    }
                    self.0.push((stream, writer));
                }
                // A job that dropped its stream is told no more; the codec learns at the
                // next level.
                (Fed::Bytes(bytes), Some(at)) => drop(self.0[at].1.push(bytes)),
                (Fed::End, Some(at)) => self.0.swap_remove(at).1.end(),
                (Fed::Abort, Some(at)) => self.0.swap_remove(at).1.abort(),
                (_, None) => {}
            }
        }
    }

    /// Tells the codec each body's level through `level(stream, queued, gone)`: bytes its
    /// job has yet to take, and whether the job is gone. A body the codec no longer keeps an
    /// account of (`level` says false: its stream was dropped without an end) is cut short
    /// here, so that no job waits for bytes that will never come.
    fn settle(&mut self, mut level: impl FnMut(u64, usize, bool) -> bool) {
        self.0.retain(|(s, w)| level(*s, w.queued(), w.is_gone()));
    }

    /// Has every writer wake the driver through `wake` when its job makes room (a driver
    /// that got its waker after the bodies began).
    pub fn watch(&self, wake: &Arc<dyn Fn() + Send + Sync>) {
        for (_, writer) in &self.0 {
            let wake = wake.clone();
            writer.on_room(move || wake());
        }
    }

    /// Whether no body is being carried.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The connection is gone: every body not complete is cut short (the writers' drop).
    pub fn clear(&mut self) {
        self.0.clear();
    }
}
