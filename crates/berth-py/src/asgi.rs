//! ASGI 3 applications on berth's HTTP engine: the Rust half. berth's event loop parses,
//! limits, times out and writes as for any service; each request becomes a *deferred* job (see
//! `berth::proto::http::stream`) posted to the [`Bridge`], a queue the Python half
//! (`berth.asgi`) drains in one call per batch ([`AsgiServer::take`]): one GIL acquisition per
//! batch of requests, none per request on the Rust side. The application runs on an asyncio
//! loop in the thread that holds the GIL. Where berth's loop runs is the engine's choice:
//!
//! - **inline** (one `evloop` loop, the default): berth's loop runs on the Python thread,
//!   between the asyncio loop's callbacks ([`berth::drive::evloop::Inline`]). asyncio watches
//!   the loop's epoll descriptor; `take` runs one turn with the GIL released, then hands over
//!   what it produced. No thread hand-off, so no context switch and no wake-up write per
//!   batch of requests: on a server with one core for it, the cheapest way to reach Python.
//! - **threads** (`io_threads` > 1, or another model): berth's loops run in their own threads
//!   and wake the asyncio loop through a socket pair, once per batch (the byte is written only
//!   when the asyncio loop has found the queue empty).
//!
//! ```text
//!  berth loop: parse ─> AsgiJob::start ─> Bridge queue ─┐ take()  (inline: a turn first)
//!  asyncio:    [AsgiRequest, ...] ─> app(scope, receive, send) <┘
//!              send(start/body) ─> Answer::reply (whole) | StreamWriter::push (streamed)
//!                               ─> the connection's loop is woken; no GIL there
//! ```
//!
//! A response is held until its first body message, so that the everyday one-body response
//! goes out whole with a Content-Length; a body with `more_body` becomes a streamed reply
//! (chunked, or held to the app's own `content-length`), with the stream's window as
//! backpressure: `send` then waits for room, which the
//! I/O thread announces through the bridge ([`Event::Room`]). An application that fails before
//! its response started costs a 500; one that fails mid-body aborts the connection, so the
//! client can tell the body is cut short. So does a body that does not fit the length the app
//! declared (see [`front::whole_reply`](crate::front::whole_reply)).

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth::drive::evloop::Inline;
use berth::drive::{self, Model, Server, Service, Settings};
use berth::net::{Acceptor, Addr};
use berth::proto::http::{
    body_stream, Answer, BodyStream, Encoder, Handled, Handler, Job, Popped, Reply, Request,
    Response, StreamWriter, Version,
};
use crossbeam_channel::{Receiver, Sender};

use crate::asgi_ws::{AsgiWs, Incoming, WsShared};
use crate::front::{
    declared_length, has_body, misfit, percent_decode, whole_reply, with_app_fields,
};
use berth::proto::upgrade::Switch;
use berth::proto::ws::{handshake, Agreed, DeflateConfig};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use pyo3::{create_exception, intern};

/// Most of a streamed request body one `receive` hands over.
const READ_MAX: usize = 256 * 1024;

create_exception!(
    _berth,
    ClientDisconnected,
    PyOSError,
    "The client has gone: what is sent is not delivered."
);

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
    tx: Sender<Event>,
    rx: Receiver<Event>,
    /// Written (one byte) to wake the Python loop, which watches the other end; `None` when
    /// berth's loop runs inline, on the Python thread itself.
    wake: Option<(UnixStream, UnixStream)>,
    /// The loop found the queue empty and may be asleep: the next post must wake it. Cleared
    /// by the post that wakes it, so a burst of requests costs one wake-up write.
    asleep: AtomicBool,
    next_id: AtomicU64,
}

impl Bridge {
    fn new(threads: bool) -> io::Result<Bridge> {
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
    id: u64,
    method: &'static str,
    path: String,
    query: Vec<u8>,
    version: Version,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    body: Vec<u8>,
    /// The body, while it arrives (a request whose body was not all in with its head).
    stream: Option<BodyStream>,
    /// A WebSocket opening handshake (the `websocket` scope), checked.
    websocket: Option<WsOffer>,
    /// The client's address: the scope's `client`, where the connection has one.
    peer: Option<std::net::SocketAddr>,
}

/// What accepting a WebSocket needs from its opening handshake.
struct WsOffer {
    /// `Sec-WebSocket-Accept`.
    accept: String,
    /// The subprotocols the client offered, in its order.
    protocols: Vec<String>,
    /// permessage-deflate, if agreed: for the session, and the `Sec-WebSocket-Extensions`
    /// answer.
    deflate: Option<(Agreed, String)>,
}

/// The job an I/O thread starts for each request: posts it to the loop and returns.
struct AsgiJob {
    call: Box<Call>,
    bridge: Arc<Bridge>,
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

#[derive(Clone)]
struct Asgi {
    bridge: Arc<Bridge>,
    /// The model can wake a connection from outside (the WebSocket scope needs it).
    websocket: bool,
    /// permessage-deflate for the `websocket` scope (`None`: off).
    deflate: Option<DeflateConfig>,
    /// Written to a connection refused at capacity (with `Server` or without).
    refusal: &'static [u8],
}

struct AsgiHandler {
    bridge: Arc<Bridge>,
    websocket: bool,
    deflate: Option<DeflateConfig>,
}

impl Service for Asgi {
    type Handler = AsgiHandler;

    fn handler(&self, _thread: usize) -> AsgiHandler {
        AsgiHandler {
            bridge: self.bridge.clone(),
            websocket: self.websocket,
            deflate: self.deflate,
        }
    }

    fn refusal(&self) -> &'static [u8] {
        self.refusal
    }

