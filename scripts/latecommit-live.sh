#!/usr/bin/env bash
# Late commit, live (docs/dataplane.md, "Late commit"): the module of
# simulate/testdata/latecommit.yaml on one fast sim backend and six slow
# ones, which the planner splits into two groups (the fast machine and
# 5.69 slow ones). A `piccolo gateway` serves it, open loop (Poisson, seed
# 1) for DURATION at each rate of RATES (req/s), without and with
# --late-commit (GATEWAY_FLAGS adds more flags to both). Prints loadgen's
# line and the batches late commit moved (piccolo_dispatcher_late_committed_batches_total).
#   RATES="420 600" DURATION=20s scripts/latecommit-live.sh
set -euo pipefail
RATES=${RATES:-420 600}
DURATION=${DURATION:-20s}
. scripts/live-common.sh latecommit-live
cfg=simulate/testdata/latecommit.yaml
echo "backends:" > "$work/backends.yaml"
i=0
for hw in fast slow slow slow slow slow slow; do
  bp=$(port)
  "$P" backend -c "$cfg" --executor sim --hardware $hw --listen 127.0.0.1:$bp --metrics-listen off >"$work/b$i.log" 2>&1 &
  pids+=($!)
  echo "  - {id: $hw-$i, address: \"127.0.0.1:$bp\", hardware: $hw}" >> "$work/backends.yaml"
  i=$((i + 1))
done
echo '{"inputs": [{"name": "input0", "shape": [1, 1], "datatype": "FP32", "data": [0.5]}]}' > "$work/body.json"
for lc in false true; do
  gp=$(port)
  "$P" gateway -c "$cfg" -c "$work/backends.yaml" --admin-listen same --listen 127.0.0.1:$gp --grpc-listen 127.0.0.1:$(port) --late-commit=$lc ${GATEWAY_FLAGS:-} >"$work/g.log" 2>&1 &
  g=$!
  wait_ready gateway "http://127.0.0.1:$gp" "$work/g.log"
  for r in $RATES; do
    "$P" loadgen --target "http://127.0.0.1:$gp" --session s --arrival poisson --seed 1 --rate "$r" --duration "$DURATION" --input "$work/body.json" -q -o json >"$work/lg.json"
    python3 scripts/loadgen-report.py "$work/lg.json" "late-commit=$lc $r req/s"
  done
  curl -s "http://127.0.0.1:$gp/metrics" > "$work/metrics.txt"
  echo "  late-committed batches: $(awk "/^piccolo_dispatcher_late_committed_batches_total/ {s += \$2} END {print s + 0}" "$work/metrics.txt"), overflow: $(awk "/^piccolo_dispatcher_overflow_batches_total/ {s += \$2} END {print s + 0}" "$work/metrics.txt")"
  kill $g; wait $g 2>/dev/null || true
done
