"""FI-ASockIOCore's API on berth's message engine.

A program written for FI-ASockIOCore's ``simple_network.tcp_app_server`` needs only its import
line changed. FI's example programs start with a star import, and so may yours::

    from berth.fi import *          # was: from simple_network.tcp_app_server import *

Like FI's module, this one has no ``__all__``: a star import brings the same names, FI's classes
and functions (``ASockIOCore``, ``ConnectionSettings``, ``ConnectionDirectionRole``, ``Client``,
``Connection``, ``InlineProcessor``, ``IoIterationResult``, ``CheckIsRawConnection``,
``asock_io_core_connect``, ``ResultExistence``, ...) and the modules FI's examples use without
importing them (``os``, ``socket``, ``sys``, ``time``, ``select``, ``errno``, ``copy``,
``traceback``, ``deque``, ``contextmanager``, the ``typing`` names).

The names, arguments, results and rules are FI's: gates (listening sockets) from a set of
``ConnectionSettings``; ``listen()`` returning the number of gates opened; expected clients added
with ``add_client(Client(...))`` (a keyword to expect, or a super-server to connect to);
``io_iteration(timeout)`` returning an ``IoIterationResult`` with FI's five sets of client ids;
``get_message(s)_from_client``; ``send_message(s)_to_client``; closing and removing clients;
per-connection raw decisions through ``raw_checker_for_new_incoming_connections``; inline
processors. The wire is FI's (8-byte little-endian length, keyword, ``OK``), so FI's own
clients and servers talk to it.

Everything below the API is berth's: the sockets, framing, queues and backpressure run in Rust,
with the GIL released for the whole of each ``io_iteration``.

FI's rules, as berth.fi keeps them
----------------------------------

* A client whose keyword was registered with ``add_client`` is reported among
  ``newly_connected_expected_clients``. One whose keyword was not (an *unexpected* client) is
  answered ``OK`` and held, unreported, its messages kept, while
  ``unexpected_clients_are_allowed`` (FI's default); once ``add_client`` registers its keyword it
  is reported as a newly connected expected client, with what it sent waiting to be read. If it
  leaves before that, nobody hears of it. With ``unexpected_clients_are_allowed = False`` it is
  refused. (FI itself crashes with ``AttributeError`` on an unexpected client, and again in
  ``add_client`` for an unexpected client that is connected; berth.fi does what FI's code
  comments describe.)
* With ``need_to_auto_check_incoming_raw_connection`` set, every accepted connection is shown,
  before anything is read from it, to ``raw_checker_for_new_incoming_connections(core,
  connection)``. One it calls raw becomes an *unknown client* while
  ``unknown_clients_are_allowed`` (else it is closed): registered like an expected client under
  the keyword ``prefix_for_unknown_client_keywords`` + a GUID, reported among
  ``newly_connected_unknown_clients``, its bytes messages as they come and its output written as
  it is (an HTTP server answers HTTP). Served by ``class_for_unknown_clients_inline_processing``
  when that is set. Any other connection does the keyword handshake.
* A client's id stays valid after its connection ends, until ``remove_client``:
  ``get_client_info`` answers, and what it sent can still be read. Sending to it raises.
* A client served by an inline processor is removed when its connection ends
  (``on__connection_lost``, and it is not among ``clients_with_disconnected_connection``).
* ``send_messages_to_client(id, messages)``: a list or tuple is taken at the call, as it is then
  (FI's HTTP server sends ``self.output_list`` and clears it right after). Any other iterable (a
  generator) is drawn lazily, as the client's queue drains, so 10**6 generated messages are
  never in memory at once (FI consumes every iterable at the call).
* ``mark_client_connection_as_ready_to_be_closed``: the program may go on sending; the
  connection closes once everything queued before the next ``io_iteration`` is written.
* ``listen()`` opens what it can and returns how many gates it opened (a gate that cannot be
  bound is logged and put in ``faulty_connection_settings``); ``asock_io_core_connect(core,
  True)`` raises ``ThereAreNoGateConections`` when that is 0.

Settings (attributes of ``ASockIOCore``), read when the core starts (the first ``listen``,
``add_client`` of a super-server or ``io_iteration``), unless said otherwise:

* ``reuse_gate_port``: ``SO_REUSEPORT``; several processes share the gate's port (FI's
  4-process benchmark). Off (FI's default), a port another process listens on is refused.
* ``use_nodelay_inet``: ``TCP_NODELAY`` on TCP connections, accepted and made (FI's default:
  off, Nagle's algorithm on).
* ``use_speed_optimized_socket_read`` with ``socket_read_fixed_buffer_size.result``: reads of
  that many bytes (1 KiB to 64 MiB). Off (FI's default), berth's reads are of 64 KiB; berth has
  no per-connection read buffer to save memory on (its read buffers are pooled and shared), so
  FI's memory-optimized reading has nothing to change here.
* ``should_get_client_addr_info_on_connection`` (FI's default: on): each new TCP connection's
  ``socket.getaddrinfo`` and ``socket.gethostbyaddr`` are looked up (blocking, as in FI) into its
  ``Connection.addr_info`` and ``host_names`` and its inline processor's. A lookup that fails
  leaves ``None`` (FI raises out of ``io_iteration`` for most errors).
* ``unexpected_clients_are_allowed``, ``unknown_clients_are_allowed``,
  ``need_to_auto_check_incoming_raw_connection``, ``raw_checker_for_new_incoming_connections``,
  ``class_for_unknown_clients_inline_processing``, ``prefix_for_unknown_client_keywords``: read
  at every ``io_iteration`` and connection, as FI does.
* ``reuse_gate_addr``: a no-op, documented: berth always sets ``SO_REUSEADDR`` on its listeners
  before binding (what ``True`` asks for; FI sets it after ``listen``, where it has no effect on
  the bind).
* ``max_message`` (berth's): the largest message received whole, 64 MiB by default; a bigger
  one ends its connection with an error frame. FI has no limit.

Where berth.fi still differs from FI, and why
---------------------------------------------

* ``listen(backlog)``: berth's listeners have a backlog of 1024 (capped by the kernel's
  ``somaxconn``) whatever is asked; FI's default of 1 would refuse connections under load.
  ``asock_io_core_connect`` also takes ``listen_num=`` for ``backlog=`` (FI's inline HTTP example
  passes it, which FI's own function rejects with ``TypeError``).
* ``close()`` stops the whole core: every client is told (berth's ``shutdown`` frame), what is
  queued is written (for up to ``timeout`` seconds, a berth argument) and everything closes. FI's
  ``close()`` closes the gates only. ``destroy()`` is the same in both.
* ``close_client_connection`` and ``mark_client_connection_as_should_be_closed_immediately``
  close once the output already queued is written: the engine has no way to drop what it has
  taken for a connection. FI drops it.
* ``InlineProcessor.set__is_in_raw_mode`` and ``switch_client_raw_connection_mode``: a
  connection's framing is decided once, when it is accepted (by the raw checker) or by the
  gate's endpoint (``?raw``); the switch raises ``SimpleNetworkError`` if asked to change it, the
  processor's wish is recorded only. ``Client.will_use_raw_client_connection`` and
  ``will_use_raw_connection_without_handshake`` are not read (a super-server is always connected
  to with the keyword handshake).
* ``Connection.conn.result`` is a description of the socket (``family``, ``type``, ``proto``,
  ``getpeername()``), not the socket: the engine owns the socket, and a program must not read
  from or write to it behind the engine's back. FI's lower-level connection methods
  (``add_connection``, ``close_connection``, ``remove_connection``, ``gate_io_iteration``, ...)
  are absent for the same reason.
* ``get_connection_output_fifo_size_for_client`` counts bytes not yet written, not queued
  pieces; the memory-management counters (``global_in__data_full_size`` and the rest) exist but
  are not kept: berth bounds memory itself (backpressure per connection, a held-bytes budget).
* An exception escaping an ``InlineProcessor`` hook, or the raw checker, is logged and costs
  that connection only; FI lets the checker's exception out of ``io_iteration``.
* UDP gates speak berth's datagram protocol (docs/msg-protocol.md), not FI's (FI has no UDP
  support yet).
"""

