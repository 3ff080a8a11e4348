"""Issue 30: berth.fi behaves as FI-ASockIOCore's simple_network.tcp_app_server where FI's own
example programs look (each numbered difference of the issue, over real sockets on 127.0.0.1).
The programs themselves run in test_fi_programs.py."""

import http.client
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

import berth.fi
from berth import fi
from berth.fi import ASockIOCore, Client, ConnectionDirectionRole, ConnectionSettings, InlineProcessor, SimpleNetworkError

from helpers import frame, read_exact, read_to_end  # noqa: E402

WAIT = 10.0


def read_frame(s: socket.socket) -> bytes:
    (length,) = struct.unpack("<Q", read_exact(s, 8))
    return read_exact(s, length)


def read_until_closed(s: socket.socket) -> bytes:
    """What comes before the end of the connection, a close or a reset (a connection closed with
    bytes of ours unread is reset)."""
    try:
        return read_to_end(s)
    except ConnectionResetError:
        return b""


def gate(port=0, host="127.0.0.1"):
    return ConnectionSettings(ConnectionDirectionRole.server, (host, port), b"gate")


def expect(core, keyword):
    return core.add_client(Client(ConnectionSettings(ConnectionDirectionRole.client, keyword=keyword)))


def port_of(core) -> int:
    return int(core.gates_addresses[0].rsplit(":", 1)[1])


