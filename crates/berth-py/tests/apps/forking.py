"""A WSGI app for berth's forking models (issue 33): its module starts a Python thread that keeps
the GIL busy in the parent, as an application's metrics or scheduler thread may, and registers
an after-fork handler with ``os.register_at_fork``. Each answer says which process served it and
the pids whose after-fork handler ran in that process (JSON)."""

import json
import os
import threading

#: The pids in which CPython's after-fork handling ran (``os.register_at_fork``'s child hook).
AFTER_FORK = []
os.register_at_fork(after_in_child=lambda: AFTER_FORK.append(os.getpid()))


def _spin():
    # Pure bytecode: the thread holds the GIL but for the switch interval's hand-overs, so a
    # fork made without asking for the GIL finds it held.
    n = 0
    while True:
        n += 1


threading.Thread(target=_spin, name="spinner", daemon=True).start()


def app(environ, start_response):
    body = json.dumps({
        "pid": os.getpid(),
        "after_fork": AFTER_FORK,
        "threads": sorted(t.name for t in threading.enumerate() if t.is_alive()),
    }).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