import copy
import errno
import itertools
import logging
import os
import select
import socket
import sys
import time
import traceback
import uuid
from collections import deque
from contextlib import contextmanager
from math import ceil
from typing import Deque, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from ._berth import Core

log = logging.getLogger("berth.fi")

MESSAGE_SIZE_LEN = 8
SERVER_ANSWER__KEYWORD_ACCEPTED = b"OK"
SET_OF_CONNECTION_ERRORS = {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE, errno.ESHUTDOWN}
INET_TYPE_CONNECTIONS = {socket.AF_INET, socket.AF_INET6}


class ResultExistence:
    """FI's pair of a flag and a value (``code_flow_control.ResultExistence``)."""

    def __init__(self, existence, result):
        self.existence = existence
        self.result = result

    def __bool__(self):
        return bool(self.existence)

    def __str__(self):
        return "{}: {}".format(self.existence, self.result)


class SimpleNetworkError(Exception):
    """An error of the network layer (FI's name)."""


class ThereAreNoGateConections(Exception):
    """``asock_io_core_connect(core, True)`` and no gate could be opened (FI's spelling)."""


class NotEnoughGateConnections(Exception):
    """``asock_io_core_connect(..., should_have_all_desired_gate_connections=True)`` and some
    gate could not be opened."""


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
            raise SimpleNetworkError("keyword must be bytes, not {}".format(type(self.keyword).__name__))

    def endpoint(self) -> str:
        """The berth endpoint URL of ``socket_address``."""
        if self.socket_family == getattr(socket, "AF_UNIX", None):
            return "unix://" + str(self.socket_address)
        if not isinstance(self.socket_address, tuple) or len(self.socket_address) < 2:
            raise SimpleNetworkError("socket_address must be (host, port), not {!r}".format(self.socket_address))
        host, port = self.socket_address[0], self.socket_address[1]
        if host and self.socket_family in INET_TYPE_CONNECTIONS:
            # The address of the socket's own family, as FI's socket would bind it.
            try:
                host = socket.getaddrinfo(host, port, self.socket_family, socket.SOCK_STREAM)[0][4][0]
            except socket.gaierror as err:
                raise SimpleNetworkError("cannot resolve {!r}: {}".format(host, err)) from None
        if ":" in host:
            host = "[" + host + "]"
        scheme = "udp" if self.socket_type == socket.SOCK_DGRAM else "tcp"
        return "{}://{}:{}".format(scheme, host, port)


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


