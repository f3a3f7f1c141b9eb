#!/usr/bin/env bash
# Issue 20's co-location avoidance, live (docs/calibration.md, "Co-location"):
# the demo's M2 -> M3 chain (configs/demo/paper-gpus.yaml) on v100 only (Table I's durations, SLO 900 ms) at
# RATE req/s (default 25: m2 about 1.1 and m3 about 1.4 machines, so their fractions
# are packed on one device), through a `piccolo gateway` over BACKENDS sim
# v100 backends (default 5: the plan needs 3), every backend with
# `--fault shared=SHARED` (default 1.5: a batch takes 1.5x when another
# model ran a batch on its backend within 1 s). For each of CAL (default "true false":
# --calibration on, then off) it sends Poisson requests for WARM (default
# 20) then MEASURE (default 40) seconds and prints each part's share within
# the SLO, the re-plans by cause, the co-location slowdowns measured and
# where each model ran at the end. Loopback only; every process it starts is
# stopped at the end; KEEP=DIR keeps the gateway logs. `uptime` is printed:
# the figures depend on the host's load. CONSUL=1: the same as a cluster:
# a `consul agent -dev` (from $PICCOLO_CACHE, default ~/.cache/piccolo), the
# backends registered there, the gateway --consul (and so the elected
# scheduler, following the calibrations in Consul KV). CONSUL=2: and a
# second gateway, --schedule=false, that takes all the requests: the
# elected scheduler in the first one measures nothing itself and learns the
# slowdown only from the second's calibration in Consul KV.
set -euo pipefail
RATE=${RATE:-25}
BACKENDS=${BACKENDS:-5}
SHARED=${SHARED:-1.5}
CAL=${CAL:-true false}
WARM=${WARM:-20}
MEASURE=${MEASURE:-40}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/piccolo" ./cmd/piccolo
P=$work/piccolo
# The demo's chain at RATE; only v100 backends are listed, so only v100 is
# planned (the control loop plans the hardware types present).
CFG=$work/chain.yaml
sed "s/rate: 50/rate: $RATE/; s/name: paper-chain/name: chain/" configs/demo/paper-gpus.yaml >"$CFG"
report() { python3 scripts/loadgen-report.py "$@"; }

CONSUL=${CONSUL:-}
if [ -n "$CONSUL" ]; then
  consul=$(ls "${PICCOLO_CACHE:-$HOME/.cache/piccolo}"/bin/consul-* | head -1)
fi
echo "uptime: $(uptime)"
for cal in $CAL; do
  cluster=()
  if [ -n "$CONSUL" ]; then
    "$consul" agent -dev -bind=127.0.0.1 -client=127.0.0.1 -http-port=19500 -https-port=-1 -dns-port=-1 -grpc-port=-1 \
      -grpc-tls-port=-1 -serf-lan-port=19501 -serf-wan-port=19502 -server-port=19503 >"$work/consul.log" 2>&1 &
    C=$!
    pids+=($C)
    for _ in $(seq 50); do curl -sf 127.0.0.1:19500/v1/status/leader | grep -q : && break; sleep 0.2; done
    cluster=(--consul 127.0.0.1:19500)
  fi
  bpids=()
  echo "backends:" > "$work/backends.yaml"
  for i in $(seq 0 $((BACKENDS - 1))); do
    port=$((19401 + i))
    "$P" backend --fault-injection -c "$CFG" --executor sim --hardware v100 --listen 127.0.0.1:$port --metrics-listen 127.0.0.1:$((port + 1000)) \
      --fault "shared=$SHARED" ${CONSUL:+--consul 127.0.0.1:19500 --id v100-$i} >"$work/b-$i.log" 2>&1 &
    pids+=($!); bpids+=($!)
    echo "  - {id: v100-$i, address: \"127.0.0.1:$port\", hardware: v100}" >> "$work/backends.yaml"
  done
  sleep 1
  backends=(-c "$work/backends.yaml")
  [ -n "$CONSUL" ] && backends=()
  PICCOLO_ADMIN_TOKEN=coloc "$P" gateway --admin-listen same -c "$CFG" "${backends[@]}" "${cluster[@]}" --listen 127.0.0.1:19390 --grpc-listen 127.0.0.1:19391 \
    --calibration=$cal --watch=false >"$work/g.log" 2>&1 &
  G=$!
  pids+=($G)
  for _ in $(seq 150); do curl -sf 127.0.0.1:19390/v2/health/ready >/dev/null && break; sleep 0.2; done
  T=127.0.0.1:19390 # the gateway the requests go to
  if [ "$CONSUL" = 2 ]; then
    "$P" gateway --admin-listen same -c "$CFG" "${cluster[@]}" --schedule=false --listen 127.0.0.1:19392 --grpc-listen 127.0.0.1:19393 \
      --calibration=$cal --watch=false >"$work/g2.log" 2>&1 &
    pids+=($!)
    G2=$!
    T=127.0.0.1:19392
    for _ in $(seq 150); do curl -sf $T/v2/health/ready >/dev/null && break; sleep 0.2; done
  fi
  echo "calibration=$cal RATE=$RATE SHARED=$SHARED BACKENDS=$BACKENDS${CONSUL:+ (Consul cluster)}"
  placement() {
    curl -s -H 'Authorization: Bearer coloc' 127.0.0.1:19390/admin/plan | python3 -c '
import json, sys
p = json.load(sys.stdin)
for s in p["sessions"]:
    for m in s.get("modules", []):
        for g in m["configs"]:
            print("    %s: %.3g machines b%d on %s" % (m["name"], g["machines"], g["batch"], ", ".join(g.get("backends") or [])))'
  }
  echo "  placement at start:"; placement
  "$P" loadgen --target http://$T --session chain --rate "$RATE" --duration "${WARM}s" --seed 1 -q -o json >"$work/warm.json" &
  L=$!
  sleep "$WARM"
  "$P" loadgen --target http://$T --session chain --rate "$RATE" --duration "${MEASURE}s" --seed 2 -q -o json >"$work/measure.json"
  wait $L
  report "$work/warm.json" "0-${WARM}s"
  report "$work/measure.json" "then ${MEASURE}s"
  curl -s $T/metrics | grep -E '^piccolo_plan_replans_total\{.*\} [1-9]' | sed 's/^/  /' || true
  curl -s $T/metrics | grep -E '^piccolo_calibration_colocation_slowdown' | sed 's/^/  /' || true
  grep -o '"msg":"co-located models slowing[^}]*' "$work/g.log" | head -4 | sed 's/^/  /' || true
  grep -o '"msg":"plan published[^}]*' "$work/g.log" | sed 's/^/  /' || true
  echo "  placement at the end:"; placement
  "$P" status --target http://$T 2>/dev/null | sed -n '/^calibration/,/^$/p' | sed 's/^/  /' || true
  if [ "$CONSUL" = 2 ]; then kill "$G2"; wait "$G2" 2>/dev/null || true; fi
  kill $G; wait $G 2>/dev/null || true
  [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$work/g.log" "$KEEP/gateway-coloc-$cal.log"
  for p in "${bpids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${bpids[@]}" 2>/dev/null || true
  if [ -n "$CONSUL" ]; then kill "$C"; wait "$C" 2>/dev/null || true; fi
  sleep 1
done
echo "uptime: $(uptime)"
