package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/loadgen"
	"github.com/piccolo-serving/piccolo/planner"
)

// liveProfiles is the live test: a two-module session on two hardware types.
// Detection is cheapest on t4, recognition on v100, so the plan uses both. Durations
// are tens of milliseconds so that a loaded 2-core machine does not dominate them.
const liveProfiles = `
hardware:
  - {name: v100, price: 3}
  - {name: t4, price: 1}
profiles:
  - model: det
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 20ms}
      - {batch: 4, concurrency: 1, duration: 40ms}
      - {batch: 8, concurrency: 1, duration: 60ms}
  - model: det
    hardware: t4
    entries:
      - {batch: 1, concurrency: 1, duration: 40ms}
      - {batch: 4, concurrency: 1, duration: 80ms}
      - {batch: 8, concurrency: 1, duration: 130ms}
  - model: rec
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 15ms}
      - {batch: 4, concurrency: 1, duration: 25ms}
      - {batch: 8, concurrency: 1, duration: 35ms}
  - model: rec
    hardware: t4
    entries:
      - {batch: 1, concurrency: 1, duration: 45ms}
      - {batch: 4, concurrency: 1, duration: 120ms}
      - {batch: 8, concurrency: 1, duration: 240ms}
sessions:
  - name: pipe
    slo: 600ms
    modules:
      - {name: detect, model: det, rate: 60}
      - {name: recognize, model: rec, rate: 60, after: [detect]}
`

// TestLiveTCBeatsRoundRobin is the live test: a gateway and three sim
// backends of two hardware types on loopback, a two-module session planned by the
// planner, Poisson load at the planned rate for 20 s. Under TC dispatch every
// request is answered and at least 99% meet the SLO; the same slots under
// round-robin dispatch do measurably worse, and the test says by how much.
func TestLiveTCBeatsRoundRobin(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40 s live run")
	}
	specs := []harnessBackend{{hardware: "t4"}, {hardware: "t4"}, {hardware: "v100"}}
	plan, err := planner.Plan(mustLoad(t, liveProfiles), planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan: cost %.3f, latency %.1fms", plan.TotalCost, plan.Sessions[0].LatencyMs)
	for _, m := range plan.Sessions[0].Modules {
		for _, g := range m.Configs {
			t.Logf("  %s: %s b%d ×%.2f (rate %.1f, WCL %.1fms, budget %.1fms)", m.Name, g.Hardware, g.Batch, g.Machines, g.Rate, g.WCLMs, m.BudgetMs)
		}
	}
	reports := map[string]*loadgen.Report{}
	for _, dispatch := range []string{"tc", "rr"} {
		h := startHarnessWith(t, liveProfiles, dispatch, specs)
		rep, err := loadgen.Run(context.Background(), loadgen.Options{
			Target: h.url, Protocol: "http", Session: "pipe", Rate: 60, Arrival: "poisson", Seed: 7,
			Duration: 20 * time.Second, Drain: 5 * time.Second, Timeout: 5 * time.Second, SLO: 600 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		reports[dispatch] = rep
		att := 0.0
		if rep.SLOAttainment != nil {
			att = *rep.SLOAttainment
		}
		t.Logf("%s: sent %d, ok %d, errors %v, SLO attainment %.2f%%, p50 %.1fms p99 %.1fms max %.1fms",
			dispatch, rep.Sent, rep.OK, rep.Errors, 100*att, rep.P50Ms, rep.P99Ms, rep.MaxMs)
	}
	tc, rr := reports["tc"], reports["rr"]
	if tc.OK != tc.Sent {
		t.Errorf("TC: %d of %d requests answered successfully (errors %v)", tc.OK, tc.Sent, tc.Errors)
	}
	if tc.SLOAttainment == nil || *tc.SLOAttainment < 0.99 {
		t.Errorf("TC: SLO attainment %v, want ≥ 99%%", tc.SLOAttainment)
	}
	// Round-robin batches on every machine separately, so each batch collects
	// from a fraction of the stream and waits longer.
	t.Logf("round-robin vs TC on the same slots: p50 %.2fx, p99 %.2fx, SLO attainment %.2f%% vs %.2f%%",
		rr.P50Ms/tc.P50Ms, rr.P99Ms/tc.P99Ms, 100*val(rr.SLOAttainment), 100*val(tc.SLOAttainment))
	if !(rr.P50Ms > 1.05*tc.P50Ms || rr.P99Ms > 1.05*tc.P99Ms || val(rr.SLOAttainment) < val(tc.SLOAttainment)) {
		t.Errorf("round-robin is not measurably worse than TC: p50 %.1fms vs %.1fms, attainment %.4f vs %.4f",
			rr.P50Ms, tc.P50Ms, val(rr.SLOAttainment), val(tc.SLOAttainment))
	}
}

func mustLoad(t *testing.T, text string) *api.Config {
	t.Helper()
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "live.yaml", Data: []byte(text)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func val(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
