"""WSGI apps on berth's HTTP engine (``python -m berth MODULE:APP --interface wsgi``), over real
sockets with Python's http.client: a Flask app with seed 004's routes runs unchanged; an app
that raises costs its own request (500) and the server goes on; SIGTERM drains and exits 0;
a chunked request body reaches Flask and Django whole."""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

import helpers
from helpers import request

flask = pytest.importorskip("flask")

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(params=["2", "1"], ids=["threads", "inline"])
def server(request):
    """The Flask app with two application threads (berth's loop in its own thread), and with
    one (the application thread turns berth's loop inline: issue 43)."""
    proc, port, line = helpers.start("apps.flask_app:app", "--interface", "wsgi", "--threads",
                                     request.param)
    assert ("inline" in line) == (request.param == "1"), line
    yield proc, port
    helpers.stop(proc)


def test_a_flask_app_with_seed_004s_routes_answers(server):
    _, port = server
    r, body = request(port, "GET", "/hello/world")
    assert (r.status, body) == (200, b"Hello, World!")
    assert r.getheader("Content-Type").startswith("text/html")
    payload = json.dumps({"greeting": "Hello, World!", "name": "berth"})
    r, body = request(port, "POST", "/reverse", payload, {"Content-Type": "application/json"})
    assert r.status == 200
    assert json.loads(body) == {"data": ["!dlroW ,olleH", "htreb"]}
    r, body = request(port, "GET", "/headers?x=1&y=%C3%A9", headers={"User-Agent": "pytest"})
    assert r.status == 200
    assert json.loads(body) == {"agent": "pytest", "query": {"x": "1", "y": "é"}}
    assert r.getheader("X-Berth-Test") == "yes"
    assert "a=1" in r.getheader("Set-Cookie")
    r, _ = request(port, "GET", "/nowhere")
    assert r.status == 404
    r, _ = request(port, "DELETE", "/hello/world")
    assert r.status == 405


def test_an_app_that_raises_costs_its_own_request(server):
    proc, port = server
    r, _ = request(port, "GET", "/boom")
    assert r.status == 500
    r, body = request(port, "GET", "/hello/world")
    assert (r.status, body) == (200, b"Hello, World!")


def test_keep_alive_and_many_requests_on_one_connection(server):
    _, port = server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for i in range(200):
        conn.request("GET", "/hello/world")
        r = conn.getresponse()
        assert r.read() == b"Hello, World!"
    conn.close()


def test_sigterm_drains_and_exits_cleanly(server):
    proc, port = server
    r, _ = request(port, "GET", "/hello/world")
    assert r.status == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0


def test_usage_errors_and_a_missing_app():
    run = lambda *a: subprocess.run([sys.executable, "-m", "berth", *a], cwd=HERE, capture_output=True, text=True, timeout=30)
    r = run("apps.flask_app:app", "--interface", "http2", "--port", "0")
    assert r.returncode == 2 and "usage:" in r.stderr
    r = run("apps.flask_app:app", "--threads", "0", "--port", "0")
    assert r.returncode == 2 and "at least 1" in r.stderr
    r = run("apps.flask_app:nothing", "--port", "0")
    assert r.returncode == 1 and "cannot load" in r.stderr
    r = run("apps.flask_app:app", "--port", "70000")
    assert r.returncode == 2 and "--port" in r.stderr


