//! The hand-off to the exchange, as HTTP/2's (`h2/connection/hand_off.rs`): a stream's whole
//! request goes to the handler ([`exchange::ask`]) or waits its turn while the connection has
//! its share of jobs or files out; what comes back (an answer, a refusal, a job's reply, a
//! file) is written through HTTP/3's head sink ([`Qpack`]) and framed as HEADERS and DATA on
//! the stream. Nothing here dispatches, refuses or answers files itself.

use super::*;
use crate::h3::answer::{self, Qpack};
use crate::h3::frame::{self, kind};
use crate::http::exchange::{self, Outcome};
use crate::http::files::{self, FileError, FileMeta};
use crate::http::{BodyStream, Job, Reply, Response};

impl Connection {
    /// Files held for this connection's answers: being opened, or being sent.
    fn files_held(&self) -> usize {
        self.requests
            .values()
            .filter(|s| s.answer == Answer::Opening || (!s.reset && s.source == Some(Source::File)))
            .count()
    }

    /// The connection has as many jobs out as it may ([`Limits::jobs_per_connection`](crate::http::Limits);
    /// deferred jobs hold no worker and are not bounded here).
    pub(super) fn at_job_share<H: Handler>(&self, cx: &Context<'_>) -> bool {
        let share = cx.limits.jobs_per_connection.max(1);
        !<H::Job as Job>::DEFERRED && self.requests.len() > share && self.jobs_out() >= share
    }

    /// Whether another file may be opened now ([`Limits::files_per_connection`](crate::http::Limits)).
    fn may_open(&self, cx: &Context<'_>) -> bool {
        let share = cx.limits.files_per_connection.max(1);
        self.requests.len() <= share || self.files_held() < share
    }

