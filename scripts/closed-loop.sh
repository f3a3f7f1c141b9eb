#!/usr/bin/env bash
# closed-loop.sh runs the closed-loop benchmark of docs/closed-loop.md: wrk at
# 32, 128 and 512 connections against the gateway (a one-module plan on sim
# backends, 1–2 ms a batch) and against a bare fasthttp handler doing the same
# KServe v2 JSON decode, backend hop and encode, in one run; it prints the
# table (throughput ratio, p50/p99) and the gateway dispatcher's batches.
#
# Usage: scripts/closed-loop.sh [round length, default 5s]
#   PICCOLO_CLOSEDLOOP_CPUPROFILE=FILE  also write a CPU profile of the gateway's
#   round at PICCOLO_CLOSEDLOOP_PROFILE_CONNS connections (default 512);
#   read it with: go tool pprof -top "$TMPDIR"/closed-loop.test FILE
#
# wrk comes from Debian (scripts/tools.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
if ! command -v wrk >/dev/null; then
	scripts/tools.sh >/dev/null || true
fi
command -v wrk >/dev/null || { echo "closed-loop: wrk is not installed (scripts/tools.sh: apt-get install wrk)" >&2; exit 1; }
bin=${TMPDIR:-/tmp}/closed-loop.test
go test -c -o "$bin" ./controlplane
PICCOLO_CLOSEDLOOP_DURATION=${1:-5s} "$bin" -test.run '^$' -test.bench ClosedLoop -test.benchtime 1x 2>/dev/null |
	grep -E '^\||^    |plan served|^Benchmark'
