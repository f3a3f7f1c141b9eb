#!/usr/bin/env bash
# gpu-check.sh measures the PyTorch worker on a real GPU and serves it through
# Piccolo, in one run of at most about 10 minutes (docs/gpu.md):
#
#   1. nvidia-smi (the device, driver, CUDA), python/torch versions;
#   2. starts the worker (workers/torch/worker.py) on the GPU, and a `piccolo
#      backend --executor sim` beside it only for its NVML telemetry
#      (piccolo_gpu_* on /metrics: utilisation, memory, power), sampled every
#      second into gpu-metrics.tsv, tagged with the phase;
#   3. `piccolo profile` of each model against the worker, batches 1-64 and
#      concurrency 1-2: profile-<model>.yaml/.txt, merged into profiles.yaml
#      (hardware + profiles, the file to commit under configs/gpu/);
#   4. `piccolo plan` of a one-module session on the first model at half the
#      best single-GPU throughput of its profile: session.yaml, plan.txt/json;
#   5. `piccolo gateway` over the worker and `piccolo loadgen` (gRPC, Poisson)
#      at the planned rate for 60 s: loadgen.json, the worker's and the
#      gateway's /metrics at the end (the batches the worker ran);
#   6. summary.md: the batch curves, the NVML readings per phase (and DCGM's
#      SM activity when dcgmi is installed), the SLO attainment, and each
#      model's best items/s beside NVIDIA's published figure for it on that GPU
#      (scripts/gpu-published.tsv).
#
# With GPU_CHECK_INPUT=jpeg (the default) the served module is the chain
# preprocess+<first model> (docs/gpu.md, "Compact inputs"): profiled with a
# JPEG as its input, and served with clients sending that JPEG (BYTES), so the
# GPU decodes and normalises; its profile is measured beside the FP32 ones.
# The merged profile is also written as configs/gpu/<hardware>.yaml inside the
# output folder: the path to commit it under.
#
# Everything goes to one folder: $OUT when set (the device machine's), else
# out/gpu-check-<UTC time>. The machine needs python3 with torch, torchvision
# and grpcio (and numpy); no Go: the piccolo binary is built elsewhere and
# carried (go build -ldflags='-s -w' -o bin/piccolo ./cmd/piccolo).
#
# Usage: scripts/gpu-check.sh [PICCOLO_BINARY [WORKER_DIR]]
#        (defaults: bin/piccolo, workers/torch)
#
# Settings (environment), defaults for the GPU run:
#   GPU_CHECK_DEVICE=auto           worker --device: auto, cuda or cpu
#   GPU_CHECK_MODELS=resnet50,mobilenet_v3_large,ssdlite320_mobilenet_v3_large
#                                   the first one is served in step 5
#   GPU_CHECK_BATCHES=1,2,4,8,16,32,64   GPU_CHECK_CONCURRENCY=1,2
#   GPU_CHECK_PROFILE_DURATION=2s   measuring time per (batch, concurrency) point
#   GPU_CHECK_CALL_TIMEOUT=180s     piccolo profile --timeout: one load (its warm-up
#                                   of every batch size included) or one batch
#   GPU_CHECK_IMAGE_SIZE=0          worker --image-size (0: each model's own)
#   GPU_CHECK_HARDWARE=             hardware type (default: from nvidia-smi's
#                                   name, e.g. h100; cpu without a GPU)
#   GPU_CHECK_INPUT=jpeg            jpeg: serve preprocess+<first model> with a JPEG;
#                                   fp32: serve the first model with FP32 zeros
#   GPU_CHECK_JPEG_SIZE=480x360     the JPEG's width x height (a photo's proportions)
#   GPU_CHECK_LOAD=0.5              served rate / best single-machine items/s
#                                   (the plan's peak: 0.8 to 0.9)
#   GPU_CHECK_SLO_MS=0              SLO of the session (0: 4 x the largest batch's duration)
#   GPU_CHECK_SERVE=60s             how long loadgen sends
#   GPU_CHECK_THREADS=0             worker --threads on the CPU (0: torch's default)
#   GPU_CHECK_BUDGET=480            seconds: a model whose profile would start
#                                   after BUDGET-150 s is skipped (and written
#                                   down), so that serving still fits; about
#                                   4 minutes are expected on an H100
#   PYTHON=python3
# The CPU rehearsal (docs/gpu.md) shrinks these; only the device differs.
set -euo pipefail

