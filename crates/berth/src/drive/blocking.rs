//! What the blocking models (`single`, `threaded`, `forked`) share: serving one connection
//! start to finish on the calling thread with blocking reads and writes, and waiting for a
//! connection in a way that still notices a stop request.
//!
//! A job ([`Step::Offload`]) runs inline: in these models the connection's own thread or process
//! is the worker, which is exactly seed 000's point of comparison. A job whose client has
//! already reset the connection is dropped unrun (counted as cancelled), as the event-loop
//! models drop a queued one: in `single` a burst of such clients would otherwise hold the one
//! thread for a job duration each. A file ([`Step::Open`]) is
//! opened inline too and sent in bounded chunks (`files::copy_range`): a blocked write then
//! blocks only this connection's thread, and the write timeout ends a peer that stopped reading.

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;

use std::time::Duration;

use std::time::Instant;

use berth_proto::http::{Context, Handler, Limits, Session, Step};
use berth_proto::upgrade::{Flow, Handover, Upgraded};

use super::clock::DateCache;
use super::files::{self, Files};
use super::Timeouts;
use crate::net::Blocking;
use crate::rt::{Control, StopKind};
use crate::stats::Stats;
use crate::sys::io::{peer_reset, poll_either, poll_readable, Ready};

/// Settings of a blocking connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnConfig {
    /// Request limits.
    pub limits: Limits,
    /// Header, body, idle and write timeouts.
    pub timeouts: Timeouts,
    /// Initial size of the read and write buffers.
    pub buffer_size: usize,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            buffer_size: 16 * 1024,
        }
    }
}

/// Makes `listener` stop listening now, from any thread: on Linux, `shutdown(2)` on a listening
/// socket closes its queue, so new connections are refused while the thread that owns it may
/// still be busy with a connection.
pub(crate) fn stop_listening(listener: &TcpListener) {
    let _ = socket2::SockRef::from(listener).shutdown(Shutdown::Both);
}

