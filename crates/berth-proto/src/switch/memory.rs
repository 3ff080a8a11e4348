//! The step loop in memory: a driver with no sockets, no clock and no threads, for the vector
//! tests and the fuzz targets. Bytes go in with [`Pump::feed`]; what the connection writes
//! collects in [`Pump::written`]; jobs run inline at once, or are held until [`Pump::finish`]
//! to play a slow worker; a file body comes from a [`FileSource`].
//!
//! It also checks what every driver relies on, and reports a breach as a [`Violation`]
//! instead of going on: nothing is written after `Close`; nothing is answered while a job is
//! out; `Close` means the connection is closed, `Offload` that it waits and `Switched` that it
//! was handed over; `Flush` makes progress (no livelock). The socket pump
//! (`berth::drive::pump`) acts on the same actions with real I/O and trusts these rules.
//!
//! ```text
//!   feed(bytes) ─> Core::process ─> Action ─┬─ Read     : wait for more bytes
//!                      ^                     ├─ Flush    : move output to `written`, again
//!                      │                     ├─ Offload  : job.run() (or hold) -> complete
//!                      │                     ├─ Open     : FileSource::open -> Core::file
//!                      ├─────────────────────┼─ Body     : FileSource::read -> `written`
//!                      │                     │             (or kept for its stream), again
//!                      ├─────────────────────┼─ Pull     : a kept body's next piece -> pulled
//!                      ├─────────────────────┼─ Stream   : Streamed::take -> `written`, again
//!                      └─────────────────────┼─ Switched : the rest is the new protocol's, again
//!                                            └─ Close    : closed; later input ignored
//! ```

use std::fmt;
use std::time::Instant;

use super::{Action, Core};
use crate::h2;
use crate::http::{
    BodyEncoder, Context, Encode, FileError, FileMeta, FileRequest, Handler, Job, Limits, Session,
    Streamed, Taken,
};

/// A kept body's encoder is fed this much of the file at a time, as a driver's is.
const ENCODE_PIECE: usize = 16 * 1024;

/// `Flush` steps in a row with nothing written before the pump calls it a livelock.
const SPIN_LIMIT: usize = 1_000;

/// Where a pumped session's files come from.
pub trait FileSource {
    /// What opening the file `req` names finds.
    fn open(&mut self, req: &FileRequest) -> Result<FileMeta, FileError>;
    /// Appends `len` bytes of the file last opened, from `offset`, to `out`.
    fn read(&mut self, offset: u64, len: u64, out: &mut Vec<u8>);
}

/// No files at all: every file request finds nothing (404).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFiles;

impl FileSource for NoFiles {
    fn open(&mut self, _: &FileRequest) -> Result<FileMeta, FileError> {
        Err(FileError::NotFound)
    }
    fn read(&mut self, _: u64, _: u64, _: &mut Vec<u8>) {
        unreachable!("no file is ever opened")
    }
}

/// A rule of the step protocol the session broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Violation {}

/// One connection's session and handler, driven in memory.
pub struct Pump<H: Handler> {
    core: Core,
    handler: H,
    limits: Limits,
    date: Vec<u8>,
    input: Vec<u8>,
    /// The buffer lent to the session; moved to `written` after every call.
    out: Vec<u8>,
    written: Vec<u8>,
    /// A `Close` action was returned.
    closed: bool,
    /// Hold offloaded jobs until [`Pump::finish`] instead of running them at once.
    hold_jobs: bool,
    held: Option<H::Job>,
    /// Bodies kept for their streams until pulled ([`Action::Body`] where bodies are pulled).
    kept: KeptBodies<u64>,
}

