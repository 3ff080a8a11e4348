"""``python -m berth MODULE:APP`` (or ``berth-py MODULE:APP``): serve a WSGI or ASGI application
on berth's HTTP engine.

The interface is found from the application (``--interface auto``): an async callable taking
``(scope, receive, send)`` -- a coroutine function, an object or a ``functools.partial`` whose
call is one -- is ASGI 3; a class whose instances are such callables of ``(receive, send)`` is
ASGI 2; any other callable is WSGI. ``--interface`` overrides; an application that cannot be
the interface asked for is refused at startup, with the fix.

uvicorn's and granian's conventions: ``--workers`` is the number of processes sharing the port.
WSGI runs the application on berth's worker pool, ``--threads`` threads per process. ASGI runs
it on an asyncio loop (uvloop when installed) in the main thread, fed by ``--io-threads``
berth event loops (see ``berth.asgi``). berth's limits, timeouts and graceful shutdown
(SIGTERM or SIGINT: requests in flight are answered) apply. With ``--workers`` above 1 (or
``--limit-max-requests``) this process binds the port and supervises the workers: see
``berth._supervise`` (SIGHUP restarts them one by one, SIGTTIN/SIGTTOU add or remove one).

A bad option is one line and exit 2; a server that cannot start, one line and exit 1.
"""

import argparse
import contextlib
import functools
import importlib
import inspect
import json
import logging
import logging.config
import os
import random
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, Dict, List, Optional

from . import _front
from ._berth import __version__, listen_shared, listen_unix, models, serve_wsgi

log = logging.getLogger("berth.error")

MIB = 1024 * 1024
#: The default largest request body. uvicorn, granian and gunicorn set none; berth sets one
#: because a WSGI body is read whole into memory before the application runs (a limit keeps
#: one client from taking the server's memory), and makes it large enough that uploads a web
#: application takes (photos, documents, a video clip) pass: 1 GiB. ``--max-body none`` lifts it.
DEFAULT_MAX_BODY = 1024 * MIB
#: berth's own keep-alive default (uvicorn's is 5 s, granian's and gunicorn's 2 to 5 s): a
#: connection idle longer is closed.
DEFAULT_KEEP_ALIVE = 60.0


class LoadError(Exception):
    """The application cannot be loaded or served as asked: the message is the whole story."""


def said(e: BaseException) -> str:
    """What went wrong, in berth's words: an ``OSError`` from berth carries its errno (so
    Python picks the class), and its text without the ``[Errno N]`` Python would put first."""
    if isinstance(e, OSError) and e.errno is not None and e.strerror:
        return e.strerror
    return str(e)


# -- the application ---------------------------------------------------------------------------

def load(target: str, app_dir: str = ".", factory: bool = False):
    """``MODULE:ATTR`` imported (from ``app_dir`` first); ``LoadError`` saying why not."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise LoadError("expected MODULE:APP, got {!r}".format(target))
    sys.path.insert(0, os.path.abspath(app_dir))
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if getattr(e, "name", None) == module_name:
            raise LoadError("cannot import module {!r} (looked in {} and sys.path; "
                            "--app-dir says where)".format(module_name, os.path.abspath(app_dir)))
        raise LoadError("importing {!r} failed: {}: {}".format(
            module_name, type(e).__name__, e)) from e
    except Exception as e:  # noqa: BLE001 - the app's own import error, in one line
        where = traceback_where(e)
        raise LoadError("importing {!r} failed: {}: {}{}".format(
            module_name, type(e).__name__, e, where)) from e
    app: Any = module
    for part in attr.split("."):
        try:
            app = getattr(app, part)
        except AttributeError:
            raise LoadError("module {!r} has no attribute {!r}".format(module_name, attr))
    if factory:
        try:
            app = app()
        except Exception as e:  # noqa: BLE001
            raise LoadError("the factory {} failed: {}: {}".format(target, type(e).__name__, e))
    if not callable(app):
        raise LoadError("{} is a {}, not an application (a callable)".format(
            target, type(app).__name__))
    return app


def traceback_where(e: BaseException) -> str:
    tb = e.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return ""
    return " ({}:{})".format(last.tb_frame.f_code.co_filename, last.tb_lineno)


def _is_async(fn) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn)


def _positional(fn) -> Optional[int]:
    """How many positional arguments ``fn`` takes (None: any number, or unknown)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    n = 0
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            return None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
    return n


