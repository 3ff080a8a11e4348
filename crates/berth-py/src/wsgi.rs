//! WSGI (PEP 3333) applications on berth's HTTP engine: every request is a job for berth's
//! worker pool (`workers` threads), which takes the GIL, calls the application, and turns what
//! it returns into berth's reply; the I/O threads parse, time out, limit and write without ever
//! touching Python. An application that raises costs its own request (500, the traceback
//! printed), never the server; one whose body does not fit the Content-Length it declared
//! costs its connection (see [`front::whole_reply`]). berth's limits, timeouts and graceful
//! shutdown apply as to any service.

use std::sync::Arc;
use std::time::Duration;

use berth::drive::{self, Model, Service, Settings};
use berth::net::Acceptor;
use berth::proto::http::{Handled, Handler, Job, Reply, Request, Response, Version};
use pyo3::exceptions::PyValueError;

use crate::front::{self, percent_decode, whole_reply};
use crate::workers;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

/// The application and what every environ shares.
struct App {
    app: Py<PyAny>,
    server_name: String,
    server_port: String,
    /// `wsgi.url_scheme`: `https` over TLS.
    url_scheme: &'static str,
    /// `wsgi.multiprocess`: true when processes share the port (`--workers` above 1).
    multiprocess: bool,
    /// Written to a connection refused at capacity (with `Server` or without).
    refusal: &'static [u8],
    /// Looked up once, not per request: `io.BytesIO`, `sys.stderr`, and the `write()` callable
    /// `start_response` returns (which refuses: PEP 3333's legacy write is not supported).
    bytes_io: Py<PyAny>,
    stderr: Py<PyAny>,
    refuse_write: Py<PyAny>,
}

#[derive(Clone)]
struct Wsgi(Arc<App>);

impl Service for Wsgi {
    type Handler = WsgiHandler;

    fn handler(&self, _thread: usize) -> WsgiHandler {
        WsgiHandler(self.0.clone())
    }

    fn refusal(&self) -> &'static [u8] {
        self.0.refusal
    }
}

struct WsgiHandler(Arc<App>);

/// One request, owned, on its way to a worker.
struct Call {
    app: Arc<App>,
    method: &'static str,
    path: String,
    query: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    version: Version,
    /// The client's address (`REMOTE_ADDR`, `REMOTE_PORT`), where the connection has one.
    peer: Option<std::net::SocketAddr>,
}

impl Handler for WsgiHandler {
    type Job = Call;