    fn around_fork(&self, fork: &mut dyn FnMut() -> bool) {
        crate::front::around_fork(fork);
    }
}

impl Handler for AsgiHandler {
    type Job = AsgiJob;
    const STREAMS_BODY: bool = true;

    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<AsgiJob> {
        let websocket = match websocket_offer(req, self.deflate) {
            None => None,
            Some(_) if !self.websocket => {
                let why =
                    b"WebSocket needs a model that can wake a connection (not a blocking one)\n";
                res.send(501, "text/plain", why);
                return Handled::Done;
            }
            Some(Err(refused)) => {
                let extra: &[(&str, &[u8])] = match refused.status {
                    426 => &[("Sec-WebSocket-Version", b"13")],
                    _ => &[],
                };
                res.send_with(refused.status, "text/plain", extra, refused.why.as_bytes());
                return Handled::Done;
            }
            Some(Ok(offer)) => Some(offer),
        };
        self.call(req, None, websocket)
    }

    fn handle_streamed(
        &mut self,
        req: &Request<'_>,
        body: BodyStream,
        _res: &mut Response<'_>,
    ) -> Handled<AsgiJob> {
        self.call(req, Some(body), None)
    }

    fn on_response(&mut self, status: u16) {
        if status == 413 {
            crate::front::warn(crate::front::OVER_MAX_BODY);
        }
    }
}

impl AsgiHandler {
    fn call(
        &mut self,
        req: &Request<'_>,
        stream: Option<BodyStream>,
        websocket: Option<WsOffer>,
    ) -> Handled<AsgiJob> {
        let call = Call {
            id: self.bridge.next_id.fetch_add(1, Ordering::Relaxed),
            method: req.method.as_str(),
            path: req.path.to_owned(),
            query: req.query.unwrap_or("").as_bytes().to_vec(),
            version: req.version,
            headers: req
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase().into_bytes(), h.value.to_vec()))
                .collect(),
            body: req.body.to_vec(),
            stream,
            websocket,
            peer: req.peer,
        };
        Handled::Offload(AsgiJob {
            call: Box::new(call),
            bridge: self.bridge.clone(),
        })
    }
}

/// A request that asks for a WebSocket (a GET over HTTP/1.1 with `Connection: upgrade` and
/// `Upgrade: websocket`): its checked offer, or why it is refused. `None`: an HTTP request.
fn websocket_offer(
    req: &Request<'_>,
    deflate: Option<DeflateConfig>,
) -> Option<Result<WsOffer, handshake::Refused>> {
    let token = |name: &str, token: &str| {
        req.header(name).is_some_and(|v| {
            v.split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        })
    };
    if req.version != Version::Http11
        || !token("connection", "upgrade")
        || !token("upgrade", "websocket")
    {
        return None;
    }
    let offer = handshake::Offer {
        deflate,
        ..handshake::Offer::default()
    };
    let accepted = match handshake::accept(req, &offer) {
        Ok(a) => a,
        Err(refused) => return Some(Err(refused)),
    };
    let field = |name: &str| {
        accepted
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let accept = field("Sec-WebSocket-Accept").unwrap_or_default();
    let deflate = accepted.deflate.zip(field("Sec-WebSocket-Extensions"));
    let protocols = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("sec-websocket-protocol"))
        .flat_map(|h| h.value.split(|&b| b == b','))
        .filter_map(|p| std::str::from_utf8(p.trim_ascii()).ok())
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    Some(Ok(WsOffer {
        accept,
        protocols,
        deflate,
    }))
}

/// Where a response is.
enum Progress {
    /// Nothing sent yet.
    Idle,
    /// `http.response.start` received: held until the first body message. `trailers`: the
    /// application said trailers follow the body (the `http.response.trailers` extension).
    Started {
        status: u16,
        fields: Vec<(String, Vec<u8>)>,
        trailers: bool,
    },
    /// A streamed body is going out; `held` to the length the application declared, if it did
    /// (and the request is not a HEAD, whose body is not sent).
    Streaming {
        writer: StreamWriter,
        held: Option<Held>,
        trailers: bool,
        /// `--compress`: the body's messages go through it ([`encoded`]).
        encoder: Option<Encoder>,
    },
    /// The body is complete; its trailers are arriving (`http.response.trailers` with
    /// `more_trailers`), `fields` so far. The stream ends with them.
    Trailers {
        writer: StreamWriter,
        fields: Vec<(String, Vec<u8>)>,
    },
    /// The response is complete (or abandoned).
    Done,
}

/// A streamed body's declared length, and how much of it the application has sent.
struct Held {
    length: u64,
    sent: u64,
}

/// One request as the Python loop sees it: its scope, its body, and the two halves of its
/// response (`start`, `body`).
#[pyclass(module = "berth._berth")]
struct AsgiRequest {
    /// Never reused while the server runs.
    #[pyo3(get)]
    id: u64,
    /// The ASGI `http` scope.
    #[pyo3(get)]
    scope: Py<PyDict>,
    body: Option<Vec<u8>>,
    /// The body while it arrives, instead of `body`.
    stream: Option<BodyStream>,
    /// The streamed body was cut short (the client left, or sent it malformed or too slowly).
    body_cut: bool,
    /// A send found the client gone.
    gone: bool,
    /// A HEAD request: its response's body is not sent, so a declared length is not held to.
    head: bool,
    /// `--compress` on: the request's accepted codings, for a whole response body.
    encoding: Option<crate::front::Encoding>,
    answer: Option<Answer>,
    progress: Progress,
    bridge: Arc<Bridge>,
    /// The `websocket` scope's side of things, for a WebSocket request.
    ws: Option<WsSide>,
}