class IOCoreMemoryManagement:
    """FI's memory counters. berth.fi creates them for programs that read or set them; the
    engine bounds its memory itself (see the module documentation)."""

    def __init__(self):
        self.global__data_size_limit = ResultExistence(True, 2 * 1024 ** 3)
        self.global_in__data_size_limit = ResultExistence(True, 512 * 1024 ** 2)
        self.global_in__data_full_size = ResultExistence(True, 0)
        self.global_in__deletable_data_full_size = ResultExistence(True, 0)
        self.global_out__data_size_limit = ResultExistence(True, 512 * 1024 ** 2)
        self.global_out__data_full_size = ResultExistence(True, 0)
        self.global_out__deletable_data_full_size = ResultExistence(True, 0)


class ASockIOCoreMemoryManagement(IOCoreMemoryManagement):
    def __init__(self):
        super().__init__()
        #: With ``use_speed_optimized_socket_read``: bytes per socket read (FI's default 1 MiB).
        self.socket_read_fixed_buffer_size = ResultExistence(True, 1024 ** 2)


class _SocketView:
    """What berth.fi shows of a connection's socket (``Connection.conn.result``): its family,
    type and protocol, and its peer's address. The engine owns the socket itself."""

    __slots__ = ("family", "type", "proto", "_peer")

    def __init__(self, family, peer):
        self.family = family
        self.type = socket.SOCK_STREAM
        self.proto = 0
        self._peer = peer

    def getpeername(self):
        return self._peer

    def __repr__(self):
        return "<berth.fi connection socket family={} peer={!r}>".format(self.family, self._peer)


class Connection:
    """FI's record of one connection: ``conn`` (a ``ResultExistence`` of its socket, here a
    description of it), ``addr`` (the peer's address), ``addr_info``, ``host_names``, its
    keyword, whether it is raw, and the client it serves."""

    def __init__(self, connection_id=None, connection__conn_addr: tuple = None, global_memory_management=None):
        self.id = connection_id
        if connection__conn_addr is None:
            self.conn = ResultExistence(False, None)
            self.addr = ResultExistence(False, None)
        else:
            self.conn = ResultExistence(True, connection__conn_addr[0])
            self.addr = ResultExistence(True, connection__conn_addr[1])
        self.addr_info = None
        self.host_names = None
        self.should_be_closed = False
        self.ready_to_be_closed = False
        self.ready_for_deletion = False
        self.keyword = None
        self.this_is_raw_connection = False
        self.connected_expected_client_id = None
        self.connected_expected_client = None
        self.has_inline_processor = False


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
        self._raw_wish = None
        self._ready_to_be_closed = False
        self._closed_immediately = False
        self._trigger = external_parameters_set_trigger if external_parameters_set_trigger is not None else set()

    def on__data_received(self, data: bytes) -> None:
        """A whole message from the client (a raw connection: the bytes of one read)."""

    def on__output_buffers_are_empty(self) -> None:
        """Everything sent to the client so far has been written."""

    def on__connection_lost(self) -> None:
        """The connection is gone; the processor and its client are dropped after this call."""

    def set__is_in_raw_mode(self, is_in_raw_mode: bool) -> None:
        """FI switches the connection's framing here; berth decides it once, when the connection
        is accepted, so this records the wish only (see the module documentation)."""
        self._raw_wish = bool(is_in_raw_mode)
        self._trigger.add(self._hold_client_id)

    def mark__socket_as_should_be_closed_immediately(self, mark_socket_as: bool) -> None:
        self._closed_immediately = mark_socket_as
        self._trigger.add(self._hold_client_id)

    def mark__socket_as_ready_to_be_closed(self, mark_socket_as: bool) -> None:
        """Close once everything in ``output_messages`` has been written."""
        self._ready_to_be_closed = mark_socket_as
        self._trigger.add(self._hold_client_id)


