package cluster_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/internal/consultest"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

const testConfig = `
hardware:
  - {name: t4, price: 0.5}
profiles:
  - model: m
    hardware: t4
    entries:
      - {batch: 1, concurrency: 1, duration: 10ms}
      - {batch: 4, concurrency: 1, duration: 20ms}
sessions:
  - name: s
    slo: 200ms
    modules:
      - {name: a, model: m, rate: 50}
      - {name: b, model: m, rate: 50, after: [a]}
backends:
  - {id: t4-0, address: 127.0.0.1:1, hardware: t4}
  - {id: t4-1, address: 127.0.0.1:2, hardware: t4}
`

func loadTestConfig(t *testing.T) *api.Config {
	t.Helper()
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "test.yaml", Data: []byte(testConfig)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newClient(t *testing.T, addr string) *cluster.Client {
	t.Helper()
	c, err := cluster.New(addr, cluster.Options{WaitTime: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func planAt80(c *api.Config) (*api.Plan, error) {
	return planner.Plan(c, planner.Options{Policy: "piccolo", MaxUtilization: 0.8})
}

// records collects the plans a follower sees.
type records struct {
	mu  sync.Mutex
	all []*cluster.Record
	ch  chan *cluster.Record
}

func watchPlans(ctx context.Context, c *cluster.Client) *records {
	r := &records{ch: make(chan *cluster.Record, 100)}
	go func() {
		_ = c.WatchPlan(ctx, func(rec *cluster.Record) {
			r.mu.Lock()
			r.all = append(r.all, rec)
			r.mu.Unlock()
			r.ch <- rec
		})
	}()
	return r
}

func (r *records) wait(t *testing.T, timeout time.Duration, what string, ok func(*cluster.Record) bool) *cluster.Record {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case rec := <-r.ch:
			if ok(rec) {
				return rec
			}
		case <-deadline:
			t.Fatalf("no plan record with %s within %v", what, timeout)
		}
	}
}

func startCandidate(t *testing.T, ctx context.Context, c *cluster.Client, id string, seed *api.Config) (*cluster.Replanner, <-chan struct{}) {
	t.Helper()
	s, err := cluster.NewReplanner(c, cluster.ReplannerOptions{ID: id, Seed: seed, Plan: planAt80,
		Members: membership.Static(seed.Backends, seed.Hardware), Loop: replan.Options{Period: -1}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	return s, done
}

// The config key is written with check-and-set: a writer that read an old
// index is refused with ErrConfigChanged and the stored config stays.
func TestConfigCheckAndSet(t *testing.T) {
	agent := consultest.Start(t)
	ctx := context.Background()
	c := newClient(t, agent.Addr())
	cfg := loadTestConfig(t)
	if got, idx, err := c.Config(ctx); err != nil || got != nil || idx != 0 {
		t.Fatalf("empty cluster: Config = %v, %d, %v; want nil, 0, nil", got, idx, err)
	}
	idx, err := c.PutConfig(ctx, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutConfig(ctx, cfg, 0); !errors.Is(err, cluster.ErrConfigChanged) {
		t.Fatalf("second create: err = %v, want ErrConfigChanged", err)
	}
	changed := *cfg
	changed.Sessions = append([]api.Session(nil), cfg.Sessions...)
	changed.Sessions[0].SLO = api.Duration(300 * time.Millisecond)
	idx2, err := c.PutConfig(ctx, &changed, idx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutConfig(ctx, cfg, idx); !errors.Is(err, cluster.ErrConfigChanged) {
		t.Fatalf("write against the old index: err = %v, want ErrConfigChanged", err)
	}
	got, gotIdx, err := c.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gotIdx != idx2 || got.Sessions[0].SLO.D() != 300*time.Millisecond {
		t.Fatalf("stored config: index %d SLO %v; want index %d SLO 300ms", gotIdx, got.Sessions[0].SLO.D(), idx2)
	}
	if len(got.Backends) != 0 {
		t.Errorf("the shared config holds backends %v; they come from Consul membership", got.Backends)
	}
}

// Two candidates: one leads and publishes; when it stops, the standby takes
// over within a few seconds and publishes a plan under its own name; a config
// change in Consul is re-planned by the new leader.
func TestElectionFailoverAndConfigChange(t *testing.T) {
	agent := consultest.Start(t)
	cfg := loadTestConfig(t)
	root, cancelRoot := context.WithCancel(context.Background())
	defer cancelRoot()
	follower := newClient(t, agent.Addr())
	recs := watchPlans(root, follower)

	ctxA, stopA := context.WithCancel(root)
	a, doneA := startCandidate(t, ctxA, newClient(t, agent.Addr()), "cand-a", cfg)
	first := recs.wait(t, 20*time.Second, "a first plan", func(*cluster.Record) bool { return true })
	if first.Leader != "cand-a" || first.Cause != replan.CauseInitial {
		t.Fatalf("first record: leader %q cause %q; want cand-a, initial", first.Leader, first.Cause)
	}
	if !a.Leading() {
		t.Fatal("cand-a published but does not report leading")
	}
	served, err := cluster.DecodeConfig("record", []byte(first.Config))
	if err != nil {
		t.Fatal(err)
	}
	if len(served.Backends) != 2 || len(served.Sessions) != 1 {
		t.Fatalf("record config: %d backends, %d sessions; want 2 and 1", len(served.Backends), len(served.Sessions))
	}
	if err := planner.Verify(served, first.Plan); err != nil {
		t.Errorf("published plan does not check against its config: %v", err)
	}

	b, _ := startCandidate(t, root, newClient(t, agent.Addr()), "cand-b", cfg)
	time.Sleep(500 * time.Millisecond)
	if b.Leading() {
		t.Fatal("two candidates lead at once")
	}
	stopped := time.Now()
	stopA()
	<-doneA
	rec := recs.wait(t, 15*time.Second, "leader cand-b", func(r *cluster.Record) bool { return r.Leader == "cand-b" })
	t.Logf("clean stop of the leader → standby's first plan: %v (record version %d, previous %d)", time.Since(stopped).Round(time.Millisecond), rec.Version, first.Version)
	if rec.Version <= first.Version {
		t.Errorf("the new leader's version %d does not continue from %d", rec.Version, first.Version)
	}

	// An operator's change written to Consul is planned by the leader.
	c := newClient(t, agent.Addr())
	_, idx, err := c.Config(root)
	if err != nil {
		t.Fatal(err)
	}
	changed := *cfg
	changed.Sessions = append([]api.Session(nil), cfg.Sessions...)
	changed.Sessions[0].SLO = api.Duration(400 * time.Millisecond)
	newIdx, err := c.PutConfig(root, &changed, idx)
	if err != nil {
		t.Fatal(err)
	}
	rec = recs.wait(t, 10*time.Second, "the new config's index", func(r *cluster.Record) bool { return r.ConfigIndex >= newIdx })
	if rec.Cause != replan.CauseConfig || rec.Plan.Sessions[0].SLOMs != 400 {
		t.Fatalf("after the config change: cause %q, SLO %v ms; want config, 400", rec.Cause, rec.Plan.Sessions[0].SLOMs)
	}
}

// A leadership whose session does not hold the lock cannot publish: the
// fencing transaction refuses it and the plan key is untouched.
func TestDeposedLeaderCannotPublish(t *testing.T) {
	agent := consultest.Start(t)
	ctx := context.Background()
	c := newClient(t, agent.Addr())
	cfg := loadTestConfig(t)
	led := make(chan *cluster.Leadership, 1)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Campaign(cctx, "cand-x", 0, func(lctx context.Context, l *cluster.Leadership) {
			led <- l
			<-lctx.Done()
		})
	}()
	var l *cluster.Leadership
	select {
	case l = <-led:
	case <-time.After(20 * time.Second):
		t.Fatal("the only candidate was not elected within 20 s")
	}
	plan, err := planAt80(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Publish(ctx, &cluster.Record{Version: 1, Leader: "cand-x", Plan: plan}); err != nil {
		t.Fatalf("the leader's publish: %v", err)
	}
	cancel() // steps down: releases the lock and destroys its session
	<-done
	err = l.Publish(ctx, &cluster.Record{Version: 2, Leader: "cand-x", Plan: plan})
	if !errors.Is(err, cluster.ErrNotLeader) {
		t.Fatalf("publish after stepping down: err = %v, want ErrNotLeader", err)
	}
	rec, _, err := c.Plan(ctx)
	if err != nil || rec == nil || rec.Version != 1 {
		t.Fatalf("plan key after the refused publish: %+v, %v; want version 1", rec, err)
	}
}

// ExpandRates scales each session's measured source rate to every module by
// the configured ratios when only the sources were counted (a gateway from
// before every module was).
func TestExpandRates(t *testing.T) {
	cfg := loadTestConfig(t)
	cfg.Sessions[0].Modules[1].Rate = 150 // b: 3 items per request (fan-out)
	s := replan.RateSnapshot{Horizon: 30 * time.Second,
		Rates: []replan.ModuleRate{{Session: "s", Module: "a", Window: time.Second, Current: 10, Envelope: 20, Mean: 8}}}
	got := cluster.ExpandRates(cfg, s).Envelopes()
	if got[replan.ModuleKey{Session: "s", Module: "a"}] != 20 || got[replan.ModuleKey{Session: "s", Module: "b"}] != 60 {
		t.Fatalf("expanded envelopes %v; want a 20, b 60", got)
	}
	if cur := cluster.ExpandRates(cfg, s).Current(); cur[replan.ModuleKey{Session: "s", Module: "b"}] != 30 {
		t.Fatalf("expanded current rates %v; want b 30", cur)
	}
}

// ExpandRates takes a module's own measured rate where the gateway counted
// it (a branch at 9 of the source's 10 req/s where 5 were declared, a
// fan-out at 3 items a request where 1.25 were declared), its recent span
// divided by its items per request (3: 40 s → 13.3 s); the session's rate
// comes from its configured source, never from another module with a
// higher envelope (fan, 36, or a module no longer configured, 1000); a
// module the gateway did not count keeps the source × its configured ratio.
func TestExpandRatesTakesEachModulesOwn(t *testing.T) {
	cfg := &api.Config{Sessions: []api.Session{{Name: "s", Modules: []api.Module{
		{Name: "src", Rate: 10},
		{Name: "br", Rate: 5, After: []string{"src"}},
		{Name: "fan", Rate: 12.5, After: []string{"src"}},
		{Name: "old", Rate: 20, After: []string{"src"}},
		{Name: "fan12", Rate: 30, After: []string{"src"}},
	}}}}
	rate := func(module string, r float64) replan.ModuleRate {
		return replan.ModuleRate{Session: "s", Module: module, Window: 10 * time.Second, Current: r, Envelope: 1.2 * r, Mean: r, Recent: r, RecentSpan: 40 * time.Second}
	}
	// fan12: 0 or 12 items a request, 3 on average (SCV 3): its count is
	// 3 × (1 + 3) = 12 times as noisy as a Poisson count of its mean.
	fan12 := rate("fan12", 30)
	fan12.FanOut = api.FanOut{{Items: 0, Share: 750}, {Items: 12, Share: 250}}
	s := replan.RateSnapshot{Horizon: 30 * time.Second,
		Rates: []replan.ModuleRate{rate("br", 9), rate("fan", 30), rate("gone", 1000), rate("src", 10), fan12}}
	got := map[string]replan.ModuleRate{}
	for _, r := range cluster.ExpandRates(cfg, s).Rates {
		got[r.Module] = r
	}
	want := map[string]struct {
		envelope float64
		span     time.Duration
	}{
		"src":   {12, 40 * time.Second},
		"br":    {10.8, 40 * time.Second},
		"fan":   {36, 40 * time.Second / 3},
		"old":   {24, 20 * time.Second}, // Scaled(2): the span of 2 items a request
		"fan12": {36, 40 * time.Second / 12},
	}
	if len(got) != len(want) {
		t.Errorf("expanded modules %v; want src, br, fan, old, fan12", got)
	}
	if !slices.Equal(got["fan12"].FanOut, fan12.FanOut) {
		t.Errorf("fan12's measured distribution %v; want it handed on as measured, %v", got["fan12"].FanOut, fan12.FanOut)
	}
	for m, w := range want {
		r := got[m]
		if math.Abs(r.Envelope-w.envelope) > 1e-9 || (r.RecentSpan-w.span).Abs() > time.Millisecond {
			t.Errorf("%s: envelope %.2f req/s, recent span %v; want %.2f, %v", m, r.Envelope, r.RecentSpan, w.envelope, w.span)
		}
	}
}

// Under overload the modules after the sources see only the admitted
// requests' items. With half the demand refused, a branch that takes 90% of
// the admitted requests is planned at 90% of the demand, not of what was
// admitted; a module of an older gateway's report (no refusals reported)
// keeps its own rate.
func TestExpandRatesScalesToTheDemand(t *testing.T) {
	cfg := &api.Config{Sessions: []api.Session{{Name: "s", Modules: []api.Module{
		{Name: "src", Rate: 100},
		{Name: "br", Rate: 50, After: []string{"src"}},
	}}}}
	rate := func(module string, r float64) replan.ModuleRate {
		return replan.ModuleRate{Session: "s", Module: module, Window: 10 * time.Second, Current: r, Envelope: 1.2 * r, Mean: r, Recent: r, RecentSpan: 40 * time.Second}
	}
	for _, tc := range []struct {
		name    string
		refused float64 // req/s; <0: not reported
		want    float64 // br's mean, req/s
	}{
		{"half refused", 50, 90},
		{"none refused", 0, 45},
		{"not reported", -1, 45},
		{"all refused: at most 20×", 100, 900},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := []replan.ModuleRate{rate("src", 100), rate("br", 45)}
			if tc.refused >= 0 {
				rs = append(rs, rate(replan.RefusedModule, tc.refused))
			}
			got := map[string]replan.ModuleRate{}
			for _, r := range cluster.ExpandRates(cfg, replan.RateSnapshot{Horizon: 30 * time.Second, Rates: rs}).Rates {
				got[r.Module] = r
			}
			if len(got) != 2 || math.Abs(got["src"].Mean-100) > 1e-9 {
				t.Fatalf("expanded %v; want src at 100 req/s and br", got)
			}
			if br := got["br"]; math.Abs(br.Mean-tc.want) > 1e-9 || math.Abs(br.Envelope-1.2*tc.want) > 1e-9 {
				t.Errorf("br: mean %.1f, envelope %.1f req/s; want %.1f, %.1f", br.Mean, br.Envelope, tc.want, 1.2*tc.want)
			}
		})
	}
}

// A dev agent keeps nothing across a restart. The candidate that leads next
// seeds the config it last saw in Consul (an operator's change included), not
// its own files.
func TestReseedAfterConsulLostItsKV(t *testing.T) {
	agent := consultest.Start(t)
	cfg := loadTestConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recs := watchPlans(ctx, newClient(t, agent.Addr()))
	startCandidate(t, ctx, newClient(t, agent.Addr()), "cand-a", cfg)
	recs.wait(t, 20*time.Second, "a first plan", func(*cluster.Record) bool { return true })

	c := newClient(t, agent.Addr())
	_, idx, err := c.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	changed := *cfg
	changed.Sessions = append([]api.Session(nil), cfg.Sessions...)
	changed.Sessions[0].SLO = api.Duration(400 * time.Millisecond)
	newIdx, err := c.PutConfig(ctx, &changed, idx)
	if err != nil {
		t.Fatal(err)
	}
	recs.wait(t, 10*time.Second, "the changed config", func(r *cluster.Record) bool { return r.ConfigIndex >= newIdx })

	agent.Restart() // empty KV, no sessions, no services
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, _, err := c.Config(ctx)
		if err == nil && got != nil {
			if slo := got.Sessions[0].SLO.D(); slo != 400*time.Millisecond {
				t.Fatalf("re-seeded config has SLO %v, want the operator's 400ms (the files say 200ms)", slo)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no config in Consul 30 s after its restart (last error %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
