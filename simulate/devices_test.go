package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
)

// halves is two sessions of one module each, half a machine each (batch 1,
// 100 ms, 5 req/s: the half machine is busy half the time), on one hardware type.
func halves() *api.Plan {
	mod := func(name string) api.SessionPlan {
		return api.SessionPlan{Name: name, SLOMs: 1000, LatencyMs: 200, Modules: []api.ModulePlan{{Name: "m", Rate: 5, BudgetMs: 1000, WCLMs: 200,
			Configs: []api.GroupPlan{{Hardware: "gpu", Price: 1, Batch: 1, Concurrency: 1, DurationMs: 100, Throughput: 10, Machines: 0.5, Rate: 5, WCLMs: 200, Cost: 0.5}}}}}
	}
	return &api.Plan{Sessions: []api.SessionPlan{mod("a"), mod("b")}}
}

// TestModulesOnOneDeviceContend: placement packs the two half machines onto one
// device; simulated there, their batches (both sessions arrive at the same
// instants) queue behind each other, so one of each pair waits a batch
// duration; on two devices (the unplaced plan: a device per machine) none
// waits. The test fails if modules placed on one device do not contend.
func TestModulesOnOneDeviceContend(t *testing.T) {
	placed, _, err := placement.Place(halves(), nil, nil, placement.Options{Provision: true})
	n := placement.Devices(placed)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("two half machines placed on %d devices, want 1", n)
	}
	o := Options{Arrival: "constant", Duration: 10 * time.Second, Seed: 1}
	apart, err := Run(halves(), o)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := Run(placed, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(apart.Devices) != 0 {
		t.Errorf("unplaced plan reports devices %+v", apart.Devices)
	}
	if len(shared.Devices) != 1 || shared.Devices[0].Queued == 0 || shared.Devices[0].MaxWaitMs < 99 {
		t.Fatalf("one shared device: %+v; want batches queued behind the other module's, waiting 100 ms", shared.Devices)
	}
	var maxApart, maxShared float64
	for i := range 2 {
		maxApart = max(maxApart, apart.Sessions[i].Latency.MaxMs)
		maxShared = max(maxShared, shared.Sessions[i].Latency.MaxMs)
	}
	if maxApart > 100.5 || maxShared < 199.5 {
		t.Errorf("max latency %.1f ms on two devices (want 100), %.1f ms on one (want 200: a batch waits for the other module's)", maxApart, maxShared)
	}
	if d := shared.Devices[0]; d.Utilisation < 0.95 || d.Utilisation > 1.05 {
		t.Errorf("shared device utilisation %.2f, want 1 (two half machines busy half the time each)", d.Utilisation)
	}
	var b strings.Builder
	if err := shared.WriteTable(&b); err != nil || !strings.Contains(b.String(), "1 devices") {
		t.Errorf("table (err %v) does not list the device:\n%s", err, b.String())
	}
}

// TestPlacedPlansKeepTheirAttainment: the piccolo plans of the paper's
// examples and random workloads, placed on the devices placement packs them
// onto (fewer than one per machine), keep their SLO attainment under Poisson
// arrivals within noise of the same plan on a device per machine.
func TestPlacedPlansKeepTheirAttainment(t *testing.T) {
	cfg, err := api.Load("../configs/paper/profiles.yaml", "../configs/paper/sessions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgs := append([]*api.Config{cfg}, planner.GenerateWorkloads(7, 4, planner.DefaultWorkloadSpec)...)
	shared := 0
	for i, c := range cfgs {
		plan, err := planner.Plan(c, planner.Options{Policy: "piccolo", MaxUtilization: 0.8})
		if err != nil {
			continue
		}
		placed, _, err := placement.Place(plan, nil, nil, placement.Options{Provision: true})
		n := placement.Devices(placed)
		if err != nil {
			t.Fatal(err)
		}
		slots := 0
		for _, sp := range plan.Sessions {
			for _, mp := range sp.Modules {
				for _, g := range mp.Configs {
					slots += int(g.Machines + 1 - 1e-9)
				}
			}
		}
		o := Options{Arrival: "poisson", Duration: 30 * time.Second, Seed: 3}
		a, err := Run(plan, o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(placed, o)
		if err != nil {
			t.Fatal(err)
		}
		if n < slots {
			shared++
		}
		for si := range a.Sessions {
			sa, sb := a.Sessions[si], b.Sessions[si]
			if sa.Skipped != "" {
				continue
			}
			t.Logf("config %d session %s: cost %.3g, %d machines → %d devices; attainment %.4f unplaced, %.4f placed", i, sa.Name, plan.TotalCost, slots, n, sa.SLOAttainment, sb.SLOAttainment)
			if sb.SLOAttainment < sa.SLOAttainment-0.01 {
				t.Errorf("config %d session %s: SLO attainment %.4f on %d devices, %.4f on a device per machine (%d): more than 1 point lost", i, sa.Name, sb.SLOAttainment, n, sa.SLOAttainment, slots)
			}
		}
	}
	if shared == 0 {
		t.Error("no plan had machines sharing a device: nothing was tested")
	}
}