class Client:
    """An expected client (``direction_role`` client: it connects to us with ``keyword``) or a
    super-server (``direction_role`` server: we connect to it)."""

    def __init__(self, connection_settings: ConnectionSettings, client_id=None, client_tcp_id=None):
        self.id = client_id
        self.connection_id = client_tcp_id
        self.__connection = None  # type: Optional[Connection]
        self.connection_settings = connection_settings
        self.connection_settings.check()
        self.will_use_raw_client_connection = False
        self.will_use_raw_connection_without_handshake = False
        self.this_is_unknown_client = False
        self.obj_for_inline_processing = None

    def get_connection(self) -> Optional[Connection]:
        return self.__connection


class CheckIsRawConnection:
    """FI's default raw checker: a TCP connection from an address that is none of the gates'
    is raw (an outsider speaking its own protocol); a local one does the keyword handshake.
    Subclass it (``__call__``) for another rule, as FI's HTTP examples do."""

    def __call__(self, asock_io_core: "ASockIOCore", connection_info: Connection) -> bool:
        result = False
        try:
            if connection_info.conn.result.family in {socket.AF_INET, socket.AF_INET6}:
                if connection_info.addr.result[0] not in asock_io_core.set_of_gate_addresses:
                    result = True
        except Exception:
            pass
        return result


