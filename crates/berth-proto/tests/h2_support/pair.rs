//! A client and a server joined in memory with a manual clock, as quinn-proto's tests join
//! theirs: berth-proto's client role ([`Client`]) on one side, the server connection driven
//! as a driver would ([`Server`], whose clock only moves when a test says) on the other.
//! [`Pair::drive`] moves bytes both ways until neither side has more to say, so a protocol
//! test is a conversation with no socket and no sleep.
//!
//! ```text
//!   Client ──poll_transmit──> Server::feed ──> Connection::process
//!      ^                                             │
//!      └────────── recv <── Server::output ──────────┘      Pair::advance(d): the server's
//!                  │                                        clock moves, its deadline may
//!                  └─> events, kept in order in `heard`     expire, then drive again
//! ```
//!
//! The server here is the h2 connection under its own step loop (`h2_support::Server`), not
//! `switch::Core` under `switch::memory::Pump`: the pump reads `Instant::now()` itself, so
//! it cannot be given a manual clock without a hook in `switch/`.

use std::time::Duration;

use berth_proto::h2::client::{Client, ClientConfig, Event, ProtocolError, Request};
use berth_proto::h2::frame::ErrorCode;
use berth_proto::h2::H2Config;
use berth_proto::http::Handler;

use super::{Demo, Server};

/// One stream's answer as the client heard it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heard {
    /// The final status (0: no head yet).
    pub status: u16,
    /// The head's other fields.
    pub fields: Vec<(String, String)>,
    /// The body so far.
    pub body: Vec<u8>,
    /// The trailers, if a trailer block came.
    pub trailers: Vec<(String, String)>,
    /// END_STREAM came.
    pub ended: bool,
    /// RST_STREAM's code, if the server reset it.
    pub reset: Option<u32>,
}

/// A client and a server in memory.
pub struct Pair<H: Handler = Demo> {
    pub client: Client,
    pub server: Server<H>,
    /// Every event the client heard, in order.
    pub heard: Vec<Event>,
    /// The protocol error the client found in the server's output, if any.
    pub error: Option<ProtocolError>,
    /// How much of the server's output the client has been given.
    seen: usize,
}

impl Pair<Demo> {
    /// The demo handler behind a server with `config`, and a client with `client`; jobs run
    /// as soon as they are offloaded. The preface and both SETTINGS are exchanged.
    pub fn new(config: H2Config, client: ClientConfig) -> Self {
        let mut server = Server::new(config);
        server.hold = false;
        Pair::with(server, client)
    }
}

impl<H: Handler> Pair<H> {
    /// `server` (as configured, jobs held or not) and a client with `client`, the opening
    /// exchanged.
    pub fn with(server: Server<H>, client: ClientConfig) -> Self {
        let mut pair = Pair {
            client: Client::new(client),
            server,
            heard: Vec::new(),
            error: None,
            seen: 0,
        };
        pair.drive();
        pair
    }

    /// Moves bytes both ways until neither side writes anything more.
    pub fn drive(&mut self) {
        for _ in 0..1_000_000 {
            let mut to_server = Vec::new();
            self.client.poll_transmit(&mut to_server);
            if !to_server.is_empty() {
                self.server.feed(&to_server);
            }
            let to_client = self.server.output.len() - self.seen;
            if to_client > 0 && self.error.is_none() {
                let bytes = &self.server.output[self.seen..];
                if let Err(e) = self.client.recv(bytes) {
                    self.error = Some(e);
                }
                self.heard
                    .extend(std::iter::from_fn(|| self.client.poll_event()));
            }
            self.seen = self.server.output.len();
            if to_server.is_empty() && to_client == 0 {
                return;
            }
        }
        panic!("the pair never went quiet");
    }

    /// Time passes on the server's clock (its deadline may expire), then the pair talks.
    pub fn advance(&mut self, by: Duration) {
        self.server.advance(by);
        self.drive();
    }

    /// Held jobs run (all input is in), then the pair talks.
    pub fn finish(&mut self) {
        self.server.finish();
        self.drive();
    }

    /// Opens a stream for `method path` with `body` (END_STREAM after it) and talks.
    pub fn request(&mut self, method: &str, path: &str, body: &[u8]) -> u32 {
        let id = self.send(method, path, &[], body, true);
        self.drive();
        id
    }

    /// Opens a stream for `method path` with `fields` and `body` (END_STREAM after it if
    /// `end`), without talking yet.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        fields: &[(&[u8], &[u8])],
        body: &[u8],
        end: bool,
    ) -> u32 {
        let req = Request {
            method: method.as_bytes(),
            scheme: b"http",
            path: path.as_bytes(),
            authority: Some(b"x"),
            fields,
            indexed: false,
        };
        self.client
            .request(&req, body, end)
            .expect("a stream id left")
    }

    /// `GET path`, answered.
    pub fn get(&mut self, path: &str) -> u32 {
        self.request("GET", path, b"")
    }

    /// What the client heard on `stream`.
    pub fn answer(&self, stream: u32) -> Heard {
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        let mut a = Heard::default();
        for e in &self.heard {
            match e {
                Event::Head {
                    stream: s,
                    status,
                    fields,
                    end_stream,
                } if *s == stream => {
                    a.status = *status;
                    a.fields = fields.iter().map(|(n, v)| (text(n), text(v))).collect();
                    a.ended |= end_stream;
                }
                Event::Data {
                    stream: s,
                    data,
                    end_stream,
                    ..
                } if *s == stream => {
                    a.body.extend_from_slice(data);
                    a.ended |= end_stream;
                }
                Event::Trailers { stream: s, fields } if *s == stream => {
                    a.trailers = fields.iter().map(|(n, v)| (text(n), text(v))).collect();
                    a.ended = true;
                }
                Event::Reset { stream: s, code } if *s == stream => a.reset = Some(code.0),
                _ => {}
            }
        }
        a
    }

    /// The streams the client heard a head on, in order.
    pub fn answered(&self) -> Vec<u32> {
        self.heard
            .iter()
            .filter_map(|e| match e {
                Event::Head { stream, .. } => Some(*stream),
                _ => None,
            })
            .collect()
    }

    /// `(stream, code)` of every RST_STREAM heard, in order.
    pub fn resets(&self) -> Vec<(u32, u32)> {
        self.heard
            .iter()
            .filter_map(|e| match e {
                Event::Reset { stream, code } => Some((*stream, code.0)),
                _ => None,
            })
            .collect()
    }

    /// The GOAWAY heard, if one came: `(last stream, code)`.
    pub fn goaway(&self) -> Option<(u32, ErrorCode)> {
        self.heard.iter().find_map(|e| match e {
            Event::GoAway {
                last_stream, code, ..
            } => Some((*last_stream, *code)),
            _ => None,
        })
    }

    /// How many of the heard events `pred` holds for.
    pub fn count(&self, pred: impl Fn(&Event) -> bool) -> usize {
        self.heard.iter().filter(|e| pred(e)).count()
    }
}
