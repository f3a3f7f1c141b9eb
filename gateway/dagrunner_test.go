package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

const testSessions = `
sessions:
  - name: chain
    slo: 2s
    modules:
      - {name: a, model: m, rate: 10}
      - {name: b, model: m, rate: 10, after: [a]}
  - name: diamond
    slo: 2s
    modules:
      - {name: a, model: m, rate: 10}
      - {name: left, model: m, rate: 10, after: [a]}
      - {name: right, model: m, rate: 10, after: [a]}
      - {name: join, model: m, rate: 10, after: [left, right]}
  - name: branchy
    slo: 2s
    modules:
      - {name: router, model: m, rate: 10}
      - {name: cat, model: m, rate: 5, after: [router]}
      - {name: dog, model: m, rate: 5, after: [router]}
      - {name: merge, model: m, rate: 10, after: [cat, dog]}
  - name: fan
    slo: 2s
    modules:
      - {name: detect, model: m, rate: 10}
      - {name: recognize, model: m, rate: 40, after: [detect]}
      - {name: summarize, model: m, rate: 10, after: [recognize]}
`

func newTestDAGRunner(t *testing.T, f *gatewaytest.FakeRunner) *gateway.DAGRunner {
	t.Helper()
	e, err := gateway.NewDAGRunner(f, gatewaytest.SessionsFromYAML(t, testSessions))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestDAGRunnerSequential(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			f := gatewaytest.NewFakeRunner()
			f.Sync = sync
			f.Fn["a"] = gatewaytest.AddConst("ya", 1)
			f.Fn["b"] = gatewaytest.AddConst("yb", 10)
			e := newTestDAGRunner(t, f)
			var resp gateway.InferResponse
			req := gateway.InferRequest{ID: "r1", Inputs: gatewaytest.Input(1, 2)}
			if err := e.Infer(context.Background(), "chain", &req, &resp); err != nil {
				t.Fatal(err)
			}
			if resp.ModelName != "chain" || resp.ID != "r1" {
				t.Errorf("model_name %q id %q, want chain r1", resp.ModelName, resp.ID)
			}
			if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "yb" {
				t.Fatalf("outputs %s, want yb", gatewaytest.OutputNames(resp.Outputs))
			}
			if diff := cmp.Diff([]float32{12, 13}, gatewaytest.F32s(resp.Outputs[0])); diff != "" {
				t.Errorf("yb (-want +got):\n%s", diff)
			}
			p := gatewaytest.ParamMap(resp.Parameters)
			for _, k := range []string{"piccolo.a.queue_ms", "piccolo.a.compute_ms", "piccolo.a.total_ms", "piccolo.b.total_ms", "piccolo.e2e_ms"} {
				if _, ok := p[k]; !ok {
					t.Errorf("response parameter %q missing; have %v", k, p)
				}
			}
			if p["piccolo.a.queue_ms"] != 1 || p["piccolo.a.compute_ms"] != 2 {
				t.Errorf("queue/compute ms = %v/%v, want the runner's 1/2", p["piccolo.a.queue_ms"], p["piccolo.a.compute_ms"])
			}
			if p["piccolo.e2e_ms"] < p["piccolo.b.total_ms"] {
				t.Errorf("e2e %v ms < module b's total %v ms", p["piccolo.e2e_ms"], p["piccolo.b.total_ms"])
			}
		})
	}
}

func TestDAGRunnerParallelJoin(t *testing.T) {
	f := gatewaytest.NewFakeRunner()
	f.Fn["a"] = gatewaytest.AddConst("y", 1)
	f.Fn["left"] = gatewaytest.AddConst("y", 10)
	f.Fn["right"] = gatewaytest.AddConst("y", 100)
	var joinIn []api.Tensor
	f.Fn["join"] = func(in []api.Tensor) ([]api.Tensor, error) { joinIn = in; return in, nil }
	f.Delay["left"] = 300 * time.Millisecond
	f.Delay["right"] = 300 * time.Millisecond
	e := newTestDAGRunner(t, f)
	var resp gateway.InferResponse
	start := time.Now()
	if err := e.Infer(context.Background(), "diamond", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &resp); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	if elapsed > 550*time.Millisecond {
		t.Errorf("left and right (300 ms each) took %v in all: they did not run concurrently", elapsed)
	}
	if got := gatewaytest.OutputNames(joinIn); got != "y,right.y" {
		t.Fatalf("join's inputs %s, want y (from left) and right.y", got)
	}
	if gatewaytest.F32s(joinIn[0])[0] != 11 || gatewaytest.F32s(joinIn[1])[0] != 101 {
		t.Errorf("join's inputs %v %v, want 11 and 101", gatewaytest.F32s(joinIn[0]), gatewaytest.F32s(joinIn[1]))
	}
	if f.CallsOf("join") != 1 {
		t.Errorf("join ran %d times, want once", f.CallsOf("join"))
	}
}

