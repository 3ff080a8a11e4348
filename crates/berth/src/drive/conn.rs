//! One non-blocking connection, as the `evloop` and `actor` models run it: its socket, its HTTP
//! session and, while bytes are in flight, its buffers. [`Conn::pump`] moves bytes as far as
//! readiness (and the caller's budget) allows and says what the connection needs next.
//!
//! What a connection cannot do itself it hands to its owner as a [`Fate`]: a job to run, or a
//! file to open. The event loop opens files itself, at once (an `openat2` and an `fstat`:
//! microseconds for a file in the page cache, as nginx does without its thread pool); the actor
//! model asks its Files actor. The answer comes back through [`Conn::complete`] or
//! [`Conn::file_opened`]. A file's bytes go out with `sendfile(2)` as the socket accepts them,
//! straight from the page cache: the connection holds the open file and an offset, never the
//! file's bytes.
//!
//! The budget counts socket operations (reads, `sendfile` calls) per pump. The event loop gives
//! an unlimited one; an actor gives a small one and, told [`Fate::Again`], sends itself a
//! message to go on later, so that one busy connection cannot hold a scheduler thread.

use std::fs::File;
use std::io;

use std::time::Instant;

use berth_proto::http::{
    Context, FileError, FileRequest, Handler, Limits, Phase, Reply, Session, Step,
};

use berth_proto::upgrade::{Flow, Handover, Upgraded};

use super::files::{self, OpenFile};
use super::Timeouts;
use crate::net::Evented;
use crate::rt::BufPool;
use crate::stats::Stats;

/// What the owner lends a connection while it runs.
pub(super) struct Env<'a, H: Handler> {
    pub handler: &'a mut H,
    pub pool: &'a mut BufPool,
    pub limits: &'a Limits,
    pub date: &'a [u8],
    /// Largest the input buffer may grow to: a maximal head and body plus one buffer of slack.
    pub max_input: usize,
    /// Socket operations (reads, `sendfile` calls) this pump may still do.
    pub budget: usize,
    /// Where a job dropped with its departed peer is counted.
    pub stats: &'a Stats,
}

/// What a connection needs after [`Conn::pump`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fate<J> {
    /// Keep it; wait for readiness, a job or a file.
    Keep,
    /// Keep it, and run this job for it; then [`Conn::complete`].
    Offload(J),
    /// Keep it, and open this file for it; then [`Conn::file_opened`].
    Open(FileRequest),
    /// The budget ran out with more to do at once: pump again soon.
    Again,
    /// Close it and free its slot.
    Close,
}

/// Work a pump handed out, not yet given to the owner.
enum Handoff<J> {
    Job(J),
    Open(FileRequest),
}

/// `T` is the transport: a plain socket by default (see [`crate::net::transport`]).
pub(super) struct Conn<T = mio::net::TcpStream> {
    pub stream: T,
    session: Session,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Bytes of `output` already written.
    written: usize,
    /// Edge-triggered readiness: set by events, cleared when a call returns WouldBlock.
    pub readable: bool,
    pub writable: bool,
    /// The peer has shut down its side (read returned 0).
    peer_closed: bool,
    /// The kernel reported the peer's FIN (EPOLLRDHUP): a short read does not mean "drained".
    pub hup: bool,
    /// A job is running (or a file is being opened) for this connection; its slot must outlive
    /// it.
    pub job_pending: bool,
    /// `input` holds bytes the session has not been shown yet (or asked to see again).
    unprocessed: bool,
    /// The connection is finished but waits for its job before the slot is freed.
    pub dead: bool,

    /// The file just opened for the session, until it asks for its bytes.
    opened: Option<File>,
    /// A file body going out after `output`; later responses wait until it is all sent.
    sending: Option<Sending>,
    /// The last pump stopped for want of budget.
    cut_short: bool,
    /// The protocol the connection was handed to by an HTTP upgrade, once it was: pumped
    /// instead of the HTTP session from then on.
    upgraded: Option<Box<dyn Upgraded>>,
    /// The upgraded protocol said to close (or the peer left it): close once output is out.
    upgrade_over: bool,
}

