package gateway_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// callRunner records each item's Call and holds the items of module "b"
// until the request's context ends; it is an Abandoner.
type callRunner struct {
	mu        sync.Mutex
	calls     map[string]*gateway.Call
	deadlines map[string]time.Time
	classes   map[string]int
	abandoned []string
}

func (r *callRunner) Run(ctx context.Context, _, module string, in []api.Tensor, call *gateway.Call, done func([]api.Tensor, gateway.Timing, error)) {
	r.mu.Lock()
	r.calls[module], r.deadlines[module], r.classes[module] = call, call.Deadline, call.Class
	r.mu.Unlock()
	if module == "b" {
		go func() { <-ctx.Done(); done(nil, gateway.Timing{}, ctx.Err()) }()
		return
	}
	done(in, gateway.Timing{}, nil)
}

func (r *callRunner) Estimate(string, string) time.Duration { return 0 }

func (r *callRunner) Abandon(_, module string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.abandoned = append(r.abandoned, module)
}

// A request's timeout tightens its deadline below the SLO, its priority
// gives its items' class, and a request that returns without its result
// (here its client cancels) abandons the items still running.
func TestCallDeadlineClassAndAbandon(t *testing.T) {
	r := &callRunner{calls: map[string]*gateway.Call{}, deadlines: map[string]time.Time{}, classes: map[string]int{}}
	e, err := gateway.NewDAGRunner(r, gatewaytest.SessionsFromYAML(t, testSessions))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	req := &gateway.InferRequest{Inputs: gatewaytest.Input(1), Timeout: 300 * time.Millisecond, Priority: 3}
	err = e.Infer(ctx, "chain", req, &gateway.InferResponse{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Infer = %v, want context.Canceled", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if dl := r.deadlines["a"].Sub(start); dl < 250*time.Millisecond || dl > 350*time.Millisecond {
		t.Errorf("deadline %v after the start, want about the 300 ms timeout (the SLO is 2 s)", dl)
	}
	if r.classes["a"] != gateway.ClassLow || r.calls["a"] != r.calls["b"] {
		t.Errorf("class %d, want ClassLow; one Call for the request's items", r.classes["a"])
	}
	if !r.calls["b"].Abandoned.Load() || len(r.abandoned) != 1 || r.abandoned[0] != "b" {
		t.Errorf("abandoned %v (flag %v), want module b abandoned", r.abandoned, r.calls["b"].Abandoned.Load())
	}
}

func TestPriorityClass(t *testing.T) {
	for p, want := range map[int64]int{0: gateway.ClassNormal, 1: gateway.ClassHigh, 2: gateway.ClassNormal, 3: gateway.ClassLow, 1 << 40: gateway.ClassLow} {
		if got, err := gateway.PriorityClass(p); err != nil || got != want {
			t.Errorf("PriorityClass(%d) = %d, %v; want %d", p, got, err, want)
		}
	}
	if _, err := gateway.PriorityClass(-1); !errors.Is(err, gateway.ErrBadInput) {
		t.Errorf("PriorityClass(-1): %v, want ErrBadInput", err)
	}
}
