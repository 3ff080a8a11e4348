"""WSGI in berth's forking models (``--model forked``: a process per connection; ``prefork``:
long-lived processes), over real sockets (issue 33). berth forks them from a Rust thread; each
fork is made as ``os.fork()`` makes it, holding the GIL between CPython's before- and after-fork
handlers. Before, the child inherited the interpreter as the fork found it: a GIL held by one of
the parent's threads at that moment was never let go in the child, whose requests then waited
for it forever (one run of ``test_wsgi_serves_in_every_model[forked]`` in about twenty, when
the first fork met the main thread printing the startup line; every fork here, where a thread
of the application keeps the GIL busy), and ``os.register_at_fork`` handlers never ran."""

import json
import os

import pytest

from berth._berth import models

import helpers
from test_cli import serve  # noqa: F401 (the fixture, shared with test_cli)

FORKING = ["forked", "prefork"]


def ask(s):
    r, body = helpers.request(s.port, "GET", "/")
    assert r.status == 200, (r.status, body)
    return json.loads(body)


def test_the_forking_models_are_berths():
    assert set(FORKING) <= set(models())


@pytest.mark.parametrize("model", FORKING)
def test_a_forked_child_runs_cpythons_after_fork_handling_while_a_thread_holds_the_gil(
        serve, model):
    # forked: a fork per connection, 40 of them; prefork: its processes, forked at startup,
    # in 4 servers. Each fork meets the application's thread holding the GIL.
    servers = 4 if model == "prefork" else 1
    requests = 40 if model == "forked" else 5
    for _ in range(servers):
        s = serve("apps.forking:app", "--interface", "wsgi", "--model", model,
                  "--threads", "2")
        pids = set()
        for _ in range(requests):
            said = ask(s)
            assert said["pid"] != s.proc.pid, said
            # The after-fork handlers ran in the child (os.register_at_fork's), and the
            # parent's threads are not there (threading's after-fork state).
            assert said["after_fork"] == [said["pid"]], said
            assert "spinner" not in said["threads"], said
            pids.add(said["pid"])
        if model == "forked":
            assert len(pids) == requests, pids
        assert s.stop() == 0, s.err
        assert not any("Traceback" in line for line in s.err), s.err