def detect(app) -> str:
    """``asgi3``, ``asgi2`` or ``wsgi``, from what the application is (as hypercorn and uvicorn
    tell them apart)."""
    if inspect.isclass(app):
        # ASGI 2: instantiated with the scope, the instance called with (receive, send).
        if _is_async(getattr(app, "__call__", None)):
            return "asgi2"
        return "wsgi"
    if _is_async(app):
        return "asgi3"
    call = getattr(app, "__call__", None)
    if call is not None and not inspect.isfunction(app) and _is_async(call):
        return "asgi3"
    if _positional(app) == 3:
        # A plain callable of (scope, receive, send) that returns an awaitable (a wrapper).
        return "asgi3"
    return "wsgi"


def choose(app, target: str, interface: str):
    """The application as the interface to serve, and that interface (``asgi`` or ``wsgi``).
    ``LoadError`` with the fix if it cannot be what was asked for."""
    found = detect(app)
    if interface == "auto":
        interface = "asgi" if found.startswith("asgi") else "wsgi"
        if found == "asgi2":
            interface = "asgi2"
    if interface == "wsgi":
        if found.startswith("asgi"):
            raise LoadError("{} is an ASGI application (an async callable), not WSGI: serve it "
                            "with --interface asgi (or leave --interface out)".format(target))
        return app, "wsgi"
    if interface == "asgi2" or (interface == "asgi" and found == "asgi2"):
        cls = app

        async def asgi3(scope, receive, send):
            await cls(scope)(receive, send)
        return asgi3, "asgi"
    if found == "wsgi" and _positional(app) == 2:
        raise LoadError("{} is a WSGI application (it takes environ and start_response), not "
                        "ASGI: serve it with --interface wsgi (or leave --interface out)"
                        .format(target))
    return app, "asgi"


# -- the command line --------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    """argparse's, but a usage error is one line (exit 2), not the whole usage first."""

    def error(self, message):
        self.exit(2, "{0}: error: {1} (usage: {0} --help)\n".format(self.prog, message))


def size(text: str) -> Optional[int]:
    """Bytes, with an optional k/m/g suffix (powers of 1024), or ``none`` (no limit)."""
    t = text.strip().lower()
    if t in ("none", "0", "unlimited"):
        return None
    units = {"k": 1024, "m": MIB, "g": 1024 * MIB}
    mult = 1
    if t and t[-1] in units:
        mult = units[t[-1]]
        t = t[:-1]
        if t.endswith("i"):
            t = t[:-1]
    elif t.endswith("b"):
        t = t[:-1]
    try:
        n = int(t)
    except ValueError:
        raise argparse.ArgumentTypeError("{!r} is not a size (bytes, 16k, 10m, 1g, none)"
                                         .format(text))
    if n < 0:
        raise argparse.ArgumentTypeError("{!r} is negative".format(text))
    return n * mult


def count(low: int):
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("{!r} is not a whole number".format(text))
        if n < low:
            raise argparse.ArgumentTypeError("must be at least {}".format(low))
        return n
    parse.__name__ = "number"
    return parse


def port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("{!r} is not a port number".format(text))
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError("{} is not between 0 and 65535".format(n))
    return n


def ranged(low: int, high: int, what: str):
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("{!r} is not a whole number".format(text))
        if not low <= n <= high:
            raise argparse.ArgumentTypeError("{} must be {} to {}".format(what, low, high))
        return n
    parse.__name__ = "number"
    return parse


