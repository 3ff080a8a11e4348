//! WSGI (PEP 3333) applications on berth's HTTP engine. The I/O threads parse, time out,
//! limit and write without ever touching Python; each request is handed, as a deferred job, to
//! the front's own threads (`--threads` of them, [`Executor`]), which run the application and
//! answer it. An application that raises costs its own request (500, the traceback printed),
//! never the server; one whose body does not fit the Content-Length it declared costs its
//! connection (see [`front::whole_reply`]). berth's limits, timeouts and graceful shutdown
//! apply as to any service.
//!
//! What a request costs in Python's time, and how it is kept low (issue 33):
//! - the GIL is taken once per batch of ready requests, not once per request: a thread that
//!   has it answers every request waiting in the queue before letting it go;
//! - each thread keeps its Python thread state for its whole life (an outer `with_gil` around
//!   `allow_threads`): taking the GIL from a thread without one made and destroyed a thread
//!   state per request, and with it an `mmap`/`munmap` of its frame stack (a fifth of the CPU);
//! - the environ starts as a copy of a dict holding what every request shares (one C call),
//!   its keys are interned strings where the field is a common one, and the request's own
//!   fields cross from the I/O thread in one buffer (two allocations, not two per field).
//!
//! Where berth's loop runs (issue 43):
//!
//! - **inline** (`--threads 1` with one `evloop` loop, the model and thread count the speed
//!   target is measured with): the one application thread also turns berth's loop
//!   ([`berth::drive::evloop::Inline`]), with the GIL released, between batches of requests,
//!   as the ASGI front does. No hand-off between threads: no wake-up write, no futex and no
//!   context switch per batch. With one application thread the application answers one
//!   request at a time either way; what the loop does meanwhile (accepting, reading, writing)
//!   waits for the request in hand, as under gunicorn's sync worker.
//! - **threads** (otherwise): berth's loops run in their own threads and queue requests for
//!   the application's threads ([`Executor`]), waking one when it sleeps; each answer wakes
//!   the connection's loop when it sleeps.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use berth::drive::evloop::Inline;
use berth::drive::{self, Model, Service, Settings};
use berth::net::Acceptor;
use berth::proto::http::{
    Answer, Handled, Handler, Job, Method, Reply, Request, Response, Version,
};
use crossbeam_channel::{Receiver, Sender, TrySendError};
use pyo3::exceptions::PyValueError;
use pyo3::intern;

use crate::front::{self, percent_decode, whole_reply};
use crate::workers;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

/// The application and what every environ shares.
struct App {
    app: Py<PyAny>,
    /// What every environ holds whatever the request (`SCRIPT_NAME`, `SERVER_NAME`,
    /// `SERVER_PORT`, `wsgi.*` but `wsgi.input`): each environ starts as a copy of its
    /// listener's (the main address first, then each of [`front::AppOptions::more`]).
    bases: Vec<Py<PyDict>>,
    /// Written to a connection refused at capacity (with `Server` or without).
    refusal: &'static [u8],
    /// Looked up once, not per request: `io.BytesIO`, `sys.stderr`, and the `write()` callable
    /// `start_response` returns (which refuses: PEP 3333's legacy write is not supported).
    bytes_io: Py<PyAny>,
    stderr: Py<PyAny>,
    refuse_write: Py<PyAny>,
    /// The threads that run the application.
    exec: Executor,
    /// On-the-fly compression of responses (`--compress`); `None`: off.
    compress: Option<berth::proto::http::Compress>,
    /// Files served before the application (`--static-path-mount`).
    statics: Option<front::StaticMount>,
}

/// Where berth's loop runs (see the module docs).
enum Engine {
    /// Turned by the one application thread ([`serve_inline`]).
    Inline(Arc<Mutex<Inline<WsgiHandler>>>),
    /// In berth's own threads: a server per listener.
    Threads(Vec<drive::Server>),
}

/// The service one listener is served with: the application, and which listener it is (an
/// index of [`App::bases`]).
#[derive(Clone)]
struct Wsgi {
    app: Arc<App>,
    listener: usize,
}

impl Service for Wsgi {
    type Handler = WsgiHandler;

    fn handler(&self, _thread: usize) -> WsgiHandler {
        WsgiHandler {
            app: self.app.clone(),
            listener: self.listener,
        }
    }

