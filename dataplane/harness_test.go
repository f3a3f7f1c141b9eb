package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/kserve"
	"github.com/piccolo-serving/piccolo/kserve/kservetest"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// harness is a gateway and its sim backends booted from config text on loopback.
type harness struct {
	cfg      *api.Config
	url      string
	grpc     inference.GRPCInferenceServiceClient
	runner   *LiveRunner
	backends []*grpc.Server
}

// startHarness boots n sim backends of hardware v100, then a gateway planned with
// the piccolo policy over them; everything is stopped in t.Cleanup.
func startHarness(t testing.TB, configText string, n int, policy string) *harness {
	t.Helper()
	specs := make([]harnessBackend, n)
	for i := range specs {
		specs[i].hardware = "v100"
	}
	return startHarnessWith(t, configText, policy, specs)
}

// harnessBackend is one sim backend of a harness: its hardware type and, to play
// a misbehaving backend, a wrapper around the real server.
type harnessBackend struct {
	hardware string
	wrap     func(*backends.Server) inference.GRPCInferenceServiceServer
}

// serveGRPC serves srv over gRPC on a loopback port until the test ends,
// through wrap when it is not nil (a misbehaving backend), and returns its
// address and server.
func serveGRPC(t testing.TB, srv *backends.Server, wrap func(*backends.Server) inference.GRPCInferenceServiceServer) (string, *grpc.Server) {
	t.Helper()
	var g *grpc.Server
	if wrap != nil {
		g = grpc.NewServer()
		inference.RegisterGRPCInferenceServiceServer(g, wrap(srv))
	} else {
		g = backends.NewGRPCServer(srv)
	}
	return testharness.ServeGRPC(t, g), g
}

