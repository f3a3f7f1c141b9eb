#!/usr/bin/env bash
# Prints the path of a Consul binary, building it once into the cache when it is
# missing. Consul has no Debian package and `go install` fails on its replace
# directives, so this builds the released module from the Go module proxy with
# those replaces dropped (about 6 minutes on 2 cores; later runs reuse the binary).
set -euo pipefail
VERSION=${CONSUL_VERSION:-v1.22.6}
CACHE=${PICCOLO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/piccolo}
BIN="$CACHE/bin/consul-$VERSION"
if [ -x "$BIN" ] && "$BIN" version >/dev/null 2>&1; then
  echo "$BIN"
  exit 0
fi
command -v consul >/dev/null 2>&1 && consul version 2>/dev/null | grep -q "Consul ${VERSION}" && { command -v consul; exit 0; }
mkdir -p "$CACHE/bin"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
export GONOSUMDB=github.com/hashicorp/consul/envoyextensions,github.com/hashicorp/consul/troubleshoot,github.com/hashicorp/consul/proto-public
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
echo "building consul $VERSION (once; cached at $BIN)..." >&2
dir=$(go mod download -json "github.com/hashicorp/consul@$VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] || { echo "consul.sh: go mod download found no module directory" >&2; exit 1; }
cp -r "$dir" "$work/consul"
chmod -R u+w "$work/consul"
cd "$work/consul"
for m in api envoyextensions proto-public sdk troubleshoot; do
  go mod edit -dropreplace="github.com/hashicorp/consul/$m"
done
go mod download >&2
CGO_ENABLED=0 go build -trimpath -o "$BIN.tmp" . >&2
mv "$BIN.tmp" "$BIN"
echo "$BIN"
