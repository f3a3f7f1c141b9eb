#!/usr/bin/env bash
# Issue 20's calibration, live (docs/calibration.md, "Measured"): the demo's
# paper-chain (configs/demo/paper-gpus.yaml, 50 req/s, SLO 900 ms) through a
# `piccolo gateway` over sim backends, twice the devices its plan needs listed
# (T4S t4 and V100S v100, default 8 and 6), with devices slowed by the
# backends' fault injection:
#   MODE=all   every device slowed SLOW× from the start (--fault slow=SLOW)
#   MODE=one   one device of each module slowed SLOW× (the first t4 and v100)
#   MODE=step  one device of each module (t4-0, v100-0) slows 1.0 → SLOW
#              (default 1.6) in 0.1 steps every 10 s (PUT /admin/faults)
# for each of CAL (default "true false": --calibration on, then off). Poisson
# at 50 req/s (seed 1): one loadgen for the first WARM seconds (default 10,
# the catch-up), a second for the next MEASURE (default 40; MODE=step: 70) s,
# started while the first drains. Prints, per run, the 504s and refusals of
# each part and the share of all the second part's requests within the SLO,
# then the gateway's re-plans and calibration. Loopback only; every process it
# starts is stopped at the end; KEEP=DIR keeps the gateway logs there.
# PICCOLO=BINARY runs that binary instead of building the working tree.
# SEED=N gives the second load generator another Poisson trace (default 2;
# seed 6 has a clump that late-filled m3's machines in 4 runs of 14 before
# the overflow rule of docs/calibration.md).
# CALFILE=FILE passes --calibration-file FILE to the calibrated gateway: run
# twice, the second run starts from what the first learned. TIMELINE=1 also
# prints when the 504s and refusals came (the gateway's counters, scraped
# every 0.5 s: second → count; m:refused=N and m:overflow=N, module m's refusals and batches sent to spares since its plan went live). `uptime` is printed: the figures depend on
# the host's load.
set -euo pipefail
SLOW=${SLOW:-$([ "${MODE:-all}" = step ] && echo 1.6 || echo 1.3)}
MODE=${MODE:-all}
CAL=${CAL:-true false}
T4S=${T4S:-8}
V100S=${V100S:-6}
WARM=${WARM:-10}
MEASURE=${MEASURE:-$([ "$MODE" = step ] && echo 70 || echo 40)}
RATE=${RATE:-50}
SEED=${SEED:-2} # the second load generator's trace (the first is seed 1)
# GATEWAY_FLAGS adds flags to piccolo gateway (e.g. --invocation-slack).
# PORTS: the first of the ports it takes (gateway PORTS and PORTS+1, backends
# from PORTS+11, their metrics 1000 above), so that two runs can share a host.
PORTS=${PORTS:-19290}
GW=127.0.0.1:$PORTS
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
if [ -n "${PICCOLO:-}" ]; then # a binary built elsewhere (an A/B of two commits)
  P=$(realpath "$PICCOLO")
else
  go build -o "$work/piccolo" ./cmd/piccolo
  P=$work/piccolo
fi
CFG=configs/demo/paper-gpus.yaml

report() { python3 scripts/loadgen-report.py "$@"; } # $1 json, $2 label

