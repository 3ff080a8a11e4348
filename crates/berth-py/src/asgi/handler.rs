//! The Rust side of each request before Python sees it: the [`Service`] berth's loops are
//! given ([`Asgi`]) and the [`Handler`] each loop runs ([`AsgiHandler`]). It serves static
//! files before the application, checks a WebSocket opening handshake (refusing a bad one
//! itself), and turns every other request into a [`Call`] posted across the bridge by a
//! deferred [`AsgiJob`]. It runs on berth's I/O threads (or turns): never with the GIL.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth::drive::Service;
use berth::proto::http::{BodyStream, Handled, Handler, Request, Response, Version};
use berth::proto::ws::{handshake, DeflateConfig};

use super::bridge::{AsgiJob, Bridge, Call, WsOffer};
use crate::front::StaticMount;

#[derive(Clone)]
pub(super) struct Asgi {
    pub(super) bridge: Arc<Bridge>,
    /// The model can wake a connection from outside (the WebSocket scope needs it).
    pub(super) websocket: bool,
    /// permessage-deflate for the `websocket` scope (`None`: off).
    pub(super) deflate: Option<DeflateConfig>,
    /// Written to a connection refused at capacity (with `Server` or without).
    pub(super) refusal: &'static [u8],
    /// Files served before the application (`--static-path-mount`).
    pub(super) statics: Option<StaticMount>,
    /// Which listener this serves: the main address (0) or one more (`-b` given again).
    pub(super) listener: usize,
}

pub(super) struct AsgiHandler {
    bridge: Arc<Bridge>,
    listener: usize,
    websocket: bool,
    deflate: Option<DeflateConfig>,
    statics: Option<StaticMount>,
}

impl Service for Asgi {
    type Handler = AsgiHandler;

    fn handler(&self, _thread: usize) -> AsgiHandler {
        AsgiHandler {
            bridge: self.bridge.clone(),
            listener: self.listener,
            websocket: self.websocket,
            deflate: self.deflate,
            statics: self.statics.clone(),
        }
    }

    fn refusal(&self) -> &'static [u8] {
        self.refusal
    }

    fn files(&self) -> berth::files::Files {
        self.statics
            .as_ref()
            .map_or_else(berth::files::Files::none, StaticMount::files)
    }

    fn around_fork(&self, fork: &mut dyn FnMut() -> bool) {
        crate::front::around_fork(fork);
    }
}

impl Handler for AsgiHandler {
    type Job = AsgiJob;
    const STREAMS_BODY: bool = true;

    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<AsgiJob> {
        if let Some(handled) = self.statics.as_ref().and_then(|s| s.answer(req, res)) {
            return handled;
        }
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
        res: &mut Response<'_>,
    ) -> Handled<AsgiJob> {
        match self.statics.as_ref().and_then(|s| s.answer(req, res)) {
            None => self.call(req, Some(body), None),
            // A GET with a body the file has no use for: refused rather than read and dropped.
            Some(Handled::File(_)) => {
                res.send(400, "text/plain", b"a static file's request has no body\n");
                Handled::Done
            }
            Some(refused) => refused,
        }
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
            listener: self.listener,
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