window_bits = ranged(8, 15, "window bits")
level = ranged(1, 9, "a level")


def seconds(text: str) -> float:
    try:
        n = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("{!r} is not a number of seconds".format(text))
    if not n >= 0 or n == float("inf"):
        raise argparse.ArgumentTypeError("{!r} is not a number of seconds".format(text))
    return n


def parser() -> Parser:
    ap = Parser(prog="python -m berth", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("app", metavar="MODULE:APP", help="the application: a module and an attribute in it")
    add("--version", action="version", version="berth " + __version__)
    g = ap.add_argument_group("application")
    g.add_argument("--interface", choices=("auto", "asgi", "asgi2", "wsgi"), default="auto",
                   help="ASGI or WSGI; auto: found from the application (default: %(default)s)")
    g.add_argument("--factory", action="store_true",
                   help="MODULE:APP is a function returning the application (default: off)")
    g.add_argument("--app-dir", default=".",
                   help="where MODULE is looked for first (default: the current directory)")
    g.add_argument("--root-path", default="",
                   help="the path the application is mounted under behind a proxy: ASGI's "
                        "root_path, WSGI's SCRIPT_NAME (default: none)")
    g.add_argument("--lifespan", choices=("auto", "on", "off"), default="auto",
                   help="ASGI: run the lifespan protocol (default: %(default)s)")
    g.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto",
                   help="ASGI: the event loop; auto: uvloop when installed (default: %(default)s)")
    g.add_argument("--app-timeout", type=seconds, default=60.0,
                   help="ASGI: seconds an application may take to start its response, then "
                        "504; 0: none (default: %(default)s)")
    g = ap.add_argument_group("where to listen")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    g.add_argument("--port", type=port, default=8000,
                   help="port to bind; 0 picks a free one (default: %(default)s)")
    g.add_argument("--uds", metavar="PATH",
                   help="listen on this UNIX socket instead of --host/--port (a stale socket "
                        "file is replaced, a live one refused; the file is removed at exit; "
                        "clients have no address: ASGI client None, no REMOTE_ADDR; "
                        "default: none)")
    g.add_argument("--fd", type=count(0), metavar="N",
                   help="serve the listening TCP socket on descriptor N (a process manager's) "
                        "instead of binding; under systemd's socket activation (LISTEN_FDS) "
                        "its socket is used without this (default: none)")
    g.add_argument("--backlog", type=count(1), default=1024,
                   help="listen backlog, connections waiting to be accepted (default: %(default)s)")
    g.add_argument("--ssl-certfile", metavar="FILE",
                   help="serve HTTPS with this PEM certificate chain (berth's rustls; "
                        "default: plain HTTP)")
    g.add_argument("--ssl-keyfile", metavar="FILE", help="the certificate's PEM private key (default: none)")
    g.add_argument("--ssl-ca-certs", metavar="FILE",
                   help="ask clients for a certificate signed by this PEM CA (default: none)")
    g = ap.add_argument_group("processes and threads")
    g.add_argument("--workers", type=count(1), default=1,
                   help="processes sharing the port, supervised (default: %(default)s)")
    g.add_argument("--threads", type=count(1), default=4,
                   help="WSGI: threads running the application per process (default: %(default)s)")
    g.add_argument("--io-threads", type=count(1), default=1,
                   help="ASGI: berth event loops per process (default: %(default)s)")
    g.add_argument("--model", default="evloop",
                   help="berth's concurrency model (default: %(default)s; choices: {})"
                        .format(", ".join(models())))
    g.add_argument("--limit-max-requests", type=count(1), metavar="N",
                   help="a worker serves N requests, then is replaced (default: no limit)")
    g.add_argument("--limit-max-requests-jitter", type=count(0), default=0, metavar="N",
                   help="add 0..N to each worker's --limit-max-requests, so that workers are "
                        "not all replaced at once (default: %(default)s)")
    g.add_argument("--reload", action="store_true",
                   help="development: restart when a file under --app-dir (or --reload-dir) "
                        "changes; needs the watchfiles package (default: off)")
    g.add_argument("--reload-dir", action="append", default=[], metavar="DIR",
                   help="a directory --reload watches, repeatable (default: --app-dir)")
    g = ap.add_argument_group("limits and timeouts")
    g.add_argument("--max-body", "--max-body-size", type=size, default=DEFAULT_MAX_BODY,
                   metavar="SIZE",
                   help="largest request body (bytes, or 16k, 10m, 1g; none: no limit); larger "
                        "is answered 413 (default: 1g)")
    g.add_argument("--limit-concurrency", type=count(1), metavar="N",
                   help="most connections at once per process; more are answered 503 "
                        "(default: 100000)")
    g.add_argument("--timeout-keep-alive", type=seconds, default=DEFAULT_KEEP_ALIVE,
                   metavar="SECONDS",
                   help="close a keep-alive connection idle this long (default: %(default)s)")
    g.add_argument("--shutdown-timeout", "--timeout-graceful-shutdown", type=seconds,
                   default=30.0, metavar="SECONDS",
                   help="on SIGTERM, how long requests in flight get to finish (default: "
                        "%(default)s)")
    g.add_argument("--ws-max-message", type=size, default=16 * MIB, metavar="SIZE",
                   help="ASGI: largest WebSocket message a client may send, inflated if it "
                        "came compressed (default: 16m)")
    g.add_argument("--ws-deflate", choices=("on", "off"), default="on",
                   help="ASGI: permessage-deflate (RFC 7692) with WebSocket clients that offer "
                        "it, as berth serve's --ws-deflate (default: %(default)s)")
    g.add_argument("--ws-deflate-window-bits", type=window_bits, default=15, metavar="BITS",
                   help="ASGI: largest LZ77 window of permessage-deflate, 8 to 15, both ways; "
                        "below 15 a client that cannot be held to it gets no compression "
                        "(default: %(default)s)")
    g = ap.add_argument_group("proxies and responses")
    g.add_argument("--proxy-headers", action=argparse.BooleanOptionalAction, default=False,
                   help="take the client's address and scheme from X-Forwarded-For/-Proto or "
                        "Forwarded, from --forwarded-allow-ips only (default: off)")
    g.add_argument("--forwarded-allow-ips",
                   default=os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1"),
                   help="comma-separated addresses or networks trusted with proxy headers, * "
                        "for any (default: $FORWARDED_ALLOW_IPS, else %(default)s)")
    g.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                   help="a field added to every response that does not set it, repeatable "
                        "(default: none)")
    g.add_argument("--server-header", action=argparse.BooleanOptionalAction, default=True,
                   help="berth's Server field (Server: berth) in every response; "
                        "--no-server-header writes none (an application's own Server field "
                        "is never sent; default: on)")
    g.add_argument("--compress", action="store_true",
                   help="compress responses of compressible types (text, JSON, JavaScript, "
                        "SVG, XML) on the fly with gzip, br or zstd, as the client accepts, "
                        "with Vary: Accept-Encoding; a streamed ASGI body message by "
                        "message, each flushed; never ranges or already-encoded bodies. Mind BREACH "
                        "for pages with secrets (README). As berth serve --compress "
                        "(default: off)")
    g.add_argument("--compress-level", type=level, default=5, metavar="N",
                   help="level of --compress, 1 (fastest) to 9 (smallest) (default: "
                        "%(default)s)")
    g.add_argument("--compress-min-size", type=size, default=1024, metavar="SIZE",
                   help="bodies smaller than this are sent as they are by --compress "
                        "(default: 1k)")
    g.add_argument("--date-header", action=argparse.BooleanOptionalAction, default=True,
                   help="berth's Date field in every HTTP/1.1 response; --no-date-header "
                        "writes none (an application's own Date field is never sent; "
                        "default: on)")
    g = ap.add_argument_group("logging (the Python loggers berth.error and berth.access)")
    g.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug", "trace"),
                   help="level of berth.error (default: %(default)s)")
    g.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=False,
                   help="a line per response to berth.access (default: off, as granian's and "
                        "gunicorn's)")
    g.add_argument("--log-config", metavar="FILE",
                   help="logging configuration: a dictConfig .json (or .yaml with PyYAML), or "
                        "a fileConfig .ini (default: berth's, to stderr)")
    return ap


