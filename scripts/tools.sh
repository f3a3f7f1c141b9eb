#!/usr/bin/env bash
# tools.sh installs the interoperability and load tools the tests and later
# load runs use, once, and says clearly which it could not install:
#
#   grpcurl         go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3
#                   -> $cache/bin/grpcurl
#   toxiproxy       go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0
#                   -> $cache/bin/toxiproxy-server: a TCP proxy that adds latency
#                   and a bandwidth limit, the slow link of scripts/locality-live.sh
#                   (this kernel has no netem)
#   python3-grpcio, python3-grpc-tools   Debian packages, for /usr/bin/python3
#                   (Debian's interpreter: a pyenv python3 on PATH does not see them)
#   python3-torch, python3-torchvision   Debian packages, for /usr/bin/python3:
#                   the PyTorch worker (workers/torch) and its tests; about 260 MB
#                   to fetch and 1 GB on disk, under 2 minutes once
#   curl            Debian package (the binary-extension interop test)
#   wrk, hey        Debian packages (HTTP load generators)
#   chromium        Debian package: the headless browser the live view's test
#                   (cmd/piccolo/view_browser_test.go) drives; about 100 MB
#
# A tool that is already there is not installed again, so a second run takes
# well under a second. For each tool that cannot be installed the script prints
# why and writes the reason to $cache/tools/<tool>.unavailable; the tests that
# use the tool skip with that reason (and fail, under PICCOLO_REQUIRE_TOOLS=1,
# when the tool is missing with no reason written). It exits 0 either way: a
# missing interop tool skips its tests, it does not stop `make test`.
#
# Usage: scripts/tools.sh   (or: make tools)
set -uo pipefail

GRPCURL_VERSION=v1.9.3 # the newest release that builds with go1.26.8
TOXIPROXY_VERSION=v2.5.0

cache=${PICCOLO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/piccolo}
bin="$cache/bin"
marks="$cache/tools"
mkdir -p "$bin" "$marks"
rm -f "$marks"/*.unavailable # this run says afresh what is missing
export GOTOOLCHAIN=local

# ok TOOL WHERE / unavailable TOOL REASON: report one tool's outcome.
ok() {
	rm -f "$marks/$1.unavailable"
	echo "tools: $1: $2"
}
unavailable() {
	echo "$2" >"$marks/$1.unavailable"
	echo "tools: $1: NOT INSTALLED: $2" >&2
}

# apt TOOL PACKAGE...: install Debian packages (apt-get update once on failure).
apt_updated=
apt() {
	local tool=$1
	shift
	if ! command -v apt-get >/dev/null 2>&1; then
		unavailable "$tool" "apt-get is not on this machine; install the Debian package(s) $* by other means"
		return 1
	fi
	if [ "$(id -u)" != 0 ]; then
		unavailable "$tool" "installing the Debian package(s) $* needs root (apt-get install -y $*)"
		return 1
	fi
	echo "tools: apt-get install $*" >&2
	if apt-get install -y -q "$@" >/dev/null 2>&1; then
		return 0
	fi
	if [ -z "$apt_updated" ]; then
		apt_updated=1
		apt-get update -q >/dev/null 2>&1
		apt-get install -y -q "$@" >/dev/null 2>&1 && return 0
	fi
	unavailable "$tool" "apt-get install -y $* failed (after apt-get update)"
	return 1
}

# grpcurl, built from the Go module proxy.
if [ -x "$bin/grpcurl" ]; then
	ok grpcurl "$bin/grpcurl"
else
	echo "tools: go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION (once)" >&2
	if GOBIN="$bin" go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION" >&2; then
		ok grpcurl "$bin/grpcurl"
	else
		unavailable grpcurl "go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION failed (see above)"
	fi
fi

# toxiproxy's server, built from the Go module proxy (named so it does not
# shadow anything: its command directory is called server).
if [ -x "$bin/toxiproxy-server" ]; then
	ok toxiproxy "$bin/toxiproxy-server"
else
	echo "tools: go install github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION (once)" >&2
	tmpbin=$(mktemp -d)
	if GOBIN="$tmpbin" go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" >&2 && mv "$tmpbin/server" "$bin/toxiproxy-server"; then
		ok toxiproxy "$bin/toxiproxy-server"
	else
		unavailable toxiproxy "go install github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION failed (see above)"
	fi
	rm -rf "$tmpbin"
fi

# Python gRPC and its code generator, for Debian's interpreter.
py=/usr/bin/python3
pycheck() { [ -x "$py" ] && "$py" -c 'import grpc, grpc_tools.protoc' >/dev/null 2>&1; }
if pycheck || { apt python-grpc python3-grpcio python3-grpc-tools && pycheck; }; then
	ok python-grpc "$py with grpc $("$py" -c 'import grpc; print(grpc.__version__)')"
elif [ ! -f "$marks/python-grpc.unavailable" ]; then
	unavailable python-grpc "python3-grpcio and python3-grpc-tools installed, but $py cannot import grpc and grpc_tools.protoc"
fi

# PyTorch and torchvision for the same interpreter (the worker also needs grpc).
torchcheck() { [ -x "$py" ] && "$py" -c 'import torch, torchvision' >/dev/null 2>&1; }
if [ -f "$marks/python-grpc.unavailable" ]; then
	unavailable python-torch "the torch worker needs Python gRPC, which is unavailable: $(cat "$marks/python-grpc.unavailable")"
elif torchcheck || { apt python-torch python3-torch python3-torchvision && torchcheck; }; then
	ok python-torch "$py with torch $("$py" -c 'import torch; print(torch.__version__)') and torchvision $("$py" -c 'import torchvision; print(torchvision.__version__)')"
elif [ ! -f "$marks/python-torch.unavailable" ]; then
	unavailable python-torch "python3-torch and python3-torchvision installed, but $py cannot import torch and torchvision"
fi

# HTTP clients and load generators.
for tool in curl wrk hey; do
	if command -v "$tool" >/dev/null 2>&1 || { apt "$tool" "$tool" && command -v "$tool" >/dev/null 2>&1; }; then
		ok "$tool" "$(command -v "$tool")"
	elif [ ! -f "$marks/$tool.unavailable" ]; then
		unavailable "$tool" "apt-get install $tool succeeded but $tool is not on PATH"
	fi
done
# The browser the live view's test loads the page in (through chromedp).
if command -v chromium >/dev/null 2>&1 || { apt chromium chromium && command -v chromium >/dev/null 2>&1; }; then
	ok chromium "$(command -v chromium)"
elif [ ! -f "$marks/chromium.unavailable" ]; then
	unavailable chromium "apt-get install chromium succeeded but chromium is not on PATH"
fi
exit 0
