"""Bare WSGI callables for the tests (no framework between the app and the server)."""


def declared(environ, start_response):
    """Responses whose Content-Length the app declares itself, right or wrong (issue 29):
    ``/exact`` (5 bytes, as declared), ``/short`` (5 of 100), ``/long`` (5 of 3)."""
    length = {"/exact": "5", "/short": "100", "/long": "3"}[environ["PATH_INFO"]]
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", length)])
    return [b"hel", b"lo"]


def path(environ, start_response):
    """Answers with PATH_INFO as the server decoded it (a latin-1 str, PEP 3333), and the raw
    QUERY_STRING after a newline."""
    body = environ["PATH_INFO"].encode("latin-1") + b"\n" + environ["QUERY_STRING"].encode("latin-1")
    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return [body]


def environ_app(environ, start_response):
    """Answers with what the environ says of the client, the mount and the server (JSON)."""
    import json

    keys = ("REMOTE_ADDR", "REMOTE_PORT", "wsgi.url_scheme", "SCRIPT_NAME", "PATH_INFO",
            "wsgi.multiprocess", "wsgi.multithread", "SERVER_PROTOCOL", "SERVER_NAME",
            "SERVER_PORT")
    body = json.dumps({k: environ.get(k) for k in keys}).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]


def hello(environ, start_response):
    """The plainest WSGI app: ``Hello, World!`` to every request (issue 33's speed target, no
    framework between the server and the app)."""
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "13")])
    return [b"Hello, World!"]


def work(environ, start_response):
    """Pure-Python work on every request (about a millisecond: a sum over 20,000 squares),
    then a short answer: an application whose time is the interpreter's, where WSGI threads
    run in parallel on a free-threaded CPython and take turns under the GIL (issue 33's
    ``--threads 2`` against 1)."""
    total = 0
    for i in range(20000):
        total += i * i
    body = b"%d" % total
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]

