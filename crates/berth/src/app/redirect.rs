//! The plain-HTTP listener beside an HTTPS one (`berth serve --http-port P`, its default mode):
//! every request is answered `308 Permanent Redirect` to the same host and target over
//! `https://` on the TLS port. 308 rather than 301 so that a POST stays a POST.

use berth_proto::http::{Handled, Handler, Job, Reply, Request, Response};

use crate::drive::Service;

/// Redirects every request to `https://HOST:port/TARGET`.
#[derive(Debug, Clone, Copy)]
pub struct HttpsRedirect {
    /// The port the HTTPS listener has.
    pub port: u16,
}

/// No request is ever offloaded here.
pub enum NoJob {}

impl Job for NoJob {
    fn run(self) -> Reply {
        match self {}
    }
}

impl Service for HttpsRedirect {
    type Handler = HttpsRedirect;

    fn handler(&self, _thread: usize) -> HttpsRedirect {
        *self
    }
}

impl Handler for HttpsRedirect {
    type Job = NoJob;

    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<NoJob> {
        // The host as the client named it, without its port (the HTTPS port replaces it).
        let host = req
            .header("host")
            .and_then(|h| std::str::from_utf8(h).ok())
            .map(|h| match h.rfind(':') {
                Some(i) if !h.ends_with(']') => &h[..i],
                _ => h,
            })
            .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()));
        let Some(host) = host else {
            res.send(
                400,
                "text/plain",
                b"a Host header is needed to redirect to https\n",
            );
            return Handled::Done;
        };
        let location = match self.port {
            443 => format!("https://{host}{}", req.target),
            port => format!("https://{host}:{port}{}", req.target),
        };
        res.send_with(
            308,
            "text/plain",
            &[("Location", location.as_bytes())],
            b"use https\n",
        );
        Handled::Done
    }
}
