//! `berth._berth`: berth's message engine (`berth::msg::Engine`) as a Python class, `Core`.
//! The Python package `berth` builds FI-ASockIOCore's API on it (`berth.fi`).
//!
//! How Python and the engine share a thread: the engine runs on the thread that calls
//! `io_iteration`, which releases the GIL for the whole wait and all the I/O of the round, and
//! takes it back once to hand Python the round's five sets of client ids — one GIL acquisition
//! per batch of ready clients, none per message. Messages cross as `bytes`, a list per client
//! per call; a `bytes` sent is queued as it is, not copied (the engine holds a reference until
//! the socket has taken it, dropped off the GIL through pyo3's deferred release). A sequence given to `send_messages` is drawn lazily, as the client's queue drains:
//! the engine takes the GIL for each item it draws (a Python generator of a million messages is
//! never in memory at once).
//!
//! Client ids are the engine's, as integers: never reused while the engine runs, so a stale id
//! finds nothing rather than someone else.

mod access;
mod asgi;
mod asgi_ws;
mod front;
mod logs;
mod workers;
mod wsgi;

use std::sync::Mutex;
use std::time::Duration;

use berth::msg::{ClientId, ConnectError, Endpoint, Engine, EngineConfig, Name};
use pyo3::exceptions::{PyConnectionError, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyIterator, PyList, PyTuple};

/// Seconds from Python as a duration; negative or not finite is a `ValueError`.
fn seconds(s: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{what}: {s} is not a number of seconds")))
}

/// berth's message engine: listeners, named clients, whole messages, and the polling API.
/// An io error as Python's own `OSError` subclass, as `OSError(errno, text)` makes it in
/// Python: the errno picks the class (ECONNREFUSED: `ConnectionRefusedError`, ENOENT:
/// `FileNotFoundError`, EADDRINUSE: `OSError` with that `errno`, ...). An error with no errno
/// gets the class of its kind (as pyo3 maps kinds). `context` (with its `: `) leads the text.
pub(crate) fn os_error(context: impl std::fmt::Display, e: std::io::Error) -> PyErr {
    os_error_saying(&e, format!("{context}{e}"))
}

/// [`os_error`] for an address that could not be bound, in the words of its `Display`
/// (`address 127.0.0.1:8000 already in use`).
pub(crate) fn bind_error(e: berth::net::BindError) -> PyErr {
    os_error_saying(&e.source, e.to_string())
}

fn os_error_saying(e: &std::io::Error, text: String) -> PyErr {
    match e.raw_os_error().or_else(|| errno_of(e.kind())) {
        Some(errno) => PyOSError::new_err((errno, text)),
        None => PyErr::from(std::io::Error::new(e.kind(), text)),
    }
}

/// The errno of an error that lost its own on the way (berth words some errors itself, keeping
/// only their kind): the kinds Python has an `OSError` subclass or a test for.
fn errno_of(kind: std::io::ErrorKind) -> Option<i32> {
    use std::io::ErrorKind::*;
    Some(match kind {
        AddrInUse => libc::EADDRINUSE,
        AddrNotAvailable => libc::EADDRNOTAVAIL,
        PermissionDenied => libc::EACCES,
        NotFound => libc::ENOENT,
        AlreadyExists => libc::EEXIST,
        ConnectionRefused => libc::ECONNREFUSED,
        ConnectionReset => libc::ECONNRESET,
        ConnectionAborted => libc::ECONNABORTED,
        BrokenPipe => libc::EPIPE,
        TimedOut => libc::ETIMEDOUT,
        _ => return None,
    })
}

#[pyclass(module = "berth._berth")]
struct Core {
    /// A mutex only so that the object may be shared between Python threads (pyo3 asks for
    /// `Sync`); the methods that change it take `&mut self`, whose exclusivity pyo3 already
    /// checks, and reach the engine through `get_mut` without locking.
    engine: Mutex<Engine>,
}