func startHarnessWith(t testing.TB, configText, policy string, specs []harnessBackend) *harness {
	t.Helper()
	var bl strings.Builder
	bl.WriteString("backends:\n")
	base, err := api.LoadBytes(api.NamedDoc{Name: "profiles.yaml", Data: []byte(configText)})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{}
	for i, spec := range specs {
		exec, err := sim.New(spec.hardware, base.Profiles, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := backends.NewServer(exec, backends.ServerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		addr, g := serveGRPC(t, srv, spec.wrap)
		h.backends = append(h.backends, g)
		fmt.Fprintf(&bl, "  - {id: gpu-%d, address: %q, hardware: %s}\n", i, addr, spec.hardware)
	}
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "profiles.yaml", Data: []byte(configText)},
		api.NamedDoc{Name: "backends.yaml", Data: []byte(bl.String())})
	if err != nil {
		t.Fatal(err)
	}
	h.cfg = cfg
	plan, err := planner.Plan(cfg, planner.Options{Policy: "piccolo"})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	pol, _ := dispatcher.ParsePolicy(policy)
	runner, err := NewLiveRunner(context.Background(), cfg, plan, LiveOptions{Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Close() })
	h.runner = runner
	exec, err := gateway.NewDAGRunner(runner, cfg.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(runner)
	metrics, err := metrics.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := kserve.NewServer(exec, kserve.ServerOptions{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	h.url = kservetest.ServeHTTP(t, srv)
	h.grpc = kservetest.ServeGRPC(t, srv)
	return h
}

func TestIntegrationChain(t *testing.T) {
	for _, policy := range []string{"tc", "rr"} {
		t.Run(policy, func(t *testing.T) {
			h := startHarness(t, testharness.ChainProfiles, 2, policy)
			// 40 concurrent clients, each with its own input: every answer must be
			// the checksum chain of its own input (batching must not mix items).
			var wg sync.WaitGroup
			for c := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v := float32(c)
					body := fmt.Sprintf(`{"id":"c%d","inputs":[{"name":"input0","shape":[1,2],"datatype":"FP32","data":[%v,1]}]}`, c, v)
					status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/pipe/infer", body)
					if status != 200 {
						t.Errorf("client %d: status %d %v", c, status, m)
						return
					}
					want := sim.Checksum(gatewaytest.FP32(sim.Checksum(gatewaytest.FP32(v, 1))))
					out := m["outputs"].([]any)[0].(map[string]any)
					got := out["data"].([]any)[0].(float64)
					if float32(got) != want || m["id"] != fmt.Sprintf("c%d", c) {
						t.Errorf("client %d: id %v output %v, want c%d and %v (the chain of its own input)", c, m["id"], got, c, want)
					}
					p := m["parameters"].(map[string]any)
					if p["piccolo.e2e_ms"].(float64) <= 0 || p["piccolo.recognize.compute_ms"].(float64) <= 0 {
						t.Errorf("client %d: timings %v", c, p)
					}
				}()
			}
			wg.Wait()
			st := h.runner.Stats()
			if s := st["pipe/detect"]; s.Completed != 40 || s.Failed != 0 {
				t.Errorf("detect dispatcher: completed %d failed %d, want 40 and 0", s.Completed, s.Failed)
			}
			resp, err := http.Get(h.url + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			text, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, want := range []string{
				`piccolo_gateway_requests_total{code="200",protocol="http",session="pipe"} 40`,
				`piccolo_dispatcher_items_total{module="recognize",outcome="completed",session="pipe"} 40`,
				`piccolo_gateway_request_seconds_count{session="pipe"} 40`,
			} {
				if !strings.Contains(string(text), want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
		})
	}
}

func TestIntegrationGRPCAndMetadata(t *testing.T) {
	h := startHarness(t, testharness.ChainProfiles, 1, "tc")
	resp, err := h.grpc.ModelInfer(context.Background(), &inference.ModelInferRequest{
		ModelName:        "pipe",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}}},
		RawInputContents: [][]byte{gatewaytest.FP32(7)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := gatewaytest.FP32(sim.Checksum(gatewaytest.FP32(sim.Checksum(gatewaytest.FP32(7)))))
	if len(resp.RawOutputContents) != 1 || string(resp.RawOutputContents[0]) != string(want) {
		t.Errorf("gRPC output %v, want %v", resp.RawOutputContents, want)
	}
	_, m := testharness.HTTPDo(t, "GET", h.url+"/v2/models/pipe", "")
	b, _ := json.Marshal(m)
	if !strings.Contains(string(b), `"inputs":[{"datatype":"FP32","name":"input0","shape":[-1,-1]}]`) ||
		!strings.Contains(string(b), `"outputs":[{"datatype":"FP32","name":"output0"`) {
		t.Errorf("metadata %s, want the sim models' input0 and output0", b)
	}
}

// TestIntegrationBackendDown: requests to a session whose backend has gone fail
// with 503 (or 504 if the deadline comes first), promptly, and never hang.
func TestIntegrationBackendDown(t *testing.T) {
	h := startHarness(t, testharness.ChainProfiles, 1, "tc")
	h.backends[0].Stop()
	start := time.Now()
	status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/pipe/infer", `{"inputs":[{"name":"input0","shape":[1,1],"datatype":"FP32","data":[1]}]}`)
	if status != 503 && status != 504 {
		t.Errorf("status %d %v, want 503 or 504", status, m)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v to fail, want about the 1 s SLO at most", el)
	}
}

// TestIntegrationMixedShapes: requests whose inputs cannot be stacked together
// (different trailing dimensions) may land in one batch; each must still succeed.
func TestIntegrationMixedShapes(t *testing.T) {
	h := startHarness(t, testharness.ChainProfiles, 1, "tc")
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Two shapes in flight at once: they cannot be stacked together.
			width := 1 + c%2
			data := strings.TrimSuffix(strings.Repeat("1,", width), ",")
			body := fmt.Sprintf(`{"inputs":[{"name":"input0","shape":[1,%d],"datatype":"FP32","data":[%s]}]}`, width, data)
			if status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/pipe/infer", body); status != 200 {
				t.Errorf("client %d (width %d): status %d %v", c, width, status, m)
			}
		}()
	}
	wg.Wait()
}

// TestIntegrationInputChecks: a request the source module's model would refuse is
// refused by the gateway with 400 before it reaches a dispatcher.
func TestIntegrationInputChecks(t *testing.T) {
	h := startHarness(t, testharness.ChainProfiles, 1, "tc")
	for _, tc := range []struct{ body, want string }{
		{`{"inputs":[{"name":"input0","shape":[1,1],"datatype":"INT32","data":[1]}]}`, `input "input0" is INT32; module "detect" wants FP32`},
		{`{"inputs":[{"name":"input0","shape":[3],"datatype":"FP32","data":[1,2,3]}]}`, `input "input0" has shape [3]; module "detect" wants [-1 -1]`},
	} {
		status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/pipe/infer", tc.body)
		if status != 400 || !strings.Contains(fmt.Sprint(m["error"]), tc.want) {
			t.Errorf("status %d %v, want 400 with %q", status, m, tc.want)
		}
	}
	if s := h.runner.Stats()["pipe/detect"]; s.Submitted != 0 {
		t.Errorf("%d refused requests reached the dispatcher", s.Submitted)
	}
}

// badBackend is a backend whose ModelInfer hangs until the caller gives up, or
// answers outputs of the wrong size; everything else is the real server's.
type badBackend struct {
	*backends.Server
	hang bool
}

func (b badBackend) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	if b.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	resp, err := b.Server.ModelInfer(ctx, req)
	if err == nil && len(resp.RawOutputContents) > 0 {
		resp.RawOutputContents[0] = resp.RawOutputContents[0][:1] // garbage
	}
	return resp, err
}

