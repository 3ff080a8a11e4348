//! The hand-off between a multiplexed codec's streams and the exchange: what HTTP/2 and HTTP/3
//! (many requests in flight on one connection) do with a request once it is whole, written
//! once. Each stream carries a [`Turn`]: its request as it comes in ([`intake`](super::intake)),
//! where its answer stands, whether it was reset, where its body comes from once its head is
//! out. A whole request goes to the handler
//! ([`exchange::ask`]), or waits its turn while the connection has its share of jobs or files
//! out ([`Limits::jobs_per_connection`](crate::http::Limits::jobs_per_connection),
//! [`Limits::files_per_connection`](crate::http::Limits::files_per_connection)); what comes
//! back (an answer, a refusal, a job's reply, a file) is written through the codec's head sink
//! and handed to the codec to frame ([`Streams::send_answer`]). A codec adds only its framing
//! and its stream states.
//!
//! ```text
//!   codec: request whole ──> ready ──> ask ──┬─> Answered, refused ──> send_answer
//!                              │ at its share  ├─> Job ──> Action::Offload .. reply ──> send_answer (+ Body | Stream)
//!                              v               └─> File ──> Action::Open .. file ──> send_answer (+ Body)
//!                   Queued, FileQueued ──> unpark (lowest id first, as the shares free up)
//! ```
//!
//! HTTP/1.1 answers one request at a time and needs none of this: its session asks the
//! exchange itself.

use std::net::SocketAddr;

use super::exchange::{self, Outcome, Rest};
use super::feed::{Feed, Passed};
use super::files::{self, FileError, FileMeta, FileRequest};
use super::intake::Intake;
use super::request::{ReqHead, Version};
use super::response::HeadSink;
use super::{Action, BodyStream, Context, Handler, Job, Reply, Response};

/// Where a stream's answer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The handler has not been asked (the request is still arriving).
    Pending,
    /// The request is whole and waits its turn: the connection has its share of jobs out.
    Queued,
    /// The handler answered with a file that waits its turn to be opened: the connection holds
    /// its share of files, or the stream cannot send yet ([`Streams::can_send`]).
    FileQueued,
    /// A job is out for it.
    Job,
    /// The driver is opening its file.
    Opening,
    /// The head is written; body bytes may remain.
    Sending,
    /// The answer is complete.
    Done,
}

/// Where an answer's body comes from once its head is written, when not all in hand: a
/// source the driver holds and reads for it when asked ([`Action::Pull`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A streamed reply's producer; `parked` while it has nothing (until the driver is woken).
    Stream {
        /// Asked, and had nothing.
        parked: bool,
    },
    /// A file (counted against the connection's share of files).
    File,
}

/// What the driver found when it read a stream's next bytes for [`Action::Pull`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pulled {
    /// Bytes (possibly none yet, for an encoder that holds a piece back); more follow.
    More,
    /// Nothing yet: a producer that has not pushed. The stream is not asked again until the
    /// driver is woken for the connection (the codec's `wake_bodies`).
    Empty,
    /// The last bytes: the body is complete.
    Ended,
    /// The read failed (the file shrank since it was opened, or an I/O error): the head
    /// promised a length the body can no longer meet, so the stream is reset.
    Failed,
}

/// One stream's part in the hand-off, whatever the codec.
#[derive(Debug)]
pub(crate) struct Turn {
    pub(crate) stage: Stage,
    /// Reset (by either side) while its job or file open is out: what comes back is dropped.
    pub(crate) reset: bool,
    /// The answer is for HEAD: no body bytes.
    pub(crate) head_only: bool,
    /// Where the body's bytes come from once what is in hand is sent.
    pub(crate) source: Option<Source>,
    /// Its request as it comes in, and while it waits its turn ([`Stage::Queued`]).
    pub(crate) intake: Intake,
    /// The request body goes to a job as it arrives.
    pub(crate) feed: Option<Feed>,
    /// Fields that end the answer after its body (a producer's trailers).
    pub(crate) trailers: Vec<(String, Vec<u8>)>,
    /// The file the handler answered with, while it waits its turn to be opened
    /// ([`Stage::FileQueued`]).
    file: Option<FileRequest>,
}

/// What becomes of a stream given up ([`Turn::give_up`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GivenUp {
    /// Kept, reset, until what is out for it (a job, a file being opened) comes back;
    /// `cancel`: a job is out that the driver may drop unrun.
    Kept {
        /// Tell the driver (the codec's `take_cancelled`).
        cancel: bool,
    },
    /// Done with: the codec removes it; `waited`: it was one of the connection's waiting.
    Gone {
        /// Take it off the waiting count.
        waited: bool,
    },
}

