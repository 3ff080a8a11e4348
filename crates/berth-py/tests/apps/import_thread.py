"""A WSGI app whose module starts a thread when it is imported, as an error-reporting or
metrics client does (issue 33: such a thread took SIGTERM itself, and its default action ended
the server undrained)."""

import threading
import time


def _tick():
    while True:
        time.sleep(0.01)


threading.Thread(target=_tick, name="ticker", daemon=True).start()


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"Hello, World!"]