/// A WebSocket request's state: its offer until the application accepts, then the mailbox
/// it shares with the connection and the connection's waker.
struct WsSide {
    offer: WsOffer,
    shared: Arc<WsShared>,
    /// Wakes the connection to take what the application sent (set by the accept).
    wake: Option<Box<dyn Fn() + Send + Sync>>,
    /// Largest message the client may send.
    max_message: usize,
}

impl WsSide {
    fn wake(&self) {
        if let Some(wake) = &self.wake {
            wake();
        }
    }
}

#[pymethods]
impl AsgiRequest {
    /// The next piece of the request body and whether more follows: the whole body at once if
    /// it came with the head, else what has arrived (`None`: nothing yet, wait for this
    /// request's wake event). Raises `ClientDisconnected` if the body was cut short.
    fn read_body<'py>(&mut self, py: Python<'py>) -> PyResult<Option<(Bound<'py, PyBytes>, bool)>> {
        if let Some(body) = self.body.take() {
            return Ok(Some((PyBytes::new(py, &body), false)));
        }
        let Some(stream) = &self.stream else {
            return Ok(Some((PyBytes::new(py, b""), false)));
        };
        match stream.pop(READ_MAX) {
            Popped::Data(data) => Ok(Some((PyBytes::new(py, &data), true))),
            Popped::Ended => {
                self.stream = None;
                Ok(Some((PyBytes::new(py, b""), false)))
            }
            Popped::Empty => Ok(None),
            Popped::Aborted => {
                self.stream = None;
                self.body_cut = true;
                Err(ClientDisconnected::new_err(
                    "the request body was cut short (the client went, or sent it too slowly or malformed)",
                ))
            }
        }
    }

    /// `http.response.start`: held until the first body message. With `trailers`, the body is
    /// streamed whatever its size, and the response ends with the `http.response.trailers`
    /// that follow its last message.
    #[pyo3(signature = (status, headers, trailers=false))]
    fn start(&mut self, status: u16, headers: Bound<'_, PyAny>, trailers: bool) -> PyResult<()> {
        if !matches!(self.progress, Progress::Idle) {
            return Err(PyRuntimeError::new_err(
                "http.response.start sent twice, or after the body",
            ));
        }
        if !(100..1000).contains(&status) {
            return Err(PyValueError::new_err(format!("bad status {status}")));
        }
        let fields = fields_of(&headers)?;
        self.progress = Progress::Started {
            status,
            fields,
            trailers,
        };
        Ok(())
    }

    /// `http.response.body`. Returns whether the body may go on at once: `False` means the
    /// stream is full, wait for this request's room event before the next body message.
    /// Raises `ClientDisconnected` if the client has gone while the body streams. A body that
    /// does not fit the `content-length` the application declared is its error, as in uvicorn:
    /// the client gets the declared header, the bytes sent up to that length, then the
    /// connection closed (an incomplete read, never a response rewritten to fit); the send
    /// raises `RuntimeError`, which the server logs with the application's other failures.
    fn body(&mut self, py: Python<'_>, body: &[u8], more: bool) -> PyResult<bool> {
        match std::mem::replace(&mut self.progress, Progress::Done) {
            Progress::Idle => {
                self.progress = Progress::Idle;
                Err(PyRuntimeError::new_err(
                    "http.response.body before http.response.start",
                ))
            }
            Progress::Done => Err(PyRuntimeError::new_err(
                "http.response.body after the response was complete",
            )),
            progress @ Progress::Trailers { .. } => {
                self.progress = progress;
                Err(PyRuntimeError::new_err(
                    "http.response.body after the body's last message (trailers are due)",
                ))
            }
            Progress::Started {
                status,
                fields,
                trailers: false,
            } if !more => {
                let (reply, misfit) = whole_reply(
                    status,
                    &fields,
                    body.to_vec(),
                    self.head,
                    self.encoding.as_ref(),
                )?;
                if let Some(answer) = self.answer.take() {
                    answer.reply(reply);
                }
                match misfit {
                    Some((sent, declared)) => Err(self.misfit(py, sent, declared)),
                    None => Ok(true),
                }
            }
            Progress::Started {
                status,
                fields,
                trailers,
            } => {
                let (fields, mut encoder) = match &self.encoding {
                    Some(e) => e.for_stream(status, fields, self.head)?,
                    None => (fields, None),
                };
                let declared = declared_length(fields.iter().map(|(n, v)| (n, v)))?
                    .filter(|_| has_body(status));
                let (writer, stream) = body_stream();
                let (bridge, id) = (self.bridge.clone(), self.id);
                writer.on_room(move || bridge.post(Event::Wake(id)));
                let first = encoded(&mut encoder, body, !more)?;
                let mut reply = Reply::streamed(status, first, stream);
                if let Some(length) = declared {
                    reply = reply.with_length(length);
                }
                let reply = with_app_fields(reply, fields)?;
                if let Some(answer) = self.answer.take() {
                    answer.reply(reply);
                }
                let held = declared.filter(|_| !self.head).map(|length| Held {
                    length,
                    sent: body.len() as u64,
                });
                if let Some(h) = held.as_ref().filter(|h| h.sent > h.length) {
                    // Past the length already: the session sent what fits and no more.
                    return Err(self.misfit(py, h.sent, h.length));
                }
                if !more {
                    // The whole body, with trailers to come.
                    self.last(py, writer, held, trailers)?;
                    return Ok(true);
                }
                self.progress = Progress::Streaming {
                    writer,
                    held,
                    trailers,
                    encoder,
                };
                Ok(true)
            }
            Progress::Streaming {
                writer,
                mut held,
                trailers,
                mut encoder,
            } => {
                let bytes = match encoded(&mut encoder, body, !more) {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        writer.abort();
                        return Err(e);
                    }
                };
                let Ok(room) = writer.push(bytes) else {
                    self.gone = true;
                    return Err(ClientDisconnected::new_err(
                        "the client has gone; the body was not sent",
                    ));
                };
                if let Some(h) = &mut held {
                    h.sent += body.len() as u64;
                    if h.sent > h.length {
                        // What was pushed goes out up to the length; then the connection
                        // closes.
                        writer.abort();
                        return Err(self.misfit(py, h.sent, h.length));
                    }
                }
                if more {
                    self.progress = Progress::Streaming {
                        writer,
                        held,
                        trailers,
                        encoder,
                    };
                } else {
                    self.last(py, writer, held, trailers)?;
                }
                Ok(room)
            }
        }
    }

    /// `http.response.trailers`: fields sent after the body, for a response started with
    /// `trailers=True` whose body's last message has gone. With `more`, more trailers follow;
    /// without, the response ends with them all (over HTTP/1.1 a trailer section after the
    /// last chunk, over HTTP/2 a HEADERS frame; HTTP/1.0, a HEAD request and a body under the
    /// application's own `content-length` have nowhere for them, and the body ends alone).
    /// A field a trailer must not carry (framing, routing, the content's type or encoding)
    /// raises `ValueError` and cuts the response off, as a failure mid-body does.
    #[pyo3(signature = (headers, more=false))]
    fn trailers(&mut self, headers: Bound<'_, PyAny>, more: bool) -> PyResult<()> {
        match std::mem::replace(&mut self.progress, Progress::Done) {
            Progress::Trailers { writer, mut fields } => {
                fields.extend(fields_of(&headers)?);
                if more {
                    self.progress = Progress::Trailers { writer, fields };
                    return Ok(());
                }
                // Refused, the writer is dropped: the body ends unfinished.
                writer
                    .end_with(fields)
                    .map_err(|e| PyValueError::new_err(e.to_string()))
            }
            progress => {
                let promised = matches!(
                    progress,
                    Progress::Started { trailers: true, .. }
                        | Progress::Streaming { trailers: true, .. }
                );
                self.progress = progress;
                Err(PyRuntimeError::new_err(if promised {
                    "http.response.trailers before the body's last message (more_body False)"
                } else {
                    "http.response.trailers without trailers=True in http.response.start"
                }))
            }
        }
    }

    /// `websocket.accept`: the 101 with `subprotocol` (one the client offered) and the
    /// application's `headers`; from then on the connection speaks WebSocket.
    #[pyo3(signature = (subprotocol=None, headers=None))]
    fn ws_accept(
        &mut self,
        subprotocol: Option<String>,
        headers: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let ws = self
            .ws
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("websocket.accept for an http scope"))?;
        if self.answer.is_none() {
            return Err(PyRuntimeError::new_err(
                "websocket.accept after the handshake was answered",
            ));
        }
        if let Some(p) = &subprotocol {
            if !ws.offer.protocols.contains(p) {
                return Err(PyValueError::new_err(format!(
                    "subprotocol {p:?} was not offered by the client"
                )));
            }
        }
        let fields = match headers {
            Some(headers) => fields_of(&headers)?,
            None => Vec::new(),
        };
        // The application's fields are checked as any response's are; berth writes the
        // handshake's own.
        let checked = with_app_fields(Reply::empty(101), fields)?.fields;
        let mut headers = vec![("Sec-WebSocket-Accept".to_owned(), ws.offer.accept.clone())];
        if let Some(p) = subprotocol {
            headers.push(("Sec-WebSocket-Protocol".to_owned(), p));
        }
        if let Some((_, extensions)) = &ws.offer.deflate {
            headers.push(("Sec-WebSocket-Extensions".to_owned(), extensions.clone()));
        }
        for (name, value) in checked {
            let own = [
                "sec-websocket-accept",
                "sec-websocket-protocol",
                "sec-websocket-extensions",
                "upgrade",
            ];
            if own.iter().any(|o| name.eq_ignore_ascii_case(o)) {
                continue;
            }
            let value = String::from_utf8(value)
                .map_err(|_| PyValueError::new_err(format!("header {name} is not UTF-8")))?;
            headers.push((name, value));
        }
        let answer = self.answer.take().expect("checked above");
        ws.wake = Some(Box::new(answer.waker()));
        let session = AsgiWs::new(
            ws.shared.clone(),
            self.bridge.clone(),
            self.id,
            ws.max_message,
            ws.offer.deflate.as_ref().map(|(agreed, _)| *agreed),
        );
        answer.reply(Reply::switch(Switch {
            protocol: "websocket",
            headers,
            session: Box::new(session),
        }));
        Ok(())
    }

    /// `websocket.send`: `data` as a text message (`str`) or a binary one (`bytes`). Returns
    /// whether more may be sent at once: `False` means wait for this request's room event.
    /// Raises `ClientDisconnected` once the connection is over (or closed).
    fn ws_send(&mut self, data: Bound<'_, PyAny>) -> PyResult<bool> {
        let ws = self.accepted()?;
        let sent = if let Ok(text) = data.downcast::<pyo3::types::PyString>() {
            ws.shared.send(Some(&text.to_cow()?), &[])
        } else {
            ws.shared.send(None, data.downcast::<PyBytes>()?.as_bytes())
        };
        let Ok(room) = sent else {
            return Err(ClientDisconnected::new_err(
                "the WebSocket is closed; the message was not sent",
            ));
        };
        ws.wake();
        Ok(room)
    }

    /// `websocket.close`: before the accept, the handshake is refused with 403; after it, a
    /// close frame with `code` and `reason` (cut to fit a close frame).
    #[pyo3(signature = (code=1000, reason=""))]
    fn ws_close(&mut self, code: u16, reason: &str) -> PyResult<()> {
        if self.ws.is_none() {
            return Err(PyRuntimeError::new_err("websocket.close for an http scope"));
        }
        if let Some(answer) = self.answer.take() {
            answer.reply(Reply::new(
                403,
                "text/plain",
                b"refused by the application\n".to_vec(),
            ));
            return Ok(());
        }
        if !berth::proto::ws::frame::valid_close_code(code) || (1004..=1006).contains(&code) {
            return Err(PyValueError::new_err(format!(
                "{code} is not a close code to send"
            )));
        }
        let ws = self.accepted()?;
        if ws.shared.close(code, reason) {
            ws.wake();
        }
        Ok(())
    }

    /// `receive` for the `websocket` scope, after the connect: the next message as
    /// `("text", str)`, `("bytes", bytes)`, or `("close", code)` once the connection is over;
    /// `None` if nothing waits (wait for this request's wake event).
    fn ws_receive<'py>(&mut self, py: Python<'py>) -> PyResult<Option<(&'static str, PyObject)>> {
        let Some(ws) = &self.ws else {
            return Err(PyRuntimeError::new_err("not a websocket scope"));
        };
        if let Some(answer) = &self.answer {
            // Not accepted yet: nothing can arrive but the client's departure.
            return Ok(answer
                .cancelled()
                .then(|| {
                    (
                        "close",
                        1006u16.into_pyobject(py).map(|c| c.into_any().unbind()),
                    )
                })
                .map(|(k, v)| v.map(|v| (k, v)))
                .transpose()?);
        }
        let (next, resume) = ws.shared.pop();
        if resume {
            ws.wake();
        }
        Ok(match next {
            None => None,
            Some(Incoming::Text(t)) => Some(("text", t.into_pyobject(py)?.into_any().unbind())),
            Some(Incoming::Binary(b)) => Some(("bytes", PyBytes::new(py, &b).into_any().unbind())),
            Some(Incoming::Closed(code)) => {
                Some(("close", code.into_pyobject(py)?.into_any().unbind()))
            }
        })
    }

    /// Whether the request body was cut short (the client left, or sent it malformed or too
    /// slowly): an application that fails then failed for the client's sake.
    fn body_cut(&self) -> bool {
        self.body_cut
    }

    /// Whether the response has begun (its head is on its way).
    fn answered(&self) -> bool {
        self.answer.is_none()
    }

    /// Whether the response is complete (a WebSocket: closed, by either side).
    fn complete(&self) -> bool {
        if let Some(ws) = &self.ws {
            return self.answer.is_none() && (ws.wake.is_none() || ws.shared.finished());
        }
        matches!(self.progress, Progress::Done)
    }

    /// Whether the stream has room (or the client has gone: sending will say so).
    fn has_room(&self) -> bool {
        if let Some(ws) = &self.ws {
            return ws.shared.has_room();
        }
        match &self.progress {
            Progress::Streaming { writer, .. } => !writer.is_full(),
            _ => true,
        }
    }

    /// Whether the client has gone.
    fn disconnected(&self) -> bool {
        if self.gone {
            return true;
        }
        if let (Some(ws), None) = (&self.ws, &self.answer) {
            return ws.shared.gone();
        }
        match &self.progress {
            Progress::Streaming { writer, .. } | Progress::Trailers { writer, .. } => {
                writer.is_gone()
            }
            Progress::Done => false,
            _ => self.answer.as_ref().is_some_and(|a| a.cancelled()),
        }
    }

    /// The application failed, or gave up (`status`: 500, or 504 for a timeout): answers
    /// `status` if nothing was sent yet; a body under way is cut off (the connection closes
    /// without the last chunk, so the client can tell). Returns whether a status was sent.
    #[pyo3(signature = (status=500))]
    fn fail(&mut self, status: u16) -> bool {
        if let (Some(ws), None) = (&self.ws, &self.answer) {
            // An accepted WebSocket: closed with 1011 (an unexpected condition).
            if ws.shared.close(1011, "the application failed") {
                ws.wake();
            }
            return false;
        }
        let progress = std::mem::replace(&mut self.progress, Progress::Done);
        if let Progress::Streaming { writer, .. } | Progress::Trailers { writer, .. } = progress {
            writer.abort();
            return false;
        }
        match self.answer.take() {
            Some(answer) => {
                let text: &[u8] = if status == 504 {
                    b"the application did not answer in time\n"
                } else {
                    b"the request failed on the server\n"
                };
                answer.reply(Reply::new(status, "text/plain", text.to_vec()));
                true
            }
            None => false,
        }
    }
}

