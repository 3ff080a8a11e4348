"""Memory per idle HTTP/3 connection: berth serving quic:// (evloop, one loop), N aioquic
connections opened, each answered one GET /hello/world and then left idle (kept open); the
server's RSS before and after, over N. Run twice at two N so that the per-connection figure is
the slope, not start-up noise.

    python3 idle.py BERTH_BINARY N1 N2 [SERVE ARGS...]   (needs aioquic, and openssl for the certificate)

SERVE ARGS go to `berth serve` as they are (e.g. `--http3-max-streams 1`).
"""
import asyncio, os, re, socket, subprocess, sys, tempfile, time

from aioquic.asyncio.client import connect
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import HeadersReceived, DataReceived
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration


class Client(QuicConnectionProtocol):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.h3 = H3Connection(self._quic)
        self.done = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event):
        for ev in self.h3.handle_event(event):
            if isinstance(ev, DataReceived) and ev.stream_ended and not self.done.done():
                self.done.set_result(True)
            if isinstance(ev, HeadersReceived) and ev.stream_ended and not self.done.done():
                self.done.set_result(True)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


async def hold(port, ca, n):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.load_verify_locations(ca)
    config.server_name = "localhost"
    config.idle_timeout = 600
    stack = []
    for _ in range(n):
        cm = connect("127.0.0.1", port, configuration=config, create_protocol=Client)
        c = await cm.__aenter__()
        sid = c._quic.get_next_available_stream_id()
        c.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                (b":authority", b"localhost"), (b":path", b"/hello/world")],
                          end_stream=True)
        c.transmit()
        await asyncio.wait_for(c.done, 10)
        stack.append((cm, c))
    return stack


def measure(binary, n, certdir, extra):
    cert, key, ca = (os.path.join(certdir, x) for x in ("cert.pem", "key.pem", "cert.pem"))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]; s.close()
    srv = subprocess.Popen([binary, "serve", "-m", "evloop", "-A", "1", "-w", "1",
                            "--listen", f"quic://127.0.0.1:{port}?cert={cert}&key={key}", *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    srv.stdout.readline()
    time.sleep(0.3)
    async def run():
        # One connection first (buffers and tables the first one allocates), then the rest.
        warm = await hold(port, ca, 1)
        await asyncio.sleep(0.5)
        before = rss_kib(srv.pid)
        held = await hold(port, ca, n)
        await asyncio.sleep(1.0)
        after = rss_kib(srv.pid)
        return before, after, warm + held
    loop = asyncio.new_event_loop()
    before, after, held = loop.run_until_complete(run())
    srv.terminate(); srv.wait()
    loop.close()
    return before, after


binary, n1, n2, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
d = tempfile.mkdtemp()
subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-keyout", os.path.join(d, "key.pem"), "-out", os.path.join(d, "cert.pem"), "-days", "2"],
               check=True, capture_output=True)
res = {}
for n in (n1, n2):
    before, after = measure(binary, n, d, extra)
    res[n] = after - before
    print(f"{n} idle HTTP/3 connections: RSS {before} -> {after} KiB, {1024 * (after - before) / n:.0f} bytes each")
print(f"slope: {1024 * (res[n2] - res[n1]) / (n2 - n1):.0f} bytes per idle HTTP/3 connection")
