//! Peer for `berth lab`, bench/http.py and bench/h2.py: hyper 1.x on tokio, serving the lab's
//! routes, as a Rust user would write a small server without a framework: HTTP/1.1, or with
//! `--h2` HTTP/2 with prior knowledge (h2c; hyper's `http2` server, on the `h2` crate).
//!
//! Usage: rust-hyper-peer PORT [--multi-thread] [--h2]
//!
//! By default tokio's current-thread runtime runs everything on one thread (the shape of one
//! berth event loop); `--multi-thread` uses the multi-thread runtime with tokio's default worker
//! count (one per core this process may use: one when the lab pins it to one core).
//! Pipelined responses are flushed together (`pipeline_flush`), as hyper offers for that load.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

const HELLO: &str = "Hello, World!";
/// berth's `/test/slow` job takes 30 ms.
const SLOW: Duration = Duration::from_millis(30);

fn answer(
    status: StatusCode,
    ctype: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(body.into()));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    res
}

/// `{"data": [each value reversed]}` for a JSON object of strings, in the object's order.
fn reverse(body: &[u8]) -> Option<Vec<u8>> {
    let serde_json::Value::Object(map) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    let mut out = Vec::with_capacity(map.len());
    for value in map.values() {
        out.push(value.as_str()?.chars().rev().collect::<String>());
    }
    serde_json::to_vec(&serde_json::json!({ "data": out })).ok()
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let res = match (req.method(), req.uri().path()) {
        (&Method::GET, "/" | "/hello/world") => answer(StatusCode::OK, "text/plain", HELLO),
        (&Method::GET, "/test/slow") => {
            tokio::time::sleep(SLOW).await;
            answer(StatusCode::OK, "text/plain", "")
        }
        (&Method::POST, "/reverse") => {
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => Bytes::new(),
            };
            match reverse(&body) {
                Some(json) => answer(StatusCode::OK, "application/json", json),
                None => answer(
                    StatusCode::BAD_REQUEST,
                    "text/plain",
                    "body must be a JSON object of strings\n",
                ),
            }
        }
        _ => answer(StatusCode::NOT_FOUND, "text/plain", "Endpoint not found"),
    };
    Ok(res)
}

async fn serve(addr: SocketAddr, h2: bool) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("rust-hyper listening on {addr}");
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            // Out of descriptors or a connection reset before accept: keep serving.
            Err(_) => continue,
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let io = TokioIo::new(stream);
            let _ = if h2 {
                http2::Builder::new(TokioExecutor::new())
                    .serve_connection(io, service_fn(handle))
                    .await
            } else {
                http1::Builder::new()
                    .pipeline_flush(true)
                    .serve_connection(io, service_fn(handle))
                    .await
            };
        });
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let port: u16 = match args.next().map(|p| p.parse()) {
        Some(Ok(p)) => p,
        _ => {
            eprintln!("usage: rust-hyper-peer PORT [--multi-thread] [--h2]");
            std::process::exit(2);
        }
    };
    let (mut multi, mut h2) = (false, false);
    for arg in args {
        match arg.as_str() {
            "--multi-thread" => multi = true,
            "--h2" => h2 = true,
            other => {
                eprintln!(
                    "rust-hyper-peer: unknown option {other} (usage: PORT [--multi-thread] [--h2])"
                );
                std::process::exit(2);
            }
        }
    }
    let mut builder = if multi {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = builder.enable_all().build().expect("a tokio runtime");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // On the multi-thread runtime the accept loop is a task too, so it runs on the workers.
    let served = runtime.block_on(async move { tokio::spawn(serve(addr, h2)).await });
    match served {
        Ok(Err(e)) => eprintln!("rust-hyper-peer: {addr}: {e}"),
        Err(e) => eprintln!("rust-hyper-peer: {e}"),
        Ok(Ok(())) => return,
    }
    std::process::exit(1);
}