impl AsgiRequest {
    /// The body's last message has gone into `writer`: held to the declared length, then
    /// ended, or left open for the trailers the application promised.
    fn last(
        &mut self,
        py: Python<'_>,
        writer: StreamWriter,
        held: Option<Held>,
        trailers: bool,
    ) -> PyResult<()> {
        if let Some(h) = held.filter(|h| h.sent != h.length) {
            // Short of the length: what was pushed goes out; then the connection closes.
            writer.abort();
            return Err(self.misfit(py, h.sent, h.length));
        }
        if trailers {
            self.progress = Progress::Trailers {
                writer,
                fields: Vec::new(),
            };
        } else {
            writer.end();
        }
        Ok(())
    }
}

/// What a body message sends: its bytes as they are, or through the response's encoder,
/// flushed so that the message reaches the client now (an event stream's events must), and
/// at the `last` message ended with the coding's trailer. An encoder that fails ends the
/// response unfinished (the caller aborts it).
fn encoded(encoder: &mut Option<Encoder>, body: &[u8], last: bool) -> PyResult<Vec<u8>> {
    let Some(e) = encoder else {
        return Ok(body.to_vec());
    };
    let mut out = Vec::with_capacity(body.len() / 2 + 32);
    let result = if last {
        e.encode(body, &mut out).and_then(|()| e.finish(&mut out))
    } else {
        e.flush(body, &mut out)
    };
    result.map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok(out)
}

