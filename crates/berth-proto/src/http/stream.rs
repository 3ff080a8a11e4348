//! Streamed response bodies, and answers that come later from elsewhere.
//!
//! A [`Job`](super::Job) usually runs on a worker and returns its [`Reply`] whole. Two things
//! that does not cover, which an application running on another thread's event loop (a Python
//! ASGI app, say) needs:
//!
//! - **Deferred answers.** A job whose [`Job::DEFERRED`](super::Job::DEFERRED) is true is not
//!   given a worker: the model calls [`Job::start`](super::Job::start) on its own thread with an
//!   [`Answer`], and the job hands its request to whoever will answer it and returns at once.
//!   The answer comes back through [`Answer::reply`], from any thread; the connection waits
//!   meanwhile, costing no thread. An answer dropped without a reply is answered 500, so a
//!   lost request cannot hang its connection.
//! - **Streamed bodies.** A reply made with [`Reply::streamed`] carries
//!   a [`BodyStream`]: the session writes the head (`Transfer-Encoding: chunked`, or a body
//!   that ends with the connection for HTTP/1.0), then the pump takes the body's chunks as the
//!   producer pushes them with [`StreamWriter::push`] until [`StreamWriter::end`]. The stream
//!   holds at most [`WINDOW`] bytes the pump has not taken: past it, `push` says so, and the
//!   producer waits for its [`StreamWriter::on_room`] call before it pushes more (backpressure
//!   from a slow reader reaches the application). If the connection ends first, the stream is
//!   abandoned: `push` says [`Gone`] and the room hook runs, so that a waiting producer learns.
//!
//! Sans-IO like the rest of this crate: the pump wakes its model through [`Respond::more`] and
//! the producer learns of room through a hook; no sockets, no threads of its own.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use super::response::{BadTrailer, Reply};

/// Bytes a stream holds that the pump has not taken before [`StreamWriter::push`] reports it
/// full. Enough for a few socket writes, so a producer is rarely stopped by a reader that
/// keeps up.
pub const WINDOW: usize = 256 * 1024;

/// Who waits for a deferred answer: what a model gives [`Answer`]. Called from whatever thread
/// the answer is given on.
pub trait Respond: Send + Sync {
    /// The answer: pass it to the connection and wake its owner.
    fn reply(&self, reply: Reply);
    /// Whether the connection the answer is for has gone (its peer reset or closed), so that
    /// the work may stop.
    fn cancelled(&self) -> bool;
    /// A streamed body the connection waits on has more (bytes, or its end), or the protocol
    /// it was switched to has news ([`Upgraded::wake`](crate::upgrade::Upgraded::wake)): wake
    /// the owner to pump the connection. (The blocking models have no owner to wake: there,
    /// this does nothing.)
    fn more(&self);
}

/// Where a deferred job's answer goes. Answer with [`Answer::reply`]; dropped unanswered, it
/// answers 500.
pub struct Answer {
    to: Option<Arc<dyn Respond>>,
}

impl Answer {
    /// An answer delivered to `to`.
    pub fn new(to: Arc<dyn Respond>) -> Answer {
        Answer { to: Some(to) }
    }

    /// Answers the request. A streamed reply's later chunks wake the same owner.
    pub fn reply(mut self, reply: Reply) {
        if let Some(to) = self.to.take() {
            if let Some(stream) = &reply.stream {
                stream.wake_with(to.clone());
            }
            to.reply(reply);
        }
    }

    /// A hook that wakes the connection's owner to pump it, as a streamed body's push does:
    /// for a job that holds back its request's body ([`BodyStream::on_room`]).
    pub fn waker(&self) -> impl Fn() + Send + Sync + 'static {
        let to = self.to.clone();
        move || {
            if let Some(to) = &to {
                to.more();
            }
        }
    }

    /// Whether the connection has gone (the reply would be dropped).
    pub fn cancelled(&self) -> bool {
        self.to.as_ref().is_some_and(|to| to.cancelled())
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let Some(to) = self.to.take() {
            to.reply(Reply::failed());
        }
    }
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answer")
            .field("answered", &self.to.is_none())
            .finish()
    }
}

/// The connection a stream was for has gone: nothing pushed will be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

