#!/usr/bin/env bash
# gen-proto.sh regenerates the Go code of api/inference/grpc_service.proto (the
# KServe v2 / Open Inference Protocol gRPC service, wire-compatible with Triton).
#
# It installs what it needs when missing: protoc from Debian's protobuf-compiler,
# and protoc-gen-go / protoc-gen-go-grpc with `go install` at versions that match
# go.mod (google.golang.org/protobuf v1.36.12, google.golang.org/grpc v1.85.0).
# The plugins go into $PICCOLO_CACHE/bin, outside the clone. The generated
# .pb.go files are committed, so a build never needs protoc.
#
# It also writes the PyTorch worker's Python stubs (workers/torch/gen) of the
# same proto and of grpc.health.v1 (workers/torch/proto/health.proto): the
# messages with protoc's own --python_out (3.21 writes modules that build their
# descriptors from the serialized file, which protobuf 4.x to 6.x runtimes load;
# the older protoc inside Debian's grpc_tools writes descriptor code that the
# upb runtime of protobuf >= 4, as pip installs it, refuses), the service stubs
# with grpc_tools' plugin (python3-grpc-tools, from scripts/tools.sh).
#
# Usage: scripts/gen-proto.sh   (or: make proto)
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12     # google.golang.org/protobuf, as in go.mod
PROTOC_GEN_GO_GRPC_VERSION=v1.5.1  # google.golang.org/grpc/cmd/protoc-gen-go-grpc

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${PICCOLO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/piccolo}
bin="$cache/bin"
mkdir -p "$bin"
export GOTOOLCHAIN=local

if ! command -v protoc >/dev/null 2>&1; then
	echo "gen-proto: installing protoc (Debian protobuf-compiler)" >&2
	sudo=""
	if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
	$sudo apt-get install -y protobuf-compiler >/dev/null || {
		$sudo apt-get update >/dev/null && $sudo apt-get install -y protobuf-compiler >/dev/null
	}
fi

want_version() { # want_version BINARY VERSION: does BINARY --version print VERSION?
	[ -x "$1" ] && "$1" --version 2>/dev/null | grep -q -- "${2#v}"
}
if ! want_version "$bin/protoc-gen-go" "$PROTOC_GEN_GO_VERSION"; then
	echo "gen-proto: installing protoc-gen-go $PROTOC_GEN_GO_VERSION" >&2
	GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
fi
if ! want_version "$bin/protoc-gen-go-grpc" "$PROTOC_GEN_GO_GRPC_VERSION"; then
	echo "gen-proto: installing protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC_VERSION" >&2
	GOBIN="$bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
fi

cd "$root"
PATH="$bin:$PATH" protoc \
	--proto_path=api/inference \
	--go_out=api/inference --go_opt=paths=source_relative \
	--go-grpc_out=api/inference --go-grpc_opt=paths=source_relative \
	api/inference/grpc_service.proto
echo "gen-proto: wrote api/inference/grpc_service.pb.go and grpc_service_grpc.pb.go (protoc $(protoc --version | awk '{print $2}'))" >&2

py=/usr/bin/python3 # Debian's, which sees python3-grpc-tools
if ! "$py" -c 'import grpc_tools.protoc' 2>/dev/null; then
	echo "gen-proto: $py cannot import grpc_tools (run scripts/tools.sh); workers/torch/gen not regenerated" >&2
	exit 1
fi
gen=workers/torch/gen
for proto in api/inference/grpc_service.proto workers/torch/proto/health.proto; do
	protoc --proto_path="$(dirname "$proto")" --python_out="$gen" "$proto"
	"$py" -m grpc_tools.protoc --proto_path="$(dirname "$proto")" --grpc_python_out="$gen" "$proto"
done
echo "gen-proto: wrote $gen (grpc_service_pb2*.py, health_pb2*.py)" >&2
