"""ASGI apps on berth's HTTP engine (``python -m berth MODULE:APP --interface asgi``), over real
sockets with Python's http.client and raw sockets: Starlette and FastAPI apps with seed 004's
routes run unchanged; lifespan startup state reaches requests and shutdown runs after the
drain; streamed bodies arrive whole, held back by a slow reader without loss; an app that
raises costs its own request, one that never answers is answered 504; a client that leaves is
seen by the app (http.disconnect, and a stream that stops); bad input is answered 400."""

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import helpers
from helpers import request

helpers.need("starlette")

HERE = os.path.dirname(os.path.abspath(__file__))


def start(app, *args, env=None):
    return helpers.start(app, "--interface", "asgi", *args, env=env)


@pytest.fixture
def events(tmp_path):
    return tmp_path / "events.txt"


@pytest.fixture
def server(events):
    proc, port, line = start("apps.asgi_apps:starlette_app", "--app-timeout", "1",
                             env={"BERTH_TEST_EVENTS": str(events)})
    yield proc, port
    helpers.stop(proc)


def seen(events, what, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if events.exists() and what in events.read_text().split("\n"):
            return True
        time.sleep(0.05)
    return False


def test_a_starlette_app_with_seed_004s_routes_answers(server):
    _, port = server
    r, body = request(port, "GET", "/hello/world")
    assert (r.status, body) == (200, b"Hello, World!")
    assert r.getheader("Content-Type").startswith("text/plain")
    assert r.getheader("Content-Length") == "13"
    payload = json.dumps({"greeting": "Hello, World!", "name": "berth"})
    r, body = request(port, "POST", "/reverse", payload, {"Content-Type": "application/json"})
    assert r.status == 200
    assert json.loads(body) == {"data": ["!dlroW ,olleH", "htreb"]}
    r, body = request(port, "POST", "/echo?x=1&y=%C3%A9", b"a" * 100_000, {"User-Agent": "pytest"})
    assert (r.status, body) == (200, b"a" * 100_000)
    assert r.getheader("X-Query") == "x=1&y=%C3%A9"
    assert r.getheader("X-Agent") == "pytest"
    r, _ = request(port, "GET", "/nowhere")
    assert r.status == 404
    r, _ = request(port, "DELETE", "/hello/world")
    assert r.status == 405


def test_a_fastapi_app_answers_unchanged():
    helpers.need("fastapi")
    proc, port, _ = start("apps.asgi_apps:fastapi_app")
    try:
        r, body = request(port, "GET", "/hello/world")
        assert (r.status, body) == (200, b"Hello, World!")
        r, body = request(port, "POST", "/reverse", json.dumps({"a": "abc", "b": "xyz"}),
                          {"Content-Type": "application/json"})
        assert (r.status, json.loads(body)) == (200, {"data": ["cba", "zyx"]})
        r, body = request(port, "GET", "/items/42?q=%C3%A9t%C3%A9")
        assert (r.status, json.loads(body)) == (200, {"item_id": 42, "q": "été"})
        r, body = request(port, "GET", "/items/notanumber")
        assert r.status == 422
    finally:
        proc.terminate()
        assert proc.wait(15) == 0


def test_lifespan_state_reaches_requests_and_shutdown_runs_after_the_drain(server, events):
    proc, port = server
    assert seen(events, "startup")
    r, body = request(port, "GET", "/state")
    assert (r.status, body) == (200, b"yes")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert seen(events, "shutdown", 1)


def test_a_failed_lifespan_startup_exits_1_with_its_message():
    r = subprocess.run([sys.executable, "-m", "berth", "apps.asgi_apps:failing_startup",
                        "--interface", "asgi", "--port", "0"],
                       cwd=HERE, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "no database" in r.stderr


def test_a_streamed_body_arrives_whole(server):
    _, port = server
    r, body = request(port, "GET", "/stream?count=300&size=1000")
    assert r.status == 200
    assert r.getheader("Transfer-Encoding") == "chunked"
    assert body == b"".join(bytes([i % 251]) * 1000 for i in range(300))


def test_a_slow_reader_holds_the_app_back_and_loses_nothing(server):
    _, port = server
    count, size = 2000, 4096
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.sendall(b"GET /stream?count=%d&size=%d HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                 % (count, size))
    time.sleep(1.0)  # the app fills the socket and the stream's window, then waits
    data = b""
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    body = b""
    while True:
        line, _, rest = rest.partition(b"\r\n")
        n = int(line, 16)
        if n == 0:
            break
        body, rest = body + rest[:n], rest[n + 2:]
    assert body == b"".join(bytes([i % 251]) * size for i in range(count))


def test_a_request_body_streams_to_the_app_as_it_arrives(server, events):
    _, port = server
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.sendall(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 600000\r\n\r\n")
    sock.sendall(b"a" * 300_000)
    # The app has the first half before the second is sent.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if events.exists() and "chunk" in events.read_text():
            break
        time.sleep(0.05)
    else:
        pytest.fail("the app saw none of the body before it was all sent")
    sock.sendall(b"b" * 300_000)
    data = b""
    while b"received" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    assert data.endswith(b"received 600000")
    # Chunked, and the connection goes on.
    body = b"".join(b"%x\r\n%s\r\n" % (n, b"x" * n) for n in (1, 5000, 70000, 3))
    sock.sendall(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + body + b"0\r\n\r\n")
    data = b""
    while b"received 75004" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk


def test_a_malformed_streamed_body_is_answered_400_and_clients_that_leave_are_not_failures(server):
    proc, port = server
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"5\r\nhello\r\nZZ\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 400")
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /endless HTTP/1.1\r\nHost: t\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    r, _ = request(port, "GET", "/hello/world")
    assert r.status == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert "the application failed" not in proc.stderr.read()


def test_an_app_that_raises_costs_its_own_request(server):
    _, port = server
    r, _ = request(port, "GET", "/boom")
    assert r.status == 500
    r, body = request(port, "GET", "/hello/world")
    assert (r.status, body) == (200, b"Hello, World!")


def test_an_app_that_never_answers_is_answered_504(server):
    _, port = server
    started = time.monotonic()
    r, _ = request(port, "GET", "/never")
    assert r.status == 504
    assert time.monotonic() - started < 5
    r, body = request(port, "GET", "/hello/world")
    assert (r.status, body) == (200, b"Hello, World!")


def test_a_client_that_leaves_is_seen_by_the_app(server, events):
    _, port = server
    # A client that only half-closes (FIN) may still read its answer: HTTP allows it, so it is
    # not a disconnect. One that resets has gone.
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /wait-disconnect HTTP/1.1\r\nHost: t\r\n\r\n")
    time.sleep(0.3)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
    assert seen(events, "disconnected"), "the app never got http.disconnect"
    # A stream to a client that resets stops (its generator is closed).
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /endless HTTP/1.1\r\nHost: t\r\n\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
    assert seen(events, "endless ended"), "the stream went on after the client left"
    r, _ = request(port, "GET", "/hello/world")
    assert r.status == 200


def test_a_client_that_leaves_mid_body_is_seen_at_once_and_leaves_nothing(events):
    """A client that closes with its request body half sent: the body can never be whole. The
    app hears it at once (http.disconnect, Starlette's ClientDisconnect), not at the body
    timeout (30 s, with no --app-timeout to end the app sooner), and the connection is gone
    with it: no socket left in CLOSE-WAIT. Before the fix, forty such clients held forty
    descriptors and forty app tasks for the whole body timeout."""
    proc, port, _ = start("apps.asgi_apps:starlette_app",
                          env={"BERTH_TEST_EVENTS": str(events)})
    try:
        for half_closes in (False, True):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n")
            sock.sendall(b"a" * 100_000)
            assert seen(events, "chunk 100000"), "the app never had the first bytes"
            if half_closes:
                # FIN alone: the client could still read an answer, and gets the app's.
                sock.shutdown(socket.SHUT_WR)
                answer = sock.recv(4096)
                assert answer.startswith(b"HTTP/1.1 400"), answer
                assert b"Connection: close" in answer, answer
            else:
                sock.close()
            assert seen(events, "upload cut", timeout=10), \
                "the app did not hear the body was cut short (before the body timeout)"
            events.write_text("")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            held = [line for line in subprocess.run(["ss", "-tan"], capture_output=True,
                                                    text=True).stdout.splitlines()
                    if f":{port} " in line and "CLOSE-WAIT" in line]
            if not held:
                break
            time.sleep(0.1)
        assert not held, held
        r, body = request(port, "GET", "/hello/world")
        assert (r.status, body) == (200, b"Hello, World!")
    finally:
        helpers.stop(proc)


def test_garbage_is_answered_400_and_the_server_goes_on(server):
    _, port = server
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 400")
    sock.close()
    r, _ = request(port, "GET", "/hello/world")
    assert r.status == 200


def test_a_body_over_the_limit_is_answered_413():
    proc, port, _ = start("apps.asgi_apps:starlette_app", "--max-body", "1000")
    try:
        r, _ = request(port, "POST", "/echo", b"a" * 2000)
        assert r.status == 413
        r, body = request(port, "POST", "/echo", b"a" * 1000)
        assert (r.status, body) == (200, b"a" * 1000)
    finally:
        proc.kill()
        proc.wait()


def test_pipelined_requests_are_answered_in_order(server):
    _, port = server
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    reqs = b"".join(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\n%03d" % i
                    for i in range(50))
    sock.sendall(reqs)
    data = b""
    while data.count(b"HTTP/1.1 200") < 50 or not data.endswith(b"049"):
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    bodies = [part.rsplit(b"\r\n\r\n", 1)[1][:3] for part in data.split(b"HTTP/1.1 200")[1:]]
    assert bodies == [b"%03d" % i for i in range(50)]


def test_the_loop_is_uvloop_when_installed():
    helpers.need("uvloop")
    proc, _, line = start("apps.asgi_apps:raw")
    proc.kill()
    proc.wait()
    assert "ASGI on uvloop" in line
    proc, _, line = start("apps.asgi_apps:raw", "--loop", "asyncio")
    proc.kill()
    proc.wait()
    assert "ASGI on asyncio" in line


def test_workers_share_the_port_and_sigterm_stops_them_all():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "berth", "apps.asgi_apps:raw", "--interface", "asgi",
         "--port", str(port), "--workers", "2"],
        cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout.readline().startswith("berth listening")
    assert proc.stdout.readline().startswith("berth listening")
    for _ in range(20):
        r, body = request(port, "GET", "/hello/world")
        assert body == b"Hello, World!"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0


@pytest.mark.parametrize("args", [["--io-threads", "2"], ["--model", "threaded"], ["--model", "actor"]])
def test_berths_loops_in_threads_of_their_own_serve_the_same(args, events):
    """Not inline: berth's loops (or a thread per connection) hand requests to the Python loop
    through the queue and its wake socket."""
    proc, port, line = start("apps.asgi_apps:starlette_app", *args,
                             env={"BERTH_TEST_EVENTS": str(events)})
    try:
        assert "inline" not in line, line
        for _ in range(20):
            r, body = request(port, "GET", "/hello/world")
            assert (r.status, body) == (200, b"Hello, World!")
        payload = json.dumps({"a": "abc"})
        r, body = request(port, "POST", "/reverse", payload, {"Content-Type": "application/json"})
        assert json.loads(body) == {"data": ["cba"]}
        r, body = request(port, "GET", "/stream?count=300&size=1000")
        assert body == b"".join(bytes([i % 251]) * 1000 for i in range(300))
        r, body = request(port, "POST", "/upload", b"x" * 500_000)
        assert body == b"received 500000"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        helpers.stop(proc)


# -- the websocket scope ------------------------------------------------------------------------

websockets = helpers.need("websockets")
from websockets.sync.client import connect as ws_connect  # noqa: E402


def ws_url(port, path):
    return "ws://127.0.0.1:{}{}".format(port, path)


def test_a_starlette_websocket_echoes_text_and_bytes(server, events):
    proc, port = server
    with ws_connect(ws_url(port, "/ws/echo"), subprotocols=["other", "chat"],
                    open_timeout=10) as ws:
        assert ws.subprotocol == "chat"
        assert ws.response.headers["x-app"] == "yes"
        ws.send("hello, berth")
        assert ws.recv(10) == "hello, berth"
        big = bytes(range(256)) * 4096
        ws.send(big)
        assert ws.recv(10) == big
        ws.send("é" * 100_000)
        assert ws.recv(10) == "é" * 100_000
    # The client's close reaches the app as websocket.disconnect with its code.
    assert seen(events, "ws disconnected 1000")
    # HTTP still works beside it.
    r, body = request(port, "GET", "/hello/world")
    assert body == b"Hello, World!"


def test_permessage_deflate_in_the_websocket_scope_and_a_bomb_is_closed_with_1009(events):
    # websockets offers permessage-deflate by default: berth agrees, inflates what the client
    # sends (the limit on the inflated size) and compresses the app's sends (issue 34).
    proc, port, line = start("apps.asgi_apps:starlette_app", "--ws-max-message", "1000000",
                             env={"BERTH_TEST_EVENTS": str(events)})
    try:
        with ws_connect(ws_url(port, "/ws/echo"), open_timeout=10, max_size=None) as ws:
            assert ws.response.headers["Sec-WebSocket-Extensions"] == (
                "permessage-deflate; server_no_context_takeover")
            doc = json.dumps([{"id": i, "name": "item %d" % i} for i in range(500)])
            for msg in [doc, "small", doc.encode(), ""]:
                ws.send(msg)
                assert ws.recv(10) == msg
            # 64 MiB of zeros, about 64 KiB compressed: closed as soon as it passes 1 MB.
            ws.send(b"\0" * (64 << 20))
            with pytest.raises(websockets.exceptions.ConnectionClosed) as e:
                ws.recv(10)
            assert e.value.rcvd.code == 1009
    finally:
        helpers.stop(proc)


def test_ws_deflate_off_and_window_bits_from_the_command_line(events):
    # python -m berth --ws-deflate off: websockets' offer is declined, the connection plain;
    # --ws-deflate-window-bits 10: both windows held to 10 (websockets lets the server ask).
    for args, expected in [(["--ws-deflate", "off"], None),
                           (["--ws-deflate-window-bits", "10"],
                            "permessage-deflate; server_no_context_takeover; "
                            "server_max_window_bits=10; client_max_window_bits=10")]:
        proc, port, _ = start("apps.asgi_apps:starlette_app", *args,
                              env={"BERTH_TEST_EVENTS": str(events)})
        try:
            with ws_connect(ws_url(port, "/ws/echo"), open_timeout=10, max_size=None) as ws:
                assert ws.response.headers.get("Sec-WebSocket-Extensions") == expected, args
                doc = json.dumps([{"id": i, "name": "item %d" % i} for i in range(500)])
                ws.send(doc)
                assert ws.recv(10) == doc
        finally:
            helpers.stop(proc)


def test_sigterm_closes_websockets_with_1001_and_the_app_hears_it(events):
    """Issue 29: at the drain each open WebSocket gets a close with 1001, the application a
    websocket.disconnect with 1001, and the server exits as soon as the clients answer, not at
    its shutdown timeout (120 s here, far past the wait below)."""
    proc, port, _ = start("apps.asgi_apps:starlette_app", "--shutdown-timeout", "120",
                          env={"BERTH_TEST_EVENTS": str(events)})
    try:
        opened = contextlib.ExitStack()
        clients = [opened.enter_context(ws_connect(ws_url(port, "/ws/echo"), open_timeout=10))
                   for _ in range(5)]
        for ws in clients:
            ws.send("ping?")
            assert ws.recv(10) == "ping?"
        proc.send_signal(signal.SIGTERM)
        for ws in clients:
            with pytest.raises(websockets.exceptions.ConnectionClosed) as e:
                ws.recv(10)
            assert e.value.rcvd is not None and e.value.rcvd.code == 1001
            ws.close()
        assert proc.wait(30) == 0
        assert events.read_text().split("\n").count("ws disconnected 1001") == 5
        opened.close()
    finally:
        helpers.stop(proc)


def test_the_app_closes_refuses_and_fails_as_the_spec_says(server):
    proc, port = server
    with ws_connect(ws_url(port, "/ws/echo"), open_timeout=10) as ws:
        ws.send("close")
        with pytest.raises(websockets.exceptions.ConnectionClosed) as e:
            ws.recv(10)
        assert e.value.rcvd.code == 4000 and e.value.rcvd.reason == "asked to"
    # websocket.close before the accept: 403.
    with pytest.raises(websockets.exceptions.InvalidStatus) as e:
        ws_connect(ws_url(port, "/ws/refuse"), open_timeout=10)
    assert e.value.response.status_code == 403
    # An app that raises after the accept: close 1011.
    with ws_connect(ws_url(port, "/ws/boom"), open_timeout=10) as ws:
        ws.send("go")
        with pytest.raises(websockets.exceptions.ConnectionClosed) as e:
            ws.recv(10)
        assert e.value.rcvd.code == 1011
    # No route: Starlette closes before accepting, which is 403.
    with pytest.raises(websockets.exceptions.InvalidStatus) as e:
        ws_connect(ws_url(port, "/ws/nowhere"), open_timeout=10)
    assert e.value.response.status_code == 403
    # A bad handshake never reaches the app: 426 for another version, 400 for a bad key.
    for fields, status in ((b"Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                            426),
                           (b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: short", 400)):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /ws/echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                      b"Upgrade: websocket\r\n" + fields + b"\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 %d " % status)


def test_a_slow_websocket_client_holds_the_app_back_and_a_reset_is_seen(server, events):
    proc, port = server
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    s.sendall(b"GET /ws/echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
              b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 101 ")
    # "push 2000": 32 MiB the app sends without waiting; the client reads none of it.
    payload = b"push 2000"
    mask = b"\x01\x02\x03\x04"
    s.sendall(bytes([0x81, 0x80 | len(payload)]) + mask
              + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    time.sleep(1.5)
    assert not seen(events, "pushed", timeout=0.1), "the app was not held back"
    rss = int([l for l in open("/proc/%d/status" % proc.pid) if l.startswith("VmRSS")][0].split()[1])
    assert rss < 200_000, "the server holds {} KiB".format(rss)
    # A reset: the app hears the client is gone (1006) and the server goes on.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
    assert seen(events, "ws disconnected 1006")
    r, body = request(port, "GET", "/hello/world")
    assert body == b"Hello, World!"


@pytest.mark.parametrize("args", [["--io-threads", "2"], ["--model", "actor"]])
def test_websockets_work_with_berths_loops_in_threads(args):
    proc, port, line = start("apps.asgi_apps:starlette_app", *args)
    try:
        for _ in range(3):
            with ws_connect(ws_url(port, "/ws/echo"), open_timeout=10) as ws:
                for i in range(50):
                    ws.send("m%d" % i)
                    assert ws.recv(10) == "m%d" % i
    finally:
        helpers.stop(proc)


def test_a_blocking_model_refuses_websockets_with_501():
    proc, port, line = start("apps.asgi_apps:starlette_app", "--model", "threaded")
    try:
        with pytest.raises(websockets.exceptions.InvalidStatus) as e:
            ws_connect(ws_url(port, "/ws/echo"), open_timeout=10)
        assert e.value.response.status_code == 501
    finally:
        helpers.stop(proc)


def test_the_clients_address_reaches_the_scope(server):
    """The scope's ``client`` is the connection's peer (Starlette's request.client), as every
    ASGI server fills it."""
    _, port = server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /client HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = helpers.read_to_end(s)
        mine = s.getsockname()[1]
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer
    assert json.loads(body) == {"host": "127.0.0.1", "port": mine}