def defaults() -> Dict[str, Any]:
    """Every option's default, by its ``run()`` keyword."""
    ap = parser()
    return {a.dest: a.default for a in ap._actions
            if a.dest not in ("help", "version", "app")}


# -- logging -----------------------------------------------------------------------------------

def setup_logging(args) -> None:
    """berth's loggers: ``berth.error`` (startup, workers, application failures) and
    ``berth.access`` (a line per response, with ``--access-log``), to stderr as ``berth:
    MESSAGE``, unless ``--log-config`` configures them."""
    level = {"trace": 5, "debug": logging.DEBUG}.get(args.log_level,
                                                     args.log_level.upper())
    if args.log_config:
        path = args.log_config
        try:
            if path.endswith((".json",)):
                with open(path) as f:
                    logging.config.dictConfig(json.load(f))
            elif path.endswith((".yaml", ".yml")):
                try:
                    import yaml  # type: ignore
                except ImportError:
                    raise LoadError("--log-config {}: YAML needs PyYAML (pip install pyyaml); "
                                    "or give a .json dictConfig".format(path))
                with open(path) as f:
                    logging.config.dictConfig(yaml.safe_load(f))
            else:
                logging.config.fileConfig(path, disable_existing_loggers=False)
        except LoadError:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError) as e:
            raise LoadError("--log-config {}: {}".format(path, said(e) or type(e).__name__))
        error = logging.getLogger("berth.error")
        if error.level == logging.NOTSET:
            error.setLevel(level)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("berth: %(message)s"))
    error = logging.getLogger("berth.error")
    error.handlers[:] = [handler]
    error.setLevel(level)
    error.propagate = False
    access = logging.getLogger("berth.access")
    ahandler = logging.StreamHandler(sys.stderr)
    ahandler.setFormatter(logging.Formatter("%(message)s"))
    access.handlers[:] = [ahandler]
    access.setLevel(logging.INFO if args.access_log else logging.CRITICAL + 1)
    access.propagate = False


