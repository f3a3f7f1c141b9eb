// Package layering holds the test that keeps Piccolo's imports one way. It has
// no code: see layering_test.go and docs/architecture.md.
//
// The layers, lowest first. A package may import packages of a lower layer,
// and its own parent directories (backends/sim imports backends); nothing of
// its own layer or above. A package not listed takes the layer of its nearest
// listed parent directory; one with none fails the test until it is placed.
//
//	0 model:       api, api/inference, configs, arrival, backends/nvml, internal/consultest, internal/tlsfiles
//	1 mechanisms:  dispatcher, scheduler, placement, backends, backends/membership, loadgen, internal/ocrtest
//	2 built on 1:  backends/builtin, backends/faults, backends/fused, backends/onnx, backends/sim, simulate, profiler, scheduler/control
//	3 sessions:    gateway (DAG execution and admission), evaluation (the paper's
//	               evaluation: plans refereed by the simulator), scheduler/cluster
//	               (the elected re-planner)
//	4 metrics:     metrics
//	5 planes:      dataplane (live runner and switch), kserve (the KServe v2 edge)
//	6 control:     controlplane
//	7 tools:       status, internal/demo, internal/testharness, gateway/gatewaytest, kserve/kservetest, internal/layering
//	8 commands:    cmd/piccolo, deploy (the image and manifests; it imports none of ours)
//
// So the request path goes down the layers (kserve → gateway; dataplane →
// dispatcher, backends) and the control path too (controlplane → dataplane,
// scheduler), never back: dispatcher never imports gateway, gateway never
// imports kserve or dataplane, and dataplane and kserve never import each other.
// Tests (_test.go files) are not checked: an integration test may boot the
// whole gateway.
package layering