impl Core {
    fn engine(&mut self) -> &mut Engine {
        self.engine.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A Python iterable of bytes-like items, drawn one item at a time under the GIL. An item
/// that is not bytes, or an exception from the iterable, ends the sequence; the exception is
/// printed (as an unraisable error), and costs only the rest of that sequence.
struct Drawn(Py<PyIterator>);

impl Iterator for Drawn {
    type Item = PyBackedBytes;

    fn next(&mut self) -> Option<PyBackedBytes> {
        Python::with_gil(|py| {
            let item = self.0.bind(py).clone().next()?;
            // `bytes` is borrowed as it is (extracting a `Vec<u8>` went through the sequence
            // protocol, an int object per byte: a 1 MiB message cost 10x its send_message).
            match item.and_then(|i| i.extract::<PyBackedBytes>()) {
                Ok(bytes) => Some(bytes),
                Err(e) => {
                    e.write_unraisable(py, None);
                    None
                }
            }
        })
    }
}

impl Core {
    /// Queues every item of a list or tuple now; a `TypeError` (and nothing queued) if any
    /// is not bytes-like.
    fn send_now<'py>(
        &mut self,
        id: ClientId,
        items: impl Iterator<Item = Bound<'py, PyAny>>,
    ) -> PyResult<bool> {
        let mut held = Vec::new();
        for item in items {
            held.push(item);
        }
        let mut views = Vec::with_capacity(held.len());
        for item in &held {
            views.push(item.extract::<PyBackedBytes>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "send_messages: a message must be bytes, not {}",
                    item.get_type()
                        .name()
                        .map_or_else(|_| "?".into(), |n| n.to_string())
                ))
            })?);
        }
        let engine = self.engine();
        for view in views {
            if !engine.send_shared(id, view) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[pymethods]
impl Core {
    /// A new engine. `max_message`: largest message delivered whole, in bytes (default:
    /// berth's, 64 MiB); `expected_only`: refuse clients whose name was not expected;
    /// `reuse_port`: share TCP and UDP ports with other processes (`SO_REUSEPORT`, no check
    /// that the port is free); `nodelay`: `TCP_NODELAY` on TCP connections (default on);
    /// `buffer_size`: bytes per socket read (default the engine's, 64 KiB:
    /// `berth::net::ConnSizing::msg`).
    #[new]
    #[pyo3(signature = (*, max_message=None, expected_only=false, reuse_port=false, nodelay=true, buffer_size=None))]
    fn new(
        max_message: Option<u64>,
        expected_only: bool,
        reuse_port: bool,
        nodelay: bool,
        buffer_size: Option<usize>,
    ) -> PyResult<Core> {
        let mut config = EngineConfig::default();
        if let Some(max) = max_message {
            config.max_message = max;
        }
        if let Some(size) = buffer_size {
            if !(1024..=(64 << 20)).contains(&size) {
                return Err(PyValueError::new_err(format!(
                    "buffer_size: {size} is not between 1 KiB and 64 MiB"
                )));
            }
            config.sizing.buffer_size = size;
        }
        config.policy.expected_only = expected_only;
        // Joining a port another process listens on with SO_REUSEPORT, as `msg serve
        // --reuse-port` does.
        config.listen.exclusive = !reuse_port;
        config.listen.nodelay = nodelay;
        let engine = Engine::new(config).map_err(|e| os_error("", e))?;
        Ok(Core {
            engine: Mutex::new(engine),
        })
    }

    /// Listens on `endpoint` (`tcp://HOST:PORT`, `unix:///PATH`, `udp://...`, `tls://...`);
    /// returns it with the port the system chose for port 0.
    fn listen(&mut self, endpoint: &str) -> PyResult<String> {
        let e = Endpoint::parse(endpoint).map_err(PyValueError::new_err)?;
        let bound = self
            .engine()
            .listen(&e)
            .map_err(|e| os_error(format_args!("cannot listen on {endpoint}: "), e))?;
        Ok(bound.to_string())
    }

    /// Expects a client named `name`: when it connects, its id is among the newly connected
    /// expected clients.
    fn expect(&mut self, name: &[u8]) {
        self.engine().expect(Name::from(name));
    }

    /// Connects to a berth (or FI) server at `endpoint` as client `name`, waiting up to
    /// `timeout` seconds for its answer (the GIL released). The server is then a client of
    /// this engine like any other; returns its id. `ConnectionError` if it refuses us.
    #[pyo3(signature = (endpoint, name, timeout=10.0))]
    fn connect(
        &mut self,
        py: Python<'_>,
        endpoint: &str,
        name: &[u8],
        timeout: f64,
    ) -> PyResult<u64> {
        let e = Endpoint::parse(endpoint).map_err(PyValueError::new_err)?;
        let timeout = seconds(timeout, "timeout")?;
        let engine = self.engine();
        let result = py.allow_threads(|| engine.connect(&e, name, timeout));
        match result {
            Ok(id) => Ok(id.to_raw()),
            Err(ConnectError::Io(e)) => Err(os_error(format_args!("{endpoint}: "), e)),
            Err(e) => Err(PyConnectionError::new_err(format!("{endpoint}: {e}"))),
        }
    }

    /// One round of I/O, the GIL released: waits up to `timeout` seconds (`None`: until
    /// something happens), reads, writes, and returns five lists of client ids: newly
    /// connected expected clients, newly connected unknown clients, clients whose connection
    /// is gone, clients with messages to read, clients whose output queue is empty.
    #[allow(clippy::type_complexity)]
    #[pyo3(signature = (timeout=None))]
    fn io_iteration(
        &mut self,
        py: Python<'_>,
        timeout: Option<f64>,
    ) -> PyResult<(Vec<u64>, Vec<u64>, Vec<u64>, Vec<u64>, Vec<u64>)> {
        let timeout = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let engine = self.engine();
        let r = py
            .allow_threads(|| engine.io_iteration(timeout))
            .map_err(|e| os_error("", e))?;
        let ids = |set: std::collections::HashSet<ClientId>| -> Vec<u64> {
            set.into_iter().map(ClientId::to_raw).collect()
        };
        Ok((
            ids(r.newly_connected_expected_clients),
            ids(r.newly_connected_unknown_clients),
            ids(r.clients_with_disconnected_connection),
            ids(r.clients_have_data_to_read),
            ids(r.clients_with_empty_output_fifo),
        ))
    }

    /// The whole messages `client` has sent since the last call, oldest first.
    fn messages<'py>(&mut self, py: Python<'py>, client: u64) -> Vec<Bound<'py, PyBytes>> {
        let engine = self.engine();
        let taken = engine.messages(ClientId::from_raw(client));
        let mut out = Vec::with_capacity(taken.len());
        for m in taken {
            out.push(PyBytes::new(py, &m));
            // Its buffer serves the next large message (no allocation, no page faults).
            engine.recycle(m);
        }
        out
    }

    /// Queues one message to `client`; false if the client is gone. A `bytes` object is not
    /// copied: the engine writes a large one from where it lies and lets go of it once written
    /// (a `bytearray` is copied, since it may change).
    fn send_message(&mut self, client: u64, data: PyBackedBytes) -> bool {
        self.engine().send_shared(ClientId::from_raw(client), data)
    }

    /// Queues the messages of an iterable to `client`; false if the client is gone. A list or
    /// a tuple is taken now, as it is at this call (the caller may clear or refill it right
    /// after, as FI-ASockIOCore's programs do); any other iterable (a generator) is drawn
    /// lazily as the client's queue drains. An item that is not bytes-like is a `TypeError`
    /// for a list or tuple (nothing of it is queued); for a lazy one it ends the sequence.
    fn send_messages(&mut self, client: u64, messages: &Bound<'_, PyAny>) -> PyResult<bool> {
        let id = ClientId::from_raw(client);
        if let Ok(list) = messages.downcast::<PyList>() {
            return self.send_now(id, list.iter());
        }
        if let Ok(tuple) = messages.downcast::<PyTuple>() {
            return self.send_now(id, tuple.iter());
        }
        let it = messages.try_iter()?.unbind();
        Ok(self.engine().send_messages(id, Drawn(it)))
    }

    /// From now on (`on`), connections accepted on framed listeners wait for `decide`: each
    /// is listed once by `undecided`, and is not read until decided.
    fn deciding(&mut self, on: bool) {
        self.engine().deciding(on);
    }

    /// The connections accepted since the last call that wait for `decide`.
    fn undecided(&mut self) -> Vec<u64> {
        self.engine()
            .undecided()
            .into_iter()
            .map(ClientId::to_raw)
            .collect()
    }

    /// Decides how an undecided connection is read: `raw` (admitted now, among the next
    /// round's unknown clients; bytes as they come, output unframed) or framed (its keyword
    /// handshake starts). False if it is gone. `close` refuses one.
    fn decide(&mut self, client: u64, raw: bool) -> bool {
        self.engine().decide(ClientId::from_raw(client), raw)
    }

    /// `(host, port)` of a TCP, TLS or UDP client's peer; `None` for a UNIX socket's, or a
    /// client that is gone.
    fn peer(&self, client: u64) -> Option<(String, u16)> {
        self.shared()
            .peer_addr(ClientId::from_raw(client))
            .map(|a| (a.ip().to_string(), a.port()))
    }

    /// Closes `client` once its queued output is written.
    fn close(&mut self, client: u64) {
        self.engine().close(ClientId::from_raw(client));
    }

    /// The name `client` registered under, or `None` (anonymous, or gone).
    fn name<'py>(&self, py: Python<'py>, client: u64) -> Option<Bound<'py, PyBytes>> {
        self.shared()
            .name(ClientId::from_raw(client))
            .map(|n| PyBytes::new(py, n.as_bytes()))
    }

    /// The id of the client connected under `name`, if one is.
    fn client(&self, name: &[u8]) -> Option<u64> {
        self.shared().client(name).map(ClientId::to_raw)
    }

    /// Bytes queued to `client` and not yet written.
    fn pending_output(&self, client: u64) -> usize {
        self.shared().pending_output(ClientId::from_raw(client))
    }

    /// Clients connected now.
    fn client_count(&self) -> usize {
        self.shared().client_count()
    }

    /// Tells every client the engine is shutting down, writes what is queued for up to
    /// `timeout` seconds (the GIL released), and closes everything.
    #[pyo3(signature = (timeout=5.0))]
    fn shutdown(&mut self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = seconds(timeout, "timeout")?;
        let engine = self.engine();
        py.allow_threads(|| engine.shutdown(timeout))
            .map_err(|e| os_error("", e))
    }
}