impl Turn {
    /// A stream whose request has not been handed off.
    pub(crate) const fn new() -> Self {
        Turn {
            stage: Stage::Pending,
            reset: false,
            head_only: false,
            source: None,
            intake: Intake::new(),
            feed: None,
            trailers: Vec::new(),
            file: None,
        }
    }

    /// Whether the driver's source for this stream is still read: false once the body is
    /// complete, or the stream reset (the driver drops the source, its descriptor with it).
    pub(crate) fn pulls(&self) -> bool {
        !self.reset && self.source.is_some()
    }

    /// Holds a file: being opened, or being sent.
    fn holds_file(&self) -> bool {
        self.stage == Stage::Opening || (!self.reset && self.source == Some(Source::File))
    }

    /// The driver was woken (a producer pushed or ended): a parked producer is asked again.
    pub(crate) fn wake(&mut self) {
        if let Some(Source::Stream { parked }) = &mut self.source {
            *parked = false;
        }
    }

    /// A piece the driver pulled came back (not [`Pulled::Failed`]): a producer's trailers are
    /// kept whichever pull brought them (a driver may take them with the last bytes, before
    /// the pull that says the end); the source ends, or parks until a wake. True at the end.
    pub(crate) fn took(&mut self, pulled: Pulled, trailers: Vec<(String, Vec<u8>)>) -> bool {
        if !trailers.is_empty() {
            self.trailers = trailers;
        }
        match (pulled, &mut self.source) {
            (Pulled::Ended, _) => {
                self.source = None;
                true
            }
            (Pulled::Empty, Some(Source::Stream { parked })) => {
                *parked = true;
                false
            }
            _ => false,
        }
    }

    /// The stream is given up (reset, stopped, the connection closing): its job's body is
    /// cut short (through `passed`), its source dropped, what waited dropped.
    pub(crate) fn give_up(&mut self, passed: &mut Passed) -> GivenUp {
        if let Some(feed) = self.feed.take() {
            feed.abort(passed);
        }
        self.source = None;
        self.intake = Intake::new();
        self.file = None;
        match self.stage {
            Stage::Job | Stage::Opening => {
                let cancel = self.stage == Stage::Job && !self.reset;
                self.reset = true;
                GivenUp::Kept { cancel }
            }
            Stage::Queued | Stage::FileQueued => GivenUp::Gone { waited: true },
            _ => GivenUp::Gone { waited: false },
        }
    }

    /// [`Turn::give_up`] as a codec's table of streams takes it: a job out that the driver may
    /// drop unrun is listed in `cancelled` (the codec's `take_cancelled`), a stream that
    /// waited its turn taken off `waiting`. True when the stream is done with: the codec
    /// forgets it.
    pub(crate) fn drop_out<I>(
        &mut self,
        id: I,
        cancelled: &mut Vec<I>,
        waiting: &mut usize,
        passed: &mut Passed,
    ) -> bool {
        match self.give_up(passed) {
            // Kept until what is out comes back.
            GivenUp::Kept { cancel } => {
                if cancel {
                    cancelled.push(id);
                }
                false
            }
            GivenUp::Gone { waited } => {
                *waiting -= usize::from(waited);
                true
            }
        }
    }
}

/// A multiplexed codec's side of the hand-off: its streams' turns, and how it writes and
/// frames an answer.
pub(crate) trait Streams {
    /// What a request of this codec says it came over.
    const VERSION: Version;
    /// The codec's head sink (HPACK, QPACK), writing an answer's head where
    /// [`Streams::send_answer`] takes it from.
    type Sink<'a>: HeadSink
    where
        Self: 'a;
    /// The head sink for stream `id`'s answer.
    fn sink(&mut self, id: u64) -> Self::Sink<'_>;
    /// Stream `id`'s turn, if the stream is held, with the pieces of bodies the codec passes
    /// to jobs (its [`Feeding::passed`](super::Feeding::passed)).
    fn parts(&mut self, id: u64) -> Option<(&mut Turn, &mut Passed)>;
    /// Stream `id`'s turn, if the stream is held.
    fn turn(&mut self, id: u64) -> Option<&mut Turn> {
        self.parts(id).map(|(t, _)| t)
    }
    /// Every held stream's turn, lowest id first.
    fn turns(&self) -> impl Iterator<Item = (u64, &Turn)> + '_;
    /// How many streams are held.
    fn held(&self) -> usize;
    /// How many streams wait their turn ([`Stage::Queued`], [`Stage::FileQueued`]).
    fn waiting(&mut self) -> &mut usize;
    /// The client's address, for each request.
    fn peer(&self) -> Option<SocketAddr>;
    /// Whether stream `id` could send a body now (HTTP/2: a window open on it and on the
    /// connection, or no body to send). A file waits for it before it is opened.
    fn can_send(&self, id: u64) -> bool;
    /// Writes stream `id`'s answer: the head the sink just wrote, then `body`, then what
    /// `source` yields (the answer's status says whether it may have a body). True if the
    /// source was kept: the driver is then told of it ([`Action::Body`], [`Action::Stream`]).
    fn send_answer(&mut self, id: u64, status: u16, body: Vec<u8>, source: Option<Source>) -> bool;
    /// Stream `id` is done with (a reset stream whose job or file came back).
    fn remove(&mut self, id: u64);
}

