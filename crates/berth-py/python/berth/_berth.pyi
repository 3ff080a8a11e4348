"""Types of the extension module ``berth._berth`` (berth's message engine, and the engine
halves of the WSGI and ASGI servers)."""

import os
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union, final

from typing_extensions import Self

__all__ = [
    "AccessFormat",
    "AsgiRequest",
    "AsgiServer",
    "ClientDisconnected",
    "Core",
    "follow_parent",
    "listen_shared",
    "listen_unix",
    "log_to_python",
    "models",
    "parse_duration",
    "parse_size",
    "serve_wsgi",
    "__version__",
]

__version__: str

@final
class Core:
    """berth's message engine: listeners, named clients, whole messages, the polling API."""

    def __new__(
        cls,
        *,
        max_message: Optional[int] = ...,
        expected_only: bool = ...,
        reuse_port: bool = ...,
        nodelay: bool = ...,
        buffer_size: Optional[int] = ...,
    ) -> Self:
        """``reuse_port``: share ports with other processes (SO_REUSEPORT); ``nodelay``:
        TCP_NODELAY on TCP connections; ``buffer_size``: bytes per socket read (1 KiB-64 MiB)."""
    def listen(self, endpoint: str) -> str:
        """Listens on ``tcp://HOST:PORT`` (or unix://, udp://, tls://); the bound endpoint.
        ``OSError`` with the errno if it cannot (EADDRINUSE, EACCES, ...)."""
    def expect(self, name: bytes) -> None:
        """Expects a client named ``name``."""
    def connect(self, endpoint: str, name: bytes, timeout: float = ...) -> int:
        """Connects to a server as ``name``; its client id. ``ConnectionError`` if the server
        refuses the name; the ``OSError`` subclass of the errno if the connection fails
        (``ConnectionRefusedError`` when nothing listens, ...)."""
    def io_iteration(
        self, timeout: Optional[float] = ...
    ) -> Tuple[List[int], List[int], List[int], List[int], List[int]]:
        """One I/O round (GIL released): newly connected expected, newly connected unknown,
        disconnected, with data to read, with an empty output queue."""
    def messages(self, client: int) -> List[bytes]:
        """The whole messages ``client`` has sent since the last call."""
    def send_message(self, client: int, data: Union[bytes, bytearray]) -> bool:
        """Queues one message; False if the client is gone. A large ``bytes`` is written from
        where it lies (not copied); a ``bytearray`` is copied at the call."""
    def send_messages(self, client: int, messages: Iterable[bytes]) -> bool:
        """Queues messages: a list or tuple taken at the call (``TypeError`` if an item is not
        bytes), any other iterable drawn lazily as the queue drains; False if the client is gone."""
    def deciding(self, on: bool) -> None:
        """From now on, connections accepted on framed listeners wait for ``decide``."""
    def undecided(self) -> List[int]:
        """The connections accepted since the last call that wait for ``decide``."""
    def decide(self, client: int, raw: bool) -> bool:
        """Raw (admitted now, bytes as they come, output unframed) or framed (handshake);
        False if it is gone. ``close`` refuses one."""
    def peer(self, client: int) -> Optional[Tuple[str, int]]:
        """``(host, port)`` of a TCP, TLS or UDP client's peer; None for UNIX sockets."""
    def close(self, client: int) -> None:
        """Closes ``client`` once its queued output is written."""
    def name(self, client: int) -> Optional[bytes]: ...
    def client(self, name: bytes) -> Optional[int]: ...
    def pending_output(self, client: int) -> int: ...
    def client_count(self) -> int: ...
    def shutdown(self, timeout: float = ...) -> None:
        """Tells clients, writes what is queued for up to ``timeout`` seconds, closes all."""

def serve_wsgi(
    app: object,
    host: str = ...,
    port: int = ...,
    workers: int = ...,
    model: str = ...,
    shutdown_timeout: float = ...,
    reuse_port: bool = ...,
    max_body: Optional[int] = ...,
    fd: Optional[int] = ...,
    ready: Optional[Callable[[], object]] = ...,
    multiprocess: bool = ...,
    options: Optional[Dict[str, Any]] = ...,
) -> None:
    """Serves a WSGI application on berth's HTTP engine until SIGINT or SIGTERM, then drains.
    ``fd``: a listening socket to serve instead of binding (taken over); ``ready``: called once
    serving; ``multiprocess``: ``wsgi.multiprocess``; ``options``: ``backlog``, ``keep_alive``,
    ``limit_concurrency``, ``uds``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_ca_certs``,
    ``server_header``, ``date_header``, ``compress``, ``compress_level``, ``compress_min_size``,
    ``more_fds`` (more listening sockets served beside the main address, each taken over as
    ``fd`` is: ``-b`` given more than once) (and, for ASGI's ``AsgiServer``, ``ws_deflate``,
    ``ws_deflate_window_bits``)."""

def models() -> List[str]:
    """The models of berth's registry, by name."""

def parse_duration(text: str) -> float:
    """A duration as every berth command line reads it (``30s``, ``500ms``, ``2m``, ``1h``, or
    a bare number of seconds), in seconds; ``ValueError`` otherwise."""

def parse_size(text: str) -> int:
    """A size as every berth command line reads it (``1000``, ``64k``, ``1m``, ``1g``), in
    bytes; ``ValueError`` otherwise."""

