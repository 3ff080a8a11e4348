//! The application's side of HTTP: what a [`Handler`] is given ([`Context`]), what it answers
//! ([`Handled`]), and the work it hands off ([`Job`]). The session ([`super::session`]) calls
//! these; the models run the jobs.

use super::files::FileRequest;
use super::request::Request;
use super::response::{Reply, Response, Stamp};
use super::stream::{Answer, BodyStream};
use crate::settings::Limits;
use crate::upgrade::Switch;

/// What the driver passes to every call: the limits in force and the current `Date` value.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// Limits applied to each request.
    pub limits: &'a Limits,
    /// The current time as an IMF-fixdate ([`DATE_LEN`](super::DATE_LEN) bytes), refreshed by the
    /// driver about once a second.
    pub date: &'a [u8],
    /// The driver can pass a request body to its job while the body arrives (it reads the
    /// connection while a job is out, and the job runs elsewhere): a handler that
    /// [`streams bodies`](Handler::STREAMS_BODY) gets them streamed. A driver that waits for
    /// its jobs inline (the blocking models, the in-memory pump) says false, and such a handler
    /// gets the body whole.
    pub stream_bodies: bool,
    /// The driver's time: when it last woke, near enough for HTTP/2's rates and header
    /// timeouts (the protocol reads no clock).
    pub now: std::time::Instant,
    /// An `Alt-Svc` value every answer on this connection carries (RFC 7838), e.g.
    /// `h3=":443"; ma=86400`: a TLS listener with an HTTP/3 twin tells browsers to move over.
    /// `None`: no such field.
    pub alt_svc: Option<&'a [u8]>,
}

impl<'a> Context<'a> {
    /// The fields berth writes itself into a response head, as the limits say.
    pub(crate) fn stamp(&self) -> Stamp<'a> {
        Stamp {
            server: self.limits.server_header,
            date: self.limits.date_header.then_some(self.date),
            alt_svc: self.alt_svc,
        }
    }
}

/// How a [`Handler`] dealt with a request.
#[derive(Debug)]
pub enum Handled<J> {
    /// The response has been written with [`Response::send`].
    Done,
    /// The answer needs a job run off the I/O path; the session waits for
    /// [`Session::complete`](super::Session::complete) before it answers anything else on this connection.
    Offload(J),
    /// Answer with a file: the driver opens it under its root and the session writes the
    /// answer (see the `files` module). Nothing else on this connection is answered
    /// first.
    File(FileRequest),
    /// Switch the connection to another protocol (see [`crate::upgrade`]): answered 101 if the
    /// request asked for it, 400 otherwise.
    Upgrade(Switch),
}

/// The application side of HTTP: turns a request into a response or a job.
pub trait Handler {
    /// Work that must not run on the I/O thread (it blocks or takes long).
    type Job: Job;

    /// Answers one request. Returning [`Handled::Done`] without sending counts as a bug in the
    /// handler and is answered 500.
    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<Self::Job>;

    /// True for a handler that takes request bodies as they arrive: where the driver can
    /// ([`Context::stream_bodies`]), a request with a body is answered by
    /// [`Handler::handle_streamed`] as soon as its head is in, and its body goes to the job
    /// through a [`BodyStream`] while it arrives, held back by the stream's window (the
    /// connection is not read further while the job does not take it). Bodies are still
    /// limited by [`Limits::max_body_bytes`].
    const STREAMS_BODY: bool = false;

    /// Answers a request whose body is still arriving: `body` yields it (see
    /// [`BodyStream::pop`]) and ends when it is complete, or is aborted if the connection
    /// fails or the body is malformed or too slow. Answered before the body is all in, the
    /// connection closes after the answer. The default answers as if the body were empty.
    fn handle_streamed(
        &mut self,
        req: &Request<'_>,
        body: BodyStream,
        res: &mut Response<'_>,
    ) -> Handled<Self::Job> {
        drop(body);
        self.handle(req, res)
    }

    /// Called for every response the session writes, including the ones it writes itself
    /// (400, 413, 431, ...). The default does nothing; the demo app counts statuses here.
    fn on_response(&mut self, _status: u16) {}
}

/// A unit of offloaded work. Runs on a worker thread; its [`Reply`] goes back to the session.
pub trait Job: Send + 'static {
    /// Does the work.
    fn run(self) -> Reply;

    /// True for a job that is answered elsewhere (another thread's event loop): the model
    /// calls [`Job::start`] on its own thread instead of giving the job a worker, and the
    /// connection waits for the [`Answer`] without holding a thread. See the `stream` module.
    const DEFERRED: bool = false;

    /// Starts the job and returns; the answer goes to `answer`, now or later, from any thread.
    /// The default runs it here.
    fn start(self, answer: Answer)
    where
        Self: Sized,
    {
        answer.reply(self.run());
    }
}
