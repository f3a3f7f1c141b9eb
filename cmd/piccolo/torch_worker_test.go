package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/internal/consultest"
)

// The PyTorch worker (workers/torch, docs/gpu.md) on the CPU: MobileNetV3
// small at a 64×64 input, one torch thread, so that a batch takes tens of ms
// on the loaded 2-core machine.
const (
	torchModel     = "mobilenet_v3_small"
	torchImageSize = 64
)

// torchWorker is a running workers/torch/worker.py.
type torchWorker struct {
	addr      string // gRPC host:port
	metrics   string // its /metrics URL
	cmd       *exec.Cmd
	stderr    *lockedWriter // over stderrBuf
	stderrBuf *bytes.Buffer
}

// stderrText returns what the worker wrote to stderr so far.
func (w *torchWorker) stderrText() string {
	w.stderr.mu.Lock()
	defer w.stderr.mu.Unlock()
	return w.stderrBuf.String()
}

// torchPython returns Debian's python3 once it imports torch, torchvision and
// grpc; otherwise the test skips with the reason scripts/tools.sh wrote
// (python-torch.unavailable), or fails under PICCOLO_REQUIRE_TOOLS.
func torchPython(t *testing.T) string {
	t.Helper()
	py := interopTool(t, "python-torch", "/usr/bin/python3")
	if out, err := exec.Command(py, "-c", "import torch, torchvision, grpc").CombinedOutput(); err != nil {
		if why, _ := os.ReadFile(filepath.Join(modelCache(), "tools", "python-torch.unavailable")); len(why) > 0 {
			t.Skipf("skipped: python-torch is unavailable: %s", strings.TrimSpace(string(why)))
		}
		if os.Getenv("PICCOLO_REQUIRE_TOOLS") != "" {
			t.Fatalf("PICCOLO_REQUIRE_TOOLS is set but %s cannot import torch, torchvision, grpc (%v: %s); run `make tools`", py, err, out)
		}
		t.Skipf("skipped: %s cannot import torch, torchvision and grpc; run `make tools`", py)
	}
	return py
}

// startTorchWorker runs the worker on loopback on the CPU with extra flags
// until the test ends (then SIGTERM, and its stderr logged if the test
// failed), and returns once it prints its serving line.
func startTorchWorker(t *testing.T, extra ...string) *torchWorker {
	t.Helper()
	py := torchPython(t)
	script, err := filepath.Abs("../../workers/torch/worker.py")
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{script, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--device", "cpu",
		"--threads", "1", "--image-size", fmt.Sprint(torchImageSize)}, extra...)
	w := &torchWorker{cmd: exec.Command(py, args...), stderrBuf: &bytes.Buffer{}}
	w.stderr = &lockedWriter{w: w.stderrBuf}
	w.cmd.Stderr = w.stderr
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed once the process is waited for
	var waitErr error
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "serving on ") {
				lines <- sc.Text()
			}
		}
		waitErr = w.cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Signal(syscall.SIGTERM) // an error: it has exited already
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = w.cmd.Process.Kill()
			t.Errorf("the torch worker did not stop within 20 s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("torch worker stderr:\n%s", w.stderrText())
		}
	})
	select {
	case line := <-lines:
		// "... serving on ADDR, metrics URL"
		f := strings.Fields(line[strings.Index(line, "serving on "):])
		w.addr, w.metrics = strings.TrimSuffix(f[2], ","), strings.TrimSuffix(f[4], "/metrics")
	case <-exited:
		t.Fatalf("torch worker exited: %v\n%s", waitErr, w.stderrText())
	case <-time.After(60 * time.Second):
		t.Fatalf("torch worker did not serve within 60 s\n%s", w.stderrText())
	}
	return w
}

// zeroImages returns n FP32 rows of 3×torchImageSize² zeros as one tensor.
func zeroImages(n int) api.Tensor {
	s := int64(torchImageSize)
	return api.Tensor{Name: "input", Datatype: "FP32", Shape: []int64{int64(n), 3, s, s}, Data: make([]byte, n*3*int(s*s)*4)}
}

