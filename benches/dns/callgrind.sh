#!/usr/bin/env bash
# User-space instructions per query of a DNS server under callgrind, a measure the
# box's other tenants cannot move (the timed bench.sh measures CPU time, which they
# can). The server runs under valgrind on cpu1; dnsperf (cpu0) warms it up for 2 s,
# the counters are zeroed, the mixed load runs for SECS at RATE, the counters are
# dumped. Prints Ir/query, recvmmsg calls and queries per batch.
#
#   benches/dns/callgrind.sh NAME PORT RATE SECS SCRATCH -- server command...
#
# SCRATCH holds big/q_mix.txt (benches/dns/gen.py --out SCRATCH/big) and, for
# causeway-dns, big/kc.yaml from a running `bench-dns-feed serve`. Examples:
#   benches/dns/callgrind.sh cw 15367 3000 5 /tmp/d -- target/release/causeway-dns \
#     --kubeconfig /tmp/d/big/kc.yaml --listen 127.0.0.1:15367 --workers 1 --log warn
#   benches/dns/callgrind.sh knot 15363 3000 5 /tmp/d -- knotd -c /tmp/d/knot.conf
# (knot.conf as bench.sh writes it, with the port changed). Needs valgrind, dnsperf, kdig.
set -euo pipefail
[ $# -ge 7 ] && [ "$6" = "--" ] || { sed -n 2,16p "$0" >&2; exit 2; }
NAME=$1 PORT=$2 RATE=$3 SECS=$4 S=$5
shift 6
OUT=$S/cg-$NAME
rm -f "$OUT".*
taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$OUT.%p" "$@" >"$S/$NAME.log" 2>&1 &
VP=$!
trap 'kill $VP 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  [ -n "$(kdig @127.0.0.1 -p "$PORT" +short +timeout=2 +retry=0 svc0.ns0.svc.clusterset.local. A 2>/dev/null)" ] && break
  sleep 1
done
perf() { taskset -c 0 dnsperf -s 127.0.0.1 -p "$PORT" -d "$S/big/q_mix.txt" -l "$1" -c 4 -T 1 -q 200 -Q "$RATE"; }
perf 2 >/dev/null 2>&1
callgrind_control -z "$VP" >/dev/null
perf "$SECS" >"$S/$NAME.perf" 2>&1
callgrind_control -d "$VP" >/dev/null
F=$(ls "$OUT".*.1)
DONE=$(awk '/Queries completed/ {print $3}' "$S/$NAME.perf")
TOT=$(callgrind_annotate "$F" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
# recvmmsg calls = batches (callgrind names a function in full only at its first mention).
ID=$(grep -m1 -oE '\([0-9]+\) recvmmsg$' "$F" | cut -d' ' -f1 || true)
B=$(awk -v id="cfn=$ID" '$1 == id {f = 1; next} f && /^calls=/ {sub("calls=", "", $1); n += $1; f = 0} END {print n + 0}' "$F")
echo "$NAME: queries=$DONE Ir=$TOT Ir/query=$(awk -v t="$TOT" -v d="$DONE" 'BEGIN {printf "%.0f", t / d}') recvmmsg=${B:-?} queries/batch=$(awk -v d="$DONE" -v b="${B:-0}" 'BEGIN {printf "%.2f", d / (b + 1e-9)}') profile=$F"
