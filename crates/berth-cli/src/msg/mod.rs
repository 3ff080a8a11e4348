//! `berth msg`: the message protocol of docs/msg-protocol.md from the command line: a server
//! (`serve`), two hand tools (`send`, `listen`) and a load generator (`bench`).

pub mod bench;
mod client;
mod serve;

use std::time::Duration;

use clap::{Args, Subcommand};

use crate::args::{heading, AcceptArgs, DaemonArgs, StopArgs, WRITE_TIMEOUT};
use berth::units;

/// Options of `berth msg`.
#[derive(Debug, Args)]
pub struct MsgArgs {
    #[command(subcommand)]
    pub command: MsgCommand,
}

/// What `berth msg` runs.
#[derive(Debug, Subcommand)]
pub enum MsgCommand {
    /// Serve the echo and relay demo (`@NAME text` goes to client NAME) until stopped.
    #[command(disable_help_flag = true)]
    Serve(Box<ServeArgs>),
    /// Connect, send messages, print the answers that arrive within --wait. Exits 0 when
    /// every message was sent and every answer awaited came (see --answers).
    #[command(disable_help_flag = true)]
    Send(SendArgs),
    /// Connect under a name and print every message that arrives until the server closes.
    #[command(disable_help_flag = true)]
    Listen(ListenArgs),
    /// Load-test a message server: msgs/s and MB/s of echoed messages by size.
    #[command(disable_help_flag = true)]
    Bench(bench::MsgBenchArgs),
}

/// `refuse` or `replace`.
fn parse_name_taken(s: &str) -> Result<berth_proto::msg::NameTaken, String> {
    berth_proto::msg::NameTaken::parse(s).ok_or_else(|| format!("{s:?}: refuse or replace"))
}

