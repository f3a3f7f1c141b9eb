package gateway_test

import (
	"context"
	"testing"
	"time"

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
