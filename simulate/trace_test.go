package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/planner"
)

// mmppTrace records horizon of an MMPP as a trace.
func mmppTrace(t testing.TB, m arrival.MMPP, horizon time.Duration, seed uint64) *arrival.Trace {
	t.Helper()
	p, err := arrival.Spec{Kind: "mmpp", MMPP: m}.New(seed)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := arrival.Record(p, horizon, "mmpp")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// On bursty arrivals (MMPP: 5× the mean for 1 s, every 9 s on average) the plan
// from the mean rate misses a 99% attainment target, the plan PlanForTrace finds
// meets it in simulation, and it costs more than the mean-rate plan and no more
// than peak provisioning.
func TestPlanForTrace(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tr := mmppTrace(t, arrival.MMPP{BurstRate: 250, BurstLength: time.Second, QuietRate: 25, QuietLength: 8 * time.Second}, 300*time.Second, 1)
	tp, err := PlanForTrace(cfg, planner.Options{}, 0.99, Options{Trace: tr, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		name string
		run  PlanRun
	}{{"mean", tp.Mean}, {"trace", tp.Trace}, {"peak", tp.Peak}} {
		t.Logf("%s plan at %.1f req/s: cost %.3f, attainment %.4f", r.name, r.run.RatePerSec, r.run.Plan.TotalCost, r.run.Attainment)
	}
	if tp.Mean.Attainment >= 0.99 {
		t.Errorf("mean-rate plan reaches %.4f on the bursts; the test needs a trace it misses", tp.Mean.Attainment)
	}
	if !tp.TracePassed || tp.Trace.Attainment < 0.99 {
		t.Errorf("trace plan attainment %.4f, want ≥ 0.99", tp.Trace.Attainment)
	}
	if c, m, p := tp.Trace.Plan.TotalCost, tp.Mean.Plan.TotalCost, tp.Peak.Plan.TotalCost; !(c > m && c <= p) {
		t.Errorf("trace plan cost %.3f, want above the mean-rate plan's %.3f and at most peak provisioning's %.3f", c, m, p)
	}
}

func TestTraceOptionsValidated(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planner.Plan(cfg, planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &arrival.Trace{Name: "t", Offsets: []time.Duration{0, time.Second}}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"mmpp without lengths", Options{Arrival: "mmpp", MMPP: arrival.MMPP{BurstRate: 10}, Duration: time.Second}, "mmpp burst length 0s: must be > 0"},
		{"trace without a trace", Options{Arrival: "trace"}, "trace arrivals: no trace given"},
		{"unknown session", Options{Arrival: "trace", Trace: tr, Session: "x"}, `session "x": not a planned session of the plan; planned: paper-chain`},
	} {
		if _, err := Run(plan, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name   string
		target float64
		o      Options
		want   string
	}{
		{"no trace", 0.99, Options{}, "no trace given"},
		{"target", 0, Options{Trace: tr}, "attainment target 0: must be in (0, 1]"},
		{"session", 0.99, Options{Trace: tr, Session: "x"}, `trace session "x": not in the config; sessions: paper-chain`},
		{"one arrival", 0.99, Options{Trace: &arrival.Trace{Name: "one", Offsets: []time.Duration{0}}}, "trace one: fewer than two arrivals"},
	} {
		if _, err := PlanForTrace(cfg, planner.Options{}, tc.target, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PlanForTrace %s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	// A session that cannot be planned for the trace is an error, not a pass on the
	// other sessions.
	tight := *cfg
	tight.Sessions = append([]api.Session{cfg.Sessions[0]}, cfg.Sessions...)
	tight.Sessions[0].Name, tight.Sessions[0].SLO = "tight", api.Duration(time.Millisecond)
	if _, err := PlanForTrace(&tight, planner.Options{}, 0.99, Options{Trace: tr, Session: "tight"}); err == nil || !strings.Contains(err.Error(), `planning session "tight" at 1 req/s`) {
		t.Errorf("an unplannable traced session: %v", err)
	}
	// The traced session's rates follow the trace; the config is not changed.
	before := cfg.Sessions[0].Modules[1].Rate
	c := withSessionRate(cfg, 0, 120)
	if got := c.Sessions[0].Modules[1].Rate; got != 120 || cfg.Sessions[0].Modules[1].Rate != before {
		t.Errorf("m3 at %v req/s (config's now %v), want 120 (config's still %v)", got, cfg.Sessions[0].Modules[1].Rate, before)
	}
}

// TestPlanChanges: a rate step from 50 to 150 req/s at 10 s, served by the
// plan for 50 req/s. Switched at the step to the plan for 150 req/s
// (Options.Changes), the requests after the step meet the SLO as the bigger
// plan's would; unswitched, they miss. The per-second counts add up to the
// report's, and a change that does not fit the plan is refused.
func TestPlanChanges(t *testing.T) {
	cfg, err := api.Load("../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plans := map[float64]*api.Plan{}
	for _, r := range []float64{50, 150} {
		if plans[r], err = planner.Plan(withSessionRate(cfg, 0, r), planner.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	step := &arrival.Trace{Name: "step"}
	for _, part := range []struct {
		rate float64
		from time.Duration
	}{{50, 0}, {150, 10 * time.Second}} {
		p, err := arrival.Spec{Kind: "poisson", Rate: part.rate}.New(uint64(part.rate))
		if err != nil {
			t.Fatal(err)
		}
		tr, err := arrival.Record(p, 10*time.Second, "poisson")
		if err != nil {
			t.Fatal(err)
		}
		for _, at := range tr.Offsets {
			step.Offsets = append(step.Offsets, part.from+at)
		}
	}
	after := func(changes []PlanChange) (all, after float64) {
		rep, err := Run(plans[50], Options{Arrival: "trace", Trace: step, Seed: 1, Changes: changes, PerSecond: true})
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Sessions[0]
		arrived, within, n := 0, 0, 0
		for k, sec := range s.Seconds {
			n += sec.Arrived
			if k >= 10 {
				arrived += sec.Arrived
				within += sec.Within
			}
		}
		if n != s.Requests {
			t.Errorf("per-second arrivals sum to %d; the report has %d requests", n, s.Requests)
		}
		return s.SLOAttainment, float64(within) / float64(arrived)
	}
	_, unswitched := after(nil)
	all, switched := after([]PlanChange{{At: 10 * time.Second, Plan: plans[150]}})
	t.Logf("after the step: %.2f%% unswitched, %.2f%% switched (all %.2f%%)", 100*unswitched, 100*switched, 100*all)
	if unswitched > 0.9 || switched < 0.99 {
		t.Errorf("attainment after the step %.2f%% unswitched, %.2f%% switched; want the small plan to miss and the switch to meet 99%%", 100*unswitched, 100*switched)
	}

	other := *plans[150]
	other.Sessions = append([]api.SessionPlan(nil), other.Sessions...)
	other.Sessions[0].Modules = other.Sessions[0].Modules[:1]
	for _, c := range []struct {
		changes []PlanChange
		want    string
	}{
		{[]PlanChange{{At: time.Second, Plan: &other}}, "session \"paper-chain\" has 1 modules, the plan 2"},
		{[]PlanChange{{At: 2 * time.Second, Plan: plans[150]}, {At: time.Second, Plan: plans[50]}}, "times must be ≥ 0 and in order"},
		{[]PlanChange{{At: time.Second}}, "plan change 0: no plan"},
	} {
		_, err := Run(plans[50], Options{Arrival: "trace", Trace: step, Changes: c.changes})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("changes %v: error %v; want one containing %q", c.changes, err, c.want)
		}
	}
}
