#!/bin/sh
# race-live.sh: Cloudflow's anyof and competitive execution, live through the
# gateway on loopback with sim backends (docs/planner.md, "Related systems").
#
# anyof: session `branches` sends each request down two branches, `a` and `b`,
# each on a backend of its own whose batches are heavy-tailed (--fault
# slow=K,slowshare=P, a different --fault-seed each), then to `pick`; served
# once with `join: anyof` (pick runs on the first branch to finish, the other
# is cancelled) and once with `join: allof` (pick waits for both).
#
# race: session `tail` is one module at TAIL_RATE whose four backends are
# heavy-tailed the same way (the unraced plan needs two machines, so a hedge
# has somewhere to go; the raced plan four); served with race: 2 (each batch on two machines at once, the first
# answer taken), with the existing reactive hedging (a second call after 2× the
# profiled time; the default, --hedge-budget 0.05) and with neither
# (--hedge-budget 0).
#
# Then the unraced module again at utilisation 0.3 (--max-utilization), about
# the raced plan's machines: headroom bought with the same money.
#
# For each it prints the plan's cost (`piccolo plan`), loadgen's latency
# percentiles (open loop, Poisson) and the gateway's race/hedge counters.
# auto: the same module with race: auto and its tail ({share: SHARE, factor:
# SLOW}) on eight such backends: the race the planner chooses, and its cost.
# Usage: [DURATION=30s] [RATE=20] [BRANCH_SLO=500ms] [TAIL_RATE=150] [SLOW=8] [SHARE=0.1] [PARTS="branches tail headroom auto"]
#        scripts/race-live.sh [PICCOLO_BINARY]
set -eu
bin=${1:-bin/piccolo}
dur=${DURATION:-30s}
rate=${RATE:-20}
trate=${TAIL_RATE:-150}
bslo=${BRANCH_SLO:-500ms}
parts=${PARTS:-branches tail headroom auto}
slow=${SLOW:-8}
share=${SHARE:-0.1}
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

cat >"$tmp/hw.yaml" <<'YAML'
hardware:
  - {name: ha, price: 1}
  - {name: hb, price: 1}
  - {name: hp, price: 1}
profiles:
  - model: ma
    hardware: ha
    entries: [{batch: 1, duration: 20ms}, {batch: 4, duration: 30ms}]
  - model: mb
    hardware: hb
    entries: [{batch: 1, duration: 20ms}, {batch: 4, duration: 30ms}]
  - model: mp
    hardware: hp
    entries: [{batch: 1, duration: 5ms}, {batch: 4, duration: 8ms}]
  - model: mt
    hardware: ha
    entries: [{batch: 1, duration: 20ms}, {batch: 4, duration: 30ms}]
YAML
branches() { # $1: anyof or allof
	cat <<YAML
sessions:
  - name: branches
    slo: $bslo
    modules:
      - {name: a, model: ma, rate: $rate}
      - {name: b, model: mb, rate: $rate}
      - {name: pick, model: mp, rate: $rate, after: [a, b], join: $1}
YAML
}
tail_() { # $1: race k (1: none, auto: the planner's choice from the tail)
	cat <<YAML
sessions:
  - name: tail
    slo: 1s
    modules:
      - {name: t, model: mt, rate: $trate, race: $1, tail: {share: $share, factor: $slow}}
YAML
}
counter() { # the sum of a gateway metric's samples
	curl -s http://127.0.0.1:9581/metrics | awk -v n="$1" '$1 == n || $1 ~ "^"n"[{]" {s += $2} END {printf "%.3f", s}'
}
run() { # $1: label, $2: session file, $3: backends file, $4: session, $5: rate, $6: slo, $7...: gateway flags
	label=$1 cfg=$2 bk=$3 session=$4 r=$5 slo=$6
	shift 6
	"$bin" gateway --admin-listen same -c "$tmp/hw.yaml" -c "$cfg" -c "$bk" --listen 127.0.0.1:9581 --grpc-listen 127.0.0.1:9582 \
		--log console "$@" >"$tmp/gw.log" 2>&1 &
	gw=$!
	i=0
	until grep -q "piccolo gateway: HTTP on" "$tmp/gw.log" 2>/dev/null; do
		i=$((i + 1)); [ $i -lt 120 ] || { cat "$tmp/gw.log"; exit 1; }; sleep 0.5
	done
	cost=$("$bin" plan -c "$tmp/hw.yaml" -c "$cfg" -c "$bk" ${pflags:-} 2>/dev/null | sed -n "s/^session $session: .*cost \([0-9.]*\)\$/\1/p")
	"$bin" loadgen --target http://127.0.0.1:9581 --session "$session" --rate "$r" --arrival poisson \
		--duration "$dur" --slo "$slo" -q -o json >"$tmp/load.json"
	echo "== $label: plan cost ${cost:-?}; races $(counter piccolo_gateway_races_total) ($(counter piccolo_gateway_race_seconds_total) s extra machine time), hedges $(counter piccolo_gateway_hedges_total) ($(counter piccolo_gateway_hedge_seconds_total) s), batches $(counter piccolo_gateway_batches_sent_total)"
	tr -d ' \n' <"$tmp/load.json" | grep -oE '"(sent|ok|slo_attainment|p50_ms|p90_ms|p99_ms|max_ms)":[^,}]*|"errors":[{][^}]*[}]' | tr '\n' ' '
	echo
	kill "$gw"
	wait "$gw" 2>/dev/null || true
}
backend() { # $1: hardware, $2: port, $3: seed
	"$bin" backend --executor sim --hardware "$1" -c "$tmp/hw.yaml" --listen "127.0.0.1:$2" --metrics-listen off \
		--fault-injection --fault "slow=$slow,slowshare=$share" --fault-seed "$3" >"$tmp/b$2.log" 2>&1 &
	pids="$pids $!"
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); branches at $rate req/s, tail at $trate req/s, $dur each; batches slowed ${slow}x with probability $share"
# anyof: a on ha, b on hb (heavy-tailed, independent seeds), pick on hp (healthy).
case " $parts " in *" branches "*)
backend ha 9501 11
backend hb 9502 22
"$bin" backend --executor sim --hardware hp -c "$tmp/hw.yaml" --listen 127.0.0.1:9503 --metrics-listen off >"$tmp/b9503.log" 2>&1 &
pids="$pids $!"
cat >"$tmp/bk-branches.yaml" <<'YAML'
backends:
  - {id: a-0, address: 127.0.0.1:9501, hardware: ha}
  - {id: b-0, address: 127.0.0.1:9502, hardware: hb}
  - {id: p-0, address: 127.0.0.1:9503, hardware: hp}