def fail(message: str, code: int = 1) -> int:
    sys.stderr.write("berth: {}\n".format(message))
    sys.stderr.flush()
    return code


# -- serving -----------------------------------------------------------------------------------

def systemd_fd() -> Optional[int]:
    """The first socket systemd's socket activation passed, if it passed any to this process."""
    try:
        if int(os.environ.get("LISTEN_PID", "0")) == os.getpid() and \
                int(os.environ.get("LISTEN_FDS", "0")) >= 1:
            return 3
    except ValueError:
        pass
    return None


def check_usage(ap: Parser, args) -> None:
    """What argparse cannot check: one line and exit 2 for each."""
    if args.uds is not None and args.fd is not None:
        ap.error("--uds and --fd: give one (each names the socket to serve)")
    if args.uds is not None and not args.uds:
        ap.error("--uds: an empty path")
    if args.model not in models():
        ap.error("--model {!r}: no such model (models: {})".format(args.model, ", ".join(models())))
    if bool(args.ssl_certfile) != bool(args.ssl_keyfile):
        ap.error("--ssl-certfile and --ssl-keyfile go together")
    if args.ssl_ca_certs and not args.ssl_certfile:
        ap.error("--ssl-ca-certs needs --ssl-certfile and --ssl-keyfile")
    for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs", "log_config"):
        path = getattr(args, name)
        if path and not os.path.isfile(path):
            ap.error("--{} {}: no such file".format(name.replace("_", "-"), path))
    try:
        args.headers = _front.parse_headers(args.header)
        _front.Trusted(args.forwarded_allow_ips)
    except ValueError as e:
        ap.error(str(e) if "--header" in str(e) else "--forwarded-allow-ips: {}".format(e))
    if args.fd is not None and args.workers > 1:
        ap.error("--fd and --workers: give one (the workers share the port the parent binds)")