/// An ASGI header list (`[(name, value), ...]`, both bytes) as fields; names must be ASCII.
/// What the fields may be is checked where they are used.
fn fields_of(headers: &Bound<'_, PyAny>) -> PyResult<Vec<(String, Vec<u8>)>> {
    let mut fields = Vec::new();
    for pair in headers.try_iter()? {
        let pair = pair?;
        let name = pair.get_item(0)?;
        let value = pair.get_item(1)?;
        let name = std::str::from_utf8(name.downcast::<PyBytes>()?.as_bytes())
            .map_err(|_| PyValueError::new_err("a header name is not ASCII"))?
            .to_owned();
        fields.push((name, value.downcast::<PyBytes>()?.as_bytes().to_vec()));
    }
    Ok(fields)
}

/// Where berth's loop runs (see the module docs).
enum Engine {
    Inline(Box<Mutex<Inline<AsgiHandler>>>),
    Threads(Mutex<Option<Server>>),
}

/// berth's HTTP engine serving an ASGI app whose loop runs in Python (`berth.asgi`). Frozen:
/// every method takes `&self` (its state is behind its own locks and atomics), so pyo3 needs
/// no borrow flag for it.
#[pyclass(frozen, module = "berth._berth")]
pub struct AsgiServer {
    bridge: Arc<Bridge>,
    engine: Engine,
    /// Inline: the loop is over (drained or stopped).
    over: AtomicBool,
    /// The address served.
    #[pyo3(get)]
    host: String,
    #[pyo3(get)]
    port: u16,
    /// `http://HOST:PORT`, `https://...` or `unix:///PATH`: what the startup line says.
    #[pyo3(get)]
    url: String,
    describe: String,
    /// Shared by every scope: its `server`, `(host, port)` built once (None over UNIX).
    server_tuple: Py<PyAny>,
    asgi_version: Py<PyDict>,
    /// Largest WebSocket message a client may send.
    ws_max_message: usize,
    /// On-the-fly compression of responses (`--compress`); `None`: off.
    compress: Option<berth::proto::http::Compress>,
}

