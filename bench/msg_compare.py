#!/usr/bin/env python3
"""berth's message server against a native libzmq ROUTER echo, the same echo in pyzmq, and an
asyncio echo server, under `berth msg bench` (seed 003's message-size comparison, redone with
every echo verified), with each server's CPU time per message.

Usage:
  python3 bench/msg_compare.py [--berth-server 'CMD ... {port} ...'] [--bench target/release/berth]
                               [--duration 10] [--rounds 2] [--connections 200]
                               [--max-inflight 1g] [--out DIR] [--build-dir DIR]
  e.g. python3 bench/msg_compare.py --duration 0.5 --rounds 1 --connections 20   (a smoke run)

Servers (each started once, pinned with taskset to --server-core, and stopped at the end):
  berth    --berth-server, a command template whose {port} is filled in
           [default: target/release/berth msg serve --listen tcp://127.0.0.1:{port}]
  zmq      peers/zmq_router_echo.c: libzmq's ROUTER in C (zmq_msg_recv/zmq_msg_send), built
           here with `cc -O2 ... -lzmq` into --build-dir; skipped with a note where cc or
           libzmq's headers are missing (Debian: apt-get install libzmq3-dev)
  pyzmq    peers/zmq_router_echo.py: the same echo in Python + ZeroMQ (pyzmq; skipped with a
           note if pyzmq is missing)
  asyncio  peers/msg_asyncio_echo.py (berth framing on asyncio streams)
A server that cannot start is reported and left out; the others still run.

Shapes, for every server, in --rounds rounds interleaved (round 1: every shape on every
server, then round 2, ...), so drift over time hits every server alike:
  64 B messages at --connections connections: msgs/s
  1k, 64k, 1m, 8760000 and 64m messages: MB/s (10^6 bytes/s), at --connections connections,
    or fewer where connections x size would pass --max-inflight (default 1 GiB): a server
    that holds whole messages (libzmq does) would otherwise need 200 x 64 MiB = 12.5 GiB

The load generator (`berth msg bench`, one thread) runs on --load-core. Each server's CPU time
(utime+stime of all its threads, from /proc/PID/stat before and after each run) is divided by the
messages echoed (verified echo bytes / message size, so echoes cut by the end of a run count for
their part): CPU µs per message. The table gives every round (each with its errors, if any:
a server that breaks at some size shows them instead of a number), and per round the ratios of
berth to each peer, for throughput and for CPU per message (below 1: berth spends less). Every
run's JSON report is written to --out. Needs taskset (util-linux) and python3; bounded: about
(servers x 6 shapes x rounds x duration) plus start-up.
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "peers")

# (label, size argument, metric): the seed's shapes.
SHAPES = [
    ("64 B", "64", "msgs_per_sec"),
    ("1 KiB", "1k", "mb_per_sec"),
    ("64 KiB", "64k", "mb_per_sec"),
    ("1 MiB", "1m", "mb_per_sec"),
    ("8,760,000 B", "8760000", "mb_per_sec"),
    ("64 MiB", "64m", "mb_per_sec"),
]
UNIT = {"msgs_per_sec": "msgs/s", "mb_per_sec": "MB/s"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(core, argv):
    return ["taskset", "-c", str(core)] + argv if core is not None else argv


class Server:
    """One server process (its own process group, so stopping it stops what it started)."""

    def __init__(self, name, argv, zmq, core, log_dir):
        self.name, self.zmq = name, zmq
        self.port = free_port()
        self.argv = [a.replace("{port}", str(self.port)) for a in argv]
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.proc = None
        self.core = core

    def start(self):
        log = open(self.log_path, "w")
        try:
            self.proc = subprocess.Popen(pinned(self.core, self.argv), stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
        except OSError as e:
            return f"cannot start {self.argv[0]}: {e}"
        finally:
            log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited at start ({self.proc.returncode}): {self.log_tail()}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return None
            except OSError:
                time.sleep(0.05)
        self.stop()
        return f"did not listen on 127.0.0.1:{self.port} within 15 s: {self.log_tail()}"

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self):
        try:
            lines = [l for l in open(self.log_path).read().splitlines() if l.strip()]
        except OSError:
            lines = []
        return (lines[-1] if lines else "(no output)") + f" (log: {self.log_path})"

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        self.proc = None


def cpu_seconds(pid):
    """utime+stime of process `pid` (all its threads), in seconds; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None