/// A body kept for its stream where bodies are pulled ([`Action::Body`], [`Action::Stream`],
/// [`Action::Pull`]), in memory, for drivers in memory (this pump, the HTTP/2 vector tests): a
/// file's range read whole (a copy stands for the open file), with how much of it was pulled
/// and its encoder; or a producer.
#[derive(Debug)]
pub enum KeptBody {
    /// A file's range.
    Range {
        /// The range's bytes.
        plain: Vec<u8>,
        /// How many were pulled.
        at: usize,
        /// Its encoder, for an answer compressed on the fly.
        encoder: Option<BodyEncoder>,
    },
    /// A streamed reply's producer.
    Producer(Streamed),
}

impl KeptBody {
    /// The range `plain`, encoded on the way if `encode` says so.
    pub fn new(plain: Vec<u8>, encode: Option<Encode>) -> KeptBody {
        let len = plain.len() as u64;
        KeptBody::Range {
            plain,
            at: 0,
            encoder: encode.map(|e| BodyEncoder::new(e, len)),
        }
    }

    /// The next piece for a pull of at most `max` plain bytes: plain bytes, an encoder's
    /// output for one piece of the file (the trailer with the last), or what a producer
    /// pushed.
    pub fn pull(&mut self, max: usize, out: &mut Vec<u8>) -> h2::Pulled {
        let (plain, at, encoder) = match self {
            KeptBody::Producer(streamed) => {
                return match streamed.take(out, max) {
                    Taken::Bytes(_) => h2::Pulled::More,
                    Taken::Empty => h2::Pulled::Empty,
                    Taken::Ended => h2::Pulled::Ended,
                    Taken::Aborted => h2::Pulled::Failed,
                }
            }
            KeptBody::Range { plain, at, encoder } => (plain, at, encoder),
        };
        let rest = &plain[*at..];
        let Some(encoder) = encoder else {
            let n = rest.len().min(max);
            out.extend_from_slice(&rest[..n]);
            *at += n;
            return if *at == plain.len() {
                h2::Pulled::Ended
            } else {
                h2::Pulled::More
            };
        };
        let n = rest.len().min(ENCODE_PIECE);
        if encoder.feed(&rest[..n], out).is_err() {
            return h2::Pulled::Failed;
        }
        *at += n;
        if *at < plain.len() {
            return h2::Pulled::More;
        }
        match encoder.finish(out) {
            Ok(()) => h2::Pulled::Ended,
            Err(_) => h2::Pulled::Failed,
        }
    }

    /// A producer's trailers, once it has ended (none for a file).
    pub fn take_trailers(&self) -> Vec<(String, Vec<u8>)> {
        match self {
            KeptBody::Producer(streamed) => streamed.take_trailers(),
            KeptBody::Range { .. } => Vec::new(),
        }
    }
}

/// What a pull of a [`KeptBody`] found: the bytes, what they are, and a producer's trailers.
pub type PulledPiece = (Vec<u8>, h2::Pulled, Vec<(String, Vec<u8>)>);

/// The bodies a driver in memory keeps, by stream (`u32` for HTTP/2, `u64` for HTTP/3's QUIC
/// streams): what every such driver does with [`Action::Body`], [`Action::Stream`] and
/// [`Action::Pull`], once.
#[derive(Debug)]
pub struct KeptBodies<S>(Vec<(S, KeptBody)>);

impl<S> Default for KeptBodies<S> {
    fn default() -> Self {
        KeptBodies(Vec::new())
    }
}

impl<S: Copy + PartialEq> KeptBodies<S> {
    /// Keeps `body` for `stream`.
    pub fn keep(&mut self, stream: S, body: KeptBody) {
        self.0.push((stream, body));
    }

    /// Drops the bodies whose streams no longer take them (`pulls`: the protocol's own
    /// answer), then reads the next piece of `stream`'s: `None` if none is kept for it.
    pub fn pull(
        &mut self,
        stream: S,
        max: usize,
        pulls: impl Fn(S) -> bool,
    ) -> Option<PulledPiece> {
        self.0.retain(|(s, _)| pulls(*s));
        let (_, kept) = self.0.iter_mut().find(|(s, _)| *s == stream)?;
        let mut bytes = Vec::new();
        let pulled = kept.pull(max, &mut bytes);
        Some((bytes, pulled, kept.take_trailers()))
    }
}