/// The part of a file still to send.
struct Sending {
    file: File,
    offset: u64,
    remaining: u64,
}

impl<T: Evented> Conn<T> {
    pub fn new(stream: T) -> Self {
        Conn {
            stream,
            session: Session::new(),
            input: Vec::new(),
            output: Vec::new(),
            written: 0,
            readable: false,
            writable: true,
            peer_closed: false,
            hup: false,
            job_pending: false,
            unprocessed: false,
            dead: false,

            opened: None,
            sending: None,
            cut_short: false,
            upgraded: None,
            upgrade_over: false,
        }
    }

    /// Bytes of the current response not yet handed to the kernel, head or file.
    fn out_pending(&self) -> bool {
        self.written < self.output.len() || self.sending.is_some()
    }

    /// The last pump stopped for want of budget. If it also handed out a job, nothing pumps the
    /// connection until the job's reply unless the owner does: a peer that resets meanwhile
    /// would go unnoticed, and its job would run.
    pub fn cut_short(&self) -> bool {
        self.cut_short
    }

    /// Makes the response now in the making the connection's last (`Connection: close`).
    pub fn wind_down(&mut self) {
        self.session.close_after_response();
    }

    /// Nothing in flight: no job, no output waiting, no request begun.
    pub fn is_idle(&self) -> bool {
        !self.dead
            && !self.job_pending
            && !self.out_pending()
            && self.upgraded.is_none()
            && self.session.phase(&self.input) == Phase::Idle
    }

    /// When the connection should be given up on, given what it waits for now (the session's
    /// rule, see `Session::poll_timeout`).
    pub fn deadline(&mut self, now: Instant, t: &Timeouts) -> Option<Instant> {
        let pending = self.out_pending();
        match &mut self.upgraded {
            Some(_) if pending => Some(now + t.write),
            Some(upgraded) => upgraded.poll_timeout(now, t),
            None => self.session.poll_timeout(&self.input, pending, now, t),
        }
    }

    /// The deadline passed: a stalled write or an idle connection is closed, a request in
    /// progress is answered 408 first.
    pub fn expire<H: Handler>(&mut self, env: &mut Env<'_, H>) -> Fate<H::Job> {
        if self.out_pending() || self.session.is_closed() || self.upgrade_over {
            return Fate::Close;
        }
        self.ensure_output(env.pool);
        if let Some(upgraded) = &mut self.upgraded {
            if upgraded.handle_timeout(Instant::now(), &mut self.output) == Flow::Close {
                self.upgrade_over = true;
            }
            return self.pump_with(env, None);
        }
        let cx = Context {
            limits: env.limits,
            date: env.date,
        };
        let step = self
            .session
            .expire(&mut self.input, &mut self.output, &cx, env.handler);
        let handoff = self.after(step);
        self.pump_with(env, handoff)
    }

    /// Hands a finished job's reply to the session, then carries on like [`Conn::pump`].
    pub fn complete<H: Handler>(&mut self, reply: Reply, env: &mut Env<'_, H>) -> Fate<H::Job> {
        self.job_pending = false;
        let cx = Context {
            limits: env.limits,
            date: env.date,
        };
        self.ensure_output(env.pool);
        let step =
            self.session
                .complete(reply, &mut self.input, &mut self.output, &cx, env.handler);
        let handoff = self.after(step);
        self.pump_with(env, handoff)
    }

    /// Hands what opening a file found to the session, then carries on like [`Conn::pump`]
    /// (sending the file's bytes first, if the answer has any).
    pub fn file_opened<H: Handler>(
        &mut self,
        request: &FileRequest,
        found: Result<OpenFile, FileError>,
        env: &mut Env<'_, H>,
    ) -> Fate<H::Job> {
        self.job_pending = false;
        let cx = Context {
            limits: env.limits,
            date: env.date,
        };
        self.ensure_output(env.pool);
        let meta = found.as_ref().map(|f| &f.meta).map_err(|e| *e);
        let step = self.session.file(
            request,
            meta,
            &mut self.input,
            &mut self.output,
            &cx,
            env.handler,
        );
        self.opened = found.ok().map(|f| f.file);
        let handoff = self.after(step);
        self.pump_with(env, handoff)
    }