// TestTorchWorkerProtocol calls the worker as a gateway does, with
// backends.Client: health, load with batch and concurrency, metadata, one
// stacked batch split back per item, and the errors the gateway maps (unknown
// model, model not loaded, a batch over the loaded max batch).
func TestTorchWorkerProtocol(t *testing.T) {
	w := startTorchWorker(t, "--hardware", "cpu-torch")
	c, err := backends.NewClient(w.addr, backends.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	conn, err := grpc.NewClient(w.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, svc := range []string{"", backends.HealthService} {
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Health/Check %q = %v, %v; want SERVING", svc, h.GetStatus(), err)
		}
	}
	if live, err := c.Live(ctx); err != nil || !live {
		t.Fatalf("Live = %v, %v; want true", live, err)
	}
	if _, err := c.Infer(ctx, torchModel, [][]api.Tensor{{zeroImages(1)}}); !errors.Is(err, backends.ErrModelNotLoaded) {
		t.Errorf("Infer before the load: %v; want ErrModelNotLoaded", err)
	}
	if err := c.Load(ctx, "alexnet", 4, 1); !errors.Is(err, backends.ErrUnknownModel) {
		t.Errorf("Load of a model the worker does not have: %v; want ErrUnknownModel", err)
	}
	if err := c.Load(ctx, torchModel, 4, 2); err != nil {
		t.Fatal(err)
	}
	if ready, err := c.Ready(ctx, torchModel); err != nil || !ready {
		t.Fatalf("Ready after the load = %v, %v; want true", ready, err)
	}
	info, err := c.Metadata(ctx, torchModel)
	if err != nil {
		t.Fatal(err)
	}
	wantIn := fmt.Sprint([]int64{-1, 3, torchImageSize, torchImageSize})
	if len(info.Inputs) != 1 || info.Inputs[0].Name != "input" || info.Inputs[0].Datatype != "FP32" || fmt.Sprint(info.Inputs[0].Shape) != wantIn ||
		len(info.Outputs) != 1 || info.Outputs[0].Name != "logits" {
		t.Errorf("metadata %+v; want input FP32 %s and output logits", info, wantIn)
	}

	// Two items of 1 and 2 rows: one batch of 3, split back 1 and 2.
	out, tm, err := c.InferTimed(ctx, torchModel, [][]api.Tensor{{zeroImages(1)}, {zeroImages(2)}})
	if err != nil {
		t.Fatal(err)
	}
	if !tm.Reported() || tm.Queue < 0 {
		t.Errorf("timing %+v; want the batch's queue and compute time reported, as a piccolo backend does", tm)
	}
	for i, rows := range []int64{1, 2} {
		o := out[i][0]
		if o.Name != "logits" || o.Datatype != "FP32" || fmt.Sprint(o.Shape) != fmt.Sprint([]int64{rows, 1000}) || len(o.Data) != int(rows)*4000 {
			t.Errorf("item %d: output %s %s %v, %d bytes; want logits FP32 [%d 1000]", i, o.Name, o.Datatype, o.Shape, len(o.Data), rows)
		}
		for r := 0; r < len(o.Data); r += 4 {
			if v := math.Float32frombits(binary.LittleEndian.Uint32(o.Data[r:])); math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("item %d: logit %d is %v", i, r/4, v)
			}
		}
	}
	if _, err := c.Infer(ctx, torchModel, [][]api.Tensor{{zeroImages(5)}}); !errors.Is(err, backends.ErrInvalidInput) || !strings.Contains(err.Error(), "max batch 4") {
		t.Errorf("a batch of 5 on max batch 4: %v; want ErrInvalidInput naming the max batch", err)
	}
	bad := zeroImages(1)
	bad.Shape[2] = 32
	bad.Data = bad.Data[:len(bad.Data)/2]
	if _, err := c.Infer(ctx, torchModel, [][]api.Tensor{{bad}}); !errors.Is(err, backends.ErrInvalidInput) || !strings.Contains(err.Error(), `input 'input': shape [1, 3, 32, 64]`) {
		t.Errorf("an image of the wrong size: %v; want ErrInvalidInput naming the shape", err)
	}
	if got := scrape(t, w.metrics, "piccolo_backend_model_concurrency", `model="`+torchModel+`"`); got != 2 {
		t.Errorf("piccolo_backend_model_concurrency = %v; want the loaded 2", got)
	}
	if err := c.Unload(ctx, torchModel); err != nil {
		t.Fatal(err)
	}
	if ready, err := c.Ready(ctx, torchModel); err != nil || ready {
		t.Errorf("Ready after the unload = %v, %v; want false", ready, err)
	}
}

