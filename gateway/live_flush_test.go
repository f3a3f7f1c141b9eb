package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/scheduler"
)

// At low load, FlushIdle serves a lone request in about its compute time;
// FlushDeadline (the paper's) holds each partial batch until its module budget
// nearly runs out, so the same request takes most of the SLO. Both runners
// serve the harness chain (detect b8, recognize b8, planned for 50 req/s; 1 s
// SLO) on the same sim backends, side by side, one request at a time at about
// 2 req/s. FlushIdle starts from the planned rate and needs a few arrivals to
// see that the load is low: the first four are not measured.
func TestIdleFlushServesALoneRequestAtOnce(t *testing.T) {
	cfg := mustLoad(t, harnessProfiles)
	backendsText := "backends:\n"
	for i := range 2 {
		addr, _ := startSimBackend(t, cfg.Profiles)
		backendsText += fmt.Sprintf("  - {id: gpu-%d, address: %q, hardware: v100}\n", i, addr)
	}
	cfg = mustLoad(t, harnessProfiles+backendsText)
	plan, err := scheduler.Plan(cfg, scheduler.Options{Policy: "piccolo"})
	if err != nil {
		t.Fatal(err)
	}
	latency := map[dispatcher.Flush]time.Duration{}
	for _, flush := range []dispatcher.Flush{dispatcher.FlushDeadline, dispatcher.FlushIdle} {
		runner, err := NewLiveRunner(context.Background(), cfg, plan, LiveOptions{Flush: flush})
		if err != nil {
			t.Fatal(err)
		}
		exec, err := NewExecutor(runner, cfg.Sessions)
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
			req := &InferRequest{Inputs: []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 2}, Data: fp32(1, 2)}}}
			start := time.Now()
			if err := exec.Infer(context.Background(), "pipe", req, &InferResponse{}); err != nil {
				t.Fatalf("flush %s: %v", flush, err)
			}
			if i >= warmUp {
				worst = max(worst, time.Since(start))
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
	cfg := mustLoad(t, harnessProfiles)
	backendsText := "backends:\n"
	for i := range 2 {
		addr, _ := startSimBackend(t, cfg.Profiles)
		backendsText += fmt.Sprintf("  - {id: gpu-%d, address: %q, hardware: v100}\n", i, addr)
	}
	cfg = mustLoad(t, harnessProfiles+backendsText)
	plan, err := scheduler.Plan(cfg, scheduler.Options{Policy: "piccolo"})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := NewLiveSwitch(context.Background(), cfg, plan, LiveOptions{Flush: dispatcher.FlushIdle})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	exec, err := NewExecutor(sw, cfg.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	infer := func() time.Duration {
		req := &InferRequest{Inputs: []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 2}, Data: fp32(1, 2)}}}
		start := time.Now()
		if err := exec.Infer(context.Background(), "pipe", req, &InferResponse{}); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	for range 4 { // about 2 req/s: the estimate learns the load is low
		time.Sleep(400 * time.Millisecond)
		infer()
	}
	if err := sw.Apply(context.Background(), cfg, plan); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if d := infer(); d > 400*time.Millisecond {
		t.Errorf("the first request after a re-plan took %v; a lone request takes about 70 ms of compute, the deadline flush about 860 ms", d)
	}
}
