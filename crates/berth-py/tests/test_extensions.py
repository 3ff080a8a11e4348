"""The optional ASGI extensions of issue 43, over real sockets with real clients (httpx, curl,
websockets), as asgiref's docs/extensions.rst and specs/www.rst describe them."""

import json
import os
import shutil
import subprocess
import sys

from helpers import HERE, need, start, stop


def curl(*args):
    assert shutil.which("curl"), "this test needs curl"
    out = subprocess.run(["curl", "-sS", "--max-time", "10", *args], capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout


def test_pathsend_sends_the_file_from_disk_over_http11_http2_and_tls(tmp_path):
    """Path Send: ``http.response.pathsend`` is offered in the ``http`` scope's extensions, and
    the body is the file at the path, whole and exact (3 MiB, more than any buffer or window),
    under the application's head; HEAD gets the head alone; a relative path is the working
    directory's. Over HTTP/1.1 (httpx), h2c and TLS with ALPN h2 (curl)."""
    httpx = need("httpx")
    data = os.urandom(3 * 1024 * 1024 + 17)
    big = tmp_path / "big.bin"
    big.write_bytes(data)
    proc, port, _ = start("apps.ext_apps:pathsend", "--interface", "asgi")
    base = "http://127.0.0.1:{}/".format(port)
    try:
        r = httpx.get(base, params={"path": str(big)}, timeout=10)
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/octet-stream"
        assert r.headers["content-length"] == str(len(data))
        assert r.content == data
        # Keep-alive goes on after the file: two on one connection.
        with httpx.Client(timeout=10) as client:
            for _ in range(2):
                assert client.get(base, params={"path": str(big)}).content == data
            head = client.head(base, params={"path": str(big)})
            assert head.headers["content-length"] == str(len(data)) and head.content == b""
            # The server's working directory is the tests' (helpers.start): a relative path.
            rel = client.get(base, params={"path": "apps/__init__.py"})
            assert rel.content == open(os.path.join(HERE, "apps", "__init__.py"), "rb").read()
        assert curl("--http2-prior-knowledge", base + "?path=" + str(big)) == data
    finally:
        stop(proc)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "berth", "apps.ext_apps:pathsend", "--port", "0",
         "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)],
        cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        port = int(line.split("https://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
        url = "https://127.0.0.1:{}/?path={}".format(port, big)
        assert curl("-k", "--http2", url) == data
        assert curl("-k", "--http1.1", url) == data
    finally:
        stop(proc)


def test_pathsend_of_a_file_that_cannot_be_sent_is_the_applications_failure(tmp_path):
    """A path that is not there, a directory, or a content-length the file does not have: the
    application's ``send`` raises (nothing was sent), so the response is a 500, logged."""
    httpx = need("httpx")
    (tmp_path / "five.txt").write_bytes(b"12345")
    proc, port, _ = start("apps.ext_apps:pathsend", "--interface", "asgi")
    base = "http://127.0.0.1:{}/".format(port)
    try:
        for params in ({"path": str(tmp_path / "missing")}, {"path": str(tmp_path)},
                       {"path": str(tmp_path / "five.txt"), "length": "6"}):
            r = httpx.get(base, params=params, timeout=10)
            assert r.status_code == 500, params
        # The connection and the server go on.
        assert httpx.get(base, params={"path": str(tmp_path / "five.txt")}).content == b"12345"
    finally:
        stop(proc)
    log = proc.stderr.read()
    assert "FileNotFoundError" in log and "IsADirectoryError" in log, log
    assert "the file has 5 bytes, content-length says 6" in log, log


def ws_handshake(port, path):
    """A WebSocket opening handshake on a socket of its own; the socket and everything the
    server sent until it closed the connection (or 5 s passed)."""
    import socket
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall("GET {} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 "Sec-WebSocket-Version: 13\r\n\r\n".format(path).encode())
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        out += chunk
    sock.close()
    return out


def test_websocket_denial_response_is_the_applications_own_then_the_connection_closes():
    """``websocket.http.response`` (offered in the websocket scope's extensions): the handshake
    is answered with the application's status, headers and body (one message, or streamed with
    ``more_body``), not a 403, and the connection then closes (the extension: "send a HTTP
    response and then close the connection"); the application's receive says
    ``websocket.disconnect``. The websockets client sees the refusal as the application made
    it. An application that returns mid-way through its denial gets a 500."""
    websockets = need("websockets")
    from websockets.sync.client import connect
    proc, port, _ = start("apps.ext_apps:ws_deny", "--interface", "asgi")
    try:
        whole = ws_handshake(port, "/whole")
        head, _, body = whole.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 401 "), whole
        assert b"\r\nx-why: no token" in head.lower() and b"connection: close" in head.lower()
        assert body == b"token required\n"
        streamed = ws_handshake(port, "/")
        head, _, body = streamed.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 401 ") and b"connection: close" in head.lower()
        assert b"transfer-encoding: chunked" in head.lower()
        assert body == b"6\r\ntoken \r\n9\r\nrequired\n\r\n0\r\n\r\n"
        try:
            connect("ws://127.0.0.1:{}/whole".format(port), open_timeout=5)
        except websockets.exceptions.InvalidStatus as e:
            assert e.response.status_code == 401
            assert e.response.headers["x-why"] == "no token"
            assert e.response.body == b"token required\n"
        else:
            raise AssertionError("the handshake was not denied")
        assert ws_handshake(port, "/half").startswith(b"HTTP/1.1 500 ")
    finally:
        stop(proc)
    log = proc.stderr.read()
    assert "returned without completing its denial response" in log, log
    assert "Traceback" not in log, log


def test_extensions_are_in_every_scope():
    """``scope["extensions"]`` is there in every scope (issue 43: the websocket scope had none
    and applications that read it failed with 1011): the websocket scope offers the denial
    response; the http scope pathsend, and trailers where the version can carry them (not
    HTTP/1.0)."""
    need("websockets")
    from websockets.sync.client import connect
    proc, port, _ = start("apps.ext_apps:extensions", "--interface", "asgi")
    try:
        with connect("ws://127.0.0.1:{}/".format(port), open_timeout=5) as ws:
            assert json.loads(ws.recv(timeout=5)) == ["websocket.http.response"]
        got = json.loads(curl("http://127.0.0.1:{}/".format(port)))
        assert got == ["http.response.pathsend", "http.response.trailers"]
        got = json.loads(curl("--http1.0", "http://127.0.0.1:{}/".format(port)))
        assert got == ["http.response.pathsend"]
        got = json.loads(curl("--http2-prior-knowledge", "http://127.0.0.1:{}/".format(port)))
        assert got == ["http.response.pathsend", "http.response.trailers"]
    finally:
        stop(proc)
