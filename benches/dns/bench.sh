#!/usr/bin/env bash
# DNS bench: causeway-dns vs Knot (and stock hickory-dns when installed), interleaved
# pass by pass, so every server meets the same box: A, B, C, A, B, C, ...
#
#   benches/dns/bench.sh [SCRATCH_DIR]
#
# Needs: dnsperf, knotd, kdig (apt-get install -y dnsperf knot knot-dnsutils), python3.
# hickory-dns 0.26.3 joins when $HICKORY (default $SCRATCH/tools/bin/hickory-dns) exists
# (`cargo install --root $SCRATCH/tools hickory-dns --version 0.26.3`).
#
# Layout (dataplane.md §3.4/§4): dnsperf on cpu0 (`taskset -c 0`), every server on cpu1
# (`taskset -c 1`) with one worker. knotd pins its UDP worker threads itself, whatever
# taskset says (`taskset -p` on its threads: its one UDP worker on cpu0, next to dnsperf;
# so in every run before 24 Nov 2026, late night): after start every thread of every server is re-pinned
# (`taskset -a -p -c 1`), and each run first checks that every thread is still allowed
# only cpu1, else the bench stops. All servers are started once and stay up (idle
# when not measured); each pass runs every load against every server in turn. Per run:
#   - server CPU per query = Δ(utime+stime) of the server PID from /proc/PID/stat over
#     that run only ÷ completed queries. That is tick-sampled (this kernel: HZ=250,
#     TICK_CPU_ACCOUNTING, no IRQ time accounting): a 4 ms tick charges whoever runs at
#     that instant, so servers that sleep and wake thousands of times a second in step
#     with the load are charged by sampling luck. Hence also
#   - task-clock per query = `perf stat -e task-clock -p PID` over the same run ÷
#     completed queries (the scheduler's own on-CPU time of every thread; 0 without perf);
#   - latency distribution from dnsperf -v (one line per answer with its latency):
#     mean, p50, p90, p99, p99.9, max;
#   - foreign CPU = Δ(busy ticks of the whole box) − server − dnsperf (other tenants).
# The report (report.py) gives the median over the passes, ratios to Knot per pass and
# their median, and every per-pass row. causeway-dns is fed from kubesim by
# `bench-dns-feed` (dns/examples), which also measures ServiceImport change → answer.
#
# Env: PASSES (5), RATE (30000), LOADS (query-file:rate pairs, default "q_mix:$RATE";
# e.g. "q_mix:30000 q_a:30000 q_nx:10000 q_mix:0", rate 0 = max mode), DUR (seconds per
# run, 10), SERVICES (10000), QUIET_WAIT (seconds to wait for < 15 % busy before each
# run, 30), SKIP_BUILD (use the binaries in $CARGO_TARGET_DIR/release),
# EXTRA_DNS ("name=/path/to/causeway-dns ...": more causeway-dns binaries in the same
# passes, e.g. an older build for an A/B), OUT (markdown report, default
# $SCRATCH/out/report.md).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
S=${1:-/tmp/causeway-dns-bench}
PASSES=${PASSES:-5}
RATE=${RATE:-30000}
LOADS=${LOADS:-q_mix:$RATE}
DUR=${DUR:-10}
SERVICES=${SERVICES:-10000}
QUIET_WAIT=${QUIET_WAIT:-30}
OUT=${OUT:-$S/out/report.md}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
HICKORY=${HICKORY:-$S/tools/bin/hickory-dns}
TICK=$(getconf CLK_TCK)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

[[ "$PASSES" =~ ^[1-9][0-9]*$ ]] || { echo "PASSES must be a positive integer" >&2; exit 2; }
for t in dnsperf knotd kdig taskset python3; do
  command -v "$t" >/dev/null || { echo "'$t' not found: apt-get install -y dnsperf knot knot-dnsutils util-linux python3" >&2; exit 2; }
done
mkdir -p "$S/big" "$S/knot-run" "$S/out" "$S/runs"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

# ---- inputs and binaries -------------------------------------------------------------
python3 "$ROOT/benches/dns/gen.py" --services "$SERVICES" --out "$S/big" >&2
# Two builds: one command would unify the example's dev-dependency features into the binary.
if [ -z "${SKIP_BUILD:-}" ]; then
  (cd "$ROOT" && cargo build --release -p causeway-dns --bin causeway-dns && cargo build --release -p causeway-dns --example bench-dns-feed) >&2
fi
DNS_BIN=$CARGO_TARGET_DIR/release/causeway-dns
FEED_BIN=$CARGO_TARGET_DIR/release/examples/bench-dns-feed