/// Options of `berth msg serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Endpoint to listen on (repeatable): tcp://HOST:PORT, tls://HOST:PORT[?cert=F&key=F],
    /// unix:///PATH, udp://HOST:PORT, ws://HOST:PORT[/PATH] (WebSocket clients at PATH,
    /// default /ws/relay: first text message the name), wss://HOST:PORT[/PATH] (inside TLS),
    /// with ?raw, ?anonymous=no, ?expected-only. Under socket activation, the first tcp://,
    /// tls://, ws:// or wss:// endpoint takes the socket the service manager passed.
    #[arg(short = 'l', long = "listen", value_name = "ENDPOINT", required = true, help_heading = heading::LISTEN)]
    pub listen: Vec<String>,

    /// Share TCP and UDP ports with another process that listens on them with SO_REUSEPORT
    /// (the old server of a zero-downtime restart). Without it a port anyone else listens on
    /// is refused ("already in use", exit 1). Names are not shared between processes.
    #[arg(long, help_heading = heading::LISTEN)]
    pub reuse_port: bool,

    #[command(flatten)]
    pub accept: AcceptArgs,

    /// A rule for a name (repeatable), e.g. admin:transport=unix or svc:from=127.0.0.0/8;
    /// bulk:streams=1g lets messages over --max-held from others stream to it, up to 1g.
    /// NAME as for --expect (a colon in it is \x3a).
    #[arg(long = "rule", value_name = "NAME:CONSTRAINTS", help_heading = heading::NAMES)]
    pub rules: Vec<String>,

    /// A name expected in advance (repeatable). Names are bytes: write a backslash as \\ and
    /// any byte as \xNN (e.g. 'a\x20b', '\xff\xfe'), as logs show them.
    #[arg(long = "expect", value_name = "NAME", help_heading = heading::NAMES)]
    pub expect: Vec<String>,

    /// Refuse anonymous clients on every listener.
    #[arg(long, help_heading = heading::NAMES)]
    pub no_anonymous: bool,

    /// Refuse names not given with --expect on every listener.
    #[arg(long, help_heading = heading::NAMES)]
    pub expected_only: bool,

    /// A name held by a live connection: refuse the newcomer, or replace the old connection
    /// (it gets its queued output and an `error name-replaced` frame). A rule can say
    /// otherwise for its name (name-taken=replace).
    #[arg(long, value_name = "WHAT", default_value = "refuse", value_parser = parse_name_taken, help_heading = heading::NAMES)]
    pub name_taken: berth_proto::msg::NameTaken,

    /// Longest name a client may register (1 to 64k). A name is any bytes not starting with
    /// '#' (the form of anonymous clients' ids), as FI-ASockIOCore takes them.
    #[arg(long, value_name = "SIZE", default_value = "4096", value_parser = parse_max_name, help_heading = heading::NAMES)]
    pub max_name: usize,

    /// Take only the names berth took before: 1 to 255 bytes of UTF-8 without control
    /// characters or spaces (and not starting with '#'); refuse others with name-invalid.
    #[arg(long, help_heading = heading::NAMES)]
    pub strict_names: bool,

    /// Join a cluster of berth nodes through NATS (nats://HOST:PORT, JetStream enabled):
    /// names are unique across the nodes, and @NAME relays reach clients of other nodes.
    #[arg(long, value_name = "URL", help_heading = heading::NAMES)]
    pub cluster: Option<String>,

    /// How long a node that stops renewing its lease (it died) keeps its names.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = units::duration, requires = "cluster", help_heading = heading::NAMES)]
    pub cluster_lease: Duration,

    /// Largest message accepted [default: no limit for the demo, which streams; a limit
    /// given here applies to every message].
    #[arg(long, value_name = "SIZE", value_parser = units::limit, help_heading = heading::LIMITS)]
    pub max_message: Option<u64>,

    /// Largest message received whole before it is answered or relayed (so a client that
    /// sends a whole message before it reads gets its answer), and held whole for a target
    /// busy receiving another; bigger ones stream through as they arrive: echoed, or relayed
    /// to a client whose rule takes them (NAME:streams=SIZE); relayed to any other client they
    /// are refused with an `@!` message.
    #[arg(long, value_name = "SIZE", default_value = "64m", value_parser = units::limit, help_heading = heading::LIMITS)]
    pub max_held: u64,

    /// Most bytes held that way at once, over all clients (shared out evenly by the -A
    /// threads). A message that would go over it waits, its sender not read, until enough
    /// is delivered; one message at a time may exceed it.
    #[arg(long, value_name = "SIZE", default_value = "1g", value_parser = units::limit, help_heading = heading::LIMITS)]
    pub max_held_total: u64,

    /// Bytes queued to a client above which whoever feeds it is paused.
    #[arg(long, value_name = "SIZE", default_value = "1m", value_parser = units::limit, help_heading = heading::LIMITS)]
    pub out_high: u64,

    /// Longest opening handshake (HTTP head) of a ws:// client; longer ones are answered 431.
    #[arg(long, value_name = "SIZE", default_value = "16k", value_parser = units::limit, help_heading = heading::LIMITS)]
    pub ws_max_head: u64,

    #[command(flatten)]
    pub ws_deflate: crate::args::WsDeflateArgs,

    /// Time allowed for a client's keyword.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = units::duration, help_heading = heading::TIMEOUTS)]
    pub handshake_timeout: Duration,

    /// How long a client may send nothing in the middle of a message before it is ended with
    /// `error read-timeout` [default: never, as FI-ASockIOCore].
    #[arg(long, value_name = "DURATION", value_parser = units::duration, help_heading = heading::TIMEOUTS)]
    pub read_timeout: Option<Duration>,

    /// How long a client may send nothing in the middle of a message that others wait on (one
    /// streaming to another client, or one held whole while others wait for the held budget)
    /// before it is ended with `error read-timeout`; a stream it fed is completed with zero
    /// bytes so that its receiver's framing survives.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = units::duration, help_heading = heading::TIMEOUTS)]
    pub stall_timeout: Duration,

    /// Bytes a message others wait on must bring in each --stall-timeout window; a sender
    /// that trickles less (a byte now and then) is ended as a silent one is. 0: only silence
    /// is a stall.
    #[arg(long, value_name = "SIZE", default_value = "64k", value_parser = units::size, help_heading = heading::TIMEOUTS)]
    pub stall_min_bytes: u64,

    /// How long a client with output waiting may take none of it before it is dropped.
    #[arg(long, value_name = "DURATION", default_value = WRITE_TIMEOUT, value_parser = units::duration, help_heading = heading::TIMEOUTS)]
    pub write_timeout: Duration,

    /// How long a silent UDP client is kept.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = units::duration, help_heading = heading::TIMEOUTS)]
    pub udp_idle: Duration,

    /// Certificate (PEM) of tls:// endpoints that name none with ?cert=. Needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key", help_heading = heading::TLS)]
    pub tls_cert: Option<std::path::PathBuf>,

    /// Private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert", help_heading = heading::TLS)]
    pub tls_key: Option<std::path::PathBuf>,

    /// Ask tls:// clients for a certificate signed by this CA (PEM); a rule NAME:cert then
    /// admits NAME only with a certificate whose common name is NAME.
    #[arg(long, value_name = "FILE", requires = "tls_cert", help_heading = heading::TLS)]
    pub client_ca: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub stop: StopArgs,

    #[command(flatten)]
    pub daemon: DaemonArgs,
}

