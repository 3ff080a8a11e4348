#!/usr/bin/env python3
"""`berth msg bench` against an independent load generator on the same server in the same run,
as bench/wrk_agreement.py does for HTTP (BENCHMARKS.md).

The other generator is peers/msgload (Go, standard library only, written from
docs/msg-protocol.md; it shares no code with berth), built here with `go build` into
--build-dir. Both verify every echoed byte.

Usage: python3 bench/msg_agreement.py [--berth target/release/berth] [--duration 10]
                                      [--sizes 64,64k] [--connections 200] [--servers berth,asyncio]
  e.g. python3 bench/msg_agreement.py --duration 2 --sizes 64      (a smoke run)

Servers, each started once on core 0: berth (`berth msg serve --listen tcp://127.0.0.1:PORT`)
and asyncio (peers/msg_asyncio_echo.py, slow enough that it, not the generator, is the
bottleneck). For each server and size, three rounds alternating which generator goes first
(msgload, bench; bench, msgload; msgload, bench), both on core 1 with one thread
(`berth msg bench -t 1`, msgload with GOMAXPROCS=1), the same connections and window. Prints
each one's messages/s and its own CPU time per message (getrusage of the finished generator),
and the server's CPU per message from /proc. Needs go and taskset; bounded (about
servers x sizes x 6 x duration).
"""
import argparse, json, os, resource, shutil, signal, socket, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid):
    """utime+stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def timed(argv, env=None, timeout=120):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run(["taskset", "-c", "1"] + argv, capture_output=True, text=True, timeout=timeout, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return run, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def build_msgload(build_dir):
    go = shutil.which("go")
    if not go:
        sys.exit("go not found (apt-get install golang-go): msgload cannot be built")
    os.makedirs(build_dir, exist_ok=True)
    out = os.path.abspath(os.path.join(build_dir, "msgload"))
    subprocess.run([go, "build", "-o", out, "."], cwd=os.path.join(ROOT, "peers", "msgload"), check=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default="target/release/berth")
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--sizes", default="64,64k")
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--servers", default="berth,asyncio")
    ap.add_argument("--build-dir", default="target/lab-peers")
    args = ap.parse_args()
    if not shutil.which("taskset"):
        sys.exit("taskset not found (apt-get install util-linux)")
    msgload = build_msgload(args.build_dir)
    berth = os.path.abspath(args.berth)
    commands = {
        "berth": lambda port: [berth, "msg", "serve", "--listen", f"tcp://127.0.0.1:{port}"],
        "asyncio": lambda port: [sys.executable, os.path.join(ROOT, "peers", "msg_asyncio_echo.py"), "--port", str(port)],
    }
    rows = []
    for name in args.servers.split(","):
        port = free_port()
        server = subprocess.Popen(["taskset", "-c", "0"] + commands[name](port), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.time() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if time.time() > deadline:
                        sys.exit(f"{name} did not listen on {port}")
                    time.sleep(0.05)
            for size in args.sizes.split(","):
                window = []

                def go_load():
                    env = dict(os.environ, GOMAXPROCS="1")
                    run, cpu = timed([msgload, "-addr", f"127.0.0.1:{port}", "-s", size, "-c", str(args.connections),
                                      "-d", f"{args.duration}s", "-json"], env=env)
                    r = json.loads(run.stdout)
                    return r["msgs_per_sec"], r["messages"], r["error_total"], cpu

                def bench():
                    run, cpu = timed([berth, "msg", "bench", f"tcp://127.0.0.1:{port}", "-s", size, "-c",
                                      str(args.connections), "-t", "1", "-d", f"{args.duration}", "--json"])
                    r = json.loads(run.stdout)
                    return r["msgs_per_sec"], r["messages"], sum(r["errors"].values()), cpu

                for rnd, order in enumerate([(go_load, bench), (bench, go_load), (go_load, bench)], 1):
                    res = {}
                    for f in order:
                        s_before = proc_cpu(server.pid)
                        rate, n, errs, cpu = f()
                        s_cpu = proc_cpu(server.pid) - s_before
                        res[f.__name__] = (rate, cpu * 1e6 / max(n, 1), errs, s_cpu * 1e6 / max(n, 1))
                    (m, mc, me, ms), (b, bc, be, bs) = res["go_load"], res["bench"]
                    row = dict(server=name, size=size, round=rnd, msgload=m, bench=b, ratio=b / m if m else float("nan"),
                               msgload_cpu=mc, bench_cpu=bc, msgload_errors=me, bench_errors=be,
                               server_cpu_msgload=ms, server_cpu_bench=bs)
                    rows.append(row)
                    print(f"{name} {size} round {rnd}: msgload {m:,.0f}/s ({mc:.2f} us CPU/msg, {me} errors; "
                          f"server {ms:.2f} us/msg)  bench {b:,.0f}/s ({bc:.2f} us CPU/msg, {be} errors; "
                          f"server {bs:.2f} us/msg)  bench/msgload {row['ratio']:.2f}", flush=True)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(10)
    print()
    print("| server | size | round | msgload msgs/s | bench msgs/s | bench ÷ msgload | msgload CPU µs/msg "
          "| bench CPU µs/msg | server CPU µs/msg (msgload / bench) | errors (msgload / bench) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['server']} | {r['size']} | {r['round']} | {r['msgload']:,.0f} | {r['bench']:,.0f} | {r['ratio']:.2f} "
              f"| {r['msgload_cpu']:.2f} | {r['bench_cpu']:.2f} | {r['server_cpu_msgload']:.2f} / {r['server_cpu_bench']:.2f} "
              f"| {r['msgload_errors']} / {r['bench_errors']} |")


if __name__ == "__main__":
    sys.exit(main())
