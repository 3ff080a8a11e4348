//! `berth msg send` and `berth msg listen`: a client engine for trying a server by hand.
//! Answers are printed one per line, as text where they are UTF-8 and as hex otherwise. Names
//! are given in the escaped form of docs/msg-protocol.md §2 (`\\` a backslash, `\xNN` any
//! byte), so any name can be used.

use std::io::Write;
use std::time::{Duration, Instant};

use berth::msg::{ClientId, Endpoint, Engine, EngineConfig, Name};
use berth::net::Scheme;

use super::{ListenArgs, SendArgs, TlsClientArgs};
use crate::args::{not_served_yet, usage_error};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects as `name`, with `--ca`, `--insecure`, `--cert` and `--key` applied to a tls://
/// endpoint (and refused on any other).
fn connect(
    command: &str,
    endpoint: &str,
    name: &str,
    args: &TlsClientArgs,
) -> Result<(Engine, ClientId), String> {
    let mut endpoint = Endpoint::parse(endpoint).unwrap_or_else(|e| usage_error(command, &e));
    match endpoint.scheme() {
        Scheme::Quic => not_served_yet(&format!(
            "{endpoint}: quic:// is not spoken by msg clients yet; connect with tls:// or tcp://"
        )),
        Scheme::Udp => usage_error(
            command,
            &format!(
                "{endpoint}: udp:// is for servers only; connect with tcp:// or unix:// (or a \
                 datagram socket of your own, docs/msg-protocol.md §6)"
            ),
        ),
        _ => {}
    }
    match endpoint.tls.as_mut() {
        Some(tls) => {
            if let Some(ca) = &args.ca {
                tls.ca = Some(ca.clone());
            }
            tls.insecure |= args.insecure;
            if let (Some(cert), Some(key)) = (&args.cert, &args.key) {
                tls.cert = Some(cert.clone());
                tls.key = Some(key.clone());
            }
        }
        None if args.ca.is_some() || args.insecure || args.cert.is_some() => usage_error(
            command,
            "--ca, --insecure, --cert and --key apply to tls:// endpoints only",
        ),
        None => {}
    }
    let mut engine = Engine::new(EngineConfig::default()).map_err(|e| e.to_string())?;
    // Escaped as the server's logs and the relay show names; an empty name is anonymous.
    let server = engine
        .connect(&endpoint, Name::unescape(name), CONNECT_TIMEOUT)
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

/// Whether `m` is in the demo's relay form, `@NAME text`: it goes to client NAME, and its
/// sender gets no answer (unless the relay fails: `@! reason`).
fn is_relay(m: &[u8]) -> bool {
    m.first() == Some(&b'@')
        && m.iter()
            .position(|&b| b == b' ')
            .is_some_and(|space| space > 1)
}

/// What the demo answers instead of relaying a message it cannot deliver.
const NOT_DELIVERED: &[u8] = b"@! ";

/// Sends the messages, then prints answers until every answer awaited came or `--wait`
/// passed. Which answers are awaited (the rule README and `--help` give):
///
/// - by default, one echo per message that is not a relay (`@NAME text`); a relay gets no
///   answer when it is delivered. So that a relay's delivery is known without waiting out
///   `--wait`, a send whose last message is a relay ends with an empty message, which the demo
///   echoes (silently here) after it has routed every message before it;
/// - with `--answers N`, N answers of any kind, and no closing empty message.
///
/// Exit 0 when every message was written and every awaited answer came, none of them a
/// relay's `@! ...` failure; 1 otherwise, with the cause.
pub fn send(args: SendArgs) -> Result<(), String> {
    let name = args.name.as_deref().unwrap_or("");
    let (mut engine, server) = connect("msg send", &args.endpoint, name, &args.tls)?;
    let relays = args
        .messages
        .iter()
        .filter(|m| is_relay(m.as_bytes()))
        .count();
    let barrier =
        args.answers.is_none() && args.messages.last().is_some_and(|m| is_relay(m.as_bytes()));
    for m in &args.messages {
        engine.send_message(server, m.as_bytes());
    }
    if barrier {
        engine.send_message(server, b"");
    }
    let want = args
        .answers
        .unwrap_or(args.messages.len() - relays + usize::from(barrier));
    let deadline = Instant::now() + args.wait;
    let (mut got, mut failed) = (0, 0);
    // Until everything is written out (even with no answers awaited), then until the answers.
    while got < want || engine.pending_output(server) > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let r = engine.io_iteration(Some(left)).map_err(|e| e.to_string())?;
        for msg in engine.messages(server) {
            got += 1;
            if barrier && got == want && msg.is_empty() {
                // The closing empty message's echo: every relay before it was routed.
                continue;
            }
            if msg.starts_with(NOT_DELIVERED) {
                failed += 1;
                if args.answers.is_none() {
                    // It stands in for the relay's (absent) answer: the echoes awaited are
                    // still to come.
                    got -= 1;
                }
            }
            print(&msg);
        }
        if r.clients_with_disconnected_connection.contains(&server) {
            return Err("the server closed the connection".to_owned());
        }
    }
    if engine.pending_output(server) > 0 {
        return Err(format!(
            "could not send everything within {:?} (the server is not reading)",
            args.wait
        ));
    }
    if failed > 0 {
        return Err(format!(
            "{failed} of {relays} relayed messages not delivered"
        ));
    }
    if got < want {
        return Err(format!("{got} of {want} answers within {:?}", args.wait));
    }
    Ok(())
}

/// Prints every message until the server closes.
pub fn listen(args: ListenArgs) -> Result<(), String> {
    let (mut engine, server) = connect("msg listen", &args.endpoint, &args.name, &args.tls)?;
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
