//! HTTP/3's defences (issue 42's "Defences"), each an attack over real UDP sockets against
//! `berth serve --model evloop --listen quic://...`, by the attacking clients of
//! `tests/h3/attack.py` (aioquic's lower-level `QuicConnection`, made to send what an honest
//! client would not): more streams than QUIC's MAX_STREAMS allows, a Rapid-Reset-style
//! open/reset flood, STOP_SENDING floods on downloads, a client that never grants flow-control
//! credit, QPACK bombs (a table past SETTINGS, blocked streams past SETTINGS, inserts without
//! end), and a flood of new connections from many source ports. After each, the server's
//! descriptors, UDP sockets (`ss -uanp`) and resident memory are checked against what it had
//! before, and an honest client (aioquic's, `tests/h3/client.py`) is answered.
//!
//! The memory bounds are generous (a debug build, a shared machine): they catch state kept per
//! attacking stream or connection, not a few MiB of allocator slack. No wall-clock speed is
//! asserted beyond "answered within seconds".

mod common;
#[path = "h3/support.rs"]
mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{answered, footprint, serve, Footprint, H3};

/// Starts `attack.py MODE ARGS` against `s`.
fn attack(s: &H3, mode: &str, args: &[&str]) -> Child {
    let python = berth_testkit::tools::require_python_module("aioquic");
    Command::new(python)
        .arg(support::script("attack.py"))
        .args(["127.0.0.1", &s.port.to_string(), mode])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run attack.py")
}

/// Waits for an attack's one JSON line.
fn outcome(child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "attack.py failed ({}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("attack.py said {stdout:?}: {e}"))
}

/// Runs an attack to its end.
fn run_attack(s: &H3, mode: &str, args: &[&str]) -> Value {
    outcome(attack(s, mode, args))
}

/// An honest GET /hello/world on a connection of its own, answered within `within`.
fn honest(s: &H3, within: Duration) -> Duration {
    let start = Instant::now();
    let r = s.fetch(json!([{"path": "/hello/world"}]));
    let took = start.elapsed();
    answered(&r[0], 200, "Hello, World!");
    assert!(took < within, "an honest request took {took:?}");
    took
}

/// A flood of cancelled streams went past the 128 streams QUIC allows at once (each
/// cancelled stream's credit came back: a stream whose sending side berth left open would
/// hold it for good), then past the limit of cancels (HTTP/2's `max_client_resets`, 200 per
/// 10 s by default), and the connection was closed with H3_EXCESSIVE_LOAD.
fn cut_off(r: &Value, what: &str) {
    let opened = r["opened"].as_u64().unwrap();
    assert!(opened > 200, "{what}: {r}");
    assert_eq!(r["terminated"]["code"], 0x107, "{what}: {r}");
}

/// The server's footprint once it has served one honest connection (the baseline).
fn baseline(s: &H3) -> Footprint {
    honest(s, Duration::from_secs(30));
    footprint(s.berth.pid())
}

/// After an attack: the attacker's connections are gone (only the one asking is open), and
/// the server holds no more descriptors or UDP sockets than before and at most `rss_mib`
/// more memory.
fn settled(s: &H3, before: &Footprint, rss_mib: u64, what: &str) {
    let gone = common::wait_for(Duration::from_secs(20), || {
        support::stat(&s.stats(), "berth_connections_open") == 1
    });
    let stats = s.stats();
    assert!(
        gone,
        "{what}: connections still open after the attack:\n{stats}"
    );
    assert_eq!(
        support::stat(&stats, "berth_jobs_running"),
        0,
        "{what}: {stats}"
    );
    let after = footprint(s.berth.pid());
    eprintln!(
        "{what}: fds {} -> {}, UDP sockets {} -> {}, RSS {} -> {} KiB",
        before.fds, after.fds, before.udp_sockets, after.udp_sockets, before.rss_kib, after.rss_kib
    );
    assert!(
        after.fds <= before.fds,
        "{what}: descriptors {} -> {}",
        before.fds,
        after.fds
    );
    assert_eq!(after.udp_sockets, before.udp_sockets, "{what}: UDP sockets");
    assert!(
        after.rss_kib <= before.rss_kib + rss_mib * 1024,
        "{what}: RSS {} -> {} KiB",
        before.rss_kib,
        after.rss_kib
    );
}