/// Waits, during a drain, until `done` holds or the drain's deadline passes.
pub(crate) fn wait_drained(ctl: &Control, mut done: impl FnMut() -> bool) {
    while !done() && !ctl.stop_now() {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How often a blocked accept looks at the stop flag.
pub(crate) const STOP_POLL: Duration = Duration::from_millis(100);

/// What the thread (or process) serving a connection lends it.
pub(crate) struct Serving<'a, H> {
    pub handler: &'a mut H,
    pub files: &'a Files,
    pub date: &'a mut DateCache,
    pub stats: &'a Stats,
}

/// Serves `stream` until the peer leaves, the session closes, the idle timeout passes, or — between
/// requests — `should_yield` says another client is waiting (the `single` model's fairness rule:
/// an idle keep-alive connection must not hold the only thread).
///
/// `T` is the transport ([`crate::net::transport`]): a plain socket, or one that wraps it.
pub(crate) fn serve_connection<H: Handler, T: Blocking>(
    mut stream: T,
    serving: Serving<'_, H>,
    config: &ConnConfig,
    should_yield: impl Fn() -> bool,
    rival: Option<&TcpListener>,
) -> io::Result<()> {
    let Serving {
        handler,
        files,
        date,
        stats,
    } = serving;
    let t = config.timeouts;
    stream.set_write_timeout(Some(t.write))?;
    // The read timeout in force, changed only when the phase calls for another one.
    let mut read_timeout = None;
    let max_input =
        config.limits.max_header_bytes + config.limits.max_body_bytes + config.buffer_size;
    let mut input = Vec::with_capacity(config.buffer_size);
    let mut output = Vec::with_capacity(config.buffer_size);
    let mut session = Session::new();
    // Set once a response has gone out: only then may the connection be let go between
    // requests (before that, the client's first request may be on its way or unread).
    let mut answered = false;
    // The file whose bytes the session will ask for, and the chunk buffer that carries them
    // (allocated on the first file, then reused).
    let mut file = None;
    let mut chunk = Vec::new();
    loop {
        date.refresh();
        if !input.is_empty() && should_yield() {
            // Tell the client this response is the last, rather than vanish under it.
            session.close_after_response();
        }
        let mut step = session.process(
            &mut input,
            &mut output,
            &Context {
                limits: &config.limits,
                date: date.get(),
            },
            handler,
        );
        loop {
            step = match step {
                Step::Offload(job) => {
                    // Answers to earlier pipelined requests go out before the job runs.
                    stream.write_all(&output)?;
                    output.clear();
                    if peer_reset(&stream) {
                        stats.job_cancelled();
                        return Ok(());
                    }
                    let reply = super::run_job(job, stats);
                    date.refresh();
                    let cx = Context {
                        limits: &config.limits,
                        date: date.get(),
                    };
                    session.complete(reply, &mut input, &mut output, &cx, handler)
                }
                Step::Open(request) => {
                    let found = files.open(&request);
                    let cx = Context {
                        limits: &config.limits,
                        date: date.get(),
                    };
                    let meta = found.as_ref().map(|f| &f.meta).map_err(|e| *e);
                    let next = session.file(&request, meta, &mut input, &mut output, &cx, handler);
                    file = found.ok().map(|f| f.file);
                    next
                }
                other => break step = other,
            };
        }
        answered |= !output.is_empty();
        stream.write_all(&output)?;
        output.clear();
        match step {
            Step::Close => return linger_close(stream, !input.is_empty()),
            Step::Flush => continue,
            Step::SendFile { offset, len } => {
                if let Some(f) = file.take() {
                    files::copy_range(&mut stream, &f, offset, len, &mut chunk)?;
                }
                continue;
            }
            Step::Upgrade(Handover(session)) => {
                return serve_upgraded(stream, session, input, output, &t);
            }
            Step::Read | Step::Offload(_) | Step::Open(_) => {}
        }
        if input.is_empty() && answered && should_yield() {
            return linger_close(stream, false);
        }
        if input.len() == input.capacity() {
            if input.capacity() >= max_input {
                return Ok(());
            }
            input.reserve(input.capacity().min(max_input - input.capacity()));
        }
        // The session's rule for what this connection waits for (the response is written).
        let now = Instant::now();
        let wait = session
            .poll_timeout(&input, false, now, &t)
            .map_or(t.idle, |at| at.saturating_duration_since(now))
            .max(Duration::from_millis(1));
        // Skip the setsockopt unless the value really moves.
        if read_timeout.is_none_or(|cur: Duration| cur.abs_diff(wait) > Duration::from_millis(50)) {
            stream.set_read_timeout(Some(wait))?;
            read_timeout = Some(wait);
        }
        // `single`: between requests, wait on this connection and on the listener together, so
        // that a client arriving while this one idles is not kept waiting for it.
        if let Some(listener) = rival.filter(|_| input.is_empty() && answered) {
            match poll_either(&stream, listener, wait)? {
                Ready::First => {}
                Ready::Second => return linger_close(stream, false),
                Ready::Neither => return linger_close(stream, false),
            }
        }
        match stream.read_spare(&mut input) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // SO_RCVTIMEO ran out: 408 for a request in progress, silence for an idle connection.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                date.refresh();
                let cx = Context {
                    limits: &config.limits,
                    date: date.get(),
                };
                if let Step::Close = session.expire(&mut input, &mut output, &cx, handler) {
                    stream.write_all(&output)?;
                    return linger_close(stream, false);
                }
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
}

/// Serves a connection handed over to another protocol (HTTP `Upgrade`) until that protocol
/// or the peer ends it, or its deadline passes: the same moves as the event-loop models make
/// (`drive::conn`), with blocking calls.
fn serve_upgraded<T: Blocking>(
    mut stream: T,
    mut session: Box<dyn Upgraded>,
    mut input: Vec<u8>,
    mut output: Vec<u8>,
    t: &Timeouts,
) -> io::Result<()> {
    loop {
        let mut flow = Flow::Continue;
        if !input.is_empty() {
            flow = session.receive(&mut input, &mut output);
        }
        stream.write_all(&output)?;
        output.clear();
        if flow == Flow::Close {
            return linger_close(stream, !input.is_empty());
        }
        if input.len() == input.capacity() {
            input.reserve(input.capacity().max(4096));
        }
        let now = Instant::now();
        let wait = session.poll_timeout(now, t).map(|at| {
            at.saturating_duration_since(now)
                .max(Duration::from_millis(1))
        });
        stream.set_read_timeout(wait)?;
        let flow = match stream.read_spare(&mut input) {
            Ok(0) => {
                session.peer_closed(&mut output);
                Flow::Close
            }
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                session.handle_timeout(Instant::now(), &mut output)
            }
            Err(e) => return Err(e),
        };
        stream.write_all(&output)?;
        output.clear();
        if flow == Flow::Close {
            return linger_close(stream, false);
        }
    }
}

/// Sends FIN, then reads and drops what the peer still sends for a moment, so that unread
/// request bytes do not turn the close into a reset that destroys the response in flight.
fn linger_close<T: Blocking>(mut stream: T, unread: bool) -> io::Result<()> {
    stream.shutdown_write()?;
    if unread || has_pending_input(&stream) {
        stream.set_read_timeout(Some(Duration::from_millis(200)))?;
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            match stream.read(&mut sink) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
    }
    Ok(())
}

/// True if `fd` has bytes (or a pending connection, for a listener) ready right now.
pub(crate) fn has_pending_input(fd: &impl AsRawFd) -> bool {
    poll_readable(fd, Duration::ZERO).unwrap_or(false)
}

/// Accepts the next connection as a blocking stream, or returns `None` once `stop` is set.
/// Transient accept errors (a peer that gave up, EMFILE) are logged and retried. `tick` runs
/// at least every [`STOP_POLL`] while waiting (the forked model reaps children there).
pub(crate) fn accept(
    listener: &TcpListener,
    ctl: &Control,
    mut tick: impl FnMut(),
) -> Option<TcpStream> {
    while !ctl.stopping() {
        tick();
        match poll_readable(listener, STOP_POLL) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                log::error!("poll on listener failed: {e}");
                std::thread::sleep(STOP_POLL);
                continue;
            }
        }
        match listener.accept() {
            Ok((stream, _)) => {
                // The listener is non-blocking (shared with the event loop code); connections
                // of the blocking models are not.
                if stream.set_nonblocking(false).is_ok() {
                    return Some(stream);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) => {}
            // A stop shuts the listener down (`stop_listening`) from another thread, which
            // wakes the poll above and makes accept fail (EINVAL): that is the stop, not a
            // failure worth a warning.
            Err(_) if ctl.stopping() => break,
            Err(e) => {
                log::warn!("accept failed: {e}");
                std::thread::sleep(STOP_POLL);
            }
        }
    }
    None
}