    fn refusal(&self) -> &'static [u8] {
        self.app.refusal
    }

    fn files(&self) -> berth::files::Files {
        self.app
            .statics
            .as_ref()
            .map_or_else(berth::files::Files::none, front::StaticMount::files)
    }

    fn around_fork(&self, fork: &mut dyn FnMut() -> bool) {
        let exec = &self.app.exec;
        front::around_fork(&mut || {
            let child = fork();
            if child {
                // The application's threads stayed in the parent.
                exec.forks.fetch_add(1, Relaxed);
            }
            child
        });
    }
}

struct WsgiHandler {
    app: Arc<App>,
    listener: usize,
}

/// One request, owned, on its way to the application's threads.
struct Call {
    app: Arc<App>,
    /// The listener it came through (an index of [`App::bases`]).
    listener: usize,
    method: Method,
    /// The request-target, then each field's name and value, in one buffer.
    bytes: Vec<u8>,
    /// Where the path ends in `bytes` (the query, if any, follows its `?`).
    path_end: usize,
    /// Where the request-target ends in `bytes`.
    target_end: usize,
    /// Each field: where its name starts, where its value starts (the name's end), where the
    /// value ends, in `bytes`.
    fields: Vec<(u32, u32, u32)>,
    body: Vec<u8>,
    version: Version,
    /// The client's address (`REMOTE_ADDR`, `REMOTE_PORT`), where the connection has one.
    peer: Option<std::net::SocketAddr>,
}

impl Handler for WsgiHandler {
    type Job = Call;

    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<Call> {
        if let Some(handled) = self.app.statics.as_ref().and_then(|s| s.answer(req, res)) {
            return handled;
        }
        let size = req.target.len()
            + req
                .headers
                .iter()
                .map(|h| h.name.len() + h.value.len())
                .sum::<usize>();
        let mut bytes = Vec::with_capacity(size);
        bytes.extend_from_slice(req.path.as_bytes());
        let path_end = bytes.len();
        if let Some(query) = req.query {
            bytes.push(b'?');
            bytes.extend_from_slice(query.as_bytes());
        }
        let target_end = bytes.len();
        let mut fields = Vec::with_capacity(req.headers.len());
        for h in req.headers {
            let name = bytes.len() as u32;
            bytes.extend_from_slice(h.name.as_bytes());
            let value = bytes.len() as u32;
            bytes.extend_from_slice(h.value);
            fields.push((name, value, bytes.len() as u32));
        }
        Handled::Offload(Call {
            app: self.app.clone(),
            listener: self.listener,
            method: req.method,
            bytes,
            path_end,
            target_end,
            fields,
            body: req.body.to_vec(),
            version: req.version,
            peer: req.peer,
        })
    }

    fn on_response(&mut self, status: u16) {
        if status == 413 {
            front::warn(front::OVER_MAX_BODY);
        }
    }
}

impl Job for Call {
    /// Answered by the application's threads ([`Executor`]), not by berth's worker pool.
    const DEFERRED: bool = true;

    fn start(self, answer: Answer) {
        let app = self.app.clone();
        app.exec.submit(self, answer);
    }

    fn run(self) -> Reply {
        Python::with_gil(|py| self.answer(py))
    }
}

/// What an executor thread is given.
enum Work {
    Call(Call, Answer),
    /// End the thread (the server has stopped).
    Stop,
}

/// The threads that run a WSGI application (`--threads`), fed by one queue. Each takes the GIL
/// once per batch: it answers every request waiting before it lets the GIL go. Started in the
/// process that first needs them: a forked child (the `forked` and `prefork` models) has none
/// of its parent's threads, so it starts its own at its first request. Inline (see the module
/// docs) it has no threads: the serving thread drains the queue after each turn of the loop.
struct Executor {
    /// Requests queued or running, and answered: what a drain's log lines count.
    counts: Arc<Counts>,
    threads: usize,
    /// Requests that may wait in the queue; one more is answered 503 at once (berth's
    /// `--queue-capacity`, as its worker pool does).
    capacity: usize,
    /// Forks this process is into since the executor was made (bumped in the child by
    /// [`Wsgi::around_fork`]): threads started under another count are a parent's. Read per
    /// request instead of asking the kernel for the process id.
    forks: AtomicU32,
    running: Mutex<Option<Running>>,
    /// Inline: the queue the serving thread drains ([`serve_inline`]).
    inline: Option<(Sender<Work>, Receiver<Work>)>,
}

