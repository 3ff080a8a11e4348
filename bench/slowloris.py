#!/usr/bin/env python3
"""Slowloris against berth: N connections each dribbling one header byte per second, while a
normal client keeps making requests; reports the normal requests' worst and median latency.

Usage: python3 bench/slowloris.py [--connections 1000] [--seconds 20] [--berth target/release/berth]
"""
import argparse, importlib.util, os, signal, socket, statistics, subprocess, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("http_bench", os.path.join(HERE, "http.py"))
http_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(http_bench)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--berth", default="target/release/berth")
    args = ap.parse_args()
    port = http_bench.free_port()
    # A header timeout longer than the run, so the dribblers stay for the whole of it.
    server = subprocess.Popen(["taskset", "-c", "0", os.path.abspath(args.berth), "serve", "-p", str(port), "-A", "1",
                               "--header-timeout", str(args.seconds + 30)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        http_bench.wait_ready(port)
        dribblers = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.connections)]
        head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slowloris: " + b"a" * 1000
        stop = threading.Event()

        def dribble():
            i = 0
            while not stop.is_set():
                for s in dribblers:
                    s.send(head[i:i + 1])
                i += 1
                stop.wait(1.0)

        t = threading.Thread(target=dribble)
        t.start()
        latencies = []
        end = time.time() + args.seconds
        while time.time() < end:
            started = time.perf_counter()
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            assert data.startswith(b"HTTP/1.1 200"), data[:40]
            latencies.append((time.perf_counter() - started) * 1000)
            time.sleep(0.05)
        stop.set()
        t.join()
        alive = sum(1 for s in dribblers if s.fileno() != -1)
        print(f"slowloris: {args.connections} connections dribbling 1 byte/s for {args.seconds} s ({alive} open)")
        print(f"  normal requests: {len(latencies)}, median {statistics.median(latencies):.2f} ms, "
              f"worst {max(latencies):.2f} ms (target: every one under 1000 ms)")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()


if __name__ == "__main__":
    main()
