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
import ipaddress
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
from ._berth import (AccessFormat, __version__, listen_shared, listen_unix, log_to_python,
                     models, parse_duration, parse_size, serve_wsgi)

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

#: What ``MODULE`` alone names, looked for in this order, as gunicorn does: Django's
#: ``mysite.wsgi`` (and ``asgi``) modules hold ``application``; most others call it ``app``.
DEFAULT_ATTRS = ("application", "app")


def load(target: str, app_dir: str = ".", factory: bool = False):
    """``MODULE:ATTR`` imported (from ``app_dir`` first), or ``MODULE`` alone, whose
    ``application`` (else ``app``) is served; ``LoadError`` saying why not."""
    module_name, colon, attr = target.partition(":")
    if not module_name or (colon and not attr):
        raise LoadError("expected MODULE:APP (or MODULE, whose application or app is served), "
                        "got {!r}".format(target))
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
    if not attr:
        attr = next((a for a in DEFAULT_ATTRS if hasattr(module, a)), "")
        if not attr:
            raise LoadError("module {!r} has no application or app: name the application, "
                            "{}:NAME".format(module_name, module_name))
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
    """Bytes as every berth command line reads them (berth's own parser: ``16k``, ``10m``,
    ``1g``), or ``0``/``none`` for no limit."""
    if text.strip().lower() in ("none", "0", "unlimited"):
        return None
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


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
    """A duration as every berth command line reads it (berth's own parser: ``30s``,
    ``500ms``, ``2m``, or a bare number of seconds), in seconds."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def parser() -> Parser:
    ap = Parser(prog="python -m berth", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("app", metavar="MODULE:APP",
        help="the application: a module and an attribute in it; MODULE alone serves its "
             "application, else its app (Django's mysite.wsgi, as gunicorn)")
    add("--version", action="version", version="berth " + __version__)
    g = ap.add_argument_group("application")
    g.add_argument("--interface", choices=("auto", "asgi", "asgi3", "asgi2", "wsgi"),
                   default="auto",
                   help="ASGI or WSGI (asgi3 is asgi, as uvicorn and granian spell it); auto: "
                        "found from the application (default: %(default)s)")
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
                        "(default: 100000 per event loop, as berth serve's -C; 1024 with the "
                        "threaded and forked models)")
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
                        "for pages with secrets (docs/serve.md). As berth serve --compress "
                        "(default: off)")
    g.add_argument("--compress-level", type=level, default=5, metavar="N",
                   help="level of --compress, 1 (fastest) to 9 (smallest) (default: "
                        "%(default)s)")
    g.add_argument("--compress-min-size", type=size, default=1024, metavar="SIZE",
                   help="bodies smaller than this are sent as they are by --compress "
                        "(default: 1k)")
    g.add_argument("--date-header", action=argparse.BooleanOptionalAction, default=True,
                   help="berth's Date field in every response, HTTP/1.1 and HTTP/2; --no-date-header "
                        "writes none (an application's own Date field is never sent; "
                        "default: on)")
    g = ap.add_argument_group("logging (the Python loggers berth.error and berth.access)")
    g.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug", "trace"),
                   help="level of berth.error (default: %(default)s)")
    g.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=False,
                   help="a line per response to berth.access (default: off, as granian's and "
                        "gunicorn's)")
    g.add_argument("--access-log-format", "--access-logformat", "--log-access-fmt",
                   default=None, metavar="FORMAT",
                   help="how --access-log writes a response, as berth serve's: combined "
                        "(nginx's, with the seconds taken last), common, json, short, or a "
                        "template of gunicorn's atoms ('%%(h)s \"%%(r)s\" %%(s)s %%(D)s') or "
                        "granian's ('%%(addr)s %%(status)d %%(dt_ms).3f'); giving it turns the "
                        "access log on (default: combined)")
    g.add_argument("--log-config", metavar="FILE",
                   help="logging configuration: a dictConfig .json (or .yaml with PyYAML), or "
                        "a fileConfig .ini (default: berth's, to stderr)")
    habits(ap)
    add_listening_extras(ap)
    return ap


# -- other servers' spellings ------------------------------------------------------------------

class Refuse(argparse.Action):
    """A flag of another server whose meaning berth does not share: one line naming berth's
    way, and exit 2 (never silently something else)."""

    def __init__(self, option_strings, dest, why="", **kwargs):
        self.why = why
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error("{}: {}".format(option_string, self.why))


class Bind(argparse.Action):
    """gunicorn's ``-b ADDRESS``: ``HOST:PORT``, ``[IPv6]:PORT``, ``HOST`` (port 8000),
    ``unix:PATH`` or ``fd://N``. The first sets ``--host``/``--port``, ``--uds`` or ``--fd``;
    each one after it is one more address served beside it (``args.more_binds``, as
    gunicorn serves every ``-b``). A bad address is one line and exit 2."""

    def __call__(self, parser, namespace, value, option_string=None):
        address = self.parse(parser, option_string, value)
        if getattr(namespace, "bound", None):
            namespace.more_binds = [*getattr(namespace, "more_binds", []), address]
            return
        namespace.bound = value
        kind, where, number = address
        if kind == "unix":
            namespace.uds = where
        elif kind == "fd":
            namespace.fd = number
        else:
            namespace.host, namespace.port = where, number

    @staticmethod
    def parse(parser, option_string, value):
        """``("tcp", HOST, PORT)``, ``("unix", PATH, None)`` or ``("fd", None, N)``."""
        def bad(why):
            parser.error("{} {}: {}".format(option_string, value, why))
        if value.startswith("unix:"):
            path = value[len("unix:"):]
            if not path:
                bad("an empty path")
            return ("unix", path, None)
        if value.startswith("fd://"):
            try:
                return ("fd", None, count(0)(value[len("fd://"):]))
            except argparse.ArgumentTypeError as e:
                bad(e)
        host, port_text = value, "8000"
        if value.startswith("["):
            host, _, rest = value[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else "8000"
        elif value.count(":") == 1:
            host, port_text = value.split(":")
        try:
            number = port(port_text)
        except argparse.ArgumentTypeError as e:
            bad(e)
        host = host or "0.0.0.0"
        try:
            ipaddress.ip_address(host)
        except ValueError:
            # A name (gunicorn's users write localhost:8000): its first address.
            try:
                host = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
            except (OSError, UnicodeError):
                bad("not an address (HOST:PORT, [IPv6]:PORT, unix:PATH or fd://N)")
        return ("tcp", host, number)


def habits(ap: Parser) -> None:
    """The flags gunicorn's, uvicorn's and granian's users type, where berth has the same
    thing: each sets berth's own option (``--help`` lists them last). Where berth's meaning
    differs, the flag is refused with berth's way."""
    g = ap.add_argument_group("other servers' spellings (each sets the berth option named)")
    g.add_argument("-w", dest="workers", type=count(1), metavar="N",
                   default=argparse.SUPPRESS, help="gunicorn's: --workers")
    g.add_argument("-b", "--bind", action=Bind, metavar="ADDRESS", default=argparse.SUPPRESS,
                   help="gunicorn's: HOST:PORT (--host, --port), unix:PATH (--uds) or fd://N "
                        "(--fd); given again, one more address served beside the first")
    g.add_argument("--access-logfile", metavar="FILE", default=None,
                   help="gunicorn's: --access-log, written to FILE (- is stdout; default: stderr)")
    g.add_argument("--error-logfile", "--log-file", metavar="FILE", default=None,
                   help="gunicorn's: berth.error written to FILE (- is stderr; default: stderr)")
    g.add_argument("--http", choices=("auto", "1", "2"), default="auto",
                   help="granian's: HTTP/1.1 and HTTP/2 (auto), HTTP/1.1 only (1), HTTP/2 only "
                        "(2: h2c, or h2 by ALPN) (default: %(default)s)")
    same = [
        (("--graceful-timeout",), "shutdown_timeout", seconds, "gunicorn's: --shutdown-timeout"),
        (("--keep-alive",), "timeout_keep_alive", seconds, "gunicorn's: --timeout-keep-alive"),
        (("--max-requests",), "limit_max_requests", count(1),
         "gunicorn's: --limit-max-requests"),
        (("--max-requests-jitter",), "limit_max_requests_jitter", count(0),
         "gunicorn's: --limit-max-requests-jitter"),
        (("--worker-connections", "--backpressure"), "limit_concurrency", count(1),
         "gunicorn's, granian's: --limit-concurrency"),
        (("--certfile", "--ssl-certificate"), "ssl_certfile", str,
         "gunicorn's, granian's: --ssl-certfile"),
        (("--keyfile",), "ssl_keyfile", str, "gunicorn's: --ssl-keyfile"),
        (("--ca-certs",), "ssl_ca_certs", str, "gunicorn's: --ssl-ca-certs"),
        (("--blocking-threads",), "threads", count(1), "granian's: --threads"),
        (("--url-path-prefix",), "root_path", str, "granian's: --root-path"),
    ]
    for flags, dest, kind, said in same:
        g.add_argument(*flags, dest=dest, type=kind, default=argparse.SUPPRESS, help=said)
    refused = [
        ("--timeout", "gunicorn's worker timeout (a worker silent this long is killed) is not "
         "berth's: its workers are never killed for being busy; --app-timeout S answers 504 "
         "to an ASGI request the application has not begun to answer in S seconds"),
        ("-k", "berth finds the interface from the application (--interface asgi|wsgi to "
         "say it); no worker class is needed"),
        ("--worker-class", "berth finds the interface from the application (--interface "
         "asgi|wsgi to say it); no worker class is needed"),
        ("--chdir", "berth does not change directory: --app-dir DIR is where MODULE is "
         "looked for first"),
        ("--working-dir", "berth does not change directory: --app-dir DIR is where MODULE is "
         "looked for first"),
        ("--workers-lifetime", "berth replaces workers by requests served, not by time: "
         "--limit-max-requests N"),
    ]
    for flag, why in refused:
        g.add_argument(flag, action=Refuse, why=why, nargs="?", help=argparse.SUPPRESS)