impl fmt::Display for Gone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the connection the body was for has gone")
    }
}

impl std::error::Error for Gone {}

#[derive(Default)]
struct State {
    chunks: VecDeque<Vec<u8>>,
    /// Bytes in `chunks`.
    queued: usize,
    /// The producer said the body is complete.
    ended: bool,
    /// The producer failed before the end: the body must not look complete.
    aborted: bool,
    /// The consumer (the connection) is gone.
    abandoned: bool,
    /// The consumer found nothing to take and waits for [`Respond::more`].
    parked: bool,
    /// The producer was told the stream is full and waits for room.
    full: bool,
    /// A declared length's bytes not yet taken ([`Reply::with_length`]): the body must end
    /// exactly there.
    left: Option<u64>,
    /// Queued bytes at which the stream is full, if not [`WINDOW`] ([`StreamWriter::full_at`]).
    mark: Option<usize>,
    /// Called when the consumer is parked and the producer pushes or ends.
    wake: Option<Box<dyn Fn() + Send>>,
    /// Called when a full stream has room again, or the consumer goes.
    room: Option<Box<dyn Fn() + Send>>,
    /// Fields to send after the body ([`StreamWriter::end_with`]), checked.
    trailers: Vec<(String, Vec<u8>)>,
}

impl State {
    /// Queued bytes at which the stream is full.
    fn mark(&self) -> usize {
        self.mark.unwrap_or(WINDOW)
    }

    /// The body went past its declared length: it ends unfinished, nothing more sent.
    fn cut(&mut self) {
        self.ended = true;
        self.aborted = true;
        self.chunks.clear();
        self.queued = 0;
    }
}

struct Shared {
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The consumer's end of a streamed body: travels in the [`Reply`] to the connection. Dropped
/// (the connection ended, or the reply was never delivered), it abandons the stream.
pub struct BodyStream(Arc<Shared>);

/// The producer's end of a streamed body.
pub struct StreamWriter(Arc<Shared>);

/// What [`BodyStream::take`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// This many bytes were appended to the output (with their chunk framing, if any).
    Bytes(usize),
    /// Nothing yet: the consumer is parked until [`Respond::more`] (or its
    /// [`BodyStream::on_data`] hook).
    Empty,
    /// The body is complete (its last chunk is in the output).
    Ended,
    /// The producer failed mid-body: close the connection without the last chunk, so that the
    /// client can tell the body is cut short.
    Aborted,
}

/// A new stream: the writer for the producer, the stream for the reply.
pub fn body_stream() -> (StreamWriter, BodyStream) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
    });
    (StreamWriter(shared.clone()), BodyStream(shared))
}

impl StreamWriter {
    /// Queues `bytes` for the connection. `Ok(true)`: there is room for more; `Ok(false)`: the
    /// stream holds [`WINDOW`] bytes or more, wait for [`StreamWriter::on_room`]'s hook before
    /// pushing again (pushing anyway is allowed, and only grows the queue). Empty pushes are
    /// ignored.
    pub fn push(&self, bytes: Vec<u8>) -> Result<bool, Gone> {
        let mut s = self.0.lock();
        if s.abandoned {
            return Err(Gone);
        }
        if !bytes.is_empty() && !s.ended {
            s.queued += bytes.len();
            s.chunks.push_back(bytes);
            self.wake(&mut s);
        }
        let room = s.queued < s.mark();
        s.full = !room;
        Ok(room)
    }

    /// The body is complete.
    pub fn end(&self) {
        let mut s = self.0.lock();
        if !s.ended {
            s.ended = true;
            self.wake(&mut s);
        }
    }

    /// The body is complete, and `trailers` follow it: a trailer section after the last
    /// chunk (HTTP/1.1), a HEADERS frame that ends the stream (HTTP/2). Where the response
    /// cannot carry them they are dropped, the body still complete: HTTP/1.0, a body framed
    /// by its declared length ([`Reply::with_length`]), a HEAD request. `Err` (nothing ended)
    /// for a field [`check_trailers`](super::response::check_trailers) refuses.
    pub fn end_with(&self, trailers: Vec<(String, Vec<u8>)>) -> Result<(), BadTrailer> {
        super::response::check_trailers(&trailers)?;
        let mut s = self.0.lock();
        if !s.ended {
            s.trailers = trailers;
            s.ended = true;
            self.wake(&mut s);
        }
        Ok(())
    }