func TestDAGRunnerBranch(t *testing.T) {
	tests := []struct {
		name    string
		branch  api.Tensor
		wantRan []string
		wantErr string
	}{
		{"index 0", api.Tensor{Name: "branch", Datatype: "INT64", Shape: []int64{1}, Data: gatewaytest.I64(0)}, []string{"cat"}, ""},
		{"index 1 as INT32", api.Tensor{Name: "branch", Datatype: "INT32", Shape: []int64{1}, Data: gatewaytest.LE32(1)}, []string{"dog"}, ""},
		{"by name", api.Tensor{Name: "branch", Datatype: "BYTES", Shape: []int64{1}, Data: gatewaytest.BytesElems("dog")}, []string{"dog"}, ""},
		{"both", api.Tensor{Name: "branch", Datatype: "INT64", Shape: []int64{2}, Data: gatewaytest.I64(0, 1)}, []string{"cat", "dog"}, ""},
		{"out of range", api.Tensor{Name: "branch", Datatype: "INT64", Shape: []int64{1}, Data: gatewaytest.I64(2)}, nil, `module "router": output "branch" chose child 2; its children are 0=cat, 1=dog`},
		{"unknown name", api.Tensor{Name: "branch", Datatype: "BYTES", Shape: []int64{1}, Data: gatewaytest.BytesElems("cow")}, nil, `chose "cow", which is not a child`},
		{"bad datatype", api.Tensor{Name: "branch", Datatype: "FP32", Shape: []int64{1}, Data: gatewaytest.FP32(0)}, nil, `want INT32, INT64`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := gatewaytest.NewFakeRunner()
			var routerOut []api.Tensor
			f.Fn["router"] = func(in []api.Tensor) ([]api.Tensor, error) {
				routerOut = append(in, tc.branch)
				return routerOut, nil
			}
			var mergeIn []api.Tensor
			f.Fn["merge"] = func(in []api.Tensor) ([]api.Tensor, error) { mergeIn = in; return in, nil }
			e := newTestDAGRunner(t, f)
			var resp gateway.InferResponse
			err := e.Infer(context.Background(), "branchy", &gateway.InferRequest{Inputs: gatewaytest.Input(5)}, &resp)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, gateway.ErrBackend) {
					t.Fatalf("got error %v, want ErrBackend containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ran []string
			for _, m := range []string{"cat", "dog"} {
				if f.CallsOf(m) > 0 {
					ran = append(ran, m)
				}
			}
			if diff := cmp.Diff(tc.wantRan, ran); diff != "" {
				t.Errorf("children that ran (-want +got):\n%s", diff)
			}
			if f.CallsOf("merge") != 1 {
				t.Fatalf("merge ran %d times, want once", f.CallsOf("merge"))
			}
			for _, in := range mergeIn {
				if in.Name == gateway.BranchOutput || strings.HasSuffix(in.Name, "."+gateway.BranchOutput) {
					t.Errorf("the branch tensor reached merge: %s", gatewaytest.OutputNames(mergeIn))
				}
			}
			if len(mergeIn) != len(tc.wantRan) {
				t.Errorf("merge got %d inputs (%s), want one per branch that ran", len(mergeIn), gatewaytest.OutputNames(mergeIn))
			}
			p := gatewaytest.ParamMap(resp.Parameters)
			for _, m := range []string{"cat", "dog"} {
				_, has := p["piccolo."+m+".total_ms"]
				if has != (f.CallsOf(m) > 0) {
					t.Errorf("parameter piccolo.%s.total_ms present=%v, want it only for modules that ran", m, has)
				}
			}
		})
	}
}