def habits_usage(ap: Parser, args) -> None:
    """What the other servers' spellings mean once all are read; one line and exit 2 for a
    value berth cannot take."""
    if args.interface == "asgi3":
        args.interface = "asgi"
    if args.access_logfile is not None or args.access_log_format is not None:
        args.access_log = True
    if args.access_log_format is None:
        args.access_log_format = "combined"
    try:
        AccessFormat(args.access_log_format)
    except ValueError as e:
        ap.error("--access-log-format: {}".format(e))


def command_line(app: str, host: str, port: int, options: Dict[str, Any]) -> List[str]:
    """``python -m berth``'s arguments for ``berth.run(app, host, port, **options)`` (its
    ``reload=True`` runs that command in a child), ``--reload`` left out."""
    argv = [app, "--host", host, "--port", str(port)]
    seen = set()
    for action in parser()._actions:
        if action.dest not in options or action.dest in seen or action.dest == "reload" \
                or not action.option_strings:
            continue
        seen.add(action.dest)
        value = options[action.dest]
        if value == action.default or isinstance(action, Refuse):
            continue
        flag = next(f for f in action.option_strings if f.startswith("--"))
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(flag if value else "--no-" + flag[2:])
        elif action.nargs == 0:
            if value:
                argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, "none" if value is None else str(value)]
    return argv



