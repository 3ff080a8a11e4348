//! The hand-off to the exchange: a stream's whole request goes to the handler
//! ([`exchange::ask`]), or waits its turn while the connection has its share of jobs or files
//! out; what comes back (a reply, a file) is answered through HTTP/2's head sink ([`Hpack`])
//! and queued on the stream for the windows.

use super::*;

impl Connection {
    /// Files held for this connection's answers: being opened, or being sent.
    pub(super) fn files_held(&self) -> usize {
        self.streams
            .values()
            .filter(|s| {
                s.answer == Answer::Opening || (!s.reset && matches!(s.source, Some(Source::File)))
            })
            .count()
    }

    /// A stream's request is whole: the handler is asked now or, while the connection has
    /// its share of jobs out, the request waits in its stream for its turn
    /// ([`Connection::unpark`]), rather than one more job in the workers' shared queue.
    #[allow(clippy::type_complexity)]
    pub(super) fn request_ready<H: Handler>(
        &mut self,
        id: u32,
        head: ReqHead,
        body: Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Out<H::Job>> {
        if self.at_job_share::<H>(cx) {
            if let Some(s) = self.streams.get_mut(&id) {
                s.head = Some(Box::new(head));
                s.body = body;
                s.answer = Answer::Queued;
                self.waiting += 1;
            }
            return None;
        }
        self.dispatch(id, &head, &body, None, output, cx, handler)
    }

    /// The connection has as many jobs out as it may ([`Limits::jobs_per_connection`](crate::http::Limits);
    /// deferred jobs hold no worker and are not bounded here).
    pub(super) fn at_job_share<H: Handler>(&self, cx: &Context<'_>) -> bool {
        let share = cx.limits.jobs_per_connection.max(1);
        // Jobs are out for streams only: with no more streams than the share (the common
        // case), the streams need not be counted on every request.
        !<H::Job as Job>::DEFERRED && self.streams.len() > share && self.jobs_out() >= share
    }

    /// Whether stream `id`'s file may be opened now: the connection holds fewer files than
    /// its share ([`Limits::files_per_connection`](crate::http::Limits)) and the stream can send (a window open
    /// on it and on the connection; an answer without a body needs none).
    pub(super) fn may_open(&self, id: u32, cx: &Context<'_>) -> bool {
        let Some(s) = self.streams.get(&id) else {
            return false;
        };
        let window = s.head_only || (s.send_window > 0 && self.send_window > 0);
        let share = cx.limits.files_per_connection.max(1);
        // As for jobs: no more streams than the share, no counting.
        window && (self.streams.len() <= share || self.files_held() < share)
    }

    /// Streams that waited their turn go on, lowest id first, as far as the connection's
    /// shares allow: a queued request is handed to the handler, a queued file is opened.
    /// Returns the first piece of work for the driver.
    #[allow(clippy::type_complexity)]
    pub(super) fn unpark<H: Handler>(
        &mut self,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Out<H::Job>> {
        while self.waiting > 0 {
            let jobs_free = !self.at_job_share::<H>(cx);
            let next = self
                .streams
                .iter()
                .find(|(&id, s)| match s.answer {
                    Answer::Queued => jobs_free,
                    Answer::FileQueued => self.may_open(id, cx),
                    _ => false,
                })
                .map(|(&id, s)| (id, s.answer));
            let (id, answer) = next?;
            self.waiting -= 1;
            let s = self.streams.get_mut(&id)?;
            if answer == Answer::FileQueued {
                s.answer = Answer::Opening;
                let request = s.file.take()?;
                return Some(Out::Open(id, *request));
            }
            s.answer = Answer::Pending;
            let head = s.head.take()?;
            let body = std::mem::take(&mut s.body);
            if let Some(out) = self.dispatch(id, &head, &body, None, output, cx, handler) {
                return Some(out);
            }
        }
        None
    }

    /// Asks the handler for a stream's answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dispatch<H: Handler>(
        &mut self,
        id: u32,
        head: &ReqHead,
        body: &[u8],
        stream: Option<BodyStream>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Out<H::Job>> {
        let head_only = head.head_only();
        // The answer's body; its head goes straight into the header block (`Hpack`).
        let mut scratch = Vec::new();
        let mut sink = Hpack {
            encoder: &mut self.encoder,
            block: &mut self.answer_block,
        };
        let mut res = Response {
            out: &mut scratch,
            sink: &mut sink,
            stamp: cx.stamp(),
            keep_alive: true,
            head_only,
            sent: None,
        };
        let outcome = head.with_request(body, self.peer, |req| {
            exchange::ask(handler, req, stream, &mut res)
        });
        match outcome {
            Outcome::Job(job) => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.answer = Answer::Job;
                }
                return Some(Out::Job(id, job));
            }
            Outcome::File(request) => {
                // The driver opens it (under its root) and hands it back to `file`; or it
                // waits its turn (`unpark`), holding no descriptor meanwhile.
                let may_open = self.may_open(id, cx);
                if let Some(s) = self.streams.get_mut(&id) {
                    if may_open {
                        s.answer = Answer::Opening;
                        return Some(Out::Open(id, request));
                    }
                    s.answer = Answer::FileQueued;
                    s.file = Some(Box::new(request));
                    self.waiting += 1;
                }
                return None;
            }
            Outcome::Upgrade(_) => {
                // HTTP/2 has no Upgrade (RFC 9113 §8.6): the request cannot have asked for it.
                self.answer_status(
                    id,
                    400,
                    "this resource must be asked for with an Upgrade",
                    output,
                    cx,
                    handler,
                );
            }
            Outcome::Answered(status) => {
                self.send_answer(id, status, scratch, None, output);
                handler.on_response(status);
            }
            Outcome::Unanswered => {
                let (status, why) = Outcome::<H::Job>::UNANSWERED;
                self.answer_status(id, status, why, output, cx, handler);
            }
        }
        None
    }

