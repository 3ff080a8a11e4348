"""``python -m berth MODULE:APP``: serve a WSGI application on berth's HTTP engine.

Usage: python -m berth MODULE:APP [--host 127.0.0.1] [--port 8000] [--interface wsgi]
                                   [--workers N] [--threads T] [--model evloop]

uvicorn's and granian's conventions: ``--workers`` is the number of processes sharing the port;
``--threads`` the worker threads per process that run the application (berth's ``-w``). The
application runs on berth's worker pool; berth's limits, timeouts and graceful shutdown (SIGTERM
or SIGINT: requests in flight are answered) apply. ``--interface asgi`` is not served yet.
"""

import argparse
import importlib
import os
import signal
import sys

from ._berth import serve_wsgi


def load(target: str):
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError("expected MODULE:APP, got {!r}".format(target))
    sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    app = module
    for part in attr.split("."):
        app = getattr(app, part)
    return app


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m berth", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("app", metavar="MODULE:APP")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--interface", choices=("wsgi", "asgi"), default="wsgi")
    ap.add_argument("--workers", type=int, default=1, help="processes sharing the port")
    ap.add_argument("--threads", type=int, default=4, help="worker threads per process")
    ap.add_argument("--model", default="evloop")
    ap.add_argument("--shutdown-timeout", type=float, default=30.0)
    args = ap.parse_args(argv)
    if args.interface == "asgi":
        ap.error("--interface asgi is not served yet (issue 18); WSGI is")
    if args.workers < 1 or args.threads < 1:
        ap.error("--workers and --threads must be at least 1")
    if args.workers > 1 and args.port == 0:
        ap.error("--workers above 1 needs a fixed --port (each process would pick its own)")
    try:
        app = load(args.app)
    except (ImportError, AttributeError, ValueError) as e:
        print("berth: cannot load {}: {}".format(args.app, e), file=sys.stderr)
        return 1

    def serve(reuse_port: bool) -> int:
        try:
            serve_wsgi(app, args.host, args.port, args.threads, args.model, args.shutdown_timeout, reuse_port)
        except (OSError, ValueError) as e:
            print("berth: {}".format(e), file=sys.stderr)
            return 1
        return 0

    if args.workers == 1:
        return serve(False)
    children = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            os._exit(serve(True))
        children.append(pid)

    def forward(signum, _frame):
        for pid in children:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = 0
    for pid in children:
        _, status = os.waitpid(pid, 0)
        code = code or os.waitstatus_to_exitcode(status)
    return code


if __name__ == "__main__":
    sys.exit(main())