# -- issue 43's options: HTTP/2 ports, static files, key passwords, socket modes ---------------

def add_listening_extras(ap: Parser) -> None:
    """The options of issue 43, in groups of their own."""
    g = ap.add_argument_group("HTTP versions and TLS keys")
    g.add_argument("--http2", dest="http", type=http2_mode, metavar="on|off|only",
                   default=argparse.SUPPRESS,
                   help="berth serve's spelling of --http: on (auto), off (1: HTTP/1.1 only), "
                        "only (2: every connection HTTP/2, a port for clients with prior "
                        "knowledge, such as gRPC's)")
    g.add_argument("--ssl-keyfile-password", metavar="PASSWORD",
                   help="the password of an encrypted --ssl-keyfile (ENCRYPTED PRIVATE KEY, "
                        "PKCS#8 as openssl pkcs8 -topk8 writes it); anyone who can list "
                        "processes sees it, so on a shared machine decrypt the key instead "
                        "(openssl pkey). As berth serve --tls-key-password (default: none)")
    g.add_argument("--redirect-https", action="store_true",
                   help="plain HTTP sent to the TLS port (http:// to an https:// address) is "
                        "redirected to the same host, port and path over https:// (308) "
                        "instead of answered 400. As berth serve --redirect-https "
                        "(default: off)")
    g.add_argument("--http3", action="store_true",
                   help="also serve HTTP/3 (QUIC) on the UDP twin of the TLS listener: the "
                        "same port and certificate, needs --ssl-certfile and --ssl-keyfile; "
                        "--model evloop or uring, one process (--io-threads for more loops). As berth "
                        "serve --http3 (default: off)")
    g.add_argument("--alt-svc", choices=("on", "off"), default=None,
                   help="with --http3: answers over TLS carry Alt-Svc: h3=\":PORT\"; "
                        "ma=86400, so that browsers move over to HTTP/3 by themselves; off "
                        "serves HTTP/3 without advertising it. As berth serve --alt-svc "
                        "(default: on)")
    g.add_argument("--uds-permissions", type=file_mode, metavar="MODE",
                   help="the mode of the --uds socket file, in octal as chmod takes it (660: "
                        "its owner and group may connect; connecting needs write permission), "
                        "set before the socket listens. As granian's (default: what the umask "
                        "leaves)")
    g = ap.add_argument_group(
        "static files (served by berth before the application, never entering Python)")
    g.add_argument("--static-path-mount", metavar="DIR",
                   help="serve the files below DIR under --static-path-route, as berth serves "
                        "/files: sendfile, ranges, ETag/Last-Modified and 304, precompressed "
                        "siblings (.br, .zst, .gz), --compress; nothing outside DIR (default: "
                        "none)")
    g.add_argument("--static-path-route", default="/static", metavar="ROUTE",
                   help="the path the files are served under (default: %(default)s)")
    g.add_argument("--static-path-expires", type=expires, default="86400",
                   metavar="SECONDS|max|off",
                   help="Cache-Control of the files: max-age=SECONDS; max: a year and "
                        "immutable (for names that change with their content, as nginx's "
                        "expires max); off: none (default: %(default)s, a day)")
    g.add_argument("--static-path-dotfiles", action=argparse.BooleanOptionalAction,
                   default=False,
                   help="serve files and directories whose names start with a dot (.env, "
                        ".git/); off, they are 404 (default: off)")


