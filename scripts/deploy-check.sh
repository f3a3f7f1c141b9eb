#!/usr/bin/env bash
# deploy-check.sh validates deploy/ offline (no Docker engine, no cluster, no
# network beyond the Go module proxy):
#
#   Dockerfile   parsed and linted by BuildKit's own parser (deploy/check), which
#                also requires a non-root USER in the final stage
#   Kubernetes   deploy/kubernetes/base and each overlay (cpu, gpu, autoscale-keda,
#                autoscale-hpa) rendered with kustomize
#                (sigs.k8s.io/kustomize/kustomize/v5), every object of the output
#                validated by kubeconform -strict (unknown fields, wrong types and
#                missing required fields fail) against JSON schemas generated
#                from the OpenAPI document of Kubernetes $K8S_VERSION
#                (api/openapi-spec/swagger.json of the k8s.io/kubernetes module,
#                checked against its sha256 below)
#   Prometheus   base/prometheus.yml with `promtool check config`, when promtool
#                is installed (Debian package prometheus); said when skipped
#
# Tools and schemas are cached under $PICCOLO_CACHE; a second run builds and
# downloads nothing. Rendered manifests are left in $PICCOLO_CACHE/deploy-check/.
#
# Usage: scripts/deploy-check.sh   (or: make deploy-check)
set -euo pipefail

KUSTOMIZE_VERSION=v5.8.1   # v5.8.3 needs go 1.27
KUBECONFORM_VERSION=v0.7.0
K8S_VERSION=v1.34.2
SWAGGER_SHA256=d3b0cdc2fda15c753206d25ab459dc7c12df64e2fd652b6809687471ea751c37
# KEDA's ScaledObject CRD (overlays/autoscale-keda), from the KEDA module on
# the Go module proxy, checked against its sha256.
KEDA_VERSION=v2.18.1
KEDA_CRD_SHA256=44e8d3444bb884ed5c8dc4f1b118944a54fe9c81534048793c20b9394ae1de2c

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${PICCOLO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/piccolo}
bin="$cache/bin"
schemas="$cache/k8s-schemas-$K8S_VERSION"
out="$cache/deploy-check"
mkdir -p "$bin" "$out"
export GOTOOLCHAIN=local

# tool NAME MODULE/CMD VERSION: path of $bin/NAME-VERSION, go-installed once.
tool() {
	local path="$bin/$1-$3"
	if [ ! -x "$path" ]; then
		echo "deploy-check: go install $2@$3 (once)" >&2
		local tmp
		tmp=$(mktemp -d)
		GOBIN="$tmp" go install "$2@$3" >&2 || { echo "deploy-check: go install $2@$3 failed" >&2; rm -rf "$tmp"; exit 1; }
		mv "$tmp/$1" "$path"
		rm -rf "$tmp"
	fi
	echo "$path"
}
kustomize=$(tool kustomize sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION")
kubeconform=$(tool kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION")

check() { (cd "$root/deploy/check" && go run . "$@"); }

if [ "$(cat "$schemas/.swagger.sha256" 2>/dev/null)" != "$SWAGGER_SHA256" ]; then
	echo "deploy-check: Kubernetes $K8S_VERSION OpenAPI from the Go module proxy (k8s.io/kubernetes, once)" >&2
	dir=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
	swagger="$dir/api/openapi-spec/swagger.json"
	got=$(sha256sum "$swagger" 2>/dev/null | cut -d' ' -f1 || true)
	if [ "$got" != "$SWAGGER_SHA256" ]; then
		echo "deploy-check: $swagger: sha256 ${got:-<missing>}, want $SWAGGER_SHA256" >&2
		exit 1
	fi
	rm -rf "$schemas"
	check schemas "$swagger" "$schemas"
	echo "$SWAGGER_SHA256" >"$schemas/.swagger.sha256"
fi

if [ "$(cat "$schemas/.keda.sha256" 2>/dev/null)" != "$KEDA_CRD_SHA256" ]; then
	echo "deploy-check: KEDA $KEDA_VERSION ScaledObject CRD from the Go module proxy (github.com/kedacore/keda/v2, once)" >&2
	dir=$(go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
	crd="$dir/config/crd/bases/keda.sh_scaledobjects.yaml"
	got=$(sha256sum "$crd" 2>/dev/null | cut -d' ' -f1 || true)
	if [ "$got" != "$KEDA_CRD_SHA256" ]; then
		echo "deploy-check: $crd: sha256 ${got:-<missing>}, want $KEDA_CRD_SHA256" >&2
		exit 1
	fi
	check crd "$crd" "$schemas"
	echo "$KEDA_CRD_SHA256" >"$schemas/.keda.sha256"
fi

check dockerfile "$root/deploy/Dockerfile"

status=0
for k in base overlays/cpu overlays/gpu overlays/autoscale-keda overlays/autoscale-hpa; do
	rendered="$out/${k//\//-}.yaml"
	if ! "$kustomize" build --load-restrictor LoadRestrictionsNone "$root/deploy/kubernetes/$k" >"$rendered"; then
		echo "deploy-check: kustomize build deploy/kubernetes/$k failed" >&2
		status=1
		continue
	fi
	echo "deploy/kubernetes/$k (rendered: $rendered):"
	"$kubeconform" -strict -summary -schema-location "$schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" "$rendered" || status=1
done

if command -v promtool >/dev/null 2>&1; then
	promtool check config --syntax-only "$root/deploy/kubernetes/base/prometheus.yml" || status=1
else
	echo "deploy-check: promtool not installed (Debian package prometheus): base/prometheus.yml not checked"
fi
exit $status