#[pymethods]
impl AsgiServer {
    /// Binds `host:port` and starts berth's I/O threads (`io_threads` event loops of `model`).
    /// Requests wait in the bridge until the loop takes them.
    #[new]
    /// `fd`: a listening socket to serve instead of binding `host:port` (`python -m berth
    /// --workers`: the parent's), taken over (closed when done).
    #[pyo3(signature = (host="127.0.0.1", port=8000, model="evloop", io_threads=1, reuse_port=false, max_body=None, max_connections=None, ws_max_message=16 * 1024 * 1024, fd=None, options=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        model: &str,
        io_threads: usize,
        reuse_port: bool,
        max_body: Option<usize>,
        max_connections: Option<usize>,
        ws_max_message: usize,
        fd: Option<i32>,
        options: Option<Bound<'_, PyDict>>,
    ) -> PyResult<AsgiServer> {
        let model: Model = model.parse().map_err(|_| {
            PyValueError::new_err(format!(
                "no model {model:?} (models: {})",
                crate::front::models().join(", ")
            ))
        })?;
        if model.forks() {
            // Its children would hand requests to an event loop that is not in them: every
            // request waited forever.
            return Err(PyValueError::new_err(format!(
                "model {model}: ASGI applications run on this process's event loop, which \
                 forked children do not have; use --workers N for processes"
            )));
        }
        let inherited = fd.map(crate::workers::inherited).transpose()?;
        let addr = crate::workers::address(host, port)?;
        let mut settings = Settings::new(model, addr);
        settings.common.accept_threads = io_threads.max(1);
        // Every ASGI job is deferred: none needs a worker thread.
        settings.common.workers = 0;
        settings.common.listen.exclusive = !reuse_port;
        settings.common.listen.inherited = inherited;
        if let Some(max) = max_body {
            settings.common.limits.max_body_bytes = max;
        }
        if let Some(max) = max_connections {
            settings.common.capacity = max;
        }
        // `options`: TLS, backlog, keep-alive, concurrency limit (see `front::configure`).
        let app = crate::front::configure(&mut settings, options.as_ref())?;
        let stats = settings.new_stats().map_err(|e| crate::os_error("", e))?;
        let threads = model != Model::Evloop || io_threads > 1;
        let bridge = Arc::new(Bridge::new(threads).map_err(|e| crate::os_error("", e))?);
        let service = Asgi {
            bridge: bridge.clone(),
            // The app's sends wake the connection from the bridge's thread: a model that waits
            // in `read` (a blocking one) could not be woken for them.
            websocket: model.caps().wakes_upgraded,
            // permessage-deflate (RFC 7692), unless the options' `ws_deflate` is false.
            deflate: app.ws_deflate.enabled.then_some(app.ws_deflate),
            refusal: crate::front::refusal(&settings.common.limits),
        };
        let (engine, bound) = if threads {
            let (server, bound) = py
                .allow_threads(|| drive::serve(&settings, service, stats))
                .map_err(crate::bind_error)?;
            (Engine::Threads(Mutex::new(Some(server))), bound)
        } else {
            let (inline, bound) = Inline::bind(
                settings.addr.clone(),
                &service,
                &settings.common,
                &settings.models.evloop,
                stats,
            )
            .map_err(crate::bind_error)?;
            (Engine::Inline(Box::new(Mutex::new(inline))), bound)
        };
        let tls = matches!(settings.common.listen.transport, Acceptor::Tls(_));
        let url = crate::front::url(&bound, tls);
        // Over a UNIX socket: the path, port 0 and no `server` in the scope (as uvicorn).
        let (host, port, server) = match &bound {
            Addr::Tcp(tcp) => {
                let host = tcp.ip().to_string();
                let tuple = PyTuple::new(
                    py,
                    [
                        host.clone().into_pyobject(py)?.into_any(),
                        tcp.port().into_pyobject(py)?.into_any(),
                    ],
                )?;
                (host, tcp.port(), tuple.into_any().unbind())
            }
            Addr::Unix(path) => (path.display().to_string(), 0, py.None()),
        };
        let asgi_version = PyDict::new(py);
        asgi_version.set_item("version", "3.0")?;
        asgi_version.set_item("spec_version", "2.4")?;
        let describe = match engine {
            Engine::Inline(_) => format!(
                "model {model} inline on the Python thread, capacity {}",
                settings.common.capacity
            ),
            Engine::Threads(_) => format!("model {model}, {}", settings.describe()),
        };
        Ok(AsgiServer {
            bridge,
            engine,
            over: AtomicBool::new(false),
            server_tuple: server,
            host,
            port,
            url,
            describe,
            asgi_version: asgi_version.unbind(),
            ws_max_message,
            compress: app.compress,
        })
    }

    /// How the server runs, for the line printed at start.
    fn describe(&self) -> String {
        self.describe.clone()
    }

    /// The descriptor to watch (`loop.add_reader`): inline, berth's loop's (readable when it
    /// has work); else the wake socket (readable when requests wait).
    fn fileno(&self) -> i32 {
        match (&self.engine, &self.bridge.wake) {
            (Engine::Inline(inline), _) => lock(inline).fd(),
            (Engine::Threads(_), Some((_, wake_rx))) => wake_rx.as_raw_fd(),
            (Engine::Threads(_), None) => -1,
        }
    }

    /// Whether berth's loop runs inline (`take` turns it; `begin_drain`, not `drain`).
    #[getter]
    fn inline(&self) -> bool {
        matches!(self.engine, Engine::Inline(_))
    }

    /// Inline: the loop is over (drained or stopped); nothing more will come.
    fn over(&self) -> bool {
        self.over.load(Ordering::Acquire)
    }

    /// Starts a graceful stop (inline: keep calling `take` until `over()`); whatever is left
    /// after `timeout` seconds is closed.
    fn begin_drain(&self, timeout: f64) -> PyResult<()> {
        let grace = Duration::try_from_secs_f64(timeout)
            .map_err(|_| PyValueError::new_err("timeout is not a number of seconds"))?;
        match &self.engine {
            Engine::Inline(inline) => lock(inline).drain(grace),
            Engine::Threads(server) => {
                if let Some(server) = lock(server).as_ref() {
                    server.drain(grace);
                }
            }
        }
        Ok(())
    }

    /// Everything waiting, in order: an `AsgiRequest` per new request, an `int` (a request's
    /// id) per stream that has room again. An empty list means the queue was empty, and the
    /// next post wakes the loop. `scope_state` (the lifespan's state, or None) is copied into
    /// each scope's `state`.
    #[pyo3(signature = (woken, scope_state=None))]
    fn take<'py>(
        &self,
        py: Python<'py>,
        woken: bool,
        scope_state: Option<Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyList>> {
        match (&self.engine, &self.bridge.wake) {
            (Engine::Inline(inline), _) => {
                let mut guard = lock(inline);
                let inline: &mut Inline<AsgiHandler> = &mut guard;
                let going = py.allow_threads(|| inline.turn());
                match going {
                    Ok(true) => {}
                    Ok(false) => self.over.store(true, Ordering::Release),
                    Err(e) => {
                        self.over.store(true, Ordering::Release);
                        return Err(crate::os_error("berth's loop failed: ", e));
                    }
                }
            }
            (Engine::Threads(_), Some((_, wake_rx))) if woken => {
                // One read: each wake-up is one byte, written only while the loop sleeps, so
                // a few at most wait here.
                let mut sink = [0u8; 256];
                let mut wake_rx: &UnixStream = wake_rx;
                let _ = wake_rx.read(&mut sink);
            }
            _ => {}
        }
        let out = PyList::empty(py);
        loop {
            let Ok(event) = self.bridge.rx.try_recv() else {
                if !out.is_empty() {
                    return Ok(out);
                }
                // Empty: whoever posts next wakes the loop. Look once more, for a post that
                // came between the empty queue and the flag.
                self.bridge.asleep.store(true, Ordering::Release);
                match self.bridge.rx.try_recv() {
                    Ok(event) => {
                        self.push(py, &out, event, scope_state.as_ref())?;
                        continue;
                    }
                    Err(_) => return Ok(out),
                }
            };
            self.push(py, &out, event, scope_state.as_ref())?;
        }
    }

    /// Stops taking connections and waits (GIL released) until the requests in flight are
    /// answered or `timeout` seconds pass. The loop must keep running meanwhile (call this in
    /// an executor thread): it is what answers them.
    fn drain(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let grace = Duration::try_from_secs_f64(timeout)
            .map_err(|_| PyValueError::new_err("timeout is not a number of seconds"))?;
        let server = match &self.engine {
            Engine::Threads(server) => lock(server).take(),
            Engine::Inline(_) => {
                return Err(PyRuntimeError::new_err(
                    "inline: call begin_drain and keep taking until over()",
                ))
            }
        };
        if let Some(server) = server {
            py.allow_threads(|| {
                server.drain(grace);
                server.join();
            });
        }
        Ok(())
    }
}