    /// Writes, parses and reads until nothing more can happen without a new event.
    pub fn pump<H: Handler>(&mut self, env: &mut Env<'_, H>) -> Fate<H::Job> {
        self.pump_with(env, None)
    }

    /// [`Conn::pump`], carrying a job or file that is not handed out yet. It does not cut the
    /// pump short: responses already written for earlier pipelined requests still go out now
    /// rather than after it, and the socket is still read so a departing peer is noticed.
    fn pump_with<H: Handler>(
        &mut self,
        env: &mut Env<'_, H>,
        mut handoff: Option<Handoff<H::Job>>,
    ) -> Fate<H::Job> {
        self.cut_short = false;
        let keep = self.run(env, &mut handoff);
        match (keep, handoff) {
            (true, Some(Handoff::Job(job))) => Fate::Offload(job),
            (true, Some(Handoff::Open(file))) => Fate::Open(file),
            // A handoff's answer pumps again anyway, and readiness flags persist till then.
            (true, None) if self.cut_short => Fate::Again,
            (true, None) => Fate::Keep,
            (false, handoff) => {
                // Dropping work never handed out: nothing else refers to the slot. A job whose
                // peer left before it could be queued is dropped like a queued one.
                if let Some(Handoff::Job(_)) = handoff {
                    env.stats.job_cancelled();
                }
                if handoff.is_some() {
                    self.job_pending = false;
                }
                Fate::Close
            }
        }
    }

