//! The server's life as Python drives it ([`AsgiServer`]): binding and starting berth's
//! engine ([`Engine`]: the loop inline on the Python thread, or in threads of its own), the
//! descriptor asyncio watches, taking each batch of requests and wake-ups (`take`, which turns
//! the inline loop first, with the GIL released), and the graceful stop.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth::drive::evloop::Inline;
use berth::drive::{self, Model, Server, Settings};
use berth::net::{Acceptor, Addr};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::bridge::Bridge;
use super::handler::{Asgi, AsgiHandler};
use super::scope::scope_extensions;

/// Where berth's loop runs (see the module docs).
enum Engine {
    Inline(Box<Mutex<Inline<AsgiHandler>>>),
    /// A server per listener (the main address, then each more).
    Threads(Mutex<Vec<Server>>),
}

/// berth's HTTP engine serving an ASGI app whose loop runs in Python (`berth.asgi`). Frozen:
/// every method takes `&self` (its state is behind its own locks and atomics), so pyo3 needs
/// no borrow flag for it.
#[pyclass(frozen, module = "berth._berth")]
pub struct AsgiServer {
    pub(super) bridge: Arc<Bridge>,
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
    /// Every address served, the main one's URL first (`-b` given more than once).
    #[pyo3(get)]
    urls: Vec<String>,
    describe: String,
    /// Shared by every scope of a listener: its `server`, `(host, port)` built once (None
    /// over UNIX); one per listener, as [`Engine::Threads`] has them.
    pub(super) servers: Vec<Py<PyAny>>,
    pub(super) asgi_version: Py<PyDict>,
    /// Each scope's `extensions`, copied from these (one dict per scope; the empty dicts
    /// inside are shared): an `http` scope's over HTTP/1.1 and HTTP/2, over HTTP/1.0, a
    /// `websocket` scope's.
    pub(super) extensions: [Py<PyDict>; 3],
    /// Largest WebSocket message a client may send.
    pub(super) ws_max_message: usize,
    /// On-the-fly compression of responses (`--compress`); `None`: off.
    pub(super) compress: Option<berth::proto::http::Compress>,
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
            settings.common.sizing.capacity = max;
        }
        // `options`: TLS, backlog, keep-alive, concurrency limit (see `front::configure`).
        let app = crate::front::configure(&mut settings, options.as_ref())?;
        let stats = settings.new_stats().map_err(|e| crate::os_error("", e))?;
        // More addresses than one (`-b` again): a server each, in threads of their own.
        // HTTP/3 too (`http3`): its UDP twin is served by the loops `drive::serve` starts, not
        // by the one run inline on this thread.
        let threads = model != Model::Evloop
            || io_threads > 1
            || !app.more.is_empty()
            || settings.models.evloop.http3;
        let bridge = Arc::new(Bridge::new(threads).map_err(|e| crate::os_error("", e))?);
        let service = Asgi {
            bridge: bridge.clone(),
            // The app's sends wake the connection from the bridge's thread: a model that waits
            // in `read` (a blocking one) could not be woken for them.
            websocket: model.caps().wakes_upgraded,
            // permessage-deflate (RFC 7692), unless the options' `ws_deflate` is false.
            deflate: app.ws_deflate.enabled.then_some(app.ws_deflate),
            refusal: crate::front::refusal(&settings.common.limits),
            statics: app.statics.clone(),
            listener: 0,
        };
        let (engine, bounds) = if threads {
            let mut listeners = vec![settings.clone()];
            listeners.extend(
                app.more
                    .iter()
                    .map(|s| crate::front::more_settings(&settings, s)),
            );
            let mut servers = Vec::new();
            let mut bounds = Vec::new();
            for (listener, l) in listeners.iter().enumerate() {
                let service = Asgi {
                    listener,
                    ..service.clone()
                };
                let stats = match listener {
                    0 => stats.clone(),
                    _ => l.new_stats().map_err(|e| crate::os_error("", e))?,
                };
                match py.allow_threads(|| drive::serve(l, service, stats)) {
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
            (Engine::Threads(Mutex::new(servers)), bounds)
        } else {
            let (inline, bound) = Inline::bind(
                settings.addr.clone(),
                &service,
                &settings.common,
                &settings.models.evloop,
                stats,
            )
            .map_err(crate::bind_error)?;
            (Engine::Inline(Box::new(Mutex::new(inline))), vec![bound])
        };
        let tls = matches!(settings.common.listen.transport, Acceptor::Tls(_));
        let urls: Vec<String> = bounds.iter().map(|b| crate::front::url(b, tls)).collect();
        // Over a UNIX socket: the path, port 0 and no `server` in the scope (as uvicorn).
        let mut servers = Vec::new();
        let mut main = None;
        for bound in &bounds {
            let (host, port, server) = match bound {
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
                // Binding refuses a datagram address before a server is made.
                Addr::Udp(_) => unreachable!("a UDP address is never bound for HTTP"),
            };
            main.get_or_insert((host, port));
            servers.push(server);
        }
        let (host, port) = main.unwrap_or_default();
        let asgi_version = PyDict::new(py);
        asgi_version.set_item("version", "3.0")?;
        asgi_version.set_item("spec_version", "2.4")?;
        let describe = match engine {
            Engine::Inline(_) => format!(
                "model {model} inline on the Python thread, capacity {}",
                settings.common.sizing.capacity
            ),
            Engine::Threads(_) => format!("model {model}, {}", settings.describe()),
        };
        Ok(AsgiServer {
            bridge,
            engine,
            over: AtomicBool::new(false),
            servers,
            host,
            port,
            url: urls[0].clone(),
            urls,
            describe,
            asgi_version: asgi_version.unbind(),
            extensions: scope_extensions(py)?,
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
            Engine::Threads(servers) => {
                for server in lock(servers).iter() {
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
        let servers = match &self.engine {
            Engine::Threads(servers) => std::mem::take(&mut *lock(servers)),
            Engine::Inline(_) => {
                return Err(PyRuntimeError::new_err(
                    "inline: call begin_drain and keep taking until over()",
                ))
            }
        };
        py.allow_threads(|| {
            for server in &servers {
                server.drain(grace);
            }
            for server in servers {
                server.join();
            }
        });
        Ok(())
    }
}

/// Locks, ignoring poisoning (each change under these locks is one call).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