#: ``--static-path-expires max``: a year (RFC 9111 sets no ceiling; a year is what caches and
#: nginx's ``expires max`` treat as forever), and ``immutable`` so that a reload does not ask.
EXPIRES_MAX = "max-age=31536000, immutable"


def expires(text: str) -> Optional[str]:
    """``--static-path-expires``: the Cache-Control it means, or None for ``off``."""
    t = text.strip().lower()
    if t == "off":
        return None
    if t == "max":
        return EXPIRES_MAX
    try:
        n = int(t)
    except ValueError:
        raise argparse.ArgumentTypeError("{!r} is not a number of seconds, max or off"
                                         .format(text))
    if n < 0:
        raise argparse.ArgumentTypeError("{!r} is negative".format(text))
    return "max-age={}".format(n)


def http2_mode(text: str) -> str:
    """``--http2 on|off|only`` as ``--http``'s value (auto, 1, 2)."""
    modes = {"on": "auto", "off": "1", "only": "2"}
    if text not in modes:
        raise argparse.ArgumentTypeError("{!r}: on, off or only".format(text))
    return modes[text]


def file_mode(text: str) -> int:
    """``--uds-permissions``: an octal mode (``660``, ``0660``, ``0o660``), 0 to 777."""
    t = text.strip().lower()
    t = t[2:] if t.startswith("0o") else t
    try:
        mode = int(t, 8)
    except ValueError:
        raise argparse.ArgumentTypeError("{!r} is not an octal mode (such as 660)".format(text))
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError("{!r} is not a mode from 0 to 777".format(text))
    return mode


