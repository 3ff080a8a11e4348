//! cargo run --example own_handler -p berth
//!
//! A handler of your own, served by two different models at once, and over HTTP/3: the same
//! `Service` runs on the `threaded` model at 127.0.0.1:9201, on the `evloop` model at
//! 127.0.0.1:9202, and on `evloop` again over QUIC at udp 127.0.0.1:9203 (with a certificate
//! made for the example; its CA's path is printed).
//!
//! ```text
//! curl http://127.0.0.1:9201/greet?name=ada      # Hello, ada! (served by threaded)
//! curl http://127.0.0.1:9202/greet?name=ada      # Hello, ada! (served by evloop)
//! curl http://127.0.0.1:9202/sum -d '1 2 39'     # 42, computed on a worker thread
//! echo '[{"path": "/greet?name=ada"}]' | target/py-venv/bin/python \
//!     crates/berth-cli/tests/h3/client.py 127.0.0.1 9203 CA_PRINTED   # the same, over HTTP/3
//! ```
//! Stop it with Ctrl-C.

use std::sync::Arc;

use berth::drive::{self, Model, Service, Settings};
use berth::net::tls::{TlsAcceptor, TlsSettings};
use berth::net::{Acceptor, Addr};
use berth::proto::http::{Handled, Handler, Job, Method, Reply, Request, Response};
use berth::stats::Stats;

/// The service: a factory of handlers, one per I/O thread (or per connection thread).
#[derive(Clone)]
struct Greeter;

struct GreeterHandler {
    /// Per-thread scratch space, reused so that answering allocates nothing once warm.
    scratch: Vec<u8>,
}

/// Work that must not block an event loop: summing numbers stands in for anything slow.
struct Sum(Vec<u8>);

impl Job for Sum {
    fn run(self) -> Reply {
        let text = String::from_utf8_lossy(&self.0);
        match text
            .split_whitespace()
            .map(str::parse::<i64>)
            .sum::<Result<i64, _>>()
        {
            Ok(total) => Reply::new(200, "text/plain", format!("{total}\n").into_bytes()),
            Err(_) => Reply::new(400, "text/plain", b"numbers only\n".to_vec()),
        }
    }
}

impl Service for Greeter {
    type Handler = GreeterHandler;
    fn handler(&self, _thread: usize) -> GreeterHandler {
        GreeterHandler {
            scratch: Vec::new(),
        }
    }
}

impl Handler for GreeterHandler {
    type Job = Sum;

    fn handle(&mut self, req: &Request<'_>, res: &mut Response<'_>) -> Handled<Sum> {
        match (req.method, req.path) {
            (Method::Get, "/greet") => {
                let name = req
                    .query
                    .and_then(|q| q.strip_prefix("name="))
                    .unwrap_or("world");
                self.scratch.clear();
                self.scratch.extend_from_slice(b"Hello, ");
                self.scratch.extend_from_slice(name.as_bytes());
                self.scratch.extend_from_slice(b"!\n");
                res.send(200, "text/plain", &self.scratch);
            }
            // The body is copied into the job: it outlives this call.
            (Method::Post, "/sum") => return Handled::Offload(Sum(req.body.to_vec())),
            _ => res.send(404, "text/plain", b"try /greet or /sum\n"),
        }
        Handled::Done
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    berth::process::signal::block_termination()?;
    let mut servers = Vec::new();
    for (model, port) in [(Model::Threaded, 9201), (Model::Evloop, 9202)] {
        let settings = Settings::new(model, ([127, 0, 0, 1], port).into());
        let stats: Arc<Stats> = settings.new_stats()?;
        let (server, addr) = drive::serve(&settings, Greeter, stats)?;
        println!("{model} serving http://{addr}/greet");
        servers.push(server);
    }
    // HTTP/3: a UDP address and a certificate (QUIC has TLS inside); the handler is the same.
    let certs = berth_testkit::certs::Certs::new("own-handler");
    let udp = ([127, 0, 0, 1], 9203).into();
    let mut settings = Settings::new(Model::Evloop, udp);
    settings.addr = Addr::Udp(udp);
    let tls = TlsAcceptor::new(TlsSettings::http(&certs.cert, &certs.key))?;
    settings.common.listen.transport = Acceptor::Tls(tls);
    let (server, addr) = drive::serve(&settings, Greeter, settings.new_stats()?)?;
    println!(
        "evloop serving HTTP/3 at {addr} (CA: {})",
        certs.ca.display()
    );
    servers.push(server);
    berth::process::signal::wait_for_termination()?;
    for server in servers {
        server.shutdown();
        server.join();
    }
    Ok(())
}
