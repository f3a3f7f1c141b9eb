#!/bin/sh
# fusion-compare.sh: the OCR session served fused and with --no-fusion, side by
# side (docs/fusion.md). For each mode it starts one `piccolo backend --executor
# ocr` per hardware type of configs/ocr.yaml and `piccolo gateway` on loopback,
# sends the 24 test images over gRPC at 2 req/s (constant) for DURATION, and
# prints the plan cost (`piccolo plan`), the client's latency percentiles
# (`piccolo loadgen`) and the tensor bytes that crossed between gateway and
# backends (the backends' piccolo_backend_received/sent_bytes_total).
# Usage: scripts/fusion-compare.sh [PICCOLO_BINARY] [IMAGE_DIR]   (make build; make models)
set -eu
bin=${1:-bin/piccolo}
imgs=${2:?"IMAGE_DIR: a directory of the OCR test images (internal/ocrtest.Write)"}
dur=${DURATION:-30s}
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
cat > "$tmp/backends.yaml" <<'YAML'
backends:
  - {id: b-0, address: 127.0.0.1:9401, hardware: cpu-builtin}
  - {id: c1-0, address: 127.0.0.1:9402, hardware: cpu-1t}
  - {id: c2-0, address: 127.0.0.1:9403, hardware: cpu-2t}
YAML
bytes() { # the sum of a counter over the three backends' /metrics
	for p in 10401 10402 10403; do curl -s "http://127.0.0.1:$p/metrics"; done |
		awk -v n="$1" '$1 ~ "^"n"[{]" {s += $2} END {printf "%.0f", s}'
}
for mode in fused no-fusion; do
	flag=""
	[ "$mode" = no-fusion ] && flag=--no-fusion
	pids=""
	"$bin" backend --executor ocr --hardware cpu-builtin --listen 127.0.0.1:9401 >"$tmp/b1.log" 2>&1 & pids="$pids $!"
	"$bin" backend --executor ocr --hardware cpu-1t --listen 127.0.0.1:9402 >"$tmp/b2.log" 2>&1 & pids="$pids $!"
	"$bin" backend --executor ocr --hardware cpu-2t --intra-op-threads 2 --listen 127.0.0.1:9403 >"$tmp/b3.log" 2>&1 & pids="$pids $!"
	sleep 2
	"$bin" gateway -c configs/ocr.yaml -c "$tmp/backends.yaml" $flag --listen 127.0.0.1:9481 --grpc-listen 127.0.0.1:9482 \
		--max-body 67108864 --log console >"$tmp/gw.log" 2>&1 & gw=$!
	pids="$pids $gw"
	i=0
	until grep -q "piccolo gateway: HTTP on" "$tmp/gw.log"; do
		i=$((i + 1)); [ $i -lt 120 ] || { cat "$tmp/gw.log"; exit 1; }; sleep 0.5
	done
	cost=$("$bin" plan -c configs/ocr.yaml $flag 2>/dev/null | sed -n 's/^session ocr: .*latency \([0-9.]*ms\), cost \([0-9.]*\)$/bound \1, cost \2/p')
	modules=$(sed -n 's/.*fused \(.*\) into \([^ ]*\) .*/\2/p' "$tmp/gw.log" | tr '\n' ' ')
	in0=$(bytes piccolo_backend_received_bytes_total) out0=$(bytes piccolo_backend_sent_bytes_total)
	"$bin" loadgen --target 127.0.0.1:9482 --protocol grpc --session ocr --rate 2 --arrival constant \
		--duration "$dur" --slo 3s --input "$imgs" -q -o json >"$tmp/load.json"
	in1=$(bytes piccolo_backend_received_bytes_total) out1=$(bytes piccolo_backend_sent_bytes_total)
	echo "== $mode: fused modules: ${modules:-none}; plan: $cost"
	echo "   gateway↔backend tensor bytes: to backends $((in1 - in0)), from backends $((out1 - out0)), total $((in1 - in0 + out1 - out0))"
	tr -d ' \n' <"$tmp/load.json" | grep -oE '"(sent|ok|slo_attainment|p50_ms|p90_ms|p99_ms|max_ms)":[^,}]*' | tr '\n' ' '
	echo
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
done
