# live-common.sh is sourced by the live scripts that run `piccolo` processes
# on loopback under hey (burst-live.sh, kill-live.sh): it sets
#   HEY    hey's path (Debian's; scripts/tools.sh installs it), or exits
#          naming the script ($1) and how to install it;
#   work   a fresh work directory, removed at exit unless KEEP=1 (then its
#          path is printed);
#   pids   the processes to stop at exit (append to it);
#   P      the piccolo binary: $PICCOLO, else the working tree built into work;
# and defines port, which prints a free loopback port, and
# wait_ready NAME URL LOG, which waits up to 30 s for URL/v2/health/ready to
# answer 200, else prints LOG and exits naming the script.
# Usage, after cd to the repository root: . scripts/live-common.sh NAME
HEY=$(command -v hey || ls "${PICCOLO_CACHE:-$HOME/.cache/piccolo}"/bin/hey 2>/dev/null || true)
[ -n "$HEY" ] || { echo "$1: hey is not installed (scripts/tools.sh: apt-get install hey)" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ "${KEEP:-0}" = 1 ]; then echo "work directory: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
if [ -n "${PICCOLO:-}" ]; then
	P=$PICCOLO
else
	go build -o "$work/piccolo" ./cmd/piccolo
	P=$work/piccolo
fi
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() {
	for _ in $(seq 600); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$2/v2/health/ready" || true)" = 200 ] && return
		sleep 0.05
	done
	echo "$1: the gateway did not become ready; its log:" >&2
	cat "$3" >&2
	exit 1
}
