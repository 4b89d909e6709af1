# benches/proxy/hub.sh: sourced by instructions.sh and peak-rss.sh. bench_hub starts the
# nginx backend (100-byte page) and a kubesim hub holding the bench's hub objects
# (hub-objects.yaml: one MCI routing everything to that backend), in run dir $RUN.
# Needs ROOT, HERE, RUN, KUBECTL, KUBESIM (the kubesim binary), and a PIDS array the
# caller's cleanup kills. Usage: bench_hub BACKEND_PORT
bench_hub() {
  local backend=$1
  mkdir -p "$RUN"/{run,logs,tmp,www,out}
  printf '%099d\n' 0 | tr 0 x >"$RUN/www/index.html"
  sed "s/18080/$backend/g; s/18090/$((backend + 10))/g; s/^daemon on;/daemon off;/" \
    "$HERE/nginx-backend.conf" >"$RUN/backend.conf"
  nginx -p "$RUN/" -e logs/backend.err -c "$RUN/backend.conf" &
  PIDS+=($!)
  "$KUBESIM" --name hub --listen 127.0.0.1:0 --kubeconfig "$RUN/hub.kubeconfig" >"$RUN/logs/kubesim.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    [[ -s "$RUN/hub.kubeconfig" ]] && "$KUBECTL" --kubeconfig "$RUN/hub.kubeconfig" get ns >/dev/null 2>&1 && break
    sleep 0.2
  done
  "$KUBECTL" --kubeconfig "$RUN/hub.kubeconfig" apply -f "$ROOT/deploy/crds/" >/dev/null
  for _ in $(seq 50); do
    "$KUBECTL" --kubeconfig "$RUN/hub.kubeconfig" get multiclusteringresses.networking.karmada.io -A >/dev/null 2>&1 && break
    sleep 0.2
  done
  sed "s/@BACKEND_PORT@/$backend/g" "$HERE/hub-objects.yaml" \
    | "$KUBECTL" --kubeconfig "$RUN/hub.kubeconfig" apply -f - >/dev/null
}
