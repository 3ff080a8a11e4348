//! What the blocking models (`single`, `threaded`, `forked`) share: serving one connection
//! start to finish on the calling thread, and waiting for a connection in a way that still
//! notices a stop request.
//!
//! A connection is the same pumped connection the event-loop models run (`drive::pump`), with a
//! blocking socket (`Blocks`): the step loop, files and upgrades are the pump's. What is left
//! here is what only a blocking model does: waiting. Before each read the session's deadline
//! becomes the socket's `SO_RCVTIMEO` (a read that waits it out expires the connection: 408, or
//! a silent close); `SO_SNDTIMEO` bounds every write, so a peer that stops reading ends its
//! connection (`stall`: once the peer has taken nothing for the timeout, however the waiting
//! was split across calls). Between requests the model's own rule may let the connection go
//! (`single`: when another client waits, which it also watches for while this one idles;
//! `forked`: when told to stop).
//!
//! A job (`Fate::Offload`) runs inline: in these models the connection's own thread or process
//! is the worker, which is exactly seed 000's point of comparison. A job whose client has
//! already reset the connection is dropped unrun (counted as cancelled), as the event-loop
//! models drop a queued one: in `single` a burst of such clients would otherwise hold the one
//! thread for a job duration each. A file (`Fate::Open`) is opened inline too; its bytes go
//! out as the pump sends any body (`sendfile(2)` on a plain socket, bounded chunks otherwise),
//! blocking only this connection's thread.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use berth_proto::http::{Answer, Handler, Job, Limits, Reply, Respond, Streamed, Taken};

use super::pump::{Blocks, Conn, Env, Fate};
use super::stall::Stalls;
use super::Timeouts;
use crate::files::Files;
use crate::net::{Acceptor, Blocking, BlockingSocket, ConnSizing, Listener, Stream};
use crate::rt::DateCache;
use crate::rt::{BufPool, Control, StopKind};
use crate::stats::Stats;
use crate::sys::io::{peer_reset, poll_first, poll_readable};

/// Starts a job and waits on this thread for its answer: how a model that runs jobs inline
/// (a thread or process per connection) runs a deferred one ([`Job::DEFERRED`], answered by
/// another thread); a job that is not deferred just runs. Public for a deferred job's own
/// [`Job::run`], which is this. The protocol crate keeps no blocking wait: this is it.
pub fn run_here<J: Job>(job: J) -> Reply {
    if !J::DEFERRED {
        return job.run();
    }
    let (tx, rx) = mpsc::channel();
    job.start(Answer::new(Arc::new(Waiter(tx))));
    // The answer is given (or dropped: 500) before every sender is gone.
    rx.recv().unwrap_or_else(|_| Reply::failed())
}

/// [`Respond`] for [`run_here`]: the answer goes down a channel to the waiting thread.
struct Waiter(mpsc::Sender<Reply>);

impl Respond for Waiter {
    fn reply(&self, reply: Reply) {
        let _ = self.0.send(reply);
    }
    fn cancelled(&self) -> bool {
        false
    }
    fn more(&self) {}
}

/// A streamed body's next chunks for a consumer that blocks: with nothing pushed yet, parks
/// this thread until the producer pushes or ends (the stream's data hook unparks it), for up to
/// `wait`. [`Taken::Empty`] means the wait ran out.
pub(crate) fn take_within(
    streamed: &Streamed,
    out: &mut Vec<u8>,
    max: usize,
    wait: Duration,
) -> Taken {
    let first = streamed.take(out, max);
    if first != Taken::Empty {
        return first;
    }
    // Parked now (the take said so): the next push or end runs the hook. One that came
    // between the take and the hook is found by the next take; one after it leaves the unpark
    // token, so `park_timeout` returns at once.
    let me = std::thread::current();
    streamed.on_data(move || me.unpark());
    let deadline = Instant::now() + wait;
    loop {
        match streamed.take(out, max) {
            Taken::Empty => {}
            taken => return taken,
        }
        let now = Instant::now();
        if now >= deadline {
            return Taken::Empty;
        }
        std::thread::park_timeout(deadline - now);
    }
}

/// Settings of a blocking connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnConfig {
    /// Request limits.
    pub limits: Limits,
    /// Header, body, idle and write timeouts.
    pub timeouts: Timeouts,
    /// Initial size of the read and write buffers ([`ConnSizing::buffer_size`]; HTTP's 16 KiB
    /// by default, [`ConnSizing::http`]).
    pub buffer_size: usize,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            buffer_size: ConnSizing::http().buffer_size,
        }
    }
}

/// Makes `listener` stop listening now, from any thread: on Linux, `shutdown(2)` on a listening
/// socket closes its queue, so new connections are refused while the thread that owns it may
/// still be busy with a connection.
pub(crate) fn stop_listening(listener: &Listener) {
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
    /// Whether the server is shutting down: an upgraded connection is told (a WebSocket's
    /// close 1001), whatever `should_yield` says of HTTP connections.
    pub going: &'a dyn Fn() -> bool,
}

