//! One request's state as the Python loop sees it ([`AsgiRequest`]): its body as it arrives,
//! and its response as the application sends it, message by message (`http.response.start`,
//! `body`, `pathsend`, `trailers`; the `websocket.*` messages over the connection's mailbox).
//! [`Progress`] says where the response is; a response is held until its first body message,
//! so that the everyday one-body response goes out whole with a Content-Length, and becomes a
//! streamed reply (with its window as backpressure) only when the application streams. Runs
//! with the GIL, on the Python loop's thread.

use std::io;
use std::sync::Arc;

use berth::proto::http::{body_stream, Answer, BodyStream, Encoder, Popped, Reply, StreamWriter};
use berth::proto::upgrade::Switch;
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use super::bridge::{Bridge, Event, WsOffer};
use crate::asgi_ws::{AsgiWs, Incoming, WsShared};
use crate::front::{declared_length, has_body, misfit, whole_reply, with_app_fields};

/// Most of a streamed request body one `receive` hands over.
const READ_MAX: usize = 256 * 1024;

create_exception!(
    _berth,
    ClientDisconnected,
    PyOSError,
    "The client has gone: what is sent is not delivered."
);

/// Where a response is.
pub(super) enum Progress {
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
pub(super) struct Held {
    length: u64,
    sent: u64,
}

/// One request as the Python loop sees it: its scope, its body, and the two halves of its
/// response (`start`, `body`).
#[pyclass(module = "berth._berth")]
pub(super) struct AsgiRequest {
    /// Never reused while the server runs.
    #[pyo3(get)]
    pub(super) id: u64,
    /// The ASGI `http` scope.
    #[pyo3(get)]
    pub(super) scope: Py<PyDict>,
    pub(super) body: Option<Vec<u8>>,
    /// The body while it arrives, instead of `body`.
    pub(super) stream: Option<BodyStream>,
    /// The streamed body was cut short (the client left, or sent it malformed or too slowly).
    pub(super) body_cut: bool,
    /// A send found the client gone.
    pub(super) gone: bool,
    /// A HEAD request: its response's body is not sent, so a declared length is not held to.
    pub(super) head: bool,
    /// `--compress` on: the request's accepted codings, for a whole response body.
    pub(super) encoding: Option<crate::front::Encoding>,
    pub(super) answer: Option<Answer>,
    pub(super) progress: Progress,
    pub(super) bridge: Arc<Bridge>,
    /// The `websocket` scope's side of things, for a WebSocket request.
    pub(super) ws: Option<WsSide>,
}

/// A WebSocket request's state: its offer until the application accepts, then the mailbox
/// it shares with the connection and the connection's waker.
pub(super) struct WsSide {
    pub(super) offer: WsOffer,
    pub(super) shared: Arc<WsShared>,
    /// Wakes the connection to take what the application sent (set by the accept).
    pub(super) wake: Option<Box<dyn Fn() + Send + Sync>>,
    /// Largest message the client may send.
    pub(super) max_message: usize,
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
        if self.answer.is_none() {
            // Only a WebSocket's request gets here: accepted, or refused already.
            return Err(PyRuntimeError::new_err(
                "websocket.http.response.start after the handshake was answered",
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
                    answer.reply(self.denial_closes(reply));
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
                    answer.reply(self.denial_closes(reply));
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

    /// `http.response.pathsend` (the Path Send extension): the body is the file at `path`,
    /// sent from where it lies as berth sends its own files (`sendfile(2)` over plain HTTP/1.1,
    /// read as the windows open over HTTP/2 and in bounded chunks over TLS), never read whole
    /// into memory. The head is the application's `http.response.start`, with the file's size
    /// as its length. A relative path is the working directory's, as `open()` takes it
    /// (Starlette's `FileResponse` passes the path it was given). A file that cannot be opened
    /// raises its `OSError` (nothing was sent: the application's failure is a 500), as does
    /// anything but a regular file (`IsADirectoryError`, or `OSError` with `EINVAL`); a
    /// `content-length` the application declared that is not the file's size raises
    /// `RuntimeError` before anything is sent. Not after a body message, nor with trailers
    /// promised.
    fn pathsend(&mut self, path: std::path::PathBuf) -> PyResult<()> {
        let (status, fields) = match std::mem::replace(&mut self.progress, Progress::Done) {
            Progress::Started {
                status,
                fields,
                trailers: false,
            } => (status, fields),
            progress => {
                let why = match &progress {
                    Progress::Idle => "http.response.pathsend before http.response.start",
                    Progress::Started { .. } => {
                        "http.response.pathsend with trailers promised (trailers=True)"
                    }
                    _ => "http.response.pathsend after the body began, or the response ended",
                };
                self.progress = progress;
                return Err(PyRuntimeError::new_err(why));
            }
        };
        let opened = std::fs::File::open(&path).and_then(|file| {
            let meta = file.metadata()?;
            if meta.is_dir() {
                return Err(io::Error::from_raw_os_error(libc::EISDIR));
            }
            if !meta.is_file() {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            Ok((file, meta.len()))
        });
        let (file, len) = match opened {
            Ok(found) => found,
            Err(e) => {
                self.progress = Progress::Started {
                    status,
                    fields,
                    trailers: false,
                };
                let what = format!("http.response.pathsend {}: ", path.display());
                return Err(crate::os_error(&what, e));
            }
        };
        let declared = declared_length(fields.iter().map(|(n, v)| (n, v)))?;
        if let Some(declared) = declared.filter(|&d| d != len && has_body(status)) {
            self.progress = Progress::Started {
                status,
                fields,
                trailers: false,
            };
            return Err(PyRuntimeError::new_err(format!(
                "http.response.pathsend {}: the file has {len} bytes, content-length says \
                 {declared}; nothing was sent",
                path.display()
            )));
        }
        let reply = with_app_fields(Reply::file(status, file, 0, len), fields)?;
        if let Some(answer) = self.answer.take() {
            answer.reply(reply);
        }
        Ok(())
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
        if self.answer.is_none() || !matches!(self.progress, Progress::Idle) {
            return Err(PyRuntimeError::new_err(
                "websocket.accept after the handshake was answered (or a denial response began)",
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
        if !matches!(self.progress, Progress::Idle) {
            return Err(PyRuntimeError::new_err(
                "websocket.close during the denial response (websocket.http.response.*)",
            ));
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
        if ws.wake.is_none() {
            // Refused (403) or denied with the application's response: the connection closes
            // without a WebSocket ever opening, as one that left without a close frame.
            return Ok(Some((
                "close",
                1006u16.into_pyobject(py)?.into_any().unbind(),
            )));
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
            if ws.wake.is_some() {
                return ws.shared.finished();
            }
            // Not accepted: refused (403), or denied with the application's own response.
            return self.answer.is_none()
                && matches!(self.progress, Progress::Idle | Progress::Done);
        }
        matches!(self.progress, Progress::Done)
    }

    /// Whether the stream has room (or the client has gone: sending will say so).
    fn has_room(&self) -> bool {
        if let Some(ws) = self.ws.as_ref().filter(|ws| ws.wake.is_some()) {
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
        if let Some(ws) = self.ws.as_ref().filter(|ws| ws.wake.is_some()) {
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
        if let Some(ws) = self.ws.as_ref().filter(|ws| ws.wake.is_some()) {
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
    /// A WebSocket's denial response (the `websocket.http.response` extension) ends with the
    /// connection, as the extension says; an HTTP response keeps it.
    fn denial_closes(&self, reply: Reply) -> Reply {
        if self.ws.is_some() {
            reply.closing()
        } else {
            reply
        }
    }

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
