#!/usr/bin/env bash
# Issue 34: `/files` of a 1 MiB text file with `Accept-Encoding: gzip`, precompressed
# (berth's sibling lookup, nginx's `gzip_static on`) and on the fly (`--compress`, nginx's
# `gzip on`), both at level 5, one worker/loop each. Server pinned to core 0, wrk to core 1;
# CPU per request from the server's /proc/PID/stat (utime + stime, every process of it).
# Usage: bench/compress.sh BERTH_BINARY [DURATION_SECONDS] [ROUNDS]
set -euo pipefail
berth=${1:?berth binary}; dur=${2:-10}; rounds=${3:-2}
work=$(mktemp -d /tmp/berth-compress-XXXX); chmod 755 "$work"  # nginx's worker runs as nobody
mkdir -p "$work/www/pre" "$work/www/fly" "$work/nginx"
python3 - "$work/www" <<'PY'
import random, sys
random.seed(34)
words = [w.strip() for w in open("/usr/share/dict/words")] if __import__("os").path.exists("/usr/share/dict/words") else \
    ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do",
     "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "server",
     "socket", "request", "response", "header", "body", "chunk", "stream", "model", "thread", "loop"]
out, n = [], 0
while n < 1 << 20:
    line = " ".join(random.choice(words) for _ in range(random.randint(4, 14))) + "\n"
    out.append(line); n += len(line)
data = "".join(out).encode()[: 1 << 20]
for d in ("pre", "fly"):
    open(f"{sys.argv[1]}/{d}/big.txt", "wb").write(data)
PY
gzip -5 -k -n "$work/www/pre/big.txt"
cat > "$work/nginx/nginx.conf" <<NGX
worker_processes 1;
daemon off;
error_log $work/nginx/error.log;
pid $work/nginx/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  types { text/plain txt; }
  gzip_comp_level 5;
  gzip_min_length 1024;
  gzip_types text/plain;
  gzip_vary on;
  client_body_temp_path $work/nginx; proxy_temp_path $work/nginx; fastcgi_temp_path $work/nginx;
  uwsgi_temp_path $work/nginx; scgi_temp_path $work/nginx;
  server {
    listen 127.0.0.1:18034;
    location /files/pre/ { alias $work/www/pre/; gzip_static on; }
    location /files/fly/ { alias $work/www/fly/; gzip on; }
  }
}
NGX
taskset -c 0 /usr/sbin/nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" &
ngx=$!
taskset -c 0 "$berth" serve -m evloop -A 1 -w 0 -p 18035 --root "$work/www" \
    --compress --compress-level 5 > "$work/berth.out" 2>&1 &
brt=$!
trap 'kill $ngx $brt 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
tries=0
until curl -sf -o /dev/null http://127.0.0.1:18034/files/pre/big.txt &&
      curl -sf -o /dev/null http://127.0.0.1:18035/files/pre/big.txt; do sleep 0.2; tries=$((tries + 1)); [ $tries -lt 100 ] || { cat "$work/nginx/error.log" "$work/berth.out"; exit 1; }; done
# Both answer gzip, decoding to the same bytes.
for port in 18034 18035; do for shape in pre fly; do
    curl -s --compressed -H 'Accept-Encoding: gzip' "http://127.0.0.1:$port/files/$shape/big.txt" |
        cmp - "$work/www/fly/big.txt"
    curl -s -D - -o /dev/null -H 'Accept-Encoding: gzip' "http://127.0.0.1:$port/files/$shape/big.txt" |
        grep -qi '^content-encoding: gzip'
done; done
tck=$(getconf CLK_TCK)
ticks() { # the process $1 and its children (nginx: master and worker)
    local total=0
    for p in $1 $(pgrep -P "$1"); do
        read -r -a f < "/proc/$p/stat"; total=$((total + f[13] + f[14]))
    done; echo $total
}
echo "server shape round requests/s cpu_ms_per_request transfer/s"
for round in $(seq "$rounds"); do
  for server in berth nginx; do
    for shape in pre fly; do
      case $server in
        berth) port=18035; pid=$brt;;
        nginx) port=18034; pid=$ngx;;
      esac
      a=$(ticks $pid)
      out=$(taskset -c 1 wrk -t1 -c8 -d"${dur}s" -H 'Accept-Encoding: gzip' \
            "http://127.0.0.1:$port/files/$shape/big.txt")
      b=$(ticks $pid)
      reqs=$(echo "$out" | awk '/requests in/ {print $1}')
      rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
      tps=$(echo "$out" | awk '/Transfer\/sec/ {print $2}')
      cpu=$(python3 -c "print(f'{($b-$a)*1000/$tck/$reqs:.3f}')")
      echo "$server $shape $round $rps $cpu $tps"
    done
  done
done