func TestDAGRunnerFanOut(t *testing.T) {
	f := gatewaytest.NewFakeRunner()
	// detect finds 5 "boxes": a [5,2] tensor.
	f.Fn["detect"] = func(in []api.Tensor) ([]api.Tensor, error) {
		return []api.Tensor{
			{Name: "boxes", Datatype: "FP32", Shape: []int64{5, 2}, Data: gatewaytest.FP32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4)},
			{Name: "labels", Datatype: "BYTES", Shape: []int64{5}, Data: gatewaytest.BytesElems("a", "bb", "", "dddd", "e")},
		}, nil
	}
	var items [][]api.Tensor
	var mu = make(chan struct{}, 1)
	// recognize answers item i only once item i+1 has answered (the fake
	// runs each on its own goroutine), so items finish in reverse order;
	// the join must restore request order.
	var answered [5]chan struct{}
	for i := range answered {
		answered[i] = make(chan struct{})
	}
	f.Fn["recognize"] = func(in []api.Tensor) ([]api.Tensor, error) {
		v := gatewaytest.F32s(in[0])[0]
		if i := int(v); i < len(answered)-1 {
			<-answered[i+1]
		}
		mu <- struct{}{}
		items = append(items, in)
		<-mu
		if i := int(v); i >= 0 && i < len(answered) {
			defer close(answered[i])
		}
		return []api.Tensor{{Name: "text", Datatype: "FP32", Shape: []int64{1, 1}, Data: gatewaytest.FP32(v * 10)}}, nil
	}
	e := newTestDAGRunner(t, f)
	var resp gateway.InferResponse
	if err := e.Infer(context.Background(), "fan", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &resp); err != nil {
		t.Fatal(err)
	}
	if f.CallsOf("recognize") != 5 {
		t.Fatalf("recognize ran %d times, want 5 (one per box)", f.CallsOf("recognize"))
	}
	for _, it := range items {
		if it[0].Shape[0] != 1 || it[1].Shape[0] != 1 || len(it[0].Data) != 8 {
			t.Errorf("item shapes %v %v, want [1 2] and [1]", it[0].Shape, it[1].Shape)
		}
	}
	if len(resp.Outputs) != 1 {
		t.Fatalf("outputs %s, want text", gatewaytest.OutputNames(resp.Outputs))
	}
	out := resp.Outputs[0]
	if diff := cmp.Diff([]int64{5, 1}, out.Shape); diff != "" {
		t.Errorf("joined shape (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float32{0, 10, 20, 30, 40}, gatewaytest.F32s(out)); diff != "" {
		t.Errorf("joined in wrong order (-want +got):\n%s", diff)
	}
	if f.CallsOf("summarize") != 1 {
		t.Errorf("summarize ran %d times, want once after the join", f.CallsOf("summarize"))
	}

	t.Run("no elements skips", func(t *testing.T) {
		f.Fn["detect"] = func(in []api.Tensor) ([]api.Tensor, error) {
			return []api.Tensor{{Name: "boxes", Datatype: "FP32", Shape: []int64{0, 2}, Data: nil}}, nil
		}
		before := f.CallsOf("recognize")
		var resp gateway.InferResponse
		if err := e.Infer(context.Background(), "fan", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &resp); err != nil {
			t.Fatal(err)
		}
		if f.CallsOf("recognize") != before || len(resp.Outputs) != 0 {
			t.Errorf("with no boxes: recognize ran %d more times, outputs %s; want none", f.CallsOf("recognize")-before, gatewaytest.OutputNames(resp.Outputs))
		}
	})
	t.Run("disagreeing dim 0", func(t *testing.T) {
		f.Fn["detect"] = func(in []api.Tensor) ([]api.Tensor, error) {
			return []api.Tensor{
				{Name: "boxes", Datatype: "FP32", Shape: []int64{2, 1}, Data: gatewaytest.FP32(1, 2)},
				{Name: "scores", Datatype: "FP32", Shape: []int64{3}, Data: gatewaytest.FP32(1, 2, 3)},
			}, nil
		}
		err := e.Infer(context.Background(), "fan", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &gateway.InferResponse{})
		if !errors.Is(err, gateway.ErrBackend) || !strings.Contains(err.Error(), `tensor "scores" has 3 rows, tensor "boxes" has 2`) {
			t.Errorf("got %v, want ErrBackend naming the disagreeing outputs", err)
		}
	})
}

