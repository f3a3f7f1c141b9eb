package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// simBackendConfig is the profile text of the interop tests' sim backend.
const simBackendConfig = `
hardware:
  - {name: v100, price: 3.06}
profiles:
  - model: resnet50
    hardware: v100
    entries:
      - {batch: 4, concurrency: 1, duration: 5ms}
`

// startInteropBackend runs `piccolo backend --executor sim` with resnet50
// loaded on loopback until the test ends; it returns the address and a cancel
// that starts the drain, and the channel runBackend's result arrives on.
func startInteropBackend(t *testing.T) (addr string, stop context.CancelFunc, done <-chan error) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "profiles.yaml")
	if err := os.WriteFile(cfg, []byte(simBackendConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	o := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfg}, executor: "sim",
		models: []string{"resnet50"}, logFmt: "console", drain: 10 * time.Second, metrics: "off"}
	addr, done = startBackend(t, ctx, o)
	return addr, cancel, done
}

// interopTool returns the path of a tool scripts/tools.sh installs (under
// $PICCOLO_CACHE/bin or on PATH). When it is missing the test skips with the
// reason tools.sh wrote; with PICCOLO_REQUIRE_TOOLS set and no reason written
// (tools.sh did not run) it fails instead.
func interopTool(t *testing.T, tool, path string) string {
	t.Helper()
	for _, p := range []string{filepath.Join(modelCache(), "bin", path), path} {
		if found, err := exec.LookPath(p); err == nil {
			return found
		}
	}
	if why, err := os.ReadFile(filepath.Join(modelCache(), "tools", tool+".unavailable")); err == nil {
		t.Skipf("skipped: %s is unavailable: %s", tool, strings.TrimSpace(string(why)))
	}
	if os.Getenv("PICCOLO_REQUIRE_TOOLS") != "" {
		t.Fatalf("PICCOLO_REQUIRE_TOOLS is set but %s is missing and scripts/tools.sh wrote no reason; run `make tools`", tool)
	}
	t.Skipf("skipped: %s is not installed; run `make tools` (set PICCOLO_REQUIRE_TOOLS=1 to fail instead)", tool)
	return ""
}

// runTool runs a command to completion within a minute and returns its stdout,
// failing the test with its stderr.
func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// TestBackendHealthWatchSeesDrain: a Health/Watch stream opened on a serving
// backend reports SERVING, then NOT_SERVING once SIGTERM (here: ctx) starts the
// drain, before the process stops.
func TestBackendHealthWatchSeesDrain(t *testing.T) {
	addr, stop, done := startInteropBackend(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := healthpb.NewHealthClient(conn)
	resp, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "inference.GRPCInferenceService"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health/Check of a ready backend = %v, %v; want SERVING", resp.GetStatus(), err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	watch, err := h.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health/Watch first = %v, %v; want SERVING", first.GetStatus(), err)
	}
	stop()
	next, err := watch.Recv()
	if err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Health/Watch during the drain = %v, %v; want NOT_SERVING", next.GetStatus(), err)
	}
	wcancel() // the drain waits for open streams; a prober closes its own
	waitBackendStopped(t, done)
}

// waitBackendStopped waits for runBackend's result on done (after its ctx
// ended) and fails the test if it is an error or takes over 20 s.
func waitBackendStopped(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("backend did not stop")
	}
}

// TestGrpcurlAgainstBackend: grpcurl lists the backend's services by
// reflection (no .proto given) and its Health/Check answers SERVING.
func TestGrpcurlAgainstBackend(t *testing.T) {
	grpcurl := interopTool(t, "grpcurl", "grpcurl")
	addr, _, _ := startInteropBackend(t)
	list := runTool(t, grpcurl, "-plaintext", addr, "list")
	for _, want := range []string{"inference.GRPCInferenceService", "grpc.health.v1.Health"} {
		if !strings.Contains(list, want+"\n") {
			t.Errorf("grpcurl list printed %q; missing %s", list, want)
		}
	}
	methods := runTool(t, grpcurl, "-plaintext", addr, "list", "inference.GRPCInferenceService")
	if !strings.Contains(methods, "inference.GRPCInferenceService.ModelInfer") {
		t.Errorf("grpcurl list inference.GRPCInferenceService printed %q; missing ModelInfer", methods)
	}
	for _, svc := range []string{"", "inference.GRPCInferenceService"} {
		out := runTool(t, grpcurl, "-plaintext", "-d", `{"service":"`+svc+`"}`, addr, "grpc.health.v1.Health/Check")
		if !strings.Contains(out, `"SERVING"`) {
			t.Errorf("grpcurl Health/Check %q printed %q; want status SERVING", svc, out)
		}
	}
	meta := runTool(t, grpcurl, "-plaintext", "-d", `{"name":"resnet50"}`, addr, "inference.GRPCInferenceService/ModelMetadata")
	if !strings.Contains(meta, `"name": "resnet50"`) {
		t.Errorf("grpcurl ModelMetadata printed %q; want the model's name", meta)
	}
}