/// Locks, ignoring poisoning (each change under these locks is one call).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl AsgiRequest {
    /// The error an application made by sending `sent` bytes of a body it declared `declared`
    /// bytes long.
    fn misfit(&self, py: Python<'_>, sent: u64, declared: u64) -> PyErr {
        let scope = self.scope.bind(py);
        let field = |key: &str| -> String {
            scope
                .get_item(key)
                .ok()
                .flatten()
                .and_then(|v| v.extract().ok())
                .unwrap_or_default()
        };
        PyRuntimeError::new_err(misfit(&field("method"), &field("path"), sent, declared))
    }

    /// The WebSocket side of an accepted request.
    fn accepted(&self) -> PyResult<&WsSide> {
        match (&self.ws, &self.answer) {
            (Some(ws), None) if ws.wake.is_some() => Ok(ws),
            (Some(_), _) => Err(PyRuntimeError::new_err(
                "a WebSocket message before websocket.accept",
            )),
            (None, _) => Err(PyRuntimeError::new_err("not a websocket scope")),
        }
    }
}

impl AsgiServer {
    fn push<'py>(
        &self,
        py: Python<'py>,
        out: &Bound<'py, PyList>,
        event: Event,
        state: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<()> {
        match event {
            Event::Wake(id) => out.append(id),
            Event::Call(call, answer) => {
                let scope = self.scope(py, &call, state)?;
                let (body, stream) = match call.stream {
                    Some(stream) => (None, Some(stream)),
                    None => (Some(call.body), None),
                };
                let ws = call.websocket.map(|offer| WsSide {
                    offer,
                    shared: Arc::new(WsShared::default()),
                    wake: None,
                    max_message: self.ws_max_message,
                });
                let request = AsgiRequest {
                    id: call.id,
                    scope: scope.unbind(),
                    body,
                    stream,
                    body_cut: false,
                    gone: false,
                    head: call.method == "HEAD",
                    encoding: crate::front::Encoding::for_request(
                        self.compress,
                        call.headers
                            .iter()
                            .filter(|(name, _)| name == b"accept-encoding")
                            .map(|(_, value)| value.as_slice()),
                    ),
                    answer: Some(answer),
                    progress: Progress::Idle,
                    bridge: self.bridge.clone(),
                    ws,
                };
                out.append(Py::new(py, request)?)
            }
        }
    }

