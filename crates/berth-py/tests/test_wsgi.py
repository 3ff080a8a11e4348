"""WSGI apps on berth's HTTP engine (``python -m berth MODULE:APP --interface wsgi``), over real
sockets with Python's http.client: a Flask app with seed 004's routes runs unchanged; an app
that raises costs its own request (500) and the server goes on; SIGTERM drains and exits 0."""

import http.client
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import helpers
from helpers import request

flask = pytest.importorskip("flask")

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def server():
    proc, port, _ = helpers.start("apps.flask_app:app", "--interface", "wsgi", "--threads", "2")
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
    r = run("apps.flask_app:app", "--workers", "2", "--port", "0")
    assert r.returncode == 2
