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
# the figures depend on the host's load.
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

echo "uptime: $(uptime)"
for cal in $CAL; do
  bpids=()
  echo "backends:" > "$work/backends.yaml"
  for i in $(seq 0 $((BACKENDS - 1))); do
    port=$((19401 + i))
    "$P" backend -c "$CFG" --executor sim --hardware v100 --listen 127.0.0.1:$port --metrics-listen 127.0.0.1:$((port + 1000)) \
      --fault "shared=$SHARED" >"$work/b-$i.log" 2>&1 &
    pids+=($!); bpids+=($!)
    echo "  - {id: v100-$i, address: \"127.0.0.1:$port\", hardware: v100}" >> "$work/backends.yaml"
  done
  sleep 1
  PICCOLO_ADMIN_TOKEN=coloc "$P" gateway -c "$CFG" -c "$work/backends.yaml" --listen 127.0.0.1:19390 --grpc-listen 127.0.0.1:19391 \
    --calibration=$cal --watch=false >"$work/g.log" 2>&1 &
  G=$!
  pids+=($G)
  for _ in $(seq 50); do curl -sf 127.0.0.1:19390/v2/health/ready >/dev/null && break; sleep 0.2; done
  echo "calibration=$cal RATE=$RATE SHARED=$SHARED BACKENDS=$BACKENDS"
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
  "$P" loadgen --target http://127.0.0.1:19390 --session chain --rate "$RATE" --duration "${WARM}s" --seed 1 -q -o json >"$work/warm.json" &
  L=$!
  sleep "$WARM"
  "$P" loadgen --target http://127.0.0.1:19390 --session chain --rate "$RATE" --duration "${MEASURE}s" --seed 2 -q -o json >"$work/measure.json"
  wait $L
  report "$work/warm.json" "0-${WARM}s"
  report "$work/measure.json" "then ${MEASURE}s"
  curl -s 127.0.0.1:19390/metrics | grep -E '^piccolo_plan_replans_total\{.*\} [1-9]' | sed 's/^/  /' || true
  curl -s 127.0.0.1:19390/metrics | grep -E '^piccolo_calibration_colocation_slowdown' | sed 's/^/  /' || true
  grep -o '"msg":"co-located models slowing[^}]*' "$work/g.log" | head -4 | sed 's/^/  /' || true
  grep -o '"msg":"plan published[^}]*' "$work/g.log" | sed 's/^/  /' || true
  echo "  placement at the end:"; placement
  "$P" status --target http://127.0.0.1:19390 2>/dev/null | sed -n '/^calibration/,/^$/p' | sed 's/^/  /' || true
  kill $G; wait $G 2>/dev/null || true
  [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$work/g.log" "$KEEP/gateway-coloc-$cal.log"
  for p in "${bpids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${bpids[@]}" 2>/dev/null || true
  sleep 1
done
echo "uptime: $(uptime)"
