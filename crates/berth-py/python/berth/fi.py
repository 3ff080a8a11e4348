"""FI-ASockIOCore's polling API on berth's message engine.

A program written for FI-ASockIOCore's ``simple_network.tcp_app_server`` needs only its import
line changed::

    from berth.fi import ASockIOCore, ConnectionSettings, ConnectionDirectionRole, Client

The names, arguments and results are FI's: gates (listening sockets) from a set of
``ConnectionSettings``, ``listen()``, expected clients added with ``add_client(Client(...))``
(a keyword to expect, or a super-server to connect to), ``io_iteration(timeout)`` returning an
``IoIterationResult`` with FI's five sets of expected-client ids, reading with
``get_message_from_client`` / ``get_messages_from_client``, writing with
``send_message_to_client`` / ``send_messages_to_client`` (drawn lazily as the client's queue
drains), and closing and removing clients. The wire is FI's (8-byte little-endian length,
keyword, ``OK``), so FI's own clients and servers talk to it.

Everything below the API is berth's: the sockets, framing, queues and backpressure run in Rust,
with the GIL released for the whole of each ``io_iteration``.

Where this differs from FI (documented, not hidden):

* ids of unknown (unexpected) clients come from the same counter as expected clients' ids;
* ``get_connection_output_fifo_size_for_client`` counts bytes not yet written, not messages;
* ``mark_client_connection_as_should_be_closed_immediately`` closes once queued output is
  written, as ``mark_client_connection_as_ready_to_be_closed`` does;
* raw (unframed) connections are berth's ``?raw`` endpoints, not a per-client switch
  (``InlineProcessor.set__is_in_raw_mode`` records the wish only);
* an exception escaping an ``InlineProcessor`` hook closes that client's connection (FI drops
  the processor and keeps the connection).
"""

import itertools
import logging
import socket
from collections import deque
from typing import Deque, Dict, Iterable, Iterator, Optional, Set, Tuple

from ._berth import Core

__all__ = [
    "ASockIOCore",
    "Client",
    "ConnectionDirectionRole",
    "ConnectionSettings",
    "InlineProcessor",
    "IoIterationResult",
    "SimpleNetworkError",
]

log = logging.getLogger("berth.fi")

MESSAGE_SIZE_LEN = 8
SERVER_ANSWER__KEYWORD_ACCEPTED = b"OK"


class SimpleNetworkError(Exception):
    """An error of the network layer (FI's name)."""


class ConnectionDirectionRole:
    """Who we are to the peer: ``server`` means the peer is a (super-)server we connect to."""

    server = 0
    client = 1


class ConnectionSettings:
    """Where a gate listens, or where a super-server is, and the keyword used there."""

    def __init__(
        self,
        direction_role: Optional[int] = None,
        socket_address=None,
        keyword: Optional[bytes] = None,
        socket_family=socket.AF_INET,
        socket_type=socket.SOCK_STREAM,
        socket_protocol=0,
        socket_fileno=None,
    ):
        self.direction_role = direction_role
        self.keyword = keyword
        self.socket_address = socket_address
        self.socket_family = socket_family
        self.socket_type = socket_type
        self.socket_protocol = socket_protocol
        self.socket_fileno = socket_fileno
        self.expected_clients_with_empty_output_fifo: Set[int] = set()

    def check(self) -> None:
        if self.keyword is not None and not isinstance(self.keyword, (bytes, bytearray)):
            raise SimpleNetworkError("keyword must be bytes")

    def endpoint(self) -> str:
        """The berth endpoint URL of ``socket_address``."""
        if self.socket_family == getattr(socket, "AF_UNIX", None):
            return "unix://" + str(self.socket_address)
        host, port = self.socket_address[0], self.socket_address[1]
        if ":" in host:
            host = "[" + host + "]"
        scheme = "udp" if self.socket_type == socket.SOCK_DGRAM else "tcp"
        return "{}://{}:{}".format(scheme, host, port)


