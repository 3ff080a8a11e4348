//! The access log's lines for `python -m berth --access-log` (ASGI and WSGI alike): written by
//! berth's own formatter, [`berth::app::AccessLog`], the one `berth serve --access-log` uses,
//! so that a format (`combined`, `json`, gunicorn's or granian's atoms) writes the same line
//! from every front. The Python front gathers what it knows of a response and calls
//! [`AccessFormat::line`]; the line goes to the logger `berth.access`.

use std::time::{Duration, SystemTime};

use berth::app::{AccessLog, Record, RequestLine};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// An access-log format, parsed once: `combined` (the default), `common`, `json`, `short`, or
/// a template of gunicorn's (`%(h)s "%(r)s" %(s)s %(D)s`) or granian's (`%(addr)s
/// %(dt_ms).3f`) atoms. A format it cannot read is a `ValueError` saying why.
#[pyclass(frozen, module = "berth._berth")]
pub struct AccessFormat(AccessLog);

#[pymethods]
impl AccessFormat {
    #[new]
    fn new(format: &str) -> PyResult<Self> {
        AccessLog::parse(format)
            .map(AccessFormat)
            .map_err(PyValueError::new_err)
    }

    /// The line of one response: the client's address (without its port; `None` if it has
    /// none), the request's method, target (path and query, as sent) and protocol
    /// (`HTTP/1.1`), the scheme, the status, the body's bytes, the seconds taken, the referer
    /// and the user agent (`None`: not known, written `-`).
    #[pyo3(signature = (addr, method, target, protocol, scheme, status, bytes, seconds, referer=None, user_agent=None))]
    #[allow(clippy::too_many_arguments)]
    fn line(
        &self,
        addr: Option<&str>,
        method: &str,
        target: &str,
        protocol: &str,
        scheme: Option<&str>,
        status: u16,
        bytes: Option<u64>,
        seconds: Option<f64>,
        referer: Option<&str>,
        user_agent: Option<&str>,
    ) -> String {
        self.0.line(&Record {
            addr,
            request: Some(RequestLine {
                method,
                target,
                protocol,
            }),
            scheme,
            status,
            bytes,
            duration: seconds.and_then(|s| Duration::try_from_secs_f64(s).ok()),
            referer,
            user_agent,
            time: SystemTime::now(),
        })
    }
}
