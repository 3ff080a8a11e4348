"""An application's own Content-Length (issue 29), for ASGI and WSGI alike, over real sockets
with http.client and raw sockets. A body of the declared length goes out as declared, on a
connection kept alive. A body shorter than declared is the application's error: the client gets
the declared header (never one rewritten to fit), the bytes the app sent, then the connection
closes, so that it sees an incomplete read; the server logs the error and goes on. A body longer
than declared: the declared header, that many bytes, the connection closed, the error logged.
A HEAD response carries the declared length and no body."""

import http.client
import signal
import socket

import pytest

import helpers

APPS = {
    "asgi": ("apps.asgi_apps:declared", "--interface", "asgi"),
    "wsgi": ("apps.wsgi_apps:declared", "--interface", "wsgi"),
}


@pytest.fixture(params=sorted(APPS))
def server(request):
    if request.param == "asgi":
        helpers.need("starlette")
    proc, port, _ = helpers.start(*APPS[request.param])
    yield request.param, proc, port
    helpers.stop(proc)


def stderr_after_stop(proc):
    """Stops the server with SIGTERM (it drains and exits 0); what it wrote to stderr."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def raw_exchange(port, head):
    """Sends ``head`` on a connection of its own and reads until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        return helpers.read_to_end(sock)


def paths(kind, name):
    """The app's path for ``name``, and (ASGI) the same in two body messages."""
    return ["/" + name] + (["/streamed/" + name] if kind == "asgi" else [])


def test_a_body_of_the_declared_length_goes_out_as_declared_and_keeps_the_connection(server):
    kind, proc, port = server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for path in paths(kind, "exact") * 3:
        conn.request("GET", path)
        r = conn.getresponse()
        assert r.status == 200
        assert r.getheader("Content-Length") == "5"
        assert r.getheader("Transfer-Encoding") is None
        assert r.read() == b"hello"
    conn.close()
    assert "Content-Length" not in stderr_after_stop(proc)


def test_a_body_shorter_than_its_content_length_is_the_apps_error(server):
    kind, proc, port = server
    for path in paths(kind, "short"):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", path)
        r = conn.getresponse()
        assert r.status == 200
        # The app's header, not one rewritten to fit what it sent.
        assert r.getheader("Content-Length") == "100"
        assert r.getheader("Transfer-Encoding") is None
        # The bytes sent, then the connection closed: an incomplete read.
        with pytest.raises(http.client.IncompleteRead) as cut:
            r.read()
        assert cut.value.partial == b"hello"
        conn.close()
        data = raw_exchange(port, ("GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path).encode())
        head, _, body = data.partition(b"\r\n\r\n")
        assert b"\r\nContent-Length: 100\r\n" in head + b"\r\n", data
        assert body == b"hello", data
    # The server goes on.
    r, body = helpers.request(port, "GET", "/exact")
    assert (r.status, body) == (200, b"hello")
    err = stderr_after_stop(proc)
    assert "shorter than its Content-Length" in err, err
    assert "GET /short" in err, err


def test_a_body_longer_than_its_content_length_is_cut_to_it_and_logged(server):
    kind, proc, port = server
    for path in paths(kind, "long"):
        data = raw_exchange(port, ("GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path).encode())
        head, _, body = data.partition(b"\r\n\r\n")
        assert b"\r\nContent-Length: 3\r\n" in head + b"\r\n", data
        # Nothing past the declared length, and the connection closed after it.
        assert body == b"hel", data
    err = stderr_after_stop(proc)
    assert "longer than its Content-Length" in err, err


def test_a_head_response_carries_the_declared_length(server):
    kind, proc, port = server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for path in ["/short", "/exact", "/short"]:
        conn.request("HEAD", path)
        r = conn.getresponse()
        assert r.status == 200
        assert r.getheader("Content-Length") == ("100" if path == "/short" else "5")
        assert r.read() == b""
    conn.close()
    assert "Content-Length" not in stderr_after_stop(proc)