/// Options of `berth msg send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// Server endpoint, e.g. tcp://127.0.0.1:9100
    pub endpoint: String,

    /// Messages to send, in order. `@NAME text` is relayed to client NAME (it reaches NAME as
    /// `@SENDER text`) and gets no answer; anything else is echoed back.
    #[arg(value_name = "MESSAGE", required = true)]
    pub messages: Vec<String>,

    /// Name to connect under [default: anonymous; others see it as #ID]. Bytes as for
    /// `msg serve --expect`: \\ is a backslash, \xNN any byte.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// Longest wait for the answers after sending: 1 (second), 500ms, 2s.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = units::duration)]
    pub wait: Duration,

    /// Answers to wait for (0: none, just send) [default: one per message that is not a relay;
    /// a relay that cannot be delivered is answered `@! reason` and fails the send].
    #[arg(long, value_name = "N")]
    pub answers: Option<usize>,

    #[command(flatten)]
    pub tls: TlsClientArgs,
}

/// How `send` and `listen` speak TLS to a tls:// endpoint.
#[derive(Debug, Args)]
pub struct TlsClientArgs {
    /// tls:// only: verify the server's certificate against this CA (PEM).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,

    /// tls:// only: accept any server certificate (encrypted, not authenticated: for tests).
    #[arg(long)]
    pub insecure: bool,

    /// tls:// only: present this client certificate (PEM; with --key) to a server that
    /// asks for one.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<std::path::PathBuf>,

    /// tls:// only: the private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<std::path::PathBuf>,
}

/// Options of `berth msg listen`.
#[derive(Debug, Args)]
pub struct ListenArgs {
    /// Server endpoint, e.g. tcp://127.0.0.1:9100
    pub endpoint: String,

    /// Name to connect under (\\ is a backslash, \xNN any byte).
    #[arg(long, value_name = "NAME", required = true)]
    pub name: String,

    #[command(flatten)]
    pub tls: TlsClientArgs,
}

/// Most `--max-name` allows: names are held whole from the handshake on, and a relay target
/// (escaped, up to four times as long) is held before a message is routed.
const MAX_MAX_NAME: u64 = 64 * 1024;

/// `--max-name`: a size from 1 byte to [`MAX_MAX_NAME`].
fn parse_max_name(s: &str) -> Result<usize, String> {
    match units::limit(s)? {
        n if n > MAX_MAX_NAME => Err(format!("'{s}' is over the most allowed, 64k")),
        n => Ok(n as usize),
    }
}

/// Runs the chosen `berth msg` subcommand.
pub fn run(opts: MsgArgs) -> Result<(), String> {
    match opts.command {
        MsgCommand::Serve(opts) => serve::run(*opts),
        MsgCommand::Send(opts) => client::send(opts),
        MsgCommand::Listen(opts) => client::listen(opts),
        MsgCommand::Bench(opts) => bench::run(opts),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_max_name;

    #[test]
    fn max_name() {
        assert_eq!(parse_max_name("4096"), Ok(4096));
        assert_eq!(parse_max_name("64k"), Ok(65536));
        for bad in ["0", "65537", "1m", "lots"] {
            assert!(parse_max_name(bad).is_err(), "{bad}");
        }
    }
}
