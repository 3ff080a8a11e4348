#!/bin/bash
# usage: cpuab.sh BIN MODEL  -> server CPU us per request for 200k keep-alive requests (ab -k -c 20)
B=$1; M=$2
taskset -c 0 $B serve --model $M -p 9321 >/dev/null 2>&1 & P=$!
sleep 0.5
taskset -c 1 ab -q -k -n 20000 -c 20 http://127.0.0.1:9321/hello/world >/dev/null 2>&1
read -a a < /proc/$P/stat; t0=$(( ${a[13]} + ${a[14]} ))
taskset -c 1 ab -q -k -n 200000 -c 20 http://127.0.0.1:9321/hello/world > /tmp/ab.out 2>&1
read -a a < /proc/$P/stat; t1=$(( ${a[13]} + ${a[14]} ))
kill $P; wait $P 2>/dev/null
echo "$M $(basename $(dirname $(dirname $(dirname $B)))) cpu_us_per_req=$(python3 -c "print(round(($t1-$t0)*10000/200000,2))") $(grep 'Requests per second' /tmp/ab.out)"
