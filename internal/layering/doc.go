// Package layering holds the test that keeps Piccolo's imports one way. It has
// no code: see layering_test.go and docs/architecture.md.
//
// The layers, lowest first. A package may import packages of a lower layer,
// and its own parent directories (backends/sim imports backends); nothing of
// its own layer or above. A package not listed takes the layer of its nearest
// listed parent directory; one with none fails the test until it is placed.
//
//	0 shapes:      internal/registry (the one shape of every strategy registry)
//	1 model:       api, api/inference, configs, arrival, backends/nvml, internal/consultest, tracing, internal/tlsfiles
//	2 mechanisms:  dispatcher, planner, placement, backends, backends/membership, loadgen, metrics
//	3 built on 2:  backends/builtin, backends/faults, backends/fused, backends/onnx, backends/sim, simulate, profiler, scheduler/replan, status, tenants
//	4 sessions:    gateway (DAG execution and admission), evaluation (the paper's
//	               evaluation: plans refereed by the simulator), scheduler/cluster
//	               (the elected re-planner), internal/ocrtest, internal/ocrsamples
//	               (the OCR images tests and `piccolo demo` read), backends/process
//	               (the `piccolo backend` process: executor, server, metrics,
//	               faults, Consul registration)
//	5 planes:      dataplane (live runner and switch), kserve (the KServe v2 edge)
//	6 control:     controlplane
//	7 processes:   gateway/process (the `piccolo gateway` process: flags' options,
//	               plan step, calibration, servers, drain), scheduler/process (the
//	               `piccolo scheduler` process), and tools: internal/demo, internal/testharness, gateway/gatewaytest, kserve/kservetest, internal/layering
//	8 commands:    cmd/piccolo, deploy (the image and manifests; it imports none of ours)
//
// metrics sits below gateway (it takes the sessions through its small
// Sessions interface, which *gateway.DAGRunner satisfies), and status, a
// client of a running gateway like loadgen and profiler, below controlplane
// (the /admin/backends body is api.BackendView). Test helpers
// (internal/consultest, internal/ocrtest, internal/testharness,
// gateway/gatewaytest, kserve/kservetest) are imported only by tests and other
// helpers: production code never depends on a fixture, and the piccolo binary
// does not link testing (TestBinaryLinksNoTesting).
//
// So the request path goes down the layers (kserve → gateway; dataplane →
// dispatcher, backends) and the control path too (controlplane → dataplane,
// planner), never back: dispatcher never imports gateway, gateway never
// imports kserve or dataplane, and dataplane and kserve never import each other.
// Tests (_test.go files) are not checked: an integration test may boot the
// whole gateway.
package layering