start=$SECONDS
root=$(cd "$(dirname "$0")/.." && pwd)
piccolo=$(realpath "${1:-$root/bin/piccolo}")
worker_dir=$(realpath "${2:-$root/workers/torch}")
helper="$root/scripts/gpu-check.py"
py=${PYTHON:-python3}
device=${GPU_CHECK_DEVICE:-auto}
models=${GPU_CHECK_MODELS:-resnet50,mobilenet_v3_large,ssdlite320_mobilenet_v3_large}
batches=${GPU_CHECK_BATCHES:-1,2,4,8,16,32,64}
concurrency=${GPU_CHECK_CONCURRENCY:-1,2}
pdur=${GPU_CHECK_PROFILE_DURATION:-2s}
call_timeout=${GPU_CHECK_CALL_TIMEOUT:-180s}
image_size=${GPU_CHECK_IMAGE_SIZE:-0}
load=${GPU_CHECK_LOAD:-0.5}
input=${GPU_CHECK_INPUT:-jpeg}
jpeg_size=${GPU_CHECK_JPEG_SIZE:-480x360}
case "$input" in jpeg | fp32) ;; *) echo "GPU_CHECK_INPUT=$input: allowed: jpeg, fp32" >&2; exit 2 ;; esac
slo_ms=${GPU_CHECK_SLO_MS:-0}
serve=${GPU_CHECK_SERVE:-60s}
threads=${GPU_CHECK_THREADS:-0}
budget=${GPU_CHECK_BUDGET:-480}
out=${OUT:-$root/out/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(realpath "$out")

say() { echo "gpu-check [$((SECONDS - start))s]: $*" >&2; }
die() {
	say "FAILED: $*"
	echo "$*" >"$out/FAILED"
	exit 1
}
phase() { echo "$1" >"$out/.phase"; say "phase $1"; }

[ -x "$piccolo" ] || die "$piccolo is not an executable piccolo binary; build it with go build -ldflags='-s -w' -o bin/piccolo ./cmd/piccolo"
"$piccolo" --help >/dev/null 2>&1 || die "$piccolo does not run here: $("$piccolo" --help 2>&1 | head -3) (it needs glibc >= 2.34)"
[ -f "$worker_dir/worker.py" ] || die "$worker_dir/worker.py not found: give the workers/torch folder"
"$py" -c 'import torch, torchvision, grpc, numpy' 2>"$out/python-import.err" ||
	die "$py cannot import torch, torchvision, grpc and numpy: $(tail -1 "$out/python-import.err")"

# Processes this script started, stopped (by pid) on any exit.
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$p" 2>/dev/null || true
	done
	rm -f "$out/.phase"
	# What was measured, even when a step failed or the run was cut short.
	[ -f "$out/summary.md" ] || "$py" "$helper" summary "$out" "$root/scripts/gpu-published.tsv" 2>/dev/null || true
}
trap cleanup EXIT

# 1. The machine.
phase machine
{
	echo "date: $(date -u +%FT%TZ)"
	echo "host: $(uname -srm), $(nproc) CPUs"
	echo "piccolo: $piccolo ($(stat -c %s "$piccolo") bytes)"
	"$py" -c 'import sys, torch, torchvision, grpc; print("python", sys.version.split()[0], "| torch", torch.__version__, "| torchvision", torchvision.__version__, "| grpcio", grpc.__version__, "| cuda", torch.version.cuda, "available" if torch.cuda.is_available() else "not available")'
} >"$out/env.txt" 2>&1
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
	nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm --format=csv >>"$out/nvidia-smi.txt" 2>&1 || true
	cat "$out/nvidia-smi.txt" >&2
	gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
