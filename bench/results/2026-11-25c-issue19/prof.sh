#!/bin/bash
# usage: prof.sh MODEL OUT [extra server args]
M=$1; OUT=$2; shift 2
taskset -c 0 /work/main/target/release/berth serve --model $M -A 1 --port 18080 "$@" >/tmp/srv.log 2>&1 &
SP=$!
sleep 1
taskset -c 1 wrk -t1 -c100 -d8s $WRKX http://127.0.0.1:18080/hello/world > /tmp/wrk.out &
sleep 2
perf record -g -p $SP -o $OUT -- sleep 4 >/dev/null 2>&1
sleep 3
grep Req /tmp/wrk.out
kill $SP; wait $SP 2>/dev/null
perf report -i $OUT --no-children --sort sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -45
