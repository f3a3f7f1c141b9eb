package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// arrivalCounts is an ArrivalObserver counting Arrived calls by session.
type arrivalCounts map[string]int

func (a arrivalCounts) Arrived(session string) { a[session]++ }

// The arrival observer sees each request that passed the input checks once,
// refused ones included (the demand), and none that failed the checks.
func TestArrivalObserverCountsEachRequestOnce(t *testing.T) {
	r := gatewaytest.NewFakeRunner()
	r.Sync = true
	e, err := gateway.NewDAGRunner(r, gatewaytest.SessionsFromYAML(t, testSessions))
	if err != nil {
		t.Fatal(err)
	}
	seen := arrivalCounts{}
	e.ObserveArrivals(seen)
	for range 3 {
		if err := e.Infer(context.Background(), "chain", &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &gateway.InferResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	// Refused at admission: the estimate exceeds the deadline. Still demand.
	r.Estimated.Store(int64(time.Hour))
	if err := e.Infer(context.Background(), "chain", &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &gateway.InferResponse{}); err == nil {
		t.Fatal("a request estimated at an hour was admitted")
	}
	// Bad input: not an arrival of the session's demand.
	if err := e.Infer(context.Background(), "chain", &gateway.InferRequest{}, &gateway.InferResponse{}); err == nil {
		t.Fatal("a request without inputs was accepted")
	}
	if seen["chain"] != 4 || len(seen) != 1 {
		t.Errorf("arrivals %v; want chain: 4 (3 served, 1 refused at admission)", seen)
	}
}

// moduleCounts is a ModuleArrivalObserver counting requests by session and
// items by session/module.
type moduleCounts struct {
	arrivalCounts
	items   map[string]int
	calls   int
	refused map[string]int
}

func (m *moduleCounts) Refused(session string) { m.refused[session]++ }

// newCountedRunner returns a DAGRunner of testSessions over a synchronous
// fake runner, observed by a moduleCounts.
func newCountedRunner(t *testing.T) (*gatewaytest.FakeRunner, *gateway.DAGRunner, *moduleCounts) {
	t.Helper()
	r := gatewaytest.NewFakeRunner()
	r.Sync = true
	e, err := gateway.NewDAGRunner(r, gatewaytest.SessionsFromYAML(t, testSessions))
	if err != nil {
		t.Fatal(err)
	}
	seen := &moduleCounts{arrivalCounts: arrivalCounts{}, items: map[string]int{}, refused: map[string]int{}}
	e.ObserveArrivals(seen)
	return r, e, seen
}

func (m *moduleCounts) ModuleArrived(session, module string, items int) {
	m.items[session+"/"+module] += items
	m.calls++
}

// A module arrival observer is told the items that reach each module with
// parents: 1 a module that runs, the items of each fan-out (zero included),
// nothing for a branch not chosen and nothing for a source (Arrived counts
// those). 4 requests to branchy choosing cat, dog, cat, both: cat 3, dog 2,
// merge 4; fan with 3, 0 and 2 boxes: recognize 5, summarize 2 (the request
// with no boxes skips it).
func TestModuleArrivalsCountBranchesAndFanOuts(t *testing.T) {
	r, e, seen := newCountedRunner(t)
	var choice []int64
	r.Fn["router"] = func(in []api.Tensor) ([]api.Tensor, error) {
		return append(in, api.Tensor{Name: "branch", Datatype: "INT64", Shape: []int64{int64(len(choice))}, Data: gatewaytest.I64(choice...)}), nil
	}
	for _, c := range [][]int64{{0}, {1}, {0}, {0, 1}} {
		choice = c
		if err := e.Infer(context.Background(), "branchy", &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &gateway.InferResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	boxes := 0
	r.Fn["detect"] = func(in []api.Tensor) ([]api.Tensor, error) {
		return []api.Tensor{{Name: "boxes", Datatype: "FP32", Shape: []int64{int64(boxes), 1}, Data: make([]byte, 4*boxes)}}, nil
	}
	for _, n := range []int{3, 0, 2} {
		boxes = n
		if err := e.Infer(context.Background(), "fan", &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &gateway.InferResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{"branchy/cat": 3, "branchy/dog": 2, "branchy/merge": 4, "fan/recognize": 5, "fan/summarize": 2}
	if !cmp.Equal(want, seen.items) {
		t.Errorf("module arrivals %v; want %v", seen.items, want)
	}
	if seen.arrivalCounts["branchy"] != 4 || seen.arrivalCounts["fan"] != 3 {
		t.Errorf("arrivals %v; want branchy 4, fan 3", seen.arrivalCounts)
	}
}

// nopModules is a ModuleArrivalObserver that does nothing: what telling it
// costs the DAGRunner.
type nopModules struct{}

func (nopModules) Arrived(string)                    {}
func (nopModules) ModuleArrived(string, string, int) {}
func (nopModules) Refused(string)                    {}

// Telling a module arrival observer allocates nothing: a request through a
// chain allocates as much with one as without.
func TestModuleArrivalsDoNotAllocate(t *testing.T) {
	sessions := gatewaytest.SessionsFromYAML(t, testSessions)
	allocs := func(o gateway.ArrivalObserver) float64 {
		e, err := gateway.NewDAGRunner(gatewaytest.EchoRunner{}, sessions)
		if err != nil {
			t.Fatal(err)
		}
		if o != nil {
			e.ObserveArrivals(o)
		}
		req := gateway.InferRequest{Inputs: gatewaytest.Input(1, 2, 3)}
		return testing.AllocsPerRun(200, func() {
			var resp gateway.InferResponse
			if err := e.Infer(context.Background(), "chain", &req, &resp); err != nil {
				t.Fatal(err)
			}
		})
	}
	without, with := allocs(nil), allocs(nopModules{})
	if with != without {
		t.Errorf("a request allocates %.0f times with a module arrival observer, %.0f without; want no more", with, without)
	}
}

// A module arrival observer is told each request admission refused, by the
// session's estimate or by a source's own admission, and none that was
// served or failed otherwise: the control plane scales the modules after the
// sources, which see only admitted requests, back to the demand by it.
func TestModuleArrivalsTellRefusals(t *testing.T) {
	r, e, seen := newCountedRunner(t)
	infer := func() error {
		return e.Infer(context.Background(), "chain", &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &gateway.InferResponse{})
	}
	for range 3 {
		if err := infer(); err != nil {
			t.Fatal(err)
		}
	}
	r.Estimated.Store(int64(time.Hour)) // the session's estimate refuses
	if err := infer(); !errors.Is(err, gateway.ErrOverloaded) {
		t.Fatalf("a request estimated at an hour: %v; want ErrOverloaded", err)
	}
	r.Estimated.Store(0)
	r.Fn["a"] = func([]api.Tensor) ([]api.Tensor, error) { // the source's admission refuses
		return nil, fmt.Errorf("%w: module a: the queue is full", gateway.ErrOverloaded)
	}
	if err := infer(); !errors.Is(err, gateway.ErrOverloaded) {
		t.Fatalf("a request the source refused: %v; want ErrOverloaded", err)
	}
	r.Fn["a"] = func([]api.Tensor) ([]api.Tensor, error) { return nil, errors.New("backend down") }
	if err := infer(); err == nil {
		t.Fatal("a request whose source failed was answered")
	}
	if seen.arrivalCounts["chain"] != 6 || seen.refused["chain"] != 2 || seen.items["chain/b"] != 3 {
		t.Errorf("arrivals %v, refused %v, items %v; want chain: 6 arrived, 2 refused, 3 items at b", seen.arrivalCounts, seen.refused, seen.items)
	}
}