def chunked_post(port, path, chunks):
    """POSTs ``chunks`` with http.client's chunked coding (an iterable body, no length): the
    response and its body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", path, body=iter(chunks), encode_chunked=True,
                 headers={"Transfer-Encoding": "chunked",
                          "Content-Type": "application/octet-stream"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r, data


# Issue 29: berth set neither CONTENT_LENGTH nor wsgi.input_terminated for a chunked body, so
# Flask (werkzeug) and Django read 0 bytes of it.
BIG = [bytes([i % 251]) * 997 for i in range(300)]


def test_a_chunked_request_body_reaches_flask_whole(server):
    _, port = server
    r, body = chunked_post(port, "/echo", [b"hel", b"lo"])
    assert (r.status, body) == (200, b"hello")
    r, body = chunked_post(port, "/echo", BIG)
    assert (r.status, body) == (200, b"".join(BIG))
    r, body = chunked_post(port, "/echo", [])
    assert (r.status, body) == (200, b"")
    # The same with a Content-Length, as before.
    r, body = request(port, "POST", "/echo", b"hello", {"Content-Type": "application/octet-stream"})
    assert (r.status, body) == (200, b"hello")


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl")
def test_curls_chunked_upload_reaches_flask(server):
    _, port = server
    out = subprocess.run(
        ["curl", "-sS", "--max-time", "10", "-H", "Transfer-Encoding: chunked",
         "-H", "Content-Type: application/octet-stream", "--data-binary", "hello",
         "http://127.0.0.1:%d/echo" % port],
        capture_output=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"hello"


def test_a_chunked_request_body_reaches_django_whole():
    pytest.importorskip("django")
    proc, port, _ = helpers.start("apps.django_app:application", "--interface", "wsgi")
    try:
        r, body = chunked_post(port, "/echo", [b"hel", b"lo"])
        assert (r.status, body) == (200, b"hello")
        r, body = chunked_post(port, "/echo", BIG)
        assert (r.status, body) == (200, b"".join(BIG))
        # A raw chunked request, pipelined behind another on one connection.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                         b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
                         b"Connection: close\r\n\r\nfg")
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        first, second = data.split(b"HTTP/1.1 200", 2)[1:]
        assert first.endswith(b"\r\n\r\nabcde"), data
        assert second.endswith(b"\r\n\r\nfg"), data
    finally:
        helpers.stop(proc)


def test_the_clients_address_reaches_flask(server):
    """REMOTE_ADDR and REMOTE_PORT are the connection's peer (Flask's request.remote_addr), as
    every WSGI server fills them; SERVER_PROTOCOL is the request's version."""
    _, port = server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /client HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = helpers.read_to_end(s)
        mine = s.getsockname()[1]
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer
    assert json.loads(body) == {"addr": "127.0.0.1", "port": str(mine), "protocol": "HTTP/1.1"}


def test_inline_many_connections_at_once_each_get_their_answers():
    """One application thread turning berth's loop itself (``--threads 1``): 40 connections
    that each send three requests at once (pipelined) all get their three answers, in order,
    with the bodies each request sent."""
    proc, port, line = helpers.start("apps.wsgi_apps:path", "--interface", "wsgi",
                                     "--threads", "1")
    try:
        assert "inline" in line, line
        socks = []
        for i in range(40):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"".join(b"GET /c%d/r%d?q HTTP/1.1\r\nHost: x\r\n\r\n" % (i, j)
                               for j in range(3)))
            socks.append(s)
        for i, s in enumerate(socks):
            data = b""
            while data.count(b"HTTP/1.1 200") < 3 or not data.endswith(b"\nq"):
                chunk = s.recv(65536)
                assert chunk, data
                data += chunk
            bodies = [part.split(b"\r\n\r\n", 1)[1] for part in data.split(b"HTTP/1.1 200")[1:]]
            assert bodies == [b"/c%d/r%d\nq" % (i, j) for j in range(3)]
            s.close()
    finally:
        helpers.stop(proc)


def test_inline_a_request_in_flight_at_sigterm_is_answered():
    """``--threads 1`` (inline): SIGTERM while the application is busy with a request; the
    drain lets it finish, the client gets its answer, and the server exits 0."""
    proc, port, _ = helpers.start("apps.wsgi_apps:work", "--interface", "wsgi", "--threads", "1")
    try:
        conns = []
        for _ in range(20):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/")
            conns.append(conn)
        # Until the first answer, the others are queued or being answered.
        first = conns[0].getresponse()
        assert first.status == 200
        proc.send_signal(signal.SIGTERM)
        for conn in conns[1:]:
            r = conn.getresponse()
            assert (r.status, r.read()) == (200, b"%d" % sum(i * i for i in range(20000)))
        assert proc.wait(15) == 0
    finally:
        helpers.stop(proc)