    /// Answers with a status and a short text body.
    pub(super) fn answer_status<H: Handler>(
        &mut self,
        id: u32,
        status: u16,
        why: &str,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) {
        if !self.streams.contains_key(&id) {
            return;
        }
        let mut sink = Hpack {
            encoder: &mut self.encoder,
            block: &mut self.answer_block,
        };
        let mut bytes = Vec::with_capacity(why.len() + 1);
        exchange::refuse(&mut bytes, &mut sink, status, why, true, false, cx.stamp());
        self.send_answer(id, status, bytes, None, output);
        handler.on_response(status);
    }

    /// Hands what opening a stream's file found to the connection, which answers it: the
    /// head now, then [`Action::Body`] if the answer takes bytes from the file (the driver keeps
    /// it and is asked for them as the windows open, [`Action::Pull`]); else it goes on as
    /// [`Connection::process`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn file<H: Handler>(
        &mut self,
        stream: u32,
        request: &FileRequest,
        found: Result<&FileMeta, FileError>,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if self.awaited(stream) {
            if let Some(body) = self.answer_file(stream, request, found, output, cx, handler) {
                return body;
            }
        }
        self.process(input, output, cx, handler)
    }

    /// Whether `stream` still waits for what the driver brings back (a reply, a file); one
    /// reset meanwhile is dropped now.
    pub(super) fn awaited(&mut self, stream: u32) -> bool {
        match self.streams.get(&stream) {
            Some(s) if s.reset => {
                self.streams.remove(&stream);
                false
            }
            Some(s) => matches!(s.answer, Answer::Job | Answer::Opening),
            None => false,
        }
    }

    /// The same answer HTTP/1.1 gives ([`files::write_answer`]: validators, ranges, 304,
    /// 416, codings), its head made HEADERS; [`Action::Body`] if bytes of the file follow.
    pub(super) fn answer_file<H: Handler, J>(
        &mut self,
        id: u32,
        request: &FileRequest,
        found: Result<&FileMeta, FileError>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Action<J>> {
        if !self.streams.contains_key(&id) {
            return None;
        }
        let mut bytes = Vec::new();
        let mut sink = Hpack {
            encoder: &mut self.encoder,
            block: &mut self.answer_block,
        };
        let (status, send, _) =
            files::write_answer(&mut bytes, &mut sink, request, found, true, cx.stamp());
        let source = send.as_ref().map(|_| Source::File);
        let pulled = self.send_answer(id, status, bytes, source, output);
        handler.on_response(status);
        let send = send.filter(|_| pulled)?;
        Some(Action::Body {
            stream: id,
            offset: send.offset,
            len: send.len,
            encode: send.encode,
        })
    }

    /// Writes a stream's HEADERS (the block [`Hpack`] just wrote into `answer_block`) and
    /// queues its body: `body`, then what `source` yields. True if a file source was kept
    /// (the answer has a body): the driver is then told of it ([`Action::Body`]).
    pub(super) fn send_answer(
        &mut self,
        id: u32,
        status: u16,
        body: Vec<u8>,
        source: Option<Source>,
        output: &mut Vec<u8>,
    ) -> bool {
        let Some(s) = self.streams.get_mut(&id) else {
            return false;
        };
        let no_body = s.head_only || status < 200 || status == 204 || status == 304;
        let source = if no_body { None } else { source };
        let end = (no_body || body.is_empty()) && source.is_none();
        frame::write_headers(output, id, &self.answer_block, end, self.peer_max_frame);
        s.out = if no_body { Vec::new() } else { body };
        s.out_pos = 0;
        s.out_end = source.is_none();
        let pulled = source.is_some();
        s.source = source;
        s.answer = if end { Answer::Done } else { Answer::Sending };
        if end {
            self.stream_done(id, output);
        }
        pulled
    }

    /// The answer is complete: the stream closes, or, while the client is still sending,
    /// is reset with NO_ERROR so it stops (RFC 9113 §8.1).
    pub(super) fn stream_done(&mut self, id: u32, output: &mut Vec<u8>) {
        let Some(s) = self.streams.get(&id) else {
            return;
        };
        if s.recv_closed {
            self.streams.remove(&id);
            remember(&mut self.closed, id);
        } else {
            frame::write_rst(output, id, ErrorCode::NO_ERROR);
            self.forget(id);
        }
    }

    /// Hands a job's reply for `stream` to the connection, which answers it (if the stream
    /// is still there) and goes on as [`Connection::process`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn complete<H: Handler>(
        &mut self,
        stream: u32,
        reply: Reply,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if self.awaited(stream) {
            if let Some(body) = self.answer_reply(stream, reply, output, cx, handler) {
                return body;
            }
        }
        self.process(input, output, cx, handler)
    }

    /// Answers a job's reply; [`Action::Body`] if its body is a file the driver took from it,
    /// [`Action::Stream`] if a producer streams it.
    pub(super) fn answer_reply<H: Handler, J>(
        &mut self,
        id: u32,
        mut reply: Reply,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Action<J>> {
        if reply.switch.is_some() {
            let (status, why) = exchange::CANNOT_SWITCH;
            self.answer_status(id, status, why, output, cx, handler);
            return None;
        }
        if let Some(file) = reply.file.take() {
            // A body from a file the job opened: pulled by the driver as the windows open, as
            // a `/files` answer's (`answer_file`); the driver took the file from the reply.
            let file = *file;
            let mut bytes = Vec::new();
            let mut sink = Hpack {
                encoder: &mut self.encoder,
                block: &mut self.answer_block,
            };
            let status = exchange::reply(
                &mut bytes,
                &mut sink,
                &reply,
                Some(Some(file.len)),
                true,
                false,
                cx.stamp(),
            );
            let source = (file.len > 0).then_some(Source::File);
            let pulled = self.send_answer(id, status, bytes, source, output);
            handler.on_response(status);
            return pulled.then_some(Action::Body {
                stream: id,
                offset: file.offset,
                len: file.len,
                encode: None,
            });
        }
        // Written as HTTP/1.1 writes it (`Session::answer`, `Session::stream`): a streamed
        // body's length only if the reply declared one.
        let mut bytes = Vec::with_capacity(reply.body.len());
        let mut sink = Hpack {
            encoder: &mut self.encoder,
            block: &mut self.answer_block,
        };
        let streamed = reply.stream.is_some().then_some(reply.length);
        let status = exchange::reply(
            &mut bytes,
            &mut sink,
            &reply,
            streamed,
            true,
            false,
            cx.stamp(),
        );
        if reply.stream.is_some() {
            bytes.extend_from_slice(&reply.body);
        }
        let source = reply
            .stream
            .as_ref()
            .map(|_| Source::Stream { parked: false });
        let pulled = self.send_answer(id, status, bytes, source, output);
        handler.on_response(status);
        // The producer is the driver's to hold, read and be woken by; dropped (the producer
        // told the client is gone) if the answer has no body.
        let stream = reply.stream.filter(|_| pulled)?;
        Some(Action::Stream {
            stream: id,
            streamed: Streamed::new(stream, false, false),
        })
    }
}
