"""berth.Core, the engine under berth.fi, over real sockets: listen, expect, connect, the five
lists of io_iteration, names, pending output, and errors a Python caller can make."""

import errno
import socket
import struct
import time

import pytest

import berth

WAIT = 10.0


def frame(payload: bytes) -> bytes:
    return struct.pack("<Q", len(payload)) + payload


def poll_until(core, pick, within=WAIT):
    """io_iteration until `pick(result)` is true; that result."""
    deadline = time.time() + within
    while time.time() < deadline:
        result = core.io_iteration(0.05)
        if pick(result):
            return result
    raise AssertionError("nothing came")


def test_expected_and_unknown_clients_are_told_apart_and_named():
    core = berth.Core()
    port = int(core.listen("tcp://127.0.0.1:0").rsplit(":", 1)[1])
    core.expect(b"alice")
    a = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    a.sendall(frame(b"alice"))
    expected, unknown, *_ = poll_until(core, lambda r: r[0])
    (alice,) = expected
    assert core.name(alice) == b"alice" and core.client(b"alice") == alice
    b = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    b.sendall(frame(b"\xff\x00bytes"))
    _, unknown, *_ = poll_until(core, lambda r: r[1])
    (other,) = unknown
    assert core.name(other) == b"\xff\x00bytes"
    assert core.client_count() == 2
    a.sendall(frame(b"one") + frame(b"two"))
    poll_until(core, lambda r: alice in r[3])
    assert core.messages(alice) == [b"one", b"two"]
    assert core.messages(alice) == []
    a.close()
    poll_until(core, lambda r: alice in r[2])
    # A departed client's id finds nothing.
    assert core.send_message(alice, b"x") is False
    assert core.name(alice) is None
    core.shutdown(0.5)


def test_bad_arguments_are_python_errors():
    core = berth.Core()
    with pytest.raises(ValueError):
        core.listen("ftp://127.0.0.1:0")
    with pytest.raises(ValueError):
        core.io_iteration(-1.0)
    with pytest.raises(TypeError):
        core.send_messages(1, 42)
    # Nothing listens on port 1: the errno's own OSError subclass, with the errno.
    with pytest.raises(ConnectionRefusedError) as refused:
        core.connect("tcp://127.0.0.1:1", b"x", 1.0)
    assert refused.value.errno == errno.ECONNREFUSED
    assert "127.0.0.1:1" in str(refused.value)
    # An id that never was: answered as for a departed client.
    assert core.send_message(123456789, b"x") is False
    assert core.pending_output(123456789) == 0


def test_an_address_in_use_is_an_os_error_with_its_errno():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(OSError) as in_use:
            berth.Core().listen("tcp://127.0.0.1:{}".format(port))
        assert in_use.value.errno == errno.EADDRINUSE
        assert "already in use" in str(in_use.value)
    finally:
        taken.close()


def test_a_refusal_is_a_connection_error_with_its_reason():
    server = berth.Core()
    endpoint = server.listen("tcp://127.0.0.1:0")
    first = berth.Core()
    second = berth.Core()
    import threading

    stop = threading.Event()

    def serve():
        while not stop.is_set():
            server.io_iteration(0.02)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        first.connect(endpoint, b"bob", 5.0)
        with pytest.raises(ConnectionError, match="name-taken"):
            second.connect(endpoint, b"bob", 5.0)
    finally:
        stop.set()
        t.join(WAIT)
    server.shutdown(0.2)


def test_sent_messages_are_the_callers_bytes_as_they_were_at_the_call():
    """`send_message` queues a large `bytes` without copying it (issue 30): the engine keeps it
    alive until written, whatever the caller drops; a `bytearray` is taken as it is at the call,
    whatever the caller changes after."""
    core = berth.Core()
    port = int(core.listen("tcp://127.0.0.1:0").rsplit(":", 1)[1])
    c = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    c.sendall(frame(b"reader"))
    _, (reader,), *_ = poll_until(core, lambda r: r[1])
    big = bytes(range(256)) * 4096  # 1 MiB
    assert core.send_message(reader, big)
    del big
    mutable = bytearray(b"m" * 100_000)
    assert core.send_message(reader, mutable)
    mutable[:] = b"changed"
    assert core.send_messages(reader, [b"a" * 50_000, bytes(range(256)) * 100]) is True
    want = [b"OK", bytes(range(256)) * 4096, b"m" * 100_000, b"a" * 50_000, bytes(range(256)) * 100]
    got = []
    buf = b""
    c.setblocking(False)
    deadline = time.time() + WAIT
    while len(got) < len(want) and time.time() < deadline:
        core.io_iteration(0.01)
        try:
            buf += c.recv(1 << 20)
        except BlockingIOError:
            continue
        while len(buf) >= 8 and len(buf) >= 8 + struct.unpack("<Q", buf[:8])[0]:
            n = struct.unpack("<Q", buf[:8])[0]
            got.append(buf[8 : 8 + n])
            buf = buf[8 + n :]
    assert [len(m) for m in got] == [len(m) for m in want]
    assert got == want
    core.shutdown(0.5)
