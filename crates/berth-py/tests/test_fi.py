"""berth.fi over real sockets: a program written against FI-ASockIOCore's documented polling API
(our own code, not FI's) runs with only its import line pointing at berth; FI-wire clients (raw
sockets speaking FI's framing) and berth.fi's own client mode talk to it; bad input costs only
its own connection."""

import socket
import struct
import threading
import time

import pytest

# The only line an FI program changes:
from berth.fi import ASockIOCore, Client, ConnectionDirectionRole, ConnectionSettings, SimpleNetworkError

from helpers import frame, read_exact  # noqa: E402

WAIT = 10.0


# --- an FI-wire client: 8-byte little-endian length, keyword, b"OK" --------------------------
def read_frame(s: socket.socket):
    (length,) = struct.unpack("<Q", read_exact(s, 8))
    control = bool(length >> 63)
    payload = read_exact(s, length & ~(1 << 63))
    return ("control" if control else "data", payload)


def wire_connect(port: int, keyword: bytes) -> socket.socket:
    """Connects and sends the keyword, without waiting for the answer (for a core that this
    same thread must poll before it can answer)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    s.sendall(frame(keyword))
    return s


def wire_client(port: int, keyword: bytes) -> socket.socket:
    s = wire_connect(port, keyword)
    assert read_frame(s) == ("data", b"OK")
    return s


def next_expected(core: ASockIOCore) -> int:
    """Polls `core` until an expected client connects; its id."""
    deadline = time.time() + WAIT
    while time.time() < deadline:
        connected = core.io_iteration(0.05).newly_connected_expected_clients
        if connected:
            (client_id,) = connected
            return client_id
    raise AssertionError("no client connected")


def expect(core: ASockIOCore, keyword: bytes) -> int:
    return core.add_client(Client(ConnectionSettings(ConnectionDirectionRole.client, keyword=keyword)))


def port_of(core: ASockIOCore) -> int:
    return int(core.gates_addresses[0].rsplit(":", 1)[1])


# --- the FI program: an echo server in FI's polling style ------------------------------------
class EchoServer:
    """What an FI user writes: gates, expected clients, and a loop over io_iteration()."""

    def __init__(self, keywords):
        gate = ConnectionSettings(ConnectionDirectionRole.client, ("127.0.0.1", 0))
        self.core = ASockIOCore({gate})
        self.core.listen()
        self.ids = {
            kw: self.core.add_client(Client(ConnectionSettings(ConnectionDirectionRole.client, keyword=kw)))
            for kw in keywords
        }
        self.connected = set()
        self.unknown = set()
        self.gone = set()
        self.stop = False

    def serve(self):
        while not self.stop:
            result = self.core.io_iteration(0.05)
            self.connected |= result.newly_connected_expected_clients
            self.unknown |= result.newly_connected_unknown_clients
            self.gone |= result.clients_with_disconnected_connection
            for client_id in result.clients_have_data_to_read:
                for message in self.core.get_messages_from_client(client_id):
                    self.core.send_message_to_client(client_id, message)

    def __enter__(self):
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join(WAIT)
        self.core.close(1.0)


def wait_until(cond, within=WAIT):
    deadline = time.time() + within
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_fi_echo_program_serves_fi_wire_clients():
    with EchoServer([b"alice", b"bob"]) as server:
        alice = wire_client(port_of(server.core), b"alice")
        bob = wire_client(port_of(server.core), b"bob")
        assert wait_until(lambda: server.connected == set(server.ids.values()))
        for i in range(200):
            alice.sendall(frame(b"ping %d" % i))
        for i in range(200):
            assert read_frame(alice) == ("data", b"ping %d" % i)
        big = bytes(range(256)) * 4096  # 1 MiB, received whole then echoed
        bob.sendall(frame(big))
        assert read_frame(bob) == ("data", big)
        alice.close()
        assert wait_until(lambda: server.ids[b"alice"] in server.gone)


def test_client_mode_reaches_the_server_and_gets_the_echo():
    with EchoServer([b"bob"]) as server:
        super_server = ConnectionSettings(
            ConnectionDirectionRole.server, ("127.0.0.1", port_of(server.core)), b"bob"
        )
        client = ASockIOCore(set())
        bob = client.add_client(Client(super_server))
        first = client.io_iteration(0.0)
        assert bob in first.newly_connected_expected_clients
        client.send_messages_to_client(bob, (b"m%d" % i for i in range(1000)))
        got = []
        deadline = time.time() + WAIT
        while len(got) < 1000 and time.time() < deadline:
            result = client.io_iteration(0.05)
            if bob in result.clients_have_data_to_read:
                got.extend(client.get_messages_from_client(bob))
        assert got == [b"m%d" % i for i in range(1000)]
        client.close(1.0)


def test_send_messages_draws_a_generator_lazily():
    gate = ConnectionSettings(ConnectionDirectionRole.client, ("127.0.0.1", 0))
    core = ASockIOCore({gate})
    core.listen()
    expect(core, b"sink")
    sink = wire_connect(port_of(core), b"sink")
    sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sink_id = next_expected(core)
    assert read_frame(sink) == ("data", b"OK")
    drawn = []

    def messages():
        for i in range(1_000_000):
            drawn.append(i)
            yield b"x" * 1024

    core.send_messages_to_client(sink_id, messages())
    for _ in range(20):
        core.io_iteration(0.01)
    # The sink reads nothing: only what fits its queue and socket was drawn, not 1 GiB.
    assert 0 < len(drawn) < 100_000, len(drawn)
    sink.close()
    core.close(0.5)


# The exception is reported (as an unraisable error, as Python reports one it cannot raise
# anywhere), and the sequence ends there.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_generator_that_raises_costs_only_its_sequence():
    gate = ConnectionSettings(ConnectionDirectionRole.client, ("127.0.0.1", 0))
    core = ASockIOCore({gate})
    core.listen()
    expect(core, b"peer")
    peer = wire_connect(port_of(core), b"peer")
    peer_id = next_expected(core)
    assert read_frame(peer) == ("data", b"OK")

    def broken():
        yield b"one"
        raise RuntimeError("the application failed")

    core.send_messages_to_client(peer_id, broken())
    core.send_message_to_client(peer_id, b"after")
    for _ in range(10):
        core.io_iteration(0.01)
    assert read_frame(peer) == ("data", b"one")
    assert read_frame(peer) == ("data", b"after")
    peer.close()
    core.close(0.5)


def test_garbage_costs_only_its_connection():
    with EchoServer([b"good"]) as server:
        port = port_of(server.core)
        # A length far beyond the message limit: an error frame, then the connection ends.
        bad = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        bad.sendall(frame(b"mallory"))
        assert read_frame(bad) == ("data", b"OK")
        bad.sendall(struct.pack("<Q", (1 << 62)) + b"junk")
        kind, text = read_frame(bad)
        assert kind == "control" and text.startswith(b"error"), text
        # A keyword frame that never completes, then a reset.
        half = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        half.sendall(struct.pack("<Q", 100) + b"abc")
        half.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        half.close()
        # The server still serves.
        good = wire_client(port, b"good")
        good.sendall(frame(b"still here"))
        assert read_frame(good) == ("data", b"still here")


def test_errors_are_fi_s():
    core = ASockIOCore(set())
    with pytest.raises(SimpleNetworkError):
        core.add_client(Client(ConnectionSettings(ConnectionDirectionRole.client)))
    bob = core.add_client(Client(ConnectionSettings(ConnectionDirectionRole.client, keyword=b"bob")))
    with pytest.raises(SimpleNetworkError):
        core.add_client(Client(ConnectionSettings(ConnectionDirectionRole.client, keyword=b"bob")))
    with pytest.raises(SimpleNetworkError, match="not connected yet"):
        core.send_message_to_client(bob, b"x")
    assert core.get_client_id_by_keyword(b"bob") == bob
    refused = ConnectionSettings(ConnectionDirectionRole.server, ("127.0.0.1", 1), b"x")
    with pytest.raises(OSError):
        core.add_client(Client(refused))
    core.close(0.1)


# --- FI's class-inheritance style -------------------------------------------------------------
from berth.fi import InlineProcessor  # noqa: E402

LOST = []


class Reverser(InlineProcessor):
    """What an FI user writes in the inheritance style."""

    def on__data_received(self, data: bytes):
        if data == b"boom":
            raise RuntimeError("a bug in the application")
        if data == b"bye":
            self.output_messages.append(b"ciao " + self.keyword)
            self.mark__socket_as_ready_to_be_closed(True)
            return
        self.output_messages.append(data[::-1])

    def on__connection_lost(self):
        LOST.append(self.keyword)


def run_core(core, stop):
    while not stop.is_set():
        core.io_iteration(0.02)


def closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


class AllRaw:
    def __call__(self, core, connection):
        return True


class RawReverser(InlineProcessor):
    """The inheritance style over raw connections: each read's bytes, reversed."""

    def on__data_received(self, data: bytes):
        if data == b"boom":
            raise RuntimeError("a bug in the application")
        if data == b"bye":
            self.output_messages.append(b"ciao")
            self.mark__socket_as_ready_to_be_closed(True)
            return
        self.output_messages.append(data[::-1])

    def on__connection_lost(self):
        LOST.append(self.client_id)