/// Serves `socket`, accepted on a listener whose transport choice is `acceptor`, until the peer
/// leaves, the session closes, a timeout passes, or — between requests — `should_yield` says
/// the connection should go (the `single` model's fairness rule: an idle keep-alive connection
/// must not hold the only thread; `forked`'s stop). With `rival` (`single`'s listener), an idle
/// connection is let go as soon as a client is waiting there; with `parking` too, a connection
/// whose client has said nothing yet is set aside there instead (see [`Parked`]), and one
/// idling between requests is let go as soon as the one set aside speaks.
pub(crate) fn serve_connection<H: Handler, S: Blocking>(
    socket: S,
    acceptor: &Acceptor,
    serving: Serving<'_, H>,
    config: &ConnConfig,
    should_yield: impl Fn() -> bool,
    rival: Option<&Listener>,
    parking: Option<&mut Parking<Stream<Stalls<S>>>>,
) -> io::Result<()> {
    // Writes end once the peer stalls for the write timeout, however the kernel split the
    // waiting (see `stall`).
    let socket = Stalls::new(socket, config.timeouts.write)?;
    let parked = Parked {
        conn: Conn::accept(socket, acceptor)?,
        wake: None,
        since: None,
    };
    serve(parked, serving, config, should_yield, rival, parking)
}

/// A connection `single` set aside before its client said anything: the transport handshake
/// is done and the client waits (a browser's preconnect does; h2spec's cases open a connection
/// and then, before speaking on it, a second one to measure an answer). For all the client
/// can tell it is still in the accept queue, so a client who came after it is served
/// meanwhile, one connection at a time still. It is taken up again as soon as it speaks (the
/// connection then being served is let go between requests, as for any waiting client), or
/// when no one else waits. At most one is set aside; its state (TLS, HTTP/2's SETTINGS sent,
/// its waker) is kept whole.
pub(crate) struct Parked<T: Blocking> {
    conn: Conn<T, Blocks>,
    /// The read end of the connection's HTTP/2 waker, if it has one.
    wake: Option<UnixStream>,
    /// When it was first set aside: its client has the header timeout from then to speak,
    /// however often it is taken up and set aside again.
    since: Option<Instant>,
}

/// Where `single` keeps the connection it set aside, if any.
pub(crate) type Parking<T> = Option<Parked<T>>;

impl<T: Blocking> Parked<T> {
    /// Whether its client has sent something (or gone) since it was set aside.
    pub(crate) fn spoke(&self) -> bool {
        has_pending_input(&self.conn.stream)
    }

    /// Serves it again from where it was set aside, as [`serve_connection`] serves a new one
    /// (it may be set aside again).
    pub(crate) fn resume<H: Handler>(
        self,
        serving: Serving<'_, H>,
        config: &ConnConfig,
        should_yield: impl Fn() -> bool,
        rival: Option<&Listener>,
        parking: &mut Parking<T>,
    ) -> io::Result<()> {
        serve(self, serving, config, should_yield, rival, Some(parking))
    }
}

