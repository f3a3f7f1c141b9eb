#!/usr/bin/env bash
# kill-live.sh SIGKILLs backends under load, as an operator would meet it
# (docs/faults.md, "Measured: backends killed"): three `piccolo backend`
# processes (sim executor, v100: one module, batch 8 of 30 ms) behind one
# static `piccolo gateway` (no Consul: health probes and re-placement), a
# session planned at RATE req/s (default 150: one machine) with a 400 ms
# SLO. hey (Debian's; scripts/tools.sh installs it) sends KServe v2 JSON
# infer requests at RATE req/s (workers of at most 5 req/s each) for
# SECS seconds (default 12); KILL s in (default 3) `kill -9` takes down
# KILLS of the three backends at once (default 2: the ones the plan placed
# first, so the re-placement meets a dead one before the live one), and
# RESTART s later (default 3) they start again on their ports. It prints
# hey's answers by status, the share that failed (target: at most 0.1%),
# the p99, and the gateway's lines on the kill.
#
# With CLOSED=N, hey runs closed-loop instead, N connections each sending
# its next request when the last is answered (the plan still at RATE): the
# 429s admission answers a load above the plan are counted apart from the
# failures. A lone request goes right after hey ends, in both modes.
#
# Usage: scripts/kill-live.sh
#   RATE=150 KILLS=2 SECS=12 KILL=3 RESTART=3 CLOSED=
#   PICCOLO=BINARY   run that binary instead of building the working tree
#   KEEP=1           keep the work directory (logs, config) and print its path
# Loopback only; every process it starts is stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
RATE=${RATE:-150} KILLS=${KILLS:-2} SECS=${SECS:-12} KILL=${KILL:-3} RESTART=${RESTART:-3}
case $KILLS in 1 | 2 | 3) ;; *) echo "kill-live: KILLS=$KILLS: want 1, 2 or 3 (of three backends)" >&2; exit 1 ;; esac
. scripts/live-common.sh kill-live
cat >"$work/kill.yaml" <<YAML
hardware:
  - {name: v100, price: 3}
profiles:
  - model: det
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 10ms}
      - {batch: 4, concurrency: 1, duration: 20ms}
      - {batch: 8, concurrency: 1, duration: 30ms}
sessions:
  - name: s
    slo: 400ms
    modules:
      - {name: d, model: det, rate: $RATE}
YAML
echo "backends:" >"$work/backends.yaml"
bports=()
for i in 0 1 2; do
	bports+=("$(port)")
	echo "  - {id: gpu-$i, address: \"127.0.0.1:${bports[$i]}\", hardware: v100}" >>"$work/backends.yaml"
done
bpid=()
start_backend() {
	"$P" backend -c "$work/kill.yaml" --executor sim --hardware v100 --listen "127.0.0.1:${bports[$1]}" --metrics-listen off >>"$work/backend-$1.log" 2>&1 &
	bpid[$1]=$!
	pids+=($!)
	for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/${bports[$1]}") 2>/dev/null && return; sleep 0.05; done
	echo "kill-live: backend gpu-$1 did not start; its log:" >&2
	cat "$work/backend-$1.log" >&2
	exit 1
}
for i in 0 1 2; do start_backend $i; done
hport=$(port) gport=$(port)
"$P" gateway --admin-listen same -c "$work/kill.yaml" -c "$work/backends.yaml" --listen "127.0.0.1:$hport" --grpc-listen "127.0.0.1:$gport" >"$work/gateway.log" 2>&1 &
pids+=($!)
url=http://127.0.0.1:$hport
wait_ready kill-live "$url" "$work/gateway.log"
echo '{"inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","data":[1.5]}]}' >"$work/body.json"

# The victims: the backends the plan placed (from the gateway's log), then the others.
placed=$(python3 - "$work/gateway.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if '"new plan live"' in line:
        print(" ".join(json.loads(line).get("backends", [])))
        break
PY
)
order=()
for id in $placed gpu-0 gpu-1 gpu-2; do
	case " ${order[*]:-} " in *" $id "*) ;; *) order+=("$id") ;; esac
done
victims=("${order[@]:0:$KILLS}")
echo "plan on: ${placed:-?}; killing at +${KILL} s: ${victims[*]}, restarting them ${RESTART} s later"

# hey's -q is per worker and each worker waits for its answer: at most 5
# requests a second per worker keeps the rate with answers up to 200 ms.
if [ -n "${CLOSED:-}" ]; then
	pace=(-c "$CLOSED")
else
	workers=$(python3 -c "import math; print(max(10, math.ceil($RATE / 5)))")
	pace=(-c "$workers" -q "$(python3 -c "print(max(1, round($RATE / $workers)))")")
fi
"$HEY" -z "${SECS}s" "${pace[@]}" -m POST -T application/json -D "$work/body.json" "$url/v2/models/s/infer" >"$work/hey.txt" 2>&1 &
hey=$!
sleep "$KILL"
for id in "${victims[@]}"; do kill -9 "${bpid[${id#gpu-}]}"; done
for id in "${victims[@]}"; do wait "${bpid[${id#gpu-}]}" 2>/dev/null || true; done
sleep "$RESTART"
for id in "${victims[@]}"; do start_backend "${id#gpu-}"; done
wait $hey || true
python3 - "$work/hey.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
codes = {int(c): int(n) for c, n in re.findall(r"\[(\d+)\]\s+(\d+) responses", text)}
errors = 0
m = re.search(r"Error distribution:\n((?:\s+\[\d+\].*\n?)*)", text)
if m:
    errors = sum(int(n) for n in re.findall(r"\[(\d+)\]", m.group(1)))
total = sum(codes.values()) + errors
ok, refused = codes.get(200, 0), codes.get(429, 0)
failed = total - ok - refused
p99 = re.search(r"99% in ([\d.]+) secs", text)
print("requests %d: 200 %d, refused 429 %d, failed %d (%.3f%%, target <= 0.1%%): by status %s, client errors %d; p99 %s ms"
      % (total, ok, refused, failed, 100 * failed / max(total, 1),
         ", ".join("%d: %d" % kv for kv in sorted(codes.items()) if kv[0] not in (200, 429)) or "none",
         errors, "%.1f" % (1000 * float(p99.group(1))) if p99 else "?"))
PY
echo "lone request right after: $(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$work/body.json" "$url/v2/models/s/infer" || echo fail)"
grep -E '"backend down|"backend up|plan re-placed|re-placing after' "$work/gateway.log" | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    print("  gateway: %s %s" % (d["msg"], {k: v for k, v in d.items() if k in ("backend", "down", "took")}))
'