#[test]
fn more_concurrent_streams_than_max_streams_close_the_connection() {
    let s = serve("att-streams", &["--idle-timeout", "3s"]);
    let before = baseline(&s);
    let r = run_attack(&s, "streams", &["300"]);
    // What the server advertised: a few streams to a new connection (`quic::IDLE_STREAMS`,
    // which keeps an idle connection's QUIC stream tables small), then berth's default
    // (`QuicLimits::max_streams`) once the client had them in use.
    assert_eq!(
        r["advertised"],
        u64::from(berth::drive::quic::IDLE_STREAMS),
        "{r}"
    );
    assert_eq!(
        r["widened"],
        u64::from(berth::drive::quic::MAX_CONCURRENT_REQUESTS),
        "{r}"
    );
    // QUIC's STREAM_LIMIT_ERROR for the stream past it.
    assert_eq!(r["terminated"]["code"], 0x4, "{r}");
    honest(&s, Duration::from_secs(10));
    settled(&s, &before, 32, "streams");
}

#[test]
fn http3_max_streams_is_what_the_server_advertises_and_enforces() {
    let s = serve("att-max-streams", &["--http3-max-streams", "7"]);
    // An honest client learns the limit at its handshake and is served within it.
    let r = run_attack(&s, "get", &["/hello/world"]);
    assert_eq!(r["advertised"], 7, "{r}");
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["body"], "Hello, World!", "{r}");
    // One that opens more than the limit at once has its connection closed by QUIC
    // (STREAM_LIMIT_ERROR).
    let r = run_attack(&s, "streams", &["20"]);
    assert_eq!(r["advertised"], 7, "{r}");
    assert_eq!(r["widened"], 7, "{r}");
    assert_eq!(r["terminated"]["code"], 0x4, "{r}");
    honest(&s, Duration::from_secs(10));
}

#[test]
fn quic_retry_on_has_every_client_prove_its_address_and_off_none() {
    // aioquic counts the Retry packets it followed; one handshake alone is far from `auto`'s
    // threshold (`QuicLimits::retry_after`), so `auto` sends none.
    for (retry, retries) in [("on", 1), ("off", 0), ("auto", 0)] {
        let s = serve(&format!("att-retry-{retry}"), &["--quic-retry", retry]);
        let r = run_attack(&s, "get", &["/hello/world"]);
        assert_eq!(r["retries"], retries, "--quic-retry {retry}: {r}");
        assert_eq!(r["terminated"], Value::Null, "--quic-retry {retry}: {r}");
        assert_eq!(r["status"], 200, "--quic-retry {retry}: {r}");
        assert_eq!(r["body"], "Hello, World!", "--quic-retry {retry}: {r}");
        // And another client (asyncio's aioquic, tests/h3/client.py) is served as well.
        honest(&s, Duration::from_secs(10));
        // `/stats` counts the Retries sent: with `on`, one for every connection accepted (the
        // one that asks for `/stats` included), else none.
        let stats = s.stats();
        let accepted = support::stat(&stats, "berth_http3_connections_total");
        let sent = support::stat(&stats, "berth_quic_retries_total");
        assert!(accepted >= 3, "--quic-retry {retry}:\n{stats}");
        let want = if retry == "on" { accepted } else { 0 };
        assert_eq!(sent, want, "--quic-retry {retry}:\n{stats}");
    }
}

