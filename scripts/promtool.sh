#!/bin/sh
# promtool.sh URL... — run `promtool check metrics` on each URL's Prometheus text
# (e.g. http://127.0.0.1:8000/metrics for a gateway, http://127.0.0.1:10101/metrics
# for a backend). promtool comes from Debian's `prometheus` package, installed here
# when missing; without apt (or root) it says so and exits 0, because the Go tests
# already run the same linter (promlint) on every process's output.
set -eu
if [ $# -eq 0 ]; then
	echo "usage: $0 URL..." >&2
	exit 2
fi
if ! command -v promtool >/dev/null 2>&1; then
	if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
		apt-get install -y -q prometheus >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q prometheus >/dev/null; }
	fi
fi
if ! command -v promtool >/dev/null 2>&1; then
	echo "promtool not available (apt-get missing or not root): skipped; go test ./gateway ./cmd/piccolo runs promlint instead" >&2
	exit 0
fi
status=0
for url in "$@"; do
	if curl -fsS "$url" | promtool check metrics; then
		echo "$url: ok"
	else
		echo "$url: promtool check metrics failed" >&2
		status=1
	fi
done
exit $status