class ASockIOCore(ASockIOCoreMemoryManagement):
    """FI's I/O core: gates, expected clients, and the polling loop (``io_iteration``)."""

    def __init__(self, gates_connections_settings: Set[ConnectionSettings]):
        super().__init__()
        self.gates_connections_settings = set(gates_connections_settings or ())
        for settings in self.gates_connections_settings:
            settings.check()
        self.faulty_connection_settings: Set[ConnectionSettings] = set()
        self.set_of_gate_addresses: set = set()
        #: The berth endpoints the gates listen on, ports resolved (port 0 picks one).
        self.gates_addresses: List[str] = []
        self.reuse_gate_addr = False
        self.reuse_gate_port = False
        self.message_size_len = MESSAGE_SIZE_LEN
        self.server_answer__keyword_accepted = SERVER_ANSWER__KEYWORD_ACCEPTED
        self.unexpected_clients_are_allowed = True
        self.raw_checker_for_new_incoming_connections = CheckIsRawConnection()
        self.need_to_auto_check_incoming_raw_connection = False
        self.unknown_clients_are_allowed = False
        self.prefix_for_unknown_client_keywords = b"UNKNOWN CLIENT: "
        self.echo_log = False
        self._internal_log: deque = deque(maxlen=10000)
        self.should_get_client_addr_info_on_connection = True
        self.use_nodelay_inet = False
        self.use_speed_optimized_socket_read = False
        #: FI's: a class (an ``InlineProcessor``) to serve every unknown client with.
        self.class_for_unknown_clients_inline_processing = None
        #: berth's: the largest message received whole (bytes); ``None``: berth's 64 MiB.
        self.max_message: Optional[int] = None

        self._core: Optional[Core] = None
        self._ids = itertools.count(0)
        self._connection_ids = itertools.count(0)
        self._guid_seq = itertools.count(0)
        self._expected_clients: Dict[int, Client] = {}
        self._keywords_for_expected_clients: Dict[bytes, int] = {}
        # Our ids <-> the engine's connection ids.
        self._engine_of: Dict[int, int] = {}
        self._ours_of: Dict[int, int] = {}
        # Connections admitted under a keyword nobody expected: engine id -> keyword.
        self._unexpected: Dict[int, bytes] = {}
        self._inbox: Dict[int, Deque[bytes]] = {}
        self._pending = IoIterationResult()
        self._processors: Dict[int, InlineProcessor] = {}
        self._inline_triggers: Set[int] = set()
        # Clients marked ready to be closed, closed at the next io_iteration.
        self._to_close: Set[int] = set()
        self._deciding = False

    # --- the engine ----------------------------------------------------------------------
    def _start(self) -> Core:
        """The engine, made on first use with the settings as they are then."""
        if self._core is None:
            buffer_size = None
            if self.use_speed_optimized_socket_read:
                buffer_size = int(self.socket_read_fixed_buffer_size.result)
            core = Core(
                max_message=self.max_message,
                expected_only=not self.unexpected_clients_are_allowed,
                reuse_port=bool(self.reuse_gate_port),
                nodelay=bool(self.use_nodelay_inet),
                buffer_size=buffer_size,
            )
            for keyword, ours in self._keywords_for_expected_clients.items():
                if not self._expected_clients[ours].this_is_unknown_client:
                    core.expect(bytes(keyword))
            self._core = core
        return self._core

    def _log(self, log_string: str) -> None:
        self._internal_log.append(log_string)
        log.debug("%s", log_string)
        if self.echo_log:
            print(log_string)
            sys.stdout.flush()

    # --- gates and clients ---------------------------------------------------------------
    def listen(self, backlog: int = 1) -> int:
        """Opens every gate it can; the number opened. A gate that cannot be opened is logged
        and moved to ``faulty_connection_settings``. (berth's listeners have a backlog of
        1024 whatever ``backlog`` says.)"""
        core = self._start()
        opened = set()
        for settings in self.gates_connections_settings:
            try:
                bound = core.listen(settings.endpoint())
            except (OSError, ValueError, SimpleNetworkError) as err:
                self._log("EXCEPTION: GATE: LISTEN: {!r}: {}".format(settings.socket_address, err))
                log.warning("gate %r not opened: %s", settings.socket_address, err)
                self.faulty_connection_settings.add(settings)
                continue
            self.gates_addresses.append(bound)
            if settings.socket_family in INET_TYPE_CONNECTIONS:
                self.set_of_gate_addresses.add(settings.socket_address[0])
            else:
                self.set_of_gate_addresses.add(settings.socket_address)
            opened.add(settings)
        self.gates_connections_settings = opened
        return len(opened)

    def add_client(self, expected_client_info: Client) -> int:
        """Registers an expected client (or connects to a super-server at once); its id."""
        settings = expected_client_info.connection_settings
        keyword = settings.keyword
        if keyword is None and settings.direction_role == ConnectionDirectionRole.client:
            raise SimpleNetworkError("Keyword in Client.connection_settings should not be None for a Client connection!")
        if keyword is not None and keyword in self._keywords_for_expected_clients:
            raise SimpleNetworkError('Expected Client with keyword "{}" is already registered!'.format(keyword))
        core = self._start()
        client_id = next(self._ids)
        if settings.direction_role == ConnectionDirectionRole.server:
            if keyword is None:
                keyword = self._own_keyword(settings)
            if keyword is None:
                raise SimpleNetworkError("Own keyword should be provided in connection_settings!")
            engine_id = core.connect(settings.endpoint(), bytes(keyword))
            expected_client_info.id = client_id
            self._bind(client_id, engine_id, expected_client_info, settings.socket_family)
            self._pending.newly_connected_expected_clients.add(client_id)
        else:
            expected_client_info.id = client_id
            core.expect(bytes(keyword))
            engine_id = core.client(bytes(keyword))
            if engine_id is not None and engine_id in self._unexpected:
                # Connected already, unexpected: it is expected from now on, with what it sent.
                del self._unexpected[engine_id]
                self._bind(client_id, engine_id, expected_client_info, None)
                self._pending.newly_connected_expected_clients.add(client_id)
                messages = core.messages(engine_id)
                if messages:
                    self._inbox[client_id].extend(messages)
                    self._pending.clients_have_data_to_read.add(client_id)
        self._keywords_for_expected_clients[keyword] = client_id
        self._expected_clients[client_id] = expected_client_info
        return client_id

    def _own_keyword(self, settings: ConnectionSettings) -> Optional[bytes]:
        """FI's: a gate's keyword, the one of the same family if there is one."""
        keyword = None
        for gate in self.gates_connections_settings:
            if keyword is None or gate.socket_family == settings.socket_family:
                keyword = gate.keyword
        return keyword

    def get_client_id_by_keyword(self, expected_client_keyword: bytes) -> int:
        return self._keywords_for_expected_clients[expected_client_keyword]

    def get_client_info(self, expected_client_id: int) -> Client:
        return self._expected_clients[expected_client_id]

    def remove_client(self, expected_client_id: int) -> None:
        """Closes the client's connection, if any, and forgets the client (``KeyError`` if
        there is no such client, as in FI)."""
        info = self._expected_clients.pop(expected_client_id)
        self._keywords_for_expected_clients.pop(info.connection_settings.keyword, None)
        engine_id = self._engine_of.get(expected_client_id)
        if engine_id is not None:
            self._core.close(engine_id)
            self._unbind(expected_client_id)
        self._inbox.pop(expected_client_id, None)
        self._processors.pop(expected_client_id, None)
        self._to_close.discard(expected_client_id)
        connection = info.get_connection()
        if connection is not None:
            connection.conn.existence = False
            connection.connected_expected_client_id = None
            connection.connected_expected_client = None
        info.connection_id = None
        info._Client__connection = None

    # --- the loop --------------------------------------------------------------------------
    def io_iteration(self, timeout: Optional[float] = 0.0) -> IoIterationResult:
        """One round of I/O (the GIL released while it runs); what happened, in FI's sets."""
        core = self._core or self._start()
        if self._to_close:
            for ours in self._to_close:
                engine_id = self._engine_of.get(ours)
                if engine_id is not None:
                    core.close(engine_id)
            self._to_close.clear()
        deciding = bool(self.need_to_auto_check_incoming_raw_connection)
        if deciding is not self._deciding:
            core.deciding(deciding)
            self._deciding = deciding
        expected, unknown, gone, readable, empty = core.io_iteration(timeout)
        result, self._pending = self._pending, IoIterationResult()
        ours_of = self._ours_of
        if deciding:
            for engine_id in core.undecided():
                self._decide(core, engine_id, result)
        for engine_id in expected:
            self._arrived(core, engine_id, result)
        for engine_id in unknown:
            if engine_id not in ours_of:
                self._arrived(core, engine_id, result)
        if readable:
            processors = self._processors
            inbox = self._inbox
            have_data = result.clients_have_data_to_read
            for engine_id in readable:
                ours = ours_of.get(engine_id)
                if ours is None:
                    # Unexpected: its messages wait in the engine until its keyword is added.
                    continue
                messages = core.messages(engine_id)
                have_data.add(ours)
                processor = processors.get(ours)
                if processor is None:
                    inbox[ours].extend(messages)
                    continue
                for message in messages:
                    if not self._run_hook(ours, processor.on__data_received, message):
                        break
        for engine_id in empty:
            ours = ours_of.get(engine_id)
            if ours is None:
                continue
            result.clients_with_empty_output_fifo.add(ours)
            processor = self._processors.get(ours)
            if processor is not None:
                self._run_hook(ours, processor.on__output_buffers_are_empty)
        for engine_id in gone:
            self._lost(engine_id, result)
        if self._inline_triggers:
            for ours in list(self._inline_triggers):
                self._apply_marks(ours)
            self._inline_triggers.clear()
        return result

    def _arrived(self, core: Core, engine_id: int, result: IoIterationResult) -> None:
        """A connection admitted after its keyword: an expected client's, or one held
        unexpected (or refused when unexpected clients are not allowed)."""
        name = core.name(engine_id)
        keyword = b"" if name is None else name
        ours = self._keywords_for_expected_clients.get(keyword)
        if ours is not None and not self._expected_clients[ours].this_is_unknown_client:
            self._bind(ours, engine_id, self._expected_clients[ours], None)
            result.newly_connected_expected_clients.add(ours)
        elif self.unexpected_clients_are_allowed:
            self._unexpected[engine_id] = keyword
        else:
            core.close(engine_id)

    def _decide(self, core: Core, engine_id: int, result: IoIterationResult) -> None:
        """FI's raw check of an accepted connection, before anything is read from it."""
        connection = self._connection(engine_id, None)
        try:
            raw = self.raw_checker_for_new_incoming_connections(self, connection)
        except Exception:
            log.exception("raw_checker_for_new_incoming_connections failed: that connection is closed")
            core.close(engine_id)
            return
        if not raw:
            core.decide(engine_id, False)
        elif not self.unknown_clients_are_allowed:
            self._log("UNKNOWN CLIENT {} WILL BE CLOSED: UNKNOWN CLIENTS ARE NOT ALLOWED".format(connection.addr.result))
            core.close(engine_id)
        elif core.decide(engine_id, True):
            ours = self._new_unknown(engine_id, connection)
            result.newly_connected_unknown_clients.add(ours)

    def _new_unknown(self, engine_id: int, connection: Connection) -> int:
        """FI's unknown client: a raw connection, registered under a generated keyword."""
        while True:
            guid = uuid.uuid1(clock_seq=next(self._guid_seq) & 0x3FFF).hex
            keyword = self.prefix_for_unknown_client_keywords + guid.encode()
            if keyword not in self._keywords_for_expected_clients:
                break
        client = Client(ConnectionSettings(ConnectionDirectionRole.client, connection.addr.result, keyword))
        client.will_use_raw_client_connection = True
        client.will_use_raw_connection_without_handshake = True
        client.this_is_unknown_client = True
        ours = next(self._ids)
        client.id = ours
        connection.this_is_raw_connection = True
        self._keywords_for_expected_clients[keyword] = ours
        self._expected_clients[ours] = client
        self._bind(ours, engine_id, client, None, connection)
        if self.class_for_unknown_clients_inline_processing is not None:
            self._start_processor(ours, self.class_for_unknown_clients_inline_processing)
        return ours

    def _lost(self, engine_id: int, result: IoIterationResult) -> None:
        ours = self._ours_of.get(engine_id)
        if ours is None:
            self._unexpected.pop(engine_id, None)
            return
        self._unbind(ours)
        info = self._expected_clients.get(ours)
        connection = info.get_connection() if info is not None else None
        if connection is not None:
            connection.conn.existence = False
            connection.should_be_closed = True
        self._to_close.discard(ours)
        processor = self._processors.pop(ours, None)
        if processor is None:
            result.clients_with_disconnected_connection.add(ours)
            return
        # FI: the processor hears of it, and its client is removed, unreported.
        try:
            processor.on__connection_lost()
        except Exception:
            log.exception("inline processor of client %s: on__connection_lost failed", ours)
        if ours in self._expected_clients:
            self.remove_client(ours)
        result.remove(ours)

    # --- inline processors ----------------------------------------------------------------
    def set_inline_processor_for_client(self, expected_client_id: int, class_for_unknown_clients_inline_processing: type) -> None:
        """Serves this (connected) client with a new object of the given ``InlineProcessor``
        subclass from now on."""
        self._engine(expected_client_id)
        self._start_processor(expected_client_id, class_for_unknown_clients_inline_processing)

    def _start_processor(self, ours: int, cls: type) -> None:
        if not isinstance(cls, type):
            raise TypeError(".class_for_unknown_clients_inline_processing must be a class or None")
        info = self._expected_clients[ours]
        connection = info.get_connection()
        family = connection.conn.result.family if connection is not None and connection.conn.result is not None else None
        processor = cls(ours, info.connection_settings.keyword, family, socket.SOCK_STREAM, 0,
                        copy.copy(connection.addr_info) if connection is not None else None,
                        copy.copy(connection.host_names) if connection is not None else None,
                        self._inline_triggers)
        processor.is_in_raw_mode = bool(connection is not None and connection.this_is_raw_connection)
        info.obj_for_inline_processing = processor
        if connection is not None:
            connection.has_inline_processor = True
        self._processors[ours] = processor
        # Messages that came before the processor was set are its first.
        pending = self._inbox.get(ours)
        while pending:
            if not self._run_hook(ours, processor.on__data_received, pending.popleft()):
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
            send = self._core.send_message
            while out:
                send(engine_id, out.popleft())
        return True

    def _apply_marks(self, ours: int) -> None:
        processor = self._processors.get(ours)
        engine_id = self._engine_of.get(ours)
        if processor is None or engine_id is None:
            return
        if processor._raw_wish is not None:
            connection = self._expected_clients[ours].get_connection()
            raw = bool(connection is not None and connection.this_is_raw_connection)
            if processor._raw_wish != raw:
                log.warning("client %s: berth decides a connection's framing when it is accepted; "
                            "set__is_in_raw_mode(%s) is not applied", ours, processor._raw_wish)
            processor._raw_wish = None
        if processor._closed_immediately or processor._ready_to_be_closed:
            # What the processor queued is written first, then the connection closes.
            processor._closed_immediately = processor._ready_to_be_closed = False
            self._core.close(engine_id)

    # --- raw mode -------------------------------------------------------------------------
    def check_is_client_is_in_raw_connection_mode(self, expected_client_id: int) -> bool:
        self._engine(expected_client_id)
        connection = self._expected_clients[expected_client_id].get_connection()
        return bool(connection is not None and connection.this_is_raw_connection)

    def switch_client_raw_connection_mode(self, expected_client_id: int, is_raw: bool) -> None:
        if self.check_is_client_is_in_raw_connection_mode(expected_client_id) != bool(is_raw):
            raise SimpleNetworkError(
                "berth decides a connection's framing once, when it is accepted (the raw checker, or "
                "a ?raw gate); it cannot be switched afterwards")

    # --- reading -------------------------------------------------------------------------------
    def get_connection_input_fifo_size_for_client(self, expected_client_id: int) -> int:
        return len(self._input(expected_client_id))

    def get_message_from_client(self, expected_client_id: int) -> bytes:
        inbox = self._input(expected_client_id)
        if not inbox:
            raise SimpleNetworkError("There is no readable data in expected client's FIFO!")
        return inbox.popleft()

    def get_messages_from_client(self, expected_client_id: int) -> Iterator[bytes]:
        inbox = self._inbox.get(expected_client_id)
        if inbox is None:
            inbox = self._input(expected_client_id)
        while inbox:
            yield inbox.popleft()

    def _input(self, ours: int) -> Deque[bytes]:
        """The client's input FIFO: it lasts from its connection to ``remove_client`` (or its
        next connection), so what a client sent before it left can still be read."""
        inbox = self._inbox.get(ours)
        if inbox is None:
            self._expected_clients[ours]  # KeyError for an id that is no client, as in FI
            raise SimpleNetworkError("Expected client was not connected yet!")
        return inbox

    # --- writing ------------------------------------------------------------------------------
    def get_connection_output_fifo_size_for_client(self, expected_client_id: int) -> int:
        return self._core.pending_output(self._engine(expected_client_id))

    def send_message_to_client(self, expected_client_id: int, data: bytes) -> None:
        engine_id = self._engine_of.get(expected_client_id)
        if engine_id is None or not self._core.send_message(engine_id, data):
            self._not_sendable(expected_client_id)

    def send_messages_to_client(self, expected_client_id: int, messages_list: Iterable[bytes]) -> None:
        """Queues messages: a list or tuple as it is now (the caller may clear it at once), any
        other iterable drawn lazily as the client's queue drains."""
        engine_id = self._engine_of.get(expected_client_id)
        if engine_id is None or not self._core.send_messages(engine_id, messages_list):
            self._not_sendable(expected_client_id)

    def _not_sendable(self, ours: int):
        info = self._expected_clients[ours]  # KeyError for an id that is no client, as in FI
        if info.get_connection() is None:
            raise SimpleNetworkError("Expected client was not connected yet!")
        raise SimpleNetworkError("Client is disconnected! You can not send data to him!")

    # --- closing --------------------------------------------------------------------------
    def close_client_connection(self, expected_client_id: int, raise_if_already_closed: bool = True) -> None:
        """Closes the connection once what is queued to it is written."""
        engine_id = self._engine_of.get(expected_client_id)
        if engine_id is None:
            if raise_if_already_closed:
                self._not_sendable(expected_client_id)
            return
        self._core.close(engine_id)

    def mark_client_connection_as_ready_to_be_closed(self, expected_client_id: int, raise_if_already_closed: bool = True) -> None:
        """The connection closes once everything sent to it before the next ``io_iteration``
        is written; the program may go on sending until then (FI's rule)."""
        if expected_client_id in self._engine_of:
            self._to_close.add(expected_client_id)
        elif raise_if_already_closed:
            self._not_sendable(expected_client_id)

    def mark_client_connection_as_should_be_closed_immediately(self, expected_client_id: int, raise_if_already_closed: bool = True) -> None:
        self.close_client_connection(expected_client_id, raise_if_already_closed)

    def close_all_connections(self) -> None:
        for engine_id in list(self._ours_of) + list(self._unexpected):
            self._core.close(engine_id)

    def close(self, timeout: float = 5.0) -> None:
        """Tells every client the core is shutting down, writes what is queued (up to
        ``timeout`` seconds), and closes everything."""
        if self._core is not None:
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
            self._not_sendable(ours)
        return engine_id

    def _connection(self, engine_id: int, family) -> Connection:
        """A ``Connection`` describing an engine connection, FI's ``addr_info`` looked up if
        asked for."""
        peer = self._core.peer(engine_id)
        if peer is None:
            family = family if family is not None else getattr(socket, "AF_UNIX", None)
            addr = ""
        else:
            family = socket.AF_INET6 if ":" in peer[0] else socket.AF_INET
            addr = peer
        connection = Connection(next(self._connection_ids), (_SocketView(family, addr), addr))
        if self.should_get_client_addr_info_on_connection and peer is not None:
            try:
                connection.addr_info = socket.getaddrinfo(peer[0], peer[1])
                connection.host_names = socket.gethostbyaddr(peer[0])
            except OSError as err:
                self._log("EXCEPTION: GETTING CONNECTION INFO: {}: {}".format(peer, err))
        return connection

    def _bind(self, ours: int, engine_id: int, info: Client, family, connection: Optional[Connection] = None) -> None:
        old = self._engine_of.get(ours)
        if old is not None:
            self._ours_of.pop(old, None)
        self._engine_of[ours] = engine_id
        self._ours_of[engine_id] = ours
        self._inbox[ours] = deque()
        if connection is None:
            connection = self._connection(engine_id, family)
        connection.keyword = info.connection_settings.keyword
        connection.connected_expected_client_id = ours
        connection.connected_expected_client = info
        info.connection_id = connection.id
        info._Client__connection = connection

    def _unbind(self, ours: int) -> None:
        engine_id = self._engine_of.pop(ours, None)
        if engine_id is not None:
            self._ours_of.pop(engine_id, None)


