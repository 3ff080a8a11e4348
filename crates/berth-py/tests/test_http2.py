"""ASGI and WSGI applications over HTTP/2 (issue 32), served by the same engine as HTTP/1.1: curl
(nghttp2) with prior knowledge (h2c) and over TLS with ALPN h2. The scope says
``http_version: "2"``, the environ ``SERVER_PROTOCOL: HTTP/2``; a streamed ASGI response (many
body messages) arrives whole; HTTP/1.1 is still served on the same port."""

import json
import shutil
import subprocess
import sys

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