    /// The body of [`Conn::pump`]: false means close.
    fn run<H: Handler>(
        &mut self,
        env: &mut Env<'_, H>,
        handoff: &mut Option<Handoff<H::Job>>,
    ) -> bool {
        loop {
            if self.writable && self.written < self.output.len() && self.flush().is_err() {
                return false;
            }
            if self.writable && self.written >= self.output.len() && self.sending.is_some() {
                if env.budget == 0 {
                    self.cut_short = true;
                    return true;
                }
                if self.send_body(&mut env.budget, env.pool).is_err() {
                    return false;
                }
                // Done, socket full, or budget spent: each is settled at the top.
                continue;
            }
            let out_pending = self.out_pending();
            let finished = match self.upgraded {
                Some(_) => self.upgrade_over,
                None => {
                    self.session.is_closed()
                        || (self.peer_closed && !self.job_pending && !self.unprocessed)
                }
            };
            if finished {
                return out_pending;
            }

            // Handed over: the upgraded protocol takes the input, whatever it is.
            if self.unprocessed && self.upgraded.is_some() && self.output.is_empty() {
                self.unprocessed = false;
                self.ensure_output(env.pool);
                if let Some(upgraded) = &mut self.upgraded {
                    if !self.input.is_empty()
                        && upgraded.receive(&mut self.input, &mut self.output) == Flow::Close
                    {
                        self.upgrade_over = true;
                    }
                }
                continue;
            }

            if self.unprocessed
                && !self.job_pending
                // Responses to later requests wait until a file body is all out.
                && self.sending.is_none()
                // An empty buffer is always below the mark, even a mark of 0.
                && (self.output.is_empty() || self.output.len() < env.limits.output_high_water)
            {
                self.unprocessed = false;
                self.ensure_output(env.pool);
                let cx = Context {
                    limits: env.limits,
                    date: env.date,
                };
                let step =
                    self.session
                        .process(&mut self.input, &mut self.output, &cx, env.handler);
                if let Some(new) = self.after(step) {
                    *handoff = Some(new);
                }
                // Back to the top even when nothing was written: a peer that half-closed while
                // this input waited (for a job, a file, or a file body going out) is finished
                // now, and only the check up there closes it.
                continue;
            }

            if self.readable && !self.peer_closed {
                if env.budget == 0 {
                    self.cut_short = true;
                    return true;
                }
                // The session wants more bytes only when it has seen all it has and is not busy.
                let wants_more = !self.unprocessed && !self.job_pending;
                if self.input.capacity() == 0 {
                    self.input = env.pool.take();
                }
                if self.input.len() == self.input.capacity() {
                    if !wants_more || self.input.capacity() >= env.max_input {
                        // Paused: resumes when the session consumes input or the job ends.
                        return true;
                    }
                    let grow = self
                        .input
                        .capacity()
                        .min(env.max_input - self.input.capacity());
                    self.input.reserve(grow);
                }
                env.budget -= 1;
                match self.stream.read_spare(&mut self.input) {
                    Ok(0) => {
                        self.peer_closed = true;
                        if let Some(upgraded) = &mut self.upgraded {
                            // Last words, then the connection ends (see `Upgraded`).
                            if self.output.capacity() == 0 {
                                self.output = env.pool.take();
                            }
                            upgraded.peer_closed(&mut self.output);
                            self.upgrade_over = true;
                        }
                    }
                    Ok(_) => {
                        self.unprocessed = true;
                        // A read that left room in the buffer drained the socket. New bytes will
                        // raise a new edge, so skip the read that would only say WouldBlock.
                        if self.input.len() < self.input.capacity() && !self.hup {
                            self.readable = false;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
                continue;
            }

            self.release_idle_buffers(env.pool);
            return true;
        }
    }

    /// Records what a session step asks of the connection; returns work to hand out.
    fn after<J>(&mut self, step: Step<J>) -> Option<Handoff<J>> {
        match step {
            Step::Offload(job) => {
                self.job_pending = true;
                Some(Handoff::Job(job))
            }
            Step::Open(file) => {
                self.job_pending = true;
                Some(Handoff::Open(file))
            }
            Step::Flush => {
                self.unprocessed = true;
                None
            }
            Step::SendFile { offset, len } => {
                let file = self.opened.take();
                debug_assert!(file.is_some(), "SendFile without an opened file");
                self.sending = file.map(|file| Sending {
                    file,
                    offset,
                    remaining: len,
                });
                None
            }
            Step::Upgrade(Handover(upgraded)) => {
                self.upgraded = Some(upgraded);
                // What the client sent behind the request is the new protocol's first input.
                self.unprocessed = true;
                None
            }
            Step::Read | Step::Close => None,
        }
    }

    /// Sends file bytes until the socket is full, the budget is spent or the body is done;
    /// once done, lets the session go on with pipelined requests. A transport that cannot
    /// `sendfile` gets the next chunk read into the (empty) output buffer instead, which the
    /// pump then writes like any output: one pooled buffer's worth at a time.
    fn send_body(&mut self, budget: &mut usize, pool: &mut BufPool) -> io::Result<()> {
        let Some(body) = &mut self.sending else {
            return Ok(());
        };
        if !self.stream.can_send_file() && body.remaining > 0 {
            *budget -= 1;
            if self.output.capacity() == 0 {
                self.output = pool.take();
            }
            let want = (self.output.capacity() as u64).min(body.remaining) as usize;
            self.output.resize(want, 0);
            let n = files::read_chunk(&body.file, &mut self.output, body.offset);
            self.output.truncate(*n.as_ref().unwrap_or(&0));
            let n = n?;
            body.offset += n as u64;
            body.remaining -= n as u64;
            self.written = 0;
            if body.remaining == 0 {
                // The last bytes are in the output, ahead of whatever is answered next.
                self.sending = None;
                self.unprocessed = true;
            }
            return Ok(());
        }
        while body.remaining > 0 {
            if *budget == 0 {
                return Ok(());
            }
            *budget -= 1;
            match self
                .stream
                .send_file(&body.file, &mut body.offset, body.remaining)
            {
                Ok(n) => body.remaining -= n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.sending = None;
        self.unprocessed = true;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        while self.written < self.output.len() {
            match self.stream.write(&self.output[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.output.clear();
        self.written = 0;
        Ok(())
    }

    fn ensure_output(&mut self, pool: &mut BufPool) {
        if self.output.capacity() == 0 {
            self.output = pool.take();
        }
    }

    /// Gives empty buffers back to the pool so an idle connection holds none.
    fn release_idle_buffers(&mut self, pool: &mut BufPool) {
        if self.input.is_empty() && self.input.capacity() > 0 {
            pool.put(std::mem::take(&mut self.input));
        }
        if self.output.is_empty() && self.output.capacity() > 0 {
            pool.put(std::mem::take(&mut self.output));
        }
    }

    /// Ends the connection: returns its buffers and, if the peer may have sent bytes we never
    /// read, sends FIN and drains them, so that closing does not turn into a reset that could
    /// destroy the response before the peer reads it. A connection whose last read drained the
    /// socket and whose input was all consumed closes at once (nginx's lingering heuristic).
    pub fn shut(&mut self, pool: &mut BufPool) {
        let unread = self.readable || !self.input.is_empty();
        self.opened = None;
        self.sending = None;
        self.input.clear();
        self.output.clear();
        self.written = 0;
        self.release_idle_buffers(pool);
        if !unread || self.peer_closed {
            return;
        }
        let _ = self.stream.shutdown_write();
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            match io::Read::read(&mut self.stream, &mut sink) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! A connection over a real socket pair on 127.0.0.1, pumped by hand the way a driver pumps
    //! it: a file body goes out with `sendfile` through a plain socket, and read and written in
    //! chunks through a transport that cannot `sendfile` (as an encrypting one cannot), with
    //! the same bytes on the wire either way.

    use std::io::{Read, Write};
    use std::sync::Arc;

    use super::*;
    use crate::app::{Demo, DemoConfig};
    use crate::drive::{files::Files, Service};
    use crate::net::transport::NoSendFile;
    use crate::stats::Stats;

    const FILE_LEN: usize = (1 << 20) + 123;

    /// Serves `/files/big.bin` then `/hello/world` on one connection whose transport `wrap`
    /// makes, and checks what the client got.
    fn serve_one<T: Evented>(wrap: impl FnOnce(mio::net::TcpStream) -> T) {
        let dir = std::env::temp_dir().join(format!(
            "berth-conn-{}-{}",
            std::process::id(),
            std::any::type_name::<T>().len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..FILE_LEN).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.join("big.bin"), &data).unwrap();
        let files = Files::new(&dir).unwrap();

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            c.write_all(
                b"GET /files/big.bin HTTP/1.1\r\nHost: x\r\n\r\n\
                  GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            got
        });
        let (s, _) = listener.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        let mut conn = Conn::new(wrap(mio::net::TcpStream::from_std(s)));

        let stats = Arc::new(Stats::new(1));
        let mut handler = Demo::new(DemoConfig::default(), stats.clone()).handler(0);
        let mut pool = BufPool::new(16 * 1024, 4, 1);
        let limits = Limits::default();
        let date = b"Sun, 06 Nov 1994 08:49:37 GMT".to_vec();
        for _ in 0..100_000 {
            let mut env = Env {
                handler: &mut handler,
                pool: &mut pool,
                limits: &limits,
                date: &date,
                max_input: 1 << 20,
                budget: usize::MAX,
                stats: &stats,
            };
            // As if every poll said "ready": a call that finds nothing clears the flag.
            conn.readable = true;
            conn.writable = true;
            let mut fate = conn.pump(&mut env);
            if let Fate::Open(req) = fate {
                let found = files.open(&req);
                fate = conn.file_opened(&req, found, &mut env);
            }
            match fate {
                Fate::Close => break,
                Fate::Keep | Fate::Again => {
                    std::thread::sleep(std::time::Duration::from_micros(200))
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        conn.shut(&mut pool);
        drop(conn);
        let got = client.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();

        let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&got[..head_end]);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.contains(&format!("Content-Length: {FILE_LEN}\r\n")),
            "{head}"
        );
        assert!(
            got[head_end..head_end + FILE_LEN] == data[..],
            "the file's bytes"
        );
        let rest = String::from_utf8_lossy(&got[head_end + FILE_LEN..]);
        assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
        assert!(rest.ends_with("Hello, World!"), "{rest}");
    }

    #[test]
    fn a_file_goes_out_with_sendfile_or_in_chunks_alike() {
        // Each checks the head, every byte of the body, and the pipelined answer after it.
        // (The heads differ in ETag and Last-Modified: the file is written anew for each.)
        serve_one(|s| s);
        serve_one(NoSendFile);
    }
}
