package gateway_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// fanOutRecorder is a FakeRunner that is told of fan-outs
// (gateway.FanOutObserver).
type fanOutRecorder struct {
	*gatewaytest.FakeRunner
	mu  sync.Mutex
	got []string
}

func (r *fanOutRecorder) FannedOut(session, module string, items int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, session+"/"+module+":"+strconv.Itoa(items))
}

// A runner that observes fan-outs is told the items of each, zero included,
// once a parent item; a module with a fanout distribution fans out though
// its rate is below its parent's (a mean of half an object an image), where
// without one it would get the parent's rows as one item.
func TestDAGRunnerTellsFanOuts(t *testing.T) {
	f := &fanOutRecorder{FakeRunner: gatewaytest.NewFakeRunner()}
	rows := 3
	f.Fn["detect"] = func(in []api.Tensor) ([]api.Tensor, error) {
		data := make([]float32, rows)
		return []api.Tensor{{Name: "boxes", Datatype: "FP32", Shape: []int64{int64(rows), 1}, Data: gatewaytest.FP32(data...)}}, nil
	}
	f.Fn["recognize"] = func(in []api.Tensor) ([]api.Tensor, error) {
		return []api.Tensor{{Name: "text", Datatype: "FP32", Shape: []int64{in[0].Shape[0], 1}, Data: make([]byte, 4*in[0].Shape[0])}}, nil
	}
	sessions := gatewaytest.SessionsFromYAML(t, `
sessions:
  - name: few
    slo: 2s
    modules:
      - {name: detect, model: m, rate: 10}
      - {name: recognize, model: m, rate: 5, after: [detect], fanout: {0: 1, 1: 1}}
`)
	e, err := gateway.NewDAGRunner(f, sessions)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3, 0, 1} {
		rows = n
		var resp gateway.InferResponse
		if err := e.Infer(context.Background(), "few", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &resp); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"few/recognize:3", "few/recognize:0", "few/recognize:1"}; !cmp.Equal(want, f.got) {
		t.Errorf("fan-outs told %v; want %v", f.got, want)
	}
	if got := f.CallsOf("recognize"); got != 4 {
		t.Errorf("recognize ran %d items; want 4, one per row (3 + 0 + 1)", got)
	}
}