    /// The producer failed: the body ends unfinished (the connection is closed without the
    /// last chunk).
    pub fn abort(&self) {
        let mut s = self.0.lock();
        if !s.ended {
            s.ended = true;
            s.aborted = true;
            self.wake(&mut s);
        }
    }

    /// Makes the stream full at `mark` queued bytes (at least 1) instead of [`WINDOW`]: for
    /// a producer whose own peer is held to a smaller window, so that the room hook runs as
    /// soon as the consumer has taken enough to be worth letting the peer send again (an
    /// HTTP/2 request body, whose stream window is granted only as the application takes it).
    pub fn full_at(&self, mark: usize) {
        self.0.lock().mark = Some(mark.max(1));
    }

    /// Bytes pushed that the consumer has not taken yet.
    pub fn queued(&self) -> usize {
        self.0.lock().queued
    }

    /// Whether the connection has gone.
    pub fn is_gone(&self) -> bool {
        self.0.lock().abandoned
    }

    /// Whether the stream is full: the producer should wait for room.
    pub fn is_full(&self) -> bool {
        let s = self.0.lock();
        s.queued >= s.mark() && !s.abandoned
    }

    /// Runs `hook` (on the consumer's thread) whenever a full stream has room again, and once
    /// when the connection goes.
    pub fn on_room(&self, hook: impl Fn() + Send + 'static) {
        self.0.lock().room = Some(Box::new(hook));
    }

    fn wake(&self, s: &mut State) {
        if std::mem::take(&mut s.parked) {
            if let Some(wake) = &s.wake {
                wake();
            }
        }
    }
}

impl Drop for StreamWriter {
    /// A producer that goes without ending its body has failed: the connection must not wait
    /// for bytes that will never come, nor tell the client the body is complete.
    fn drop(&mut self) {
        self.abort();
    }
}

/// What [`BodyStream::pop`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Popped {
    /// The next bytes.
    Data(Vec<u8>),
    /// Nothing yet: the consumer is parked until its [`BodyStream::on_data`] hook runs.
    Empty,
    /// The body is complete.
    Ended,
    /// The producer failed (or the connection went) before the body was complete.
    Aborted,
}

impl BodyStream {
    fn wake_with(&self, to: Arc<dyn Respond>) {
        self.0.lock().wake = Some(Box::new(move || to.more()));
    }

    /// Runs `hook` (on the producer's thread) when the consumer was told [`Popped::Empty`] and
    /// bytes (or the end) arrive.
    pub fn on_data(&self, hook: impl Fn() + Send + 'static) {
        self.0.lock().wake = Some(Box::new(hook));
    }

    /// Runs `hook` (on the consumer's thread) when a full stream has room again: how the
    /// consumer wakes a producer that it holds back (a request body's connection).
    pub fn on_room(&self, hook: impl Fn() + Send + 'static) {
        self.0.lock().room = Some(Box::new(hook));
    }

    /// Holds the body to a declared length: `left` more bytes, none past them. `over`: the
    /// reply's first bytes already went past it. A body that ends at another length ends
    /// [`Taken::Aborted`] once what it may send is out.
    pub(crate) fn declare(&self, left: u64, over: bool) {
        let mut s = self.0.lock();
        s.left = Some(left);
        if over {
            s.cut();
        }
    }

    /// The next bytes pushed (up to about `max`, whole chunks; the first always), for a
    /// consumer that takes them as they are (an application reading a request body).
    pub fn pop(&self, max: usize) -> Popped {
        let mut s = self.0.lock();
        let mut data = Vec::new();
        while let Some(chunk) = s.chunks.front() {
            if !data.is_empty() && data.len() + chunk.len() > max {
                break;
            }
            let chunk = s.chunks.pop_front().unwrap_or_default();
            s.queued -= chunk.len();
            if data.is_empty() {
                data = chunk;
            } else {
                data.extend_from_slice(&chunk);
            }
        }
        if s.full && s.queued < s.mark() {
            s.full = false;
            if let Some(room) = &s.room {
                room();
            }
        }
        if !data.is_empty() {
            return Popped::Data(data);
        }
        if s.aborted {
            return Popped::Aborted;
        }
        if s.ended {
            return Popped::Ended;
        }
        s.parked = true;
        Popped::Empty
    }

