#!/usr/bin/env bash
# benches/proxy/run.sh: causeway-proxy against nginx and HAProxy, in one run, on
# the same nginx backend and the same core pinning (dataplane.md sections 3-4).
#
#   load generator (wrk, h2load, oha)      -> cpu0
#   system under test + nginx backend      -> cpu1
#
# For each target (direct backend, nginx, HAProxy, causeway-proxy, and the L4 floor:
# HAProxy in mode tcp, which does no HTTP work; h1 runs only):
#   wrk    -t1 -c50 -d10s --latency          HTTP/1.1 keep-alive, closed loop (saturation rps)
#   h2load -t1 -c50 -m10 -D 10               HTTP/2 h2c prior knowledge downstream, HTTP/1.1 upstream
#   oha    -c50 -q 5000 -z 15s --latency-correction   open loop below the knee (p50/p99/p99.9)
# and from /proc: the proxy's CPU-us per completed request (utime+stime of all
# its PIDs) and its peak RSS (VmHWM). Before each run it waits until the box is
# idle; after it, it computes the foreign CPU (other tenants) and retries a run
# that had too much.
#
# Usage: benches/proxy/run.sh [--only all|peers|causeway] [--runs N] [--out FILE]
#                             [--quick] [--no-build] [--keep]
#   --only peers     direct + nginx + HAProxy only (no cargo build, no kubesim)
#   --only causeway  direct + causeway-proxy only
#   --runs N         repeat the whole matrix N times (the table shows medians)
#   --out FILE       markdown report (default: benches/results/proxy.md for
#                    --only all, else RUN_DIR/proxy.md)
#   --quick          3 s runs, no idle waiting (smoke test of the harness only)
#   --no-build       use the binaries already built (causeway-proxy in
#                    $CARGO_TARGET_DIR/dataplane, kubesim in $CARGO_TARGET_DIR/bench-fast)
#   --keep           keep the run dir (configs, logs, raw outputs)
# Environment: CARGO_TARGET_DIR (default: <repo>/target), OHA (path to oha),
#   KUBECTL, RATE (5000), LOAD_MAX (1.0: wait for the 1-min load below it at
#   start), LOAD_WAIT (900 s), IDLE_WAIT (60 s per run), FOREIGN_MAX (1.0
#   core-seconds of other tenants' CPU per 10 s of run, i.e. 5% of both cores;
#   a run above it is retried), RETRIES (2), CAUSEWAY_PROXY_ARGS (extra flags).
# Loopback only; every load run is bounded in time; every process this script
# starts is stopped by PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/benches/proxy"

ONLY=all
RUNS=1
OUT=""
QUICK=0
BUILD=1
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only) ONLY=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$ONLY" in all|peers|causeway) ;; *) echo "run.sh: --only must be all, peers or causeway" >&2; exit 2 ;; esac
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --runs needs a positive integer" >&2; exit 2; }

RATE=${RATE:-5000}
LOAD_MAX=${LOAD_MAX:-1.0}
LOAD_WAIT=${LOAD_WAIT:-900}
IDLE_WAIT=${IDLE_WAIT:-60}
FOREIGN_MAX=${FOREIGN_MAX:-1.0}
RETRIES=${RETRIES:-2}
DUR=10
OHA_DUR=15
WARMUP=3
if [[ $QUICK == 1 ]]; then DUR=3; OHA_DUR=3; WARMUP=1; LOAD_WAIT=0; IDLE_WAIT=0; RETRIES=0; fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN_DIR="$CARGO_TARGET_DIR/bench-fast"         # kubesim, bench-proxy-table
PROXY_BIN="$CARGO_TARGET_DIR/dataplane/causeway-proxy"   # the shipped profile (Cargo.toml)