/// Turns away a connection a blocking acceptor took over its cap: [`super::accept::refuse`],
/// on the socket made non-blocking so that the acceptor never waits on the peer.
pub(crate) fn refuse(
    stream: TcpStream,
    refusal: &[u8],
    shard: crate::stats::Shard<'_>,
    cap: usize,
    who: &str,
) {
    let _ = stream.set_nonblocking(true);
    super::accept::refuse(stream, refusal, shard, cap, who);
}

/// Connections being served by blocking threads, so that a shutdown can wake threads blocked
/// in `read` by shutting their sockets down.
#[derive(Default)]
pub(crate) struct Active {
    streams: std::sync::Mutex<slab::Slab<TcpStream>>,
}

impl Active {
    /// Registers a connection; the returned key unregisters it.
    pub(crate) fn insert(&self, stream: &TcpStream) -> Option<usize> {
        let clone = stream.try_clone().ok()?;
        Some(
            self.streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(clone),
        )
    }

    pub(crate) fn remove(&self, key: usize) {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        if streams.contains(key) {
            streams.remove(key);
        }
    }

    /// Shuts every registered connection down, which ends their blocked reads. A drain shuts
    /// only the reading side, so a response being written still goes out.
    pub(crate) fn shutdown_all(&self, kind: StopKind) {
        let how = match kind {
            StopKind::Now => Shutdown::Both,
            StopKind::Drain => Shutdown::Read,
        };
        for (_, s) in self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = s.shutdown(how);
        }
    }
}