impl<H: Handler> Pump<H> {
    /// A new connection served by `handler` under `limits`, with `date` as every response's
    /// `Date`. With `hold_jobs`, offloaded jobs wait for [`Pump::finish`].
    pub fn new(handler: H, limits: Limits, date: &[u8], hold_jobs: bool) -> Self {
        Pump {
            core: Core::new(),
            handler,
            limits,
            date: date.to_vec(),
            input: Vec::new(),
            out: Vec::new(),
            written: Vec::new(),
            closed: false,
            hold_jobs,
            held: None,
            kept: KeptBodies::default(),
        }
    }

    /// Everything the session has written so far.
    pub fn written(&self) -> &[u8] {
        &self.written
    }

    /// Takes what the session has written so far.
    pub fn take_written(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.written)
    }

    /// Input received and not yet consumed by the session.
    pub fn unread(&self) -> &[u8] {
        &self.input
    }

    /// A `Close` action was returned: the connection is over.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The HTTP/1.1 session, for checks on its state (`None` once the connection speaks
    /// another protocol).
    pub fn session(&self) -> Option<&Session> {
        self.core.session()
    }

    /// The connection waits for a job's reply (HTTP/1.1 answers in order).
    pub fn is_waiting(&self) -> bool {
        self.core.session().is_none_or(|s| s.is_waiting())
    }

    fn process(&mut self) -> Action<H::Job> {
        let cx = Context {
            limits: &self.limits,
            date: &self.date,
            stream_bodies: false,
            now: Instant::now(),
            alt_svc: None,
        };
        self.core
            .process(&mut self.input, &mut self.out, &cx, &mut self.handler)
    }

    fn complete(&mut self, job: H::Job) -> Action<H::Job> {
        let reply = job.run();
        let cx = Context {
            limits: &self.limits,
            date: &self.date,
            stream_bodies: false,
            now: Instant::now(),
            alt_svc: None,
        };
        self.core.complete(
            0,
            reply,
            &mut self.input,
            &mut self.out,
            &cx,
            &mut self.handler,
        )
    }

    /// Moves what the session wrote to `written`; returns how many bytes that was.
    fn collect(&mut self) -> usize {
        let n = self.out.len();
        self.written.append(&mut self.out);
        n
    }

    /// Bytes arrive from the peer; runs the session until it wants more.
    pub fn feed(&mut self, bytes: &[u8], files: &mut dyn FileSource) -> Result<(), Violation> {
        self.input.extend_from_slice(bytes);
        if self.closed {
            // After `Close` a driver does not read; one that still calls `process` must get
            // `Close` again and no output.
            let action = self.process();
            if self.collect() != 0 || !matches!(action, Action::Close) {
                return Err(Violation(format!(
                    "after Close, process gave {} and wrote bytes",
                    action_name(&action)
                )));
            }
            return Ok(());
        }
        if self.held.is_some() {
            // A job is outstanding: nothing may be answered until it completes.
            let action = self.process();
            let n = self.collect();
            if n != 0 || !matches!(action, Action::Read) || !self.is_waiting() {
                return Err(Violation(format!(
                    "while a job was outstanding, process gave {} and wrote {n} byte(s)",
                    action_name(&action)
                )));
            }
            return Ok(());
        }
        let action = self.process();
        self.drive(action, files)
    }

    /// All input is in: runs a held job, if any (and any job its completion leads to).
    pub fn finish(&mut self, files: &mut dyn FileSource) -> Result<(), Violation> {
        self.hold_jobs = false;
        if let Some(job) = self.held.take() {
            let action = self.complete(job);
            self.drive(action, files)?;
        }
        Ok(())
    }

    /// Does what `action` asks, as a driver would, until the connection wants more input.
    fn drive(
        &mut self,
        mut action: Action<H::Job>,
        files: &mut dyn FileSource,
    ) -> Result<(), Violation> {
        let mut spins = 0;
        loop {
            let wrote = self.collect();
            match action {
                Action::Read => return Ok(()),
                Action::Close => {
                    if !self.core.is_closed() {
                        return Err(Violation(
                            "Action::Close but the session is not closed".into(),
                        ));
                    }
                    self.closed = true;
                    return Ok(());
                }
                Action::Flush => {
                    spins = if wrote == 0 { spins + 1 } else { 0 };
                    if spins > SPIN_LIMIT {
                        return Err(Violation(format!(
                            "livelock: {SPIN_LIMIT} Flush steps in a row with no output"
                        )));
                    }
                    action = self.process();
                }
                Action::Open { stream, request } => {
                    let found = files.open(&request);
                    let cx = Context {
                        limits: &self.limits,
                        date: &self.date,
                        stream_bodies: false,
                        now: Instant::now(),
                        alt_svc: None,
                    };
                    action = self.core.file(
                        stream,
                        &request,
                        found.as_ref().map_err(|e| *e),
                        &mut self.input,
                        &mut self.out,
                        &cx,
                        &mut self.handler,
                    );
                }
                Action::Body {
                    stream,
                    offset,
                    len,
                    encode,
                } if self.core.pulls_bodies() => {
                    let mut plain = Vec::new();
                    files.read(offset, len, &mut plain);
                    self.kept.keep(stream, KeptBody::new(plain, encode));
                    action = self.process();
                }
                Action::Pull { stream, max } => {
                    let core = &self.core;
                    let Some((mut bytes, pulled, trailers)) =
                        self.kept.pull(stream, max, |s| core.pulls(s))
                    else {
                        return Err(Violation(format!(
                            "Pull for stream {stream}, which has no body kept"
                        )));
                    };
                    let cx = Context {
                        limits: &self.limits,
                        date: &self.date,
                        stream_bodies: false,
                        now: Instant::now(),
                        alt_svc: None,
                    };
                    action = self.core.pulled(
                        stream,
                        &mut bytes,
                        pulled,
                        trailers,
                        &mut self.input,
                        &mut self.out,
                        &cx,
                        &mut self.handler,
                    );
                }
                Action::Body {
                    offset,
                    len,
                    encode: None,
                    ..
                } => {
                    files.read(offset, len, &mut self.written);
                    action = self.process();
                }
                Action::Body {
                    offset,
                    len,
                    encode: Some(encode),
                    ..
                } => {
                    let mut plain = Vec::new();
                    files.read(offset, len, &mut plain);
                    let mut body = BodyEncoder::new(encode, len);
                    let encoded = body.feed(&plain, &mut self.written);
                    encoded.and_then(|()| body.finish(&mut self.written)).ok();
                    action = self.process();
                }
                Action::Stream { stream, streamed } if self.core.pulls_bodies() => {
                    // In memory nothing wakes a parked stream: the job already ran, so its
                    // body is all pushed (one that is not has stalled, and stays parked).
                    self.kept.keep(stream, KeptBody::Producer(streamed));
                    action = self.process();
                }
                Action::Stream { streamed, .. } => {
                    // In memory the producer is a job that already ran: its body is all
                    // pushed, and one that is not has stalled (nothing here waits for a
                    // thread; a blocking driver parks its own, see `berth::drive::blocking`).
                    loop {
                        match streamed.take(&mut self.written, usize::MAX) {
                            Taken::Bytes(_) => {}
                            Taken::Ended => break,
                            Taken::Aborted => {
                                return Err(Violation("a streamed body was aborted".into()));
                            }
                            Taken::Empty => {
                                return Err(Violation("a streamed body stalled".into()));
                            }
                        }
                    }
                    action = self.process();
                }
                Action::Switched => {
                    if !self.core.is_upgraded() {
                        return Err(Violation(
                            "Action::Switched but the session was not handed over".into(),
                        ));
                    }
                    action = self.process();
                }
                Action::Offload { job, .. } => {
                    if !self.is_waiting() {
                        return Err(Violation(
                            "Action::Offload but the session is not waiting".into(),
                        ));
                    }
                    if self.hold_jobs {
                        self.held = Some(job);
                        return Ok(());
                    }
                    action = self.complete(job);
                }
            }
        }
    }
}