# Ports (loopback only). h1 / h2c per target; causeway-proxy serves both on one port.
P_BACKEND=18080 P_BACKEND_H2=18090
P_NGINX=18081 P_NGINX_H2=18091
P_HAPROXY=18082 P_HAPROXY_H2=18092
P_CAUSEWAY=18083 P_CAUSEWAY_METRICS=18093
P_L4=18084

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- tools
need() { # need NAME "install hint"
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found. Install it with: $2"
}
need taskset "apt-get install -y util-linux"
need curl "apt-get install -y curl"
need python3 "apt-get install -y python3"
need pgrep "apt-get install -y procps"
need nginx "apt-get install -y nginx"
need haproxy "apt-get install -y haproxy"
need wrk "apt-get install -y wrk"
need h2load "apt-get install -y nghttp2-client"
if [[ -z "${OHA:-}" ]]; then
  if command -v oha >/dev/null 2>&1; then OHA=$(command -v oha)
  elif [[ -x /work/tools/bin/oha ]]; then OHA=/work/tools/bin/oha
  else die "'oha' not found (PATH, /work/tools/bin, \$OHA). Install it with: cargo install --locked --root /work/tools oha"
  fi
fi
if [[ $ONLY != peers ]]; then
  need cargo "https://rustup.rs (the repo's rust-toolchain)"
  if [[ -z "${KUBECTL:-}" ]]; then
    if command -v kubectl >/dev/null 2>&1; then KUBECTL=$(command -v kubectl)
    elif [[ -x /root/.pyenv/versions/3.11.7/bin/kubectl ]]; then KUBECTL=/root/.pyenv/versions/3.11.7/bin/kubectl
    else die "'kubectl' not found (PATH, \$KUBECTL). Install it as .ci/run does"
    fi
  fi
