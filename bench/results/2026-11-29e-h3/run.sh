#!/usr/bin/env bash
# HTTP/3: berth against caddy (issue 42, "Speed"). Both servers on core 0 (caddy with
# GOMAXPROCS=1, berth with one evloop loop), the load (bench/h3load, quic-go) on core 1, the
# same self-signed P-256 certificate. Shapes: hello at 10 connections x 10 streams and 1 x 1,
# a 1 MiB file at 10 x 1. Interleaved: each round runs every shape on berth, then on caddy.
# Server CPU = utime+stime from /proc/PID/stat (all threads) before and after each run; the
# load program's own CPU (load_cpu_s) shows when it, not the server, was the limit.
#
#   bench/results/2026-11-29e-h3/run.sh BERTH CADDY [ROUNDS] [SECONDS]
#
# Raw outputs go to raw/ beside this script, the summary to results.tsv; OUT=DIR puts them
# under DIR instead (DIR/raw, DIR/results.tsv). SHAPES="file1m-10x1 ..." runs only those shapes.
# LOAD=berth loads with `BERTH bench --h3` (its client role, one thread) instead of h3load:
# h3load spends a whole core at ~26k hello requests/s, where berth bench spends ~5 µs a request
# (bench/results/2026-11-30-h3bench).
set -euo pipefail
BERTH=$(realpath "$1"); CADDY=$(realpath "$2"); ROUNDS=${3:-2}; SECS=${4:-10}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../../.." && pwd)
OUT=$(mkdir -p "${OUT:-$HERE}" && cd "${OUT:-$HERE}" && pwd)
RAW=$OUT/raw; mkdir -p "$RAW"; rm -f "$RAW"/*
TMP=$(mktemp -d); trap 'kill $BPID $CPID 2>/dev/null || true; rm -rf "$TMP"' EXIT
BPORT=9443; CPORT=9444; TICK=$(getconf CLK_TCK)

# The load program.
(cd "$ROOT/bench/h3load" && go build -o "$TMP/h3load" .)
# One certificate for both; a 1 MiB file under files/.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost \
  -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
mkdir -p "$TMP/files"; head -c 1048576 /dev/urandom > "$TMP/files/1m.bin"

cat > "$TMP/Caddyfile" <<CADDY
{
	admin off
	auto_https off
	servers {
		protocols h1 h2 h3
	}
}
https://127.0.0.1:$CPORT {
	tls $TMP/cert.pem $TMP/key.pem
	handle /hello/world {
		respond "Hello, World!" 200
	}
	handle_path /files/* {
		root * $TMP/files
		file_server
	}
}
CADDY
cp "$TMP/Caddyfile" "$RAW/Caddyfile"

taskset -c 0 "$BERTH" serve -m evloop -A 1 -w 1 --listen "quic://127.0.0.1:$BPORT" \
  --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key.pem" --root "$TMP/files" \
  > "$RAW/berth.log" 2>&1 & BPID=$!
GOMAXPROCS=1 taskset -c 0 "$CADDY" run --adapter caddyfile --config "$TMP/Caddyfile" \
  > "$RAW/caddy.log" 2>&1 & CPID=$!
sleep 2
{ echo "berth: $("$BERTH" --version 2>&1 | head -1) ($BERTH)"; echo "caddy: $("$CADDY" version) (go install github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9; -buildvcs=false leaves its version unknown)";
  echo "go: $(go version)"; echo "h3load: quic-go $(grep 'quic-go v' "$ROOT/bench/h3load/go.mod")";
  nproc; uname -r; } > "$RAW/versions.txt"

cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }   # utime+stime in clock ticks, all threads
echo -e "round\tshape\tserver\trequests\tfailures\telapsed\treq_s\tMB_s\tcpu_ticks\tcpu_us_per_req\tload_cpu_s\tloadavg" > "$OUT/results.tsv"
run() {  # round shape server pid port c m path
  local r=$1 shape=$2 srv=$3 pid=$4 port=$5 c=$6 m=$7 path=$8
  local out="$RAW/r$r-$shape-$srv.txt" load before after
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  before=$(cpu "$pid")
  set +e
  if [ "${LOAD:-h3load}" = berth ]; then
    # The same summary line as h3load's, from berth bench's JSON; the load's own CPU from time.
    /usr/bin/time -f "load cpu %U %S" -o "$TMP/time" taskset -c 1 "$BERTH" bench --h3 -t 1 \
      -c "$c" --streams "$m" --duration "${SECS}s" --json "https://127.0.0.1:$port$path" > "$TMP/json" 2> "$TMP/err"
    python3 - "$TMP/json" "$TMP/time" > "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
u, s = open(sys.argv[2]).read().split()[-2:]
fail = sum(v for v in r["errors"].values() if isinstance(v, int))
print(f"requests {r['requests']}  failures {fail}  bytes {r['bytes']}  elapsed {r['duration_s']:.3f}  "
      f"req/s {r['requests_per_sec']:.1f}  MB/s {r['bytes_per_sec'] / 1e6:.2f}")
print(f"load cpu {float(u) + float(s):.3f} (user {u}, system {s})")
PY
  else
    taskset -c 1 "$TMP/h3load" -c "$c" -m "$m" -n 0 -d "${SECS}s" -ca "$TMP/cert.pem" \
      "https://127.0.0.1:$port$path" > "$out" 2>&1
  fi
  set -e
  after=$(cpu "$pid")
  { echo "command: taskset -c 1 ${LOAD:-h3load} -c $c -m $m -d ${SECS}s https://127.0.0.1:$port$path";
    echo "server cpu ticks before $before after $after (CLK_TCK $TICK); loadavg before: $load"; } >> "$out"
  python3 - "$r" "$shape" "$srv" "$((after-before))" "$TICK" "$load" "$out" >> "$OUT/results.tsv" <<'PY'
import sys, re
r, shape, srv, ticks, tick, load, out = sys.argv[1:]
t = open(out).read()
m = re.search(r"requests (\d+)  failures (\d+)  bytes \d+  elapsed ([\d.]+)  req/s ([\d.]+)  MB/s ([\d.]+)", t)
req, fail, el, rps, mbs = m.groups() if m else ("0", "?", "0", "0", "0")
lc = re.search(r"load cpu ([\d.]+)", t)
lc = lc.group(1) if lc else "?"
us = int(ticks) / int(tick) * 1e6 / int(req) if int(req) else float("nan")
print("\t".join([r, shape, srv, req, fail, el, rps, mbs, ticks, f"{us:.1f}", lc, load]))
PY
  tail -1 "$OUT/results.tsv"
}
for r in $(seq 1 "$ROUNDS"); do
  for spec in "hello-10x10 10 10 /hello/world" "hello-1x1 1 1 /hello/world" "file1m-10x1 10 1 /files/1m.bin"; do
    set -- $spec
    if [ -n "${SHAPES:-}" ] && [[ " $SHAPES " != *" $1 "* ]]; then continue; fi
    run "$r" "$1" berth "$BPID" "$BPORT" "$2" "$3" "$4"
    run "$r" "$1" caddy "$CPID" "$CPORT" "$2" "$3" "$4"
  done
done