/// An action's name, for violations (jobs need not be `Debug`).
fn action_name<J>(action: &Action<J>) -> &'static str {
    match action {
        Action::Read => "Read",
        Action::Flush => "Flush",
        Action::Offload { .. } => "Offload",
        Action::Open { .. } => "Open",
        Action::Body { .. } => "Body",
        Action::Pull { .. } => "Pull",
        Action::Stream { .. } => "Stream",
        Action::Switched => "Switched",
        Action::Close => "Close",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{Handled, Reply, Request, Response};
    use crate::upgrade::{Echo, Switch};

    struct Upgrader;
    struct NoJob;
    impl Job for NoJob {
        fn run(self) -> Reply {
            Reply::failed()
        }
    }
    impl Handler for Upgrader {
        type Job = NoJob;
        fn handle(&mut self, _: &Request<'_>, _: &mut Response<'_>) -> Handled<NoJob> {
            Handled::Upgrade(Switch {
                protocol: "echo",
                headers: vec![("X-Tunnel".into(), "yes".into())],
                session: Box::new(Echo),
            })
        }
    }

    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

    /// The seam in memory: 101, then the bytes behind the request and every later byte go to
    /// the upgraded protocol, whole or split anywhere.
    #[test]
    fn an_upgrade_hands_the_rest_of_the_input_over() {
        let input: &[u8] =
            b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c, echo\r\n\r\nfirst";
        for split in 1..input.len() {
            let mut p = Pump::new(Upgrader, Limits::default(), DATE, false);
            p.feed(&input[..split], &mut NoFiles).unwrap();
            p.feed(&input[split..], &mut NoFiles).unwrap();
            p.feed(b" then more", &mut NoFiles).unwrap();
            let text = String::from_utf8(p.take_written()).unwrap();
            assert!(
                text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
                "{text}"
            );
            assert!(
                text.contains("\r\nUpgrade: echo\r\nX-Tunnel: yes\r\n\r\n"),
                "{text}"
            );
            assert!(
                text.ends_with("\r\n\r\nfirst then more"),
                "split {split}: {text}"
            );
            assert!(p.core.is_upgraded());
        }
    }

    /// A handler may only switch a request that asked for it.
    #[test]
    fn an_upgrade_nobody_asked_for_is_400() {
        for head in [
            "GET /t HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /t HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\n\r\n",
            "GET /t HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET /t HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n",
        ] {
            let mut p = Pump::new(Upgrader, Limits::default(), DATE, false);
            p.feed(head.as_bytes(), &mut NoFiles).unwrap();
            let text = String::from_utf8(p.take_written()).unwrap();
            assert!(text.starts_with("HTTP/1.1 400 "), "{head:?}: {text}");
            assert!(!p.core.is_upgraded());
        }
    }

    struct LateUpgrader;
    struct SwitchJob;
    impl Job for SwitchJob {
        fn run(self) -> Reply {
            Reply::switch(Switch {
                protocol: "echo",
                headers: vec![("X-Late".into(), "yes".into())],
                session: Box::new(Echo),
            })
        }
    }
    impl Handler for LateUpgrader {
        type Job = SwitchJob;
        fn handle(&mut self, _: &Request<'_>, _: &mut Response<'_>) -> Handled<SwitchJob> {
            Handled::Offload(SwitchJob)
        }
    }

    /// A job may switch too (`Reply::switch`): 101 and the handover for a request that asked
    /// to switch, 500 for one that did not (the job's mistake, never a switch by surprise).
    #[test]
    fn a_job_switches_a_request_that_asked_and_only_that() {
        let asked =
            "GET /t HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nfirst";
        let mut p = Pump::new(LateUpgrader, Limits::default(), DATE, false);
        p.feed(asked.as_bytes(), &mut NoFiles).unwrap();
        p.feed(b" then more", &mut NoFiles).unwrap();
        let text = String::from_utf8(p.take_written()).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
            "{text}"
        );
        assert!(
            text.contains("\r\nUpgrade: echo\r\nX-Late: yes\r\n\r\n"),
            "{text}"
        );
        assert!(text.ends_with("\r\n\r\nfirst then more"), "{text}");
        assert!(p.core.is_upgraded());
        for head in [
            "GET /t HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /t HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n",
            "HEAD /t HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n",
        ] {
            let mut p = Pump::new(LateUpgrader, Limits::default(), DATE, false);
            p.feed(head.as_bytes(), &mut NoFiles).unwrap();
            let text = String::from_utf8(p.take_written()).unwrap();
            assert!(text.starts_with("HTTP/1.1 500 "), "{head:?}: {text}");
            assert!(!p.core.is_upgraded());
        }
    }

    /// A job whose streamed reply declares its length: `/N/TEXT` answers TEXT (its first byte
    /// as the reply's first bytes, the rest pushed) with length N.
    struct Sized;
    struct SizedJob(u64, Vec<u8>);
    impl Job for SizedJob {
        fn run(self) -> Reply {
            let (writer, stream) = crate::http::body_stream();
            let (first, rest) = self.1.split_at(self.1.len().min(1));
            writer.push(rest.to_vec()).unwrap();
            writer.end();
            Reply::streamed(200, first.to_vec(), stream).with_length(self.0)
        }
    }
    impl Handler for Sized {
        type Job = SizedJob;
        fn handle(&mut self, req: &Request<'_>, _: &mut Response<'_>) -> Handled<SizedJob> {
            let mut parts = req.path.trim_start_matches('/').splitn(2, '/');
            let length = parts.next().unwrap().parse().unwrap();
            Handled::Offload(SizedJob(
                length,
                parts.next().unwrap_or("").as_bytes().to_vec(),
            ))
        }
    }

    /// A declared length is the head's Content-Length (no chunked coding) and the connection
    /// goes on; a HEAD gets the head alone; a body that ends short of it is a violation (the
    /// driver closes the connection) after the head and the bytes sent.
    #[test]
    fn a_streamed_reply_of_a_declared_length() {
        let mut p = Pump::new(Sized, Limits::default(), DATE, false);
        p.feed(b"GET /5/hello HTTP/1.1\r\nHost: x\r\n\r\nHEAD /100/hello HTTP/1.1\r\nHost: x\r\n\r\nGET /2/hi HTTP/1.0\r\n\r\n", &mut NoFiles).unwrap();
        let text = String::from_utf8(p.take_written()).unwrap();
        let answers: Vec<_> = text.split("HTTP/1.1 200 OK\r\n").skip(1).collect();
        assert_eq!(answers.len(), 3, "{text}");
        assert!(answers[0].contains("\r\nContent-Length: 5\r\n"), "{text}");
        assert!(answers[0].ends_with("\r\n\r\nhello"), "{text}");
        assert!(answers[1].contains("\r\nContent-Length: 100\r\n"), "{text}");
        assert!(answers[1].ends_with("\r\n\r\n"), "{text}");
        assert!(answers[2].contains("\r\nContent-Length: 2\r\n"), "{text}");
        assert!(answers[2].ends_with("\r\n\r\nhi"), "{text}");
        assert!(!text.contains("chunked"), "{text}");
        let mut p = Pump::new(Sized, Limits::default(), DATE, false);
        assert!(p
            .feed(b"GET /100/hello HTTP/1.1\r\nHost: x\r\n\r\n", &mut NoFiles)
            .is_err());
        let text = String::from_utf8(p.take_written()).unwrap();
        assert!(text.contains("\r\nContent-Length: 100\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nhello"), "{text}");
    }
}
