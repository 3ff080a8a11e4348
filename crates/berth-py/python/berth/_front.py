"""What ``python -m berth``'s options add around an application, in Python, and only when
asked for (a server started without them calls the application directly, at no cost):

- ``--proxy-headers``: the client's address and the scheme from ``X-Forwarded-For`` /
  ``X-Forwarded-Proto`` or ``Forwarded`` (RFC 7239), believed only from the peers of
  ``--forwarded-allow-ips`` (addresses or networks, ``*`` for any), as uvicorn does;
- ``--root-path``: the path the application is mounted under behind a proxy (ASGI's
  ``root_path``, WSGI's ``SCRIPT_NAME``);
- ``--header NAME:VALUE``: fields added to every response that does not set them itself;
- ``--access-log``: a line per response to the logger ``berth.access``, in
  ``--access-log-format`` (``combined`` by default), written by berth's own formatter
  (``berth._berth.AccessFormat``, the one ``berth serve --access-log`` uses), so that ASGI and
  WSGI write the same line, with the protocol and the time taken;
- ``--log-level trace``: each request, as it starts, to ``berth.error``;
- ``--limit-max-requests``: after that many responses the worker drains and exits (its
  supervisor starts another);
- TLS: the scheme ``https`` (``wss``) in ASGI's scope.
"""

import ipaddress
import logging
import os
import signal
import time
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple
from urllib.parse import quote

access = logging.getLogger("berth.access")
error = logging.getLogger("berth.error")


class Trusted:
    """The peers whose forwarding headers are believed: ``*``, or addresses and networks."""

    def __init__(self, spec: str) -> None:
        self.any = False
        self.nets: List[Any] = []
        for item in (s.strip() for s in spec.split(",")):
            if not item:
                continue
            if item == "*":
                self.any = True
            else:
                # ValueError names a bad one; the caller turns it into a usage error.
                self.nets.append(ipaddress.ip_network(item, strict=False))

    def __contains__(self, host: Optional[str]) -> bool:
        if self.any:
            return True
        if not host:
            return False
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(addr in net for net in self.nets)


def _forwarded_elements(value: str) -> List[dict]:
    """RFC 7239's ``Forwarded``: one dict of lower-cased parameters per element."""
    out = []
    for element in value.split(","):
        params = {}
        for pair in element.split(";"):
            name, eq, val = pair.strip().partition("=")
            if eq:
                params[name.strip().lower()] = val.strip().strip('"')
        out.append(params)
    return out


def _node_host(node: str) -> str:
    """``for=`` of ``Forwarded`` without its port and brackets: ``[::1]:80`` -> ``::1``."""
    if node.startswith("["):
        return node[1:].split("]", 1)[0]
    if node.count(":") == 1:
        return node.split(":", 1)[0]
    return node


def forwarded(get: Callable[[str], Optional[str]], peer: Optional[str],
              trusted: Trusted) -> Tuple[Optional[str], Optional[str]]:
    """The client's address and the scheme the forwarding headers give, ``(None, None)`` where
    they give none or the peer is not trusted. The address is the rightmost one not trusted
    (each trusted proxy appended the address it had the request from), as uvicorn takes it."""
    if peer not in trusted:
        return None, None
    hosts: List[str] = []
    proto = None
    fwd = get("forwarded")
    if fwd:
        elements = _forwarded_elements(fwd)
        hosts = [_node_host(e["for"]) for e in elements if "for" in e]
        protos = [e["proto"] for e in elements if "proto" in e]
        proto = protos[-1] if protos else None
    else:
        xff = get("x-forwarded-for")
        if xff:
            hosts = [h.strip() for h in xff.split(",") if h.strip()]
        xfp = get("x-forwarded-proto")
        if xfp:
            proto = xfp.split(",")[-1].strip()
    client = None
    for host in reversed(hosts):
        client = host
        if host not in trusted:
            break
    return client, (proto.lower() if proto else None)


#: Python's level for berth's trace lines (``--log-level trace``): below DEBUG.
TRACE = 5