YAML
sleep 1
for join in anyof allof; do
	branches $join >"$tmp/s-$join.yaml"
	run "branches, join: $join" "$tmp/s-$join.yaml" "$tmp/bk-branches.yaml" branches "$rate" "$bslo" --hedge-budget 0
done
for p in $pids; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=""
;; esac

# race: t on four heavy-tailed ha backends.
case " $parts " in *" tail "*|*" headroom "*)
backend ha 9511 31
backend ha 9512 32
backend ha 9513 33
backend ha 9514 34
cat >"$tmp/bk-tail.yaml" <<'YAML'
backends:
  - {id: t-0, address: 127.0.0.1:9511, hardware: ha}
  - {id: t-1, address: 127.0.0.1:9512, hardware: ha}
  - {id: t-2, address: 127.0.0.1:9513, hardware: ha}
  - {id: t-3, address: 127.0.0.1:9514, hardware: ha}
YAML
sleep 1
tail_ 2 >"$tmp/t-race.yaml"
tail_ 1 >"$tmp/t-one.yaml"
;; esac
case " $parts " in *" tail "*)
run "tail, race: 2" "$tmp/t-race.yaml" "$tmp/bk-tail.yaml" tail "$trate" 1s --hedge-budget 0
run "tail, hedging (budget 0.05)" "$tmp/t-one.yaml" "$tmp/bk-tail.yaml" tail "$trate" 1s
run "tail, hedging (budget 1)" "$tmp/t-one.yaml" "$tmp/bk-tail.yaml" tail "$trate" 1s --hedge-budget 1
run "tail, none" "$tmp/t-one.yaml" "$tmp/bk-tail.yaml" tail "$trate" 1s --hedge-budget 0
;; esac
# headroom: the unraced module planned at utilisation 0.3, about the raced
# plan's machines, with and without hedging.
case " $parts " in *" headroom "*)
pflags="--max-utilization 0.3"
run "tail, none, utilisation 0.3" "$tmp/t-one.yaml" "$tmp/bk-tail.yaml" tail "$trate" 1s --hedge-budget 0 $pflags
run "tail, hedging (budget 0.05), utilisation 0.3" "$tmp/t-one.yaml" "$tmp/bk-tail.yaml" tail "$trate" 1s $pflags
pflags=""
;; esac
# auto: race: auto with the measured tail, on eight heavy-tailed backends
# (the planner's choice may need more machines than the four above).
case " $parts " in *" auto "*)
for p in $pids; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=""
echo "backends:" >"$tmp/bk-auto.yaml"
for i in 1 2 3 4 5 6 7 8; do
	backend ha $((9520 + i)) $((40 + i))
	echo "  - {id: t-$i, address: 127.0.0.1:$((9520 + i)), hardware: ha}" >>"$tmp/bk-auto.yaml"
done
sleep 1
tail_ auto >"$tmp/t-auto.yaml"
echo "== auto: $("$bin" plan -c "$tmp/hw.yaml" -c "$tmp/t-auto.yaml" -o json 2>/dev/null | python3 -c 'import json,sys; m=json.load(sys.stdin)["sessions"][0]["modules"][0]; print("race %s, machines %.2f, cost %.3f" % (m.get("race", 0), sum(g["machines"] for g in m["configs"]), m["cost"]))')"
run "tail, race: auto" "$tmp/t-auto.yaml" "$tmp/bk-auto.yaml" tail "$trate" 1s --hedge-budget 0
run "tail, race: auto, hedging (budget 0.05)" "$tmp/t-auto.yaml" "$tmp/bk-auto.yaml" tail "$trate" 1s
;; esac
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
