"""An HTTP/3 client on aioquic, for berth-cli's tests/h3.rs (a real, independent QUIC and
HTTP/3 stack against berth's).

    python client.py HOST PORT CA_PEM < requests.json > responses.json

stdin is a JSON list of requests, sent all at once as concurrent streams of ONE connection:
    {"method": "GET", "path": "/", "headers": [["range", "bytes=0-9"]], "body": "text"}
stdout is a JSON list of responses, in the same order:
    {"status": 200, "headers": [[name, value], ...], "length": N, "sha256": hex,
     "body": text (the first 64 KiB, decoded leniently), "error": null or why it failed,
     "peer_cn": the common name of the certificate the server presented}

With --announce, {"started": stream} is printed when the first answer's head comes (a test
can then act while the answers are under way).

With --stop N the first request is read until N bytes of its body have come, then stopped
(STOP_SENDING, H3_REQUEST_CANCELLED), and a GET /hello/world is sent on the same connection:
its response is added at the end of the list.

With --vanish N the first request is read until N bytes of its body have come, then the
process closes its UDP socket and exits without a word (no CONNECTION_CLOSE): a client that
vanishes mid-stream. It prints {"vanished": bytes} first.
"""

import argparse
import asyncio
import hashlib
import json
import os
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset

KEEP = 64 * 1024


class Response:
    def __init__(self):
        self.status = None
        self.headers = []
        self.length = 0
        self.hash = hashlib.sha256()
        self.body = bytearray()
        self.done = asyncio.get_running_loop().create_future()

    def to_json(self, error=None):
        return {
            "status": self.status,
            "headers": self.headers,
            "length": self.length,
            "sha256": self.hash.hexdigest(),
            "body": self.body.decode("utf-8", "replace"),
            "error": error,
        }


class H3(H3Connection):
    """aioquic's HTTP/3 connection, told which requests were HEAD: aioquic 1.7 checks every
    response's content-length against its DATA, and a HEAD response rightly has the length
    of the body it does not carry (RFC 9110 §9.3.2), which aioquic takes for an error and
    closes the connection over."""

    def __init__(self, quic):
        super().__init__(quic)
        self.head_streams = set()

    def _check_content_length(self, stream):
        if stream.stream_id not in self.head_streams:
            super()._check_content_length(stream)


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3(self._quic)
        self.responses = {}
        self.vanish_at = None
        self.announce = False
        self.stop_at = None
        self.after_stop = None

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            why = f"connection closed: {event.error_code:#x} {event.reason_phrase}"
            for r in self.responses.values():
                if not r.done.done():
                    r.done.set_result(why)
            return
        if isinstance(event, StreamReset):
            r = self.responses.get(event.stream_id)
            if r is not None and not r.done.done():
                r.done.set_result(f"stream reset: {event.error_code:#x}")
        for ev in self.h3.handle_event(event):
            r = self.responses.get(getattr(ev, "stream_id", None))
            if r is None:
                continue
            if isinstance(ev, HeadersReceived):
                if self.announce:
                    self.announce = False
                    print(json.dumps({"started": ev.stream_id}), flush=True)
                if r.status is None:
                    for name, value in ev.headers:
                        if name == b":status":
                            r.status = int(value)
                        else:
                            r.headers.append([name.decode(), value.decode()])
                else:
                    # Trailers.
                    for name, value in ev.headers:
                        r.headers.append([name.decode(), value.decode()])
            elif isinstance(ev, DataReceived):
                r.length += len(ev.data)
                r.hash.update(ev.data)
                if len(r.body) < KEEP:
                    r.body += ev.data[: KEEP - len(r.body)]
                if self.stop_at is not None and r.length >= self.stop_at:
                    self.stop_at = None
                    self._quic.stop_stream(ev.stream_id, 0x10C)
                    r.done.set_result("stopped by the client")
                    self.after_stop = self.send({"path": "/hello/world"}, self.authority)
                    self.transmit()
                if self.vanish_at is not None and r.length >= self.vanish_at:
                    # Gone without a word: the socket closes, nothing is sent.
                    print(json.dumps({"vanished": r.length}), flush=True)
                    self._transport.close()
                    os._exit(0)
            if getattr(ev, "stream_ended", False) and not r.done.done():
                r.done.set_result(None)

    def send(self, req, authority):
        stream = self._quic.get_next_available_stream_id()
        body = req.get("body")
        headers = [
            (b":method", req.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", req["path"].encode()),
        ]
        headers += [(k.lower().encode(), v.encode()) for k, v in req.get("headers", [])]
        if req.get("method") == "HEAD":
            self.h3.head_streams.add(stream)
        self.h3.send_headers(stream, headers, end_stream=body is None)
        if body is not None:
            self.h3.send_data(stream, body.encode(), end_stream=True)
        r = Response()
        self.responses[stream] = r
        return r


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("ca")
    ap.add_argument("--vanish", type=int, default=None)
    ap.add_argument("--announce", action="store_true")
    ap.add_argument("--stop", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    requests = json.load(sys.stdin)

    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.load_verify_locations(args.ca)
    config.server_name = "localhost"
    config.idle_timeout = args.timeout
    async with connect(
        args.host, args.port, configuration=config, create_protocol=Client
    ) as client:
        client.vanish_at = args.vanish
        client.announce = args.announce
        client.stop_at = args.stop
        authority = f"localhost:{args.port}"
        client.authority = authority
        pending = [client.send(req, authority) for req in requests]
        client.transmit()
        out = []
        # The certificate the handshake verified: a test of certificate reloads reads it.
        cert = client._quic.tls._peer_certificate
        peer_cn = None
        if cert is not None:
            from cryptography.x509.oid import NameOID

            names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
            peer_cn = names[0].value if names else None
        for r in pending:
            try:
                error = await asyncio.wait_for(asyncio.shield(r.done), args.timeout)
                out.append(r.to_json(error))
            except asyncio.TimeoutError:
                out.append(r.to_json("timed out"))
        if client.after_stop is not None:
            r = client.after_stop
            try:
                error = await asyncio.wait_for(asyncio.shield(r.done), args.timeout)
                out.append(r.to_json(error))
            except asyncio.TimeoutError:
                out.append(r.to_json("timed out"))
        for o in out:
            o["peer_cn"] = peer_cn
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