struct Running {
    /// [`Executor::forks`] when these threads started.
    forks: u32,
    tx: Sender<Work>,
    handles: Vec<JoinHandle<()>>,
}

/// What the application's threads have in hand and have done, in this process.
#[derive(Default)]
struct Counts {
    /// Requests queued for the application or being answered by it.
    inflight: AtomicUsize,
    /// Requests the application has answered.
    answered: AtomicUsize,
}

impl Counts {
    fn now(&self) -> (usize, usize) {
        (self.inflight.load(Relaxed), self.answered.load(Relaxed))
    }

    /// Answers `call` (the GIL held), and counts it answered.
    fn answer(&self, py: Python<'_>, call: Call, answer: Answer) {
        answer.reply(call.answer(py));
        self.inflight.fetch_sub(1, Relaxed);
        self.answered.fetch_add(1, Relaxed);
    }
}

impl Executor {
    fn new(threads: usize, capacity: usize, inline: bool) -> Executor {
        let capacity = capacity.max(1);
        Executor {
            counts: Arc::default(),
            threads: threads.max(1),
            capacity,
            forks: AtomicU32::new(0),
            running: Mutex::new(None),
            inline: inline.then(|| crossbeam_channel::bounded(capacity)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a request for the application's threads (starting them in this process first
    /// if it has none). If they are gone, the answer is dropped: 500.
    fn submit(&self, call: Call, answer: Answer) {
        if let Some((tx, _)) = &self.inline {
            return self.queue(tx, call, answer);
        }
        let forks = self.forks.load(Relaxed);
        let mut running = self.lock();
        if running.as_ref().is_none_or(|r| r.forks != forks) {
            // A parent's threads are not in this (forked) process: leave them be.
            if let Some(old) = running.take() {
                std::mem::forget(old.handles);
            }
            match Running::start(self.threads, self.capacity, forks, &self.counts) {
                Ok(started) => *running = Some(started),
                Err(e) => {
                    front::warn(&format!("cannot start the WSGI threads: {e}"));
                    return;
                }
            }
        }
        if let Some(r) = running.as_ref() {
            // Never blocks (a full queue is answered 503): sent under the lock rather than
            // with a clone of the sender per request.
            self.queue(&r.tx, call, answer);
        }
    }

    fn queue(&self, tx: &Sender<Work>, call: Call, answer: Answer) {
        match tx.try_send(Work::Call(call, answer)) {
            Ok(()) => {
                self.counts.inflight.fetch_add(1, Relaxed);
            }
            Err(TrySendError::Full(Work::Call(_, answer))) => answer.reply(Reply::overloaded()),
            Err(_) => {}
        }
    }

    /// Ends this process's threads once the requests queued are answered, and waits for them.
    /// Call without the GIL.
    fn stop(&self) {
        let Some(running) = self.lock().take() else {
            return;
        };
        if running.forks != self.forks.load(Relaxed) {
            return;
        }
        for _ in &running.handles {
            let _ = running.tx.send(Work::Stop);
        }
        for handle in running.handles {
            let _ = handle.join();
        }
    }
}

impl Running {
    fn start(
        threads: usize,
        capacity: usize,
        forks: u32,
        counts: &Arc<Counts>,
    ) -> std::io::Result<Running> {
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        let handles = (0..threads)
            .map(|i| {
                let rx = rx.clone();
                let counts = counts.clone();
                std::thread::Builder::new()
                    .name(format!("berth-wsgi-{i}"))
                    .spawn(move || serve_calls(rx, counts))
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Running { forks, tx, handles })
    }
}

/// An executor thread: keeps its Python thread state for its whole life (the outer
/// `with_gil`), waits for work without the GIL, and answers a batch of requests per GIL.
fn serve_calls(rx: Receiver<Work>, counts: Arc<Counts>) {
    Python::with_gil(|py| {
        py.allow_threads(|| {
            while let Ok(Work::Call(call, answer)) = rx.recv() {
                let stop = Python::with_gil(|py| {
                    let mut next = (call, answer);
                    loop {
                        let (call, answer) = next;
                        counts.answer(py, call, answer);
                        match rx.try_recv() {
                            Ok(Work::Call(call, answer)) => next = (call, answer),
                            Ok(Work::Stop) => return true,
                            Err(_) => return false,
                        }
                    }
                });
                if stop {
                    break;
                }
            }
        })
    });
}

/// How long the inline serving thread waits for its loop at most: the loop's deadlines
/// (timeouts, the drain's end) are looked at this often (the timing wheel's resolution).
const INLINE_TICK: f64 = 0.1;

/// The inline serving thread (see the module docs): turns berth's loop with the GIL released,
/// answers what the turn queued under one GIL, and waits (the GIL released, in `epoll.poll`)
/// until the loop has work. Answers given after a turn wake the loop's descriptor, so the
/// next wait returns at once and the turn after it writes them. Returns once the loop is over
/// (drained or stopped).
fn serve_inline(inline: &Mutex<Inline<WsgiHandler>>, exec: &Executor) -> PyResult<()> {
    let Some((_, rx)) = &exec.inline else {
        return Ok(());
    };
    let lock = || inline.lock().unwrap_or_else(|e| e.into_inner());
    Python::with_gil(|py| {
        // Level-triggered: the loop's descriptor stays readable while it has work the last
        // turn left (more ready events than one turn takes).
        let epoll = py.import("select")?.getattr("epoll")?.call0()?;
        let fd = lock().fd();
        epoll.call_method1(intern!(py, "register"), (fd,))?;
        let result = (|| -> PyResult<()> {
            loop {
                let going = py.allow_threads(|| lock().turn());
                match going {
                    Ok(true) => {}
                    Ok(false) => return Ok(()),
                    Err(e) => return Err(crate::os_error("berth's loop failed: ", e)),
                }
                if !rx.is_empty() {
                    while let Ok(Work::Call(call, answer)) = rx.try_recv() {
                        exec.counts.answer(py, call, answer);
                    }
                    // Their answers woke the loop's descriptor: turn again to write them.
                    continue;
                }
                epoll.call_method1(intern!(py, "poll"), (INLINE_TICK,))?;
            }
        })();
        let _ = epoll.call_method0(intern!(py, "close"));
        result
    })
}

/// `HTTP_NAME` for a request field's `name` (upper case, `-` as `_`).
fn field_key<'py>(py: Python<'py>, name: &[u8]) -> Bound<'py, PyString> {
    let is = |known: &str| name.eq_ignore_ascii_case(known.as_bytes());
    // The fields nearly every request carries: interned once, never built again.
    let common = if is("host") {
        Some(intern!(py, "HTTP_HOST"))
    } else if is("user-agent") {
        Some(intern!(py, "HTTP_USER_AGENT"))
    } else if is("accept") {
        Some(intern!(py, "HTTP_ACCEPT"))
    } else if is("accept-encoding") {
        Some(intern!(py, "HTTP_ACCEPT_ENCODING"))
    } else if is("accept-language") {
        Some(intern!(py, "HTTP_ACCEPT_LANGUAGE"))
    } else if is("connection") {
        Some(intern!(py, "HTTP_CONNECTION"))
    } else if is("cookie") {
        Some(intern!(py, "HTTP_COOKIE"))
    } else if is("x-forwarded-for") {
        Some(intern!(py, "HTTP_X_FORWARDED_FOR"))
    } else if is("x-forwarded-proto") {
        Some(intern!(py, "HTTP_X_FORWARDED_PROTO"))
    } else {
        None
    };
    if let Some(key) = common {
        return key.clone();
    }
    let mut key = String::with_capacity(5 + name.len());
    key.push_str("HTTP_");
    key.extend(name.iter().map(|&b| match b {
        b'-' => '_',
        b => char::from(b.to_ascii_uppercase()),
    }));
    PyString::new(py, &key)
}

/// Whether two field names make the same environ key (`X-A`, `x_a`).
fn same_key(a: &[u8], b: &[u8]) -> bool {
    let norm = |c: u8| {
        if c == b'-' {
            b'_'
        } else {
            c.to_ascii_uppercase()
        }
    };
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| norm(x) == norm(y))
}

/// Bytes as PEP 3333's "bytes in a str" (latin-1), without a copy when they are ASCII.
fn latin1<'py>(py: Python<'py>, bytes: &[u8]) -> Bound<'py, PyString> {
    match std::str::from_utf8(bytes) {
        Ok(text) if bytes.is_ascii() => PyString::new(py, text),
        _ => PyString::new(
            py,
            &bytes.iter().map(|&b| char::from(b)).collect::<String>(),
        ),
    }
}

