//! `berth msg send` and `berth msg listen`: a client engine for trying a server by hand.
//! Answers are printed one per line, as text where they are UTF-8 and as hex otherwise.

use std::io::Write;
use std::time::{Duration, Instant};

use berth::msg::{ClientId, Endpoint, Engine, EngineConfig};

use super::{ListenArgs, SendArgs};
use crate::args::usage_error;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn connect(endpoint: &str, name: &str) -> Result<(Engine, ClientId), String> {
    let endpoint = Endpoint::parse(endpoint).unwrap_or_else(|e| usage_error("msg", &e));
    let mut engine = Engine::new(EngineConfig::default()).map_err(|e| e.to_string())?;
    let server = engine
        .connect(&endpoint, name, CONNECT_TIMEOUT)
        .map_err(|e| format!("{endpoint}: {e}"))?;
    Ok((engine, server))
}

fn print(msg: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = match std::str::from_utf8(msg) {
        Ok(text) if !text.contains(|c: char| c.is_control() && c != '\t') => {
            writeln!(out, "{text}")
        }
        _ => writeln!(
            out,
            "0x{}",
            msg.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    };
    let _ = out.flush();
}

/// Sends the messages, then prints answers until `--answers` came or `--wait` passed.
pub fn send(args: SendArgs) -> Result<(), String> {
    let (mut engine, server) = connect(&args.endpoint, &args.name)?;
    for m in &args.messages {
        engine.send_message(server, m.as_bytes());
    }
    let want = args.answers.unwrap_or(args.messages.len());
    let deadline = Instant::now() + args.wait;
    let mut got = 0;
    // Until everything is written out (even with no answers awaited), then until the answers.
    while got < want || engine.pending_output(server) > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let r = engine.io_iteration(Some(left)).map_err(|e| e.to_string())?;
        for msg in engine.messages(server) {
            print(&msg);
            got += 1;
        }
        if r.clients_with_disconnected_connection.contains(&server) {
            return Err("the server closed the connection".to_owned());
        }
    }
    if got < want {
        return Err(format!("{got} of {want} answers within {:?}", args.wait));
    }
    Ok(())
}

/// Prints every message until the server closes.
pub fn listen(args: ListenArgs) -> Result<(), String> {
    let (mut engine, server) = connect(&args.endpoint, &args.name)?;
    eprintln!("connected to {} as {}", args.endpoint, args.name);
    loop {
        let r = engine.io_iteration(None).map_err(|e| e.to_string())?;
        for msg in engine.messages(server) {
            print(&msg);
        }
        if r.clients_with_disconnected_connection.contains(&server) {
            eprintln!("the server closed the connection");
            return Ok(());
        }
    }
}
