#!/bin/sh
# fusion-compare.sh: the OCR session served fused (the planner's choice), with
# --no-fusion, and all-fused (every fusable chain, by hand), side by side
# (docs/fusion.md). For each mode it starts one `piccolo backend --executor
# ocr` per hardware type of configs/ocr.yaml and `piccolo gateway` on loopback,
# sends the 24 test images over gRPC at 2 req/s (constant) for DURATION, and
# prints the plan cost (`piccolo plan`), the client's latency percentiles
# (`piccolo loadgen`) and the tensor bytes that crossed between gateway and
# backends (the backends' piccolo_backend_received/sent_bytes_total).
# Usage: [DURATION=30s] [MODES="fused no-fusion all-fused"] scripts/fusion-compare.sh [PICCOLO_BINARY [IMAGE_DIR]]
# (make build models; without IMAGE_DIR the 24 test images of internal/ocrtest are rendered).
set -eu
bin=${1:-bin/piccolo}
dur=${DURATION:-30s}
tmp=$(mktemp -d)
imgs=${2:-}
if [ -z "$imgs" ]; then
	imgs="$tmp/img"
	mkdir -p "$imgs"
	PICCOLO_OCR_IMAGES="$imgs" go test -count=1 -run '^TestWriteOCRImages$' ./backends/fused >/dev/null
fi
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
cat > "$tmp/backends.yaml" <<'YAML'
backends:
  - {id: b-0, address: 127.0.0.1:9401, hardware: cpu-builtin}
  - {id: c1-0, address: 127.0.0.1:9402, hardware: cpu-1t}
  - {id: c2-0, address: 127.0.0.1:9403, hardware: cpu-2t}
YAML
# all-fused: the session written fused by hand (every chain with a fused
# profile, whatever it costs), served as written (--no-fusion).
sed '/^sessions:/,$d' configs/ocr.yaml >"$tmp/ocr-all-fused.yaml"
cat >>"$tmp/ocr-all-fused.yaml" <<'YAML'
sessions:
  - name: ocr
    slo: 3s
    modules:
      - {name: pre+det, model: ocr-pre+ocr-det, rate: 2}
      - {name: boxes, model: ocr-boxes, rate: 2, after: [pre+det]}
      - {name: cls+rotate+rec+ctc, model: ocr-cls+ocr-rotate+ocr-rec+ocr-ctc, rate: 2.5, after: [boxes]}
YAML
bytes() { # the sum of a counter over the three backends' /metrics
	for p in 10401 10402 10403; do curl -s "http://127.0.0.1:$p/metrics"; done |
		awk -v n="$1" '$1 ~ "^"n"[{]" {s += $2} END {printf "%.0f", s}'
}
for mode in ${MODES:-fused no-fusion all-fused}; do
	flag="" cfg=configs/ocr.yaml
	[ "$mode" = no-fusion ] && flag=--no-fusion
	[ "$mode" = all-fused ] && flag=--no-fusion cfg="$tmp/ocr-all-fused.yaml"
	pids=""
	"$bin" backend --executor ocr --hardware cpu-builtin --listen 127.0.0.1:9401 >"$tmp/b1.log" 2>&1 & pids="$pids $!"
	"$bin" backend --executor ocr --hardware cpu-1t --listen 127.0.0.1:9402 >"$tmp/b2.log" 2>&1 & pids="$pids $!"
	"$bin" backend --executor ocr --hardware cpu-2t --intra-op-threads 2 --listen 127.0.0.1:9403 >"$tmp/b3.log" 2>&1 & pids="$pids $!"
	sleep 2
	"$bin" gateway --admin-listen same -c "$cfg" -c "$tmp/backends.yaml" $flag --listen 127.0.0.1:9481 --grpc-listen 127.0.0.1:9482 \
		--max-body 67108864 --log console >"$tmp/gw.log" 2>&1 & gw=$!
	pids="$pids $gw"
	i=0
	until grep -q "piccolo gateway: HTTP on" "$tmp/gw.log"; do
		i=$((i + 1)); [ $i -lt 120 ] || { cat "$tmp/gw.log"; exit 1; }; sleep 0.5
	done
	cost=$("$bin" plan -c "$cfg" $flag 2>/dev/null | sed -n 's/^session ocr: .*latency \([0-9.]*ms\), cost \([0-9.]*\)$/bound \1, cost \2/p')
	modules=$("$bin" plan -c "$cfg" $flag 2>/dev/null | awk '$1 ~ /[+]/ {printf "%s ", $1}')
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
