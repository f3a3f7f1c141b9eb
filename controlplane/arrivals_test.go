package controlplane

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// fakeClock is the controller's clock in these tests: the time the test
// sets; no ticks (the test steps the controller).
type fakeClock struct{ now *time.Time }

func (f fakeClock) Now() time.Time                                { return *f.now }
func (f fakeClock) Tick(time.Duration) (<-chan time.Time, func()) { return nil, func() {} }

// loop is the gateway's rate path on a fake clock: a DAGRunner over a
// synchronous fake runner tells the arrivals (the embedded control's rate
// monitor) of every request and module item; every StaticTick (one monitor
// bucket) the monitor's snapshot, expanded by cluster.ExpandRates, goes to
// a controller with the embedded control's timing (StaticSustainUp), which
// steps: EmbeddedControl.feed on a fake clock. published are the
// controller's decisions.
type loop struct {
	t         *testing.T
	now       time.Time
	cfg       *api.Config
	rates     *arrivals
	dag       *gateway.DAGRunner
	runner    *gatewaytest.FakeRunner
	ctl       *replan.Controller
	published []*replan.Replan
}

func newLoop(t *testing.T, cfg *api.Config) *loop {
	l := &loop{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), cfg: cfg, runner: gatewaytest.NewFakeRunner()}
	l.runner.Sync = true
	var err error
	if l.rates, err = newArrivals(l.now, replan.MonitorOptions{}); err != nil {
		t.Fatal(err)
	}
	l.rates.track(cfg)
	if l.dag, err = gateway.NewDAGRunner(l.runner, cfg.Sessions); err != nil {
		t.Fatal(err)
	}
	l.dag.ObserveArrivals(l.rates)
	members := make([]placement.Member, 20)
	for i := range members {
		members[i] = placement.Member{ID: "v100-" + string(rune('a'+i)), Hardware: "v100"}
	}
	l.ctl, err = replan.New(cfg, members, replan.Options{
		Clock:     fakeClock{&l.now},
		Tick:      StaticTick,
		SustainUp: StaticSustainUp,
		Plan:      func(c *api.Config) (*api.Plan, error) { return planner.Plan(c, planner.Options{}) },
		Target: replan.Publisher(func(r *replan.Replan) error {
			l.published = append(l.published, r)
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	l.ctl.Step(l.now)
	if len(l.published) != 1 {
		t.Fatalf("first step published %d plans; want the initial one", len(l.published))
	}
	return l
}

// run sends Poisson arrivals at rate req/s to session for secs seconds, one
// monitor bucket at a time (each bucket's count drawn from rng), reporting
// the rates and stepping the controller every bucket (StaticTick).
func (l *loop) run(rng *rand.Rand, session string, rate float64, secs int) {
	bucket := l.rates.mon.Bucket()
	if bucket != StaticTick {
		l.t.Fatalf("monitor bucket %v; the loop steps every bucket, as the embedded control every StaticTick (%v)", bucket, StaticTick)
	}
	for end := l.now.Add(time.Duration(secs) * time.Second); l.now.Before(end); {
		for range poisson(rng, rate*bucket.Seconds()) {
			var resp gateway.InferResponse
			if err := l.dag.Infer(context.Background(), session, &gateway.InferRequest{Inputs: gatewaytest.Input(1)}, &resp); err != nil {
				l.t.Fatal(err)
			}
		}
		l.now = l.now.Add(bucket)
		l.ctl.ObserveRates("gateway", cluster.ExpandRates(l.cfg, l.rates.mon.Snapshot(l.now)))
		l.ctl.Step(l.now)
	}
}

func (l *loop) causes() []string {
	var out []string
	for _, r := range l.published[1:] {
		out = append(out, r.Cause)
	}
	return out
}

// poisson draws a Poisson count of mean m (Knuth's, m small).
func poisson(rng *rand.Rand, m float64) int {
	limit, k, p := math.Exp(-m), 0, rng.Float64()
	for p > limit {
		k++
		p *= rng.Float64()
	}
	return k
}

// sessionConfig is one session on v100 (price 1) with the modules given,
// whose model "m" saturates at batch 16 (about 800 req/s a machine).
func sessionConfig(slo time.Duration, mods ...api.Module) *api.Config {
	p := api.Profile{Model: "m", Hardware: "v100"}
	for b := 1; b <= 16; b *= 2 {
		p.Entries = append(p.Entries, api.ProfileEntry{Batch: b, Concurrency: 1, Duration: api.Duration(time.Duration(5+b) * time.Millisecond)})
	}
	for i := range mods {
		mods[i].Model = "m"
	}
	return &api.Config{
		Hardware: []api.Hardware{{Name: "v100", Price: 1}},
		Profiles: []api.Profile{p},
		Sessions: []api.Session{{Name: "s", SLO: api.Duration(slo), Modules: mods}},
	}
}

// Counting every module does not re-plan on noise: a chain whose modules
// each see every request (paper-chain's m2 → m3 → a third, at 50 req/s
// under a 900 ms SLO, and at 400 req/s under 300 ms, eight seeds each), a
// fan-out declared at 2 items a request whose requests make 1, 2 or 3
// (OCR's boxes → cls, at 50 req/s, 40 seeds), and a detector at 40 images/s
// finding 0 or 12 objects declared with that distribution (16 seeds), 60 s
// of Poisson arrivals at the embedded control's timing: no re-plan. A
// fan-out's items are as noisy as the requests they come from (their
// count's variance is 2.3× a Poisson count's for 1–3 items, 12× for 0 or
// 12); ExpandRates judges their rise on the requests' noise. Without that
// (the recent span not divided by the items per request), seed 23 of the 40
// re-planned the 1–3 fan-out on noise; without the measured distribution's
// share of it (1 + SCV), 5 of the 16 0-or-12 seeds re-planned (cause rate).
func TestModuleCountsDoNotReplanOnNoise(t *testing.T) {
	chain := func(r float64, slo time.Duration) *api.Config {
		return sessionConfig(slo,
			api.Module{Name: "m2", Rate: r},
			api.Module{Name: "m3", Rate: r, After: []string{"m2"}},
			api.Module{Name: "m4", Rate: r, After: []string{"m3"}})
	}
	fan := sessionConfig(3*time.Second,
		api.Module{Name: "boxes", Rate: 50},
		api.Module{Name: "cls", Rate: 100, After: []string{"boxes"}},
		api.Module{Name: "rec", Rate: 100, After: []string{"cls"}})
	zeroOr12 := fanOutConfig(t, api.FanOut{{Items: 0, Share: 3}, {Items: 12, Share: 1}})
	oneToThree := func(rng *rand.Rand) int { return 1 + rng.IntN(3) }
	for _, tc := range []struct {
		name    string
		cfg     func() *api.Config
		rate    float64
		seeds   uint64
		objects func(*rand.Rand) int
	}{
		{"chain 50 req/s", func() *api.Config { return chain(50, 900*time.Millisecond) }, 50, 8, oneToThree},
		{"chain 400 req/s", func() *api.Config { return chain(400, 300*time.Millisecond) }, 400, 8, oneToThree},
		{"fan-out 2 items", func() *api.Config { return fan }, 50, 40, oneToThree},
		{"fan-out 0 or 12 items", func() *api.Config { return zeroOr12 }, 40, 16, zeroOrTwelve},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range tc.seeds {
				l := newLoop(t, tc.cfg())
				rng := rand.New(rand.NewPCG(seed, 35))
				detect := func([]api.Tensor) ([]api.Tensor, error) {
					n := tc.objects(rng)
					return []api.Tensor{{Name: "box", Datatype: "FP32", Shape: []int64{int64(n), 1}, Data: make([]byte, 4*n)}}, nil
				}
				l.runner.Fn["boxes"], l.runner.Fn["det"] = detect, detect
				l.run(rng, "s", tc.rate, 60)
				if len(l.published) != 1 {
					t.Errorf("seed %d: %d re-plans %v on noise; want none", seed, len(l.published)-1, l.causes())
				}
			}
		})
	}
}

// zeroOrTwelve is a detector's objects in an image: 0 in three images of
// four, 12 in the fourth, drawn from rng.
func zeroOrTwelve(rng *rand.Rand) int {
	if rng.IntN(4) == 0 {
		return 12
	}
	return 0
}

// fanOutConfig is scheduler/replan's testdata/fanout-learn.yaml (a
// detector det at 40 images/s whose recognizer rec, batches of at most 4,
// runs one item per object found, at 3 objects an image, under an 80 ms
// SLO) with rec's fanout f (nil: none).
func fanOutConfig(t *testing.T, f api.FanOut) *api.Config {
	t.Helper()
	cfg, err := api.Load("../scheduler/replan/testdata/fanout-learn.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if f != nil {
		f, _ = f.Normalized()
		cfg.Sessions[0].Modules[1].FanOut = f
	}
	return cfg
}

// A conditional branch's share learned through the gateway's counts: a
// router at 400 req/s whose items take branch a or b, declared half and
// half. 20 s at 50/50 re-plans nothing; then nine items in ten take a, and
// the controller re-plans (cause rate) with a at about 90% of the router's
// rate and, once b's 50/50 envelope has left the horizon, b at about 10%.
func TestBranchShareLearnedThroughTheGateway(t *testing.T) {
	const R = 400
	cfg := sessionConfig(300*time.Millisecond,
		api.Module{Name: "router", Rate: R},
		api.Module{Name: "a", Rate: R / 2, After: []string{"router"}},
		api.Module{Name: "b", Rate: R / 2, After: []string{"router"}})
	l := newLoop(t, cfg)
	rng := rand.New(rand.NewPCG(35, 1))
	shareA := 0.5
	l.runner.Fn["router"] = func(in []api.Tensor) ([]api.Tensor, error) {
		choice := int64(1)
		if rng.Float64() < shareA {
			choice = 0
		}
		return append(in, api.Tensor{Name: gateway.BranchOutput, Datatype: "INT64", Shape: []int64{1}, Data: gatewaytest.I64(choice)}), nil
	}
	l.run(rng, "s", R, 20)
	if len(l.published) != 1 {
		t.Fatalf("50/50 as declared: re-plans %v; want none", l.causes())
	}
	shareA = 0.9
	l.run(rng, "s", R, 90)
	for _, r := range l.published[1:] {
		if r.Cause != replan.CauseRate {
			t.Errorf("re-plans %v; want each with cause rate", l.causes())
			break
		}
	}
	if n := len(l.published) - 1; n < 1 || n > 2 {
		t.Fatalf("50/50 → 90/10: %d re-plans %v; want one (a up), or two (then b down)", n, l.causes())
	}
	for i, r := range l.published[1:] {
		t.Logf("re-plan %d at %v (%s): router %.0f, a %.0f, b %.0f req/s", i+1, r.At.Sub(l.published[0].At), r.Cause,
			r.Rates[replan.ModuleKey{Session: "s", Module: "router"}], r.Rates[replan.ModuleKey{Session: "s", Module: "a"}],
			r.Rates[replan.ModuleKey{Session: "s", Module: "b"}])
	}
	last := l.published[len(l.published)-1].Rates
	ra, rb, rr := last[replan.ModuleKey{Session: "s", Module: "a"}], last[replan.ModuleKey{Session: "s", Module: "b"}], last[replan.ModuleKey{Session: "s", Module: "router"}]
	if ra < 0.8*R || ra > 1.3*R || rb > 0.2*R || rr < R {
		t.Errorf("planned router %.0f, a %.0f, b %.0f req/s; want router ≥ %d, a about %.0f (0.8–1.3×), b at most %.0f", rr, ra, rb, R, 0.9*R, 0.2*R)
	}
}

// Counting an arrival, at a source or at any other module, takes no lock and
// allocates nothing; the items land on the module's counter (1001 calls:
// src 1001, fan 3003), none on an unknown session's or module's.
func TestArrivalsCountWithoutAllocating(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, err := newArrivals(t0, replan.MonitorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.track(sessionConfig(time.Second,
		api.Module{Name: "src", Rate: 10},
		api.Module{Name: "fan", Rate: 30, After: []string{"src"}}))
	if n := testing.AllocsPerRun(1000, func() { // and once to warm up
		a.Arrived("s")
		a.ModuleArrived("s", "fan", 3)
		a.ModuleArrived("s", "gone", 1)
		a.ModuleArrived("other", "fan", 1)
	}); n != 0 {
		t.Errorf("counting allocates %.0f times; want 0", n)
	}
	a.mon.Advance(t0.Add(a.mon.Bucket()))
	src, _ := a.source("s", "src").Closed(-1, nil)
	fan, _ := (*a.table.Load())["s"].modules["fan"].Closed(-1, nil)
	if len(src) != 1 || src[0] != 1001 || len(fan) != 1 || fan[0] != 3003 {
		t.Errorf("counted src %v, fan %v; want [1001], [3003]", src, fan)
	}
	a.track(sessionConfig(time.Second, // the next plan: the counts stay
		api.Module{Name: "src", Rate: 10},
		api.Module{Name: "fan", Rate: 30, After: []string{"src"}}))
	got := a.mon.Snapshot(t0.Add(a.mon.Bucket())).FanOuts()
	if want := (api.FanOut{{Items: 3, Share: 1001}}); len(got) != 1 || !slices.Equal(got[replan.ModuleKey{Session: "s", Module: "fan"}], want) {
		t.Errorf("fan-out distributions %v after the plan changed; want s/fan %v (1001 parent items of 3) and no other", got, want)
	}
}

// A fan-out's distribution learned through the gateway's counts: a
// detector at 40 images/s finding 0 objects in three images of four and 12
// in the fourth, drawn at random, whose recognizer (batches of at most 4)
// is declared at its mean, 3 objects an image, without a distribution. Once
// 1,000 images are counted (about 25 s) the controller re-plans rec (cause
// fanout) with the measured distribution, about {0: 0.75, 12: 0.25}, and
// more machines; no rate re-plan (the mean was right).
func TestFanOutDistributionLearnedThroughTheGateway(t *testing.T) {
	l := newLoop(t, fanOutConfig(t, nil))
	rng := rand.New(rand.NewPCG(37, 1))
	l.runner.Fn["det"] = func([]api.Tensor) ([]api.Tensor, error) {
		n := zeroOrTwelve(rng)
		return []api.Tensor{{Name: "box", Datatype: "FP32", Shape: []int64{int64(n), 1}, Data: make([]byte, 4*n)}}, nil
	}
	l.run(rng, "s", 40, 20)
	if len(l.published) != 1 {
		t.Fatalf("20 s (about 800 images): re-plans %v; want none before %d images", l.causes(), replan.MinFanOutSamples)
	}
	l.run(rng, "s", 40, 20)
	if got := l.causes(); !slices.Equal(got, []string{replan.CauseFanOut}) {
		t.Fatalf("40 s: re-plans %v; want one, with cause fanout", got)
	}
	rec := func(p *api.Plan) api.ModulePlan {
		for _, m := range p.Sessions[0].Modules {
			if m.Name == "rec" {
				return m
			}
		}
		t.Fatal("no rec in the plan")
		return api.ModulePlan{}
	}
	before, after := rec(l.published[0].Plan), rec(l.published[1].Plan)
	t.Logf("rec: cost %.3f → %.3f, planned fanout %v", before.Cost, after.Cost, after.FanOut)
	if len(after.FanOut) != 2 || after.FanOut[1].Items != 12 || math.Abs(after.FanOut[1].Share-0.25) > 0.05 {
		t.Errorf("planned fanout %v; want about {0: 0.75, 12: 0.25}", after.FanOut)
	}
	if after.Cost < before.Cost+1 {
		t.Errorf("rec cost %.3f → %.3f; want a whole machine more for twelve objects at once", before.Cost, after.Cost)
	}
}