def poll_until(core, cond, what="the event"):
    """Runs io_iteration, gathering every set, until cond(gathered) holds."""
    seen = berth.fi.IoIterationResult()
    deadline = time.time() + WAIT
    while time.time() < deadline:
        seen.update(core.io_iteration(0.02))
        if cond(seen):
            return seen
    raise AssertionError("gave up waiting for {}; saw {}".format(what, vars(seen)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- 1. FI's names ------------------------------------------------------------------------------
# The public names of FI's simple_network.tcp_app_server (commit 82ee94e), which a program gets
# from `from simple_network.tcp_app_server import *`, less FI's own helper modules' classes
# (IDGenerator, data_containers, RecvBuffSizeComputer, ...: see berth.fi's documentation).
FI_NAMES = """ASockIOCore ASockIOCoreMemoryManagement CheckIsRawConnection Client Connection
ConnectionDirectionRole ConnectionSettings Dict INET_TYPE_CONNECTIONS IOCoreMemoryManagement
InlineProcessor IoIterationResult Iterable MESSAGE_SIZE_LEN NotEnoughGateConnections Optional
ResultExistence SERVER_ANSWER__KEYWORD_ACCEPTED SET_OF_CONNECTION_ERRORS Set SimpleNetworkError
ThereAreNoGateConections Tuple asock_io_core_connect ceil contextmanager copy deque errno os
select socket sys time traceback""".split()


def test_a_star_import_gives_what_fi_s_gives():
    names = {}
    exec("from berth.fi import *", names)
    missing = [n for n in FI_NAMES if n not in names]
    assert not missing, missing
    assert names["os"] is os and names["socket"] is socket


def test_a_program_annotated_with_connection_defines_and_its_checker_runs():
    """FI's examples subclass CheckIsRawConnection with a `client_info: Connection` annotation:
    evaluated when the class is defined."""
    program = (
        "from berth.fi import *\n"
        "class RawClientCheckerAllRaw(CheckIsRawConnection):\n"
        "    def __call__(self, app_server: ASockIOCore, client_info: Connection):\n"
        "        return True\n"
        "checker = RawClientCheckerAllRaw()\n"
    )
    names = {}
    exec(program, names)
    assert names["checker"](None, fi.Connection()) is True


def test_fi_s_default_checker_calls_outsiders_raw_and_local_clients_framed():
    core = ASockIOCore({gate()})
    assert core.listen() == 1
    checker = fi.CheckIsRawConnection()
    local = fi.Connection(0, (socket.socket(), ("127.0.0.1", 5)))
    outsider = fi.Connection(1, (socket.socket(), ("192.0.2.7", 5)))
    unix = fi.Connection(2, (socket.socket(socket.AF_UNIX), ""))
    try:
        assert checker(core, local) is False
        assert checker(core, outsider) is True
        assert checker(core, unix) is False
    finally:
        for c in (local, outsider, unix):
            c.conn.result.close()
        core.close(0.1)


def test_asock_io_core_connect_listens_yields_and_destroys(capsys):
    core = ASockIOCore({gate()})
    keyword = b"inside"
    with fi.asock_io_core_connect(core, True, backlog=100) as server:
        assert server is core
        expect(server, keyword)
        s = socket.create_connection(("127.0.0.1", port_of(core)), timeout=WAIT)
        s.sendall(frame(keyword))
        poll_until(server, lambda r: r.newly_connected_expected_clients, "the client")
        assert read_frame(s) == b"OK"
    # Destroyed: the client is told (berth's shutdown frame, then the end of the connection).
    s.settimeout(WAIT)
    read_to_end(s)
    assert "THERE ARE CREATED 1 GOOD GATE CONNECTIONS" in capsys.readouterr().out
    s.close()


def test_asock_io_core_connect_takes_listen_num_as_fi_s_inline_example_passes_it():
    core = ASockIOCore({gate()})
    with fi.asock_io_core_connect(core, True, listen_num=1000) as server:
        assert server.gates_addresses


# --- 2. settings --------------------------------------------------------------------------------
def accepted_socket_options(peer_port: int):
    """TCP_NODELAY of this process's own socket connected to 127.0.0.1:peer_port (the engine's
    accepted one), read through a duplicate of its descriptor."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            s = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        try:
            if s.type == socket.SOCK_STREAM and s.family == socket.AF_INET and s.getpeername()[1] == peer_port:
                return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        except OSError:
            pass
        finally:
            s.close()
    raise AssertionError("no socket connected to port {}".format(peer_port))


@pytest.mark.parametrize("nodelay", [False, True])
def test_use_nodelay_inet_sets_tcp_nodelay_on_accepted_connections(nodelay):
    core = ASockIOCore({gate()})
    if nodelay:
        core.use_nodelay_inet = True  # FI's default is off
    core.listen()
    expect(core, b"n")
    s = socket.create_connection(("127.0.0.1", port_of(core)), timeout=WAIT)
    s.sendall(frame(b"n"))
    poll_until(core, lambda r: r.newly_connected_expected_clients, "the client")
    assert bool(accepted_socket_options(s.getsockname()[1])) is nodelay
    s.close()
    core.close(0.1)


def test_socket_read_fixed_buffer_size_is_the_read_size():
    core = ASockIOCore({gate()})
    core.use_speed_optimized_socket_read = True
    core.socket_read_fixed_buffer_size.result = 4096
    core.raw_checker_for_new_incoming_connections = lambda c, conn: True
    core.unknown_clients_are_allowed = True
    core.need_to_auto_check_incoming_raw_connection = True
    core.listen()
    s = socket.create_connection(("127.0.0.1", port_of(core)), timeout=WAIT)
    body = os.urandom(300_000)
    s.sendall(body)
    (client_id,) = poll_until(core, lambda r: r.newly_connected_unknown_clients).newly_connected_unknown_clients
    pieces = list(core.get_messages_from_client(client_id))
    while sum(map(len, pieces)) < len(body):
        core.io_iteration(0.05)
        pieces += list(core.get_messages_from_client(client_id))
    assert b"".join(pieces) == body
    assert max(map(len, pieces)) <= 4096, max(map(len, pieces))
    s.close()
    core.close(0.1)


SHARING = r"""
import sys, time
from berth.fi import *
core = ASockIOCore({ConnectionSettings(ConnectionDirectionRole.server, ("127.0.0.1", int(sys.argv[1])), b"g")})
core.reuse_gate_port = sys.argv[2] == "1"
print(core.listen(), flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("reuse", [True, False])
def test_reuse_gate_port_lets_a_second_process_share_the_port(reuse):
    port = free_port()
    core = ASockIOCore({gate(port)})
    core.reuse_gate_port = reuse
    assert core.listen() == 1
    other = subprocess.Popen([sys.executable, "-c", SHARING, str(port), "1" if reuse else "0"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = other.stdout.readline()
        assert line.strip() == ("1" if reuse else "0"), (line, other.stderr.read() if other.poll() is not None else "")
    finally:
        other.stdin.close()
        other.wait(WAIT)
        core.close(0.1)


def test_should_get_client_addr_info_on_connection_fills_addr_info_and_host_names():
    seen = {}

    class Recorder(InlineProcessor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen[self.client_id] = (self.addr_info, self.host_names)

    for asked in (True, False):
        core = ASockIOCore({gate()})
        core.should_get_client_addr_info_on_connection = asked  # FI's default: True
        core.raw_checker_for_new_incoming_connections = lambda c, conn: True
        core.unknown_clients_are_allowed = True
        core.need_to_auto_check_incoming_raw_connection = True
        core.class_for_unknown_clients_inline_processing = Recorder
        core.listen()
        s = socket.create_connection(("127.0.0.1", port_of(core)), timeout=WAIT)
        (client_id,) = poll_until(core, lambda r: r.newly_connected_unknown_clients).newly_connected_unknown_clients
        connection = core.get_client_info(client_id).get_connection()
        assert connection.addr.result == s.getsockname()
        if asked:
            assert connection.addr_info and connection.addr_info[0][4][0] == "127.0.0.1"
            assert connection.host_names[2] == ["127.0.0.1"]
            assert seen[client_id] == (connection.addr_info, connection.host_names)
        else:
            assert connection.addr_info is None and seen[client_id] == (None, None)
        s.close()
        core.close(0.1)


def test_unknown_clients_are_allowed_decides_what_happens_to_a_raw_connection():
    for allowed in (False, True):
        core = ASockIOCore({gate()})
        core.raw_checker_for_new_incoming_connections = lambda c, conn: True
        core.need_to_auto_check_incoming_raw_connection = True
        if allowed:
            core.unknown_clients_are_allowed = True  # FI's default: False
        core.listen()
        s = socket.create_connection(("127.0.0.1", port_of(core)), timeout=WAIT)
        s.sendall(b"raw bytes")
        if allowed:
            r = poll_until(core, lambda r: r.clients_have_data_to_read)
            (client_id,) = r.newly_connected_unknown_clients
            assert b"".join(core.get_messages_from_client(client_id)) == b"raw bytes"
            assert core.get_client_info(client_id).this_is_unknown_client
        else:
            # Closed without a word, and the program hears of nothing.
            done = []
            t = threading.Thread(target=lambda: done.append(read_until_closed(s)))
            t.start()
            deadline = time.time() + WAIT
            while t.is_alive() and time.time() < deadline:
                r = core.io_iteration(0.02)
                assert not any(r._sets()), vars(r)
            t.join(0)
            assert done == [b""]
        s.close()
        core.close(0.1)


# --- 3. listen() --------------------------------------------------------------------------------
def test_listen_returns_the_number_of_gates_it_opened():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = gate(taken.getsockname()[1])
    core = ASockIOCore({gate(), busy})
    try:
        assert core.listen() == 1
        assert core.faulty_connection_settings == {busy}
        assert busy not in core.gates_connections_settings
    finally:
        core.close(0.1)
        taken.close()


def test_asock_io_core_connect_raises_when_no_gate_opens():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    core = ASockIOCore({gate(taken.getsockname()[1])})
    try:
        with pytest.raises(fi.ThereAreNoGateConections):
            with fi.asock_io_core_connect(core, True):
                raise AssertionError("the body must not run")
        # Not asked to have gates (a client-only core): no gate is fine.
        with fi.asock_io_core_connect(ASockIOCore(set())) as client_core:
            assert client_core.gates_addresses == []
    finally:
        taken.close()


# --- 4. raw connections decided per connection ------------------------------------------------
class RawFor:
    """A checker that calls raw the connections from the given local ports."""

    def __init__(self):
        self.ports = set()
        self.asked = []

    def __call__(self, core, connection_info):
        self.asked.append(connection_info)
        return connection_info.addr.result[1] in self.ports


def test_the_raw_checker_decides_each_connection():
    checker = RawFor()
    core = ASockIOCore({gate()})
    core.raw_checker_for_new_incoming_connections = checker
    core.unknown_clients_are_allowed = True
    core.listen()
    core.need_to_auto_check_incoming_raw_connection = True  # after listen, as FI's examples do
    svc_id = expect(core, b"svc")
    port = port_of(core)
    http = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    checker.ports.add(http.getsockname()[1])
    framed = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    http.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    framed.sendall(frame(b"svc") + frame(b"hello"))
    r = poll_until(core, lambda r: len(r.clients_have_data_to_read) == 2, "both clients' data")
    (http_id,) = r.newly_connected_unknown_clients
    assert r.newly_connected_expected_clients == {svc_id}
    assert len(checker.asked) == 2
    assert all(c.conn.result.family == socket.AF_INET for c in checker.asked)
    assert b"".join(core.get_messages_from_client(http_id)) == b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    assert list(core.get_messages_from_client(svc_id)) == [b"hello"]
    assert core.check_is_client_is_in_raw_connection_mode(http_id)
    assert not core.check_is_client_is_in_raw_connection_mode(svc_id)
    info = core.get_client_info(http_id)
    assert info.connection_settings.keyword.startswith(b"UNKNOWN CLIENT: ")
    # A raw connection's output is written as it is.
    core.send_message_to_client(http_id, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")
    core.send_message_to_client(svc_id, b"framed")
    poll_until(core, lambda r: {http_id, svc_id} <= r.clients_with_empty_output_fifo, "the answers written")
    assert read_exact(http, 40) == b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
    assert read_frame(framed) == b"OK"
    assert read_frame(framed) == b"framed"
    http.close()
    framed.close()
    core.close(0.1)


def test_curl_gets_http_from_a_core_whose_checker_calls_it_raw():
    core = ASockIOCore({gate()})
    core.raw_checker_for_new_incoming_connections = lambda c, conn: True
    core.unknown_clients_are_allowed = True
    core.listen()
    core.need_to_auto_check_incoming_raw_connection = True
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            r = core.io_iteration(0.02)
            for client_id in r.clients_have_data_to_read:
                if b"\r\n\r\n" in b"".join(core.get_messages_from_client(client_id)):
                    core.send_message_to_client(
                        client_id, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
                    core.mark_client_connection_as_ready_to_be_closed(client_id)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        out = subprocess.run(["curl", "-sS", "-m", "10", "http://127.0.0.1:{}/".format(port_of(core))],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout == "hello"
    finally:
        stop.set()
        t.join(WAIT)
        core.close(0.1)


# --- 5. lists taken at call time ----------------------------------------------------------------
def connected_pair(keyword=b"peer"):
    core = ASockIOCore({gate()})
    core.listen()
    client_id = expect(core, keyword)
    s = socket.create_connection(("127.0.0.1", port_of(core)), timeout=WAIT)
    s.sendall(frame(keyword))
    poll_until(core, lambda r: r.newly_connected_expected_clients, "the client")
    assert read_frame(s) == b"OK"
    return core, client_id, s


def test_send_messages_takes_a_list_or_tuple_as_it_is_at_the_call():
    core, client_id, s = connected_pair()
    output_list = [b"one", b"two"]
    core.send_messages_to_client(client_id, output_list)
    del output_list[:]  # as FI's HTTP server does right after sending
    output_list.append(b"not sent")
    core.send_messages_to_client(client_id, (b"three",))
    poll_until(core, lambda r: client_id in r.clients_with_empty_output_fifo, "the output written")
    assert [read_frame(s) for _ in range(3)] == [b"one", b"two", b"three"]
    with pytest.raises(TypeError, match="must be bytes"):
        core.send_messages_to_client(client_id, [b"fine", "text"])
    s.close()
    core.close(0.1)


# --- 6. sending after ready-to-be-closed ------------------------------------------------------
def test_what_is_sent_after_ready_to_be_closed_is_written_then_the_connection_closes():
    core, client_id, s = connected_pair()
    core.send_message_to_client(client_id, b"before")
    core.mark_client_connection_as_ready_to_be_closed(client_id)
    core.send_message_to_client(client_id, b"after")
    core.send_messages_to_client(client_id, [b"and a list"])
    poll_until(core, lambda r: client_id in r.clients_with_disconnected_connection, "the close")
    assert [read_frame(s) for _ in range(3)] == [b"before", b"after", b"and a list"]
    assert read_to_end(s) == b""
    with pytest.raises(SimpleNetworkError, match="disconnected"):
        core.send_message_to_client(client_id, b"too late")
    s.close()
    core.close(0.1)


# --- 7. unexpected named clients ------------------------------------------------------------
def test_an_unexpected_client_is_held_unreported_until_its_keyword_is_added():
    core = ASockIOCore({gate()})
    core.listen()
    port = port_of(core)
    carol = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    carol.sendall(frame(b"carol") + frame(b"early"))
    for _ in range(20):
        r = core.io_iteration(0.02)
        assert not any(r._sets()), vars(r)
    assert read_frame(carol) == b"OK"
    carol_id = expect(core, b"carol")
    r = poll_until(core, lambda r: r.newly_connected_expected_clients)
    assert r.newly_connected_expected_clients == {carol_id}
    assert carol_id in r.clients_have_data_to_read
    assert list(core.get_messages_from_client(carol_id)) == [b"early"]
    carol.close()
    core.close(0.1)


def test_an_unexpected_client_that_leaves_is_never_heard_of():
    core = ASockIOCore({gate()})
    core.listen()
    known_id = expect(core, b"known")
    port = port_of(core)
    stranger = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    stranger.sendall(frame(b"stranger") + frame(b"hi"))
    seen = berth.fi.IoIterationResult()
    for _ in range(20):
        seen.update(core.io_iteration(0.02))
    assert read_frame(stranger) == b"OK"
    stranger.close()
    known = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    known.sendall(frame(b"known"))
    seen.update(poll_until(core, lambda r: r.newly_connected_expected_clients))
    known.close()
    seen.update(poll_until(core, lambda r: r.clients_with_disconnected_connection))
    # Only the expected client, connected and gone; its info outlives its connection.
    assert seen.newly_connected_unknown_clients == set()
    assert seen.clients_with_disconnected_connection == {known_id}
    assert core.get_client_info(known_id).connection_settings.keyword == b"known"
    core.close(0.1)


def test_unexpected_clients_are_refused_when_not_allowed():
    core = ASockIOCore({gate()})
    core.unexpected_clients_are_allowed = False
    core.listen()
    s = socket.create_connection(("127.0.0.1", port_of(core)), timeout=WAIT)
    s.sendall(frame(b"stranger"))
    got = []
    t = threading.Thread(target=lambda: got.append(read_to_end(s)))
    t.start()
    while t.is_alive():
        assert not any(core.io_iteration(0.02)._sets())
    # Never OK: berth's refusal frame (a control frame), then the end.
    (length,) = struct.unpack("<Q", got[0][:8])
    assert length >> 63 and b"not-expected" in got[0]
    s.close()
    core.close(0.1)


def test_what_a_client_sent_before_it_left_can_still_be_read():
    core, client_id, s = connected_pair()
    s.sendall(frame(b"last words"))
    s.close()
    r = poll_until(core, lambda r: client_id in r.clients_with_disconnected_connection)
    assert client_id in r.clients_have_data_to_read
    assert list(core.get_messages_from_client(client_id)) == [b"last words"]
    core.remove_client(client_id)
    with pytest.raises(KeyError):
        core.get_client_info(client_id)
    core.close(0.1)
