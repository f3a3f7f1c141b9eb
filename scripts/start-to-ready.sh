#!/usr/bin/env bash
# start-to-ready.sh measures how long `piccolo gateway` takes from its start to
# /v2/health/ready answering 200, with one backend already serving (docs/architecture.md,
# "Start-up"). It builds piccolo, starts one `piccolo backend`, waits until it
# serves, starts the gateway over it and polls readiness every 10 ms; it prints
# the seconds and the gateway's and backend's log lines with their times.
#
# Usage: scripts/start-to-ready.sh [sim|ocr] [runs, default 3]
#   sim: the sim executor on v100 serving the demo's m2 → m3 session
#        (configs/demo/paper-gpus.yaml): the gateway's own start-up;
#   ocr: the onnx executor (cpu-1t) serving OCR det → cls → rec from
#        configs/ocr.yaml's profiles (needs make models): the gateway waits for
#        the backend to load the three models.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-sim}
runs=${2:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/piccolo" ./cmd/piccolo
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
case $kind in
sim)
	hw=v100 exe=sim
	cp configs/demo/paper-gpus.yaml "$dir/cfg.yaml"
	;;
ocr)
	hw=cpu-1t exe=onnx
	sed '/^sessions:/,$d' configs/ocr.yaml >"$dir/cfg.yaml"
	cat >>"$dir/cfg.yaml" <<'YAML'
sessions:
  - name: read
    slo: 3s
    modules:
      - {name: det, model: ocr-det, rate: 1}
      - {name: cls, model: ocr-cls, rate: 1, after: [det]}
      - {name: rec, model: ocr-rec, rate: 1, after: [cls]}
YAML
	;;
*)
	echo "usage: $0 [sim|ocr] [runs]" >&2
	exit 2
	;;
esac
for _ in $(seq "$runs"); do
	bport=$(port) hport=$(port) gport=$(port)
	"$dir/piccolo" backend --listen "127.0.0.1:$bport" --hardware "$hw" -c "$dir/cfg.yaml" --executor "$exe" --metrics-listen off >"$dir/backend.log" 2>&1 &
	bpid=$!
	until grep -q '"backend serving"' "$dir/backend.log"; do sleep 0.02; done
	printf 'backends:\n  - {id: b1, address: "127.0.0.1:%d", hardware: %s}\n' "$bport" "$hw" >"$dir/backends.yaml"
	t0=$(date +%s.%N)
	"$dir/piccolo" gateway --admin-listen same -c "$dir/cfg.yaml" -c "$dir/backends.yaml" --listen "127.0.0.1:$hport" --grpc-listen "127.0.0.1:$gport" --watch=false >"$dir/gateway.log" 2>&1 &
	gpid=$!
	until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport/v2/health/ready")" = 200 ]; do
		kill -0 "$gpid" 2>/dev/null || { cat "$dir/gateway.log" >&2; exit 1; }
		sleep 0.01
	done
	t1=$(date +%s.%N)
	echo "$kind: start to ready $(echo "$t1 - $t0" | bc) s"
	kill "$gpid" "$bpid"
	wait "$gpid" "$bpid" 2>/dev/null || true
done
echo "last run's logs (time, message):"
grep -ho '"ts":[0-9.]*,"caller":"[^"]*","msg":"[^"]*"' "$dir/backend.log" "$dir/gateway.log" | sed 's/"ts":\([0-9.]*\),"caller":"\([^"]*\)","msg":"\([^"]*\)"/\1 \2: \3/' | sort -n
