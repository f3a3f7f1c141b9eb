package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/internal/ocrsamples"
	"github.com/piccolo-serving/piccolo/internal/ocrtest"
)

// startGatewayAddrs runs `piccolo gateway` with o until ctx ends and returns
// its HTTP and gRPC addresses once both serve, and the channel its result
// arrives on.
func startGatewayAddrs(t *testing.T, ctx context.Context, o *gatewayOptions) (httpAddr, grpcAddr string, done <-chan error) {
	t.Helper()
	type addrs struct{ h, g string }
	ready := make(chan addrs, 1)
	result := make(chan error, 1)
	go func() { result <- runGateway(ctx, o, func(h, g string) { ready <- addrs{h, g} }) }()
	select {
	case a := <-ready:
		return a.h, a.g, result
	case err := <-result:
		t.Fatalf("gateway exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not start")
	}
	return "", "", nil
}

// interopSessionConfig is a one-module session on the sim backend (which
// answers any input, BYTES images included).
const interopSessionConfig = simBackendConfig + `
sessions:
  - name: s
    slo: 1s
    modules:
      - {name: r, model: resnet50, rate: 20}
`

// startInteropGateway runs a sim backend until ctx ends and a gateway over it
// until gctx ends (its SIGTERM), with drainDelay between SIGTERM and the drain.
func startInteropGateway(t *testing.T, ctx, gctx context.Context, drainDelay time.Duration) (httpAddr, grpcAddr string, done <-chan error) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfg, []byte(interopSessionConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	bo := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfg}, executor: "sim", logFmt: "console", drain: time.Second, metrics: "off"}
	backend, _ := startBackend(t, ctx, bo)
	o := &gatewayOptions{files: []string{cfg, writeBackendsFile(t, dir, backend)}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "console", drain: 5 * time.Second, drainDelay: drainDelay}
	return startGatewayAddrs(t, gctx, o)
}