#[test]
fn a_rapid_reset_flood_is_bounded_and_an_honest_client_is_answered() {
    let s = serve("att-reset", &["--idle-timeout", "3s"]);
    let before = baseline(&s);
    // Requests that are jobs (dispatched to the workers, then cancelled) and plain ones.
    let jobs = attack(&s, "rapid-reset", &["6", "/test/slow"]);
    let plain = attack(&s, "rapid-reset", &["6", "/hello/world"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut peak = 0;
    for _ in 0..3 {
        honest(&s, Duration::from_secs(10));
        peak = peak.max(footprint(s.berth.pid()).rss_kib);
    }
    for (what, child) in [("jobs", jobs), ("plain", plain)] {
        let r = outcome(child);
        eprintln!("rapid reset ({what}): {r}");
        cut_off(&r, what);
    }
    assert!(
        peak <= before.rss_kib + 128 * 1024,
        "RSS {} -> {peak} KiB at peak",
        before.rss_kib
    );
    settled(&s, &before, 64, "rapid reset");
}

#[test]
fn stop_sending_floods_on_downloads_leave_no_file_or_memory_behind() {
    let s = serve("att-stop", &["--idle-timeout", "3s"]);
    std::fs::write(
        s.root.join("big.bin"),
        berth_testkit::bytes::pattern(0, 20_000_000),
    )
    .unwrap();
    let before = baseline(&s);
    let flood = attack(&s, "stop-sending", &["6", "/files/big.bin"]);
    std::thread::sleep(Duration::from_millis(1500));
    honest(&s, Duration::from_secs(10));
    let r = outcome(flood);
    eprintln!("stop sending: {r}");
    cut_off(&r, "stop sending");
    settled(&s, &before, 64, "stop sending");
}

#[test]
fn a_client_that_grants_no_credit_meets_the_write_timeout() {
    let s = serve(
        "att-credit",
        &["--write-timeout", "2s", "--idle-timeout", "60s"],
    );
    std::fs::write(
        s.root.join("big.bin"),
        berth_testkit::bytes::pattern(0, 50_000_000),
    )
    .unwrap();
    let before = baseline(&s);
    // It pings every half second, so QUIC's idle timeout (a minute here) never comes: the
    // write timeout is what ends it.
    let r = run_attack(&s, "no-credit", &["30", "/files/big.bin"]);
    eprintln!("no credit: {r}");
    let ended = r["ended_after"]
        .as_f64()
        .unwrap_or_else(|| panic!("the connection did not end: {r}"));
    assert!((1.5..20.0).contains(&ended), "{r}");
    // What the client's windows allowed (64 KiB), not the file.
    assert!(r["received"].as_u64().unwrap() < 200_000, "{r}");
    assert!(
        r["terminated"]["reason"]
            .as_str()
            .is_some_and(|w| w.contains("write timeout")),
        "{r}"
    );
    settled(&s, &before, 32, "no credit");
}

#[test]
fn qpack_bombs_are_refused_and_honest_use_of_the_table_is_served() {
    let s = serve("att-qpack", &["--idle-timeout", "8s"]);
    let before = baseline(&s);
    // A dynamic table past SETTINGS_QPACK_MAX_TABLE_CAPACITY: QPACK_ENCODER_STREAM_ERROR.
    let r = run_attack(&s, "qpack-capacity", &[]);
    assert_eq!(r["terminated"]["code"], 0x201, "{r}");
    // One blocked stream past SETTINGS_QPACK_BLOCKED_STREAMS (16):
    // QPACK_DECOMPRESSION_FAILED.
    let r = run_attack(&s, "qpack-blocked", &["17"]);
    assert_eq!(r["terminated"]["code"], 0x200, "{r}");
    // As many as allowed wait (until the header timeout) without harm.
    let r = run_attack(&s, "qpack-blocked", &["16"]);
    assert_eq!(r["terminated"], Value::Null, "{r}");
    // Thousands of inserts into the allowed table evict each other; the connection is served.
    let r = run_attack(&s, "qpack-inserts", &["5000"]);
    assert_eq!(r["terminated"], Value::Null, "{r}");
    assert_eq!(r["answered"], true, "{r}");
    honest(&s, Duration::from_secs(10));
    settled(&s, &before, 32, "qpack");
}

#[test]
fn a_flood_of_new_connections_from_many_ports_is_bounded() {
    // The header timeout bounds a handshake that never finishes.
    let s = serve(
        "att-flood",
        &["--idle-timeout", "30s", "--header-timeout", "3s"],
    );
    let before = baseline(&s);
    let flood = attack(&s, "flood", &["3000"]);
    std::thread::sleep(Duration::from_millis(2000));
    // Answered meanwhile (with a Retry first while handshakes pile up).
    honest(&s, Duration::from_secs(10));
    let peak = footprint(s.berth.pid());
    let r = outcome(flood);
    eprintln!("flood: {r}");
    assert_eq!(r["connections"], 3000, "{r}");
    let open = support::stat(&s.stats(), "berth_connections_open");
    // At most the handshakes kept before Retry takes over, and those timed out since that
    // QUIC still keeps through their closing period (three probe timeouts), and this one.
    assert!(
        open <= 3 * berth::drive::quic::RETRY_AFTER as i64,
        "{open} connections open after the flood"
    );
    assert!(
        peak.rss_kib <= before.rss_kib + 64 * 1024,
        "RSS {} -> {} KiB during the flood",
        before.rss_kib,
        peak.rss_kib
    );
    honest(&s, Duration::from_secs(10));
    settled(&s, &before, 64, "flood");
}