def check_extras(ap: "Parser", args) -> None:
    """``check_usage`` for ``add_listening_extras``'s flags: one line and exit 2 each."""
    if args.static_path_mount is not None and not os.path.isdir(args.static_path_mount):
        ap.error("--static-path-mount {}: not a directory".format(args.static_path_mount))
    if args.uds_permissions is not None and not args.uds and \
            not any(kind == "unix" for kind, _, _ in getattr(args, "more_binds", [])):
        ap.error("--uds-permissions needs --uds (or -b unix:PATH)")
    if args.ssl_keyfile_password is not None and not args.ssl_keyfile:
        ap.error("--ssl-keyfile-password needs --ssl-keyfile")
    if args.redirect_https and not args.ssl_certfile:
        ap.error("--redirect-https needs --ssl-certfile and --ssl-keyfile")
    if args.http3 and not args.ssl_certfile:
        ap.error("--http3 needs --ssl-certfile and --ssl-keyfile (QUIC has TLS inside)")
    if args.http3 and args.model not in ("evloop", "uring"):
        ap.error("--http3: HTTP/3 is served by --model evloop, --model uring only, not {}"
                 .format(args.model))
    if args.http3 and args.workers > 1:
        ap.error("--http3 with --workers: not yet (each process would bind the UDP port, and "
                 "a QUIC connection's datagrams must reach one process); --io-threads N "
                 "gives one process N loops")
    if args.http3 and args.uds:
        ap.error("--http3 needs a TCP listener to be the twin of, not --uds")
    if args.alt_svc is not None and not args.http3:
        ap.error("--alt-svc needs --http3 (it advertises HTTP/3)")
    route = args.static_path_route
    if not route.startswith("/") or "?" in route or "#" in route:
        ap.error("--static-path-route {!r}: a path starting with /".format(route))


def extra_options(args) -> Dict[str, Any]:
    """The server options of ``add_listening_extras``'s flags (see ``server_options``)."""
    options: Dict[str, Any] = {
        "ssl_keyfile_password": args.ssl_keyfile_password,
        "redirect_https": args.redirect_https,
        "uds_permissions": args.uds_permissions,
    }
    if args.http3:
        options.update(http3=True, alt_svc=args.alt_svc != "off")
    if args.static_path_mount is not None:
        options.update(static_path_mount=args.static_path_mount,
                       static_path_route=args.static_path_route,
                       static_cache_control=args.static_path_expires,
                       static_dotfiles=args.static_path_dotfiles)
    return options


def defaults() -> Dict[str, Any]:
    """Every option's default, by its ``run()`` keyword."""
    ap = parser()
    return {a.dest: a.default for a in ap._actions
            if a.dest not in ("help", "version", "app") and a.default is not argparse.SUPPRESS
            and not isinstance(a, Refuse)}


# -- logging -----------------------------------------------------------------------------------