else
	echo "nvidia-smi: not on this machine (no NVIDIA driver)" | tee "$out/nvidia-smi.txt" >&2
	gpu_name=
fi
echo "gpu: ${gpu_name:-none}" >>"$out/env.txt"
hw=${GPU_CHECK_HARDWARE:-}
if [ -z "$hw" ]; then
	# "NVIDIA H100 80GB HBM3" -> h100: the first word of a letter and digits.
	hw=$(echo "$gpu_name" | tr 'A-Z' 'a-z' | grep -oE '\b[a-z]+[0-9]{2,4}[a-z]?\b' | head -1 || true)
	hw=${hw:-cpu}
fi
echo "hardware type: $hw" >>"$out/env.txt"

# 2. The worker, and piccolo backend for the NVML telemetry.
phase start
wport=$("$py" "$helper" free-port)
wmport=$("$py" "$helper" free-port)
"$py" "$worker_dir/worker.py" --listen "127.0.0.1:$wport" --metrics-listen "127.0.0.1:$wmport" --hardware "$hw" --device "$device" \
	--image-size "$image_size" --threads "$threads" >"$out/worker.out" 2>"$out/worker.log" &
pids+=($!)
line=$("$py" "$helper" wait-line "$out/worker.out" "serving on" 120) || die "the worker did not start: $(tail -5 "$out/worker.log")"
say "$line"
worker="127.0.0.1:$wport"

tport=$("$py" "$helper" free-port)
tmport=$("$py" "$helper" free-port)
cat >"$out/telemetry.yaml" <<EOF
# piccolo backend runs only for its NVML telemetry: a sim model nobody calls.
hardware: [{name: $hw, price: 1}]
profiles:
  - {model: idle, hardware: $hw, entries: [{batch: 1, concurrency: 1, duration: 1ms}]}
EOF
"$piccolo" backend --executor sim -c "$out/telemetry.yaml" --hardware "$hw" --listen "127.0.0.1:$tport" \
	--metrics-listen "127.0.0.1:$tmport" --log console >"$out/telemetry-backend.out" 2>"$out/telemetry-backend.log" &
pids+=($!)
"$py" "$helper" wait-line "$out/telemetry-backend.out" "serving on" 30 >/dev/null || die "piccolo backend did not start: $(tail -5 "$out/telemetry-backend.log")"
"$py" "$helper" fetch "http://127.0.0.1:$tmport/metrics" >"$out/telemetry-first.prom"
if grep -q '^piccolo_gpu_info' "$out/telemetry-first.prom"; then
	grep '^piccolo_gpu_' "$out/telemetry-first.prom" >&2
else
	say "no piccolo_gpu_* series: $(grep -i 'gpu telemetry' "$out/telemetry-backend.log" | head -1)"
fi
"$py" "$helper" sample "http://127.0.0.1:$tmport/metrics" "$out/.phase" "$out/gpu-metrics.tsv" 1 &
pids+=($!)
# SM activity and occupancy (DCGM profiling fields 1002, 1003): NVML's
# utilisation counts the time any kernel ran, not how much of the GPU it used.
if command -v dcgmi >/dev/null 2>&1; then
	dcgmi dmon -e 1002,1003 -d 1000 >"$out/dcgm-sm.txt" 2>&1 &
	pids+=($!)
else
	echo "dcgmi: not installed; SM activity not measured (NVML utilisation only)" >"$out/dcgm-sm.txt"
fi

# 3. Profiles.
echo "hardware: [{name: $hw, price: 1}] # price: 1 cost unit per machine-hour (the check compares no prices)" >"$out/profiles.yaml"
echo "profiles:" >>"$out/profiles.yaml"
IFS=, read -ra model_list <<<"$models"
served=${model_list[0]}
inputs=()
if [ "$input" = jpeg ]; then
	# One photo-sized JPEG of smooth gradients and noise (tens of KB, as a client sends).
	"$py" "$helper" jpeg "$jpeg_size" "$out/input.jpg" || die "writing the JPEG input failed"
	served=preprocess+${model_list[0]}
	model_list=("$served" "${model_list[@]}")
	inputs=(--input "$out/input.jpg" --input-name image)
	say "serving $served with $(stat -c %s "$out/input.jpg")-byte JPEGs of ${jpeg_size}"
