package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
)

// spareConfig: one module planned on one t4 (b4 at 100 req/s: 0.5 of a
// machine), in a pool of one t4, two v100 and one a100 that has no profile
// for the model. The v100s are spare; the a100 is not.
const spareConfig = `
hardware:
  - {name: t4, price: 1}
  - {name: v100, price: 3}
  - {name: a100, price: 5}
profiles:
  - model: m
    hardware: t4
    entries:
      - {batch: 1, concurrency: 1, duration: 10ms}
      - {batch: 4, concurrency: 1, duration: 20ms}
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 5ms}
      - {batch: 2, concurrency: 1, duration: 6ms}
      - {batch: 8, concurrency: 1, duration: 12ms}
      - {batch: 8, concurrency: 2, duration: 20ms}
      - {batch: 32, concurrency: 1, duration: 900ms}
sessions:
  - name: s
    slo: 200ms
    modules:
      - {name: m, model: m, rate: 100}
`

func TestSpareSlotsPickIdleBackendsWithAProfile(t *testing.T) {
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "c.yaml", Data: []byte(spareConfig)}, api.NamedDoc{Name: "b.yaml", Data: []byte(`
backends:
  - {id: t4-0, address: "127.0.0.1:1", hardware: t4}
  - {id: v100-1, address: "127.0.0.1:3", hardware: v100}
  - {id: a100-0, address: "127.0.0.1:4", hardware: a100}
  - {id: v100-0, address: "127.0.0.1:2", hardware: v100}
`)})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planner.Plan(cfg, planner.Options{Policy: "piccolo", MaxUtilization: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	// Planned on the t4 only, so the test is about the spares, not the plan.
	mp := &plan.Sessions[0].Modules[0]
	mp.Configs = mp.Configs[:1]
	mp.Configs[0].Hardware, mp.Configs[0].Batch, mp.Configs[0].Backends = "t4", 4, nil
	placed, _, err := placement.Place(plan, placement.Members(cfg.Backends), nil, placement.Options{Static: true})
	if err != nil {
		t.Fatal(err)
	}
	lm := &liveModule{session: "s", name: "m", model: "m", budget: time.Duration(mp.BudgetMs * float64(time.Millisecond))}
	got := spareSlots(cfg, placed, map[string]map[string]*liveModule{"s": {"m": lm}})
	if len(got) != 2 {
		t.Fatalf("%d spare slots %+v: want the two v100s (the t4 is planned, the a100 has no profile of m)", len(got), got)
	}
	for i, id := range []string{"v100-0", "v100-1"} {
		s := got[i].slot
		// The smallest batch that holds the group's 4 is 8; of its two
		// entries, concurrency 2 in 20 ms (800/s) beats 1 in 12 ms (667/s);
		// 32 in 900 ms is over the budget anyway.
		if s.Backend != id || s.Group != -1 || s.Module != "m" || s.Hardware != "v100" || s.Batch != 8 || s.Concurrency != 2 || s.Duration != 20*time.Millisecond {
			t.Errorf("spare %d: %+v, want %s, group −1, v100, batch 8, concurrency 2, 20ms", i, s, id)
		}
	}
	if len(got) == 2 && (got[0].addr != "127.0.0.1:2" || got[0].lm != lm) {
		t.Errorf("spare 0 at %q for %p: want 127.0.0.1:2 for module m", got[0].addr, got[0].lm)
	}
}

// TestLiveRunnerLoadsSpares: with Spare, a runner over a pool of two sim
// backends for a plan that places its module on one loads the model on the
// other at apply and gives the dispatcher one spare machine; without, none.
func TestLiveRunnerLoadsSpares(t *testing.T) {
	h := startHarness(t, `
hardware:
  - {name: v100, price: 1}
profiles:
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 5ms}
      - {batch: 4, concurrency: 1, duration: 8ms}
sessions:
  - name: s
    slo: 100ms
    modules:
      - {name: m, model: m, rate: 50}
`, 2, "tc")
	plan, err := planner.Plan(h.cfg, planner.Options{Policy: "piccolo", MaxUtilization: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	for _, spare := range []bool{false, true} {
		r, err := NewLiveRunner(context.Background(), h.cfg, plan, LiveOptions{Spare: spare})
		if err != nil {
			t.Fatal(err)
		}
		st := r.Stats()["s/m"]
		want := 0
		if spare {
			want = 1
		}
		if len(st.Spare) != want || len(r.loaded) != 1+want {
			t.Errorf("spare %v: %d spare machines, %d models loaded (%v); want %d and %d", spare, len(st.Spare), len(r.loaded), r.loaded, want, 1+want)
		}
		if spare && len(st.Spare) == 1 {
			if s := st.Spare[0].Slot; s.Group != -1 || s.Backend != "gpu-1" || s.Batch != 4 || r.sessions["s"]["m"].clients["gpu-1"] == nil {
				t.Errorf("spare slot %+v: want gpu-1, group −1, batch 4, with a client", s)
			}
		}
		r.Close()
	}
}
