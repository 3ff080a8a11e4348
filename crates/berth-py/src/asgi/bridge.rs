//! The bridge between berth's I/O threads and the Python loop: what crosses it ([`Event`]: a
//! request as an owned [`Call`], or a wake-up for one already across), the queue it crosses
//! in, the one wake-up write per burst when the Python loop sleeps (berth's loops in threads of
//! their own), and the deferred job ([`AsgiJob`]) an I/O thread starts to post a request.
//! Nothing here holds the GIL.

use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use berth::proto::http::{Answer, BodyStream, Job, Reply, Version};
use berth::proto::ws::Agreed;
use crossbeam_channel::{Receiver, Sender};

/// What the I/O threads hand the Python loop.
pub(crate) enum Event {
    /// A request, and where its answer goes.
    Call(Box<Call>, Answer),
    /// Something changed for request `id`: its streamed response body has room again, its
    /// streamed request body has more, or its connection went.
    Wake(u64),
}

/// The queue between berth's loops and the Python loop, and (berth's loops in threads of
/// their own) the socket that wakes the Python loop when the queue stops being empty.
pub(crate) struct Bridge {
    pub(super) tx: Sender<Event>,
    pub(super) rx: Receiver<Event>,
    /// Written (one byte) to wake the Python loop, which watches the other end; `None` when
    /// berth's loop runs inline, on the Python thread itself.
    pub(super) wake: Option<(UnixStream, UnixStream)>,
    /// The loop found the queue empty and may be asleep: the next post must wake it. Cleared
    /// by the post that wakes it, so a burst of requests costs one wake-up write.
    pub(super) asleep: AtomicBool,
    pub(super) next_id: AtomicU64,
}

impl Bridge {
    pub(super) fn new(threads: bool) -> io::Result<Bridge> {
        let wake = if threads {
            let (wake_tx, wake_rx) = UnixStream::pair()?;
            wake_tx.set_nonblocking(true)?;
            wake_rx.set_nonblocking(true)?;
            Some((wake_tx, wake_rx))
        } else {
            None
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        Ok(Bridge {
            tx,
            rx,
            wake,
            asleep: AtomicBool::new(true),
            next_id: AtomicU64::new(1),
        })
    }

    pub(crate) fn post(&self, event: Event) {
        // The receiver lives as long as the bridge.
        let _ = self.tx.send(event);
        let Some((wake_tx, _)) = &self.wake else {
            // Inline: the poster is the Python thread's own turn; `take` collects after it.
            return;
        };
        if self.asleep.swap(false, Ordering::AcqRel) {
            // A full socket already holds a wake-up byte: nothing is lost.
            let mut wake_tx: &UnixStream = wake_tx;
            let _ = wake_tx.write(&[1]);
        }
    }
}

/// One request, owned, on its way to the loop.
pub(crate) struct Call {
    pub(super) id: u64,
    pub(super) method: &'static str,
    pub(super) path: String,
    pub(super) query: Vec<u8>,
    pub(super) version: Version,
    pub(super) headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) body: Vec<u8>,
    /// The body, while it arrives (a request whose body was not all in with its head).
    pub(super) stream: Option<BodyStream>,
    /// A WebSocket opening handshake (the `websocket` scope), checked.
    pub(super) websocket: Option<WsOffer>,
    /// The client's address: the scope's `client`, where the connection has one.
    pub(super) peer: Option<std::net::SocketAddr>,
    /// The listener it came through (its scope's `server`).
    pub(super) listener: usize,
}

/// What accepting a WebSocket needs from its opening handshake.
pub(super) struct WsOffer {
    /// `Sec-WebSocket-Accept`.
    pub(super) accept: String,
    /// The subprotocols the client offered, in its order.
    pub(super) protocols: Vec<String>,
    /// permessage-deflate, if agreed: for the session, and the `Sec-WebSocket-Extensions`
    /// answer.
    pub(super) deflate: Option<(Agreed, String)>,
}

/// The job an I/O thread starts for each request: posts it to the loop and returns.
pub(super) struct AsgiJob {
    pub(super) call: Box<Call>,
    pub(super) bridge: Arc<Bridge>,
}

impl Job for AsgiJob {
    const DEFERRED: bool = true;

    fn run(self) -> Reply {
        berth::drive::blocking::run_here(self)
    }

    fn start(self, answer: Answer) {
        if let Some(stream) = &self.call.stream {
            // The connection is told when the app makes room; the app when bytes come.
            stream.on_room(answer.waker());
            let (bridge, id) = (self.bridge.clone(), self.call.id);
            stream.on_data(move || bridge.post(Event::Wake(id)));
        }
        self.bridge.post(Event::Call(self.call, answer));
    }
}
