package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/internal/consultest"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// TestCalibrationsKV: each gateway's calibration is kept under its own key
// in a real Consul agent's KV; Calibrations lists the asking gateway's first.
func TestCalibrationsKV(t *testing.T) {
	agent := consultest.Start(t)
	c := newClient(t, agent.Addr())
	ctx := context.Background()
	for gw, v := range map[string]string{"a": `{"from":"a"}`, "b": `{"from":"b"}`, "c": `{"from":"c"}`} {
		if err := c.PutCalibration(ctx, gw, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Calibrations(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, d := range got {
		s = append(s, string(d))
	}
	if len(s) != 3 || s[0] != `{"from":"b"}` || s[1] != `{"from":"a"}` || s[2] != `{"from":"c"}` {
		t.Errorf("Calibrations(b) = %v; want b's first, then a's and c's", s)
	}
}

var (
	_ cluster.Calibration = (*calibrate.Estimator)(nil)
	_ replan.Calibration  = (*cluster.Followed)(nil)
)

// TestLeaderFollowsGatewaysCalibration: the elected re-planner's own
// calibration measured nothing; another gateway publishes, after the first
// plan, that the plan's devices run 1.5× their profile. Within a few
// CalibrationEvery the leader re-plans with cause drift from the merged
// calibration: the new plan's durations are the other gateway's.
func TestLeaderFollowsGatewaysCalibration(t *testing.T) {
	agent := consultest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClient(t, agent.Addr())
	seed := loadTestConfig(t)
	own, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs := watchPlans(ctx, c)
	s, err := cluster.NewReplanner(c, cluster.ReplannerOptions{ID: "leader", Seed: seed, Plan: planAt80,
		Members: membership.Static(seed.Backends, seed.Hardware),
		Loop:    replan.Options{Period: -1, Tick: 100 * time.Millisecond, DriftHold: 300 * time.Millisecond, Calibration: own}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	first := recs.wait(t, 20*time.Second, "cause initial", func(r *cluster.Record) bool { return r.Cause == replan.CauseInitial })

	other, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other.SetOffline(seed)
	planned := map[int]float64{} // batch -> the first plan's duration (ms)
	for m := range first.Plan.Machines() {
		g := m.Group
		planned[g.Batch] = g.DurationMs
		for range 12 {
			other.Observe(m.Module.Model, g.Hardware, m.Backend, g.Batch, g.Concurrency, time.Duration(1.5*g.DurationMs*float64(time.Millisecond)), time.Now())
		}
	}
	data, err := other.Marshal(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	put := time.Now()
	if err := c.PutCalibration(ctx, "gw-other", data); err != nil {
		t.Fatal(err)
	}
	drift := recs.wait(t, 20*time.Second, "cause drift", func(r *cluster.Record) bool { return r.Cause == replan.CauseDrift })
	t.Logf("drift plan published %v after the other gateway's calibration", time.Since(put).Round(time.Millisecond))
	for m := range drift.Plan.Machines() {
		if was, ok := planned[m.Group.Batch]; ok && m.Group.DurationMs < 1.45*was {
			t.Errorf("drift plan's %s b%d at %.1fms; want the other gateway's measured %.1fms", m.Module.Name, m.Group.Batch, m.Group.DurationMs, 1.5*was)
		}
	}
}

// TestFollowedMergesAndSkipsMalformed: Refresh merges the own estimator
// with every gateway's value in KV, skipping one that does not parse; the
// merge answers Calibrate with the newest series per device, whoever sent
// it (here another gateway's, not the scheduler's own older one).
func TestFollowedMergesAndSkipsMalformed(t *testing.T) {
	agent := consultest.Start(t)
	c := newClient(t, agent.Addr())
	ctx := context.Background()
	cfg := loadTestConfig(t)
	now := time.Now()
	own, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 12 {
		own.Observe("m", "t4", "t4-0", 4, 1, 10*time.Millisecond, now.Add(-time.Minute)) // older than other's t4-0
		other.Observe("m", "t4", "t4-0", 4, 1, 30*time.Millisecond, now)                 // newer
		other.Observe("m", "t4", "t4-1", 4, 1, 30*time.Millisecond, now)                 // other's only
	}
	data, err := other.Marshal(now)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PutCalibration(ctx, "gw-other", data); err != nil {
		t.Fatal(err)
	}
	if err := c.PutCalibration(ctx, "gw-broken", []byte("{")); err != nil {
		t.Fatal(err)
	}
	f := cluster.NewFollowed(own, c, nil)
	f.SetOffline(cfg)
	if got := f.Calibrate(cfg, now); got != cfg {
		t.Error("before the first Refresh the merge is empty: Calibrate should return the offline config")
	}
	if err := f.Refresh(ctx); err != nil {
		t.Fatalf("Refresh with one malformed value: %v; want it skipped", err)
	}
	cal := f.Calibrate(cfg, now)
	for _, p := range cal.Profiles {
		for _, en := range p.Entries {
			if en.Batch == 4 && en.Duration.D() != 30*time.Millisecond {
				t.Errorf("merged %s b4 = %v; want 30ms (other's t4-0 and t4-1, not the lower median with the own older 10ms on t4-0)", p.Model, en.Duration.D())
			}
		}
	}
}
