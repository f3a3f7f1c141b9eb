#!/bin/sh
# variants-live.sh: the OCR variant session (configs/ocr-variants.yaml) served
# at each accuracy target of docs/variants.md's table. For each target it
# writes the session with that `accuracy:` (best: none), starts one `piccolo
# backend --executor ocr` per hardware type of configs/ocr.yaml and `piccolo
# gateway` on loopback, prints the planned variants, estimate and cost
# (`piccolo plan`), reads the hard set (internal/ocrtest) through the gateway
# one image at a time (`piccolo profile --accuracy`), then sends it over gRPC
# at 2 images/s (constant) for DURATION with `piccolo loadgen` and prints the
# SLO attainment and latency percentiles.
# Usage: [DURATION=20s] [TARGETS="0.80 0.90 0.95 best"] scripts/variants-live.sh [PICCOLO_BINARY]
# (make build models first).
set -eu
bin=${1:-bin/piccolo}
dur=${DURATION:-20s}
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
mkdir -p "$tmp/set" "$tmp/img"
PICCOLO_HARD_SET="$tmp/set" go test -count=1 -run '^TestWriteHardSet$' ./internal/ocrtest >/dev/null
cp "$tmp"/set/*.png "$tmp/img/" # loadgen reads every file of a directory: no labels or manifest
cat > "$tmp/backends.yaml" <<'YAML'
backends:
  - {id: b-0, address: 127.0.0.1:9501, hardware: cpu-builtin}
  - {id: c1-0, address: 127.0.0.1:9502, hardware: cpu-1t}
  - {id: c2-0, address: 127.0.0.1:9503, hardware: cpu-2t}
YAML
for target in ${TARGETS:-0.80 0.90 0.95 best}; do
	if [ "$target" = best ]; then
		sed '/^    accuracy: /d' configs/ocr-variants.yaml >"$tmp/variants.yaml"
	else
		sed "s/^    accuracy: .*/    accuracy: $target/" configs/ocr-variants.yaml >"$tmp/variants.yaml"
	fi
	pids=""
	"$bin" backend --executor ocr --hardware cpu-builtin --listen 127.0.0.1:9501 --metrics-listen 127.0.0.1:10501 >"$tmp/b1.log" 2>&1 & pids="$pids $!"
	"$bin" backend --executor ocr --hardware cpu-1t --listen 127.0.0.1:9502 --metrics-listen 127.0.0.1:10502 >"$tmp/b2.log" 2>&1 & pids="$pids $!"
	"$bin" backend --executor ocr --hardware cpu-2t --intra-op-threads 2 --listen 127.0.0.1:9503 --metrics-listen 127.0.0.1:10503 >"$tmp/b3.log" 2>&1 & pids="$pids $!"
	sleep 2
	"$bin" gateway --admin-listen same -c configs/ocr.yaml -c "$tmp/variants.yaml" -c "$tmp/backends.yaml" --listen 127.0.0.1:9581 \
		--grpc-listen 127.0.0.1:9582 --max-body 67108864 --log console >"$tmp/gw.log" 2>&1 & gw=$!
	pids="$pids $gw"
	i=0
	until grep -q "piccolo gateway: HTTP on" "$tmp/gw.log"; do
		kill -0 "$gw" 2>/dev/null || { echo "the gateway exited:"; cat "$tmp/gw.log"; exit 1; }
		i=$((i + 1)); [ $i -lt 120 ] || { cat "$tmp/gw.log"; exit 1; }; sleep 0.5
	done
	echo "== target $target"
	"$bin" plan -c configs/ocr.yaml -c "$tmp/variants.yaml" 2>/dev/null | grep -A8 '^session ocr-variants' | grep -E 'session|^  (det|rec) '
	"$bin" profile --accuracy "$tmp/set" --target 127.0.0.1:9582 --model ocr-variants
	"$bin" loadgen --target 127.0.0.1:9582 --protocol grpc --session ocr-variants --rate 2 --arrival constant \
		--duration "$dur" --slo 3s --input "$tmp/img" -q -o json >"$tmp/load.json"
	tr -d ' \n' <"$tmp/load.json" | grep -oE '"(sent|ok|slo_attainment|p50_ms|p99_ms|max_ms)":[^,}]*' | tr '\n' ' '
	echo
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
done
