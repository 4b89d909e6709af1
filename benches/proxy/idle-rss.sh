#!/usr/bin/env bash
# benches/proxy/idle-rss.sh: idle memory of causeway-proxy serving N MultiClusterIngresses
# (issue 16 item 4).
#
# Starts a kubesim hub, creates N Services the way the hub holds them (ServiceImport,
# ExportedService from cluster `east`, an EndpointSlice with E ready endpoints) and one
# MultiClusterIngress per Service (one host, two Prefix paths), starts causeway-proxy
# (the shipped `dataplane` profile, one worker as in run.sh), waits until its route table
# serves all N (the causeway_proxy_table_mcis gauge), lets it settle and prints VmRSS,
# VmHWM and RssAnon. No request is sent: this is the table and the watch caches alone.
#
# Usage: benches/proxy/idle-rss.sh [--mcis N] [--endpoints-per-service E]
# Environment: CARGO_TARGET_DIR (default <repo>/target), PROXY_BIN (default
#   $CARGO_TARGET_DIR/dataplane/causeway-proxy), KUBESIM (default: the first of
#   $CARGO_TARGET_DIR/{bench-fast,release,debug}/kubesim), KUBECTL (default kubectl).
set -euo pipefail

MCIS=1000
EPS=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --mcis) MCIS=$2; shift 2 ;;
    --endpoints-per-service) EPS=$2; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "idle-rss.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
PROXY_BIN=${PROXY_BIN:-$TARGET/dataplane/causeway-proxy}
KUBECTL=${KUBECTL:-kubectl}
if [[ -z ${KUBESIM:-} ]]; then
  for p in bench-fast release debug; do
    [[ -x "$TARGET/$p/kubesim" ]] && { KUBESIM="$TARGET/$p/kubesim"; break; }
  done
fi
[[ -x "$PROXY_BIN" ]] || { echo "no $PROXY_BIN (cargo build --profile dataplane --bin causeway-proxy)" >&2; exit 1; }
[[ -x "${KUBESIM:-}" ]] || { echo "no kubesim binary (cargo build --profile bench-fast --bin kubesim, or set KUBESIM)" >&2; exit 1; }

RUN=$(mktemp -d /tmp/proxy-idle-rss.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$RUN"; }
trap cleanup EXIT
log() { echo "[idle-rss $(date +%T)] $*" >&2; }

"$KUBESIM" --name hub --listen 127.0.0.1:0 --kubeconfig "$RUN/hub.kubeconfig" >"$RUN/kubesim.log" 2>&1 &
PIDS+=($!)
k=("$KUBECTL" --kubeconfig "$RUN/hub.kubeconfig")
for _ in $(seq 100); do
  [[ -s "$RUN/hub.kubeconfig" ]] && "${k[@]}" get ns >/dev/null 2>&1 && break
  sleep 0.2
done
"${k[@]}" apply -f "$ROOT/deploy/crds/" >"$RUN/kubectl.log" 2>&1
for _ in $(seq 50); do
  "${k[@]}" get multiclusteringresses.networking.karmada.io -A >/dev/null 2>&1 && break
  sleep 0.2
done

log "creating $MCIS MultiClusterIngresses with their Services ($EPS endpoints each) in $RUN"
python3 - "$MCIS" "$EPS" >"$RUN/objects.yaml" <<'EOF'
import sys
n, eps = int(sys.argv[1]), int(sys.argv[2])
namespaces = 10
docs = ["""apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: causeway}
spec: {controller: causeway.io/ingress-controller}"""]
for ns in range(namespaces):
    docs.append(f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: ns{ns}}}")
for i in range(n):
    ns, name = f"ns{i % namespaces}", f"svc{i}"
    addrs = "".join(
        f"\n- addresses: [127.{1 + i // 250 % 250}.{i % 250}.{1 + e}]\n  conditions: {{ready: true, serving: true, terminating: false}}"
        for e in range(eps))
    docs += [
        f"""apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: {name}, namespace: {ns}}}
spec:
  type: ClusterSetIP
  ports: [{{name: http, protocol: TCP, port: 80}}]""",
        f"""apiVersion: causeway.io/v1alpha1
kind: ExportedService
metadata: {{name: {name}.east, namespace: {ns}}}
spec:
  cluster: east
  service: {name}
  ports: [{{name: http, protocol: TCP, port: 80, targetPort: 8080}}]""",
        f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-east
  namespace: {ns}
  labels:
    multicluster.kubernetes.io/service-name: {name}
    multicluster.kubernetes.io/source-cluster: east
    endpointslice.kubernetes.io/managed-by: causeway.io
addressType: IPv4
ports: [{{name: http, protocol: TCP, port: 8080}}]
endpoints:{addrs}""",
        f"""apiVersion: networking.karmada.io/v1alpha1
kind: MultiClusterIngress
metadata: {{name: {name}, namespace: {ns}}}
spec:
  ingressClassName: causeway
  rules:
  - host: {name}.example.com
    http:
      paths:
      - {{path: /api, pathType: Prefix, backend: {{service: {{name: {name}, port: {{number: 80}}}}}}}}
      - {{path: /, pathType: Prefix, backend: {{service: {{name: {name}, port: {{number: 80}}}}}}}}""",
    ]
print("\n---\n".join(docs))
EOF
"${k[@]}" create -f "$RUN/objects.yaml" >>"$RUN/kubectl.log" 2>&1

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P_HTTP=$(port)
P_METRICS=$(port)
RUST_LOG=${RUST_LOG:-warn} taskset -c 1 "$PROXY_BIN" --hub-kubeconfig "$RUN/hub.kubeconfig" --cluster east \
  --listen-http "127.0.0.1:$P_HTTP" --metrics "127.0.0.1:$P_METRICS" --no-publish --worker-threads 1 \
  >"$RUN/proxy.log" 2>&1 &
PROXY=$!
PIDS+=("$PROXY")
start=$(date +%s.%N)
served=0
for _ in $(seq 600); do
  kill -0 "$PROXY" 2>/dev/null || { echo "causeway-proxy exited: $(tail -5 "$RUN/proxy.log")" >&2; exit 1; }
  served=$(curl -s --max-time 1 "http://127.0.0.1:$P_METRICS/metrics" | awk '/^causeway_proxy_table_mcis /{print $2}' || true)
  [[ ${served:-0} -ge $MCIS ]] && break
  sleep 0.1
done
[[ ${served:-0} -ge $MCIS ]] || { echo "the proxy serves ${served:-0} of $MCIS MCIs after 60 s" >&2; exit 1; }
built=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
sleep 3   # settle: the first rebuilds' garbage freed
st=/proc/$PROXY/status
echo "causeway-proxy, $MCIS MCIs ($((MCIS * EPS)) endpoints), idle, $(awk '/^Threads:/{print $2}' "$st") threads: table served after ${built} s;" \
  "VmRSS $(awk '/^VmRSS:/{printf "%.1f MiB", $2/1024}' "$st")," \
  "VmHWM $(awk '/^VmHWM:/{printf "%.1f MiB", $2/1024}' "$st")," \
  "RssAnon $(awk '/^RssAnon:/{printf "%.1f MiB", $2/1024}' "$st")," \
  "RssFile $(awk '/^RssFile:/{printf "%.1f MiB", $2/1024}' "$st")"
