package simulate

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// tailPlan is a hand-made plan of one module, batch 1 of 10 ms on machines
// machines, at 20 req/s, SLO 1 s, raced on race machines with tail.
func tailPlan(machines float64, race int, tail *api.Tail) *api.Plan {
	return &api.Plan{LatencyModel: "tc-exact", MaxUtilization: 1, TotalCost: machines, Sessions: []api.SessionPlan{{
		Name: "s", SLOMs: 1000, Cost: machines, Modules: []api.ModulePlan{{
			Name: "t", Model: "mt", Rate: 20, Race: race, Tail: tail, BudgetMs: 1000, WCLMs: 10, Cost: machines,
			Configs: []api.GroupPlan{{Hardware: "cpu", Price: 1, Batch: 1, Concurrency: 1, DurationMs: 10, Throughput: 100,
				Machines: machines, Rate: 20, WCLMs: 10, Cost: machines}},
		}},
	}}}
}

// meanLatency runs p for 200 s of constant arrivals and returns t's mean
// item latency (ms) and its slots.
func meanLatency(t *testing.T, p *api.Plan, seed uint64) (float64, []SlotReport) {
	t.Helper()
	r, err := Run(p, Options{Duration: 200 * time.Second, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	m := r.Sessions[0].Modules[0]
	return m.Latency.MeanMs, m.Slots
}

// Each batch of a module with a tail is slow (3× its 10 ms) with its share,
// drawn per batch from the session's seeded source; raced on k machines a
// batch is slow only when all k copies are, and the k machines are one
// racing set to the dispatcher (the slots counted once, each priced k
// machines). The mean item latency shows the share: 10 ms + share × 20 ms.
// A tail of share 0 runs exactly as no tail.
func TestTailDrawnPerBatch(t *testing.T) {
	for _, c := range []struct {
		name      string
		machines  float64
		race      int
		tail      *api.Tail
		slowShare float64
		sets      int
	}{
		{"no tail", 2, 0, nil, 0, 2},
		{"share 0", 2, 0, &api.Tail{Share: 0, Factor: 3}, 0, 2},
		{"share 0.4", 2, 0, &api.Tail{Share: 0.4, Factor: 3}, 0.4, 2},
		{"share 0.4 raced on 2", 4, 2, &api.Tail{Share: 0.4, Factor: 3}, 0.16, 2},
		{"share 0.4 raced on 3", 3, 3, &api.Tail{Share: 0.4, Factor: 3}, 0.064, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := tailPlan(c.machines, c.race, c.tail)
			mean, slots := meanLatency(t, p, 1)
			if got := (mean - 10) / 20; math.Abs(got-c.slowShare) > 0.02 {
				t.Errorf("mean latency %.3f ms: %.3f of the batches slow, want %.3f", mean, got, c.slowShare)
			}
			if len(slots) != c.sets {
				t.Errorf("%d slots, want %d racing sets", len(slots), c.sets)
			}
			var cost float64
			for _, s := range slots {
				cost += s.Cost
			}
			if math.Abs(cost-c.machines) > 1e-9 {
				t.Errorf("the slots cost %v, want the plan's %v machines", cost, c.machines)
			}
			if again, _ := meanLatency(t, p, 1); again != mean {
				t.Errorf("the same seed gave mean latencies %v and %v", mean, again)
			}
		})
	}
	// A plan whose tail or race is out of range is refused, naming it.
	for _, p := range []*api.Plan{tailPlan(2, 0, &api.Tail{Share: 0.7, Factor: 3}), tailPlan(2, 0, &api.Tail{Share: 0.1, Factor: math.NaN()}), tailPlan(2, 9, nil), tailPlan(2, -1, nil)} {
		if _, err := Run(p, Options{Duration: time.Second}); err == nil || !strings.Contains(err.Error(), `module "t"`) {
			t.Errorf("race %d tail %v: %v, want an error naming module t", p.Sessions[0].Modules[0].Race, p.Sessions[0].Modules[0].Tail, err)
		}
	}
}
