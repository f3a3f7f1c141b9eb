package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/internal/consultest"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/serving"
	"github.com/piccolo-serving/piccolo/simulate"
)

// TestGatewayConsulServesTracePlan is issue 21's Consul mode of `piccolo
// gateway --trace` and `--plan`, on a real Consul agent with sim backends
// registering there. With --trace (the first 60 s of the gamma CV² 16 trace
// of TestGatewayServesTraceLive), the gateway is elected re-planner and
// serves the trace plan for the hardware registered, v100 only at first;
// when t4 backends join, the elected re-planner plans again, and with the
// trace planner: the trace plan for both types, not the mean-rate plan.
// With --plan (a plan for three times the configured rate, as
// TestGatewayServesPlanFile), the cluster serves the file's plan. About 10 s.
func TestGatewayConsulServesTracePlan(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Consul agent and 46 backends")
	}
	agent := consultest.Start(t)
	dir := t.TempDir()
	cfgPath, base, cfg := writeDemo(t, dir)
	tr := gammaRecord(t, 50, 16, 60*time.Second, 1)
	tracePath := writeOffsets(t, dir, "gamma16.txt", tr.Offsets)
	// What the gateway's trace planner plans with v100 only, and with both.
	tp, err := serving.NewTracePlanner(cfg, serving.TracePlannerOptions{Trace: tr,
		Options: planner.Options{Policy: "piccolo"}, Load: simulate.Options{Seed: 1, Flush: dispatcher.FlushIdle}})
	if err != nil {
		t.Fatal(err)
	}
	on := func(hws ...string) *api.Config {
		c := *cfg
		c.Backends = nil
		for i, hw := range hws {
			c.Backends = append(c.Backends, api.Backend{ID: fmt.Sprint(i), Hardware: hw})
		}
		return &c
	}
	wantV100, err := tp.Plan(on("v100"))
	if err != nil {
		t.Fatal(err)
	}
	wantBoth, err := tp.Plan(on("v100", "t4"))
	if err != nil {
		t.Fatal(err)
	}
	mean, err := planner.Plan(cfg, planner.Options{Policy: "piccolo"})
	if err != nil {
		t.Fatal(err)
	}
	// The pool holds both trace plans, or the re-planner fits its plan to the
	// pool instead (replan's fitPool) and the plan on both never comes.
	need := map[string]int{}
	for _, p := range []*api.Plan{wantV100, wantBoth} {
		_, short, err := placement.Place(p, nil, nil, placement.Options{Provision: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range short.Hardware {
			need[h.Hardware] = max(need[h.Hardware], h.Needed)
		}
	}
	t.Logf("trace plan on v100 %.4g, on v100 and t4 %.4g (devices %v); mean-rate plan %.4g", wantV100.TotalCost, wantBoth.TotalCost, need, mean.TotalCost)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	register := func(hw string, from, to int) {
		for i := from; i < to; i++ {
			startBackend(t, ctx, &backendOptions{listen: "127.0.0.1:0", hardware: hw, files: []string{cfgPath}, executor: "sim",
				logFmt: "json", drain: time.Second, consul: agent.Addr(), id: fmt.Sprintf("%s-%d", hw, i)})
		}
	}
	register("v100", 0, max(22, need["v100"]))
	near := func(want *api.Plan) func(controlplane.PlanEvent) bool {
		return func(e controlplane.PlanEvent) bool {
			return math.Abs(e.Plan.TotalCost-want.TotalCost) < 1e-6*want.TotalCost
		}
	}
	gateway := func(ctx context.Context, prefix string, o gatewayOptions) *planEvents {
		evs := newPlanEvents()
		o.files, o.listen, o.grpcListen, o.policy, o.dispatch, o.flush = []string{cfgPath}, "127.0.0.1:0", "127.0.0.1:0", "piccolo", "tc", "idle"
		o.maxBody, o.slack, o.admission, o.logFmt, o.drain = 1<<20, 0.1, true, "json", time.Second
		o.consul, o.clusterPrefix, o.schedule, o.onPlan = agent.Addr(), prefix, true, evs.add
		startGateway(t, ctx, &o)
		return evs
	}

	tctx, tcancel := context.WithCancel(ctx)
	evs := gateway(tctx, "piccolo-trace", gatewayOptions{trace: simulate.Traffic{Source: arrival.Source{File: tracePath, Speed: 1}, Target: 0.99, Search: "ladder"}})
	evs.waitPlan(t, 60*time.Second, fmt.Sprintf("the trace plan on v100 (cost %.4g)", wantV100.TotalCost), near(wantV100))
	register("t4", 0, max(14, need["t4"]))
	e := evs.waitPlan(t, 60*time.Second, fmt.Sprintf("the trace plan on v100 and t4 (cost %.4g)", wantBoth.TotalCost), near(wantBoth))
	t.Logf("t4 joined: re-planned (%s) at cost %.4g", e.Cause, e.Plan.TotalCost)
	tcancel()

	hot := filepath.Join(dir, "hot.yaml")
	if err := os.WriteFile(hot, []byte(withRate(string(base), 150)), 0o644); err != nil {
		t.Fatal(err)
	}
	hotCfg, err := api.Load(hot)
	if err != nil {
		t.Fatal(err)
	}
	filePlan, err := planner.Plan(hotCfg, planner.Options{Policy: "piccolo"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(filePlan)
	if err != nil {
		t.Fatal(err)
	}
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	register("t4", 14, 24) // the file's plan runs on 24 t4 machines
	evs = gateway(ctx, "piccolo-plan", gatewayOptions{planFile: planPath})
	first := evs.waitPlan(t, 60*time.Second, "a plan", func(controlplane.PlanEvent) bool { return true })
	if !near(filePlan)(first) {
		b, _ := json.Marshal(first.Plan)
		t.Errorf("--plan: the cluster serves a plan of cost %.4g (%s); want the file's, %.4g\n%s", first.Plan.TotalCost, first.Cause, filePlan.TotalCost, b)
	}
}