// TestIntegrationMisbehavingBackends: a session on a backend that hangs answers
// 504 at its SLO and one on a backend that answers garbage 502, while a session on
// a healthy backend keeps answering 200 promptly.
func TestIntegrationMisbehavingBackends(t *testing.T) {
	const cfg = `
hardware:
  - {name: v100, price: 3}
  - {name: t4, price: 1}
  - {name: a10, price: 2}
profiles:
  - {model: hangs, hardware: v100, entries: [{batch: 1, concurrency: 1, duration: 20ms}]}
  - {model: lies, hardware: a10, entries: [{batch: 1, concurrency: 1, duration: 20ms}]}
  - {model: fine, hardware: t4, entries: [{batch: 1, concurrency: 1, duration: 20ms}, {batch: 4, concurrency: 1, duration: 30ms}]}
sessions:
  - {name: bad, slo: 500ms, modules: [{name: m, model: hangs, rate: 5}]}
  - {name: ugly, slo: 500ms, modules: [{name: m, model: lies, rate: 5}]}
  - {name: good, slo: 1s, modules: [{name: m, model: fine, rate: 20}]}
`
	h := startHarnessWith(t, cfg, "tc", []harnessBackend{
		{hardware: "v100", wrap: func(s *backends.Server) inference.GRPCInferenceServiceServer { return badBackend{s, true} }},
		{hardware: "a10", wrap: func(s *backends.Server) inference.GRPCInferenceServiceServer { return badBackend{s, false} }},
		{hardware: "t4"},
	})
	body := `{"inputs":[{"name":"input0","shape":[1,1],"datatype":"FP32","data":[1]}]}`
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/bad/infer", body)
			if status != 504 || !strings.Contains(fmt.Sprint(m["error"]), "deadline exceeded") {
				t.Errorf("hanging backend: %d %v, want 504", status, m)
			}
		}()
		go func() {
			defer wg.Done()
			status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/ugly/infer", body)
			if status != 502 || !strings.Contains(fmt.Sprint(m["error"]), `backend error: a backend of session "ugly"`) {
				t.Errorf("garbage backend: %d %v, want 502", status, m)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	for range 5 {
		if status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/good/infer", body); status != 200 {
			t.Errorf("healthy session while others misbehave: %d %v", status, m)
		}
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("5 requests to the healthy session took %v", el)
	}
	wg.Wait()
}