/// Jobs out for the connection's streams (those of streams reset meanwhile included: they
/// hold their worker until they return).
pub(crate) fn jobs_out<'a>(turns: impl Iterator<Item = &'a Turn>) -> usize {
    turns.filter(|t| t.stage == Stage::Job).count()
}

/// The connection has as many jobs out as it may (deferred jobs hold no worker and are not
/// bounded here).
pub(crate) fn at_job_share<S: Streams, H: Handler>(s: &S, cx: &Context<'_>) -> bool {
    let share = cx.limits.jobs_per_connection.max(1);
    // Jobs are out for streams only: with no more streams than the share (the common case),
    // they need not be counted on every request.
    !<H::Job as Job>::DEFERRED && s.held() > share && jobs_out(s.turns().map(|(_, t)| t)) >= share
}

/// Whether stream `id`'s file may be opened now: the connection holds fewer files than its
/// share, and the stream can send.
fn may_open<S: Streams>(s: &S, id: u64, cx: &Context<'_>) -> bool {
    s.can_send(id) && below_file_share(s, cx)
}

/// The connection holds fewer files than its share (counted once per question, not per
/// stream asked about: [`unpark`] asks for every stream waiting).
fn below_file_share<S: Streams>(s: &S, cx: &Context<'_>) -> bool {
    let share = cx.limits.files_per_connection.max(1);
    // As for jobs: no more streams than the share, no counting.
    s.held() <= share || s.turns().filter(|(_, t)| t.holds_file()).count() < share
}

/// Stream `id`'s request is whole: the handler is asked now or, while the connection has its
/// share of jobs out, the request waits in its stream for its turn ([`unpark`]), rather than
/// one more job in the workers' shared queue.
pub(crate) fn ready<S: Streams, H: Handler>(
    s: &mut S,
    id: u64,
    head: ReqHead,
    body: Vec<u8>,
    cx: &Context<'_>,
    handler: &mut H,
) -> Option<Action<H::Job>> {
    if at_job_share::<S, H>(s, cx) {
        let t = s.turn(id)?;
        t.intake.hold(head, body);
        t.stage = Stage::Queued;
        *s.waiting() += 1;
        return None;
    }
    dispatch(s, id, &head, &body, None, cx, handler)
}

/// Streams that waited their turn go on, lowest id first, as far as the connection's shares
/// allow: a queued request is handed to the handler, a queued file is opened. Returns the
/// first piece of work for the driver.
pub(crate) fn unpark<S: Streams, H: Handler>(
    s: &mut S,
    cx: &Context<'_>,
    handler: &mut H,
) -> Option<Action<H::Job>> {
    while *s.waiting() > 0 {
        let jobs_free = !at_job_share::<S, H>(s, cx);
        let files_free = below_file_share(s, cx);
        let id = s
            .turns()
            .find(|&(id, t)| match t.stage {
                Stage::Queued => jobs_free,
                Stage::FileQueued => files_free && s.can_send(id),
                _ => false,
            })
            .map(|(id, _)| id)?;
        *s.waiting() -= 1;
        let t = s.turn(id)?;
        if let Some(request) = t.file.take() {
            t.stage = Stage::Opening;
            return Some(Action::Open {
                stream: id,
                request,
            });
        }
        let (head, body) = t.intake.take()?;
        t.stage = Stage::Pending;
        if let Some(action) = dispatch(s, id, &head, &body, None, cx, handler) {
            return Some(action);
        }
    }
    None
}

