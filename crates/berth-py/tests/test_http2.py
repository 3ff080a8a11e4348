"""ASGI and WSGI applications over HTTP/2 (issue 32), served by the same engine as HTTP/1.1: curl
(nghttp2) with prior knowledge (h2c) and over TLS with ALPN h2. The scope says
``http_version: "2"``, the environ ``SERVER_PROTOCOL: HTTP/2``; a streamed ASGI response (many
body messages) arrives whole; HTTP/1.1 is still served on the same port."""

import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time

from helpers import HERE, start, stop


def curl(*args):
    assert shutil.which("curl"), "this test needs curl"
    out = subprocess.run(["curl", "-sS", "--max-time", "10", *args], capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout


def test_asgi_over_h2c_says_http_version_2_and_streams():
    proc, port, _ = start("apps.asgi_apps:scope_app", "--interface", "asgi")
    try:
        got = json.loads(curl("--http2-prior-knowledge", "http://127.0.0.1:{}/x".format(port)))
        assert got["http_version"] == "2"
        assert got["path"] == "/x"
        assert got["client"][0] == "127.0.0.1"
        h1 = json.loads(curl("--http1.1", "http://127.0.0.1:{}/y".format(port)))
        assert h1["http_version"] == "1.1"
    finally:
        stop(proc)
    proc, port, _ = start("apps.asgi_apps:starlette_app", "--interface", "asgi")
    try:
        body = curl("--http2-prior-knowledge",
                    "http://127.0.0.1:{}/stream?count=300&size=1000".format(port))
        assert body == b"".join(bytes([i % 251]) * 1000 for i in range(300))
    finally:
        stop(proc)


def test_wsgi_over_h2c_says_server_protocol_http2():
    proc, port, _ = start("apps.wsgi_apps:environ_app", "--interface", "wsgi")
    try:
        got = json.loads(curl("--http2-prior-knowledge", "http://127.0.0.1:{}/".format(port)))
        assert got["SERVER_PROTOCOL"] == "HTTP/2"
        assert got["REMOTE_ADDR"] == "127.0.0.1"
    finally:
        stop(proc)


def test_asgi_over_tls_takes_h2_by_alpn(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "berth", "apps.asgi_apps:scope_app", "--interface", "asgi",
         "--port", "0", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)],
        cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("berth listening on https://"), line
        port = int(line.split("https://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
        out = curl("-k", "--http2", "-w", "|%{http_version}",
                   "https://127.0.0.1:{}/z".format(port)).decode()
        body, version = out.rsplit("|", 1)
        assert version == "2"
        got = json.loads(body)
        assert got["http_version"] == "2" and got["scheme"] == "https"
    finally:
        stop(proc)


def test_asgi_trailers_end_the_response_over_http11_and_h2(tmp_path):
    """The ``http.response.trailers`` extension (issue 32): offered in the scope over HTTP/1.1
    and HTTP/2; the trailers follow the last chunk over HTTP/1.1 and end the stream in a
    HEADERS frame over HTTP/2 (curl shows them after the body); HTTP/1.0 gets the body alone.
    Misuse raises in ``send``: a field a trailer must not carry cuts the response off."""
    events = tmp_path / "events.txt"
    proc, port, _ = start("apps.asgi_apps:trailers", "--interface", "asgi",
                          env={"BERTH_TEST_EVENTS": str(events)})
    url = "http://127.0.0.1:{}".format(port)
    try:
        assert curl("--http1.1", url + "/offered") == b"True"
        assert curl("--http2-prior-knowledge", url + "/offered") == b"True"
        assert curl("--http1.0", url + "/offered") == b"False"
        raw = curl("--http1.1", "--raw", url + "/stream?n=2")
        assert raw == b"6\r\npart0;\r\n6\r\npart1;\r\n0\r\ngrpc-status: 0\r\nx-count: 7\r\n\r\n"
        raw = curl("--http1.1", "--raw", url + "/whole")
        assert raw == b"5\r\nwhole\r\n0\r\ngrpc-status: 0\r\nx-count: 7\r\n\r\n"
        dump = tmp_path / "h2.txt"
        body = curl("--http2-prior-knowledge", "-D", str(dump), url + "/stream?n=40")
        assert body == b"".join(b"part%d;" % i for i in range(40))
        head, _, trailers = dump.read_bytes().decode().partition("\r\n\r\n")
        assert "trailer: grpc-status, x-count" in head
        assert trailers.split("\r\n")[:2] == ["grpc-status: 0", "x-count: 7"], trailers
        assert curl("--http1.0", url + "/stream?n=2") == b"part0;part1;"
        out = subprocess.run(["curl", "-sS", "--max-time", "10", "--http1.1", "--raw",
                              url + "/bad"], capture_output=True)
        assert out.returncode == 18, out  # the body cut short: no last chunk
        assert b"0\r\n" not in out.stdout
    finally:
        stop(proc)
    assert "trailers /bad ValueError" in events.read_text()


def test_a_grpc_service_on_asgi_answers_grpcios_client():
    """A gRPC server can be written on berth: grpcio's own client (h2c) calls a bare ASGI app
    whose status travels in trailers: a unary call, a server stream of 500 messages, and a
    failure whose code and message the client reads from the trailers."""
    grpc = __import__("grpc")
    proc, port, _ = start("apps.asgi_apps:grpc_echo", "--interface", "asgi")
    try:
        with grpc.insecure_channel("127.0.0.1:{}".format(port)) as channel:
            same = lambda b: b  # noqa: E731 - messages are plain bytes, no protobuf
            reverse = channel.unary_unary("/echo.Echo/Reverse", request_serializer=same,
                                          response_deserializer=same)
            assert reverse(b"hello, grpc", timeout=10) == b"cprg ,olleh"
            count = channel.unary_stream("/echo.Echo/Count", request_serializer=same,
                                         response_deserializer=same)
            assert list(count(b"500", timeout=10)) == [str(i).encode() for i in range(1, 501)]
            missing = channel.unary_unary("/echo.Echo/Missing", request_serializer=same,
                                          response_deserializer=same)
            try:
                missing(b"x", timeout=10)
                raise AssertionError("NOT_FOUND expected")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.NOT_FOUND, e
                assert e.details() == "no such method"
    finally:
        stop(proc)


# --- frames on a stream the client reset (RFC 9113 §5.1), over real sockets ---------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x7
END_STREAM, END_HEADERS = 0x1, 0x4
CANCEL, STREAM_CLOSED = 0x8, 0x5


def h2_frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def request_block():
    """A POST to / in HPACK: static-table indexes for :method POST (3), :scheme http (6) and
    :path / (4) (RFC 7541 Appendix A), :authority a literal without indexing."""
    return b"\x83\x86\x84" + b"\x01\x09localhost"


def read_frames(sock, until, timeout=5.0):
    """Frames as ``(type, flags, stream, payload)`` until ``until(frame)`` is true, the peer
    closes, or ``timeout`` seconds pass; returns them all."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    buf, frames = b"", []
    while time.monotonic() < deadline:
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            f = (buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + length])
            buf = buf[9 + length:]
            frames.append(f)
            if until(f):
                return frames
        try:
            got = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return frames
        if not got:
            return frames
        buf += got
    return frames


def stream_closed_after_reset(sock, late, opened=False):
    """Opens stream 1 (a POST whose body is not all sent) unless ``opened``, resets it, sends
    ``late`` on it, and returns the code of the RST_STREAM on stream 1 or GOAWAY that answers,
    or None."""
    opening = b"" if opened else PREFACE + h2_frame(SETTINGS, 0, 0) + \
        h2_frame(HEADERS, END_HEADERS, 1, request_block())
    sock.sendall(opening + h2_frame(RST_STREAM, 0, 1, struct.pack(">I", CANCEL)) + late)

    def error(f):
        return (f[0] == RST_STREAM and f[2] == 1) or f[0] == GOAWAY
    frames = [f for f in read_frames(sock, error) if error(f)]
    if not frames:
        return None
    f = frames[0]
    return int.from_bytes(f[3][:4] if f[0] == RST_STREAM else f[3][4:8], "big")


def test_frames_after_the_clients_reset_are_stream_closed_while_the_app_runs(tmp_path):
    """h2spec 5.1/8 and 5.1/9 against the ASGI front (issue 43): after the client's own
    RST_STREAM, a DATA or HEADERS frame on that stream is a STREAM_CLOSED error (RFC 9113
    §5.1, "closed"), also while the application still runs for the stream (berth keeps the
    stream for its job then, and once answered nothing at all: h2spec timed out). Over h2c and
    over TLS (ALPN h2)."""
    late_data = h2_frame(DATA, END_STREAM, 1, b"test")
    late_headers = h2_frame(HEADERS, END_HEADERS | END_STREAM, 1, request_block())
    proc, port, _ = start("apps.ext_apps:slow", "--interface", "asgi")
    try:
        for late in (late_data, late_headers):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                assert stream_closed_after_reset(sock, late) == STREAM_CLOSED
    finally:
        stop(proc)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "berth", "apps.ext_apps:slow", "--interface", "asgi",
         "--port", "0", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)],
        cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        port = int(line.split("https://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
        tls = ssl.create_default_context()
        tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
        tls.set_alpn_protocols(["h2"])
        for late in (late_data, late_headers):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                with tls.wrap_socket(raw, server_hostname="localhost") as sock:
                    assert sock.selected_alpn_protocol() == "h2"
                    assert stream_closed_after_reset(sock, late) == STREAM_CLOSED
    finally:
        stop(proc)


def test_frames_after_the_clients_reset_of_an_answered_stream_are_stream_closed():
    """An application that answers before the request body is all in (without reading it):
    berth ends the stream with RST_STREAM NO_ERROR after the answer (RFC 9113 §8.1). Frames
    that crossed that are dropped, but a DATA frame the client sends after its own RST_STREAM
    is STREAM_CLOSED (§5.1): the race h2spec 5.1/8 lost now and then against such an app."""
    proc, port, _ = start("apps.ext_apps:early", "--interface", "asgi")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(PREFACE + h2_frame(SETTINGS, 0, 0)
                         + h2_frame(HEADERS, END_HEADERS, 1, request_block()))
            frames = read_frames(sock, lambda f: f[0] == RST_STREAM and f[2] == 1)
            assert (DATA, END_STREAM, 1, b"early") in frames
            assert frames[-1][0] == RST_STREAM and frames[-1][3] == struct.pack(">I", 0)
            assert stream_closed_after_reset(sock, h2_frame(DATA, END_STREAM, 1, b"x"),
                                             opened=True) == STREAM_CLOSED
    finally:
        stop(proc)


def sockets_of(pid):
    """How many sockets process ``pid`` holds open."""
    fds = os.listdir("/proc/%d/fd" % pid)
    return sum(1 for fd in fds
               if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:"))


def test_a_client_that_leaves_mid_body_over_h2_frees_its_app_and_its_socket(tmp_path):
    """HTTP/2's twin of test_asgi's client that leaves mid-body: the client closes the
    connection with a request body half sent. Its stream is given up at once: the app hears
    the body cut short (Starlette's ClientDisconnect) and the socket is closed once the app is
    back. Before the fix the stream waited for DATA that could never come: twenty such
    clients left twenty sockets and twenty app tasks, still held a minute later."""
    events = tmp_path / "events.txt"
    proc, port, _ = start("apps.asgi_apps:starlette_app", "--interface", "asgi",
                          env={"BERTH_TEST_EVENTS": str(events)})
    # HPACK: :method POST, :scheme http (indexed), :path /upload (a literal of name 4),
    # :authority localhost.
    upload = b"\x83\x86" + b"\x04\x07/upload" + b"\x01\x09localhost"
    try:
        before = sockets_of(proc.pid)
        for n in range(1, 4):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(PREFACE + h2_frame(SETTINGS, 0, 0)
                             + h2_frame(HEADERS, END_HEADERS, 1, upload)
                             + h2_frame(DATA, 0, 1, b"a" * 10000))
                deadline = time.monotonic() + 10
                while not (events.exists() and events.read_text().count("chunk 10000") >= n):
                    assert time.monotonic() < deadline, "the app never had the first bytes"
                    time.sleep(0.05)
        deadline = time.monotonic() + 10
        while events.read_text().count("upload cut") < 3 or sockets_of(proc.pid) > before:
            assert time.monotonic() < deadline, (
                "after 10 s: %d apps heard their bodies cut, %d sockets held against %d"
                % (events.read_text().count("upload cut"), sockets_of(proc.pid), before))
            time.sleep(0.1)
        assert json.loads(curl("--http2-prior-knowledge",
                               "http://127.0.0.1:{}/client".format(port)))["host"] == "127.0.0.1"
    finally:
        stop(proc)


def test_http2_on_off_only():
    """``--http2`` as ``berth serve --http2``: ``off`` answers HTTP/2's preface as the HTTP/1.1
    request it looks like, of a version not served (505); ``only`` refuses HTTP/1.1 and speaks
    HTTP/2 with prior knowledge."""
    proc, port, _ = start("apps.asgi_apps:scope_app", "--interface", "asgi", "--http2", "off")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(PREFACE + h2_frame(SETTINGS, 0, 0))
            assert sock.recv(100).startswith(b"HTTP/1.1 505 ")
        assert json.loads(curl("--http1.1", "http://127.0.0.1:{}/".format(port)))["path"] == "/"
    finally:
        stop(proc)
    proc, port, _ = start("apps.asgi_apps:scope_app", "--interface", "asgi", "--http2", "only")
    try:
        out = subprocess.run(["curl", "-sS", "--max-time", "5", "--http1.1",
                              "http://127.0.0.1:{}/".format(port)], capture_output=True)
        assert out.returncode != 0
        got = json.loads(curl("--http2-prior-knowledge", "http://127.0.0.1:{}/".format(port)))
        assert got["http_version"] == "2"
    finally:
        stop(proc)