echo "uptime: $(uptime)"
for cal in $CAL; do
  bpids=()
  echo "backends:" > "$work/backends.yaml"
  port=$((PORTS + 10))
  for hw in t4 v100; do
    n=$T4S; [ $hw = v100 ] && n=$V100S
    for i in $(seq 0 $((n - 1))); do
      port=$((port + 1))
      fault=()
      if [ "$MODE" = all ] || { [ "$MODE" = one ] && [ "$i" = 0 ]; }; then fault=(--fault "slow=$SLOW"); fi
      "$P" backend --fault-injection -c $CFG --executor sim --hardware $hw --listen 127.0.0.1:$port --metrics-listen 127.0.0.1:$((port + 1000)) \
        "${fault[@]}" >"$work/b-$hw-$i.log" 2>&1 &
      pids+=($!); bpids+=($!)
      echo "  - {id: $hw-$i, address: \"127.0.0.1:$port\", hardware: $hw}" >> "$work/backends.yaml"
    done
  done
  sleep 1
  "$P" gateway --admin-listen same -c $CFG -c "$work/backends.yaml" --listen $GW --grpc-listen 127.0.0.1:$((PORTS + 1)) \
    --calibration=$cal ${CALFILE:+$([ "$cal" = true ] && echo --calibration-file="$CALFILE")} --watch=false ${GATEWAY_FLAGS:-} >"$work/g.log" 2>&1 &
  G=$!
  pids+=($G)
  for _ in $(seq 50); do curl -sf $GW/v2/health/ready >/dev/null && break; sleep 0.2; done
  echo "calibration=$cal MODE=$MODE SLOW=$SLOW"
  if [ "$MODE" = step ]; then
    (
      for k in 1.1 1.2 1.3 1.4 1.5 1.6; do
        f=$(python3 -c "print(min($k, $SLOW))")
        for mport in $((PORTS + 1011)) $((PORTS + 1011 + T4S)); do # t4-0, v100-0
          curl -s -X PUT -d "{\"slow\": $f}" 127.0.0.1:$mport/admin/faults >/dev/null
        done
        sleep 10
      done
    ) &
    pids+=($!)
  fi
  if [ -n "${TIMELINE:-}" ]; then
    ( t0=$(date +%s.%N); while kill -0 $G 2>/dev/null; do
        curl -s $GW/metrics >"$work/m.prom"
        printf '%s %s %s %s\n' "$(python3 -c "print('%.1f' % ($(date +%s.%N) - $t0))")" \
          "$(grep -E '^piccolo_gateway_requests_total\{.*code="(504|503|429)"' "$work/m.prom" | sed -E 's/.*code="([0-9]+)".* ([0-9]+)$/\1=\2/' | tr '\n' ' ')" \
          "$(grep -E '^piccolo_dispatcher_class_items_total\{.*outcome="overloaded"' "$work/m.prom" | sed -E 's/.*module="([^"]+)".* ([0-9]+)$/\1:refused=\2/' | tr '\n' ' ')" \
          "$(grep -E '^piccolo_dispatcher_overflow_batches_total\{' "$work/m.prom" | sed -E 's/.*module="([^"]+)".* ([0-9]+)$/\1:overflow=\2/' | tr '\n' ' ')"
        sleep 0.5; done >"$work/timeline.txt" 2>/dev/null ) &
    pids+=($!)
  fi
  "$P" loadgen --target http://$GW --session paper-chain --rate $RATE --duration ${WARM}s --seed 1 -q -o json >"$work/warm.json" &
  L=$!
  sleep "$WARM"
  "$P" loadgen --target http://$GW --session paper-chain --rate $RATE --duration ${MEASURE}s --seed "$SEED" -q -o json >"$work/measure.json"
  wait $L
  report "$work/warm.json" "0-${WARM}s"
  if [ -n "${TIMELINE:-}" ]; then # the seconds in which the 504 or refusal counts grew
    awk '{k = ""; for (i = 2; i <= NF; i++) if ($i !~ /=0$/) k = k " " $i
      if (k != last && n++ < 40) print "  t=" $1 "s" k; last = k}' "$work/timeline.txt"
  fi
  report "$work/measure.json" "then ${MEASURE}s"
  curl -s $GW/metrics | grep -E '^piccolo_plan_replans_total\{.*\} [1-9]' | sed 's/^/  /' || true
  # where admission refused (per module) and how many batches went to spares
  curl -s $GW/metrics | grep -E '^(piccolo_gateway_admission_rejections_total|piccolo_dispatcher_overflow_batches_total)\{.*\} [1-9]' | sed 's/^/  /' || true
  grep -o '"msg":"profiles drifting[^}]*' "$work/g.log" | head -3 | sed 's/^/  /' || true
  "$P" status --target http://$GW 2>/dev/null | sed -n '/^calibration/,/^$/p' | sed 's/^/  /' || true
  kill $G; wait $G 2>/dev/null || true
  [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$work/g.log" "$KEEP/gateway-$MODE-$SLOW-$cal.log"
  for p in "${bpids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${bpids[@]}" 2>/dev/null || true
  sleep 1
done
echo "uptime: $(uptime)"
