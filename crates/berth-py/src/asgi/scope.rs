//! What the application is given for each request: the ASGI scope (`http` or `websocket`,
//! built from the [`Call`] that crossed the bridge, with the server's shared parts made once),
//! the `extensions` each scope offers, and the [`AsgiRequest`] that carries the request's
//! state on the Python side. Runs with the GIL, in [`AsgiServer::take`](super::AsgiServer).

use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use berth::proto::http::Version;

use super::bridge::{Call, Event};
use super::request::{AsgiRequest, Progress, WsSide};
use super::server::AsgiServer;
use crate::asgi_ws::WsShared;
use crate::front::percent_decode;

impl AsgiServer {
    pub(super) fn push<'py>(
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
            Version::Http3 => intern!(py, "3"),
        };
        scope.set_item(intern!(py, "http_version"), version)?;
        let extensions = match (&call.websocket, call.version) {
            (Some(_), _) => &self.extensions[2],
            (None, Version::Http10) => &self.extensions[1],
            (None, _) => &self.extensions[0],
        };
        scope.set_item(intern!(py, "extensions"), extensions.bind(py).copy()?)?;
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
        scope.set_item(intern!(py, "server"), self.servers[call.listener].bind(py))?;
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

/// The scopes' `extensions` (see [`AsgiServer`]'s field): `http.response.pathsend` in every
/// `http` scope (see `AsgiRequest::pathsend`); `http.response.trailers` where the version can
/// carry trailers (HTTP/1.1's trailer section, HTTP/2's HEADERS frame; not HTTP/1.0);
/// `websocket.http.response` in the `websocket` scope (a denial response of the application's
/// own instead of 403).
pub(super) fn scope_extensions(py: Python<'_>) -> PyResult<[Py<PyDict>; 3]> {
    let made = |names: &[&str]| -> PyResult<Py<PyDict>> {
        let d = PyDict::new(py);
        for name in names {
            d.set_item(name, PyDict::new(py))?;
        }
        Ok(d.unbind())
    };
    Ok([
        made(&["http.response.pathsend", "http.response.trailers"])?,
        made(&["http.response.pathsend"])?,
        made(&["websocket.http.response"])?,
    ])
}