/// Asks the handler for stream `id`'s answer, with its body whole (`body`) or streamed to it
/// (`stream`).
pub(crate) fn dispatch<S: Streams, H: Handler>(
    s: &mut S,
    id: u64,
    head: &ReqHead,
    body: &[u8],
    stream: Option<BodyStream>,
    cx: &Context<'_>,
    handler: &mut H,
) -> Option<Action<H::Job>> {
    let peer = s.peer();
    // The answer's body; its head goes straight into the codec's sink.
    let mut bytes = Vec::new();
    let outcome = {
        let mut sink = s.sink(id);
        let mut res = Response {
            out: &mut bytes,
            sink: &mut sink,
            stamp: cx.stamp(),
            keep_alive: true,
            head_only: head.head_only(),
            sent: None,
        };
        head.with_request(body, peer, S::VERSION, |req| {
            exchange::ask(handler, req, stream, &mut res)
        })
    };
    match outcome {
        Outcome::Job(job) => {
            s.turn(id)?.stage = Stage::Job;
            return Some(Action::Offload { stream: id, job });
        }
        Outcome::File(request) => {
            // The driver opens it (under its root) and hands it back to `file`; or it waits
            // its turn (`unpark`), holding no descriptor meanwhile.
            let open = may_open(s, id, cx);
            let t = s.turn(id)?;
            if open {
                t.stage = Stage::Opening;
                return Some(Action::Open {
                    stream: id,
                    request,
                });
            }
            t.stage = Stage::FileQueued;
            t.file = Some(request);
            *s.waiting() += 1;
        }
        Outcome::Upgrade(_) => {
            // Neither HTTP/2 nor HTTP/3 has Upgrade (RFC 9113 §8.6, RFC 9114 §4.2): the
            // request cannot have asked for it.
            let why = "this resource must be asked for with an Upgrade";
            refuse(s, id, 400, why, cx, handler);
        }
        Outcome::Answered(status) => {
            s.send_answer(id, status, bytes, None);
            handler.on_response(status);
        }
        Outcome::Unanswered => {
            let (status, why) = Outcome::<H::Job>::UNANSWERED;
            refuse(s, id, status, why, cx, handler);
        }
    }
    None
}

/// Answers stream `id` with a status and a short text body ([`exchange::refuse`]).
pub(crate) fn refuse<S: Streams, H: Handler>(
    s: &mut S,
    id: u64,
    status: u16,
    why: &str,
    cx: &Context<'_>,
    handler: &mut H,
) {
    let Some(t) = s.turn(id) else {
        return;
    };
    let head_only = t.head_only;
    let mut bytes = Vec::with_capacity(why.len() + 1);
    let stamp = cx.stamp();
    exchange::refuse(
        &mut bytes,
        &mut s.sink(id),
        status,
        why,
        true,
        head_only,
        stamp,
    );
    s.send_answer(id, status, bytes, None);
    handler.on_response(status);
}

/// Whether stream `id` still waits for what the driver brings back (a reply, a file); one
/// reset meanwhile is done with now.
fn awaited<S: Streams>(s: &mut S, id: u64) -> bool {
    let Some(t) = s.turn(id) else {
        return false;
    };
    if t.reset {
        s.remove(id);
        return false;
    }
    matches!(t.stage, Stage::Job | Stage::Opening)
}

/// What opening stream `id`'s file found, answered as HTTP/1.1 answers it
/// ([`files::write_answer`]: validators, ranges, 304, 416, codings); [`Action::Body`] if
/// bytes of the file follow (the driver keeps the file and is asked for them,
/// [`Action::Pull`]).
pub(crate) fn file<S: Streams, H: Handler>(
    s: &mut S,
    id: u64,
    request: &FileRequest,
    found: Result<&FileMeta, FileError>,
    cx: &Context<'_>,
    handler: &mut H,
) -> Option<Action<H::Job>> {
    if !awaited(s, id) {
        return None;
    }
    let mut bytes = Vec::new();
    let stamp = cx.stamp();
    let (status, send, _) =
        files::write_answer(&mut bytes, &mut s.sink(id), request, found, true, stamp);
    answered(s, id, status, bytes, send.map(Rest::File), handler)
}

/// A job's reply for stream `id`, answered ([`exchange::reply`]) if the stream still waits
/// for it; [`Action::Body`] if its body is a file the driver took from it, [`Action::Stream`]
/// if a producer streams it.
pub(crate) fn reply<S: Streams, H: Handler>(
    s: &mut S,
    id: u64,
    reply: Reply,
    cx: &Context<'_>,
    handler: &mut H,
) -> Option<Action<H::Job>> {
    if !awaited(s, id) {
        return None;
    }
    let head_only = s.turn(id)?.head_only;
    let mut bytes = Vec::with_capacity(reply.body.len());
    let stamp = cx.stamp();
    let replied = exchange::reply(&mut bytes, &mut s.sink(id), reply, true, head_only, stamp);
    answered(s, id, replied.status, bytes, replied.rest, handler)
}

/// Hands stream `id`'s answer, its head in the sink and `bytes` of its body, to the codec to
/// frame; the driver's step for the rest of the body if the codec keeps it (the answer's
/// status and method may leave it none: a producer is then dropped, told the client is gone).
fn answered<S: Streams, H: Handler>(
    s: &mut S,
    id: u64,
    status: u16,
    bytes: Vec<u8>,
    rest: Option<Rest>,
    handler: &mut H,
) -> Option<Action<H::Job>> {
    let source = rest.as_ref().map(|rest| match rest {
        Rest::File(_) => Source::File,
        Rest::Stream(_) => Source::Stream { parked: false },
    });
    let kept = s.send_answer(id, status, bytes, source);
    handler.on_response(status);
    rest.filter(|_| kept).map(|rest| rest.action(id))
}