impl Call {
    fn path(&self) -> &[u8] {
        &self.bytes[..self.path_end]
    }

    fn query(&self) -> &[u8] {
        self.bytes
            .get(self.path_end + 1..self.target_end)
            .unwrap_or_default()
    }

    fn field(&self, i: usize) -> (&[u8], &[u8]) {
        let (name, value, end) = self.fields[i];
        (
            &self.bytes[name as usize..value as usize],
            &self.bytes[value as usize..end as usize],
        )
    }

    fn environ<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let env = self.app.bases[self.listener].bind(py).copy()?;
        env.set_item(
            intern!(py, "REQUEST_METHOD"),
            PyString::intern(py, self.method.as_str()),
        )?;
        // PEP 3333: PATH_INFO is the decoded path as latin-1 "bytes in a str".
        let path = self.path();
        let path = if path.contains(&b'%') {
            let text = std::str::from_utf8(path).unwrap_or_default();
            latin1(py, &percent_decode(text))
        } else {
            latin1(py, path)
        };
        env.set_item(intern!(py, "PATH_INFO"), path)?;
        env.set_item(intern!(py, "QUERY_STRING"), latin1(py, self.query()))?;
        let protocol = match self.version {
            Version::Http10 => intern!(py, "HTTP/1.0"),
            Version::Http11 => intern!(py, "HTTP/1.1"),
            Version::Http2 => intern!(py, "HTTP/2"),
            Version::Http3 => intern!(py, "HTTP/3"),
        };
        env.set_item(intern!(py, "SERVER_PROTOCOL"), protocol)?;
        if let Some(peer) = self.peer {
            env.set_item(intern!(py, "REMOTE_ADDR"), peer.ip().to_string())?;
            env.set_item(intern!(py, "REMOTE_PORT"), peer.port().to_string())?;
        }
        // The body is whole in memory, its chunked coding (if any) undone by berth: the app
        // is told its length, whatever framed it on the wire. Flask (werkzeug) and Django read
        // `wsgi.input` only as far as CONTENT_LENGTH says (werkzeug reads a body with
        // `Transfer-Encoding: chunked` only under `wsgi.input_terminated`), so without it a
        // chunked body reached them empty. The request's own Content-Length and
        // Transfer-Encoding fields describe the wire, not what `wsgi.input` holds: left out.
        let mut framed = false;
        for i in 0..self.fields.len() {
            let (name, value) = self.field(i);
            let key = if name.eq_ignore_ascii_case(b"content-type") {
                intern!(py, "CONTENT_TYPE").clone()
            } else if name.eq_ignore_ascii_case(b"content-length")
                || name.eq_ignore_ascii_case(b"transfer-encoding")
            {
                framed = true;
                continue;
            } else {
                field_key(py, name)
            };
            // Repeated fields are joined with a comma, as RFC 9110 allows.
            let repeated = (0..i).any(|j| {
                let (earlier, _) = self.field(j);
                same_key(earlier, name)
            });
            if repeated {
                if let Some(old) = env.get_item(&key)? {
                    let joined = format!("{}, {}", old.extract::<String>()?, latin1(py, value));
                    env.set_item(key, joined)?;
                    continue;
                }
            }
            env.set_item(key, latin1(py, value))?;
        }
        let input = self
            .app
            .bytes_io
            .call1(py, (PyBytes::new(py, &self.body),))?;
        if framed || !self.body.is_empty() {
            env.set_item(intern!(py, "CONTENT_LENGTH"), self.body.len().to_string())?;
        }
        env.set_item(intern!(py, "wsgi.input"), input)?;
        Ok(env)
    }

    /// The application's answer to this request, or a 500 (the traceback printed) if it
    /// failed.
    fn answer(self, py: Python<'_>) -> Reply {
        match self.call(py) {
            Ok(reply) => reply,
            Err(e) => {
                // The application's failure costs its own request.
                e.print(py);
                Reply::failed()
            }
        }
    }

    fn call(&self, py: Python<'_>) -> PyResult<Reply> {
        let env = self.environ(py)?;
        let started = StartResponse::new(py, self.app.refuse_write.clone_ref(py))?;
        let result = self.app.app.call1(py, (env, started.clone_ref(py)))?;
        let result = result.bind(py);
        let mut body = Vec::new();
        let iterated = (|| -> PyResult<()> {
            for chunk in result.try_iter()? {
                body.extend_from_slice(chunk?.downcast::<PyBytes>()?.as_bytes());
            }
            Ok(())
        })();
        // PEP 3333: close() is called whatever happened while iterating.
        if result.hasattr(intern!(py, "close"))? {
            result.call_method0(intern!(py, "close"))?;
        }
        iterated?;
        let (status, headers) =
            started.bind(py).borrow_mut().status.take().ok_or_else(|| {
                PyValueError::new_err("the application never called start_response")
            })?;
        let code: u16 = status
            .split(' ')
            .next()
            .and_then(|c| c.parse().ok())
            .filter(|c| (100..1000).contains(c))
            .ok_or_else(|| PyValueError::new_err(format!("bad status {status:?}")))?;
        let fields: Vec<(String, Vec<u8>)> = headers
            .into_iter()
            .map(|(n, v)| (n, v.into_bytes()))
            .collect();
        let head = self.method == Method::Head;
        let encoding = front::Encoding::for_request(
            self.app.compress,
            (0..self.fields.len())
                .map(|i| self.field(i))
                .filter(|(name, _)| name.eq_ignore_ascii_case(b"accept-encoding"))
                .map(|(_, value)| value),
        );
        let (reply, misfit) = whole_reply(code, &fields, body, head, encoding.as_ref())?;
        if let Some((sent, declared)) = misfit {
            // The application's error, logged as its exceptions are; the client sees it too
            // (an incomplete response).
            let path = String::from_utf8_lossy(self.path());
            let line = format!(
                "berth: {}\n",
                front::misfit(self.method.as_str(), &path, sent, declared)
            );
            self.app.stderr.call_method1(py, "write", (line,))?;
        }
        Ok(reply)
    }
}

