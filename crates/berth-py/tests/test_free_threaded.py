"""berth on free-threaded CPython (3.13t and up, issue 33), over real sockets: the extension
declares itself safe without the GIL (pyo3's ``gil_used = false``), so importing it leaves the
GIL off and WSGI ``--threads`` run the application in parallel; ASGI serves as on any build.
On a build with the GIL the same tests check that it stays on. Run under a free-threaded
interpreter by ``scripts/test-free-threaded`` (CI cannot install one: see .ci/run)."""

import json
import sys
import sysconfig

import pytest

from test_cli import serve  # noqa: F401 (the fixture, shared with test_cli)

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@pytest.mark.parametrize("interface, threads", [("wsgi", "1"), ("wsgi", "2"), ("asgi", None)])
def test_the_gil_is_as_the_build_has_it_while_serving(serve, interface, threads):
    extra = ["--threads", threads] if threads else []
    s = serve("apps.gil:" + interface, "--interface", interface, *extra)
    for _ in range(3):
        said = s.json("/")
        assert said["free_threaded_build"] == FREE_THREADED, said
        # Free-threaded: berth's import did not turn the GIL back on.
        assert said["gil_enabled"] == (not FREE_THREADED), said
    assert s.stop() == 0, s.err
    assert not any("GIL" in line for line in s.err), s.err


def test_this_interpreter_is_what_the_run_asked_for():
    # scripts/test-free-threaded sets BERTH_EXPECT_FREE_THREADED=1: a run meant for a
    # free-threaded interpreter fails on any other, rather than passing on the wrong one.
    import os
    if os.environ.get("BERTH_EXPECT_FREE_THREADED") == "1":
        assert FREE_THREADED, sys.version
