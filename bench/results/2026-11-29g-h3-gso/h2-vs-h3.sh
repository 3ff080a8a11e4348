#!/usr/bin/env bash
# berth's HTTP/3 against its own HTTP/2 over TLS (issue 42, "Speed": the ratio, and where the
# difference goes). One server, `serve -m evloop -A 1 -w 1 --listen tls://... --http3`, pinned
# to core 0: hello world at 10 connections x 10 streams, each load pinned to core 1, interleaved
# ROUNDS times: berth bench --h2 (TLS, ALPN h2) and berth bench --h3, the same load program
# and client roles' family for both. Server CPU is utime and stime from /proc/PID/stat around
# each run, apart (the kernel's share is where UDP and TCP differ); QUIC's packets per request
# come from /stats (counted as the connections end). With PERF=1 a last round of each protocol
# runs under `perf record` (server only) and its profile is grouped by where the cycles go
# (perf-groups.py beside this script).
#
#   bench/results/2026-11-29g-h3-gso/h2-vs-h3.sh BERTH [ROUNDS] [SECS]   (OUT=DIR: results there)
set -euo pipefail
BERTH=$(realpath "$1"); ROUNDS=${2:-2}; SECS=${3:-8}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/h2-vs-h3}; mkdir -p "$OUT"; rm -f "$OUT"/*
TMP=$(mktemp -d); BPID=; trap 'kill $BPID 2>/dev/null || true; rm -rf "$TMP"' EXIT
PORT=9453; TICK=$(getconf CLK_TCK); URL=https://127.0.0.1:$PORT/hello/world
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost \
  -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
taskset -c 0 "$BERTH" serve -m evloop -A 1 -w 1 --listen "tls://127.0.0.1:$PORT" --http3 \
  --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key.pem" > "$OUT/berth.log" 2>&1 & BPID=$!
sleep 2
cpu() { awk '{print $14, $15}' "/proc/$BPID/stat"; }
packets() { curl -sk "https://127.0.0.1:$PORT/stats" | awk '/^berth_quic_packets_sent_total/ {print $2}'; }
load() {  # name: runs the load, prints "requests"
  case $1 in
    bench-h2) taskset -c 1 "$BERTH" bench --h2 -t 1 -c 10 --streams 10 --duration "${SECS}s" --json "$URL" > "$TMP/out" 2>/dev/null
            python3 -c "import json; print(json.load(open('$TMP/out'))['requests'])" ;;
    bench-h3) taskset -c 1 "$BERTH" bench --h3 -t 1 -c 10 --streams 10 --duration "${SECS}s" --json "$URL" > "$TMP/out" 2>/dev/null
            python3 -c "import json; print(json.load(open('$TMP/out'))['requests'])" ;;
  esac
}
echo -e "round\tload\trequests\treq_s\tserver_cpu_us_per_req\tuser_us\tsystem_us\tquic_packets_per_req\tloadavg" > "$OUT/results.tsv"
for r in $(seq 1 "$ROUNDS"); do
  for l in bench-h2 bench-h3; do
    la=$(cut -d' ' -f1 /proc/loadavg); read -r u0 s0 < <(cpu); p0=$(packets)
    n=$(load $l); read -r u1 s1 < <(cpu); sleep 1; p1=$(packets)
    cp "$TMP/out" "$OUT/r$r-$l.txt"
    python3 -c "
n = max($n, 1); k = 1e6 / $TICK / n
u, s = ($u1 - $u0) * k, ($s1 - $s0) * k
print('\t'.join(map(str, ['$r', '$l', $n, round($n / $SECS), round(u + s, 2), round(u, 2), round(s, 2),
      round(($p1 - $p0) / n, 3), '$la'])))" | tee -a "$OUT/results.tsv"
  done
done
if [ "${PERF:-0}" = 1 ]; then
  for l in bench-h2 bench-h3; do
    perf record -q -F 2000 -g -o "$TMP/perf.data" -p "$BPID" -- sleep "$SECS" > /dev/null 2>&1 & P=$!
    load $l > /dev/null; wait $P || true
    perf report -i "$TMP/perf.data" --no-children --sort sym --stdio -g none --percent-limit 0.2 \
      > "$OUT/perf-$l.txt" 2>/dev/null
    python3 "$HERE/perf-groups.py" "$OUT/perf-$l.txt" | tee "$OUT/groups-$l.txt"
  done
fi
