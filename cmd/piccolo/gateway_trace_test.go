package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/evaluation"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/simulate"
)

// demoWithBackends writes the demo config and a static backends list (never
// dialled by these tests: they fail before the gateway starts) to dir.
func demoWithBackends(t *testing.T, dir string) (cfgPath, bePath string) {
	t.Helper()
	base, err := os.ReadFile("../../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgPath = filepath.Join(dir, "piccolo.yaml")
	bePath = filepath.Join(dir, "backends.yaml")
	if err := os.WriteFile(cfgPath, base, 0o644); err != nil {
		t.Fatal(err)
	}
	list := "backends:\n  - {id: v100-0, address: \"127.0.0.1:1\", hardware: v100}\n  - {id: t4-0, address: \"127.0.0.1:2\", hardware: t4}\n"
	if err := os.WriteFile(bePath, []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgPath, bePath
}

// runGatewayCmd runs `piccolo gateway args...` and returns its error; the
// cases here all fail before serving.
func runGatewayCmd(t *testing.T, args ...string) error {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"gateway", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--watch=false"}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return cmd.ExecuteContext(ctx)
}

func TestGatewayTraceFlagErrors(t *testing.T) {
	dir := t.TempDir()
	cfg, be := demoWithBackends(t, dir)
	trace := filepath.Join(dir, "trace.txt")
	if err := os.WriteFile(trace, []byte("0\n0.1\n0.2\n0.25\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(`{"policy": "piccolo", "sessions": [{"name": "paper-chain"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--speed", "2"}, "--speed given without --trace"},
		{[]string{"--skip", "1s", "--attainment", "0.9"}, "--skip, --attainment given without --trace"},
		{[]string{"--trace-search", "inferline"}, "--trace-search given without --trace"},
		{[]string{"--trace", trace, "--plan", plan}, "--trace and --plan both given"},
		{[]string{"--trace", trace, "--trace-search", "greedy"}, `trace search "greedy": allowed: ladder, inferline`},
		{[]string{"--trace", trace, "--attainment", "1.5"}, "attainment target 1.5: must be in (0, 1]"},
		{[]string{"--trace", trace, "--speed", "0"}, "trace speed 0: must be a finite number > 0"},
		{[]string{"--trace", trace, "--skip", "10s"}, "no arrival after skipping 10s"},
		{[]string{"--trace", trace, "--trace-session", "chain"}, `trace session "chain": not in the config; sessions: paper-chain`},
		{[]string{"--trace", filepath.Join(dir, "none.txt")}, "none.txt"},
		{[]string{"--plan", filepath.Join(dir, "none.json")}, "--plan: open"},
		{[]string{"--plan", trace}, "--plan: " + trace + ":1: plan JSON"},
		{[]string{"--tune"}, "--tune needs --trace"},
		{[]string{"--trace", trace, "--tune", "--consul", "127.0.0.1:1"}, "--tune with --consul"},
		{[]string{"--trace", trace, "--tune", "--tune-scope", "session"}, `--tune-scope: tuner scope "session": must be one of module, pipeline`},
		{[]string{"--trace", trace, "--tune-scope", "pipeline"}, "--tune-scope pipeline needs --tune"},
		{[]string{"--session-utilization", "paper-chain=0.7"}, "--session-utilization needs --max-utilization"},
		{[]string{"--max-utilization", "0.8", "--session-utilization", "paper-chain=1.5"}, "--session-utilization paper-chain=1.5: the cap must be a number in (0, 1]"},
		{[]string{"--max-utilization", "0.8", "--session-utilization", "chain=0.7"}, `--session-utilization chain: the config has no session "chain" (it has paper-chain)`},
	} {
		err := runGatewayCmd(t, append([]string{"-c", cfg, "-c", be}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("gateway %v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}

// TestGatewayPlanMismatch: a plan JSON that is not the config's plan is
// refused, naming the session or module and what differs.
func TestGatewayPlanMismatch(t *testing.T) {
	dir := t.TempDir()
	cfgPath, be := demoWithBackends(t, dir)
	cfg, err := api.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	good, err := planner.Plan(cfg, planner.Options{Policy: "piccolo"})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, edit func(p *api.Plan)) string {
		b, _ := json.Marshal(good)
		var p api.Plan
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		edit(&p)
		b, _ = json.Marshal(&p)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct {
		name string
		edit func(p *api.Plan)
		want string
	}{
		{"session", func(p *api.Plan) { p.Sessions[0].Name = "other" },
			`session "other" is in the plan but not in the config; session "paper-chain" is in the config but not in the plan`},
		{"module", func(p *api.Plan) { p.Sessions[0].Modules[1].Name = "m9" },
			`session "paper-chain" module 1: the plan has "m9", the config "m3"`},
		{"model", func(p *api.Plan) { p.Sessions[0].Modules[0].Model = "m7" },
			`session "paper-chain" module "m2": the plan runs model "m7", the config allows m2`},
		{"fused", func(p *api.Plan) { p.Sessions[0].Modules = p.Sessions[0].Modules[:1] },
			"the plan has 1 modules (m2), the config 2 (m2, m3); a fused plan needs `piccolo plan --no-fusion`"},
		{"unplanned", func(p *api.Plan) { p.Sessions[0].Error = "SLO too short" },
			`session "paper-chain" is not planned in the plan: SLO too short`},
		{"check", func(p *api.Plan) { p.Sessions[0].Modules[0].Configs[0].Machines /= 4 },
			`fails its check against the config at the plan's rates: session "paper-chain" module "m2" group 0`},
	} {
		err := runGatewayCmd(t, "-c", cfgPath, "-c", be, "--plan", write(c.name+".json", c.edit))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestGatewayServesTraceLive is issue 21's "serve the burst plan" check: a
// gamma CV² 16 trace at the demo chain's rate (50 req/s), 120 s recorded with
// seed 1; `piccolo gateway --trace FILE --duration 60s` plans on its first
// half and serves the plan on sim backends of the demo's hardware; `piccolo
// loadgen --arrival trace --trace FILE --skip 60s` replays the second half
// open loop. At least 99% of all requests must meet the SLO, the issue's
// criterion; the plan simulates at 98.86% on this second half, every miss
// in one burst at t = 2 s that the idle flush meets with small batches, so on
// a loaded machine the check fails about as often as it passes
// (docs/traffic.md, "Where the misses are"). It logs the seconds with a
// miss, live and simulated, the trace plan's cost beside the mean-rate,
// coarse-grained and peak plans (simulated on the first half, as `piccolo
// plan --trace` prints them) and every plan the gateway made live. About 80 s:
//
//	PICCOLO_BURST_SERVE=1 go test -count=1 -run TestGatewayServesTraceLive -v ./cmd/piccolo
func TestGatewayServesTraceLive(t *testing.T) {
	if os.Getenv("PICCOLO_BURST_SERVE") == "" {
		t.Skip("set PICCOLO_BURST_SERVE=1: about 80 s live")
	}
	const half = 60 * time.Second
	tr := gammaRecord(t, 50, 16, 2*half, 1)
	dir := t.TempDir()
	if d := os.Getenv("PICCOLO_BURST_SERVE_DIR"); d != "" {
		dir = d // keep the trace for `piccolo plan --trace`
	}
	tracePath := writeOffsets(t, dir, "gamma16.txt", tr.Offsets)
	cfgPath, _, cfg := writeDemo(t, dir)
	// The plans `piccolo plan --trace FILE --duration 60s --flush idle` prints.
	tp, err := simulate.PlanForTraceWith("ladder", cfg, planner.Options{Policy: "piccolo"}, 0.99,
		simulate.Options{Trace: tr, Duration: half, Seed: 1, Flush: dispatcher.FlushIdle})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	tp.WriteTable(&table)
	t.Logf("plans on the first half:\n%s", table.String())
	second, err := tr.Window(half, 1)
	if err != nil {
		t.Fatal(err)
	}
	simRep, err := simulate.Run(tp.Trace.Plan, simulate.Options{Flush: dispatcher.FlushIdle, Arrival: "trace", Trace: second,
		Admission: true, PerSecond: true})
	if err != nil {
		t.Fatal(err)
	}
	var simMiss strings.Builder
	for k, sec := range simRep.Sessions[0].Seconds {
		if sec.Within < sec.Arrived {
			fmt.Fprintf(&simMiss, "t=%ds: %d of %d; ", k, sec.Arrived-sec.Within, sec.Arrived)
		}
	}
	t.Logf("the trace plan simulated on the second half as the gateway serves it: %.2f%% within the SLO; seconds with a miss: %s",
		100*simRep.Sessions[0].SLOAttainment, simMiss.String())

	// A pool of the trace plan's machines, each its own backend, plus one of
	// each type for a re-plan to grow onto.
	pool := poolOf(tp.Trace.Plan)
	pool["v100"]++
	pool["t4"]++
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bePath := startSimPool(t, ctx, dir, cfgPath, pool)
	var mu sync.Mutex
	var events []string
	start := time.Now()
	o := &gatewayOptions{files: []string{cfgPath, bePath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", dispatch: "tc", flush: "idle", maxBody: 1 << 20, slack: 0.1, admission: true,
		logFmt: "json", drain: time.Second,
		trace: simulate.Traffic{Source: arrival.Source{File: tracePath, Speed: 1}, Duration: half, Target: 0.99, Search: "ladder"},
		onPlan: func(e controlplane.PlanEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, fmt.Sprintf("%.1fs %s: cost %.4g", time.Since(start).Seconds(), e.Cause, e.Plan.TotalCost))
		}}
	url, _ := startGateway(t, ctx, o)
	mu.Lock()
	first := events[0]
	mu.Unlock()
	if !strings.HasSuffix(first, fmt.Sprintf("cost %.4g", tp.Trace.Plan.TotalCost)) {
		t.Errorf("first plan live: %s; want the trace plan's cost %.4g", first, tp.Trace.Plan.TotalCost)
	}
	r := replayTrace(t, url, tracePath, half)
	mu.Lock()
	t.Logf("plans live: %s", strings.Join(events, "; "))
	mu.Unlock()
	t.Logf("pool %v; second half live: %d sent, %d ok, errors %v, SLO attainment %.2f%%, p99 %.0f ms",
		pool, r.Sent, r.OK, r.Errors, 100*r.SLOAttainment, r.P99Ms)
	t.Logf("seconds with a miss (from the start of the second half): %s", r.misses())
	if r.SLOAttainment < 0.99 {
		t.Errorf("SLO attainment of the second half %.2f%%: want ≥ 99%%", 100*r.SLOAttainment)
	}
}

// TestGatewayServesPlanFile: `piccolo gateway --plan FILE` serves the plan
// `piccolo plan --no-fusion -o json` wrote (here one planned for three times
// the configured rate, as a trace plan is), not a plan of its own.
func TestGatewayServesPlanFile(t *testing.T) {
	dir := t.TempDir()
	base, err := os.ReadFile("../../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, base, 0o644); err != nil {
		t.Fatal(err)
	}
	hot := filepath.Join(dir, "hot.yaml")
	if err := os.WriteFile(hot, []byte(withRate(string(base), 150)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"plan", "-c", hot, "--no-fusion", "-o", "json"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("plan: %v\n%s", err, errOut.String())
	}
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var want api.Plan
	if err := json.Unmarshal(out.Bytes(), &want); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	list := "backends:\n"
	for i, hw := range []string{"v100", "t4"} {
		addr, _ := startBackend(t, ctx, &backendOptions{listen: "127.0.0.1:0", hardware: hw, files: []string{cfgPath},
			executor: "sim", logFmt: "json", drain: time.Second})
		list += fmt.Sprintf("  - {id: b%d, address: %q, hardware: %s}\n", i, addr, hw)
	}
	bePath := filepath.Join(dir, "backends.yaml")
	if err := os.WriteFile(bePath, []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	plans := make(chan *api.Plan, 8)
	startGateway(t, ctx, &gatewayOptions{files: []string{cfgPath, bePath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", dispatch: "tc", flush: "idle", maxBody: 1 << 20, slack: 0.1, admission: true, logFmt: "json", drain: time.Second,
		planFile: planPath, onPlan: func(e controlplane.PlanEvent) { plans <- e.Plan }})
	got := <-plans
	if got.TotalCost != want.TotalCost || got.Sessions[0].Modules[0].Rate != 150 {
		t.Errorf("served plan: cost %.4g, m2 at %.4g req/s; want the file's, cost %.4g at 150 req/s", got.TotalCost, got.Sessions[0].Modules[0].Rate, want.TotalCost)
	}
}

// TestGatewayTunerRateStepLive is the tuner live on a rate step: the demo
// chain planned with --trace on 60 s of gamma CV² 16 at 50 req/s; the
// replay is 20 s of the same process at 50 req/s, then 30 s at 100 req/s.
// The gateway serves it twice: with --tune (the tuner scales the machines,
// no re-plan), and without (today's control loop re-plans for the trace
// scaled to the measured envelope). It logs the plans made live over time,
// the attainment of each run (all, and from the step on) and the
// machine-seconds served over the replay; it asserts that the tuner scaled up
// within 2 s of the step and that its run kept at least the control loop's
// attainment minus a point (timing on a shared machine). About 2 minutes;
// PICCOLO_TUNE_SHAPE=ramp replays TestTuningComparison's diurnal ramp
// instead (about 5 minutes). PICCOLO_TUNE_SCOPE=pipeline runs coarse-grained
// tuning instead (--tune --tune-scope pipeline: the coarse-grained plan
// scaled in whole pipeline replicas, on a pool twice that plan's), one run,
// asserting that it scaled up after the change:
//
//	PICCOLO_TUNE_LIVE=1 go test -count=1 -run TestGatewayTunerRateStepLive -v ./cmd/piccolo
func TestGatewayTunerRateStepLive(t *testing.T) {
	if os.Getenv("PICCOLO_TUNE_LIVE") == "" {
		t.Skip("set PICCOLO_TUNE_LIVE=1: about 2 minutes live")
	}
	dir := t.TempDir()
	record := func(rate float64, d time.Duration, seed uint64) *arrival.Trace {
		return gammaRecord(t, rate, 16, d, seed)
	}
	write := func(name string, offs []time.Duration) string { return writeOffsets(t, dir, name, offs) }
	const before = 20 * time.Second
	sample := record(50, 60*time.Second, 1)
	samplePath := write("sample.txt", sample.Offsets)
	step := append([]time.Duration(nil), record(50, before, 2).Offsets...)
	for _, at := range record(100, 30*time.Second, 3).Offsets {
		step = append(step, before+at)
	}
	change := before
	if os.Getenv("PICCOLO_TUNE_SHAPE") == "ramp" {
		// The diurnal ramp of TestTuningComparison: 50 → 150 → 50 req/s
		// over 120 s, gamma CV² 16 warped to it (seed 4).
		const ramp = 120 * time.Second
		w, err := arrival.Warp(record(1, 101*ramp, 4), func(at time.Duration) float64 {
			s := math.Sin(math.Pi * at.Seconds() / ramp.Seconds())
			return 50 + 100*s*s
		}, ramp, "ramp")
		if err != nil {
			t.Fatal(err)
		}
		step, change = w.Offsets, 0
	}
	stepPath := write("step.txt", step)
	span := step[len(step)-1]
	cfgPath, _, cfg := writeDemo(t, dir)
	type run struct {
		name  string
		tune  bool
		scope string
		pool  map[string]int
	}
	runs := []run{{name: "--tune", tune: true, scope: replan.ScopeModule}, {name: "without (control loop)"}}
	pool := map[string]int{"v100": 24, "t4": 24}
	if os.Getenv("PICCOLO_TUNE_SCOPE") == replan.ScopePipeline {
		coarse, _, err := simulate.PlanCoarse(cfg, 0.99, simulate.Options{Trace: sample, Seed: 1, Flush: dispatcher.FlushIdle})
		if err != nil {
			t.Fatal(err)
		}
		big := maps.Clone(pool)
		for hw, n := range poolOf(coarse.Plan) {
			big[hw] = max(2*n, pool[hw])
		}
		runs = []run{{name: "--tune --tune-scope pipeline", tune: true, scope: replan.ScopePipeline, pool: big}}
		t.Logf("coarse-grained plan: cost %.4g, machines %v; pool %v", coarse.Plan.TotalCost, poolOf(coarse.Plan), big)
	}
	attained := map[bool]float64{}
	for _, ru := range runs {
		ctx, cancel := context.WithCancel(context.Background())
		if ru.pool == nil {
			ru.pool = pool
		}
		bePath := startSimPool(t, ctx, dir, cfgPath, ru.pool)
		var mu sync.Mutex
		var events []string
		var firstAfter time.Duration = -1
		var start time.Time
		type served struct {
			at       time.Duration
			machines float64
		}
		var plans []served // the machines served from each time on, from the replay's start
		o := &gatewayOptions{files: []string{cfgPath, bePath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
			policy: "piccolo", dispatch: "tc", flush: "idle", maxBody: 1 << 20, slack: 0.1, admission: true,
			logFmt: "json", drain: time.Second, tune: ru.tune, tuneScope: ru.scope,
			trace: simulate.Traffic{Source: arrival.Source{File: samplePath, Speed: 1}, Target: 0.99, Search: "ladder"},
			onPlan: func(e controlplane.PlanEvent) {
				mu.Lock()
				defer mu.Unlock()
				m := evaluation.PlanMachines(e.Plan)
				if start.IsZero() {
					plans = []served{{0, m}}
					events = append(events, fmt.Sprintf("%s: cost %.4g, %.1f machines", e.Cause, e.Plan.TotalCost, m))
					return
				}
				at := time.Since(start)
				if firstAfter < 0 && at > change {
					firstAfter = at - change
				}
				plans = append(plans, served{at, m})
				events = append(events, fmt.Sprintf("%.1fs %s: cost %.4g, %.1f machines", at.Seconds(), e.Cause, e.Plan.TotalCost, m))
			}}
		url, _ := startGateway(t, ctx, o)
		mu.Lock()
		start = time.Now()
		mu.Unlock()
		r := replayTrace(t, url, stepPath, 0)
		cancel()
		mu.Lock()
		// Machine-seconds over the replay's span, and the share within the
		// SLO of the requests sent from the change on.
		machineS, peak := 0.0, 0.0
		for i, p := range plans {
			end := span
			if i+1 < len(plans) {
				end = min(plans[i+1].at, span)
			}
			machineS += p.machines * max(0, (end-min(p.at, span)).Seconds())
			peak = max(peak, p.machines)
		}
		var sent, within int64
		for k, sec := range r.Seconds {
			if time.Duration(k)*time.Second >= change {
				sent, within = sent+sec.Sent, within+sec.Within
			}
		}
		t.Logf("%s: %d sent, errors %v, SLO attainment %.2f%% (from the change on %.2f%%), p99 %.0f ms; first plan change %v after the change; %.0f machine-seconds over %.1f s, most machines %.1f; plans: %s; seconds with a miss: %s",
			ru.name, r.Sent, r.Errors, 100*r.SLOAttainment, 100*float64(within)/float64(max(sent, 1)), r.P99Ms, firstAfter, machineS, span.Seconds(), peak,
			strings.Join(events, "; "), r.misses())
		switch {
		case ru.scope == replan.ScopeModule && change > 0 && (firstAfter < 0 || firstAfter > 2*time.Second):
			t.Errorf("tuner: first plan change %v after the step; want within 2 s", firstAfter)
		case ru.scope == replan.ScopePipeline && firstAfter < 0:
			t.Errorf("coarse-grained tuning: no plan change after the change; want a scale-up")
		}
		mu.Unlock()
		attained[ru.tune] = r.SLOAttainment
	}
	if len(runs) == 2 && attained[true] < attained[false]-0.01 {
		t.Errorf("attainment with the tuner %.2f%%, without %.2f%%: want the tuner no worse", 100*attained[true], 100*attained[false])
	}
}

// startSimPool starts count sim backends of each hardware type (v100, t4:
// the demo's) serving cfgPath's profiles until ctx ends, and writes their
// static backends list to dir/backends.yaml, whose path it returns.
func startSimPool(t *testing.T, ctx context.Context, dir, cfgPath string, count map[string]int) string {
	t.Helper()
	list := "backends:\n"
	for _, hw := range []string{"v100", "t4"} {
		for i := range count[hw] {
			addr, _ := startBackend(t, ctx, &backendOptions{listen: "127.0.0.1:0", hardware: hw, files: []string{cfgPath},
				executor: "sim", logFmt: "json", drain: time.Second})
			list += fmt.Sprintf("  - {id: %s-%d, address: %q, hardware: %s}\n", hw, i, addr, hw)
		}
	}
	path := filepath.Join(dir, "backends.yaml")
	if err := os.WriteFile(path, []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// replayTrace replays the trace at path from skip on, open loop, to the
// demo's session at url (`piccolo loadgen --arrival trace`), and returns
// loadgen's report.
func replayTrace(t *testing.T, url, path string, skip time.Duration) openLoop {
	t.Helper()
	out, err := runLoadgen(t, "--target", url, "--session", "paper-chain", "--arrival", "trace", "--trace", path,
		"--skip", skip.String(), "--drain", "3s", "--per-second", "-o", "json", "-q")
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	var r openLoop
	if err := jsonFrom(out, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPlannerTableRowsLive checks rows of docs/traffic.md's planner table
// live (issue 21): for gamma CV² 4 and CV² 16 at the demo chain's 50 req/s,
// 120 s recorded with seed 1 as `piccolo plan --arrival gamma --cv2 X
// --duration 120s --flush idle` records them, the plan each search finds
// (ladder, InferLine) is written as `piccolo plan -o json` writes it, served
// with `piccolo gateway --plan FILE` on sim backends (each machine of the
// plan its own backend, the control loop's rate re-plan held: the plan as
// planned), and the trace replayed whole with `piccolo loadgen --arrival
// trace`. It logs each plan's cost and simulated attainment (the table's)
// beside the live one, and fails when live is more than 2 points below the
// simulation. About 9 minutes:
//
//	PICCOLO_PLAN_ROWS_LIVE=1 go test -count=1 -run TestPlannerTableRowsLive -v -timeout 30m ./cmd/piccolo
func TestPlannerTableRowsLive(t *testing.T) {
	if os.Getenv("PICCOLO_PLAN_ROWS_LIVE") == "" {
		t.Skip("set PICCOLO_PLAN_ROWS_LIVE=1: about 9 minutes live")
	}
	dir := t.TempDir()
	cfgPath, _, cfg := writeDemo(t, dir)
	for _, cv2 := range []float64{4, 16} {
		tr := gammaRecord(t, 50, cv2, 120*time.Second, 1)
		tracePath := writeOffsets(t, dir, fmt.Sprintf("gamma%g.txt", cv2), tr.Offsets)
		for _, search := range []string{"ladder", "inferline"} {
			tp, err := simulate.PlanForTraceWith(search, cfg, planner.Options{Policy: "piccolo"}, 0.99,
				simulate.Options{Trace: tr, Seed: 1, Flush: dispatcher.FlushIdle})
			if err != nil {
				t.Fatal(err)
			}
			plan := tp.Trace.Plan
			b, err := json.Marshal(plan)
			if err != nil {
				t.Fatal(err)
			}
			planPath := filepath.Join(dir, fmt.Sprintf("gamma%g-%s.json", cv2, search))
			if err := os.WriteFile(planPath, b, 0o644); err != nil {
				t.Fatal(err)
			}
			pool := poolOf(plan)
			ctx, cancel := context.WithCancel(context.Background())
			bePath := startSimPool(t, ctx, dir, cfgPath, pool)
			var mu sync.Mutex
			var costs []string
			url, _ := startGateway(t, ctx, &gatewayOptions{files: []string{cfgPath, bePath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
				policy: "piccolo", dispatch: "tc", flush: "idle", maxBody: 1 << 20, slack: 0.1, admission: true,
				logFmt: "json", drain: time.Second, planFile: planPath, loop: replan.Options{SustainUp: time.Hour},
				onPlan: func(e controlplane.PlanEvent) {
					mu.Lock()
					defer mu.Unlock()
					costs = append(costs, fmt.Sprintf("%s %.4g", e.Cause, e.Plan.TotalCost))
				}})
			r := replayTrace(t, url, tracePath, 0)
			cancel()
			mu.Lock()
			t.Logf("gamma CV² %g, %s plan: cost %.4g, simulated %.2f%% (%d simulations); live %.2f%% of %d, errors %v, p99 %.0f ms; plans live: %s; seconds with a miss: %s",
				cv2, search, plan.TotalCost, 100*tp.Trace.Attainment, tp.InferLine.Simulations, 100*r.SLOAttainment, r.Sent, r.Errors, r.P99Ms,
				strings.Join(costs, ", "), r.misses())
			mu.Unlock()
			if r.SLOAttainment < tp.Trace.Attainment-0.02 {
				t.Errorf("gamma CV² %g, %s plan: live %.2f%%, simulated %.2f%%: want live within 2 points", cv2, search, 100*r.SLOAttainment, 100*tp.Trace.Attainment)
			}
		}
	}
}

// gammaRecord records d of gamma arrivals at rate req/s, squared coefficient
// of variation cv2 (seed), as `piccolo plan --arrival gamma` records them.
func gammaRecord(t testing.TB, rate, cv2 float64, d time.Duration, seed uint64) *arrival.Trace {
	t.Helper()
	p, err := arrival.Spec{Kind: "gamma", Rate: rate, CV2: cv2}.New(seed)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := arrival.Record(p, d, fmt.Sprintf("gamma CV² %g", cv2))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// writeOffsets writes offs to dir/name as a trace file, one value (seconds)
// a line, and returns its path.
func writeOffsets(t testing.TB, dir, name string, offs []time.Duration) string {
	t.Helper()
	var sb strings.Builder
	for _, at := range offs {
		fmt.Fprintf(&sb, "%.6f\n", at.Seconds())
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeDemo copies the demo config (configs/demo/paper-gpus.yaml) to
// dir/piccolo.yaml and returns its path, its text and the config.
func writeDemo(t testing.TB, dir string) (string, []byte, *api.Config) {
	t.Helper()
	base, err := os.ReadFile("../../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(path, base, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := api.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, base, cfg
}

// poolOf is the backends of each hardware type a plan needs, each machine
// (rounded up per group) a backend of its own.
func poolOf(plan *api.Plan) map[string]int {
	pool := map[string]int{}
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				pool[g.Hardware] += int(math.Ceil(g.Machines - 1e-9))
			}
		}
	}
	return pool
}