fi
for m in "${model_list[@]}"; do
	if [ $((SECONDS - start)) -gt $((budget - 150)) ]; then
		echo "not profiled: $((SECONDS - start)) s had passed, and serving needs the rest of the ${budget} s budget" >"$out/profile-$m.skipped"
		say "skipping $m (out of time)"
		continue
	fi
	phase "profile-$m"
	model_inputs=()
	case "$m" in preprocess*) model_inputs=("${inputs[@]}") ;; esac
	"$piccolo" profile --target "$worker" --model "$m" --hardware "$hw" --batches "$batches" --concurrency "$concurrency" \
		--duration "$pdur" --timeout "$call_timeout" ${model_inputs[@]+"${model_inputs[@]}"} -q -o "$out/profile-$m.yaml" 2>"$out/profile-$m.txt" ||
		die "piccolo profile $m failed: $(tail -3 "$out/profile-$m.txt")"
	cat "$out/profile-$m.txt" >&2
	sed -n '/^profiles:/,$p' "$out/profile-$m.yaml" | tail -n +2 >>"$out/profiles.yaml"
done
[ -f "$out/profile-$served.yaml" ] || die "the served model $served was not profiled"
mkdir -p "$out/configs/gpu"
cp "$out/profiles.yaml" "$out/configs/gpu/$hw.yaml"

# 4. Plan.
phase plan
read -r rate slo < <("$py" "$helper" session "$served" "$hw" "$out/profiles.yaml" "$load" "$slo_ms" "$out/session.yaml") || true
[ -n "${slo:-}" ] || die "no session could be written from $out/profiles.yaml"
say "session: $served at $rate req/s, SLO ${slo}ms"
echo "backends: [{id: ${hw}-0, address: \"$worker\", hardware: $hw}]" >"$out/backends.yaml"
"$piccolo" plan -c "$out/profiles.yaml" -c "$out/session.yaml" >"$out/plan.txt" 2>&1 || die "piccolo plan: $(cat "$out/plan.txt")"
"$piccolo" plan -c "$out/profiles.yaml" -c "$out/session.yaml" -o json >"$out/plan.json" 2>/dev/null || true
cat "$out/plan.txt" >&2

# 5. Serve.
phase serve
hport=$("$py" "$helper" free-port)
gport=$("$py" "$helper" free-port)
"$piccolo" gateway --admin-listen same -c "$out/profiles.yaml" -c "$out/session.yaml" -c "$out/backends.yaml" --watch=false \
	--listen "127.0.0.1:$hport" --grpc-listen "127.0.0.1:$gport" >"$out/gateway.out" 2>"$out/gateway.log" &
pids+=($!)
"$py" "$helper" wait-line "$out/gateway.out" "piccolo gateway: HTTP on" 180 >/dev/null || die "the gateway did not start: $(tail -5 "$out/gateway.log")"
"$py" "$helper" fetch "http://127.0.0.1:$wmport/metrics" >"$out/worker-metrics-before-serve.prom" || true
"$piccolo" loadgen --target "127.0.0.1:$gport" --protocol grpc --session gpucheck --rate "$rate" --duration "$serve" \
	${inputs[@]+"${inputs[@]}"} --slo "${slo}ms" -q -o json >"$out/loadgen.json" 2>"$out/loadgen.err" || die "piccolo loadgen: $(tail -3 "$out/loadgen.err")"
"$py" "$helper" fetch "http://127.0.0.1:$hport/metrics" >"$out/gateway-metrics.prom" || true
"$py" "$helper" fetch "http://127.0.0.1:$wmport/metrics" >"$out/worker-metrics.prom" || true
phase done

# 6. Summary.
"$py" "$helper" summary "$out" "$root/scripts/gpu-published.tsv"
cat "$out/summary.md" >&2
say "done in $((SECONDS - start)) s; everything is in $out"