    /// Moves queued bytes to `out`, at most about `max` of them (whole chunks; the first
    /// chunk always), framed as chunks if `chunked`, dropped if `discard` (a HEAD request's
    /// body). When the producer has ended and everything is out, appends the last chunk and
    /// says [`Taken::Ended`]. With nothing queued, the consumer is parked: its
    /// [`BodyStream::on_data`] hook (or [`Respond::more`]) runs at the next push or the end. It
    /// never waits here: a consumer that blocks (the blocking models) parks its own thread.
    pub fn take(&self, out: &mut Vec<u8>, max: usize, chunked: bool, discard: bool) -> Taken {
        let mut s = self.0.lock();
        let mut moved = 0;
        while let Some(chunk) = s.chunks.front() {
            if moved > 0 && moved + chunk.len() > max {
                break;
            }
            let mut chunk = s.chunks.pop_front().unwrap_or_default();
            moved += chunk.len();
            s.queued -= chunk.len();
            if discard {
                continue;
            }
            if let Some(left) = s.left {
                // Past the declared length: what fits is sent, the rest never is.
                if chunk.len() as u64 > left {
                    chunk.truncate(left as usize);
                    s.cut();
                }
                s.left = Some(left - chunk.len() as u64);
            }
            if chunked {
                super::chunked::write_chunk(out, &chunk);
            } else {
                out.extend_from_slice(&chunk);
            }
        }
        if s.full && s.queued < s.mark() {
            s.full = false;
            if let Some(room) = &s.room {
                room();
            }
        }
        if moved > 0 {
            return Taken::Bytes(moved);
        }
        if s.ended && s.left.is_some_and(|left| left > 0) {
            // Ended short of the declared length: the body cannot be completed.
            s.aborted = true;
        }
        if s.aborted {
            return Taken::Aborted;
        }
        if s.ended {
            if chunked && !discard {
                out.extend_from_slice(b"0\r\n");
                for (name, value) in std::mem::take(&mut s.trailers) {
                    out.extend_from_slice(name.as_bytes());
                    out.extend_from_slice(b": ");
                    out.extend_from_slice(&value);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"\r\n");
            }
            return Taken::Ended;
        }
        s.parked = true;
        Taken::Empty
    }

    /// The trailers the producer ended with ([`StreamWriter::end_with`]), taken once, for a
    /// consumer that frames them itself (HTTP/2). Empty before the end.
    pub(crate) fn take_trailers(&self) -> Vec<(String, Vec<u8>)> {
        std::mem::take(&mut self.0.lock().trailers)
    }
}

impl Drop for BodyStream {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.abandoned = true;
        s.chunks.clear();
        s.queued = 0;
        s.wake = None;
        if let Some(room) = s.room.take() {
            room();
        }
    }
}

impl fmt::Debug for BodyStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.lock();
        f.debug_struct("BodyStream")
            .field("queued", &s.queued)
            .field("ended", &s.ended)
            .finish()
    }
}

impl fmt::Debug for StreamWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.lock();
        f.debug_struct("StreamWriter")
            .field("queued", &s.queued)
            .field("gone", &s.abandoned)
            .finish()
    }
}

impl PartialEq for BodyStream {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for BodyStream {}

/// A streamed response body, as the exchange framed its head: what
/// [`Action::Stream`](super::Action::Stream) hands the driver, which alone holds it.
#[derive(Debug, PartialEq, Eq)]
pub struct Streamed {
    stream: BodyStream,
    chunked: bool,
    discard: bool,
}

impl Streamed {
    /// The body `stream` sends, framed with the chunked coding or not, or read and dropped
    /// (`discard`: an answer to HEAD).
    pub(crate) fn new(stream: BodyStream, chunked: bool, discard: bool) -> Streamed {
        Streamed {
            stream,
            chunked,
            discard,
        }
    }