class Client:
    """An expected client (``direction_role`` client: it connects to us with ``keyword``) or a
    super-server (``direction_role`` server: we connect to it)."""

    def __init__(self, connection_settings: ConnectionSettings, client_id=None, client_tcp_id=None):
        self.id = client_id
        self.connection_id = client_tcp_id
        self.connection_settings = connection_settings
        self.connection_settings.check()
        self.will_use_raw_client_connection = False
        self.will_use_raw_connection_without_handshake = False
        self.this_is_unknown_client = False
        self.obj_for_inline_processing = None


class InlineProcessor:
    """FI's class-inheritance style: subclass it, override the ``on__...`` hooks, and append
    what to send to ``self.output_messages``. The core calls the hooks from ``io_iteration``
    for the clients it was set for (``set_inline_processor_for_client``, or every unknown
    client through ``class_for_unknown_clients_inline_processing``); their messages go to the
    hooks rather than to the client's input FIFO.

    An exception escaping a hook is logged and costs that client its connection (and its
    processor), never the core."""

    def __init__(self, client_id=None, keyword: Optional[bytes] = None, socket_family=None, socket_type=None,
                 socket_proto=None, addr_info=None, host_names=None, external_parameters_set_trigger: Optional[Set] = None):
        self.client_id = client_id
        self.keyword = keyword
        self.socket_family = socket_family
        self.socket_type = socket_type
        self.socket_proto = socket_proto
        self.addr_info = addr_info
        self.host_names = host_names
        self.is_in_raw_mode = None
        self.output_messages: Deque[bytes] = deque()
        self._hold_client_id = client_id
        self._ready_to_be_closed = False
        self._closed_immediately = False
        self._trigger = external_parameters_set_trigger if external_parameters_set_trigger is not None else set()

    def on__data_received(self, data: bytes) -> None:
        """A whole message from the client."""

    def on__output_buffers_are_empty(self) -> None:
        """Everything sent to the client so far has been written."""

    def on__connection_lost(self) -> None:
        """The connection is gone; the processor is dropped after this call."""

    def set__is_in_raw_mode(self, is_in_raw_mode: bool) -> None:
        """FI switches a connection to raw mode here; berth's raw mode is a property of the
        endpoint (``?raw``), so this only records the wish."""
        self.is_in_raw_mode = is_in_raw_mode

    def mark__socket_as_should_be_closed_immediately(self, mark_socket_as: bool) -> None:
        self._closed_immediately = mark_socket_as
        self._trigger.add(self._hold_client_id)

    def mark__socket_as_ready_to_be_closed(self, mark_socket_as: bool) -> None:
        """Close once everything in ``output_messages`` has been written."""
        self._ready_to_be_closed = mark_socket_as
        self._trigger.add(self._hold_client_id)


class IoIterationResult:
    """What one ``io_iteration`` saw, as FI's five sets of client ids."""

    def __init__(self):
        self.newly_connected_expected_clients: Set[int] = set()
        self.newly_connected_unknown_clients: Set[int] = set()
        self.clients_with_disconnected_connection: Set[int] = set()
        self.clients_have_data_to_read: Set[int] = set()
        self.clients_with_empty_output_fifo: Set[int] = set()

    def update(self, other: "IoIterationResult") -> None:
        self.newly_connected_expected_clients.update(other.newly_connected_expected_clients)
        self.newly_connected_unknown_clients.update(other.newly_connected_unknown_clients)
        self.clients_with_disconnected_connection.update(other.clients_with_disconnected_connection)
        self.clients_have_data_to_read.update(other.clients_have_data_to_read)
        self.clients_with_empty_output_fifo.update(other.clients_with_empty_output_fifo)

    def remove(self, item: int) -> None:
        for s in self._sets():
            s.discard(item)

    def clear(self) -> None:
        for s in self._sets():
            s.clear()

    def _sets(self):
        return (
            self.newly_connected_expected_clients,
            self.newly_connected_unknown_clients,
            self.clients_with_disconnected_connection,
            self.clients_have_data_to_read,
            self.clients_with_empty_output_fifo,
        )


