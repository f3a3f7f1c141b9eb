#!/usr/bin/env bash
# Late commit, live (docs/dataplane.md, "Late commit"): the module of
# simulate/testdata/latecommit.yaml on one fast sim backend and six slow
# ones, which the planner splits into two groups (the fast machine and
# 5.69 slow ones). A `piccolo gateway` serves it, open loop (Poisson, seed
# 1) for DURATION at each rate of RATES (req/s), without and with
# --late-commit (GATEWAY_FLAGS adds more flags to both), each over fresh
# backends. Prints loadgen's line and the batches late commit moved
# (piccolo_dispatcher_late_committed_batches_total).
# CASES=all adds the neighbouring cases: the first request after the
# start, closed loops (hey) of 4 and 200 connections for 5 s with a lone
# request after each, and the fast backend killed halfway through a run at
# the first rate.
#   RATES="420 600" DURATION=20s scripts/latecommit-live.sh
set -euo pipefail
RATES=${RATES:-420 600}
DURATION=${DURATION:-20s}
CASES=${CASES:-rates}
. scripts/live-common.sh latecommit-live
cfg=simulate/testdata/latecommit.yaml
echo '{"inputs": [{"name": "input0", "shape": [1, 1], "datatype": "FP32", "data": [0.5]}]}' > "$work/body.json"
secs=${DURATION%s}
for lc in false true; do
  echo "backends:" > "$work/backends.yaml"
  bpids=()
  i=0
  for hw in fast slow slow slow slow slow slow; do
    bp=$(port)
    "$P" backend -c "$cfg" --executor sim --hardware $hw --listen 127.0.0.1:$bp --metrics-listen off >"$work/b$i.log" 2>&1 &
    bpids+=($!)
    pids+=($!)
    echo "  - {id: $hw-$i, address: \"127.0.0.1:$bp\", hardware: $hw}" >> "$work/backends.yaml"
    i=$((i + 1))
  done
  gp=$(port)
  G="http://127.0.0.1:$gp"
  "$P" gateway -c "$cfg" -c "$work/backends.yaml" --admin-listen same --listen 127.0.0.1:$gp --grpc-listen 127.0.0.1:$(port) --late-commit=$lc ${GATEWAY_FLAGS:-} >"$work/g.log" 2>&1 &
  g=$!
  pids+=($g)
  wait_ready gateway "$G" "$work/g.log"
  code() { curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$work/body.json" "$G/v2/models/s/infer"; }
  [ "$CASES" = all ] && echo "  late-commit=$lc: the first request after the start: $(code)"
  for r in $RATES; do
    "$P" loadgen --target "$G" --session s --arrival poisson --seed 1 --rate "$r" --duration "$DURATION" --input "$work/body.json" -q -o json >"$work/lg.json"
    python3 scripts/loadgen-report.py "$work/lg.json" "late-commit=$lc $r req/s"
  done
  if [ "$CASES" = all ]; then
    for c in 4 200; do
      echo "  late-commit=$lc hey -c $c -z 5s: $("$HEY" -z 5s -c $c -m POST -T application/json -D "$work/body.json" "$G/v2/models/s/infer" | grep -E '^ *\[[0-9]+\]' | tr -s ' \t' ' ' | tr '\n' ';') lone right after: $(code)"
    done
    ( sleep $((secs / 2)); kill "${bpids[0]}" ) &
    "$P" loadgen --target "$G" --session s --arrival poisson --seed 1 --rate "${RATES%% *}" --duration "$DURATION" --input "$work/body.json" -q -o json >"$work/lg.json"
    python3 scripts/loadgen-report.py "$work/lg.json" "late-commit=$lc fast backend killed at ${secs}/2 s"
  fi
  curl -s "$G/metrics" > "$work/metrics.txt"
  echo "  late-committed batches: $(awk '/^piccolo_dispatcher_late_committed_batches_total/ {s += $2} END {print s + 0}' "$work/metrics.txt"), overflow: $(awk '/^piccolo_dispatcher_overflow_batches_total/ {s += $2} END {print s + 0}' "$work/metrics.txt")"
  kill "$g" "${bpids[@]}" 2>/dev/null || true
  wait "$g" "${bpids[@]}" 2>/dev/null || true
done
