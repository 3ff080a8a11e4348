"""What the benchmark scripts share: a free port, waiting for a server's first answer, and the
CPU time and memory of a server's whole process tree from /proc. Imported by the scripts beside it
(`python3 bench/NAME.py` puts this directory on the path)."""
import os
import re
import socket
import ssl
import subprocess
import time

TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_ready(port, timeout=20.0, tls=False):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw:
                s = raw
                if tls:
                    ctx = ssl.create_default_context()
                    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
                    s = ctx.wrap_socket(raw)
                s.sendall(b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(100).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"server on port {port} did not answer")


def tree_pids(pid):
    pids = [pid]
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
        for child in out.split():
            pids += tree_pids(int(child))
    except FileNotFoundError:
        pass
    return pids


def cpu_seconds(pid):
    """utime+stime of the server and its live descendants, plus cutime+cstime of the root:
    the time of children that have already exited and been reaped (forked model)."""
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
            if p == pid:
                total += int(fields[13]) + int(fields[14])  # cutime, cstime
        except OSError:
            pass
    return total / TICK


def rss_kb(pid):
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                m = re.search(r"VmRSS:\s+(\d+)", f.read())
                total += int(m.group(1)) if m else 0
        except OSError:
            pass
    return total