/// PEP 3333's `start_response`: records the status and headers (the last call wins, as with
/// `exc_info` after an error).
#[pyclass]
struct StartResponse {
    status: Option<(String, Vec<(String, String)>)>,
    write: Py<PyAny>,
}

impl StartResponse {
    fn new(py: Python<'_>, write: Py<PyAny>) -> PyResult<Py<StartResponse>> {
        Py::new(
            py,
            StartResponse {
                status: None,
                write,
            },
        )
    }
}

#[pymethods]
impl StartResponse {
    #[pyo3(signature = (status, headers, exc_info=None))]
    fn __call__(
        &mut self,
        py: Python<'_>,
        status: String,
        headers: Vec<(String, String)>,
        exc_info: Option<Bound<'_, PyTuple>>,
    ) -> PyResult<Py<PyAny>> {
        let _ = exc_info;
        self.status = Some((status, headers));
        Ok(self.write.clone_ref(py))
    }
}

/// Serves the WSGI application `app` on `host:port` with berth's `model`, `workers` threads
/// running the application ([`Executor`]), until SIGINT or SIGTERM; then drains for up to
/// `shutdown_timeout` seconds. Prints `berth listening on http://ADDR (...)` once serving, then
/// calls `ready`, if given. `fd`: a listening socket to serve instead of binding `host:port`
/// (`python -m berth --workers`: the parent's), taken over (closed when done). `multiprocess`:
/// `wsgi.multiprocess` (processes share the port); `options`: the server options of
/// [`front::configure`] (TLS, backlog, keep-alive, concurrency limit).
#[pyfunction]
#[pyo3(signature = (app, host="127.0.0.1", port=8000, workers=4, model="evloop", shutdown_timeout=30.0, reuse_port=false, max_body=None, fd=None, ready=None, multiprocess=false, options=None))]
#[allow(clippy::too_many_arguments)]
pub fn serve_wsgi(
    py: Python<'_>,
    app: Py<PyAny>,
    host: &str,
    port: u16,
    workers: usize,
    model: &str,
    shutdown_timeout: f64,
    reuse_port: bool,
    max_body: Option<usize>,
    fd: Option<i32>,
    ready: Option<Py<PyAny>>,
    multiprocess: bool,
    options: Option<Bound<'_, PyDict>>,
) -> PyResult<()> {
    let model: Model = model.parse().map_err(|_| {
        PyValueError::new_err(format!(
            "no model {model:?} (models: {})",
            front::models().join(", ")
        ))
    })?;
    let inherited = fd.map(workers::inherited).transpose()?;
    let addr = workers::address(host, port)?;
    let grace = Duration::try_from_secs_f64(shutdown_timeout)
        .map_err(|_| PyValueError::new_err("shutdown_timeout is not a number of seconds"))?;
    // Before berth's threads start, so that they inherit the blocked mask and the signals
    // come to the wait below.
    berth::process::signal::block_termination().map_err(|e| crate::os_error("", e))?;
    let mut settings = Settings::new(model, addr);
    // The application runs on the front's own threads (`Executor`): berth's pool is not used.
    settings.common.workers = 0;
    settings.common.listen.exclusive = !reuse_port;
    settings.common.listen.inherited = inherited;
    if let Some(max) = max_body {
        settings.common.limits.max_body_bytes = max;
    }
    let mut options = front::configure(&mut settings, options.as_ref())?;
    // Held only until served: berth serves copies (see below).
    let more = std::mem::take(&mut options.more);
    let tls = matches!(settings.common.listen.transport, Acceptor::Tls(_));
    let stats = settings.new_stats().map_err(|e| crate::os_error("", e))?;
    // The legacy write() callable: not supported; a function that says so.
    let refuse_write = py
        .eval(
            c"lambda data: (_ for _ in ()).throw(NotImplementedError('write() is not supported: return an iterable'))",
            None,
            None,
        )?
        .unbind();
    let stderr = py.import("sys")?.getattr("stderr")?;
    // What every environ of a listener starts from. Over a UNIX socket, SERVER_NAME is its
    // path and SERVER_PORT empty (as gunicorn has them; the Host field names the site).
    let base = |addr: &berth::net::Addr, name: &str, port: String| -> PyResult<Py<PyDict>> {
        let (server_name, server_port) = match addr {
            berth::net::Addr::Unix(path) => (path.display().to_string(), String::new()),
            berth::net::Addr::Tcp(_) | berth::net::Addr::Udp(_) => (name.to_owned(), port),
        };
        let base = PyDict::new(py);
        base.set_item("SCRIPT_NAME", "")?;
        base.set_item("SERVER_NAME", server_name)?;
        base.set_item("SERVER_PORT", server_port)?;
        // The stream ends where the body does (an extension gunicorn and werkzeug share).
        base.set_item("wsgi.input_terminated", true)?;
        base.set_item("wsgi.errors", &stderr)?;
        base.set_item("wsgi.version", (1, 0))?;
        base.set_item("wsgi.url_scheme", if tls { "https" } else { "http" })?;
        base.set_item("wsgi.multithread", true)?;
        base.set_item("wsgi.multiprocess", multiprocess)?;
        base.set_item("wsgi.run_once", false)?;
        Ok(base.unbind())
    };
    // The main address, then each more (`-b` given again), served with settings of its own.
    let mut listeners = vec![settings.clone()];
    listeners.extend(more.iter().map(|s| front::more_settings(&settings, s)));
    let bases = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| match (&l.addr, i) {
            (addr, 0) => base(addr, host, port.to_string()),
            (addr @ berth::net::Addr::Tcp(tcp), _) => {
                base(addr, &tcp.ip().to_string(), tcp.port().to_string())
            }
            (addr, _) => base(addr, "", String::new()),
        })
        .collect::<PyResult<Vec<_>>>()?;
    // Inline (see the module docs): one application thread and one loop of the default model,
    // on one address; not with HTTP/3, whose UDP twin is served by the loops `drive::serve`
    // starts.
    let inline = model == Model::Evloop
        && workers <= 1
        && settings.common.accept_threads <= 1
        && listeners.len() == 1
        && !settings.models.evloop.http3;
    let app = Arc::new(App {
        app,
        bases,
        refusal: front::refusal(&settings.common.limits),
        bytes_io: py.import("io")?.getattr("BytesIO")?.unbind(),
        stderr: stderr.unbind(),
        refuse_write,
        exec: Executor::new(workers, settings.common.queue_capacity, inline),
        compress: options.compress,
        statics: options.statics.clone(),
    });
    let (engine, bounds) = if inline {
        let service = Wsgi {
            app: app.clone(),
            listener: 0,
        };
        let (inline, bound) = Inline::bind(
            settings.addr.clone(),
            &service,
            &settings.common,
            &settings.models.evloop,
            stats,
        )
        .map_err(crate::bind_error)?;
        (Engine::Inline(Arc::new(Mutex::new(inline))), vec![bound])
    } else {
        let mut servers = Vec::new();
        let mut bounds = Vec::new();
        for (listener, l) in listeners.iter().enumerate() {
            let service = Wsgi {
                app: app.clone(),
                listener,
            };
            let stats = match listener {
                0 => stats.clone(),
                _ => l.new_stats().map_err(|e| crate::os_error("", e))?,
            };
            let started = py.allow_threads(|| drive::serve(l, service, stats));
            match started {
                Ok((server, bound)) => {
                    servers.push(server);
                    bounds.push(bound);
                }
                Err(e) => {
                    for server in servers {
                        server.shutdown();
                        server.join();
                    }
                    return Err(crate::bind_error(e));
                }
            }
        }
        (Engine::Threads(servers), bounds)
    };
    // berth serves copies of an inherited socket: these close now, so that the port closes
    // with berth's copies when it drains.
    settings.common.listen.inherited = None;
    drop((listeners, more));
    // `--workers` are processes: the application's threads are said as threads.
    let mut shown = settings.clone();
    shown.common.workers = workers.max(1);
    let mut shape = shown
        .describe()
        .replace(" workers,", " threads,")
        .replace(" worker,", " thread,");
    if inline {
        shape.push_str(", loop inline on the application thread");
    }
    for bound in &bounds {
        let url = front::url(bound, tls);
        match &options.announce {
            Some(announce) => {
                announce.call1(py, (url, format!("model {model}, {shape}")))?;
            }
            None => {
                let line = format!("berth listening on {url} (model {model}, {shape}, WSGI)");
                // One write, so that the lines of processes sharing stdout (--workers) never
                // interleave (print() writes the line and its end apart when Python's output
                // is unbuffered).
                let stdout = py.import("sys")?.getattr("stdout")?;
                stdout.call_method1("write", (line + "\n",))?;
                stdout.call_method0("flush")?;
            }
        }
    }
    if let Some(ready) = ready {
        ready.call0(py)?;
    }
    // Inline: the serving thread, started once the line is out (it takes the GIL).
    let serving = match &engine {
        Engine::Inline(inline) => {
            let (inline, app) = (inline.clone(), app.clone());
            let thread = std::thread::Builder::new()
                .name("berth-wsgi-0".into())
                .spawn(move || {
                    let served = serve_inline(&inline, &app.exec);
                    if served.is_err() {
                        // The main thread waits for SIGTERM or SIGINT: a loop that failed ends
                        // that wait, so that its error is raised (exit 1), not a server left
                        // running with nothing serving.
                        let _ = Python::with_gil(|py| -> PyResult<()> {
                            let os = py.import("os")?;
                            let term = py.import("signal")?.getattr("SIGTERM")?;
                            os.call_method1("kill", (os.call_method0("getpid")?, term))?;
                            Ok(())
                        });
                    }
                    served
                })
                .map_err(|e| crate::os_error("cannot start the WSGI thread: ", e))?;
            Some(thread)
        }
        Engine::Threads(_) => None,
    };
    let served = py.allow_threads(|| {
        let _ = berth::process::signal::wait_for_termination();
        let (inflight, answered) = app.exec.counts.now();
        let pid = std::process::id();
        front::info(&format!(
            "pid {pid} draining: {inflight} request{} in flight (up to {} s)",
            if inflight == 1 { "" } else { "s" },
            grace.as_secs_f64()
        ));
        let served = match engine {
            Engine::Threads(servers) => {
                for server in &servers {
                    server.drain(grace);
                }
                for server in servers {
                    server.join();
                }
                Ok(())
            }
            Engine::Inline(inline) => {
                inline
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .drain(grace);
                // The serving thread turns the loop until the drain is over.
                serving.map_or(Ok(()), |thread| {
                    thread
                        .join()
                        .unwrap_or_else(|_| Err(PyValueError::new_err("the WSGI thread panicked")))
                })
            }
        };
        // What the application still has in hand now had its connection closed by the drain's
        // deadline: cut off (it runs on; its answer goes nowhere).
        let (cut, done) = app.exec.counts.now();
        front::info(&format!(
            "pid {pid} drained: {} finished, {cut} cut off",
            done.saturating_sub(answered)
        ));
        // Every request is answered: the application's threads end.
        app.exec.stop();
        served
    });
    served?;
    Ok(())
}
