#!/usr/bin/env bash
# Fan-out as a distribution, live (docs/planner.md, "Fan-out as a
# distribution"): the session of simulate/testdata/fanout.yaml, a detector (sim
# model det, batch 1, 5 ms) at 40 images/s whose recognizer (rec, batches of
# up to 8) runs one item per object found, SLO 60 ms, served by a `piccolo
# gateway` over BACKENDS sim backends, open loop (Poisson, seed 1) for
# DURATION. The emulated detector finds 0 objects in three images of four and
# 12 in the fourth (sim executor: the module's fanout makes its parent's model
# fan out). PLAN=mean plans it as 3 objects an image (the paper's rate only);
# PLAN=dist (default) with the distribution. GATEWAY_FLAGS adds gateway flags
# (--invocation-slack). Prints loadgen's line and the plan's rec machines.
#   PLAN=mean BACKENDS=1 scripts/fanout-live.sh; PLAN=dist BACKENDS=3 scripts/fanout-live.sh
set -euo pipefail
PLAN=${PLAN:-dist}
BACKENDS=${BACKENDS:-3}
DURATION=${DURATION:-30s}
. scripts/live-common.sh fanout-live
case $PLAN in
mean) planfan="" ;;
dist) planfan=", fanout: {0: 3, 12: 1}" ;;
*) echo "fanout-live: PLAN=$PLAN: want mean or dist" >&2; exit 1 ;;
esac
write() { # write FILE FANOUT: simulate/testdata/fanout.yaml with rec's fanout FANOUT
  sed -e "s/, fanout: {0: 3, 12: 1}/$2/" simulate/testdata/fanout.yaml > "$1"
}
# The backends always emulate the distribution; the gateway plans with it or
# at its mean.
write "$work/backend.yaml" ", fanout: {0: 3, 12: 1}"
write "$work/gateway.yaml" "$planfan"
echo "backends:" > "$work/backends.yaml"
for i in $(seq 0 $((BACKENDS - 1))); do
  bp=$(port)
  "$P" backend -c "$work/backend.yaml" --executor sim --hardware cpu --listen 127.0.0.1:$bp --metrics-listen off >"$work/b$i.log" 2>&1 &
  pids+=($!)
  echo "  - {id: cpu-$i, address: \"127.0.0.1:$bp\", hardware: cpu}" >> "$work/backends.yaml"
done
# 400 distinct images (one FP32 value each), cycled: the emulated detector's
# objects depend on its input, so one repeated body would find the same
# number every time.
mkdir "$work/inputs"
python3 - "$work/inputs" <<'PY'
import json, os, sys
for i in range(400):
    with open(os.path.join(sys.argv[1], "img%03d.json" % i), "w") as f:
        json.dump({"inputs": [{"name": "input0", "shape": [1, 1], "datatype": "FP32", "data": [i + 0.5]}]}, f)
PY
gp=$(port)
gg=$(port)
"$P" gateway --admin-listen same --admin-token fanout-live -c "$work/gateway.yaml" -c "$work/backends.yaml" --listen 127.0.0.1:$gp --grpc-listen 127.0.0.1:$gg \
  ${GATEWAY_FLAGS:-} >"$work/g.log" 2>&1 &
pids+=($!)
wait_ready gateway "http://127.0.0.1:$gp" "$work/g.log"
curl -s -H "Authorization: Bearer fanout-live" "127.0.0.1:$gp/admin/plan" | python3 -c '
import json, sys
p = json.load(sys.stdin)
for s in p.get("sessions", []):
    for m in s["modules"]:
        print("plan: %s %s machines %.3f budget %.1f ms cost %.3f" % (s["name"], m["name"], sum(g["machines"] for g in m["configs"]), m["budget_ms"], m["cost"]))
' || true
"$P" loadgen --target "http://127.0.0.1:$gp" --session ocr --rate 40 --duration "$DURATION" --seed 1 --input "$work/inputs" -q -o json >"$work/lg.json"
python3 scripts/loadgen-report.py "$work/lg.json" "PLAN=$PLAN BACKENDS=$BACKENDS ${GATEWAY_FLAGS:-}"
