package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
)

// harnessChainOnSims serves the harness chain on two v100 sim backends and
// plans it with the piccolo policy.
func harnessChainOnSims(t *testing.T) (*api.Config, *api.Plan) {
	t.Helper()
	cfg := mustLoad(t, testharness.ChainProfiles+testharness.StartSimBackends(t, mustLoad(t, testharness.ChainProfiles).Profiles, 2))
	plan, err := testharness.Planner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, plan
}

// inferPipe sends one request to the harness chain through exec and returns
// how long it took.
func inferPipe(t *testing.T, exec *gateway.DAGRunner) time.Duration {
	t.Helper()
	req := &gateway.InferRequest{Inputs: []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 2}, Data: gatewaytest.FP32(1, 2)}}}
	start := time.Now()
	if err := exec.Infer(context.Background(), "pipe", req, &gateway.InferResponse{}); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// At low load, FlushIdle serves a lone request in about its compute time;
// FlushDeadline (the paper's) holds each partial batch until its module budget
// nearly runs out, so the same request takes most of the SLO. Both runners
// serve the harness chain (detect b8, recognize b8, planned for 50 req/s; 1 s
// SLO) on the same sim backends, side by side, one request at a time at about
// 2 req/s. FlushIdle starts from the planned rate and needs a few arrivals to
// see that the load is low: the first four are not measured.
func TestIdleFlushServesALoneRequestAtOnce(t *testing.T) {
	cfg, plan := harnessChainOnSims(t)
	latency := map[dispatcher.Flush]time.Duration{}
	for _, flush := range []dispatcher.Flush{dispatcher.FlushDeadline, dispatcher.FlushIdle} {
		runner, err := NewLiveRunner(context.Background(), cfg, plan, LiveOptions{Flush: flush})
		if err != nil {
			t.Fatal(err)
		}
		exec, err := gateway.NewDAGRunner(runner, cfg.Sessions)
		if err != nil {
			t.Fatal(err)
		}
		var worst time.Duration
		warmUp, measured := 4, 2
		if flush == dispatcher.FlushDeadline {
			warmUp = 0
		}
		for i := range warmUp + measured {
			time.Sleep(400 * time.Millisecond)
			if d := inferPipe(t, exec); i >= warmUp {
				worst = max(worst, d)
			}
		}
		latency[flush] = worst
		closed := runner.Stats()["pipe/detect"].Closed
		if flush == dispatcher.FlushIdle && closed[dispatcher.ClosedIdle] == 0 ||
			flush == dispatcher.FlushDeadline && (closed[dispatcher.ClosedDeadline] == 0 || closed[dispatcher.ClosedIdle] != 0) {
			t.Errorf("flush %s: detect's batches closed (full, deadline, idle) %v", flush, closed)
		}
		runner.Close()
	}
	t.Logf("lone request, slowest of 2: flush deadline %v, flush idle %v (compute: 40 ms + 30 ms)",
		latency[dispatcher.FlushDeadline], latency[dispatcher.FlushIdle])
	if latency[dispatcher.FlushIdle]*2 > latency[dispatcher.FlushDeadline] {
		t.Errorf("flush idle took %v, flush deadline %v: want idle under half of deadline",
			latency[dispatcher.FlushIdle], latency[dispatcher.FlushDeadline])
	}
}

// A re-plan keeps what FlushIdle learnt about the load: the first lone
// request after LiveSwitch.Apply is served at once, not held for batch-mates
// by a dispatcher that starts again from the planned 50 req/s.
func TestIdleFlushEstimateSurvivesAReplan(t *testing.T) {
	cfg, plan := harnessChainOnSims(t)
	sw, err := NewLiveSwitch(context.Background(), cfg, plan, LiveOptions{Flush: dispatcher.FlushIdle})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	exec, err := gateway.NewDAGRunner(sw, cfg.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // about 2 req/s: the estimate learns the load is low
		time.Sleep(400 * time.Millisecond)
		inferPipe(t, exec)
	}
	if err := sw.Apply(context.Background(), cfg, plan); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if d := inferPipe(t, exec); d > 400*time.Millisecond {
		t.Errorf("the first request after a re-plan took %v; a lone request takes about 70 ms of compute, the deadline flush about 860 ms", d)
	}
}