def server_options(args) -> Dict[str, Any]:
    return {
        "backlog": args.backlog,
        "keep_alive": args.timeout_keep_alive,
        "limit_concurrency": args.limit_concurrency,
        "uds": args.uds,
        "server_header": args.server_header,
        "date_header": args.date_header,
        "ssl_certfile": args.ssl_certfile,
        "ssl_keyfile": args.ssl_keyfile,
        "ssl_ca_certs": args.ssl_ca_certs,
        "ws_deflate": args.ws_deflate == "on",
        "ws_deflate_window_bits": args.ws_deflate_window_bits,
        "compress": args.compress,
        "compress_level": args.compress_level,
        "compress_min_size": args.compress_min_size or 0,
    }


def serve_loaded(app, interface: str, args, fd=None, ready=None, max_requests=None) -> int:
    """Serves ``app`` in this process until SIGTERM; the exit code."""
    opts = _front.Options(
        proxy_headers=args.proxy_headers, forwarded_allow_ips=args.forwarded_allow_ips,
        root_path=args.root_path, headers=args.headers, access_log=args.access_log,
        limit_max_requests=max_requests, tls=bool(args.ssl_certfile))
    options = server_options(args)
    if fd is None:
        fd = args.fd if args.fd is not None else systemd_fd()
    try:
        if interface == "asgi":
            from .asgi import serve as serve_asgi
            return serve_asgi(_front.wrap_asgi(app, opts), args.host, args.port,
                              model=args.model, io_threads=args.io_threads,
                              lifespan=args.lifespan, shutdown_timeout=args.shutdown_timeout,
                              app_timeout=args.app_timeout, max_body=max_body(args),
                              loop=args.loop, ws_max_message=args.ws_max_message or 2 ** 62,
                              fd=fd, ready=ready, options=options)
        serve_wsgi(_front.wrap_wsgi(app, opts), args.host, args.port, args.threads, args.model,
                   args.shutdown_timeout, False, max_body(args), fd, ready,
                   args.workers > 1, options)
    except (OSError, ValueError, ImportError, OverflowError) as e:
        return fail(said(e))
    return 0


def max_body(args) -> int:
    # None: no limit (the largest a usize holds on 64-bit platforms, with room to spare).
    return args.max_body if args.max_body is not None else 2 ** 62


def jittered(args) -> Optional[int]:
    if not args.limit_max_requests:
        return None
    return args.limit_max_requests + random.randint(0, args.limit_max_requests_jitter)