// torchSessionConfig is a session of one module on the worker's model, with a
// profile measured on the loaded development machine and rounded up (about
// 2-3× the p90 of `piccolo profile`, so that the plan holds under load),
// and the worker as its one static backend (%q: its address).
const torchSessionConfig = `
hardware:
  - {name: cpu-torch, price: 1}
profiles:
  - model: mobilenet_v3_small
    hardware: cpu-torch
    entries:
      - {batch: 1, concurrency: 1, duration: 60ms}
      - {batch: 2, concurrency: 1, duration: 80ms}
      - {batch: 4, concurrency: 1, duration: 120ms}
      - {batch: 8, concurrency: 1, duration: 200ms}
sessions:
  - name: classify
    slo: 3s
    modules:
      - {name: net, model: mobilenet_v3_small, rate: 30}
backends:
  - {id: torch-0, address: %q, hardware: cpu-torch}
`

// TestTorchWorkerThroughGateway serves a torchvision model through a real
// `piccolo gateway`: the session's plan (batch 8 at 30 req/s) is loaded on the
// worker, one request over HTTP answers logits FP32 [1, 1000], then a burst
// of concurrent requests is batched by the gateway, and the worker ran exactly
// the batches the gateway sent (its batch and item counts equal the gateway's
// piccolo_gateway_batch_size count and sum), several of them larger than one.
func TestTorchWorkerThroughGateway(t *testing.T) {
	// --default-batch 2: the max batch 8 below can only come from the gateway's load.
	w := startTorchWorker(t, "--hardware", "cpu-torch", "--default-batch", "2")
	cfgPath := filepath.Join(t.TempDir(), "piccolo.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, torchSessionConfig, w.addr), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, _ := startGateway(t, ctx, &gatewayOptions{files: []string{cfgPath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", dispatch: "tc", maxBody: 4 << 20, slack: 0.1, logFmt: "json", drain: time.Second})

	if got := scrape(t, w.metrics, "piccolo_backend_model_max_batch", `model="`+torchModel+`"`); got != 8 {
		t.Fatalf("the worker's loaded max batch is %v; want the plan's batch 8", got)
	}
	zeros := make([]string, 3*torchImageSize*torchImageSize)
	for i := range zeros {
		zeros[i] = "0"
	}
	body := fmt.Sprintf(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,%d,%d],"data":[%s]}]}`,
		torchImageSize, torchImageSize, strings.Join(zeros, ","))
	client := &http.Client{Timeout: 30 * time.Second}
	infer := func() (int, []byte, error) {
		resp, err := client.Post(url+"/v2/models/classify/infer", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, err = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes(), err
	}

	status, b, err := infer()
	if err != nil || status != http.StatusOK {
		t.Fatalf("POST /v2/models/classify/infer: %d %v: %s", status, err, b)
	}
	var reply struct {
		Outputs []struct {
			Name     string    `json:"name"`
			Datatype string    `json:"datatype"`
			Shape    []int64   `json:"shape"`
			Data     []float64 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(b, &reply); err != nil {
		t.Fatalf("reply %s: %v", b, err)
	}
	if len(reply.Outputs) != 1 || reply.Outputs[0].Name != "logits" || reply.Outputs[0].Datatype != "FP32" ||
		fmt.Sprint(reply.Outputs[0].Shape) != "[1 1000]" || len(reply.Outputs[0].Data) != 1000 {
		t.Fatalf("reply outputs %+.60v; want logits FP32 [1 1000] with 1000 values", reply.Outputs)
	}

	const burst = 24
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, b, err := infer(); err != nil || status != http.StatusOK {
				errs <- fmt.Errorf("%d %v: %.200s", status, err, b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("burst request: %v", err)
	}

	labels := []string{`session="classify"`, `module="net"`}
	sent := scrape(t, url, "piccolo_gateway_batch_size_count", labels...)
	sentItems := scrape(t, url, "piccolo_gateway_batch_size_sum", labels...)
	ran := scrape(t, w.metrics, "piccolo_backend_batches_total", `model="`+torchModel+`"`)
	ranItems := scrape(t, w.metrics, "piccolo_backend_items_total", `model="`+torchModel+`"`)
	t.Logf("gateway sent %v batches of %v items; the worker ran %v batches of %v items", sent, sentItems, ran, ranItems)
	if ran != sent || ranItems != sentItems {
		t.Errorf("the worker ran %v batches of %v items; the gateway sent %v of %v", ran, ranItems, sent, sentItems)
	}
	if ranItems != burst+1 {
		t.Errorf("the worker ran %v items; want the %d requests sent", ranItems, burst+1)
	}
	if ran >= ranItems {
		t.Errorf("%v batches for %v items: the gateway batched nothing", ran, ranItems)
	}
}

// TestTorchWorkerRegistersWithConsul: with --consul the worker registers as
// `piccolo backend --consul` does, so a gateway's membership watcher sees it
// join with its hardware, price and models, and leave on SIGTERM.
func TestTorchWorkerRegistersWithConsul(t *testing.T) {
	torchPython(t)
	agent := consultest.Start(t)
	waitSnap := watchMembers(t, agent.Addr(), 30*time.Second)

	w := startTorchWorker(t, "--hardware", "cpu-torch", "--consul", agent.Addr(), "--id", "torch-7", "--price", "0.5")
	s := waitSnap("torch-7", func(s membership.Snapshot) bool { _, ok := s.Member("torch-7"); return ok })
	m, _ := s.Member("torch-7")
	if m.Address != w.addr || m.Hardware != "cpu-torch" || m.Price != 0.5 || !m.CanRun(torchModel) || !m.CanRun("resnet50") {
		t.Errorf("member %+v; want address %s, hardware cpu-torch, price 0.5, models with %s and resnet50", m, w.addr, torchModel)
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitSnap("torch-7 gone", func(s membership.Snapshot) bool { _, ok := s.Member("torch-7"); return !ok })
}

// TestGPUCheckScriptOnCPU runs scripts/gpu-check.sh end to end on the CPU, as
// on the GPU machine but with one small model, two batch sizes and seconds
// instead of minutes: the stripped binary it is given profiles the worker
// (the model with FP32 zeros, the chain preprocess+model with a JPEG), plans
// and serves the chain with JPEG requests; the folder holds the merged profile
// (a config the planner loads, also as configs/gpu/<hardware>.yaml), the
// plan, the loadgen report and the summary with the published-figures table.
func TestGPUCheckScriptOnCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary and runs the script for about 30 s")
	}
	py := torchPython(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "piccolo")
	if out, err := exec.Command("go", "build", "-ldflags=-s -w", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "../../scripts/gpu-check.sh", bin, "../../workers/torch")
	cmd.Env = append(os.Environ(), "OUT="+out, "PYTHON="+py, "GPU_CHECK_DEVICE=cpu", "GPU_CHECK_MODELS="+torchModel,
		"GPU_CHECK_BATCHES=1,2", "GPU_CHECK_CONCURRENCY=1", "GPU_CHECK_PROFILE_DURATION=500ms",
		fmt.Sprintf("GPU_CHECK_IMAGE_SIZE=%d", torchImageSize), "GPU_CHECK_SERVE=3s", "GPU_CHECK_THREADS=1", "GPU_CHECK_HARDWARE=cpu-torch",
		"GPU_CHECK_JPEG_SIZE=80x60", "GPU_CHECK_SLO_MS=2000") // a loose SLO: this checks the plumbing; the machine is loaded
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpu-check.sh: %v\n%s", err, log)
	}
	cfg, err := api.Load(filepath.Join(out, "profiles.yaml"), filepath.Join(out, "session.yaml"))
	if err != nil {
		t.Fatalf("the script's profile and session: %v\n%s", err, log)
	}
	for _, m := range []string{torchModel, "preprocess+" + torchModel} {
		if ps := cfg.ProfilesOf(m); len(ps) != 1 || ps[0].Hardware != "cpu-torch" || len(ps[0].Entries) != 2 {
			t.Errorf("profiles.yaml: profiles of %s = %+v; want one on cpu-torch with 2 entries (batches 1, 2)", m, ps)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "configs", "gpu", "cpu-torch.yaml")); err != nil {
		t.Errorf("the profile to commit: %v", err)
	}
	var rep struct {
		Sent, OK int64
	}
	b, err := os.ReadFile(filepath.Join(out, "loadgen.json"))
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil || rep.Sent == 0 || rep.OK == 0 {
		t.Errorf("loadgen.json: %+v, %v; want requests sent and answered\n%s", rep, err, log)
	}
	summary, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### " + torchModel, "### preprocess+" + torchModel, "No piccolo_gpu_* series", "attainment",
		"While serving, the worker ran", "items of preprocess+" + torchModel, "Against published figures", "SM activity"} {
		if !strings.Contains(string(summary), want) {
			t.Errorf("summary.md lacks %q:\n%s", want, summary)
		}
	}
	t.Logf("summary.md:\n%s", summary)
}
