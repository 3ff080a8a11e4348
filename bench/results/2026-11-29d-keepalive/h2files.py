"""HTTP/2 `/files` (a 1 MiB file) and HTTP/1.1 keep-alive hello, base build against new, h2load
and wrk on core 1, berth on core 0, interleaved rounds: requests/s and server CPU per request.

    python3 h2files.py BASE_BINARY NEW_BINARY ROUNDS SECONDS
"""
import os, re, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from benchlib import cpu_seconds, free_port, wait_ready  # noqa: E402



def run(binary, root, shape, seconds):
    port = free_port()
    args = ["taskset", "-c", "0", binary, "serve", "-m", "evloop", "-A", "1", "-w", "1",
            "-p", str(port), "--root", root]
    if shape == "h2-file":
        args += ["--http2", "on"]
    srv = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port)
    time.sleep(0.3)
    before = cpu_seconds(srv.pid)
    if shape == "h2-file":
        out = subprocess.run(["taskset", "-c", "1", "h2load", "-D", str(seconds), "-c", "10", "-m", "1",
                              "-t", "1", f"http://127.0.0.1:{port}/files/big.bin"],
                             capture_output=True, text=True).stdout
        m = re.search(r"(\d+) succeeded, (\d+) failed, (\d+) errored", out)
        done, failed, errored = map(int, m.groups())
        assert failed == 0 and errored == 0, out
    else:
        out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c100", f"-d{seconds}s",
                              f"http://127.0.0.1:{port}/hello/world"],
                             capture_output=True, text=True).stdout
        done = int(re.search(r"(\d+) requests in", out).group(1))
    cpu = cpu_seconds(srv.pid) - before
    srv.terminate(); srv.wait()
    return done / seconds, cpu / done * 1e6


base, new, rounds, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
root = tempfile.mkdtemp()
with open(os.path.join(root, "big.bin"), "wb") as f:
    f.write(os.urandom(1 << 20))
print(f"load average {open('/proc/loadavg').read().split()[:3]}")
for shape in ("h2-file", "keep-alive"):
    for r in range(rounds):
        res = {}
        for name, binary in (("base", base), ("new", new)):
            res[name] = run(binary, root, shape, seconds)
            print(f"{shape} round {r + 1} {name}: {res[name][0]:.0f} req/s, {res[name][1]:.2f} us CPU per request", flush=True)
        print(f"{shape} round {r + 1} new/base: req/s {res['new'][0] / res['base'][0]:.3f}x, CPU per request {res['new'][1] / res['base'][1]:.3f}x", flush=True)
