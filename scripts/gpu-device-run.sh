#!/usr/bin/env bash
# gpu-device-run.sh wraps scripts/gpu-check.sh for a GPU machine that gives
# back only a few files from its output folder ($OUT): it checks that the
# worker's Python stubs load under the machine's protobuf and grpcio, notes
# ONNX Runtime's execution providers, runs gpu-check.sh into /tmp/gc with a
# time limit, and leaves in $OUT four files: console.txt (everything printed),
# summary.md, profiles.yaml and gc.tgz (the whole run folder). docs/gpu.md
# ("Running it on the GPU machine") gives the command and the settings used.
#
#   go build -ldflags='-s -w' -o bin/piccolo ./cmd/piccolo      # here
#   OUT=/some/dir T=480 GPU_CHECK_BUDGET=420 scripts/gpu-device-run.sh   # there
#
# T: seconds gpu-check.sh may run (default 500); GPU_CHECK_* and PYTHON as in
# gpu-check.sh.
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}
: "${OUT:?set OUT to the folder the files go to}"
py=${PYTHON:-python3}
D=/tmp/gc
rm -rf "$D"
mkdir -p "$D" "$OUT"
(cd workers/torch/gen && "$py" -c "import grpc_service_pb2, grpc_service_pb2_grpc, health_pb2, health_pb2_grpc, google.protobuf as p, grpc, torch; print('stubs ok: protobuf', p.__version__, 'grpcio', grpc.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())") 2>&1 | tee "$OUT/console.txt"
"$py" -c "import onnxruntime as o; print('onnxruntime', o.__version__, 'providers', o.get_available_providers())" 2>&1 | tail -2 | tee -a "$OUT/console.txt"
OUT=$D timeout "${T:-500}" scripts/gpu-check.sh bin/piccolo workers/torch >>"$OUT/console.txt" 2>&1
echo "gpu-check rc=$?" | tee -a "$OUT/console.txt"
cp "$D/summary.md" "$D/profiles.yaml" "$OUT/" 2>/dev/null
tar czf "$OUT/gc.tgz" -C /tmp gc
tail -60 "$OUT/console.txt"
