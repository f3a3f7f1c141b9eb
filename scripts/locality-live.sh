#!/usr/bin/env bash
# Locality, live (docs/locality.md): a two-module chain whose first module
# (sim model mk, 5 ms) makes a 1 MB intermediate that the second (use, 5 ms)
# reads (api/testdata/link.yaml, its link set to the proxies'), at RATE
# requests/s (Poisson, seed 1) for DURATION, SLO 1 s, over two
# sim backends, each behind a slow link: a toxiproxy (a TCP proxy we did not
# write; scripts/tools.sh installs it) adding LATENCY_MS each way and a
# bandwidth limit of KBPS kB/s each way (default 1 ms and 12,500 kB/s, about
# 100 Mbit/s: the issue's netem link, which this kernel cannot make).
# Run twice on the same backends, the gateway started afresh each time:
# without locality, then with --locality-bytes 65536 (and the placement that
# keeps the chain's fractions on one device). Prints for each: loadgen's
# line, and the tensor bytes that crossed the links (the backends'
# piccolo_backend_received_bytes_total and _sent_bytes_total), per request.
# CASES=all adds, with locality on, the neighbouring cases: the first request
# after the start, twice the rate, closed loops (hey) of 4 and 200
# connections each followed by a lone request, and the backend holding the
# chain killed halfway through a run.
#   scripts/locality-live.sh    (PICCOLO=bin/piccolo to use a built binary)
set -euo pipefail
RATE=${RATE:-4}
DURATION=${DURATION:-30s}
LATENCY_MS=${LATENCY_MS:-1}
KBPS=${KBPS:-12500}
CASES=${CASES:-plan}
. scripts/live-common.sh locality-live
TOXI=$(command -v toxiproxy-server || ls "${PICCOLO_CACHE:-$HOME/.cache/piccolo}"/bin/toxiproxy-server 2>/dev/null || true)
[ -n "$TOXI" ] || { echo "locality-live: toxiproxy-server is not installed (scripts/tools.sh installs it)" >&2; exit 1; }
# api/testdata/link.yaml at this run's rate and link: the planner counts
# each batch's transfer on the link in its duration (docs/locality.md).
mbps=$(python3 -c "print($KBPS * 8 / 1000)")
sed -e "s/rate: 4/rate: $RATE/g" -e "s/link_latency: 1ms/link_latency: ${LATENCY_MS}ms/" -e "s/link_mbps: 100/link_mbps: $mbps/" \
  api/testdata/link.yaml >"$work/chain.yaml"
tp=$(port)
"$TOXI" -host 127.0.0.1 -port "$tp" >"$work/toxi.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "127.0.0.1:$tp/version" >/dev/null && break; sleep 0.05; done
toxi() { curl -sf -X POST -H 'Content-Type: application/json' -d "$2" "127.0.0.1:$tp$1" >/dev/null; }
echo "backends:" >"$work/backends.yaml"
metrics=()
for i in 0 1; do
  bp=$(port); mp=$(port); lp=$(port)
  "$P" backend -c "$work/chain.yaml" --executor sim --hardware cpu --listen 127.0.0.1:$bp --metrics-listen 127.0.0.1:$mp \
    --sim-output-bytes mk=1048576 >"$work/b$i.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do grep -q "serving on" "$work/b$i.log" && break; sleep 0.05; done
  metrics+=("127.0.0.1:$mp")
  toxi /proxies "{\"name\": \"link$i\", \"listen\": \"127.0.0.1:$lp\", \"upstream\": \"127.0.0.1:$bp\"}"
  for dir in upstream downstream; do
    toxi /proxies/link$i/toxics "{\"name\": \"lat-$dir\", \"type\": \"latency\", \"stream\": \"$dir\", \"attributes\": {\"latency\": $LATENCY_MS}}"
    toxi /proxies/link$i/toxics "{\"name\": \"bw-$dir\", \"type\": \"bandwidth\", \"stream\": \"$dir\", \"attributes\": {\"rate\": $KBPS}}"
  done
  echo "  - {id: cpu-$i, address: \"127.0.0.1:$lp\", hardware: cpu}" >>"$work/backends.yaml"
done
echo '{"inputs": [{"name": "input0", "shape": [1, 1], "datatype": "FP32", "data": [1.5]}]}' >"$work/body.json"
code() { curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$work/body.json" "http://127.0.0.1:$gp/v2/models/chain/infer"; }
bytes() { # the tensor bytes received and sent by both backends so far
  for m in "${metrics[@]}"; do curl -s "$m/metrics"; done | awk '/^piccolo_backend_(received|sent)_bytes_total/ {s += $2} END {printf "%.0f\n", s}'
}
run() { # run LABEL RATE: one loadgen run and the bytes it moved
  local before after
  before=$(bytes)
  "$P" loadgen --target "http://127.0.0.1:$gp" --session chain --rate "$2" --duration "$DURATION" --seed 1 -q -o json >"$work/lg.json"
  after=$(bytes)
  python3 scripts/loadgen-report.py "$work/lg.json" "$1"
  [ "${3:-}" = nobytes ] && return # a killed backend's counters are gone
  python3 - "$work/lg.json" "$before" "$after" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
moved = int(sys.argv[3]) - int(sys.argv[2])
print("  bytes over the links: %d (%.2f MB a request over %d sent)" % (moved, moved / max(r["sent"], 1) / 1e6, r["sent"]))
PY
}
for flags in "" "--locality-bytes 65536"; do
  gp=$(port)
  "$P" gateway -c "$work/chain.yaml" -c "$work/backends.yaml" --listen 127.0.0.1:$gp --grpc-listen 127.0.0.1:0 \
    --admin-listen same --admin-token locality-live $flags >"$work/g.log" 2>&1 &
  g=$!
  pids+=($g)
  wait_ready gateway "http://127.0.0.1:$gp" "$work/g.log"
  curl -s -H "Authorization: Bearer locality-live" "127.0.0.1:$gp/admin/plan" | python3 -c '
import json, sys
for s in json.load(sys.stdin).get("sessions", []):
    print("  placed: " + ", ".join("%s on %s" % (m["name"], "+".join(b for g in m["configs"] for b in g.get("backends", []))) for m in s["modules"]))
' || true
  if [ -n "$flags" ] && [ "$CASES" = all ]; then
    echo "  fresh start, the first request: $(code)"
  fi
  run "locality ${flags:-off}" "$RATE"
  [ -z "$flags" ] && { kill "$g"; wait "$g" 2>/dev/null || true; }
done
[ "$CASES" = all ] || exit 0
run "2x the rate" "$((2 * RATE))"
for c in 4 200; do # closed loops, then a lone request right after
  echo "  hey -c $c -z 5s: $("$HEY" -z 5s -c $c -m POST -T application/json -D "$work/body.json" "http://127.0.0.1:$gp/v2/models/chain/infer" | grep -E '^ *\[[0-9]+\]' | tr -s ' \t' ' ' | tr '\n' ';')"
  echo "    lone right after: $(code)"
done
( sleep 10; kill "${pids[1]}" ) & # cpu-0's backend, where the chain is placed
run "cpu-0 killed at 10 s" "$RATE" nobytes
echo "  cases done; the gateway's log is $work/g.log (KEEP=1 keeps it)"