class Options:
    """What the wrappers need from the command line."""

    def __init__(self, *, proxy_headers: bool = False, forwarded_allow_ips: str = "127.0.0.1",
                 root_path: str = "", headers: Sequence[Tuple[str, str]] = (),
                 access_log: bool = False, limit_max_requests: Optional[int] = None,
                 tls: bool = False, access_log_format: str = "combined",
                 unix: bool = False) -> None:
        self.trusted = Trusted(forwarded_allow_ips) if proxy_headers else None
        self.root_path = root_path.rstrip("/")
        self.headers = list(headers)
        self.access_log = access_log
        # The formatter, parsed once (a bad format was refused at startup).
        self.access = None
        if access_log:
            from ._berth import AccessFormat
            self.access = AccessFormat(access_log_format)
        self.unix = unix
        self.trace = error.isEnabledFor(TRACE)
        self.limit_max_requests = limit_max_requests
        self.tls = tls
        self.served = 0

    def needed(self) -> bool:
        return bool(self.trusted or self.root_path or self.headers or self.access_log
                    or self.limit_max_requests or self.tls or self.trace)

    def logged(self, addr: Optional[str], method: str, target: str, protocol: str,
               scheme: Optional[str], status: int, size: Optional[int], started: float,
               referer: Optional[str], agent: Optional[str]) -> None:
        """The access line of one response (``--access-log``)."""
        if addr is None and self.unix:
            addr = "unix:"
        access.info("%s", self.access.line(addr, method, target, protocol, scheme, status,
                                           size, time.perf_counter() - started, referer,
                                           agent))

    def done(self) -> None:
        """One response more; at ``--limit-max-requests`` the worker stops (SIGTERM to itself:
        it drains as on any SIGTERM, and its supervisor starts another)."""
        if self.limit_max_requests:
            self.served += 1
            if self.served == self.limit_max_requests:
                error.info("worker (pid %d) served %d requests (--limit-max-requests): "
                           "restarting", os.getpid(), self.served)
                os.kill(os.getpid(), signal.SIGTERM)


def wrap_wsgi(app, opts: Options):
    if not opts.needed():
        return app
    headers = [(n, v) for n, v in opts.headers]

    def berth_front(environ, start_response):
        if opts.trusted is not None:
            def get(name):
                return environ.get("HTTP_" + name.upper().replace("-", "_"))
            client, proto = forwarded(get, environ.get("REMOTE_ADDR"), opts.trusted)
            if client:
                environ["REMOTE_ADDR"] = client
                environ.pop("REMOTE_PORT", None)
            if proto in ("http", "https"):
                environ["wsgi.url_scheme"] = proto
        if opts.root_path:
            environ["SCRIPT_NAME"] = opts.root_path
            path = environ.get("PATH_INFO", "")
            if path == opts.root_path or path.startswith(opts.root_path + "/"):
                environ["PATH_INFO"] = path[len(opts.root_path):]
        status_seen = []
        length: List[Optional[int]] = [None]
        started = time.perf_counter()
        if opts.trace:
            error.log(TRACE, "%s %s %s from %s", environ.get("REQUEST_METHOD"),
                      environ.get("PATH_INFO", ""), environ.get("SERVER_PROTOCOL"),
                      environ.get("REMOTE_ADDR", "-"))

        def start(status, response_headers, exc_info=None):
            status_seen.append(status)
            if opts.access is not None:
                for n, v in response_headers:
                    if n.lower() == "content-length" and v.isdigit():
                        length[0] = int(v)
            if headers:
                own = {n.lower() for n, _ in response_headers}
                response_headers = list(response_headers) + [
                    (n, v) for n, v in headers if n.lower() not in own]
            return start_response(status, response_headers, exc_info)

        result = None
        try:
            result = app(environ, start)
            return result
        finally:
            if opts.access is not None:
                status = status_seen[-1].split(" ", 1)[0] if status_seen else "500"
                size = length[0]
                if size is None and isinstance(result, (list, tuple)):
                    size = sum(len(b) for b in result)
                if environ.get("REQUEST_METHOD") == "HEAD":
                    size = 0
                path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
                query = environ.get("QUERY_STRING")
                target = quote(path.encode("latin-1"), safe="/:@!$&'()*+,;=~") + (
                    "?" + query if query else "")
                opts.logged(environ.get("REMOTE_ADDR"), environ.get("REQUEST_METHOD", "-"),
                            target, environ.get("SERVER_PROTOCOL", "HTTP/1.1"),
                            environ.get("wsgi.url_scheme"), int(status), size, started,
                            environ.get("HTTP_REFERER"), environ.get("HTTP_USER_AGENT"))
            opts.done()

    return berth_front


