package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

const anyOfSessions = `
sessions:
  - name: race
    slo: 500ms
    modules:
      - {name: src, model: m, rate: 10}
      - {name: fast, model: m, rate: 10, after: [src]}
      - {name: slow1, model: m, rate: 10, after: [src]}
      - {name: slow2, model: m, rate: 10, after: [slow1]}
      - {name: pick, model: m, rate: 10, after: [slow2, fast], join: anyof}
`

// raceRunner answers every module at once except those in hold, which answer
// ErrCancelled only once the gateway abandons their items (Abandon): a
// request that waited for them would never end. A module in waitFor answers
// only once the module it names was submitted. It records each item's Call.
type raceRunner struct {
	hold     map[string]bool
	estimate map[string]time.Duration
	waitFor  map[string]string
	started  map[string]chan struct{}
	fail     map[string]error

	mu        sync.Mutex
	calls     map[string]*gateway.Call
	ran       map[string]int
	abandoned map[string]chan struct{}
}

func newRaceRunner(hold ...string) *raceRunner {
	r := &raceRunner{hold: map[string]bool{}, estimate: map[string]time.Duration{}, calls: map[string]*gateway.Call{},
		ran: map[string]int{}, abandoned: map[string]chan struct{}{}, waitFor: map[string]string{}, started: map[string]chan struct{}{},
		fail: map[string]error{}}
	for _, m := range hold {
		r.hold[m] = true
		r.abandoned[m] = make(chan struct{})
	}
	return r
}

func (r *raceRunner) Run(_ context.Context, _, module string, in []api.Tensor, call *gateway.Call, done func([]api.Tensor, gateway.Timing, error)) {
	r.mu.Lock()
	r.calls[module] = call
	r.ran[module]++
	ch := r.abandoned[module]
	if c, ok := r.started[module]; ok {
		close(c)
	}
	gate := r.started[r.waitFor[module]]
	failErr := r.fail[module]
	r.mu.Unlock()
	if failErr != nil {
		go func() {
			if gate != nil {
				<-gate
			}
			done(nil, gateway.Timing{}, failErr)
		}()
		return
	}
	if !r.hold[module] {
		out := append([]api.Tensor{}, in...)
		out = append(out, api.Tensor{Name: "by_" + module, Datatype: "FP32", Shape: []int64{1}, Data: gatewaytest.FP32(1)})
		go func() {
			if gate != nil {
				<-gate
			}
			done(out, gateway.Timing{}, nil)
		}()
		return
	}
	go func() {
		<-ch
		if !call.Abandoned.Load() {
			panic("module " + module + " was swept without its Call abandoned")
		}
		done(nil, gateway.Timing{}, gateway.ErrCancelled)
	}()
}

func (r *raceRunner) Estimate(_, module string) time.Duration { return r.estimate[module] }