class ASockIOCore:
    """FI's I/O core: gates, expected clients, and the polling loop (``io_iteration``)."""

    def __init__(self, gates_connections_settings: Set[ConnectionSettings]):
        self.gates_connections_settings = set(gates_connections_settings or ())
        for settings in self.gates_connections_settings:
            settings.check()
        self.unexpected_clients_are_allowed = True
        self.message_size_len = MESSAGE_SIZE_LEN
        self.server_answer__keyword_accepted = SERVER_ANSWER__KEYWORD_ACCEPTED
        #: The berth endpoints the gates listen on, ports resolved (port 0 picks one).
        self.gates_addresses = []  # type: list
        self._core = Core()
        self._ids = itertools.count(1)
        self._expected_clients: Dict[int, Client] = {}
        self._keywords_for_expected_clients: Dict[bytes, int] = {}
        self._unexpected_clients: Dict[int, Client] = {}
        # Our ids <-> the engine's connection ids.
        self._engine_of: Dict[int, int] = {}
        self._ours_of: Dict[int, int] = {}
        self._inbox: Dict[int, Deque[bytes]] = {}
        self._pending = IoIterationResult()
        #: FI's: a class (an ``InlineProcessor``) to serve every unknown client with.
        self.class_for_unknown_clients_inline_processing = None
        self._processors: Dict[int, InlineProcessor] = {}
        self._inline_triggers: Set[int] = set()

    # --- gates and clients ---------------------------------------------------------------
    def listen(self, backlog: int = 1) -> None:
        """Opens every gate. (berth's listeners use their own backlog; ``backlog`` is FI's.)"""
        for settings in self.gates_connections_settings:
            bound = self._core.listen(settings.endpoint())
            self.gates_addresses.append(bound)

    def add_client(self, expected_client_info: Client) -> int:
        """Registers an expected client (or connects to a super-server at once); its id."""
        settings = expected_client_info.connection_settings
        keyword = settings.keyword
        if keyword is None and settings.direction_role == ConnectionDirectionRole.client:
            raise SimpleNetworkError("Keyword in Client.connection_settings should not be None for a Client connection!")
        if keyword in self._keywords_for_expected_clients:
            raise SimpleNetworkError('Expected Client with keyword "{}" is already registered!'.format(keyword))
        client_id = next(self._ids)
        expected_client_info.id = client_id
        if settings.direction_role == ConnectionDirectionRole.server:
            engine_id = self._core.connect(settings.endpoint(), keyword or b"")
            self._bind(client_id, engine_id)
            self._pending.newly_connected_expected_clients.add(client_id)
        else:
            self._core.expect(bytes(keyword))
            engine_id = self._core.client(bytes(keyword))
            if engine_id is not None:
                # Already connected as an unexpected client: it is expected from now on.
                old = self._ours_of.get(engine_id)
                if old is not None:
                    self._unexpected_clients.pop(old, None)
                    self._unbind(old)
                self._bind(client_id, engine_id)
                self._pending.newly_connected_expected_clients.add(client_id)
        self._keywords_for_expected_clients[keyword] = client_id
        self._expected_clients[client_id] = expected_client_info
        return client_id

    def get_client_id_by_keyword(self, expected_client_keyword: bytes) -> int:
        return self._keywords_for_expected_clients[expected_client_keyword]

    def get_client_info(self, expected_client_id: int) -> Client:
        return self._expected_clients[expected_client_id]

    def remove_client(self, expected_client_id: int) -> None:
        """Closes the client's connection, if any, and forgets it."""
        engine_id = self._engine_of.get(expected_client_id)
        if engine_id is not None:
            self._core.close(engine_id)
            self._unbind(expected_client_id)
        info = self._expected_clients.pop(expected_client_id, None) or self._unexpected_clients.pop(expected_client_id, None)
        if info is not None:
            self._keywords_for_expected_clients.pop(info.connection_settings.keyword, None)
        self._inbox.pop(expected_client_id, None)

    # --- the loop --------------------------------------------------------------------------
    def io_iteration(self, timeout: Optional[float] = 0.0) -> IoIterationResult:
        """One round of I/O (the GIL released while it runs); what happened, in FI's sets."""
        expected, unknown, gone, readable, empty = self._core.io_iteration(timeout)
        result, self._pending = self._pending, IoIterationResult()
        for engine_id in expected:
            name = self._core.name(engine_id)
            ours = self._keywords_for_expected_clients.get(name)
            if ours is None:
                ours = self._new_unexpected(engine_id, name)
                result.newly_connected_unknown_clients.add(ours)
            else:
                self._bind(ours, engine_id)
                result.newly_connected_expected_clients.add(ours)
        for engine_id in unknown:
            name = self._core.name(engine_id)
            ours = self._new_unexpected(engine_id, name)
            result.newly_connected_unknown_clients.add(ours)
        if self.class_for_unknown_clients_inline_processing is not None:
            for ours in result.newly_connected_unknown_clients:
                if ours not in self._processors:
                    self._start_processor(ours, self.class_for_unknown_clients_inline_processing)
        for engine_id in readable:
            ours = self._ours_of.get(engine_id)
            if ours is None:
                continue
            messages = self._core.messages(engine_id)
            processor = self._processors.get(ours)
            if processor is None:
                self._inbox.setdefault(ours, deque()).extend(messages)
                result.clients_have_data_to_read.add(ours)
                continue
            for message in messages:
                if not self._run_hook(ours, processor.on__data_received, message):
                    break
        for engine_id in empty:
            ours = self._ours_of.get(engine_id)
            if ours is None:
                continue
            processor = self._processors.get(ours)
            if processor is None:
                result.clients_with_empty_output_fifo.add(ours)
            else:
                self._run_hook(ours, processor.on__output_buffers_are_empty)
        for engine_id in gone:
            ours = self._ours_of.get(engine_id)
            if ours is not None:
                self._unbind(ours)
                result.clients_with_disconnected_connection.add(ours)
                processor = self._processors.pop(ours, None)
                if processor is not None:
                    try:
                        processor.on__connection_lost()
                    except Exception:
                        log.exception("inline processor of client %s: on__connection_lost failed", ours)
        for ours in list(self._inline_triggers):
            self._apply_marks(ours)
        self._inline_triggers.clear()
        return result

    # --- inline processors ----------------------------------------------------------------
    def set_inline_processor_for_client(self, expected_client_id: int, class_for_unknown_clients_inline_processing: type) -> None:
        """Serves this (connected) client with a new object of the given ``InlineProcessor``
        subclass from now on."""
        self._engine(expected_client_id)
        self._start_processor(expected_client_id, class_for_unknown_clients_inline_processing)

    def _start_processor(self, ours: int, cls: type) -> None:
        info = self._expected_clients.get(ours) or self._unexpected_clients.get(ours)
        keyword = info.connection_settings.keyword if info is not None else None
        processor = cls(ours, keyword, external_parameters_set_trigger=self._inline_triggers)
        if info is not None:
            info.obj_for_inline_processing = processor
        self._processors[ours] = processor
        # Messages that came before the processor was set are its first.
        pending = self._inbox.pop(ours, None)
        for message in pending or ():
            if not self._run_hook(ours, processor.on__data_received, message):
                break

    def _run_hook(self, ours: int, hook, *args) -> bool:
        """Calls a processor's hook, then sends what it queued; an exception costs the
        connection. False if the processor is gone."""
        processor = self._processors.get(ours)
        try:
            hook(*args)
        except Exception:
            log.exception("inline processor of client %s failed: its connection is closed", ours)
            self._processors.pop(ours, None)
            engine_id = self._engine_of.get(ours)
            if engine_id is not None:
                self._core.close(engine_id)
            return False
        engine_id = self._engine_of.get(ours)
        if processor is not None and engine_id is not None and processor.output_messages:
            out = processor.output_messages
            while out:
                self._core.send_message(engine_id, out.popleft())
        return True

    def _apply_marks(self, ours: int) -> None:
        processor = self._processors.get(ours)
        engine_id = self._engine_of.get(ours)
        if processor is None or engine_id is None:
            return
        if processor._closed_immediately or processor._ready_to_be_closed:
            # What the processor queued is written first, then the connection closes.
            self._core.close(engine_id)

    # --- reading -------------------------------------------------------------------------------
    def get_connection_input_fifo_size_for_client(self, expected_client_id: int) -> int:
        self._engine(expected_client_id)
        return len(self._inbox.get(expected_client_id, ()))

    def get_message_from_client(self, expected_client_id: int) -> bytes:
        self._engine(expected_client_id)
        inbox = self._inbox.get(expected_client_id)
        if not inbox:
            raise SimpleNetworkError("There is no readable data in expected client's FIFO!")
        return inbox.popleft()

    def get_messages_from_client(self, expected_client_id: int) -> Iterator[bytes]:
        self._engine(expected_client_id)
        inbox = self._inbox.get(expected_client_id)
        while inbox:
            yield inbox.popleft()

    # --- writing ------------------------------------------------------------------------------
    def get_connection_output_fifo_size_for_client(self, expected_client_id: int) -> int:
        return self._core.pending_output(self._engine(expected_client_id))

    def send_message_to_client(self, expected_client_id: int, data: bytes) -> None:
        if not self._core.send_message(self._engine(expected_client_id), data):
            raise SimpleNetworkError("Expected client was not connected yet!")

    def send_messages_to_client(self, expected_client_id: int, messages_list: Iterable[bytes]) -> None:
        if not self._core.send_messages(self._engine(expected_client_id), messages_list):
            raise SimpleNetworkError("Expected client was not connected yet!")

    # --- closing --------------------------------------------------------------------------
    def close_client_connection(self, expected_client_id: int, raise_if_already_closed: bool = True) -> None:
        engine_id = self._engine_of.get(expected_client_id)
        if engine_id is None:
            if raise_if_already_closed:
                raise SimpleNetworkError("Expected client was not connected yet!")
            return
        self._core.close(engine_id)

    def mark_client_connection_as_ready_to_be_closed(self, expected_client_id: int, raise_if_already_closed: bool = True) -> None:
        self.close_client_connection(expected_client_id, raise_if_already_closed)

    def mark_client_connection_as_should_be_closed_immediately(self, expected_client_id: int, raise_if_already_closed: bool = True) -> None:
        self.close_client_connection(expected_client_id, raise_if_already_closed)

    def close_all_connections(self) -> None:
        for engine_id in list(self._ours_of):
            self._core.close(engine_id)

    def close(self, timeout: float = 5.0) -> None:
        """Tells every client the core is shutting down, writes what is queued (up to
        ``timeout`` seconds), and closes everything."""
        self._core.shutdown(timeout)

    def destroy(self) -> None:
        self.close()

    def __enter__(self) -> "ASockIOCore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- ids ----------------------------------------------------------------------------------
    def _engine(self, ours: int) -> int:
        engine_id = self._engine_of.get(ours)
        if engine_id is None:
            raise SimpleNetworkError("Expected client was not connected yet!")
        return engine_id

    def _bind(self, ours: int, engine_id: int) -> None:
        self._engine_of[ours] = engine_id
        self._ours_of[engine_id] = ours

    def _unbind(self, ours: int) -> None:
        engine_id = self._engine_of.pop(ours, None)
        if engine_id is not None:
            self._ours_of.pop(engine_id, None)

    def _new_unexpected(self, engine_id: int, name: Optional[bytes]) -> int:
        ours = next(self._ids)
        client = Client(ConnectionSettings(ConnectionDirectionRole.client, keyword=name))
        client.id = ours
        client.this_is_unknown_client = True
        self._unexpected_clients[ours] = client
        self._bind(ours, engine_id)
        return ours