@contextlib.contextmanager
def terminations_blocked():
    """SIGTERM and SIGINT blocked while the application is imported, so that the threads it
    starts then (a metrics or error-reporting client's, say) have them blocked too, as berth's
    own threads have: this process takes them in its main thread (WSGI: berth waits for them
    there; ASGI and ``--workers``: Python's handlers). A thread with them unblocked took a
    SIGTERM itself, whose default action ended the whole server at once, undrained (issue 33).
    One that comes meanwhile waits, and is taken once the import is done."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def serve(args, app=None) -> int:
    """Loads the application (unless given) and serves it as ``args`` say; the exit code."""
    try:
        setup_logging(args)
        if app is None:
            try:
                with terminations_blocked():
                    app = load(args.app, args.app_dir, args.factory)
            except LoadError as e:
                raise LoadError("cannot load {}: {}".format(args.app, e))
            target = args.app
        else:
            target = getattr(app, "__qualname__", None) or type(app).__name__
        app, interface = choose(app, target, args.interface)
    except LoadError as e:
        return fail(str(e))
    if args.reload:
        return reload(args)
    if args.workers == 1 and not args.limit_max_requests:
        return serve_loaded(app, interface, args)
    # The port first, bound here without SO_REUSEPORT: refused if any server listens on it,
    # and no other can join it while the workers serve it (see berth._berth.listen_shared).
    fd = args.fd if args.fd is not None else systemd_fd()
    socket_file = None
    if fd is None:
        try:
            if args.uds:
                fd = listen_unix(args.uds, args.backlog)
                socket_file = SocketFile(args.uds)
            else:
                fd, _, _ = listen_shared(args.host, args.port, args.backlog)
        except (OSError, ValueError, OverflowError) as e:
            return fail(said(e))
    listener = socket.socket(fileno=fd)
    from ._supervise import Supervisor

    def worker(fd, ready) -> int:
        return serve_loaded(app, interface, args, fd, ready, jittered(args))

    try:
        return Supervisor(args.workers, worker, listener, args.shutdown_timeout).run()
    finally:
        if socket_file is not None:
            socket_file.remove()


class SocketFile:
    """The UNIX socket file this process bound for its workers (they leave it alone), removed
    at exit if it is still that very file (as berth's own ``SocketFile``: not a newcomer's)."""

    def __init__(self, path: str) -> None:
        self.path = path
        st = os.lstat(path)
        self.id = (st.st_dev, st.st_ino)
        # A forked worker that unwinds through the same code is not the owner.
        self.owner = os.getpid()

    def remove(self) -> None:
        if os.getpid() != self.owner:
            return
        try:
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self.id:
                os.unlink(self.path)
        except OSError:
            pass


# -- --reload ----------------------------------------------------------------------------------

def reload(args) -> int:
    """Runs the server in a child process (the same command without ``--reload``) and starts
    another when a ``.py`` file (or any file but bytecode) under the watched directories
    changes, as ``uvicorn --reload`` does; the watching is ``watchfiles``' (inotify on Linux),
    never polling. SIGTERM or SIGINT stops the child and exits 0."""
    try:
        import watchfiles  # type: ignore
    except ImportError:
        return fail("--reload needs the watchfiles package: pip install watchfiles")
    dirs = [os.path.abspath(d) for d in (args.reload_dir or [args.app_dir])]
    for d in dirs:
        if not os.path.isdir(d):
            return fail("--reload-dir {}: not a directory".format(d))
    argv = [a for a in (args.argv or sys.argv[1:]) if a != "--reload"]
    command = [sys.executable, "-m", "berth", *argv]
    stop = threading.Event()

    def on_stop(*_):
        stop.set()
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)

    def ignored(change, path: str) -> bool:
        return path.endswith((".pyc", ".pyo", "~", ".swp")) or "/__pycache__/" in path \
            or "/.git/" in path

    child = subprocess.Popen(command)
    log.info("watching %s for changes (--reload)", ", ".join(dirs))
    try:
        for changes in watchfiles.watch(*dirs, watch_filter=lambda c, p: not ignored(c, p),
                                        stop_event=stop, rust_timeout=500,
                                        yield_on_timeout=True, raise_interrupt=False):
            if stop.is_set():
                break
            if not changes:
                continue
            names = sorted({os.path.relpath(p, dirs[0]) for _, p in changes})
            log.info("%s changed: restarting", ", ".join(names[:3]))
            if child.poll() is None:
                child.terminate()
                child.wait()
            child = subprocess.Popen(command)
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait()
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    args.argv = argv
    check_usage(ap, args)
    return serve(args)


def cli() -> None:
    """The ``berth-py`` command."""
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