# ---- helpers ---------------------------------------------------------------------------
cpu_ticks() { awk '{ s=$0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }
busy_ticks() { awk '/^cpu / {print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }
rss_mb() { awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
busy_pct() { # whole-box CPU busy % over 1 s
  local a b; a=$(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat); sleep 1
  b=$(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat)
  echo "$a $b" | awk '{ busy=$3-$1; idle=$4-$2; printf "%d", 100*busy/(busy+idle+0.001) }'
}
wait_quiet() { # up to QUIET_WAIT s for the box to be below 15 % busy; prints the last reading
  local b=100 i
  for i in $(seq 1 "$QUIET_WAIT"); do b=$(busy_pct); [ "$b" -lt 15 ] && break; done
  echo "$b"
}
pin() { # PID: every thread of it on cpu1 only, checked
  taskset -a -p -c 1 "$1" >/dev/null
  local t bad=""
  for t in /proc/"$1"/task/*; do
    [ "$(awk '/^Cpus_allowed_list/ {print $2}' "$t/status")" = 1 ] || bad="$bad ${t##*/}"
  done
  [ -z "$bad" ] || { echo "threads$bad of pid $1 are not pinned to cpu1" >&2; return 1; }
}
thread_cpus() { # PID: the CPUs its threads may run on, e.g. "1" (every thread's list, deduplicated)
  awk '/^Cpus_allowed_list/ {print $2}' /proc/"$1"/task/*/status | sort -u | paste -sd/ -
}
wait_dns() { # port name
  for _ in $(seq 1 300); do
    [ -n "$(kdig @127.0.0.1 -p "$1" +short +timeout=1 +retry=0 "$2" A 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  echo "server on port $1 never answered $2" >&2; return 1
}

RESULTS=$S/out/results.tsv
printf 'pass\tserver\tqueries\trate\tqps\tcompleted\tlost\tcpu_us_per_q\tlat_mean_us\tlat_p50_us\tlat_p90_us\tlat_p99_us\tlat_p999_us\tlat_max_us\tbusy_pct_before\tforeign_s\ttask_us_per_q\n' >"$RESULTS"

# run PASS SERVER PID PORT QUERIES RATE(0 = max) -> one TSV row
run() {
  local pass=$1 server=$2 pid=$3 port=$4 qf=$5 rate=$6 quiet t0 t1 b0 b1 lg extra=()
  local v="$S/runs/$server-$qf-$rate-p$pass"
  [ "$rate" != 0 ] && extra=(-Q "$rate")
  local cpus; cpus=$(thread_cpus "$pid")
  [ "$cpus" = 1 ] || { echo "$server (pid $pid) has threads allowed on CPUs $cpus, not only cpu1" >&2; exit 1; }
  quiet=$(wait_quiet)
  local pp=""
  if command -v perf >/dev/null; then
    perf stat -x, -e task-clock -p "$pid" -o "$v.tc" & pp=$!
  fi
  b0=$(busy_ticks); t0=$(cpu_ticks "$pid")
  # The wrapper shell prints dnsperf's CPU ticks (its children's, once it has exited).
  lg=$(taskset -c 0 sh -c 'dnsperf "$@" >"$0.v" 2>&1; awk "{print \$16 + \$17}" /proc/$$/stat' \
    "$v" -s 127.0.0.1 -p "$port" -d "$S/big/$qf.txt" -l "$DUR" -c 4 -T 1 -q 200 -v "${extra[@]}")
  t1=$(cpu_ticks "$pid"); b1=$(busy_ticks)
  local tc=0
  if [ -n "$pp" ]; then
    kill -INT "$pp"; wait "$pp" || true
    tc=$(awk -F, '$3 == "task-clock" {print $1}' "$v.tc" 2>/dev/null); tc=${tc:-0}
  fi
  python3 - "$v.v" "$pass" "$server" "$qf" "$rate" "$((t1 - t0))" "$TICK" "$quiet" "$((b1 - b0 - (t1 - t0) - lg))" "$tc" <<'EOF'
import re, sys
path, pas, server, qf, rate, dt, tick, quiet, foreign, tc_ms = sys.argv[1:]
lat, text = [], []
for line in open(path, errors="replace"):
    if line.startswith("> "):
        try:
            lat.append(float(line.rsplit(None, 1)[1]) * 1e6)
        except ValueError:
            pass
    else:
        text.append(line)
t = "".join(text)
num = lambda pat: float(m.group(1)) if (m := re.search(pat, t)) else 0.0
done, lost, qps = num(r"Queries completed:\s+(\d+)"), num(r"Queries lost:\s+(\d+)"), num(r"Queries per second:\s+([\d.]+)")
lat.sort()
pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else 0.0
mean = sum(lat) / len(lat) if lat else 0.0
cpu = int(dt) / int(tick) * 1e6 / (done or 1)
task = float(tc_ms) * 1e3 / (done or 1)
print("\t".join([pas, server, qf, rate, f"{qps:.0f}", f"{done:.0f}", f"{lost:.0f}", f"{cpu:.2f}", f"{mean:.0f}",
                 f"{pct(.5):.0f}", f"{pct(.9):.0f}", f"{pct(.99):.0f}", f"{pct(.999):.0f}", f"{lat[-1] if lat else 0:.0f}",
                 quiet, f"{int(foreign) / int(tick):.2f}", f"{task:.2f}"]))
EOF
  rm -f "$v.v" "$v.tc"
}

# ---- start every server once (cpu1), each on its own port -------------------------------
NAMES=() SPIDS=() PORTS=()
cat >"$S/knot.conf" <<EOF
server:
    rundir: "$S/knot-run"
    listen: 127.0.0.1@15353
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
database:
    storage: "$S/knot-run"
log:
  - target: stderr
    any: warning
zone:
  - domain: clusterset.local
    file: "$S/big/clusterset.local.zone"
    zonefile-sync: -1
    journal-content: none
EOF
rm -rf "$S/knot-run" && mkdir -p "$S/knot-run"

rm -f "$S/big/kc.yaml"
taskset -c 0 "$FEED_BIN" serve --spec "$S/big/services.json" --kubeconfig-out "$S/big/kc.yaml" 2>"$S/out/feed.log" &
FP=$!; PIDS+=("$FP")
for _ in $(seq 1 600); do [ -s "$S/big/kc.yaml" ] && break; sleep 0.5; done
[ -s "$S/big/kc.yaml" ] || { echo "bench-dns-feed did not finish; see $S/out/feed.log" >&2; exit 1; }
start_causeway() { # NAME BIN PORT METRICS_PORT
  taskset -c 1 "$2" --kubeconfig "$S/big/kc.yaml" --listen "127.0.0.1:$3" --workers 1 --log warn \
    --metrics "127.0.0.1:$4" >"$S/out/$1.log" 2>&1 &
  local p=$!; PIDS+=("$p"); NAMES+=("$1"); SPIDS+=("$p"); PORTS+=("$3")
  wait_dns "$3" svc0.ns0.svc.clusterset.local.
  wait_dns "$3" hsvc9.ns9.svc.clusterset.local.
  pin "$p"
  log "$1 pid $p port $3 ($2)"
}
start_causeway causeway-dns "$DNS_BIN" 15357 19153
port=15358 mport=19154
for spec in ${EXTRA_DNS:-}; do
  start_causeway "${spec%%=*}" "${spec#*=}" "$port" "$mport"
  port=$((port + 1)); mport=$((mport + 1))
done

taskset -c 1 knotd -c "$S/knot.conf" >"$S/out/knot.log" 2>&1 &
KP=$!; PIDS+=("$KP"); NAMES+=(knot); SPIDS+=("$KP"); PORTS+=(15353)
wait_dns 15353 svc0.ns0.svc.clusterset.local.
pin "$KP"
log "knot pid $KP port 15353"

if [ -x "$HICKORY" ]; then
  cat >"$S/hickory.toml" <<EOF
listen_addrs_ipv4 = ["127.0.0.1"]
listen_port = 15356
[[zones]]
zone = "clusterset.local"
zone_type = "Primary"
[zones.stores]
type = "file"
zone_path = "$S/big/clusterset.local.zone"
EOF
  taskset -c 1 "$HICKORY" -c "$S/hickory.toml" -q --workers 1 >"$S/out/hickory.log" 2>&1 &
  HP=$!; PIDS+=("$HP"); NAMES+=(hickory-dns); SPIDS+=("$HP"); PORTS+=(15356)
  wait_dns 15356 svc0.ns0.svc.clusterset.local.
  pin "$HP"
  log "hickory-dns pid $HP port 15356"
fi

# ---- interleaved passes ----------------------------------------------------------------
for ((pass = 1; pass <= PASSES; pass++)); do
  for load in $LOADS; do
    for i in "${!NAMES[@]}"; do
      row=$(run "$pass" "${NAMES[$i]}" "${SPIDS[$i]}" "${PORTS[$i]}" "${load%%:*}" "${load#*:}")
      echo "$row" >>"$RESULTS"
      log "pass $pass/$PASSES $(echo "$row" | cut -f2-4,8,9,12,16 | tr '\t' ' ')"
    done
  done
done

# ---- RSS, change → answer, index metrics ------------------------------------------------
RSS=""
for i in "${!NAMES[@]}"; do RSS="$RSS ${NAMES[$i]}=$(rss_mb "${SPIDS[$i]}")"; done
"$FEED_BIN" change --kubeconfig "$S/big/kc.yaml" --dns 127.0.0.1:15357 --count 50 >"$S/out/change.txt" 2>&1 || true
curl -s http://127.0.0.1:19153/metrics | grep -E '^causeway_dns_index_(build_seconds_(sum|count)|records|names)' >"$S/out/index-metrics.txt" || true

VERSIONS="causeway-dns @ $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet -- dns || echo '+dirty'), $(knotd --version 2>&1 | head -1), $(dnsperf -h 2>&1 | awk '/^Version/ {print "dnsperf " $2; exit}')"
python3 "$ROOT/benches/dns/report.py" --raw "$RESULTS" --out "$OUT" --versions "$VERSIONS" --rss "$RSS" \
  --cmd "PASSES=$PASSES LOADS=\"$LOADS\" DUR=$DUR SERVICES=$SERVICES benches/dns/bench.sh $S" \
  --change "$S/out/change.txt"
cat "$OUT"
