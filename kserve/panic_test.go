package kserve

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/metrics"
)

// panicRunner is a ModuleRunner whose module "p" panics in Run, on whatever
// goroutine calls it: the request's for a source module, the runner's own
// (the parent's done) for a child.
type panicRunner struct{ *gatewaytest.FakeRunner }

func (r panicRunner) Run(ctx context.Context, session, module string, in []api.Tensor, call *gateway.Call, done func([]api.Tensor, gateway.Timing, error)) {
	if module == "p" {
		var s []int
		s[len(in)]++ // a bug: index out of range
	}
	r.FakeRunner.Run(ctx, session, module, in, call, done)
}

const panicSessions = `
sessions:
  - name: echo
    slo: 2s
    modules:
      - {name: e, model: m, rate: 10}
  - name: boom
    slo: 2s
    modules:
      - {name: p, model: m, rate: 10}
  - name: lateboom
    slo: 2s
    modules:
      - {name: a, model: m, rate: 10}
      - {name: p, model: m, rate: 10, after: [a]}
`

// TestPanicIsAnswered500AndServingGoesOn: a module runner that panics, on
// the request's goroutine or on one of its own, fails that request with 500
// (gRPC INTERNAL) naming its request id; the panic is counted in
// piccolo_gateway_panics_total, its stack logged once for the cause however
// often it recurs, and the next request is answered.
func TestPanicIsAnswered500AndServingGoesOn(t *testing.T) {
	exec, err := gateway.NewDAGRunner(panicRunner{gatewaytest.NewFakeRunner()}, gatewaytest.SessionsFromYAML(t, panicSessions))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.ErrorLevel)
	srv, err := NewServer(exec, ServerOptions{Version: "test", Metrics: m, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.ReportPanics(nil) })
	gc := inference.NewGRPCInferenceServiceClient(serveGRPC(t, srv))
	url := "http://" + serveHTTP(t, srv) + "/v2/models/"

	for _, session := range []string{"boom", "lateboom", "boom"} {
		code, _, body := post(t, url+session+"/infer", []byte(goodBody))
		if code != 500 || !strings.Contains(string(body), "request id q7") || !strings.Contains(string(body), "internal error") {
			t.Errorf("%s over HTTP: %d %s; want 500, internal error, request id q7", session, code, body)
		}
		if code, _, body := post(t, url+"echo/infer", []byte(goodBody)); code != 200 {
			t.Fatalf("the request after %s's panic: %d %s; want 200", session, code, body)
		}
	}
	req := &inference.ModelInferRequest{ModelName: "boom", Id: "g9", Inputs: []*inference.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1}, Contents: &inference.InferTensorContents{Fp32Contents: []float32{1}}}}}
	_, err = gc.ModelInfer(context.Background(), req)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "request id g9") {
		t.Errorf("boom over gRPC: %v; want INTERNAL naming request id g9", err)
	}
	req.ModelName = "echo"
	if _, err := gc.ModelInfer(context.Background(), req); err != nil {
		t.Fatalf("the gRPC request after the panic: %v", err)
	}

	if got := panicCount(t, reg); got != 4 {
		t.Errorf("%s = %v; want 4 (three over HTTP, one over gRPC)", metrics.GatewayPanicsTotal, got)
	}
	stacks := 0
	for _, e := range logs.FilterMessage("panic recovered").All() {
		if !strings.Contains(e.ContextMap()["cause"].(string), "index out of range") {
			t.Errorf("logged cause %q; want the panic's value", e.ContextMap()["cause"])
		}
		stacks++
	}
	if stacks != 1 {
		t.Errorf("%d stacks logged for one cause recovered 4 times; want 1", stacks)
	}
	if n := logs.FilterMessage("panic recovered (stack logged at its first occurrence)").Len(); n != 3 {
		t.Errorf("%d later occurrences logged; want 3", n)
	}
}

func panicCount(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == metrics.GatewayPanicsTotal {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestInternalMessageWithoutSession: a panic caught before the route was read
// (the recover wrappers pass no session) is told without an empty session
// name.
func TestInternalMessageWithoutSession(t *testing.T) {
	s := &Server{}
	err := fmt.Errorf("%w: panic recovered in http: boom", gateway.ErrInternal)
	if got := s.publicMessage(err, ""); strings.Contains(got, `session ""`) || !strings.HasPrefix(got, "internal error") {
		t.Errorf("publicMessage(ErrInternal, \"\") = %q; want an internal error naming no empty session", got)
	}
	if got := s.publicMessage(err, "echo"); !strings.Contains(got, `session "echo"`) {
		t.Errorf("publicMessage(ErrInternal, echo) = %q; want it to name session \"echo\"", got)
	}
}