fi
[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (loadgen on cpu0, proxy + backend on cpu1)"

# ---------------------------------------------------------------- run dir, cleanup
RUN=$(mktemp -d "${TMPDIR:-/tmp}/causeway-bench-proxy.XXXXXX")
chmod 755 "$RUN"   # nginx workers run as nobody and must read www/
mkdir -p "$RUN"/{run,logs,tmp,www,out}
PIDS=()            # every long-lived process we started (daemons' master PIDs included)

pid_alive() { [[ -n "${1:-}" && -d /proc/$1 ]] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
stop_pid() { # stop_pid PID: TERM, wait up to 5 s, then KILL
  local pid=$1 i
  pid_alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 50); do pid_alive "$pid" || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$? pid
  set +e
  for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
  wait 2>/dev/null
  if [[ $KEEP == 1 || $rc != 0 ]]; then log "run dir kept: $RUN"; else rm -rf "$RUN"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for p in $P_BACKEND $P_BACKEND_H2 $P_NGINX $P_NGINX_H2 $P_HAPROXY $P_HAPROXY_H2 $P_CAUSEWAY $P_CAUSEWAY_METRICS $P_L4; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then die "port 127.0.0.1:$p is already in use"; fi
done

# ---------------------------------------------------------------- /proc accounting
# CPU ticks (all threads) of the given PIDs: utime+stime, or with proc_sticks stime
# alone; fields 14 and 15 of /proc/PID/stat, counted after the last ')' since comm may
# contain spaces.
proc_cpu() {
  local which=$1 t=0 p s f; shift
  for p in "$@"; do
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    s=${s##*) }
    read -ra f <<<"$s"
    if [[ $which == sys ]]; then t=$((t + f[12])); else t=$((t + f[11] + f[12])); fi
  done
  echo "$t"
}
proc_ticks() { proc_cpu all "$@"; }
proc_sticks() { proc_cpu sys "$@"; }
# Sum of VmHWM (kB) of the given PIDs.
proc_hwm_kb() {
  local t=0 p v
  for p in "$@"; do
    v=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
    t=$((t + ${v:-0}))
  done
  echo "$t"
}
# read+write syscalls (syscr+syscw of /proc/PID/io, whole thread group) of the given PIDs.
proc_sysc() {
  local t=0 p
  for p in "$@"; do
    t=$((t + $(awk '/^sysc[rw]:/ {s += $2} END {print s + 0}' "/proc/$p/io" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
# Context switches (voluntary + involuntary) of every thread of the given PIDs.
proc_csw() {
  local t=0 p
  for p in "$@"; do
    t=$((t + $(cat "/proc/$p"/task/*/status 2>/dev/null | awk '/ctxt_switches:/ {s += $2} END {print s + 0}')))
  done
  echo "$t"
}
# Busy ticks of all CPUs from /proc/stat (user nice system irq softirq steal).
busy_ticks() { awk '/^cpu / {print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }
TCK=$(getconf CLK_TCK)
# A daemon's PIDs: the master and its children (nginx workers).
family() { local m=$1; echo "$m" $(pgrep -P "$m" || true); }

# Wait (up to IDLE_WAIT s) until both CPUs are >= 95% idle over 2 s; prints the verdict.
wait_idle() {
  local deadline=$((SECONDS + IDLE_WAIT)) b0 b1
  while :; do
    b0=$(busy_ticks); sleep 2; b1=$(busy_ticks)
    # 2 CPUs x 2 s x TCK ticks; 5% of that
    if (( (b1 - b0) * 100 <= 2 * 2 * TCK * 5 )); then echo idle; return; fi
    if (( SECONDS >= deadline )); then echo "busy($(( (b1 - b0) * 100 / (2 * TCK) ))%cpu)"; return; fi
  done
}

# Wait for the 1-min load average to drop below LOAD_MAX (up to LOAD_WAIT s).
wait_load() {
  local deadline=$((SECONDS + LOAD_WAIT)) l
  while :; do
    l=$(cut -d' ' -f1 /proc/loadavg)
    if python3 -c "import sys; sys.exit(0 if $l < $LOAD_MAX else 1)"; then echo "$l"; return 0; fi
    if (( SECONDS >= deadline )); then echo "$l"; return 1; fi
    log "waiting for a quiet box: 1-min load $l >= $LOAD_MAX ($(( deadline - SECONDS )) s left)"
    sleep 20
  done
}

# ---------------------------------------------------------------- backends and proxies
cp "$HERE/nginx-backend.conf" "$HERE/nginx-proxy.conf" "$HERE/haproxy.cfg" "$HERE/haproxy-l4.cfg" "$RUN/"
# 100-byte body, as in dataplane.md section 3
printf '%099d\n' 0 | tr 0 x >"$RUN/www/index.html"

check_200() { # check_200 URL [curl flags...]
  local url=$1 code; shift
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$@" "$url" || true)
  [[ $code == 200 ]]
}
wait_200() { # wait_200 WHAT SECONDS URL [curl flags...]
  local what=$1 secs=$2 url=$3 i; shift 3
  for ((i = 0; i < secs * 10; i++)); do check_200 "$url" "$@" && return 0; sleep 0.1; done
  die "$what: no 200 from $url within ${secs}s (logs in $RUN/logs)"
}

# start_nginx NAME / start_haproxy: set STARTED to the master PID and record it in
# PIDS (no command substitution: PIDS must be updated in this shell for the trap).
start_nginx() {
  local name=$1
  taskset -c 1 nginx -p "$RUN/" -e "logs/$name.err" -c "$RUN/$name.conf" \
    || die "nginx $name did not start: $(cat "$RUN/logs/$name.err" 2>/dev/null)"
  local i; for i in $(seq 50); do [[ -s "$RUN/run/$name.pid" ]] && break; sleep 0.1; done
  STARTED=$(cat "$RUN/run/$name.pid")
  PIDS+=("$STARTED")
}
start_haproxy() { # start_haproxy NAME (config RUN/NAME.cfg, pidfile RUN/run/NAME.pid)
  local name=$1
  (cd "$RUN" && taskset -c 1 haproxy -f "$RUN/$name.cfg" >"$RUN/logs/$name.log" 2>&1) \
    || die "$name did not start: $(cat "$RUN/logs/$name.log")"
  local i; for i in $(seq 50); do [[ -s "$RUN/run/$name.pid" ]] && break; sleep 0.1; done
  STARTED=$(cat "$RUN/run/$name.pid")
  PIDS+=("$STARTED")
}

# ---------------------------------------------------------------- load runs
RAW="$RUN/out/raw.tsv"
printf 'pass\ttarget\ttool\tattempt\tidle\trps\tp50_ms\tp99_ms\tp999_ms\tmean_ms\tok\tbad\tproxy_ticks\tbackend_ticks\tloadgen_cpu_s\tbusy_ticks\tforeign_s\twall_s\thwm_kb\tproxy_sysc\tproxy_csw\tproxy_sticks\n' >"$RAW"

# parse_wrk FILE -> "rps p50 p99 p999 mean ok bad" (ms)
parse_wrk() {
  python3 - "$1" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
def ms(v):
    m = re.match(r"([\d.]+)(us|ms|s)$", v)
    n, u = float(m.group(1)), m.group(2)
    return n / 1000 if u == "us" else n * 1000 if u == "s" else n
lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", t, re.M))
mean = re.search(r"^\s+Latency\s+(\S+)", t, re.M)
total = int(re.search(r"(\d+) requests in", t).group(1))
bad = sum(int(x) for x in re.findall(r"Non-2xx or 3xx responses: (\d+)", t))
errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", t)
if errs: bad += sum(int(x) for x in errs.groups())
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
print(f"{rps:.0f} {ms(lat['50']):.3f} {ms(lat['99']):.3f} - {ms(mean.group(1)):.3f} {total - bad} {bad}")
PY
}
# parse_h2load FILE -> "rps - - - mean ok bad"
parse_h2load() {
  python3 - "$1" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
rps = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", t).group(1))
m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout", t)
ok, failed, errored, timeout = int(m.group(4)), int(m.group(5)), int(m.group(6)), int(m.group(7))
st = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", t)
bad = failed + errored + timeout + (int(st.group(3)) + int(st.group(4)) if st else 0)
ok = int(st.group(1)) if st else ok
def ms(v):
    n, u = re.match(r"([\d.]+)(us|ms|s)$", v).groups(); n = float(n)
    return n / 1000 if u == "us" else n * 1000 if u == "s" else n
mean = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", t)
print(f"{rps:.0f} - - - {ms(mean.group(1)):.3f} {ok} {bad}")
PY
}
# parse_oha FILE.json -> "rps p50 p99 p999 mean ok bad"
parse_oha() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]; p = d["latencyPercentiles"]
codes = {int(k): v for k, v in d.get("statusCodeDistribution", {}).items()}
ok = sum(v for k, v in codes.items() if 200 <= k < 300)
# requests still in flight when -z ends are cancelled ("aborted due to deadline"): not errors
errs = {k: v for k, v in d.get("errorDistribution", {}).items() if "deadline" not in k}
bad = sum(v for k, v in codes.items() if not 200 <= k < 300) + sum(errs.values())
def ms(x): return "-" if x is None else f"{x * 1000:.3f}"
print(f"{s['requestsPerSec']:.0f} {ms(p['p50'])} {ms(p['p99'])} {ms(p['p99.9'])} {ms(s['average'])} {ok} {bad}")
PY
}

# run_load PASS TARGET TOOL URL "PROXY_PIDS" "BACKEND_PIDS"
run_load() {
  local pass=$1 target=$2 tool=$3 url=$4 proxy_pids=$5 backend_pids=$6
  local attempt idle out tf b0 b1 p0 p1 k0 k1 s0 s1 c0 c1 w0 w1 q0 q1 parsed lg foreign rc
  local -a cmd
  for ((attempt = 1; attempt <= RETRIES + 1; attempt++)); do
    out="$RUN/out/$target-$tool-p$pass-a$attempt"
    case "$tool" in
      wrk) cmd=(taskset -c 0 wrk -t1 -c50 "-d${DUR}s" --latency "$url") ;;
      h2load) cmd=(taskset -c 0 h2load -t1 -c50 -m10 -D "$DUR" "$url") ;;
      oha) cmd=(taskset -c 0 "$OHA" --no-tui --worker-threads 1 -c 50 -q "$RATE" --latency-correction
                -z "${OHA_DUR}s" --output-format json -o "$out.json" "$url") ;;
    esac
    idle=$(wait_idle)
    # shellcheck disable=SC2086
    { p0=$(proc_ticks $proxy_pids); k0=$(proc_ticks $backend_pids); s0=$(proc_sysc $proxy_pids); c0=$(proc_csw $proxy_pids); q0=$(proc_sticks $proxy_pids); }
    b0=$(busy_ticks); w0=$(date +%s.%N)
    tf="$out.time"
    rc=0
    { TIMEFORMAT='%3U %3S'; time "${cmd[@]}" >"$out.txt" 2>"$out.err"; } 2>"$tf" || rc=$?
    w1=$(date +%s.%N); b1=$(busy_ticks)
    # shellcheck disable=SC2086
    { p1=$(proc_ticks $proxy_pids); k1=$(proc_ticks $backend_pids); s1=$(proc_sysc $proxy_pids); c1=$(proc_csw $proxy_pids); q1=$(proc_sticks $proxy_pids); }
    if [[ $rc != 0 ]]; then
      log "$target $tool failed (exit $rc): $(tail -3 "$out.err")"
      parsed="0 - - - - 0 -1"
    else
      case "$tool" in
        wrk) parsed=$(parse_wrk "$out.txt") ;;
        h2load) parsed=$(parse_h2load "$out.txt") ;;
        oha) parsed=$(parse_oha "$out.json") ;;
      esac
    fi
    lg=$(awk '{print $1 + $2}' "$tf" | tail -1)
    # foreign = all busy CPU - (proxy + backend + loadgen)
    foreign=$(awk -v b=$((b1 - b0)) -v p=$((p1 - p0)) -v k=$((k1 - k0)) -v l="$lg" -v t="$TCK" \
      'BEGIN { printf "%.2f", (b - p - k) / t - l }')
    # shellcheck disable=SC2086
    local hwm; hwm=$(proc_hwm_kb $proxy_pids)
    read -r rps p50 p99 p999 mean ok bad <<<"$parsed"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
      "$pass" "$target" "$tool" "$attempt" "$idle" "$rps" "$p50" "$p99" "$p999" "$mean" "$ok" "$bad" \
      $((p1 - p0)) $((k1 - k0)) "$lg" $((b1 - b0)) "$foreign" \
      "$(awk -v a="$w0" -v b="$w1" 'BEGIN { printf "%.2f", b - a }')" "$hwm" $((s1 - s0)) $((c1 - c0)) $((q1 - q0)) >>"$RAW"
    log "$(printf '%-9s %-6s pass %s try %s: %7s req/s p50 %s p99 %s ms, ok %s bad %s, proxy %s ticks, foreign %s s, %s' \
      "$target" "$tool" "$pass" "$attempt" "$rps" "$p50" "$p99" "$ok" "$bad" $((p1 - p0)) "$foreign" "$idle")"
    # FOREIGN_MAX core-seconds per 10 s of run (5% of both cores)
    local limit; limit=$(awk -v m="$FOREIGN_MAX" -v d="$([[ $tool == oha ]] && echo "$OHA_DUR" || echo "$DUR")" 'BEGIN { printf "%.2f", m * d / 10 }')
    if awk -v f="$foreign" -v m="$limit" 'BEGIN { exit !(f < m) }'; then break; fi
    if (( attempt <= RETRIES )); then log "foreign CPU $foreign s >= $limit s: retrying"; fi
  done
  return 0
}

# bench_target PASS TARGET H1_URL H2_URL "PROXY_PIDS" "BACKEND_PIDS"   (H2_URL "-": no h2 run)
bench_target() {
  local pass=$1 target=$2 h1=$3 h2=$4 proxy_pids=$5 backend_pids=$6
  check_200 "$h1" || die "$target: $h1 does not answer 200"
  [[ $h2 == - ]] || check_200 "$h2" --http2-prior-knowledge || die "$target: $h2 does not answer 200 over h2c"
  # warm-up (not measured): fills the upstream keep-alive pools
  taskset -c 0 wrk -t1 -c50 "-d${WARMUP}s" "$h1" >/dev/null 2>&1 || true
  run_load "$pass" "$target" wrk "$h1" "$proxy_pids" "$backend_pids"
  [[ $h2 == - ]] || run_load "$pass" "$target" h2load "$h2" "$proxy_pids" "$backend_pids"
  run_load "$pass" "$target" oha "$h1" "$proxy_pids" "$backend_pids"
}

# ---------------------------------------------------------------- build + hub (causeway-proxy)
CAUSEWAY_NOTE=""
if [[ $ONLY != peers ]]; then
  if [[ $BUILD == 1 ]]; then
    log "building causeway-proxy (cargo build --profile dataplane) and kubesim (--profile bench-fast), CARGO_TARGET_DIR=$CARGO_TARGET_DIR"
    (cd "$ROOT" && cargo build --profile dataplane --bin causeway-proxy) || die "cargo build failed"
    bins=(--bin kubesim)
    [[ -f "$HERE/table.rs" ]] && bins+=(--bin bench-proxy-table)
    (cd "$ROOT" && cargo build --profile bench-fast "${bins[@]}") || die "cargo build failed"
  fi
  [[ -x "$PROXY_BIN" ]] || die "no $PROXY_BIN (cargo build --profile dataplane --bin causeway-proxy)"
  [[ -x "$BIN_DIR/kubesim" ]] || die "no kubesim in $BIN_DIR"
fi

START_LOAD=$(cut -d' ' -f1 /proc/loadavg)
if [[ $QUICK == 0 ]]; then
  if START_LOAD=$(wait_load); then BOX="quiet (1-min load $START_LOAD < $LOAD_MAX at start)"
  else BOX="box busy: numbers indicative (1-min load $START_LOAD >= $LOAD_MAX after waiting ${LOAD_WAIT}s)"; fi
else
  BOX="quick smoke run: numbers not comparable"
fi
log "$BOX"

log "run dir $RUN"
start_nginx nginx-backend
BACKEND=$STARTED
wait_200 "nginx backend" 5 "http://127.0.0.1:$P_BACKEND/"
BACKEND_PIDS=$(family "$BACKEND")

start_hub() {
  log "starting kubesim hub"
  taskset -c 0 "$BIN_DIR/kubesim" --name hub --listen 127.0.0.1:0 --kubeconfig "$RUN/hub.kubeconfig" \
    >"$RUN/logs/kubesim.log" 2>&1 &
  KUBESIM_PID=$!
  PIDS+=("$KUBESIM_PID")
  local i
  for i in $(seq 100); do
    [[ -s "$RUN/hub.kubeconfig" ]] && "$KUBECTL" --kubeconfig "$RUN/hub.kubeconfig" get ns >/dev/null 2>&1 && break
    pid_alive "$KUBESIM_PID" || die "kubesim exited: $(tail -5 "$RUN/logs/kubesim.log")"
    sleep 0.2
  done
  local k=("$KUBECTL" --kubeconfig "$RUN/hub.kubeconfig")
  "${k[@]}" apply -f "$ROOT/deploy/crds/" >"$RUN/logs/kubectl.log" 2>&1 || die "applying CRDs: $(tail -5 "$RUN/logs/kubectl.log")"
  for i in $(seq 50); do
    "${k[@]}" get multiclusteringresses.networking.karmada.io -A >/dev/null 2>&1 \
      && "${k[@]}" get exportedservices.causeway.io -A >/dev/null 2>&1 \
      && "${k[@]}" get serviceimports.multicluster.x-k8s.io -A >/dev/null 2>&1 && break
    sleep 0.2
  done
  sed "s/@BACKEND_PORT@/$P_BACKEND/g" "$HERE/hub-objects.yaml" >"$RUN/hub-objects.yaml"
  "${k[@]}" apply -f "$RUN/hub-objects.yaml" >>"$RUN/logs/kubectl.log" 2>&1 \
    || die "applying hub objects: $(tail -5 "$RUN/logs/kubectl.log")"
}

start_causeway() {
  local extra=()
  # shellcheck disable=SC2206
  [[ -n "${CAUSEWAY_PROXY_ARGS:-}" ]] && extra=($CAUSEWAY_PROXY_ARGS)
  local cmd=(taskset -c 1 "$PROXY_BIN" --hub-kubeconfig "$RUN/hub.kubeconfig" --cluster east
    --listen-http "127.0.0.1:$P_CAUSEWAY" --metrics "127.0.0.1:$P_CAUSEWAY_METRICS" --no-publish ${CAUSEWAY_WORKER_ARGS[@]+"${CAUSEWAY_WORKER_ARGS[@]}"} ${extra[@]+"${extra[@]}"})
  echo "${cmd[*]}" >"$RUN/causeway-proxy.cmd"
  log "starting: ${cmd[*]}"
  RUST_LOG=${RUST_LOG:-warn} "${cmd[@]}" >"$RUN/logs/causeway-proxy.log" 2>&1 &
  CAUSEWAY_PID=$!
  PIDS+=("$CAUSEWAY_PID")
  local i ready=0
  for i in $(seq 300); do
    pid_alive "$CAUSEWAY_PID" || die "causeway-proxy exited: ${cmd[*]}
$(tail -20 "$RUN/logs/causeway-proxy.log")"
    if check_200 "http://127.0.0.1:$P_CAUSEWAY_METRICS/readyz"; then ready=1; break; fi
    sleep 0.1
  done
  [[ $ready == 1 ]] || die "causeway-proxy not ready after 30 s (/readyz on :$P_CAUSEWAY_METRICS): ${cmd[*]}
$(tail -20 "$RUN/logs/causeway-proxy.log")"
  for i in $(seq 100); do
    check_200 "http://127.0.0.1:$P_CAUSEWAY/" && break
    sleep 0.1
  done
  check_200 "http://127.0.0.1:$P_CAUSEWAY/" || die "causeway-proxy is ready but http://127.0.0.1:$P_CAUSEWAY/ does not answer 200: $(curl -s -i --max-time 2 "http://127.0.0.1:$P_CAUSEWAY/" | head -5)
$(tail -20 "$RUN/logs/causeway-proxy.log")"
}

# worker threads: one tokio worker if the binary has a flag for it, else taskset alone
CAUSEWAY_WORKER_ARGS=()
if [[ $ONLY != peers ]]; then
  help=$("$PROXY_BIN" --help 2>&1 || true)
  if grep -q -- '--worker-threads' <<<"$help"; then CAUSEWAY_WORKER_ARGS=(--worker-threads 1); CAUSEWAY_NOTE="--worker-threads 1"
  elif grep -q -- '--workers' <<<"$help"; then CAUSEWAY_WORKER_ARGS=(--workers 1); CAUSEWAY_NOTE="--workers 1"
  else CAUSEWAY_NOTE="no worker-count flag; taskset -c 1 limits it to one core, and tokio sizes its pool from the affinity mask"; fi
  start_hub
  start_causeway
  # what the worker pool really is: tokio names its workers tokio-runtime-worker
  threads=$(cat /proc/"$CAUSEWAY_PID"/task/*/comm 2>/dev/null | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}')
  CAUSEWAY_NOTE="$CAUSEWAY_NOTE; threads at start: $threads"
  log "causeway-proxy: $CAUSEWAY_NOTE"
fi

for ((pass = 1; pass <= RUNS; pass++)); do
  log "=== pass $pass/$RUNS"
  bench_target "$pass" direct "http://127.0.0.1:$P_BACKEND/" "http://127.0.0.1:$P_BACKEND_H2/" "" "$BACKEND_PIDS"
  if [[ $ONLY != causeway ]]; then
    start_nginx nginx-proxy; m=$STARTED
    wait_200 nginx 5 "http://127.0.0.1:$P_NGINX/"
    bench_target "$pass" nginx "http://127.0.0.1:$P_NGINX/" "http://127.0.0.1:$P_NGINX_H2/" "$(family "$m")" "$BACKEND_PIDS"
    stop_pid "$m"
    start_haproxy haproxy; m=$STARTED
    wait_200 haproxy 5 "http://127.0.0.1:$P_HAPROXY/"
    bench_target "$pass" haproxy "http://127.0.0.1:$P_HAPROXY/" "http://127.0.0.1:$P_HAPROXY_H2/" "$(family "$m")" "$BACKEND_PIDS"
    stop_pid "$m"
    start_haproxy haproxy-l4; m=$STARTED
    wait_200 "haproxy (mode tcp)" 5 "http://127.0.0.1:$P_L4/"
    bench_target "$pass" l4 "http://127.0.0.1:$P_L4/" - "$(family "$m")" "$BACKEND_PIDS"
    stop_pid "$m"
  fi
  if [[ $ONLY != peers ]]; then
    bench_target "$pass" causeway "http://127.0.0.1:$P_CAUSEWAY/" "http://127.0.0.1:$P_CAUSEWAY/" "$CAUSEWAY_PID" "$BACKEND_PIDS"
  fi
done

# ---------------------------------------------------------------- route-table rebuild
TABLE_MD=""
if [[ $ONLY == all && -x "$BIN_DIR/bench-proxy-table" ]]; then
  log "route-table rebuild bench (bench-proxy-table, pinned to cpu1)"
  TABLE_MD="$RUN/out/table.md"
  taskset -c 1 "$BIN_DIR/bench-proxy-table" --markdown "$TABLE_MD" >"$RUN/logs/bench-proxy-table.log" 2>&1 \
    || { log "bench-proxy-table failed: $(tail -5 "$RUN/logs/bench-proxy-table.log")"; TABLE_MD=""; }
fi

# ---------------------------------------------------------------- report
if [[ -z "$OUT" ]]; then
  if [[ $ONLY == all && $QUICK == 0 ]]; then OUT="$ROOT/benches/results/proxy.md"; else OUT="$RUN/proxy.md"; KEEP=1; fi
fi
ARGS_LINE="benches/proxy/run.sh --only $ONLY --runs $RUNS"
if [[ $QUICK == 1 ]]; then ARGS_LINE="$ARGS_LINE --quick"; fi
# (wrk -v exits 1; with pipefail every version probe needs its `|| true`)
v_nginx=$(nginx -v 2>&1 | sed 's/.*nginx\///' || true)
v_haproxy=$(haproxy -v 2>&1 | awk 'NR == 1 {print $3}' || true)
v_wrk=$(wrk -v 2>&1 | awk 'NR == 1 {print $2}' || true)
v_h2load=$(h2load --version 2>&1 | awk 'NR == 1' || true)
v_oha=$("$OHA" --version 2>&1 | awk 'NR == 1 {print $2}' || true)
VERSIONS="nginx $v_nginx, HAProxy $v_haproxy, wrk $v_wrk, $v_h2load, oha $v_oha"
if [[ $ONLY != peers ]]; then
  VERSIONS="$VERSIONS, causeway-proxy @ $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet -- proxy || echo '+dirty') (profile dataplane), rustc $(rustc --version | awk '{print $2}')"
fi
MACHINE="$(nproc) CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
python3 "$HERE/report.py" --raw "$RAW" --out "$OUT" --box "$BOX" --cmd "$ARGS_LINE" --versions "$VERSIONS" \
  --machine "$MACHINE" --rate "$RATE" --dur "$DUR" --oha-dur "$OHA_DUR" --causeway-note "$CAUSEWAY_NOTE" \
  --foreign-max "$FOREIGN_MAX" --oha-dur-s "$OHA_DUR" --dur-s "$DUR" --table-md "$TABLE_MD" ${CAUSEWAY_PID:+--causeway-cmd "$(cat "$RUN/causeway-proxy.cmd")"}
log "report: $OUT"
