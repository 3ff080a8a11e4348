#!/usr/bin/env bash
# `berth bench --h3` against quic-go's h3load (issue 42, "Speed" and "Clients"): the same
# server, the same shape, two load generators. berth serves HTTP/3 (`quic://`, one evloop loop)
# pinned to core 0; each load runs pinned to core 1: hello world at 10 connections x 10 streams
# for SECS seconds, interleaved ROUNDS times (h3load, then berth bench --h3). Each load
# generator's own CPU is /usr/bin/time's user and system seconds; the server's is
# utime+stime from /proc/PID/stat before and after each run.
#
#   bench/results/2026-11-30-h3bench/run.sh BERTH [ROUNDS] [SECS]
#
# BERTH is a release build (target/release/berth). Raw outputs go to raw/ beside this script,
# the summary to results.tsv.
set -euo pipefail
BERTH=$(realpath "$1"); ROUNDS=${2:-2}; SECS=${3:-5}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../../.." && pwd)
RAW=$HERE/raw; mkdir -p "$RAW"; rm -f "$RAW"/*
BPID=; TMP=$(mktemp -d); trap 'kill $BPID 2>/dev/null || true; rm -rf "$TMP"' EXIT
PORT=${PORT:-9443}; TICK=$(getconf CLK_TCK)
URL=https://127.0.0.1:$PORT/hello/world

# h3load is a module of its own (bench/h3load/go.mod): built from its folder.
(cd "$ROOT/bench/h3load" && go build -o "$TMP/h3load" .)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost \
  -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null

taskset -c 0 "$BERTH" serve -m evloop -A 1 -w 1 --listen "quic://127.0.0.1:$PORT" \
  --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key.pem" > "$RAW/berth.log" 2>&1 & BPID=$!
sleep 2
{ echo "berth: $BERTH ($(cd "$ROOT" && git rev-parse --short HEAD))"; echo "go: $(go version)";
  echo "h3load: quic-go $(grep 'quic-go v' "$ROOT/bench/h3load/go.mod")"; nproc; uname -r; } \
  > "$RAW/versions.txt"

cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
echo -e "round\tload\trequests\tfailures\treq_s\tload_user_s\tload_sys_s\tserver_cpu_s\tloadavg" \
  > "$HERE/results.tsv"
run() {  # round name command...
  local r=$1 name=$2; shift 2
  local out="$RAW/r$r-$name.txt" load before after
  load=$(cut -d' ' -f1-3 /proc/loadavg); before=$(cpu "$BPID")
  set +e
  /usr/bin/time -f "time %U %S" -o "$out.time" taskset -c 1 "$@" > "$out" 2>&1
  set -e
  after=$(cpu "$BPID")
  { echo "command: taskset -c 1 $*"; cat "$out.time"; rm -f "$out.time";
    echo "server cpu ticks before $before after $after (CLK_TCK $TICK); loadavg before: $load"; } >> "$out"
  python3 - "$r" "$name" "$((after-before))" "$TICK" "$load" "$out" >> "$HERE/results.tsv" <<'PY'
import json, re, sys
r, name, ticks, tick, load, out = sys.argv[1:]
t = open(out).read()
user, sys_ = re.search(r"^time ([\d.]+) ([\d.]+)$", t, re.M).groups()
if name == "h3load":
    m = re.search(r"requests (\d+)  failures (\d+)  bytes \d+  elapsed [\d.]+  req/s ([\d.]+)", t)
    req, fail, rps = m.groups() if m else ("0", "?", "0")
else:
    j = json.loads(t[t.index("{") : t.rindex("}") + 1])
    req, fail, rps = j["requests"], sum(j["errors"].values()), round(j["requests_per_sec"], 1)
print(f"{r}\t{name}\t{req}\t{fail}\t{rps}\t{user}\t{sys_}\t{int(ticks)/int(tick):.2f}\t{load}")
PY
}
for r in $(seq 1 "$ROUNDS"); do
  run "$r" h3load "$TMP/h3load" -c 10 -m 10 -n 0 -d "${SECS}s" -ca "$TMP/cert.pem" "$URL"
  run "$r" berth-bench "$BERTH" bench --h3 -t 1 -c 10 --streams 10 --duration "${SECS}s" --json "$URL"
done
column -t "$HERE/results.tsv"