    fn scope<'py>(
        &self,
        py: Python<'py>,
        call: &Call,
        state: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let scope = PyDict::new(py);
        let (kind, scheme) = match &call.websocket {
            Some(_) => (intern!(py, "websocket"), intern!(py, "ws")),
            None => (intern!(py, "http"), intern!(py, "http")),
        };
        scope.set_item(intern!(py, "type"), kind)?;
        scope.set_item(intern!(py, "asgi"), self.asgi_version.bind(py))?;
        let version = match call.version {
            Version::Http10 => intern!(py, "1.0"),
            Version::Http11 => intern!(py, "1.1"),
            Version::Http2 => intern!(py, "2"),
        };
        scope.set_item(intern!(py, "http_version"), version)?;
        if call.websocket.is_none() && call.version != Version::Http10 {
            // HTTP/1.1 (a trailer section) and HTTP/2 (a HEADERS frame) can carry trailers.
            let extensions = PyDict::new(py);
            extensions.set_item(intern!(py, "http.response.trailers"), PyDict::new(py))?;
            scope.set_item(intern!(py, "extensions"), extensions)?;
        }
        match &call.websocket {
            Some(offer) => scope.set_item(intern!(py, "subprotocols"), &offer.protocols)?,
            None => scope.set_item(intern!(py, "method"), call.method)?,
        }
        scope.set_item(intern!(py, "scheme"), scheme)?;
        scope.set_item(
            intern!(py, "path"),
            String::from_utf8_lossy(&percent_decode(&call.path)),
        )?;
        scope.set_item(
            intern!(py, "raw_path"),
            PyBytes::new(py, call.path.as_bytes()),
        )?;
        scope.set_item(intern!(py, "query_string"), PyBytes::new(py, &call.query))?;
        scope.set_item(intern!(py, "root_path"), intern!(py, ""))?;
        let headers = PyList::empty(py);
        for (name, value) in &call.headers {
            headers.append((PyBytes::new(py, name), PyBytes::new(py, value)))?;
        }
        scope.set_item(intern!(py, "headers"), headers)?;
        scope.set_item(intern!(py, "server"), self.server_tuple.bind(py))?;
        match call.peer {
            Some(peer) => {
                scope.set_item(intern!(py, "client"), (peer.ip().to_string(), peer.port()))?
            }
            None => scope.set_item(intern!(py, "client"), py.None())?,
        }
        if let Some(state) = state {
            scope.set_item(intern!(py, "state"), state.copy()?)?;
        }
        Ok(scope)
    }
}

/// Registers the ASGI classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AsgiServer>()?;
    m.add_class::<AsgiRequest>()?;
    m.add(
        "ClientDisconnected",
        m.py().get_type::<ClientDisconnected>(),
    )?;
    Ok(())
}
