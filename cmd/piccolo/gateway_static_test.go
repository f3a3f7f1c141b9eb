package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// staticStepConfig is consulTestConfig's session on a static backends list.
var staticStepConfig = strings.Replace(consulTestConfig, "membership: consul\n", "", 1)

// TestGatewayStaticRateStep is issue 11's re-planning without Consul: a
// gateway with a static backends list of three sim backends, Poisson load at
// the configured rate R (one backend's worth), then 2R. The embedded control
// loop must put a "rate" plan on more backends live within 2 s of the step (3 s
// allowed on a loaded machine), keep ≥ 99% of requests within the SLO across
// the step, and, when the rate falls back to R, release the extra backends
// after the hysteresis (shortened here: a 2 s horizon, 2 s sustained).
func TestGatewayStaticRateStep(t *testing.T) {
	if testing.Short() {
		t.Skip("25 s of load")
	}
	const rate = 150.0
	const slo = 400 * time.Millisecond
	base, err := api.LoadBytes(api.NamedDoc{Name: "p.yaml", Data: []byte(fmt.Sprintf(staticStepConfig, rate))})
	if err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(staticStepConfig, rate) + testharness.StartSimBackends(t, base.Profiles, 3)
	cfgPath := filepath.Join(t.TempDir(), "piccolo.yaml")
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := newPlanEvents()
	// startConsulGateway without a Consul address: the embedded control.
	url := startConsulGateway(t, ctx, cfgPath, "", replan.Options{SustainDown: 2 * time.Second},
		replan.MonitorOptions{Horizon: 2 * time.Second}, evs)

	var cur atomic.Value
	cur.Store(rate)
	lctx, stopLoad := context.WithCancel(ctx)
	load := startLoad(lctx, url+"/v2/models/s/infer", inferBody, func() float64 { return cur.Load().(float64) })
	loadStart := time.Now()
	time.Sleep(5 * time.Second)

	first := evs.last()
	stepUp := time.Now()
	cur.Store(2 * rate)
	up := evs.waitPlan(t, 10*time.Second, "cause rate and a higher cost", func(e controlplane.PlanEvent) bool {
		return e.Cause == replan.CauseRate && e.Plan.TotalCost > first.Plan.TotalCost*1.4
	})
	took := up.Live.Sub(stepUp)
	// The metrics agree: piccolo_plan_timestamp_seconds is when the plan went live.
	ts := metricValue(t, url, "piccolo_plan_timestamp_seconds")
	t.Logf("R→2R: rate plan live %v after the step (trigger +%v; metric timestamp +%.3fs): cost %.2f → %.2f, backends %v → %v",
		took.Round(time.Millisecond), up.Trigger.Sub(stepUp).Round(time.Millisecond), ts-float64(stepUp.UnixNano())/1e9,
		first.Plan.TotalCost, up.Plan.TotalCost, placedOn(first.Plan), placedOn(up.Plan))
	if took > 3*time.Second {
		t.Errorf("the rate plan went live %v after the step; want within 2 s (3 s on a loaded machine)", took)
	}
	if len(placedOn(up.Plan)) <= len(placedOn(first.Plan)) {
		t.Errorf("the rate plan uses backends %v, no more than before (%v)", placedOn(up.Plan), placedOn(first.Plan))
	}
	time.Sleep(10 * time.Second)

	high := evs.last()
	stepDown := time.Now()
	cur.Store(rate)
	down := evs.waitPlan(t, 15*time.Second, "cause rate and a lower cost", func(e controlplane.PlanEvent) bool {
		return e.Cause == replan.CauseRate && e.Plan.TotalCost < high.Plan.TotalCost*0.8
	})
	t.Logf("2R→R: rate plan live %v after the step: cost %.2f → %.2f, backends %v → %v", down.Live.Sub(stepDown).Round(time.Millisecond),
		high.Plan.TotalCost, down.Plan.TotalCost, placedOn(high.Plan), placedOn(down.Plan))
	if len(placedOn(down.Plan)) >= len(placedOn(high.Plan)) {
		t.Errorf("the step down kept backends %v (was %v): none released", placedOn(down.Plan), placedOn(high.Plan))
	}
	time.Sleep(2 * time.Second)
	stopLoad()
	outs := load.wait()

	across, n := attainment(outs, loadStart.Add(time.Second), stepDown, slo)
	after, m := attainment(outs, stepDown, stepDown.Add(time.Hour), slo)
	t.Logf("SLO attainment: R and the step to 2R %.4f of %d; after the step down %.4f of %d", across, n, after, m)
	if across < 0.99 || after < 0.99 {
		misses := map[time.Duration]int{}
		for _, o := range outs {
			if o.status != 200 || o.latency > slo {
				misses[o.sent.Sub(stepUp).Truncate(250*time.Millisecond)]++
			}
		}
		t.Logf("requests out of the SLO by when they were sent (from the step up, 250 ms buckets): %v", misses)
		evs.mu.Lock()
		for _, e := range evs.evs {
			t.Logf("plan %s live at %+v: cost %.2f on %v", e.Cause, e.Live.Sub(stepUp).Round(time.Millisecond), e.Plan.TotalCost, placedOn(e.Plan))
		}
		evs.mu.Unlock()
	}
	if across < 0.99 {
		t.Errorf("SLO attainment across the step %.4f of %d requests; want ≥ 0.99", across, n)
	}
	if after < 0.99 {
		t.Errorf("SLO attainment after the step down %.4f of %d requests; want ≥ 0.99", after, m)
	}
	// Two at least: up and down (a first step up planned at the rate measured
	// while it still rose may be followed by a second one).
	if n := metricValue(t, url, `piccolo_plan_replans_total{cause="rate"}`); n < 2 {
		t.Errorf("piccolo_plan_replans_total for cause rate: %v, want ≥ 2", n)
	}
}

// metricValue reads one sample (name with its labels) from the gateway's /metrics.
func metricValue(t testing.TB, url, name string) float64 {
	t.Helper()
	line := metricLine(t, url, name)
	v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
	if err != nil {
		t.Fatalf("%s: %q: %v", name, line, err)
	}
	return v
}