/// [`serve_connection`], over any blocking transport.
fn serve<H: Handler, T: Blocking>(
    parked: Parked<T>,
    serving: Serving<'_, H>,
    config: &ConnConfig,
    should_yield: impl Fn() -> bool,
    rival: Option<&Listener>,
    mut parking: Option<&mut Parking<T>>,
) -> io::Result<()> {
    let Parked {
        mut conn,
        mut wake,
        since,
    } = parked;
    if since.is_some_and(|since| since.elapsed() >= config.timeouts.header) {
        // Set aside and silent for as long as a request head may take: closed, as one would
        // be that idled out.
        return linger_close(&mut conn.stream, false);
    }
    let Serving {
        handler,
        files,
        date,
        stats,
        going,
    } = serving;
    let t = config.timeouts;
    conn.body_wait = t.write;
    // The read timeout in force (`None`: not set yet), changed only when the phase calls for
    // another one.
    let mut read_timeout: Option<Option<Duration>> = None;
    let max_input = config.limits.max_input(config.buffer_size);
    let mut pool = BufPool::new(config.buffer_size, 2, 0);
    macro_rules! lend {
        () => {
            Env {
                handler: &mut *handler,
                pool: &mut pool,
                limits: &config.limits,
                date: &mut *date,
                max_input,
                budget: usize::MAX,
                stats,
                wind_down: Some(&should_yield),
                going: Some(going),
            }
        };
    }
    // HTTP/2's streams wake the connection (a streamed answer's producer pushed, a job took
    // some of a streamed request body) through a socket pair (`wake`): the thread waits on the
    // connection and on it together, as HTTP/1.1's one body waits on its producer alone.
    let mut fate = Fate::Keep;
    loop {
        if wake.is_none() && conn.wants_waker() {
            let (rx, tx) = UnixStream::pair()?;
            tx.set_nonblocking(true)?;
            rx.set_nonblocking(true)?;
            // A full pair already holds a wake-up: a failed write loses nothing.
            conn.set_waker(std::sync::Arc::new(move || {
                let _ = (&tx).write(&[1]);
            }));
            wake = Some(rx);
        }
        fate = match fate {
            Fate::Keep if parking.is_some() && conn.stream.handshaking() => {
                // `single` sets aside a client that has not spoken (below): the transport's
                // handshake first, within the header timeout, and no read past it.
                conn.stream.set_read_timeout(Some(t.header))?;
                read_timeout = Some(Some(t.header));
                conn.stream.finish_handshake()?;
                Fate::Keep
            }
            Fate::Keep if conn.timed_out() => {
                // SO_RCVTIMEO ran out: 408 for a request in progress, silence for an idle
                // connection.
                date.refresh();
                conn.expire(&mut lend!())
            }
            Fate::Keep => {
                // Between HTTP requests (answered, nothing buffered): the model may let the
                // connection go now. Not a connection handed to another protocol: that one is
                // served until it ends.
                // (An idle HTTP/2 connection counts too: `single` serves one connection at a
                // time, and one that idles while another client waits is let go.)
                let between = conn.is_idle() && conn.answered();
                if between && should_yield() {
                    // HTTP/2 says GOAWAY first (the pump then closes it).
                    if conn.wind_down() {
                        fate = conn.pump(&mut lend!());
                        continue;
                    }
                    return linger_close(&mut conn.stream, false);
                }
                // The session's rule for what this connection waits for (its output is out).
                let now = Instant::now();
                let wait = conn.deadline(now, &t).map(|at| {
                    at.saturating_duration_since(now)
                        .max(Duration::from_millis(1))
                });
                // Skip the setsockopt unless the value really moves.
                let moved = match (read_timeout, wait) {
                    (Some(Some(cur)), Some(wait)) => cur.abs_diff(wait) > Duration::from_millis(50),
                    (Some(cur), wait) => cur != wait,
                    (None, _) => true,
                };
                if moved {
                    conn.stream.set_read_timeout(wait)?;
                    read_timeout = Some(wait);
                }
                // The connection, and beside it: the waker of HTTP/2's streams; for `single`
                // between requests, the listener, so that a client arriving while this one
                // idles is not kept waiting for it. Not while the transport holds input (TLS
                // plaintext decrypted ahead): the socket would not say so, and a read takes it
                // at once.
                // With `single`'s parking: a client that has said nothing may be set aside for
                // one who comes (if none is already); one idling between requests goes when
                // the one set aside speaks.
                let held = conn.stream.holds_input();
                let (may_park, set_aside) = match parking.as_deref() {
                    Some(None) => (conn.unheard(), None),
                    Some(Some(other)) => (false, Some(&other.conn.stream).filter(|_| between)),
                    None => (false, None),
                };
                let waker = wake.as_ref().filter(|_| !held);
                let rival = rival.filter(|_| (between || may_park) && !held);
                let set_aside = set_aside.filter(|_| !held);
                if waker.is_some() || rival.is_some() || set_aside.is_some() {
                    let mut fds: Vec<&dyn AsRawFd> = vec![&conn.stream];
                    let mut next = 1;
                    let mut at = |present: bool| {
                        present.then(|| {
                            next += 1;
                            next - 1
                        })
                    };
                    let (waker_at, rival_at) = (at(waker.is_some()), at(rival.is_some()));
                    let aside_at = at(set_aside.is_some());
                    fds.extend(waker.map(|w| w as &dyn AsRawFd));
                    fds.extend(rival.map(|l| l as &dyn AsRawFd));
                    fds.extend(set_aside.map(|s| s as &dyn AsRawFd));
                    let ready = poll_first(&fds, wait.unwrap_or(t.idle))?;
                    let others = rival_at.is_some() || aside_at.is_some();
                    match ready {
                        Some(0) => {}
                        Some(i) if Some(i) == waker_at => {
                            if let Some(rx) = waker {
                                let mut sink = [0u8; 64];
                                while matches!((&*rx).read(&mut sink), Ok(n) if n > 0) {}
                            }
                            conn.poke();
                            fate = conn.pump(&mut lend!());
                            continue;
                        }
                        // A client came while this one has said nothing: set this one aside.
                        Some(i) if Some(i) == rival_at && may_park => {
                            if let Some(slot) = parking.as_deref_mut() {
                                let since = since.or_else(|| Some(Instant::now()));
                                *slot = Some(Parked { conn, wake, since });
                            }
                            return Ok(());
                        }
                        // Another client waits (or the one set aside spoke), or this one
                        // idled out: let it go (HTTP/2 with GOAWAY: the pump says it, then
                        // closes).
                        Some(_) | None if between && others => {
                            if conn.wind_down() {
                                fate = conn.pump(&mut lend!());
                                continue;
                            }
                            return linger_close(&mut conn.stream, false);
                        }
                        Some(_) => {}
                        None if wait.is_some() => {
                            date.refresh();
                            fate = conn.expire(&mut lend!());
                            continue;
                        }
                        // Nothing is timed (only producers are awaited): wait again.
                        None => {
                            fate = Fate::Keep;
                            continue;
                        }
                    }
                }
                conn.mark_readable();
                conn.pump(&mut lend!())
            }
            // Not with an unlimited budget; if it ever were, going on is right.
            Fate::Again => conn.pump(&mut lend!()),
            // HTTP/2's streams are answered in turn: each job runs here, then the pump goes on.
            // Nothing else runs meanwhile: a stream cannot be reset while its job waits.
            Fate::Offload { stream, job, .. } => {
                // Answers to earlier pipelined requests are out (the pump wrote them).
                if peer_reset(&conn.stream) {
                    stats.job_cancelled();
                    return Ok(());
                }
                let reply = super::run_job(job, stats);
                date.refresh();
                conn.complete(stream, reply, &mut lend!())
            }
            Fate::Open { stream, request } => {
                let found = files.open(&request);
                conn.file_opened(stream, &request, found, &mut lend!())
            }
            Fate::Close => {
                if let Some(e) = conn.take_error() {
                    return Err(e);
                }
                if conn.peer_closed() {
                    return Ok(());
                }
                let unread = conn.unread_input();
                return linger_close(&mut conn.stream, unread);
            }
        };
    }
}

