#!/usr/bin/env bash
# burst-live.sh repeats issue 32's burst as a user would (docs/traffic.md,
# "Overload control"): one `piccolo backend --hardware fast` (sim executor,
# model echo profiled at 100 µs for batch 1 and 250 µs for batch 64) behind
# one `piccolo gateway`, a session planned at 150,000 req/s with a 50 ms SLO,
# on loopback. hey (Debian's; scripts/tools.sh installs it) sends KServe v2
# JSON infer requests closed-loop at 128 connections for 5 s, then at 512 for
# 5 s; then lone curl requests go at +1, +2, +5, +10 and +20 s after the
# burst. It prints how long the gateway took from its start to ready, then,
# per phase, the answers by status (200 answered, 429 refused, 504 admitted
# but late, others), the goodput (200s a second), the ratio of goodput at 512
# to goodput at 128, each lone request's status, the gateway's door after each
# phase (piccolo_gateway_door_*: refused at the door before decoding;
# piccolo_gateway_admission_rejections_total: refused by admission after it)
# and the plan and drift lines of its log.
#
# Usage: scripts/burst-live.sh [seconds per phase, default 5]
#   CONNS="128 512"  the connection counts, in order (the ratio is last/first)
#   GATEWAY_FLAGS="..." more flags for piccolo gateway, e.g.
#                    --overload-control=false (no door) or --calibration=false
#   PICCOLO=BINARY   run that binary instead of building the working tree
#   SLOW=K           the backend runs every batch K times as long as profiled
#                    (--fault slow=K), so calibration measures a drift and
#                    the gateway re-plans the 150,000 req/s session: e.g.
#                    SLOW=2 CONNS=8 scripts/burst-live.sh 15 times that
#                    re-plan (the last lines: each plan's cause and
#                    planner_runtime)
#   KEEP=1           keep the work directory (logs, config, the gateway's
#                    /metrics after each phase) and print its path
# Loopback only; every process it starts is stopped at the end. On a shared
# host the figures move with the others' load: compare within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
secs=${1:-5}
CONNS=${CONNS:-128 512}
. scripts/live-common.sh burst-live
bport=$(port) hport=$(port) gport=$(port)
cat >"$work/burst.yaml" <<'YAML'
hardware:
  - {name: fast, price: 1}
profiles:
  - model: echo
    hardware: fast
    entries:
      - {batch: 1, concurrency: 1, duration: 100us}
      - {batch: 64, concurrency: 1, duration: 250us}
sessions:
  - name: burst
    slo: 50ms
    modules:
      - {name: echo, model: echo, rate: 150000}
YAML
cat >"$work/backends.yaml" <<YAML
backends:
  - {id: fast-0, address: "127.0.0.1:$bport", hardware: fast}
YAML
python3 - "$work/body.json" <<'PY'
import sys
open(sys.argv[1], "w").write('{"id":"42","inputs":[{"name":"x","shape":[1,64],"datatype":"FP32","data":[' + "0.25," * 63 + '1.5]}]}')
PY
"$P" backend ${SLOW:+--fault-injection --fault "slow=$SLOW"} -c "$work/burst.yaml" --executor sim --hardware fast --listen "127.0.0.1:$bport" --metrics-listen off >"$work/backend.log" 2>&1 &
pids+=($!)
# The gateway loads the model at start and exits if the backend is not up yet.
for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$bport") 2>/dev/null && break; sleep 0.05; done
t0=$EPOCHREALTIME
"$P" gateway --admin-listen same -c "$work/burst.yaml" -c "$work/backends.yaml" --listen "127.0.0.1:$hport" --grpc-listen "127.0.0.1:$gport" ${GATEWAY_FLAGS:-} >"$work/gateway.log" 2>&1 &
pids+=($!)
url=http://127.0.0.1:$hport
wait_ready burst-live "$url" "$work/gateway.log"
# Issue 32's start-up target: ready within 1 s with this 150,000 req/s session
# (polled every 50 ms, curl's start included).
awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "gateway start to ready: %.2f s\n", b - a }'
infer=$url/v2/models/burst/infer
lone() { curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$work/body.json" "$infer" || echo "fail"; }
echo "warm-up (one request): $(lone)"

# phase CONNS: hey for $secs seconds; prints the counts and leaves the goodput in $work/good.CONNS.
phase() {
	"$HEY" -z "${secs}s" -c "$1" -m POST -T application/json -D "$work/body.json" "$infer" >"$work/hey.$1" 2>&1 || true
	python3 - "$work/hey.$1" "$1" "$secs" "$work/good.$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
codes = {int(c): int(n) for c, n in re.findall(r"\[(\d+)\]\s+(\d+) responses", text)}
errors = 0
m = re.search(r"Error distribution:\n((?:\s+\[\d+\].*\n?)*)", text)
if m:
    errors = sum(int(n) for n in re.findall(r"\[(\d+)\]", m.group(1)))
secs = float(sys.argv[3])
ok, refused, late = codes.pop(200, 0), codes.pop(429, 0), codes.pop(504, 0)
other = ", ".join("%d: %d" % kv for kv in sorted(codes.items())) or "none"
p99 = re.search(r"99% in ([\d.]+) secs", text)
print("%4s connections, %s s: answered %d (%.0f/s), refused 429 %d, admitted but 504 %d, other statuses %s, client errors %d, p99 of all %s ms"
      % (sys.argv[2], sys.argv[3], ok, ok / secs, refused, late, other, errors, "%.1f" % (1000 * float(p99.group(1))) if p99 else "?"))
open(sys.argv[4], "w").write("%f" % (ok / secs))
PY
}
first="" last=""
door() { curl -s "$url/metrics" | grep -E '^piccolo_gateway_(door_(shed_total|limit|floor|delay_seconds)|admission_rejections_total)' | tr '\n' ' '; echo; }
for c in $CONNS; do
	phase "$c"
	curl -s "$url/metrics" >"$work/metrics.$c" || true
	echo "     after it (totals since the start): $(door)"
	[ -n "$first" ] || first=$c
	last=$c
done
end=$(date +%s.%N)
python3 - "$(cat "$work/good.$first")" "$(cat "$work/good.$last")" "$first" "$last" <<'PY'
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
print("goodput at %s connections / at %s: %.2f (target >= 0.5)" % (sys.argv[4], sys.argv[3], b / a if a else float("nan")))
PY
for at in 1 2 5 10 20; do
	python3 -c "import time,sys; d=float(sys.argv[1])+$at-time.time(); time.sleep(max(0,d))" "$end"
	echo "lone request at +${at} s: $(lone)"
done
grep -iE 'overload|drift|re-plan|replan|pool too small' "$work/gateway.log" | tail -n 20 | cut -c1-400 || true
python3 - "$work/gateway.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if '"new plan live"' in line:
        d = json.loads(line)
        print("plan live: cause %s, planner_runtime %.1f ms, %.2f s after its trigger, cost %.3f"
              % (d.get("cause"), 1000 * d.get("planner_runtime", 0), d.get("since_trigger", 0), d.get("plan_cost", 0)))
PY