def build_native_zmq(build_dir):
    """Compiles peers/zmq_router_echo.c; (path, None) or (None, why it cannot be built)."""
    cc = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cc is None:
        return None, "no C compiler (apt-get install gcc libzmq3-dev)"
    os.makedirs(build_dir, exist_ok=True)
    source = os.path.join(PEERS, "zmq_router_echo.c")
    out = os.path.abspath(os.path.join(build_dir, "zmq-router-echo"))
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(source):
        return out, None
    run = subprocess.run([cc, "-O2", "-o", out, source, "-lzmq"], capture_output=True, text=True)
    if run.returncode != 0:
        if "zmq.h" in run.stderr or "-lzmq" in run.stderr:
            return None, "libzmq's headers or library are missing (apt-get install libzmq3-dev)"
        return None, f"{cc} failed: {(run.stderr.strip().splitlines() or ['?'])[-1]}"
    return out, None


def parse_size(s):
    """Bytes from 64, 1k, 64m (1024-based), as `berth msg bench -s` reads them."""
    s = s.lower()
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if scale > 1 else s) * scale


def connections_for(args, size):
    """--connections, capped so that one message per connection fits --max-inflight."""
    return max(1, min(args.connections, parse_size(args.max_inflight) // max(1, parse_size(size))))


def run_bench(args, server, size):
    """One `berth msg bench` run; its JSON report, or a dict with an "error"."""
    argv = [args.bench, "msg", "bench", f"tcp://127.0.0.1:{server.port}", "-s", size,
            "-c", str(connections_for(args, size)), "-t", "1", "-d", str(args.duration),
            "--timeout", args.timeout, "--json"]
    if server.zmq:
        argv.append("--zmq")
    cpu_before = cpu_seconds(server.proc.pid)
    try:
        out = subprocess.run(pinned(args.load_core, argv), capture_output=True, text=True,
                             timeout=args.duration + 120)
    except subprocess.TimeoutExpired:
        return {"error": "the load generator did not finish"}
    cpu_after = cpu_seconds(server.proc.pid)
    try:
        report = json.loads(out.stdout)
    except ValueError:
        return {"error": (out.stderr.strip() or f"exit {out.returncode}").splitlines()[-1]}
    # Exit 1 with a report means nothing was echoed; the report says why, in its errors.
    if cpu_before is not None and cpu_after is not None:
        report["server_cpu_s"] = cpu_after - cpu_before
        # Per message's worth of verified echo bytes: at 64 MiB a run ends with many echoes
        # part way, whose bytes the server has already paid for.
        echoed = report.get("payload_bytes", 0) / max(1, parse_size(size))
        if echoed > 0:
            report["server_cpu_us_per_msg"] = report["server_cpu_s"] * 1e6 / echoed
    return report


def errors_of(report):
    return sum(report.get("errors", {}).values()) if "errors" in report else 0


def fmt(v):
    return f"{v:,.0f}" if v >= 100 else f"{v:,.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth-server", default="target/release/berth msg serve --listen tcp://127.0.0.1:{port}",
                    help="berth's server command; {port} is filled in")
    ap.add_argument("--bench", default="target/release/berth", help="the berth binary that runs `msg bench`")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--max-inflight", default="1g",
                    help="cap on connections x message size (bytes, or with k/m/g)")
    ap.add_argument("--timeout", default="60s", help="msg bench --timeout (no progress for this long is an error)")
    ap.add_argument("--server-core", type=int, default=0)
    ap.add_argument("--load-core", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated servers and/or sizes, e.g. berth,asyncio,64k")
    ap.add_argument("--out", default="target/msg_compare", help="directory for logs and raw JSON")
    ap.add_argument("--build-dir", default="target/lab-peers", help="where the C peer is compiled")
    args = ap.parse_args()

    if "{port}" not in args.berth_server:
        ap.error("--berth-server needs {port} where the port goes")
    try:
        parse_size(args.max_inflight)
    except ValueError:
        ap.error(f"--max-inflight {args.max_inflight!r} is not a size (e.g. 1g, 512m)")
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"{args.bench} is not an executable berth; build it with cargo build --release, or pass --bench")
    cores = os.cpu_count() or 1
    if subprocess.run(["which", "taskset"], capture_output=True).returncode != 0 or cores < 2:
        print("note: not pinning (taskset missing or one core): servers and load share the CPUs", file=sys.stderr)
        args.server_core = args.load_core = None
    os.makedirs(args.out, exist_ok=True)
    only = {s for s in args.only.split(",") if s}

    py = sys.executable or "python3"
    candidates = [
        ("berth", shlex.split(args.berth_server), False),
        ("zmq", ["{native-zmq}", "--port", "{port}"], True),
        ("pyzmq", [py, os.path.join(PEERS, "zmq_router_echo.py"), "--port", "{port}"], True),
        ("asyncio", [py, os.path.join(PEERS, "msg_asyncio_echo.py"), "--port", "{port}"], False),
    ]
    names = {c[0] for c in candidates}
    shapes = [s for s in SHAPES if not (only - names) or s[1] in only]
    servers, skipped = [], {}
    for name, argv, zmq in candidates:
        if only & names and name not in only:
            continue
        if name == "zmq":
            native, why = build_native_zmq(args.build_dir)
            if native is None:
                skipped[name] = why
                continue
            argv = [native] + argv[1:]
        if name == "pyzmq" and subprocess.run([py, "-c", "import zmq"], capture_output=True).returncode != 0:
            skipped[name] = "pyzmq is not installed (pip install pyzmq)"
            continue
        s = Server(name, argv, zmq, args.server_core, args.out)
        why = s.start()
        if why:
            skipped[name] = why
        else:
            servers.append(s)
    for name, why in skipped.items():
        print(f"{name}: skipped: {why}", file=sys.stderr)
    if not servers:
        sys.exit("no server could start")

    results = {}  # (server, size) -> [report, ...]
    try:
        for rnd in range(1, args.rounds + 1):
            for label, size, metric in shapes:
                for s in servers:
                    if not s.alive():
                        report = {"error": f"the server is gone: {s.log_tail()}"}
                    else:
                        report = run_bench(args, s, size)
                    report["round"] = rnd
                    results.setdefault((s.name, size), []).append(report)
                    value = report.get(metric)
                    shown = "failed: " + report["error"] if "error" in report else f"{fmt(value)} {UNIT[metric]}"
                    errs = errors_of(report)
                    print(f"round {rnd}  {label:>12}  {s.name:<8} {shown}"
                          + (f"  ({errs} errors)" if errs else ""), file=sys.stderr, flush=True)
    finally:
        for s in servers:
            s.stop()

    with open(os.path.join(args.out, "msg_compare.json"), "w") as f:
        json.dump({"args": vars(args), "skipped": skipped,
                   "runs": [dict(r, server=k[0], size=k[1]) for k, rs in results.items() for r in rs]},
                  f, indent=2)

    order = [s.name for s in servers]
    peers = [o for o in ("zmq", "pyzmq", "asyncio") if o in order and "berth" in order]
    print(f"\n{args.duration:g} s per run, {args.rounds} rounds interleaved; "
          f"servers on core {args.server_core}, load on core {args.load_core}. Each cell: the rate "
          f"(msgs/s for 64 B, MB/s above) and the server's CPU µs per message. Ratios are berth's "
          f"to the peer's in the same round: rate (above 1: berth faster) and CPU per message "
          f"(below 1: berth cheaper).\n")
    head = ["shape", "round", "conns"] + order + [f"berth ÷ {o}: rate, CPU/msg" for o in peers]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))

    def cell(report, metric):
        if report is None:
            return None, None, "not run"
        if "error" in report:
            return None, None, "failed: " + report["error"]
        value, cpu = report.get(metric), report.get("server_cpu_us_per_msg")
        notes = []
        errs = errors_of(report)
        if errs:
            notes.append(f"{errs} errors")
        if report.get("messages") == 0:
            # Bytes of echoes still arriving count; a run with no whole echo is too short for
            # this size (or the server is stuck) and its ratio would mean nothing.
            notes.append("no whole echo")
            value = None
        text = (fmt(report.get(metric, 0)) if metric in report else "-") + (
            f" @ {cpu:,.2f} µs" if cpu is not None else "")
        return value, cpu, text + (f" ({', '.join(notes)})" if notes else "")

    for label, size, metric in shapes:
        for rnd in range(1, args.rounds + 1):
            row = [f"{label} ({UNIT[metric]})", str(rnd), str(connections_for(args, size))]
            got = {}
            for name in order:
                rs = [r for r in results.get((name, size), []) if r.get("round") == rnd]
                got[name] = cell(rs[0] if rs else None, metric)
                row.append(got[name][2])
            for other in peers:
                (bv, bc, _), (ov, oc, _) = got["berth"], got[other]
                rate = f"{bv / ov:.2f}" if bv and ov else "n/a"
                cpu = f"{bc / oc:.2f}" if bc and oc else "n/a"
                row.append(f"{rate}, {cpu}")
            print("| " + " | ".join(row) + " |")
    for name, why in skipped.items():
        print(f"\n{name} was not measured: {why}")
    print(f"\nEvery run's report: {os.path.join(args.out, 'msg_compare.json')}")


if __name__ == "__main__":
    sys.exit(main())