// pythonGRPCStubs returns Debian's python3, which must import grpc and
// grpc_tools (else the test skips, or fails under PICCOLO_REQUIRE_TOOLS), and
// a temp dir of the stubs grpc_tools generates from
// api/inference/grpc_service.proto.
func pythonGRPCStubs(t *testing.T) (py, stubs string) {
	t.Helper()
	py = interopTool(t, "python-grpc", "/usr/bin/python3")
	if err := exec.Command(py, "-c", "import grpc, grpc_tools.protoc").Run(); err != nil {
		why, _ := os.ReadFile(filepath.Join(modelCache(), "tools", "python-grpc.unavailable"))
		if len(why) > 0 {
			t.Skipf("skipped: python-grpc is unavailable: %s", strings.TrimSpace(string(why)))
		}
		if os.Getenv("PICCOLO_REQUIRE_TOOLS") != "" {
			t.Fatalf("PICCOLO_REQUIRE_TOOLS is set but %s cannot import grpc, grpc_tools; run `make tools`", py)
		}
		t.Skipf("skipped: %s cannot import grpc and grpc_tools; run `make tools`", py)
	}
	proto, err := filepath.Abs("../../api/inference")
	if err != nil {
		t.Fatal(err)
	}
	stubs = t.TempDir()
	runTool(t, py, "-m", "grpc_tools.protoc", "-I"+proto, "--python_out="+stubs, "--grpc_python_out="+stubs, filepath.Join(proto, "grpc_service.proto"))
	return py, stubs
}

// pythonClient is a KServe v2 client in Python, on stubs generated from
// api/inference/grpc_service.proto by grpc_tools: what a Python user of the
// backend (or of Triton) writes. It prints one line per check.
const pythonClient = `
import struct, sys
import grpc
sys.path.insert(0, sys.argv[1])
import grpc_service_pb2 as pb, grpc_service_pb2_grpc as rpc

stub = rpc.GRPCInferenceServiceStub(grpc.insecure_channel(sys.argv[2]))
print("live", stub.ServerLive(pb.ServerLiveRequest()).live)
meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="resnet50"))
print("metadata", meta.name, meta.platform, [(t.name, t.datatype, list(t.shape)) for t in meta.outputs])
req = pb.ModelInferRequest(model_name="resnet50", id="py-1")
t = req.inputs.add(name="input0", datatype="FP32", shape=[2, 3])
req.raw_input_contents.append(struct.pack("<6f", 1, 2, 3, 4, 5, 6))
resp = stub.ModelInfer(req)
out = resp.outputs[0]
print("infer", resp.id, out.name, out.datatype, list(out.shape), len(resp.raw_output_contents[0]))
`

// TestPythonGRPCClientAgainstBackend generates the Python stubs of the
// KServe v2 proto with grpc_tools into a temp dir and calls ServerLive,
// ModelMetadata and ModelInfer on a sim backend from Debian's python3.
func TestPythonGRPCClientAgainstBackend(t *testing.T) {
	py, stubs := pythonGRPCStubs(t)
	script := filepath.Join(stubs, "client.py")
	if err := os.WriteFile(script, []byte(pythonClient), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := startInteropBackend(t)
	out := runTool(t, py, script, stubs, addr)
	for _, want := range []string{
		"live True\n",
		"metadata resnet50 ",
		"infer py-1 output0 FP32 [2, 1] 8\n", // the sim's output0: FP32 [n, 1], 4 bytes a row
	} {
		if !strings.Contains(out, want) {
			t.Errorf("python client printed:\n%s\nmissing %q", out, want)
		}
	}
}
