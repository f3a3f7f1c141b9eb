package gateway_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// TestDAGRunnerFanOutChain: modules after a fan-out with the same rate keep
// getting one item per element (OCR: boxes → cls → rotate → rec, all per box);
// a lower rate joins.
func TestDAGRunnerFanOutChain(t *testing.T) {
	const sessions = `
sessions:
  - name: chain
    slo: 2s
    modules:
      - {name: boxes, model: m, rate: 2}
      - {name: cls, model: m, rate: 6, after: [boxes]}
      - {name: rotate, model: m, rate: 6, after: [cls]}
      - {name: rec, model: m, rate: 6, after: [rotate]}
      - {name: summary, model: m, rate: 2, after: [rec]}
`
	f := gatewaytest.NewFakeRunner()
	f.Fn["boxes"] = func([]api.Tensor) ([]api.Tensor, error) {
		return []api.Tensor{{Name: "v", Datatype: "FP32", Shape: []int64{3, 1}, Data: gatewaytest.FP32(1, 2, 3)}}, nil
	}
	var mu sync.Mutex
	rows := map[string][]int64{}
	step := func(name string, add float32) func([]api.Tensor) ([]api.Tensor, error) {
		return func(in []api.Tensor) ([]api.Tensor, error) {
			mu.Lock()
			rows[name] = append(rows[name], in[0].Shape[0])
			mu.Unlock()
			vs := gatewaytest.F32s(in[0])
			for i := range vs {
				vs[i] += add
			}
			return []api.Tensor{{Name: "v", Datatype: "FP32", Shape: in[0].Shape, Data: gatewaytest.FP32(vs...)}}, nil
		}
	}
	f.Fn["cls"], f.Fn["rotate"], f.Fn["rec"], f.Fn["summary"] = step("cls", 10), step("rotate", 100), step("rec", 1000), step("summary", 0)
	e, err := gateway.NewDAGRunner(f, gatewaytest.SessionsFromYAML(t, sessions))
	if err != nil {
		t.Fatal(err)
	}
	var resp gateway.InferResponse
	if err := e.Infer(context.Background(), "chain", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &resp); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{"cls": {1, 1, 1}, "rotate": {1, 1, 1}, "rec": {1, 1, 1}, "summary": {3}}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("rows per call (-want +got):\n%s", diff)
	}
	if len(resp.Outputs) != 1 {
		t.Fatalf("outputs %s, want v", gatewaytest.OutputNames(resp.Outputs))
	}
	if diff := cmp.Diff([]float32{1111, 1112, 1113}, gatewaytest.F32s(resp.Outputs[0])); diff != "" {
		t.Errorf("joined in wrong order (-want +got):\n%s", diff)
	}
}