def setup_logging(args) -> None:
    """berth's loggers: ``berth.error`` (startup, workers, application failures) and
    ``berth.access`` (a line per response, with ``--access-log``), to stderr as ``berth:
    MESSAGE``, unless ``--log-config`` configures them."""
    level = {"trace": 5, "debug": logging.DEBUG}.get(args.log_level,
                                                     args.log_level.upper())
    logging.addLevelName(5, "TRACE")
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
        engine_logs(error)
        return
    handler = log_file(args.error_logfile, sys.stderr, "--error-logfile")
    handler.setFormatter(logging.Formatter("berth: %(message)s"))
    error = logging.getLogger("berth.error")
    error.handlers[:] = [handler]
    error.setLevel(level)
    error.propagate = False
    access = logging.getLogger("berth.access")
    # gunicorn's --access-logfile: `-` is stdout, as in gunicorn; berth's own default stderr.
    ahandler = log_file(args.access_logfile, sys.stderr, "--access-logfile")
    ahandler.setFormatter(logging.Formatter("%(message)s"))
    access.handlers[:] = [ahandler]
    access.setLevel(logging.INFO if args.access_log else logging.CRITICAL + 1)
    access.propagate = False
    engine_logs(error)


def engine_logs(error: logging.Logger) -> None:
    """berth's own lines (the engine's: a plain HTTP request to a TLS port, a connection
    timed out or refused at its cap) go to ``berth.error`` too, from its level up."""
    log_to_python(error.getEffectiveLevel())


def log_file(path: Optional[str], default, flag: str) -> logging.Handler:
    """A handler writing to ``path`` (``-``: stdout for the access log, as gunicorn's; stderr
    for errors), else to ``default``; ``LoadError`` if the file cannot be opened."""
    if path is None:
        return logging.StreamHandler(default)
    if path == "-":
        return logging.StreamHandler(sys.stdout if flag == "--access-logfile" else sys.stderr)
    try:
        return logging.FileHandler(path)
    except OSError as e:
        raise LoadError("{} {}: {}".format(flag, path, said(e)))


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
    habits_usage(ap, args)
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
    check_extras(ap, args)


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
        **extra_options(args),
    }


def protocols(args) -> str:
    """What the startup line says of HTTP versions and TLS."""
    said = {"auto": "HTTP/1.1 and HTTP/2", "1": "HTTP/1.1 only", "2": "HTTP/2 only"}[args.http]
    said += " over TLS" if args.ssl_certfile else ""
    return said + (", and HTTP/3 on its UDP twin" if args.http3 else "")


def announcer(args, interface: str, worker: Optional[int] = None):
    """The startup line of a server (or of ``worker`` N of a supervisor's): the URL, the
    worker and its pid, the model and its threads, the interface, HTTP versions and TLS."""
    def announce(url: str, shape: str) -> None:
        who = "" if worker is None else "worker {}, pid {}; ".format(worker, os.getpid())
        wsgi = ", WSGI" if interface == "wsgi" else ""
        # One write, so that the lines of processes sharing stdout never interleave.
        sys.stdout.write("berth listening on {} ({}{}{}; {})\n".format(
            url, who, shape, wsgi, protocols(args)))
        sys.stdout.flush()
    return announce


def serve_loaded(app, interface: str, args, fd=None, ready=None, max_requests=None,
                 worker: Optional[int] = None) -> int:
    """Serves ``app`` in this process (``worker`` N of a supervisor's) until SIGTERM; the
    exit code."""
    opts = _front.Options(
        proxy_headers=args.proxy_headers, forwarded_allow_ips=args.forwarded_allow_ips,
        root_path=args.root_path, headers=args.headers, access_log=args.access_log,
        limit_max_requests=max_requests, tls=bool(args.ssl_certfile),
        access_log_format=args.access_log_format, unix=bool(args.uds))
    options = server_options(args)
    options["http"] = args.http
    # The addresses of -b given again, bound by the caller (see bind_more).
    options["more_fds"] = list(getattr(args, "more_fds", []))
    options["announce"] = announcer(args, interface, worker)
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
    # -b given more than once: the addresses after the first, bound here, once (the workers
    # share them); their socket files removed at exit.
    socket_files: List[SocketFile] = []
    try:
        args.more_fds = bind_more(args, socket_files)
    except (OSError, ValueError, OverflowError) as e:
        return fail(said(e))
    try:
        return serve_bound(app, interface, args)
    finally:
        for f in socket_files:
            f.remove()