def wrap_asgi(app, opts: Options):
    if not opts.needed():
        return app
    extra = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in opts.headers]

    async def berth_front(scope, receive, send):
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            return await app(scope, receive, send)
        scope = dict(scope)
        if opts.tls:
            scope["scheme"] = "https" if kind == "http" else "wss"
        if opts.trusted is not None:
            fields = {}
            for name, value in scope.get("headers", ()):
                key = name.decode("latin-1").lower()
                value = value.decode("latin-1")
                fields[key] = fields[key] + ", " + value if key in fields else value
            peer = scope.get("client")
            client, proto = forwarded(fields.get, peer[0] if peer else None, opts.trusted)
            if client:
                scope["client"] = (client, 0)
            if proto in ("http", "https", "ws", "wss"):
                if kind == "websocket":
                    proto = {"http": "ws", "https": "wss"}.get(proto, proto)
                else:
                    proto = {"ws": "http", "wss": "https"}.get(proto, proto)
                scope["scheme"] = proto
        if opts.root_path:
            scope["root_path"] = opts.root_path
            path = scope["path"]
            if not (path == opts.root_path or path.startswith(opts.root_path + "/")):
                # ASGI: ``path`` is the full path, ``root_path`` its mounted prefix (uvicorn).
                scope["path"] = opts.root_path + path
                scope["raw_path"] = opts.root_path.encode("utf-8") + scope.get(
                    "raw_path", path.encode("utf-8"))
        status = [None]
        size = [0]
        started = time.perf_counter()
        if opts.trace:
            client = scope.get("client")
            error.log(TRACE, "%s %s HTTP/%s from %s", scope.get("method", "WEBSOCKET"),
                      scope["path"], scope.get("http_version", "1.1"),
                      client[0] if client else "-")

        async def send_more(message):
            if message["type"] == "http.response.body":
                size[0] += len(message.get("body", b""))
            elif message["type"] == "http.response.start":
                status[0] = message["status"]
                if extra:
                    own = {n.lower() for n, _ in message.get("headers", ())}
                    message = dict(message)
                    message["headers"] = list(message.get("headers", ())) + [
                        (n, v) for n, v in extra if n not in own]
            elif message["type"] == "websocket.accept":
                status[0] = 101
            await send(message)

        try:
            await app(scope, receive, send_more)
        finally:
            if opts.access is not None:
                client = scope.get("client")
                query = scope.get("query_string", b"")
                raw = scope.get("raw_path") or scope["path"].encode("utf-8")
                target = raw.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
                fields = {}
                for name, value in scope.get("headers", ()):
                    if name in (b"referer", b"user-agent"):
                        fields[name] = value.decode("latin-1")
                # A WebSocket's line is its handshake's: GET, answered 101 (or refused).
                opts.logged(client[0] if client else None, scope.get("method", "GET"), target,
                            "HTTP/" + scope.get("http_version", "1.1"), scope.get("scheme"),
                            status[0] or 500,
                            # A HEAD's body is never sent, whatever the application wrote.
                            (0 if scope.get("method") == "HEAD" else size[0])
                            if kind == "http" else None, started,
                            fields.get(b"referer"), fields.get(b"user-agent"))
            opts.done()

    return berth_front


def parse_headers(items: Iterable[str]) -> List[Tuple[str, str]]:
    """``NAME:VALUE`` items as pairs; ``ValueError`` naming a bad one."""
    out = []
    for item in items:
        name, colon, value = item.partition(":")
        name = name.strip()
        if not colon or not name or any(c in name for c in " \t\r\n()<>@,;\\\"/[]?={}"):
            raise ValueError("--header {!r} is not NAME:VALUE".format(item))
        if any(c in value for c in "\r\n\0"):
            raise ValueError("--header {!r}: the value holds CR, LF or NUL".format(item))
        out.append((name, value.strip()))
    return out