@contextmanager
def asock_io_core_connect(asock_io_core_obj: ASockIOCore, should_have_gate_connections: bool = False, backlog: int = 1,
                          should_have_all_desired_gate_connections: bool = False, listen_num: Optional[int] = None):
    """FI's: opens the gates (``listen``), yields the core, and destroys it at the end.
    ``ThereAreNoGateConections`` if ``should_have_gate_connections`` and none opened;
    ``NotEnoughGateConnections`` if ``should_have_all_desired_gate_connections`` and some did
    not. (``listen_num`` is taken for ``backlog``: FI's inline HTTP example passes it.)"""
    if listen_num is not None:
        backlog = listen_num
    try:
        desired_amount_of_gate_connections = len(asock_io_core_obj.gates_connections_settings)
        gate_connections_num = asock_io_core_obj.listen(backlog)
        if should_have_gate_connections and not gate_connections_num:
            error_text = "ERROR: CONTEXTMANAGER: BASIC INITIATION: THERE IS NO GOOD GATE CONNECTIONS!"
            asock_io_core_obj._log(error_text)
            raise ThereAreNoGateConections(error_text)
        if should_have_all_desired_gate_connections and desired_amount_of_gate_connections != gate_connections_num:
            error_text = "ERROR: CONTEXTMANAGER: BASIC INITIATION: NOT ENOUGH GOOD GATE CONNECTIONS!"
            asock_io_core_obj._log(error_text)
            raise NotEnoughGateConnections(error_text)
        print("THERE ARE CREATED {} GOOD GATE CONNECTIONS".format(gate_connections_num))
        yield asock_io_core_obj
    finally:
        asock_io_core_obj.io_iteration()
        asock_io_core_obj.destroy()
        asock_io_core_obj.io_iteration()
