"""Types of the extension module ``berth._berth`` (berth's message engine)."""

from typing import Iterable, List, Optional, Tuple

class Core:
    """berth's message engine: listeners, named clients, whole messages, the polling API."""

    def __init__(self, *, max_message: Optional[int] = ..., expected_only: bool = ...) -> None: ...
    def listen(self, endpoint: str) -> str:
        """Listens on ``tcp://HOST:PORT`` (or unix://, udp://, tls://); the bound endpoint."""
    def expect(self, name: bytes) -> None:
        """Expects a client named ``name``."""
    def connect(self, endpoint: str, name: bytes, timeout: float = ...) -> int:
        """Connects to a server as ``name``; its client id. ``ConnectionError`` if refused."""
    def io_iteration(
        self, timeout: Optional[float] = ...
    ) -> Tuple[List[int], List[int], List[int], List[int], List[int]]:
        """One I/O round (GIL released): newly connected expected, newly connected unknown,
        disconnected, with data to read, with an empty output queue."""
    def messages(self, client: int) -> List[bytes]:
        """The whole messages ``client`` has sent since the last call."""
    def send_message(self, client: int, data: bytes) -> bool:
        """Queues one message; False if the client is gone."""
    def send_messages(self, client: int, messages: Iterable[bytes]) -> bool:
        """Queues messages drawn lazily from an iterable; False if the client is gone."""
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
) -> None:
    """Serves a WSGI application on berth's HTTP engine until SIGINT or SIGTERM, then drains."""
