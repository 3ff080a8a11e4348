#!/usr/bin/env python3
"""Memory per idle keep-alive connection: berth (evloop, or the models listed) against nginx,
in one run.

Usage: python3 bench/idle_memory.py [--connections 10000] [--berth target/release/berth]
                                    [--model-list evloop,uring] [--rounds 2]

For each server: start it, warm it up (1,000 requests on short connections, so that fixed
costs that fill in with the first requests, like io_uring's provided receive buffers, which
the kernel takes in ring order, do not count as a per-connection cost), note its RSS (all its processes, from /proc), open N connections
that each make one keep-alive request and then sit idle, note the RSS again, and report
(after - before) / N. The hard limit on open files bounds N (each side holds N sockets).
Beside it, the kernel's slab memory (`Slab:` in /proc/meminfo, the whole machine's) before and
after, per connection: it includes the client's sockets and both sides' TCP state, the same
for every server, so the differences between servers are theirs (epoll items, io_uring
requests armed per connection).
"""
import argparse, os, re, shutil, signal, socket, subprocess, sys, tempfile, time

import importlib.util

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/http.py's helpers, loaded by path (its name would shadow the stdlib's `http`).
_spec = importlib.util.spec_from_file_location("http_bench", os.path.join(HERE, "http.py"))
http_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(http_bench)
free_port, wait_ready, rss_kb = http_bench.free_port, http_bench.wait_ready, http_bench.rss_kb


def slab_kb():
    with open("/proc/meminfo") as f:
        return int(re.search(r"^Slab:\s+(\d+) kB", f.read(), re.M).group(1))


def measure(name, argv, port, n, cwd):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
    try:
        wait_ready(port)
        time.sleep(0.3)
        request = b"GET /hello/world HTTP/1.1\r\nHost: x\r\n\r\n"
        for _ in range(1000):
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(request)
                got = b""
                while b"Hello, World!" not in got:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
        time.sleep(0.3)
        before, slab_before = rss_kb(proc.pid), slab_kb()
        conns = []
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
        after, slab_after = rss_kb(proc.pid), slab_kb()
        for s in conns:
            s.close()
        per = (after - before) * 1024 / n
        slab = (slab_after - slab_before) * 1024 / n
        print(f"{name:8} RSS {before} KiB -> {after} KiB with {n} idle connections: {per:.0f} bytes per connection;"
              f" kernel slab {slab:.0f} bytes per connection (both sides)", flush=True)
        return per
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=10000)
    ap.add_argument("--berth", default="target/release/berth")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model-list", default="evloop", help="berth models to measure, comma-separated")
    args = ap.parse_args()
    if not shutil.which("nginx"):
        sys.exit("nginx not found: apt-get install nginx-light")
    work = tempfile.mkdtemp(prefix="berth-idle-")
    models = [m for m in args.model_list.split(",") if m]
    results = {"nginx": [], **{m: [] for m in models}}
    for rnd in range(args.rounds):
        nport = free_port()
        conf = open(os.path.join(HERE, "..", "peers", "nginx.conf.in")).read().replace("@PORT@", str(nport)).replace("@DIR@", work)
        with open(os.path.join(work, "nginx.conf"), "w") as f:
            f.write(conf)
        results["nginx"].append(measure("nginx", ["nginx", "-c", os.path.join(work, "nginx.conf"), "-p", work], nport,
                                        args.connections, work))
        for model in models:
            bport = free_port()
            berth = [os.path.abspath(args.berth), "serve", "--model", model, "-p", str(bport), "-A", "1", "-w", "1",
                     "-C", "20000"]
            results[model].append(measure(model, berth, bport, args.connections, work))
    for rnd in range(args.rounds):
        n = results["nginx"][rnd]
        for model in models:
            b = results[model][rnd]
            print(f"round {rnd + 1}: berth {model} {b:.0f} B/conn, nginx {n:.0f} B/conn, berth/nginx {b / n:.2f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