/// Sends FIN, then reads and drops what the peer still sends for a moment, so that unread
/// request bytes do not turn the close into a reset that destroys the response in flight.
/// Most a lingering close reads and drops before it closes anyway.
pub(crate) const LINGER_BYTES: usize = 256 * 1024;

/// Longest a blocking model's lingering close waits for the peer to stop sending.
const LINGER_TIME: Duration = Duration::from_secs(2);

fn linger_close<T: Blocking>(stream: &mut T, unread: bool) -> io::Result<()> {
    stream.shutdown_write()?;
    // Over TLS the peer answers our close_notify with its own, which is data: closing before
    // it arrives would turn it into a reset that can destroy the response unread. So TLS
    // (whose short reads do not drain the socket) always lingers.
    if unread || has_pending_input(&*stream) || !stream.short_read_drains() {
        // Read and drop what the peer still sends, until it stops (200 ms of quiet), ends,
        // or has sent LINGER_BYTES or for LINGER_TIME: bounded by bytes and time rather than
        // by reads, since a TLS read gives one record's plaintext, which may be one byte.
        stream.set_read_timeout(Some(Duration::from_millis(200)))?;
        let deadline = std::time::Instant::now() + LINGER_TIME;
        let mut sink = [0u8; 4096];
        let mut dropped = 0;
        while dropped < LINGER_BYTES && std::time::Instant::now() < deadline {
            match stream.read(&mut sink) {
                Ok(n) if n > 0 => dropped += n,
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
    listener: &Listener,
    ctl: &Control,
    mut tick: impl FnMut(),
) -> Option<BlockingSocket> {
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
            // The listener is non-blocking (shared with the event loop code); connections of
            // the blocking models are not, and an accepted socket does not inherit the
            // listener's `O_NONBLOCK` (std's accept4 asks only for `SOCK_CLOEXEC`).
            Ok(stream) => return Some(stream),
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
    stream: BlockingSocket,
    refusal: &[u8],
    shard: crate::stats::Shard<'_>,
    cap: usize,
    who: &str,
) {
    let _ = socket2::SockRef::from(&stream).set_nonblocking(true);
    super::accept::refuse(stream, refusal, shard, cap, who);
}

/// Connections being served by blocking threads, so that a shutdown can wake threads blocked
/// in `read` by shutting their sockets down.
#[derive(Default)]
pub(crate) struct Active {
    streams: std::sync::Mutex<slab::Slab<socket2::Socket>>,
}

impl Active {
    /// Registers a connection; the returned key unregisters it.
    pub(crate) fn insert(&self, stream: &BlockingSocket) -> Option<usize> {
        let clone = socket2::SockRef::from(stream).try_clone().ok()?;
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
            if kind == StopKind::Now {
                // Given up, bytes unsent or not: a reset, not an orphan (`Transport::abort`).
                crate::net::transport::reset_on_close(s);
            }
            let _ = s.shutdown(how);
        }
    }
}