/// The extension module. It runs without the GIL on free-threaded CPython (3.13t and up;
/// `gil_used = false`, so importing it does not turn the GIL back on): what Python threads share
/// in it is behind locks or atomics (`Core`'s engine, the WSGI executor's queue and its
/// `Mutex`), pyo3 checks every `&mut self` borrow of a class at run time (a second thread gets
/// a `RuntimeError`, never a data race), an ASGI request's object is used by its event loop's
/// thread only, and each WSGI request has objects of its own (its environ, copied from the
/// shared base dict, whose reads CPython locks; its `start_response`), so that `--threads`
/// run applications in parallel there.
#[pymodule(gil_used = false)]
fn _berth(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Core>()?;
    m.add_function(wrap_pyfunction!(wsgi::serve_wsgi, m)?)?;
    m.add_function(wrap_pyfunction!(workers::listen_shared, m)?)?;
    m.add_function(wrap_pyfunction!(workers::listen_unix, m)?)?;
    m.add_function(wrap_pyfunction!(workers::follow_parent, m)?)?;
    m.add_function(wrap_pyfunction!(front::models, m)?)?;
    m.add_function(wrap_pyfunction!(front::parse_duration, m)?)?;
    m.add_function(wrap_pyfunction!(front::parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(logs::log_to_python, m)?)?;
    m.add_class::<access::AccessFormat>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    asgi::register(m)?;
    Ok(())
}