func (r *raceRunner) Abandon(_, module string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.abandoned[module]; ok {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

func (r *raceRunner) ranOf(m string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ran[m]
}

func TestAnyOfTakesTheFirstParent(t *testing.T) {
	rr := newRaceRunner("slow1")
	rr.waitFor["fast"] = "slow1" // the race is decided while slow1 runs
	rr.started["slow1"] = make(chan struct{})
	e, err := gateway.NewDAGRunner(rr, gatewaytest.SessionsFromYAML(t, anyOfSessions))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var resp gateway.InferResponse
	if err := e.Infer(ctx, "race", &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &resp); err != nil {
		t.Fatalf("anyof did not complete on its first parent: %v", err)
	}
	if got := gatewaytest.OutputNames(resp.Outputs); got != "x,by_src,by_fast,by_pick" {
		t.Errorf("outputs %s, want the fast branch's (x,by_src,by_fast,by_pick)", got)
	}
	params := gatewaytest.ParamMap(resp.Parameters)
	for _, m := range []string{"slow1", "slow2"} {
		if _, ok := params["piccolo."+m+".total_ms"]; ok {
			t.Errorf("the losing branch's module %s is reported as run", m)
		}
	}
	// The loser's items were abandoned on their own Call, the request's was not.
	rr.mu.Lock()
	slow, fast := rr.calls["slow1"], rr.calls["fast"]
	rr.mu.Unlock()
	if !slow.Abandoned.Load() || fast.Abandoned.Load() || slow == fast {
		t.Errorf("loser's call abandoned %v, winner's %v (same call: %v): want only the loser's", slow.Abandoned.Load(), fast.Abandoned.Load(), slow == fast)
	}
	if n := rr.ranOf("slow2"); n != 0 {
		t.Errorf("slow2, after the cut slow1, ran %d times, want never", n)
	}
	if n := rr.ranOf("pick"); n != 1 {
		t.Errorf("pick ran %d times, want once", n)
	}
}

func TestAnyOfAdmissionTakesTheShortestBranch(t *testing.T) {
	rr := newRaceRunner()
	rr.estimate = map[string]time.Duration{"src": 10 * time.Millisecond, "fast": 20 * time.Millisecond,
		"slow1": time.Second, "slow2": time.Second, "pick": 10 * time.Millisecond}
	e, err := gateway.NewDAGRunner(rr, gatewaytest.SessionsFromYAML(t, anyOfSessions))
	if err != nil {
		t.Fatal(err)
	}
	var resp gateway.InferResponse
	// slow1 → slow2 alone needs 2 s, above the SLO; fast needs 40 ms in all.
	if err := e.Infer(context.Background(), "race", &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &resp); err != nil {
		t.Fatalf("admission refused a request the fast branch serves in 40 ms: %v", err)
	}
	rr.estimate["fast"] = time.Second
	err = e.Infer(context.Background(), "race", &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &resp)
	if !errors.Is(err, gateway.ErrOverloaded) {
		t.Fatalf("both branches need 1 s or more, SLO 500 ms: got %v, want ErrOverloaded", err)
	}
}

func TestAnyOfSkippedBranch(t *testing.T) {
	// router chooses b only: a is skipped, so pick runs on b (the only branch
	// that ran), and a request where both are skipped skips pick too.
	const text = `
sessions:
  - name: s
    slo: 1s
    modules:
      - {name: router, model: m, rate: 10}
      - {name: a, model: m, rate: 5, after: [router]}
      - {name: b, model: m, rate: 5, after: [router]}
      - {name: pick, model: m, rate: 10, after: [a, b], join: anyof}
`
	f := gatewaytest.NewFakeRunner()
	f.Fn["router"] = func(in []api.Tensor) ([]api.Tensor, error) {
		return append(in, api.Tensor{Name: gateway.BranchOutput, Datatype: "BYTES", Shape: []int64{1}, Data: gatewaytest.BytesElems("b")}), nil
	}
	f.Fn["b"] = gatewaytest.AddConst("yb", 1)
	e, err := gateway.NewDAGRunner(f, gatewaytest.SessionsFromYAML(t, text))
	if err != nil {
		t.Fatal(err)
	}
	var resp gateway.InferResponse
	if err := e.Infer(context.Background(), "s", &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &resp); err != nil {
		t.Fatal(err)
	}
	if got := gatewaytest.OutputNames(resp.Outputs); got != "yb" {
		t.Errorf("outputs %s, want b's (yb)", got)
	}
	if f.CallsOf("a") != 0 || f.CallsOf("pick") != 1 {
		t.Errorf("a ran %d, pick %d times; want 0 and 1", f.CallsOf("a"), f.CallsOf("pick"))
	}
}

func TestAnyOfCompileErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"one parent", `
sessions:
  - name: s
    slo: 1s
    modules:
      - {name: a, model: m, rate: 1}
      - {name: j, model: m, rate: 1, after: [a], join: anyof}`, `anyof races at least two modules`},
		{"shared parent", `
sessions:
  - name: s
    slo: 1s
    modules:
      - {name: a, model: m, rate: 1}
      - {name: b, model: m, rate: 1}
      - {name: j, model: m, rate: 1, after: [a, b], join: anyof}
      - {name: k, model: m, rate: 1, after: [b]}`, `parent "b" also feeds other modules`},
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

// A branch that fails leaves the race to the others (the fast branch
// refused by admission must not fail a request the slow one still answers);
// only when every branch failed does the request fail, with a branch's error.
func TestAnyOfBranchFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fail    []string
		wantErr bool
		outputs string
	}{
		{"fast fails, slow wins", []string{"fast"}, false, "x,by_src,by_slow1,by_slow2,by_pick"},
		{"slow fails, fast wins", []string{"slow2"}, false, "x,by_src,by_fast,by_pick"},
		{"both fail", []string{"fast", "slow1"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := newRaceRunner()
			for _, m := range tc.fail {
				rr.fail[m] = fmt.Errorf("%w: injected", gateway.ErrOverloaded)
			}
			e, err := gateway.NewDAGRunner(rr, gatewaytest.SessionsFromYAML(t, anyOfSessions))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var resp gateway.InferResponse
			err = e.Infer(ctx, "race", &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &resp)
			if tc.wantErr {
				if !errors.Is(err, gateway.ErrOverloaded) {
					t.Fatalf("got %v; want the branches' ErrOverloaded", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("one branch failed, the other could win: %v", err)
			}
			if got := gatewaytest.OutputNames(resp.Outputs); got != tc.outputs {
				t.Errorf("outputs %s, want %s", got, tc.outputs)
			}
		})
	}
}
