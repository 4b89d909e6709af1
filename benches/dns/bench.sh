#!/usr/bin/env bash
# DNS bench: causeway-dns vs Knot vs stock hickory-dns, one run, same box, same pinning.
#
#   benches/dns/bench.sh [SCRATCH_DIR]
#
# Needs: dnsperf, knotd, kdig (apt-get install -y dnsperf knot knot-dnsutils), python3,
# and hickory-dns 0.26.3 at $HICKORY (default: $SCRATCH/tools/bin/hickory-dns; installed
# with `cargo install --root $SCRATCH/tools hickory-dns --version 0.26.3` when missing).
# Layout (dataplane.md §3.4/§4): dnsperf on cpu0 (`taskset -c 0`), the server on cpu1
# (`taskset -c 1`) with one worker. Server CPU per query = Δ(utime+stime) of the server
# PID from /proc/PID/stat ÷ completed queries. causeway-dns is fed from kubesim by
# `bench-dns-feed` (dns/examples), which also measures ServiceImport change → answer.
# Env: RATE (fixed offered rate, default 30000), DUR (seconds per run, default 10),
# SERVICES (default 10000), SMALL (services of the small zone, default 1000), QUIET_WAIT
# (seconds to wait for an idle box before each run, default 45), SKIP_BUILD.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
S=${1:-/tmp/causeway-dns-bench}
RATE=${RATE:-30000}
DUR=${DUR:-10}
SERVICES=${SERVICES:-10000}
SMALL=${SMALL:-1000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
HICKORY=${HICKORY:-$S/tools/bin/hickory-dns}
TICK=$(getconf CLK_TCK)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

mkdir -p "$S/big" "$S/small" "$S/knot-run" "$S/out"
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# ---- inputs and binaries -------------------------------------------------------------
python3 "$ROOT/benches/dns/gen.py" --services "$SERVICES" --out "$S/big" >&2
python3 "$ROOT/benches/dns/gen.py" --services "$SMALL" --out "$S/small" >&2
# Two builds: one command would unify the example's dev-dependency features into the binary.
# SKIP_BUILD=1 uses what is already in $CARGO_TARGET_DIR/release.
if [ -z "${SKIP_BUILD:-}" ]; then
  (cd "$ROOT" && cargo build --release -p causeway-dns --bin causeway-dns && cargo build --release -p causeway-dns --example bench-dns-feed) >&2
fi
DNS_BIN=$CARGO_TARGET_DIR/release/causeway-dns
FEED_BIN=$CARGO_TARGET_DIR/release/examples/bench-dns-feed
if [ ! -x "$HICKORY" ]; then
  cargo install --root "$S/tools" hickory-dns --version 0.26.3 >&2
fi

# ---- helpers ---------------------------------------------------------------------------
cpu_ticks() { awk '{ s=$0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }
rss_mb() { awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
busy_pct() { # whole-box CPU busy % over 1 s
  local a b; a=$(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat); sleep 1
  b=$(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat)
  echo "$a $b" | awk '{ busy=$3-$1; idle=$4-$2; printf "%d", 100*busy/(busy+idle+0.001) }'
}
wait_quiet() { # up to QUIET_WAIT s (default 45) for the box to be below 15% busy; prints the last reading
  local b i
  for i in $(seq 1 "${QUIET_WAIT:-45}"); do b=$(busy_pct); [ "$b" -lt 15 ] && break; done
  echo "$b"
}
wait_dns() { # port name
  for _ in $(seq 1 300); do
    kdig @127.0.0.1 -p "$1" +short +timeout=1 +retry=0 "$2" A >/dev/null 2>&1 &&
      [ -n "$(kdig @127.0.0.1 -p "$1" +short +timeout=1 +retry=0 "$2" A)" ] && return 0
    sleep 0.2
  done
  echo "server on port $1 never answered $2" >&2; return 1
}
# run SERVER PID PORT QUERYFILE RATE(0=max) -> TSV line
run() {
  local server=$1 pid=$2 port=$3 qf=$4 rate=$5 quiet t0 t1 out q qps lat extra=()
  [ "$rate" != 0 ] && extra=(-Q "$rate")
  quiet=$(wait_quiet)
  t0=$(cpu_ticks "$pid")
  out=$(taskset -c 0 dnsperf -s 127.0.0.1 -p "$port" -d "$qf" -l "$DUR" -c 4 -T 1 -q 200 "${extra[@]}" 2>&1)
  t1=$(cpu_ticks "$pid")
  q=$(echo "$out" | awk '/Queries completed:/ {print $3}')
  qps=$(echo "$out" | awk '/Queries per second:/ {print $4}')
  lat=$(echo "$out" | awk '/Average Latency/ {print $4}')
  local lost; lost=$(echo "$out" | awk '/Queries lost:/ {print $3}')
  awk -v s="$server" -v f="$(basename "$qf" .txt)" -v r="$rate" -v q="$q" -v qps="$qps" -v lat="$lat" \
      -v dt="$((t1 - t0))" -v tick="$TICK" -v quiet="$quiet" -v lost="$lost" \
      'BEGIN { printf "%s\t%s\t%s\t%.0f\t%.2f\t%.0f\t%s\t%s\n", s, f, r, qps, dt / tick * 1e6 / (q > 0 ? q : 1), lat * 1e6, lost, quiet }'
}
measure() { # SERVER PID PORT DIR
  local s=$1 pid=$2 port=$3 d=$4
  run "$s" "$pid" "$port" "$d/q_a.txt" 0
  run "$s" "$pid" "$port" "$d/q_mix.txt" 0
  run "$s" "$pid" "$port" "$d/q_a.txt" "$RATE"
  run "$s" "$pid" "$port" "$d/q_mix.txt" "$RATE"
  run "$s" "$pid" "$port" "$d/q_nx.txt" 10000
  echo -e "$s\trss_mb\t-\t$(rss_mb "$pid")\t-\t-\t-\t-"
}
measure_nx_small() { run "$1" "$2" "$3" "$S/small/q_nx.txt" 10000 | sed 's/\tq_nx\t/\tq_nx_small\t/'; }

RESULTS=$S/out/results.tsv
echo -e "server\tqueries\trate\tqps\tcpu_us_per_q\tavg_lat_us\tlost\tbox_busy_pct_before" >"$RESULTS"

# ---- Knot ------------------------------------------------------------------------------
knot_conf() { # DIR PORT
  cat <<EOF
server:
    rundir: "$S/knot-run"
    listen: 127.0.0.1@$2
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
    file: "$1/clusterset.local.zone"
    zonefile-sync: -1
    journal-content: none
EOF
}
for size in big small; do
  knot_conf "$S/$size" 15353 >"$S/knot-$size.conf"
  rm -rf "$S/knot-run" && mkdir -p "$S/knot-run"
  taskset -c 1 knotd -c "$S/knot-$size.conf" >"$S/out/knot-$size.log" 2>&1 &
  KP=$!; PIDS+=("$KP")
  wait_dns 15353 svc0.ns0.svc.clusterset.local.
  log "knot ($size zone) pid $KP"
  if [ "$size" = big ]; then measure knot "$KP" 15353 "$S/big" >>"$RESULTS"; else measure_nx_small knot "$KP" 15353 >>"$RESULTS"; fi
  kill "$KP"; wait "$KP" 2>/dev/null || true
done

# ---- stock hickory-dns (in-memory store from the zone file) ----------------------------
for size in big small; do
  cat >"$S/hickory-$size.toml" <<EOF
user = "nobody"
group = "nogroup"
listen_addrs_ipv4 = ["127.0.0.1"]
listen_port = 15356
[[zones]]
zone = "clusterset.local"
zone_type = "Primary"
[zones.stores]
type = "file"
zone_path = "$S/$size/clusterset.local.zone"
EOF
  taskset -c 1 "$HICKORY" -c "$S/hickory-$size.toml" -q --workers 1 >"$S/out/hickory-$size.log" 2>&1 &
  HP=$!; PIDS+=("$HP")
  wait_dns 15356 svc0.ns0.svc.clusterset.local.
  log "hickory-dns ($size zone) pid $HP"
  if [ "$size" = big ]; then measure hickory-dns "$HP" 15356 "$S/big" >>"$RESULTS"; else measure_nx_small hickory-dns "$HP" 15356 >>"$RESULTS"; fi
  kill "$HP"; wait "$HP" 2>/dev/null || true
done

# ---- causeway-dns fed from kubesim ---------------------------------------------------
for size in big small; do
  rm -f "$S/$size/kc.yaml"
  taskset -c 0 "$FEED_BIN" serve --spec "$S/$size/services.json" --kubeconfig-out "$S/$size/kc.yaml" 2>"$S/out/feed-$size.log" &
  FP=$!; PIDS+=("$FP")
  for _ in $(seq 1 600); do [ -s "$S/$size/kc.yaml" ] && break; sleep 0.5; done
  [ -s "$S/$size/kc.yaml" ] || { echo "bench-dns-feed did not finish; see $S/out/feed-$size.log" >&2; exit 1; }
  taskset -c 1 "$DNS_BIN" --kubeconfig "$S/$size/kc.yaml" --listen 127.0.0.1:15357 --workers 1 --log warn \
    --metrics 127.0.0.1:19153 >"$S/out/causeway-$size.log" 2>&1 &
  CP=$!; PIDS+=("$CP")
  wait_dns 15357 svc0.ns0.svc.clusterset.local.
  for _ in $(seq 1 100); do [ -n "$(kdig @127.0.0.1 -p 15357 +short hsvc9.ns9.svc.clusterset.local. A)" ] && break; sleep 0.2; done
  log "causeway-dns ($size zone) pid $CP"
  if [ "$size" = big ]; then
    measure causeway-dns "$CP" 15357 "$S/big" >>"$RESULTS"
    "$FEED_BIN" change --kubeconfig "$S/big/kc.yaml" --dns 127.0.0.1:15357 --count 50 | tee "$S/out/change.txt" >&2
    curl -s http://127.0.0.1:19153/metrics | grep -E '^causeway_dns_index_(build_seconds_(sum|count)|records|names)' >"$S/out/index-metrics.txt" || true
  else
    measure_nx_small causeway-dns "$CP" 15357 >>"$RESULTS"
  fi
  kill "$CP" "$FP"; wait "$CP" "$FP" 2>/dev/null || true
done

column -t -s $'\t' "$RESULTS"
cat "$S/out/change.txt"
cat "$S/out/index-metrics.txt"