def test_inline_processors_serve_unknown_clients_and_a_failing_one_costs_only_its_connection():
    """FI's rule: class_for_unknown_clients_inline_processing serves unknown clients (raw
    connections, by the raw checker); set_inline_processor_for_client serves a named one."""
    gate = ConnectionSettings(ConnectionDirectionRole.client, ("127.0.0.1", 0))
    core = ASockIOCore({gate})
    core.class_for_unknown_clients_inline_processing = RawReverser
    core.raw_checker_for_new_incoming_connections = AllRaw()
    core.unknown_clients_are_allowed = True
    core.listen()
    core.need_to_auto_check_incoming_raw_connection = True
    stop = threading.Event()
    t = threading.Thread(target=run_core, args=(core, stop), daemon=True)
    t.start()
    try:
        port = port_of(core)
        ann = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        ben = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        ann.sendall(b"hello")
        assert read_exact(ann, 5) == b"olleh"
        # Ben's processor raises: Ben's connection ends, Ann is still served.
        ben.sendall(b"boom")
        assert closed(ben)
        ann.sendall(b"abc")
        assert read_exact(ann, 3) == b"cba"
        # Marked ready to be closed: the answer is written, then the connection closes, and
        # the processor hears of it.
        ann.sendall(b"bye")
        assert read_exact(ann, 4) == b"ciao"
        assert closed(ann)
        assert wait_until(lambda: len(LOST) == 1)
    finally:
        stop.set()
        t.join(WAIT)
        core.close(0.5)


def test_a_named_client_gets_its_inline_processor_from_the_program():
    gate = ConnectionSettings(ConnectionDirectionRole.client, ("127.0.0.1", 0))
    core = ASockIOCore({gate})
    core.listen()
    dan_id = expect(core, b"dan")
    dan = wire_connect(port_of(core), b"dan")
    assert next_expected(core) == dan_id
    core.set_inline_processor_for_client(dan_id, Reverser)
    stop = threading.Event()
    t = threading.Thread(target=run_core, args=(core, stop), daemon=True)
    t.start()
    try:
        assert read_frame(dan) == ("data", b"OK")
        dan.sendall(frame(b"hello") + frame(b"world"))
        assert read_frame(dan) == ("data", b"olleh")
        assert read_frame(dan) == ("data", b"dlrow")
        dan.sendall(frame(b"bye"))
        assert read_frame(dan) == ("data", b"ciao dan")
        assert closed(dan)
        # FI's rule: a client served by an inline processor is removed when it leaves.
        assert wait_until(lambda: b"dan" in LOST)
        assert wait_until(lambda: dan_id not in core._expected_clients)
    finally:
        stop.set()
        t.join(WAIT)
        core.close(0.5)
