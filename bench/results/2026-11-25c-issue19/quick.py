import subprocess, sys, time, os, re
model = sys.argv[1]; extra = sys.argv[2:]
dur = int(os.environ.get("DUR", "5"))
wrkargs = os.environ.get("WRK", "-t1 -c100").split()
srv = subprocess.Popen(["taskset","-c","0","/work/main/target/release/berth","serve","--model",model,"-A","1","--port","18080"]+extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1)
def cpu():
    t = 0
    for tid in os.listdir(f"/proc/{srv.pid}/task"):
        f = open(f"/proc/{srv.pid}/task/{tid}/stat").read().rsplit(")",1)[1].split()
        t += int(f[11]) + int(f[12])
    return t / os.sysconf("SC_CLK_TCK")
c0 = cpu()
out = subprocess.run(["taskset","-c","1","wrk"]+wrkargs+[f"-d{dur}s","http://127.0.0.1:18080" + os.environ.get("PATHQ", "/hello/world")] + (["-s", os.environ["LUA"]] if "LUA" in os.environ else []), capture_output=True, text=True).stdout
c1 = cpu()
srv.terminate(); srv.wait()
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
print(f"{model} {' '.join(extra)}: {rps:.0f} req/s  cpu {(c1-c0)/(rps*dur)*1e6:.2f} us/req  util {(c1-c0)/dur:.2f}")
