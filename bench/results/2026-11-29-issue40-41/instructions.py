"""Instructions per keep-alive request (callgrind), base against new: deterministic whatever the
machine's load. Two runs per binary, N1 and N2 requests on one connection; per request is the
difference over N2-N1, so startup and shutdown cancel out."""
import os, re, signal, socket, subprocess, sys, time
def run(binary, n, port, shape):
    out = f"/tmp/ab/cg-{os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(binary))))}-{n}.out"
    srv = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "serve",
                            "-m", "evloop", "-A", "1", "-w", "1", "-p", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            s = socket.create_connection(("127.0.0.1", port)); break
        except OSError:
            time.sleep(0.1)
    req = b"GET /hello/world HTTP/1.1\r\nHost: x\r\n\r\n"
    if shape == "pipelined":
        batch = req * 16
        for _ in range(n // 16):
            s.sendall(batch)
            got = 0
            while got < 16:
                got += s.recv(1 << 16).count(b"Hello, World!")
    else:
        for _ in range(n):
            s.sendall(req)
            data = b""
            while not data.endswith(b"Hello, World!"):
                data += s.recv(4096)
    s.close()
    srv.send_signal(signal.SIGTERM); srv.wait()
    text = open(out).read()
    m = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
    return int(m.group(1))
shape = sys.argv[1] if len(sys.argv) > 1 else "keep-alive"
res = {}
for name, binary in [("base", "/work/wt-base/target/release/berth"), ("new", "/work/wt-bench/target/release/berth")]:
    a = run(binary, 2000, 19990, shape); b = run(binary, 10000, 19991, shape)
    res[name] = (b - a) / 8000
    print(f"{shape} {name}: {res[name]:.0f} instructions per request ({a} at 2000, {b} at 10000)", flush=True)
print(f"{shape} new/base: {res['new']/res['base']:.3f}")
