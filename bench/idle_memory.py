#!/usr/bin/env python3
"""Memory per idle keep-alive connection: berth (evloop) against nginx, in one run.

Usage: python3 bench/idle_memory.py [--connections 10000] [--berth target/release/berth]

For each server: start it, note its RSS (all its processes, from /proc), open N connections
that each make one keep-alive request and then sit idle, note the RSS again, and report
(after - before) / N. The hard limit on open files bounds N (each side holds N sockets).
"""
import argparse, os, re, shutil, signal, socket, subprocess, sys, tempfile, time

import importlib.util

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/http.py's helpers, loaded by path (its name would shadow the stdlib's `http`).
_spec = importlib.util.spec_from_file_location("http_bench", os.path.join(HERE, "http.py"))
http_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(http_bench)
free_port, wait_ready, rss_kb = http_bench.free_port, http_bench.wait_ready, http_bench.rss_kb


def measure(name, argv, port, n, cwd):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
    try:
        wait_ready(port)
        time.sleep(0.3)
        before = rss_kb(proc.pid)
        conns = []
        request = b"GET /hello/world HTTP/1.1\r\nHost: x\r\n\r\n"
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(request)
            got = b""
            while b"Hello, World!" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    raise SystemExit(f"{name}: connection closed early")
                got += chunk
            conns.append(s)
        time.sleep(1.0)
        after = rss_kb(proc.pid)
        for s in conns:
            s.close()
        per = (after - before) * 1024 / n
        print(f"{name:8} RSS {before} KiB -> {after} KiB with {n} idle connections: {per:.0f} bytes per connection",
              flush=True)
        return per
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=10000)
    ap.add_argument("--berth", default="target/release/berth")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not shutil.which("nginx"):
        sys.exit("nginx not found: apt-get install nginx-light")
    work = tempfile.mkdtemp(prefix="berth-idle-")
    results = {"nginx": [], "berth": []}
    for rnd in range(args.rounds):
        nport, bport = free_port(), free_port()
        conf = open(os.path.join(HERE, "..", "peers", "nginx.conf.in")).read().replace("@PORT@", str(nport)).replace("@DIR@", work)
        with open(os.path.join(work, "nginx.conf"), "w") as f:
            f.write(conf)
        results["nginx"].append(measure("nginx", ["nginx", "-c", os.path.join(work, "nginx.conf"), "-p", work], nport,
                                        args.connections, work))
        berth = [os.path.abspath(args.berth), "serve", "-p", str(bport), "-A", "1", "-w", "1", "-C", "20000"]
        results["berth"].append(measure("berth", berth, bport, args.connections, work))
    for rnd in range(args.rounds):
        n, b = results["nginx"][rnd], results["berth"][rnd]
        print(f"round {rnd + 1}: berth {b:.0f} B/conn, nginx {n:.0f} B/conn, berth/nginx {b / n:.2f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