def bind_more(args, socket_files: List["SocketFile"]) -> List[int]:
    """Binds the addresses of ``-b`` after the first (``args.more_binds``): their listening
    descriptors, each to be taken over by the server (every worker's server, with
    ``--workers``). A UNIX socket's file goes on ``socket_files``, for the caller to remove."""
    fds = []
    for kind, where, number in getattr(args, "more_binds", []):
        if kind == "fd":
            fds.append(number)
        elif kind == "unix":
            fds.append(listen_unix(where, args.backlog, args.uds_permissions))
            socket_files.append(SocketFile(where))
        else:
            fds.append(listen_shared(where, number, args.backlog)[0])
    return fds


def serve_bound(app, interface: str, args) -> int:
    """Serves ``app`` (in this process, or in ``--workers`` supervised), its more addresses
    bound; the exit code."""
    if args.workers == 1 and not args.limit_max_requests:
        return serve_loaded(app, interface, args)
    # The port first, bound here: refused if any server listens on it (see
    # berth._berth.listen_shared and berth._supervise.Listeners).
    fd = args.fd if args.fd is not None else systemd_fd()
    socket_file = None
    from ._supervise import Listeners, Supervisor
    try:
        if fd is not None:
            first = socket.socket(fileno=fd)
            listeners = Listeners(first)
        elif args.uds:
            first = socket.socket(
                fileno=listen_unix(args.uds, args.backlog, args.uds_permissions))
            listeners = Listeners(first)
            socket_file = SocketFile(args.uds)
        else:
            # A listener per worker slot, SO_REUSEPORT (see berth._supervise.Listeners): slot 0
            # is bound now, refused if another server holds the port; the others join it.
            fd0, _, bound = listen_shared(args.host, args.port, args.backlog, True)
            first = socket.socket(fileno=fd0)

            def bind_slot(slot: int) -> socket.socket:
                if slot == 0:
                    return first
                return socket.socket(fileno=listen_shared(args.host, bound, args.backlog,
                                                          True, True)[0])
            listeners = Listeners(bind=bind_slot)
    except (OSError, ValueError, OverflowError) as e:
        return fail(said(e))

    # The supervisor's own lines (one per address); each worker says its own, with its pid.
    url = socket_url(first, args)
    urls = [url]
    for fd in args.more_fds:
        with socket.socket(fileno=os.dup(fd)) as more:
            urls.append(socket_url(more, args))
    for url in urls:
        sys.stdout.write("berth listening on {} (supervisor, pid {}; {} worker{}, {}; {})\n"
                         .format(url, os.getpid(), args.workers, "" if args.workers == 1 else "s",
                                 "WSGI" if interface == "wsgi" else "ASGI", protocols(args)))
    sys.stdout.flush()
    slot = [0]

    def worker(fd, ready) -> int:
        return serve_loaded(app, interface, args, fd, ready, jittered(args), slot[0])

    def child_setup(n: int) -> None:
        slot[0] = n

    try:
        return Supervisor(args.workers, worker, listeners, args.shutdown_timeout,
                          child_setup).run()
    finally:
        if socket_file is not None:
            socket_file.remove()


def socket_url(sock: socket.socket, args) -> str:
    """The URL a listening socket serves, as the startup lines say it."""
    if sock.family == socket.AF_UNIX:
        return "unix://" + sock.getsockname()
    host, bound_port = sock.getsockname()[:2]
    return "{}://{}:{}".format("https" if args.ssl_certfile else "http",
                               "[{}]".format(host) if ":" in host else host, bound_port)


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