// TestGrpcurlAgainstGatewayHealthAndDrain: grpcurl lists the gateway's
// services by reflection; Health/Check answers SERVING while it serves, and
// NOT_SERVING (HTTP /v2/health/ready 503) from SIGTERM through --drain-delay,
// while the gateway still accepts connections.
func TestGrpcurlAgainstGatewayHealthAndDrain(t *testing.T) {
	grpcurl := interopTool(t, "grpcurl", "grpcurl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gctx, sigterm := context.WithCancel(ctx)
	defer sigterm()
	const drainDelay = 3 * time.Second
	httpAddr, addr, done := startInteropGateway(t, ctx, gctx, drainDelay)

	list := runTool(t, grpcurl, "-plaintext", addr, "list")
	t.Logf("grpcurl -plaintext %s list:\n%s", addr, list)
	for _, want := range []string{"inference.GRPCInferenceService", "grpc.health.v1.Health"} {
		if !strings.Contains(list, want+"\n") {
			t.Errorf("grpcurl list printed %q; missing %s", list, want)
		}
	}
	health := func(svc string) string {
		return runTool(t, grpcurl, "-plaintext", "-d", `{"service":"`+svc+`"}`, addr, "grpc.health.v1.Health/Check")
	}
	for _, svc := range []string{"", "inference.GRPCInferenceService"} {
		if out := health(svc); !strings.Contains(out, `"SERVING"`) {
			t.Errorf("grpcurl Health/Check %q on a serving gateway printed %q; want SERVING", svc, out)
		}
	}
	if status := httpStatus(t, "http://"+httpAddr+"/v2/health/ready"); status != 200 {
		t.Errorf("GET /v2/health/ready on a serving gateway = %d, want 200", status)
	}

	sigterm()
	deadline := time.Now().Add(drainDelay)
	for {
		out := health("inference.GRPCInferenceService")
		if strings.Contains(out, `"NOT_SERVING"`) {
			t.Logf("grpcurl Health/Check while draining: %s", strings.Join(strings.Fields(out), " "))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grpcurl Health/Check through the %v --drain-delay after SIGTERM printed %q; want NOT_SERVING", drainDelay, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status := httpStatus(t, "http://"+httpAddr+"/v2/health/ready"); status != 503 {
		t.Errorf("GET /v2/health/ready while draining = %d, want 503", status)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("gateway shutdown: %v", err)
		}
	case <-time.After(drainDelay + 10*time.Second):
		t.Fatal("gateway did not stop after its --drain-delay and drain")
	}
}

// httpStatus GETs url and returns the status.
func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestLoadgenBinaryImagesServedByGateway: `piccolo loadgen --input IMAGE`
// sends the image with the binary tensor data extension; the gateway decodes
// every request and answers 200.
func TestLoadgenBinaryImagesServedByGateway(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	httpAddr, _, _ := startInteropGateway(t, ctx, ctx, 0)
	img, err := ocrsamples.EncodePNG(ocrsamples.Samples()[1])
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sample.png")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runLoadgen(t, "--target", "http://"+httpAddr, "--session", "s", "--input", path, "--input-name", "image",
		"--rate", "20", "--arrival", "constant", "--duration", "1s", "-o", "json", "--quiet")
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	var rep struct {
		Sent   int64            `json:"sent"`
		OK     int64            `json:"ok"`
		Errors map[string]int64 `json:"errors"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if rep.Sent != 20 || rep.OK != rep.Sent {
		t.Errorf("loadgen sent %d binary image requests, %d ok, errors %v; want 20 sent, all ok", rep.Sent, rep.OK, rep.Errors)
	}
}

// startOCRGateway runs the OCR session of configs/ocr.yaml as `piccolo
// gateway` runs it (the command, default flags) over one `piccolo backend
// --executor ocr` a hardware type, all on loopback until ctx ends, and returns
// the gateway's HTTP and gRPC addresses and the session. configs, when given,
// replace configs/ocr.yaml as the gateway's -c files (the hardware and the
// returned session are the first file's).
func startOCRGateway(t *testing.T, ctx context.Context, configs ...string) (httpAddr, grpcAddr string, sess api.Session) {
	t.Helper()
	lib, dir := ocrtest.RequireModels(t)
	if len(configs) == 0 {
		configs = []string{ocrConfig}
	}
	cfg, err := api.Load(configs...)
	if err != nil {
		t.Fatal(err)
	}
	var list strings.Builder
	list.WriteString("backends:\n")
	for _, hw := range cfg.Hardware {
		threads := 1
		if hw.Name == "cpu-2t" {
			threads = 2
		}
		o := &backendOptions{listen: "127.0.0.1:0", hardware: hw.Name, executor: "ocr", ortLib: lib, modelDir: dir,
			threads: threads, logFmt: "json", drain: 5 * time.Second}
		addr, _ := startBackend(t, ctx, o)
		fmt.Fprintf(&list, "  - {id: %s-0, address: %q, hardware: %s}\n", hw.Name, addr, hw.Name)
	}
	backendsFile := filepath.Join(t.TempDir(), "backends.yaml")
	if err := os.WriteFile(backendsFile, []byte(list.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	gcmd := newGatewayCmd()
	var args []string
	for _, c := range configs {
		args = append(args, "-c", c)
	}
	gcmd.SetArgs(append(args, "-c", backendsFile, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--max-body", "67108864"))
	pr, pw := io.Pipe()
	gcmd.SetOut(pw)
	gdone := make(chan error, 1)
	go func() { gdone <- gcmd.ExecuteContext(ctx); pw.Close() }()
	type addrs struct{ h, g string }
	ready := make(chan addrs, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var a addrs
			if _, err := fmt.Sscanf(sc.Text(), "piccolo gateway: HTTP on %s gRPC on %s", &a.h, &a.g); err == nil {
				a.h = strings.TrimSuffix(a.h, ",")
				ready <- a
			}
		}
	}()
	select {
	case a := <-ready:
		return a.h, a.g, cfg.Sessions[0]
	case err := <-gdone:
		t.Fatalf("gateway exited: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("gateway did not start")
	}
	return "", "", api.Session{}
}

// curlOCRScript builds the binary-extension body of one PNG with printf and
// cat and posts it with curl, as docs/protocol.md shows: the JSON header, then
// the BYTES element (4-byte little-endian length, the PNG bytes).
const curlOCRScript = `set -eu
png=$1 url=$2
n=$(stat -c %s "$png")
header='{"inputs":[{"name":"image","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":'$((n + 4))'}}],"outputs":[{"name":"text"}]}'
{
  printf '%s' "$header"
  printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((n & 255)) $((n >> 8 & 255)) $((n >> 16 & 255)) $((n >> 24 & 255)))"
  cat "$png"
} > body.bin
curl -sS --fail-with-body -H "Inference-Header-Content-Length: ${#header}" --data-binary @body.bin "$url"
`

// pythonOCRClient sends a PNG file to the OCR session with a Python gRPC
// client on stubs generated from api/inference/grpc_service.proto, and prints
// each recognised line of the "text" output.
const pythonOCRClient = `
import struct, sys
import grpc
sys.path.insert(0, sys.argv[1])
import grpc_service_pb2 as pb, grpc_service_pb2_grpc as rpc

png = open(sys.argv[3], "rb").read()
channel = grpc.insecure_channel(sys.argv[2], options=[("grpc.max_receive_message_length", 256 << 20)])
stub = rpc.GRPCInferenceServiceStub(channel)
req = pb.ModelInferRequest(model_name=sys.argv[4], id="py-ocr")
req.inputs.add(name="image", datatype="BYTES", shape=[1])
req.raw_input_contents.append(struct.pack("<I", len(png)) + png)
req.outputs.add(name="text")
resp = stub.ModelInfer(req, timeout=60)
for i, out in enumerate(resp.outputs):
    if out.name != "text":
        continue
    raw, off = resp.raw_output_contents[i], 0
    while off < len(raw):
        (n,) = struct.unpack_from("<I", raw, off)
        print("text", raw[off + 4:off + 4 + n].decode("utf-8"))
        off += 4 + n
`

// TestOCRInteropClients sends one rendered PNG to the OCR session through
// the gateway with clients nobody here wrote: curl with the binary tensor data
// extension over HTTP, and a Python gRPC client; both must return the text the
// image shows.
func TestOCRInteropClients(t *testing.T) {
	curl := interopTool(t, "curl", "curl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	httpAddr, grpcAddr, sess := startOCRGateway(t, ctx)
	sample := ocrsamples.Samples()[1]
	img, err := ocrsamples.EncodePNG(sample)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pngPath := filepath.Join(dir, "sample.png")
	if err := os.WriteFile(pngPath, img, 0o644); err != nil {
		t.Fatal(err)
	}
	want := strings.Join(sample.Lines, " ")

	t.Run("curl binary extension", func(t *testing.T) {
		script := filepath.Join(dir, "ocr.sh")
		if err := os.WriteFile(script, []byte(curlOCRScript), 0o755); err != nil {
			t.Fatal(err)
		}
		url := "http://" + httpAddr + "/v2/models/" + sess.Name + "/infer"
		cmd := exec.Command("bash", script, pngPath, url)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(curl)+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		var resp struct {
			Outputs []struct {
				Name     string
				Datatype string
				Data     []string
			}
		}
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatalf("curl printed no JSON response: %v\n%s", err, out)
		}
		var got []string
		for _, o := range resp.Outputs {
			if o.Name == "text" {
				got = o.Data
			}
		}
		t.Logf("curl: %s", out)
		if strings.Join(got, " ") != want {
			t.Errorf("curl read %q, want %q", got, want)
		}
	})

	t.Run("python gRPC client", func(t *testing.T) {
		py, stubs := pythonGRPCStubs(t)
		script := filepath.Join(stubs, "ocr_client.py")
		if err := os.WriteFile(script, []byte(pythonOCRClient), 0o644); err != nil {
			t.Fatal(err)
		}
		out := runTool(t, py, script, stubs, grpcAddr, pngPath, sess.Name)
		t.Logf("python: %s", out)
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if text, ok := strings.CutPrefix(line, "text "); ok {
				got = append(got, text)
			}
		}
		if strings.Join(got, " ") != want {
			t.Errorf("python client read %q, want %q", got, want)
		}
	})
}