    fn handle(&mut self, req: &Request<'_>, _res: &mut Response<'_>) -> Handled<Call> {
        Handled::Offload(Call {
            app: self.0.clone(),
            method: req.method.as_str(),
            path: req.path.to_owned(),
            query: req.query.unwrap_or("").to_owned(),
            headers: req
                .headers
                .iter()
                .map(|h| (h.name.to_owned(), h.value.to_vec()))
                .collect(),
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
    fn run(self) -> Reply {
        Python::with_gil(|py| match self.call(py) {
            Ok(reply) => reply,
            Err(e) => {
                // The application's failure costs its own request.
                e.print(py);
                Reply::failed()
            }
        })
    }
}

impl Call {
    fn environ<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let env = PyDict::new(py);
        env.set_item("REQUEST_METHOD", self.method)?;
        env.set_item("SCRIPT_NAME", "")?;
        // PEP 3333: PATH_INFO is the decoded path as latin-1 "bytes in a str".
        let path: String = percent_decode(&self.path)
            .into_iter()
            .map(char::from)
            .collect();
        env.set_item("PATH_INFO", path)?;
        env.set_item("QUERY_STRING", &self.query)?;
        env.set_item("SERVER_NAME", &self.app.server_name)?;
        env.set_item("SERVER_PORT", &self.app.server_port)?;
        let protocol = match self.version {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2",
        };
        env.set_item("SERVER_PROTOCOL", protocol)?;
        if let Some(peer) = self.peer {
            env.set_item("REMOTE_ADDR", peer.ip().to_string())?;
            env.set_item("REMOTE_PORT", peer.port().to_string())?;
        }
        // The body is whole in memory, its chunked coding (if any) undone by berth: the app
        // is told its length, whatever framed it on the wire. Flask (werkzeug) and Django read
        // `wsgi.input` only as far as CONTENT_LENGTH says (werkzeug reads a body with
        // `Transfer-Encoding: chunked` only under `wsgi.input_terminated`), so without it a
        // chunked body reached them empty. The request's own Content-Length and
        // Transfer-Encoding fields describe the wire, not what `wsgi.input` holds: left out.
        let mut framed = false;
        for (name, value) in &self.headers {
            let value: String = value.iter().map(|&b| b as char).collect();
            let key = match name.to_ascii_lowercase().as_str() {
                "content-type" => "CONTENT_TYPE".to_owned(),
                "content-length" | "transfer-encoding" => {
                    framed = true;
                    continue;
                }
                _ => format!("HTTP_{}", name.to_ascii_uppercase().replace('-', "_")),
            };
            // Repeated fields are joined with a comma, as RFC 9110 allows.
            match env.get_item(&key)? {
                Some(old) => {
                    env.set_item(&key, format!("{}, {value}", old.extract::<String>()?))?
                }
                None => env.set_item(&key, value)?,
            }
        }
        let input = self
            .app
            .bytes_io
            .call1(py, (PyBytes::new(py, &self.body),))?;
        if framed || !self.body.is_empty() {
            env.set_item("CONTENT_LENGTH", self.body.len().to_string())?;
        }
        env.set_item("wsgi.input", input)?;
        // The stream ends where the body does (an extension gunicorn and werkzeug share).
        env.set_item("wsgi.input_terminated", true)?;
        env.set_item("wsgi.errors", self.app.stderr.clone_ref(py))?;
        env.set_item("wsgi.version", (1, 0))?;
        env.set_item("wsgi.url_scheme", self.app.url_scheme)?;
        env.set_item("wsgi.multithread", true)?;
        env.set_item("wsgi.multiprocess", self.app.multiprocess)?;
        env.set_item("wsgi.run_once", false)?;
        Ok(env)
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
        if result.hasattr("close")? {
            result.call_method0("close")?;
        }
        iterated?;
        let started = started.bind(py).borrow();
        let (status, headers) = started
            .status
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("the application never called start_response"))?;
        let code: u16 = status
            .split(' ')
            .next()
            .and_then(|c| c.parse().ok())
            .filter(|c| (100..1000).contains(c))
            .ok_or_else(|| PyValueError::new_err(format!("bad status {status:?}")))?;
        let fields: Vec<(String, Vec<u8>)> = headers
            .iter()
            .map(|(n, v)| (n.clone(), v.as_bytes().to_vec()))
            .collect();
        let (reply, misfit) = whole_reply(code, &fields, body, self.method == "HEAD")?;
        if let Some((sent, declared)) = misfit {
            // The application's error, logged as its exceptions are; the client sees it too
            // (an incomplete response).
            let line = format!(
                "berth: {}\n",
                front::misfit(self.method, &self.path, sent, declared)
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

/// Serves the WSGI application `app` on `host:port` with berth's `model`, `workers` worker
/// threads running the application, until SIGINT or SIGTERM; then drains for up to
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
    settings.common.workers = workers.max(1);
    settings.common.listen.exclusive = !reuse_port;
    settings.common.listen.inherited = inherited;
    if let Some(max) = max_body {
        settings.common.limits.max_body_bytes = max;
    }
    front::configure(&mut settings, options.as_ref())?;
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
    // Over a UNIX socket, SERVER_NAME is its path and SERVER_PORT empty (as gunicorn has
    // them; the Host field names the site).
    let (server_name, server_port) = match &settings.addr {
        berth::net::Addr::Unix(path) => (path.display().to_string(), String::new()),
        berth::net::Addr::Tcp(_) => (host.to_owned(), port.to_string()),
    };
    let service = Wsgi(Arc::new(App {
        app,
        server_name,
        server_port,
        url_scheme: if tls { "https" } else { "http" },
        multiprocess,
        refusal: front::refusal(&settings.common.limits),
        bytes_io: py.import("io")?.getattr("BytesIO")?.unbind(),
        stderr: py.import("sys")?.getattr("stderr")?.unbind(),
        refuse_write,
    }));
    let (server, bound) = py
        .allow_threads(|| drive::serve(&settings, service, stats))
        .map_err(crate::bind_error)?;
    // berth serves copies of an inherited socket: this one closes now, so that the port closes
    // with berth's copies when it drains.
    settings.common.listen.inherited = None;
    // `--workers` are processes: the model's workers here are threads, and said so.
    let shape = settings
        .describe()
        .replace(" workers,", " threads,")
        .replace(" worker,", " thread,");
    let line = format!(
        "berth listening on {} (model {model}, {shape}, WSGI)",
        front::url(&bound, tls)
    );
    // One write, so that the lines of processes sharing stdout (--workers) never interleave
    // (print() writes the line and its end apart when Python's output is unbuffered).
    let stdout = py.import("sys")?.getattr("stdout")?;
    stdout.call_method1("write", (line + "\n",))?;
    stdout.call_method0("flush")?;
    if let Some(ready) = ready {
        ready.call0(py)?;
    }
    py.allow_threads(|| {
        let _ = berth::process::signal::wait_for_termination();
        server.drain(grace);
        server.join();
    });
    Ok(())
}
