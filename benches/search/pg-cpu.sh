#!/usr/bin/env bash
# Samples the CPU of a PostgreSQL server once a second, for per-phase server CPU in the
# search bench: prints "epoch server-cpu-seconds idle-seconds" lines, where server CPU is
# utime+stime of the postmaster and its live children plus the CPU of the children it has
# reaped (cutime+cstime), and idle is the whole box's idle+iowait from /proc/stat.
# Usage: benches/search/pg-cpu.sh [DATA_DIR] > cpu.log &   (default: scripts/postgres's)
# Subtract the lines nearest the bench log's "members populated" and "every object
# stored" times for the ingest's server CPU.
set -euo pipefail
data="${1:-${TMPDIR:-/tmp}/causeway-test-postgres/data}"
pm=$(head -1 "$data/postmaster.pid")
hz=$(getconf CLK_TCK)
while kill -0 "$pm" 2>/dev/null; do
  ticks=0
  for p in $(pgrep -P "$pm") "$pm"; do
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    s=${s##*) }
    read -r -a f <<<"$s"
    # fields after "comm) ": f[11] utime, f[12] stime, f[13] cutime, f[14] cstime
    ticks=$((ticks + f[11] + f[12]))
    [ "$p" = "$pm" ] && ticks=$((ticks + f[13] + f[14]))
  done
  idle=$(awk '/^cpu /{print $5 + $6}' /proc/stat)
  awk -v t="$(date +%s.%N)" -v c="$ticks" -v i="$idle" -v hz="$hz" \
    'BEGIN { printf "%.3f %.2f %.2f\n", t, c / hz, i / hz }'
  sleep 1
done
