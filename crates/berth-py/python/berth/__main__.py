"""``python -m berth MODULE:APP``: serve a WSGI or ASGI application on berth's HTTP engine.

Usage: python -m berth MODULE:APP [--host 127.0.0.1] [--port 8000] [--interface asgi|wsgi]
                                   [--workers N] [--threads T] [--io-threads N] [--model evloop]
                                   [--lifespan auto|on|off] [--loop auto|asyncio|uvloop]

uvicorn's and granian's conventions: ``--workers`` is the number of processes sharing the port.
WSGI (the default) runs the application on berth's worker pool, ``--threads`` threads per
process (berth's ``-w``). ASGI runs it on an asyncio loop (uvloop when installed) in the main
thread, fed by ``--io-threads`` berth event loops (see ``berth.asgi``). berth's limits, timeouts
and graceful shutdown (SIGTERM or SIGINT: requests in flight are answered) apply.
"""

import argparse
import importlib
import os
import signal
import sys

from ._berth import serve_wsgi


def load(target: str, app_dir: str = "."):
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError("expected MODULE:APP, got {!r}".format(target))
    sys.path.insert(0, os.path.abspath(app_dir))
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
    ap.add_argument("--app-dir", default=".", help="where MODULE is looked for (default: here)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--interface", choices=("wsgi", "asgi"), default="wsgi")
    ap.add_argument("--workers", type=int, default=1, help="processes sharing the port")
    ap.add_argument("--threads", type=int, default=4, help="worker threads per process")
    ap.add_argument("--model", default="evloop")
    ap.add_argument("--shutdown-timeout", type=float, default=30.0)
    ap.add_argument("--io-threads", type=int, default=1, help="ASGI: berth event loops per process")
    ap.add_argument("--lifespan", choices=("auto", "on", "off"), default="auto", help="ASGI")
    ap.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto", help="ASGI")
    ap.add_argument("--app-timeout", type=float, default=60.0,
                    help="ASGI: seconds an application may take to start its response (0: none)")
    ap.add_argument("--max-body", type=int, default=None, help="largest request body, bytes")
    ap.add_argument("--ws-max-message", type=int, default=16 * 1024 * 1024,
                    help="ASGI: largest WebSocket message a client may send, bytes")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.threads < 1 or args.io_threads < 1:
        ap.error("--workers, --threads and --io-threads must be at least 1")
    if args.workers > 1 and args.port == 0:
        ap.error("--workers above 1 needs a fixed --port (each process would pick its own)")
    try:
        app = load(args.app, args.app_dir)
    except (ImportError, AttributeError, ValueError) as e:
        print("berth: cannot load {}: {}".format(args.app, e), file=sys.stderr)
        return 1

    def serve(reuse_port: bool) -> int:
        try:
            if args.interface == "asgi":
                from .asgi import serve as serve_asgi
                return serve_asgi(app, args.host, args.port, model=args.model,
                                  io_threads=args.io_threads, lifespan=args.lifespan,
                                  shutdown_timeout=args.shutdown_timeout,
                                  app_timeout=args.app_timeout, reuse_port=reuse_port,
                                  max_body=args.max_body, loop=args.loop,
                                  ws_max_message=args.ws_max_message)
            serve_wsgi(app, args.host, args.port, args.threads, args.model, args.shutdown_timeout,
                       reuse_port, args.max_body)
        except (OSError, ValueError, ImportError) as e:
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
