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
# (--invocation-slack). Prints the plan's machines and loadgen's line.
# CASES=all adds the neighbouring cases: the first request after the start,
# 2x and 0.5x the planned rate, closed loops (hey) of 4 and 200 connections
# with a lone request after each, and a backend killed halfway through a run.
# PLAN=under declares rec at 60 items/s (1.5 an image, half the true mean)
# without the distribution, and prints the plan after the run and the
# re-plans: the gateway counts rec's own items and re-plans it as measured.
# PLAN=mean prints the same: from 1,000 images counted the gateway plans rec
# with the distribution it measured (cause fanout); DURATION=60s shows it.
#   PLAN=mean BACKENDS=1 scripts/fanout-live.sh; PLAN=dist BACKENDS=3 scripts/fanout-live.sh
set -euo pipefail
PLAN=${PLAN:-dist}
BACKENDS=${BACKENDS:-3}
DURATION=${DURATION:-30s}
CASES=${CASES:-plan}
. scripts/live-common.sh fanout-live
recrate=120
case $PLAN in
mean) planfan="" ;;
dist) planfan=", fanout: {0: 3, 12: 1}" ;;
under) planfan="" recrate=60 ;;
*) echo "fanout-live: PLAN=$PLAN: want mean, dist or under" >&2; exit 1 ;;
esac
write() { # write FILE FANOUT [RATE]: simulate/testdata/fanout.yaml with rec's fanout FANOUT (and rate RATE)
  sed -e "s/, fanout: {0: 3, 12: 1}/$2/" -e "s/rate: 120, after/rate: ${3:-120}, after/" simulate/testdata/fanout.yaml > "$1"
}
# The backends always emulate the distribution; the gateway plans with it or
# at its mean.
write "$work/backend.yaml" ", fanout: {0: 3, 12: 1}"
write "$work/gateway.yaml" "$planfan" "$recrate"
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
plan() { # plan LABEL: the served plan's modules
  curl -s -H "Authorization: Bearer fanout-live" "127.0.0.1:$gp/admin/plan" | python3 -c '
import json, sys
p = json.load(sys.stdin)
for s in p.get("sessions", []):
    for m in s["modules"]:
        print("plan%s: %s %s at %.0f req/s, machines %.3f budget %.1f ms cost %.3f%s" % (sys.argv[1], s["name"], m["name"], m.get("rate", 0), sum(g["machines"] for g in m["configs"]), m["budget_ms"], m["cost"], (" fanout %s" % {f["items"]: round(f["share"], 3) for f in m["fanout"]}) if m.get("fanout") else ""))
' "$1" || true
}
plan ""
G="http://127.0.0.1:$gp"
URL="$G/v2/models/ocr/infer"
code() { curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$1" "$URL"; }
lg() { # lg LABEL LOADGEN-FLAGS...: one open-loop run over the 400 inputs
  local label=$1; shift
  "$P" loadgen --target "$G" --session ocr --seed 1 --input "$work/inputs" -q -o json "$@" >"$work/lg.json"
  python3 scripts/loadgen-report.py "$work/lg.json" "$label"
}
[ "$CASES" = all ] && echo "fresh start, the first request: $(code "$work/inputs/img000.json")"
lg "PLAN=$PLAN BACKENDS=$BACKENDS ${GATEWAY_FLAGS:-}" --rate 40 --duration "$DURATION"
# What the gateway measured (piccolo_gateway_fanout_items): images by
# objects found, as a session's fanout lists them.
curl -s "$G/metrics" | python3 -c '
import re, sys
below, seen = 0, {}
for line in sys.stdin:
    m = re.match(r"piccolo_gateway_fanout_items_bucket\{.*le=\"([^\"]+)\".*\} (\S+)", line)
    if m and m.group(1) != "+Inf":
        c = float(m.group(2)); k = float(m.group(1))
        if c - below: seen[int(k)] = int(c - below)
        below = c
print("  measured fanout: {%s}" % ", ".join("%d: %d" % kv for kv in sorted(seen.items())))
'
if [ "$PLAN" = under ] || [ "$PLAN" = mean ]; then # the gateway learns rec's rate and distribution from its own counts
  plan " after the run"
  curl -s "$G/metrics" | grep -E '^piccolo_plan_replans_total[{]cause="(rate|drift|fanout)"[}]' | tr '\n' ' '; echo
fi
[ "$CASES" = all ] || exit 0
# The neighbouring cases: above and below the planned rate, closed loops of
# 4 and 200 connections on an image with 12 objects (a lone request of each
# kind right after), a backend killed halfway through a run at the plan's rate.
big=""
for f in "$work"/inputs/img0*.json; do
  case "$(curl -s -H 'Content-Type: application/json' --data-binary @"$f" "$URL")" in *'"shape":[12,1]'*) big=$f; break ;; esac
done
[ -n "$big" ] || { echo "fanout-live: no input found with 12 objects" >&2; exit 1; }
lg "2x" --rate 80 --duration "$DURATION"
plan " after 2x"
lg "0.5x" --rate 20 --duration "$DURATION"
for c in 4 200; do
  echo "  hey -c $c -z 5s, one 12-object image: $("$HEY" -z 5s -c $c -m POST -T application/json -D "$big" "$URL" | grep -E '^ *\[[0-9]+\]' | tr -s ' \t' ' ' | tr '\n' ';')"
  echo "    lone right after: $(code "$work/inputs/img000.json") $(code "$big")"
done
( sleep 10; kill "${pids[0]}" ) &
lg "backend killed at 10 s" --rate 40 --duration 20s
