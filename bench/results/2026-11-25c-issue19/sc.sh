#!/bin/bash
# usage: sc.sh MODEL LOAD  (LOAD: seq = ab -k -n 2000 -c 1; wrk = wrk -t1 -c100 -d3s)
M=$1; L=$2
taskset -c 0 /work/main/target/release/berth serve --model $M -A 1 -w 1 --port 18081 >/dev/null 2>&1 &
SP=$!; sleep 1
strace -c -f -p $SP -o /tmp/sc.$M.$L 2>/dev/null &
ST=$!; sleep 1
if [ $L = seq ]; then N=2000; taskset -c 1 ab -q -k -n 2000 -c 1 http://127.0.0.1:18081/hello/world >/dev/null 2>&1;
else N=$(taskset -c 1 wrk -t1 -c100 -d3s http://127.0.0.1:18081/hello/world | awk '/requests in/ {print $1}'); fi
sleep 0.5; kill -INT $ST; wait $ST 2>/dev/null; kill $SP; wait $SP 2>/dev/null
T=$(awk '/^100.00/ {print $4}' /tmp/sc.$M.$L)
echo "$M $L: $N requests, $T syscalls, $(python3 -c "print(round($T/$N,2))") per request"
grep -E "^ +[0-9]" /tmp/sc.$M.$L | sort -k4 -n -r | head -5
