#!/usr/bin/env bash
# Issue 33's live check of the evaluation's simulator (docs/evaluation.md,
# "Every policy live beside its simulation"): `piccolo demo --policy P` for
# each of POLICIES (default: piccolo and the five it is compared with), on the
# demo's embedded sessions (the OCR models measured on this host, the paper's
# chain on emulated GPUs), each served by the real gateway for DURATION
# (default 60s). Every run starts from the same host calibration (CAL, default
# out/demo/calibration-<hostname>.json when it exists: copied, so no run learns
# for the next), so their plans are made on the same profiles. Prints each
# run's table rows: live attainment beside the simulated one, the planned
# cost, the simulated and the live charged cost (occupancy over the cap).
# A policy that cannot plan a session prints "not planned" with its reason.
# MAX_BACKENDS (default 12) is the demo's --max-backends: InferLine's chain
# needs 10 V100, more than the demo's default 6 (+2 spares) start, and a
# gateway short of devices fits the plan to them and refuses the rest.
# Run it alone: every run takes about 2.5 minutes of the host's two cores.
# PICCOLO=BINARY runs that binary instead of building the working tree.
# DEMO_FLAGS adds flags to every demo (e.g. --gateway-arg=--slack=0).
set -euo pipefail
POLICIES=${POLICIES:-piccolo paper nexus scrooge inferline clipper}
DURATION=${DURATION:-60s}
MAX_BACKENDS=${MAX_BACKENDS:-12}
cd "$(dirname "$0")/.."
if [ -n "${PICCOLO:-}" ]; then
  P=$PICCOLO
else
  go build -o bin/piccolo ./cmd/piccolo
  P=bin/piccolo
fi
CAL=${CAL:-out/demo/calibration-$(hostname).json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for pol in $POLICIES; do
  flags=(--policy "$pol" --duration "$DURATION" --max-backends "$MAX_BACKENDS" --out "$work/$pol" ${DEMO_FLAGS:-})
  if [ -f "$CAL" ]; then
    cp "$CAL" "$work/cal-$pol.json"
    flags+=(--calibration-file "$work/cal-$pol.json")
  fi
  echo "== $pol"
  if ! "$P" demo "${flags[@]}" > "$work/$pol.log" 2>&1; then
    echo "demo --policy $pol failed:"; tail -5 "$work/$pol.log"; continue
  fi
  grep -A3 '^SESSION' "$work/$pol.log" || true
  grep -E ' errors: ' "$work/$pol.log" || true
done