def listen_shared(host: str, port: int, backlog: Optional[int] = ..., reuse_port: bool = ...,
                  join: bool = ...) -> Tuple[int, str, int]:
    """Binds and listens on ``host:port`` for ``--workers``: the descriptor (the caller's),
    and the address bound. ``OSError`` if anything listens there, unless ``join``; with
    ``reuse_port``, SO_REUSEPORT (a listener per worker slot)."""

def log_to_python(level: int) -> None:
    """Writes berth's own log records at ``level`` (5 trace, 10 debug, 20 info, 30 warning,
    40 error) and above to the logger ``berth.error``."""

@final
class AccessFormat:
    """An access-log format (``combined``, ``common``, ``json``, ``short``, or a template of
    gunicorn's or granian's atoms), written by berth's formatter; ``ValueError`` if it
    cannot be read."""

    def __new__(cls, format: str) -> Self: ...
    def line(
        self,
        addr: Optional[str],
        method: str,
        target: str,
        protocol: str,
        scheme: Optional[str],
        status: int,
        bytes: Optional[int],
        seconds: Optional[float],
        referer: Optional[str] = None,
        user_agent: Optional[str] = None,
    ) -> str:
        """The line of one response."""

def listen_unix(path: str, backlog: Optional[int] = ..., mode: Optional[int] = ...) -> int:
    """Binds and listens on the UNIX socket ``path`` for ``--workers`` to share: the descriptor
    (the caller's, who removes the file when done). ``OSError`` if a server listens there."""

def follow_parent(parent: int) -> bool:
    """Asks for SIGTERM when the parent dies; False if ``parent`` is already gone."""

class ClientDisconnected(OSError):
    """The client has gone: what is sent is not delivered."""

@final
class AsgiRequest:
    """One HTTP request on its way to an ASGI application (see ``berth.asgi``)."""

    id: int
    scope: Dict[str, Any]
    def read_body(self) -> Optional[Tuple[bytes, bool]]:
        """The next piece of the request body and whether more follows; None: wait for this
        request's wake event. Raises ClientDisconnected if the body was cut short."""
    def start(
        self, status: int, headers: Iterable[Tuple[bytes, bytes]], trailers: bool = False
    ) -> None:
        """``http.response.start`` (held until the first body message)."""
    def body(self, body: bytes, more: bool) -> bool:
        """``http.response.body``; False: the stream is full, wait for room."""
    def trailers(self, headers: Iterable[Tuple[bytes, bytes]], more: bool = False) -> None:
        """``http.response.trailers``: after the body's last message, when started with
        ``trailers``; the response ends with the last (``more`` false)."""
    def pathsend(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """``http.response.pathsend``: the body is the file at ``path``, sent from disk."""
    def answered(self) -> bool: ...
    def body_cut(self) -> bool:
        """The streamed request body was cut short (client left, malformed, too slow)."""
    def complete(self) -> bool: ...
    def has_room(self) -> bool: ...
    def disconnected(self) -> bool: ...
    def fail(self, status: int = ...) -> bool:
        """The application failed: answers ``status`` if nothing was sent, else cuts the body
        (an accepted WebSocket: closes it with 1011)."""
    def ws_accept(
        self, subprotocol: Optional[str] = ..., headers: Optional[Iterable[Tuple[bytes, bytes]]] = ...
    ) -> None:
        """``websocket.accept``: 101, then the connection speaks WebSocket."""
    def ws_send(self, data: Union[str, bytes]) -> bool:
        """``websocket.send`` (str: text, bytes: binary); False: wait for room. Raises
        ClientDisconnected once the WebSocket is closed."""
    def ws_close(self, code: int = ..., reason: str = ...) -> None:
        """``websocket.close``: 403 before the accept, a close frame after it."""
    def ws_receive(self) -> Optional[Tuple[str, Union[str, bytes, int]]]:
        """The next message, ``("text", str)``, ``("bytes", bytes)`` or ``("close", code)``;
        None: wait for this request's wake event."""

@final
class AsgiServer:
    """berth's HTTP engine, bound and serving, handing requests to a Python loop."""

    host: str
    port: int
    url: str
    urls: List[str]
    def __new__(
        cls,
        host: str = ...,
        port: int = ...,
        model: str = ...,
        io_threads: int = ...,
        reuse_port: bool = ...,
        max_body: Optional[int] = ...,
        max_connections: Optional[int] = ...,
        ws_max_message: int = ...,
        fd: Optional[int] = ...,
        options: Optional[Dict[str, Any]] = ...,
    ) -> Self: ...
    inline: bool
    def describe(self) -> str: ...
    def fileno(self) -> int:
        """Inline: berth's loop's epoll descriptor; else the wake socket. Readable when there
        is work for ``take``."""
    def over(self) -> bool:
        """Inline: berth's loop has finished (drained or stopped)."""
    def begin_drain(self, timeout: float) -> None:
        """Starts a graceful stop; inline, keep calling ``take`` until ``over()``."""
    def take(
        self, woken: bool, scope_state: Optional[Dict[str, Any]] = ...
    ) -> List[Union[AsgiRequest, int]]:
        """Every waiting request, and the ids of streams with room again (inline: after one
        turn of berth's loop, GIL released)."""
    def drain(self, timeout: float) -> None:
        """Stops taking connections; waits for the requests in flight (GIL released)."""
