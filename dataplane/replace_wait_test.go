package dataplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/faults"
	"github.com/piccolo-serving/piccolo/gateway"
)

// A batch whose module's only machine died (its backend refuses every call)
// is retried on the plan the health re-placement swaps in when another
// backend of its hardware is up (awaitReplacement), so its request is
// answered; with no other backend of the hardware, it fails at once rather
// than after a wait for a re-placement that cannot come.
func TestOnlyMachineDiedWaitsForReplacement(t *testing.T) {
	cfg := faultConfigAt(20, 1) // 20 req/s of 20 ms: one machine
	in := []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}, Data: make([]byte, 4)}}
	for _, c := range []struct {
		name     string
		backends int
		answered bool
	}{{"another backend up", 2, true}, {"no other backend", 1, false}} {
		t.Run(c.name, func(t *testing.T) {
			rig := startRig(t, cfg, c.backends, LiveOptions{ProbeInterval: -1})
			lm := rig.module()
			if len(lm.clients) != 1 {
				t.Fatalf("the plan uses %d backends; the test needs its module on one", len(lm.clients))
			}
			victim := -1
			for id := range lm.clients {
				if _, err := fmt.Sscanf(id, "gpu-%d", &victim); err != nil || victim >= c.backends {
					t.Fatalf("placed on %q, not on a gpu-<i> of the rig", id)
				}
			}
			if err := rig.inj[victim].Set(faults.Set{Refuse: true}); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			start := time.Now()
			rig.sw.Run(context.Background(), "s", "m", in, &gateway.Call{Deadline: start.Add(5 * time.Second)},
				func(_ []api.Tensor, _ gateway.Timing, err error) { done <- err })
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("no answer after 10 s")
			}
			took := time.Since(start)
			switch {
			case c.answered && err != nil:
				t.Errorf("request failed after %v: %v; want it answered on the re-placed plan", took, err)
			case !c.answered && err == nil:
				t.Errorf("request answered after %v with its only backend refusing; want it failed", took)
			case !c.answered && took >= maxReplacementWait:
				t.Errorf("request failed after %v; want at once, not after waiting for a re-placement that cannot come", took)
			}
			t.Logf("%s: answered in %v, error %v", c.name, took.Round(time.Millisecond), err)
		})
	}
}