func TestDAGRunnerErrors(t *testing.T) {
	t.Run("one failing branch fails the request once", func(t *testing.T) {
		f := gatewaytest.NewFakeRunner()
		f.Fn["left"] = func([]api.Tensor) ([]api.Tensor, error) {
			return nil, fmt.Errorf("%w: gpu-3 refused", gateway.ErrUnavailable)
		}
		f.Fn["right"] = func([]api.Tensor) ([]api.Tensor, error) {
			return nil, fmt.Errorf("%w: gpu-4 refused", gateway.ErrUnavailable)
		}
		e := newTestDAGRunner(t, f)
		err := e.Infer(context.Background(), "diamond", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &gateway.InferResponse{})
		if !errors.Is(err, gateway.ErrUnavailable) || !strings.Contains(err.Error(), `module "`) || strings.Count(err.Error(), "refused") != 1 {
			t.Errorf("got %v, want one ErrUnavailable naming the module", err)
		}
		// Every module the request started has returned (the join would be
		// started by the last parent, before that parent's goroutine ends).
		for deadline := time.Now().Add(10 * time.Second); f.Inflight.Load() != 0 && time.Now().Before(deadline); {
			runtime.Gosched()
		}
		if f.CallsOf("join") != 0 {
			t.Errorf("join ran after its parent failed")
		}
	})
	t.Run("garbage output", func(t *testing.T) {
		f := gatewaytest.NewFakeRunner()
		f.Fn["a"] = func([]api.Tensor) ([]api.Tensor, error) {
			return []api.Tensor{{Name: "y", Datatype: "FP32", Shape: []int64{3}, Data: []byte{1, 2}}}, nil
		}
		e := newTestDAGRunner(t, f)
		err := e.Infer(context.Background(), "chain", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &gateway.InferResponse{})
		if !errors.Is(err, gateway.ErrBackend) || !strings.Contains(err.Error(), `module "a"`) || !strings.Contains(err.Error(), "needs 12 bytes, got 2") {
			t.Errorf("got %v, want ErrBackend naming module a and the size mismatch", err)
		}
	})
	t.Run("hanging module times out at the SLO", func(t *testing.T) {
		f := gatewaytest.NewFakeRunner()
		f.Hang["b"] = true
		sessions := gatewaytest.SessionsFromYAML(t, `
sessions:
  - name: s
    slo: 200ms
    modules:
      - {name: a, model: m, rate: 1}
      - {name: b, model: m, rate: 1, after: [a]}
`)
		e, err := gateway.NewDAGRunner(f, sessions)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = e.Infer(context.Background(), "s", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &gateway.InferResponse{})
		if !errors.Is(err, gateway.ErrDeadline) || !strings.Contains(err.Error(), "still running: b") {
			t.Errorf("got %v, want ErrDeadline naming module b", err)
		}
		if el := time.Since(start); el < 190*time.Millisecond || el > 2*time.Second {
			t.Errorf("timed out after %v, want about the 200 ms SLO", el)
		}
	})
	t.Run("client deadline earlier than SLO", func(t *testing.T) {
		f := gatewaytest.NewFakeRunner()
		f.Hang["a"] = true
		e := newTestDAGRunner(t, f)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := e.Infer(ctx, "chain", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &gateway.InferResponse{})
		if !errors.Is(err, gateway.ErrDeadline) || time.Since(start) > time.Second {
			t.Errorf("got %v after %v, want ErrDeadline at the client's 50 ms", err, time.Since(start))
		}
	})
	t.Run("admission", func(t *testing.T) {
		f := gatewaytest.NewFakeRunner()
		f.Estimated.Store(int64(1500 * time.Millisecond)) // two modules: 3 s > the 2 s SLO
		e := newTestDAGRunner(t, f)
		err := e.Infer(context.Background(), "chain", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &gateway.InferResponse{})
		if !errors.Is(err, gateway.ErrOverloaded) || !strings.Contains(err.Error(), "3000.0 ms") {
			t.Errorf("got %v, want ErrOverloaded citing the 3000 ms estimate", err)
		}
		if f.CallsOf("a") != 0 {
			t.Errorf("a rejected request was queued")
		}
		f.Estimated.Store(int64(900 * time.Millisecond)) // 1.8 s < 2 s: admitted
		if err := e.Infer(context.Background(), "chain", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &gateway.InferResponse{}); err != nil {
			t.Errorf("1.8 s estimate under a 2 s SLO: %v", err)
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		e := newTestDAGRunner(t, gatewaytest.NewFakeRunner())
		err := e.Infer(context.Background(), "nope", &gateway.InferRequest{Inputs: gatewaytest.Input(0)}, &gateway.InferResponse{})
		if !errors.Is(err, gateway.ErrUnknownSession) || !strings.Contains(err.Error(), "known sessions: branchy, chain, diamond, fan") {
			t.Errorf("got %v, want ErrUnknownSession listing the sessions", err)
		}
	})
	t.Run("requested output missing", func(t *testing.T) {
		e := newTestDAGRunner(t, gatewaytest.NewFakeRunner())
		err := e.Infer(context.Background(), "chain", &gateway.InferRequest{Inputs: gatewaytest.Input(0), Outputs: []string{"nope"}}, &gateway.InferResponse{})
		if !errors.Is(err, gateway.ErrBadInput) || !strings.Contains(err.Error(), `requested output "nope" was not produced; this request produced: x`) {
			t.Errorf("got %v", err)
		}
	})
}

func TestCompileErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"cycle", `
sessions:
  - name: s
    slo: 1s
    modules:
      - {name: a, model: m, rate: 1, after: [b]}
      - {name: b, model: m, rate: 1, after: [a]}`, `modules a, b form a cycle`},
		{"unknown after", `
sessions:
  - name: s
    slo: 1s
    modules:
      - {name: a, model: m, rate: 1, after: [zz]}`, `module "a" runs after "zz", which is not a module of the session (modules: a)`},
		{"duplicate module", `
sessions:
  - name: s
    slo: 1s
    modules:
      - {name: a, model: m, rate: 1}
      - {name: a, model: m, rate: 1}`, `module "a" is listed twice`},
		{"no modules", `
sessions:
  - name: s
    slo: 1s`, `session "s" has no modules`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gateway.NewDAGRunner(gatewaytest.NewFakeRunner(), gatewaytest.SessionsFromYAML(t, tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