    /// A stream's request is whole: the handler is asked now, or it waits its turn.
    pub(super) fn request_ready<H: Handler>(
        &mut self,
        id: u64,
        head: ReqHead,
        body: Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Out<H::Job>> {
        if self.at_job_share::<H>(cx) {
            let s = self.requests.get_mut(&id)?;
            s.head = Some(Box::new(head));
            s.body = body;
            s.answer = Answer::Queued;
            self.waiting += 1;
            return None;
        }
        self.dispatch(id, &head, &body, None, cx, handler)
    }

    /// Streams that waited their turn go on, lowest id first, as the shares allow.
    pub(super) fn unpark<H: Handler>(
        &mut self,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Out<H::Job>> {
        while self.waiting > 0 {
            let jobs_free = !self.at_job_share::<H>(cx);
            let files_free = self.may_open(cx);
            let (id, answer) = self
                .requests
                .iter()
                .find(|(_, s)| match s.answer {
                    Answer::Queued => jobs_free,
                    Answer::FileQueued => files_free,
                    _ => false,
                })
                .map(|(&id, s)| (id, s.answer))?;
            self.waiting -= 1;
            let s = self.requests.get_mut(&id)?;
            if answer == Answer::FileQueued {
                s.answer = Answer::Opening;
                let request = s.file.take()?;
                return Some(Out::Open(id, *request));
            }
            s.answer = Answer::Pending;
            let head = s.head.take()?;
            let body = std::mem::take(&mut s.body);
            if let Some(out) = self.dispatch(id, &head, &body, None, cx, handler) {
                return Some(out);
            }
        }
        None
    }

    /// Asks the handler for a stream's answer, through the exchange.
    pub(super) fn dispatch<H: Handler>(
        &mut self,
        id: u64,
        head: &ReqHead,
        body: &[u8],
        stream: Option<BodyStream>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Out<H::Job>> {
        let mut bytes = Vec::new();
        let mut sink = Qpack {
            encoder: &mut self.encoder,
            stream: id,
            section: &mut self.section,
        };
        let mut res = Response {
            out: &mut bytes,
            sink: &mut sink,
            stamp: cx.stamp(),
            keep_alive: true,
            head_only: head.head_only(),
            sent: None,
        };
        let outcome = head.with_request(body, self.peer, |req| {
            exchange::ask(handler, req, stream, &mut res)
        });
        match outcome {
            Outcome::Job(job) => {
                self.requests.get_mut(&id)?.answer = Answer::Job;
                return Some(Out::Job(id, job));
            }
            Outcome::File(request) => {
                let may_open = self.may_open(cx);
                let s = self.requests.get_mut(&id)?;
                if may_open {
                    s.answer = Answer::Opening;
                    return Some(Out::Open(id, request));
                }
                s.answer = Answer::FileQueued;
                s.file = Some(Box::new(request));
                self.waiting += 1;
            }
            Outcome::Upgrade(_) => {
                // HTTP/3 has no Upgrade (RFC 9114 §4.2 forbids the field): the request cannot
                // have asked for it.
                let why = "this resource must be asked for with an Upgrade";
                self.answer_status(id, 400, why, cx, handler);
            }
            Outcome::Answered(status) => {
                self.send_answer(id, status, bytes, None);
                handler.on_response(status);
            }
            Outcome::Unanswered => {
                let (status, why) = Outcome::<H::Job>::UNANSWERED;
                self.answer_status(id, status, why, cx, handler);
            }
        }
        None
    }

    /// Answers with a status and a short text body ([`exchange::refuse`]).
    pub(super) fn answer_status<H: Handler>(
        &mut self,
        id: u64,
        status: u16,
        why: &str,
        cx: &Context<'_>,
        handler: &mut H,
    ) {
        let Some(s) = self.requests.get(&id) else {
            return;
        };
        let head_only = s.head_only;
        let mut sink = Qpack {
            encoder: &mut self.encoder,
            stream: id,
            section: &mut self.section,
        };
        let mut bytes = Vec::with_capacity(why.len() + 1);
        exchange::refuse(
            &mut bytes,
            &mut sink,
            status,
            why,
            true,
            head_only,
            cx.stamp(),
        );
        self.send_answer(id, status, bytes, None);
        handler.on_response(status);
    }

    /// Hands what opening a stream's file found to the connection, which answers it (the
    /// head now, then [`Step::Body`] if bytes of the file follow), then goes on as
    /// [`Connection::process`] does.
    pub fn file<H: Handler>(
        &mut self,
        stream: u64,
        request: &FileRequest,
        found: Result<&FileMeta, FileError>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Step<H::Job> {
        if self.awaited(stream) && self.requests.contains_key(&stream) {
            let mut bytes = Vec::new();
            let mut sink = Qpack {
                encoder: &mut self.encoder,
                stream,
                section: &mut self.section,
            };
            let (status, send, _) =
                files::write_answer(&mut bytes, &mut sink, request, found, true, cx.stamp());
            let source = send.as_ref().map(|_| Source::File);
            let pulled = self.send_answer(stream, status, bytes, source);
            handler.on_response(status);
            if let Some(send) = send.filter(|_| pulled) {
                return Step::Body {
                    stream,
                    offset: send.offset,
                    len: send.len,
                    encode: send.encode,
                };
            }
        }
        self.process(cx, handler)
    }

    /// Whether `stream` still waits for what the driver brings back; one reset meanwhile is
    /// dropped now.
    fn awaited(&mut self, stream: u64) -> bool {
        match self.requests.get(&stream) {
            Some(s) if s.reset => {
                self.forget(stream);
                false
            }
            Some(s) => matches!(s.answer, Answer::Job | Answer::Opening),
            None => false,
        }
    }

    /// Hands a job's reply for `stream` to the connection, which answers it (if the stream
    /// is still there) and goes on as [`Connection::process`] does.
    pub fn complete<H: Handler>(
        &mut self,
        stream: u64,
        reply: Reply,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Step<H::Job> {
        if self.awaited(stream) {
            if let Some(step) = self.answer_reply(stream, reply, cx, handler) {
                return step;
            }
        }
        self.process(cx, handler)
    }

    /// Answers a job's reply ([`exchange::reply`]); [`Step::Body`] if its body is a file the
    /// driver took from it, [`Step::Stream`] if a producer streams it.
    fn answer_reply<H: Handler, J>(
        &mut self,
        id: u64,
        mut reply: Reply,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Step<J>> {
        if reply.switch.is_some() {
            let (status, why) = exchange::CANNOT_SWITCH;
            self.answer_status(id, status, why, cx, handler);
            return None;
        }
        let file = reply.file.take();
        let streamed = match &file {
            Some(file) => Some(Some(file.len)),
            None => reply.stream.is_some().then_some(reply.length),
        };
        let mut bytes = Vec::with_capacity(reply.body.len());
        let mut sink = Qpack {
            encoder: &mut self.encoder,
            stream: id,
            section: &mut self.section,
        };
        let status = exchange::reply(
            &mut bytes,
            &mut sink,
            &reply,
            streamed,
            true,
            false,
            cx.stamp(),
        );
        if let Some(file) = file {
            // A body from a file the job opened, pulled as a `/files` answer's is.
            let source = (file.len > 0).then_some(Source::File);
            let pulled = self.send_answer(id, status, bytes, source);
            handler.on_response(status);
            return pulled.then_some(Step::Body {
                stream: id,
                offset: file.offset,
                len: file.len,
                encode: None,
            });
        }
        if reply.stream.is_some() {
            // A streamed reply's first bytes are the caller's to frame.
            bytes.extend_from_slice(&reply.body);
        }
        let source = reply
            .stream
            .as_ref()
            .map(|_| Source::Stream { parked: false });
        let pulled = self.send_answer(id, status, bytes, source);
        handler.on_response(status);
        let stream = reply.stream.filter(|_| pulled)?;
        Some(Step::Stream {
            stream: id,
            streamed: Streamed::new(stream, false, false),
        })
    }

    /// Writes a stream's HEADERS (the section [`Qpack`] just wrote) and its first body bytes
    /// as DATA, then FIN unless a `source` follows. True if a source was kept.
    fn send_answer(&mut self, id: u64, status: u16, body: Vec<u8>, source: Option<Source>) -> bool {
        let Some(s) = self.requests.get_mut(&id) else {
            return false;
        };
        let no_body = s.head_only || status < 200 || status == 204 || status == 304;
        let source = if no_body { None } else { source };
        let mut bytes = Vec::with_capacity(self.section.len() + body.len() + 16);
        frame::write_header(kind::HEADERS, self.section.len() as u64, &mut bytes);
        bytes.extend_from_slice(&self.section);
        if !no_body && !body.is_empty() {
            frame::write_data_header(body.len() as u64, &mut bytes);
            bytes.extend_from_slice(&body);
        }
        let end = source.is_none();
        let pulled = source.is_some();
        s.source = source;
        s.answer = if end { Answer::Done } else { Answer::Sending };
        self.send(id, bytes, end);
        if end {
            self.stream_done(id);
        }
        pulled
    }

    /// A piece the driver pulled for `id`'s body goes out; the last ends the stream (after
    /// the trailers, if any).
    pub(super) fn body_piece(
        &mut self,
        id: u64,
        bytes: &mut Vec<u8>,
        pulled: Pulled,
        trailers: Vec<(String, Vec<u8>)>,
    ) {
        let Some(s) = self.requests.get_mut(&id) else {
            return;
        };
        s.pulling = false;
        if pulled == Pulled::Failed {
            // The head promised a length the body cannot meet: the client must not take
            // what came for complete.
            s.answer = Answer::Done;
            self.actions.push_back(Action::Reset {
                stream: id,
                code: ErrorCode::H3_INTERNAL_ERROR,
            });
            self.stream_done(id);
            return;
        }
        let mut out = Vec::with_capacity(bytes.len() + 8);
        if !bytes.is_empty() {
            frame::write_data_header(bytes.len() as u64, &mut out);
            out.append(bytes);
        }
        let end = pulled == Pulled::Ended;
        if !trailers.is_empty() {
            // A producer's trailers can be there before its last bytes are taken (it ended
            // after pushing them): kept for the end, whichever pull brought them.
            s.trailers = trailers;
        }
        match (pulled, &mut s.source) {
            (Pulled::Ended, _) => s.source = None,
            (Pulled::Empty, Some(Source::Stream { parked })) => *parked = true,
            _ => {}
        }
        if end {
            s.answer = Answer::Done;
            let trailers = std::mem::take(&mut s.trailers);
            if !trailers.is_empty() {
                answer::trailer_section(&mut self.encoder, id, &trailers, &mut self.section);
                frame::write_header(kind::HEADERS, self.section.len() as u64, &mut out);
                out.extend_from_slice(&self.section);
            }
        }
        if !out.is_empty() || end {
            self.send(id, out, end);
        }
        if end {
            self.stream_done(id);
        }
    }

    /// The answer is complete: the stream is forgotten, and if the client is still sending,
    /// asked to stop (RFC 9114 §4.1: "the server MAY send a STOP_SENDING frame with error
    /// code H3_NO_ERROR").
    pub(super) fn stream_done(&mut self, id: u64) {
        let Some(s) = self.requests.get(&id) else {
            return;
        };
        if s.recv != Recv::Closed {
            self.actions.push_back(Action::Stop {
                stream: id,
                code: ErrorCode::H3_NO_ERROR,
            });
            if s.blocked {
                self.decoder.cancel_stream(id);
            }
        }
        if let Some(feed) = &s.feed {
            feed.abort();
        }
        self.forget(id);
    }
}