    /// The trailers the producer ended with, once, for a protocol that frames them itself
    /// (HTTP/2's HEADERS); empty before the end, and for HTTP/1.1, whose chunked framing
    /// carries them.
    pub fn take_trailers(&self) -> Vec<(String, Vec<u8>)> {
        self.stream.take_trailers()
    }

    /// Moves what the producer has pushed (about `max` bytes at most, whole chunks) to `out`,
    /// framed as this response needs; see [`BodyStream::take`].
    pub fn take(&self, out: &mut Vec<u8>, max: usize) -> Taken {
        self.stream.take(out, max, self.chunked, self.discard)
    }

    /// Runs `hook` when the producer pushes or ends after a [`Streamed::take`] found nothing:
    /// see [`BodyStream::on_data`].
    pub fn on_data(&self, hook: impl Fn() + Send + 'static) {
        self.stream.on_data(hook);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Owner {
        replies: Mutex<Vec<Reply>>,
        wakes: AtomicUsize,
    }

    impl Respond for Owner {
        fn reply(&self, reply: Reply) {
            self.replies.lock().unwrap().push(reply);
        }
        fn cancelled(&self) -> bool {
            false
        }
        fn more(&self) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn an_answer_dropped_unanswered_answers_500() {
        let owner = Arc::new(Owner::default());
        drop(Answer::new(owner.clone()));
        assert_eq!(owner.replies.lock().unwrap()[0].status, 500);
    }

    #[test]
    fn chunks_are_framed_and_a_parked_consumer_is_woken_once() {
        let owner = Arc::new(Owner::default());
        let (writer, stream) = body_stream();
        Answer::new(owner.clone()).reply(Reply::streamed(200, Vec::new(), stream));
        let stream = owner.replies.lock().unwrap()[0].stream.take().unwrap();
        let mut out = Vec::new();
        assert_eq!(stream.take(&mut out, 1 << 20, true, false), Taken::Empty);
        assert_eq!(writer.push(b"hello".to_vec()), Ok(true));
        assert_eq!(writer.push(b", world".to_vec()), Ok(true));
        assert_eq!(owner.wakes.load(Ordering::SeqCst), 1);
        assert_eq!(
            stream.take(&mut out, 1 << 20, true, false),
            Taken::Bytes(12)
        );
        writer.end();
        assert_eq!(stream.take(&mut out, 1 << 20, true, false), Taken::Ended);
        assert_eq!(out, b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n");
    }

    #[test]
    fn a_full_stream_says_so_and_calls_the_room_hook_once_drained() {
        let (writer, stream) = body_stream();
        let rooms = Arc::new(AtomicUsize::new(0));
        let r = rooms.clone();
        writer.on_room(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(writer.push(vec![1; WINDOW - 1]), Ok(true));
        assert_eq!(writer.push(vec![2; 10]), Ok(false));
        let mut out = Vec::new();
        assert_eq!(
            stream.take(&mut out, 1, false, false),
            Taken::Bytes(WINDOW - 1)
        );
        assert_eq!(rooms.load(Ordering::SeqCst), 1);
        assert_eq!(out.len(), WINDOW - 1);
    }

    #[test]
    fn a_dropped_connection_abandons_the_stream() {
        let (writer, stream) = body_stream();
        let rooms = Arc::new(AtomicUsize::new(0));
        let r = rooms.clone();
        writer.on_room(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        drop(stream);
        assert_eq!(writer.push(b"x".to_vec()), Err(Gone));
        assert!(writer.is_gone());
        assert_eq!(rooms.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_parked_consumer_hears_of_the_next_push_through_its_hook() {
        let (writer, stream) = body_stream();
        let heard = Arc::new(AtomicUsize::new(0));
        let h = heard.clone();
        stream.on_data(move || {
            h.fetch_add(1, Ordering::SeqCst);
        });
        let mut out = Vec::new();
        assert_eq!(stream.take(&mut out, 1024, false, false), Taken::Empty);
        writer.push(b"late".to_vec()).unwrap();
        assert_eq!(heard.load(Ordering::SeqCst), 1);
        assert_eq!(stream.take(&mut out, 1024, false, false), Taken::Bytes(4));
        drop(writer);
        // The writer is gone without ending: the body is cut short, not complete.
        assert_eq!(stream.take(&mut out, 1024, false, false), Taken::Aborted);
    }

    /// Trailers follow the last chunk as a trailer section; unframed (HTTP/1.0, a declared
    /// length) or discarded (HEAD) there is nowhere for them and the body ends alone. A field
    /// a trailer must not carry is refused and ends nothing.
    #[test]
    fn trailers_follow_the_last_chunk() {
        let fields = |pairs: &[(&str, &str)]| -> Vec<(String, Vec<u8>)> {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect()
        };
        let ended = |chunked: bool, discard: bool| {
            let (writer, stream) = body_stream();
            writer.push(b"abc".to_vec()).unwrap();
            writer
                .end_with(fields(&[("Grpc-Status", "0"), ("x-sum", "294")]))
                .unwrap();
            let mut out = Vec::new();
            while stream.take(&mut out, 1 << 20, chunked, discard) != Taken::Ended {}
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            ended(true, false),
            "3\r\nabc\r\n0\r\nGrpc-Status: 0\r\nx-sum: 294\r\n\r\n"
        );
        assert_eq!(ended(false, false), "abc");
        assert_eq!(ended(true, true), "");
        let (writer, stream) = body_stream();
        for bad in [
            ("Content-Length", "3"),
            ("transfer-encoding", "chunked"),
            ("x-a", "1\r\nx-b: 2"),
            (":status", "200"),
            ("", "1"),
        ] {
            assert!(
                writer.end_with(fields(&[("x-ok", "1"), bad])).is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(
            stream.take(&mut Vec::new(), 1024, true, false),
            Taken::Empty
        );
        writer.end();
        let mut out = Vec::new();
        assert_eq!(stream.take(&mut out, 1024, true, false), Taken::Ended);
        assert_eq!(out, b"0\r\n\r\n", "a refused end left nothing behind");
    }

    /// A declared length holds the body to it: exact, it ends; short, or past it, it ends
    /// aborted once what may be sent is out, and nothing past the length is sent.
    #[test]
    fn a_declared_length_is_held_to() {
        let take = |stream: &BodyStream, out: &mut Vec<u8>| stream.take(out, 1 << 20, false, false);
        // Exact.
        let (writer, stream) = body_stream();
        stream.declare(5, false);
        writer.push(b"hel".to_vec()).unwrap();
        writer.push(b"lo".to_vec()).unwrap();
        writer.end();
        let mut out = Vec::new();
        assert_eq!(take(&stream, &mut out), Taken::Bytes(5));
        assert_eq!(take(&stream, &mut out), Taken::Ended);
        assert_eq!(out, b"hello");
        // Short.
        let (writer, stream) = body_stream();
        stream.declare(100, false);
        writer.push(b"hello".to_vec()).unwrap();
        writer.end();
        let mut out = Vec::new();
        assert_eq!(take(&stream, &mut out), Taken::Bytes(5));
        assert_eq!(take(&stream, &mut out), Taken::Aborted);
        assert_eq!(out, b"hello");
        // Past it: cut at the length, in one take or across several.
        let (writer, stream) = body_stream();
        stream.declare(3, false);
        writer.push(b"he".to_vec()).unwrap();
        writer.push(b"llo".to_vec()).unwrap();
        let mut out = Vec::new();
        assert_eq!(take(&stream, &mut out), Taken::Bytes(5));
        assert_eq!(take(&stream, &mut out), Taken::Aborted);
        assert_eq!(out, b"hel");
        let (writer, stream) = body_stream();
        stream.declare(2, false);
        writer.push(b"he".to_vec()).unwrap();
        let mut out = Vec::new();
        assert_eq!(take(&stream, &mut out), Taken::Bytes(2));
        writer.push(b"llo".to_vec()).unwrap();
        writer.end();
        take(&stream, &mut out);
        assert_eq!(take(&stream, &mut out), Taken::Aborted);
        assert_eq!(out, b"he");
        // The first bytes were already past it.
        let (_writer, stream) = body_stream();
        stream.declare(0, true);
        assert_eq!(take(&stream, &mut Vec::new()), Taken::Aborted);
    }
}
