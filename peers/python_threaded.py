"""Peer for `berth lab`: seed 004's threaded server (a thread per connection on a plain socket),
made a correct HTTP/1.1 keep-alive server so it can be compared with the others: it reads whole
requests (Content-Length bodies) and answers with Content-Length.

Usage: python3 peers/python_threaded.py PORT
"""
import socket
import sys
import threading
import time

from common import SLOW_DONE, SLOW_SECONDS, parse_head, respond, route, wants_close


def handle_connection(conn):
    buf = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            head, buf = buf.split(b"\r\n\r\n", 1)
            method, path, version, headers = parse_head(head)
            length = int(headers.get("content-length", "0"))
            while len(buf) < length:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            body, buf = buf[:length], buf[length:]
            answer = route(method, path, body)
            if answer is None:
                time.sleep(SLOW_SECONDS)
                answer = SLOW_DONE
            close = wants_close(version, headers)
            conn.sendall(respond(*answer, close))
            if close:
                return


def main():
    port = int(sys.argv[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1024)
        print(f"python-threaded listening on 127.0.0.1:{port}", flush=True)
        while True:
            conn, _ = s.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=handle_connection, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
