package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/simulate"
)

// burstProcess is one row of docs/traffic.md's burst table: the process and
// the rate its trace plan was planned for (`piccolo plan --flush idle`, 1200 s,
// seed 1; the table's "trace plan: rate"), and its peak rate (0.5 s).
type burstProcess struct {
	name      string
	spec      arrival.Spec
	traceRate float64
}

var burstProcesses = []burstProcess{
	{"Gamma CV² 16", arrival.Spec{Kind: "gamma", Rate: 50, CV2: 16}, 100.9},
	{"Gamma CV² 64", arrival.Spec{Kind: "gamma", Rate: 50, CV2: 64}, 366.7},
	{"MMPP 5×, 0.5 s", mmppSpec(250, 500*time.Millisecond, 4*time.Second), 213.7},
	{"MMPP 5×, 2 s", mmppSpec(250, 2*time.Second, 16*time.Second), 203.5},
	{"MMPP 10×, 0.5 s", mmppSpec(500, 500*time.Millisecond, 9*time.Second), 386.3},
	{"MMPP 10×, 2 s", mmppSpec(500, 2*time.Second, 36*time.Second), 453.9},
}

func mmppSpec(burst float64, burstLen, quietLen time.Duration) arrival.Spec {
	return arrival.Spec{Kind: "mmpp", MMPP: arrival.MMPP{BurstRate: burst, BurstLength: burstLen, QuietRate: 25, QuietLength: quietLen}}
}

// burstWindow is how long each live run replays.
const burstWindow = 20 * time.Second

// TestBurstTableLive measures docs/traffic.md's live burst table: for each
// process, a 20 s window of its seed-1 sample (the one its trace plan was
// planned on; for an MMPP the window starts 2 s before its first burst, so it
// holds one) replayed open loop by `piccolo loadgen --arrival trace` through a
// real gateway on sim backends of the demo's hardware (configs/demo/
// paper-gpus.yaml), under (a) the mean-rate plan, (b) the trace plan (both
// as planned: their rate re-plan held), (c) the mean-rate plan with the trace
// plan's extra backends listed as spares and the control loop on. It
// reports each run's SLO attainment of all requests, the share refused (429),
// and the cost; it asserts nothing but that the runs ran. About 7 minutes:
//
//	PICCOLO_BURST_TABLE=1 go test -count=1 -run BurstTableLive -v -timeout 20m ./cmd/piccolo
//
// PICCOLO_BURST_ROWS="MMPP 10×, 2 s" runs the rows whose names it contains.
func TestBurstTableLive(t *testing.T) {
	if os.Getenv("PICCOLO_BURST_TABLE") == "" {
		t.Skip("set PICCOLO_BURST_TABLE=1: about 7 minutes of live runs")
	}
	base, err := os.ReadFile("../../configs/demo/paper-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Logf("| arrivals | window: requests, peak (0.5 s) | (a) mean-rate plan: cost / attainment live (simulated) / refused live (simulated) | (b) trace plan | (c) (a) + spares: cost planned + spare used (pool) / attainment / refused, overflow batches |")
	for _, p := range burstProcesses {
		if only := os.Getenv("PICCOLO_BURST_ROWS"); only != "" && !strings.Contains(only, p.name) {
			continue
		}
		trace, start := burstSample(t, p.spec)
		path := filepath.Join(dir, strings.NewReplacer(" ", "", "×", "x", ",", "", "²", "2").Replace(p.name)+".txt")
		n := writeWindow(t, path, trace, start)
		a, poolA := ratePlan(t, string(base), 50)
		b, poolB := ratePlan(t, string(base), p.traceRate)
		poolC := map[string]int{}
		for hw := range prices(a) {
			poolC[hw] = max(poolA[hw], poolB[hw])
		}
		for hw := range prices(b) {
			poolC[hw] = max(poolA[hw], poolB[hw])
		}
		win, err := arrival.ReadTraceFile(path, "")
		if err != nil {
			t.Fatal(err)
		}
		sa := simWindow(t, a, win, nil)
		sb := simWindow(t, b, win, nil)
		sc := simWindow(t, a, win, spareFor(t, string(base), a, poolC))
		ra := burstRun(t, string(base), 50, poolA, false, path)
		rb := burstRun(t, string(base), p.traceRate, poolB, false, path)
		rc := burstRun(t, string(base), 50, poolC, true, path)
		pc := prices(a)
		for hw, pr := range prices(b) {
			pc[hw] = pr
		}
		var poolCost float64
		for hw, k := range poolC {
			poolCost += float64(k) * pc[hw]
		}
		t.Logf("| %s | %d, %.0f req/s | %.2f / %.2f%% (%.2f%%) / %.1f%% (%.1f%%) | %.2f / %.2f%% (%.2f%%) / %.1f%% (%.1f%%) | %.2f + %.2f (%.2f) / %.2f%% (%.2f%%) / %.1f%% (%.1f%%), %.0f |",
			p.name, n, peakOf(trace, start), a.TotalCost, 100*ra.all, 100*sa.all, 100*ra.refused, 100*sa.refused,
			b.TotalCost, 100*rb.all, 100*sb.all, 100*rb.refused, 100*sb.refused,
			a.TotalCost, rc.spareCost, poolCost, 100*rc.all, 100*sc.all, 100*rc.refused, 100*sc.refused, rc.overflow)
	}
}

// burstSample records 1200 s of spec with seed 1, as `piccolo plan
// --arrival` does, and returns it and where the live window starts: 0, or
// for an MMPP 2 s before the first 0.5 s with more than 3× the mean rate.
func burstSample(t *testing.T, spec arrival.Spec) (*arrival.Trace, time.Duration) {
	t.Helper()
	proc, err := spec.New(1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := arrival.Record(proc, 1200*time.Second, "sample")
	if err != nil {
		t.Fatal(err)
	}
	if spec.Kind != "mmpp" {
		return tr, 0
	}
	const w = 500 * time.Millisecond
	j := 0
	for i, at := range tr.Offsets {
		for tr.Offsets[j] < at-w {
			j++
		}
		if float64(i-j+1)/w.Seconds() > 3*50 {
			return tr, max(tr.Offsets[j]-2*time.Second, 0)
		}
	}
	return tr, 0
}

// writeWindow writes the arrivals of tr in [start, start+burstWindow) to path,
// one offset (s) a line, and returns how many.
func writeWindow(t *testing.T, path string, tr *arrival.Trace, start time.Duration) int {
	t.Helper()
	var sb strings.Builder
	n := 0
	for _, at := range tr.Offsets {
		if at >= start && at < start+burstWindow {
			fmt.Fprintf(&sb, "%.6f\n", (at - start).Seconds())
			n++
		}
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// peakOf is the busiest 0.5 s of tr's window at start, in req/s.
func peakOf(tr *arrival.Trace, start time.Duration) float64 {
	var best, j int
	var win []time.Duration
	for _, at := range tr.Offsets {
		if at >= start && at < start+burstWindow {
			win = append(win, at)
		}
	}
	for i, at := range win {
		for win[j] < at-500*time.Millisecond {
			j++
		}
		best = max(best, i-j+1)
	}
	return float64(best) / 0.5
}

// withRate is the demo config with both modules at rate req/s.
func withRate(base string, rate float64) string {
	return strings.ReplaceAll(base, "rate: 50", "rate: "+strconv.FormatFloat(rate, 'f', -1, 64))
}

// ratePlan is the plan the gateway makes for the demo at rate
// (--max-utilization 0.8, as the trace plan's rungs are planned) and the
// backends a pool needs for it by hardware: every machine its own, and at
// least one of each type (the gateway plans only for the types its pool has).
func ratePlan(t *testing.T, base string, rate float64) (*api.Plan, map[string]int) {
	t.Helper()
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "demo.yaml", Data: []byte(withRate(base, rate))})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planner.Plan(cfg, planner.Options{Policy: "piccolo", MaxUtilization: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	pool := map[string]int{}
	for _, h := range cfg.Hardware {
		pool[h.Name] = 0
	}
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				pool[g.Hardware] += int(math.Ceil(g.Machines - 1e-9))
			}
		}
	}
	for hw, k := range pool {
		pool[hw] = max(k, 1)
	}
	return plan, pool
}

// prices returns the price of each hardware type plan uses.
func prices(plan *api.Plan) map[string]float64 {
	out := map[string]float64{}
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				out[g.Hardware] = g.Price
			}
		}
	}
	out["v100"], out["t4"] = 2.2, 1.2 // the demo's catalog, for spare types no group uses
	return out
}

// burstResult is one live run's figures.
type burstResult struct {
	all, refused float64 // SLO attainment of all requests; share refused
	overflow     float64 // overflow batches, both modules
	spareCost    float64 // the spare machines' busy time × price, per hour of the run
}

// burstRun serves the demo planned at rate over a pool of sim backends
// (count by hardware), spare on or off, replays the trace at path through it
// and returns what it measured.
func burstRun(t *testing.T, base string, rate float64, pool map[string]int, spare bool, path string) burstResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, []byte(withRate(base, rate)), 0o644); err != nil {
		t.Fatal(err)
	}
	bePath := startSimPool(t, ctx, dir, cfgPath, pool)
	url, _ := startGateway(t, ctx, &gatewayOptions{files: []string{cfgPath, bePath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", maxUtil: 0.8, dispatch: "tc", flush: "idle", maxBody: 1 << 20, slack: 0.1, admission: true, spare: spare,
		logFmt: "json", drain: time.Second, loop: burstControl(spare)})
	out, err := runLoadgen(t, "--target", url, "--session", "paper-chain", "--arrival", "trace", "--trace", path,
		"--drain", "3s", "-o", "json", "-q")
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	var r openLoop
	if err := jsonFrom(out, &r); err != nil {
		t.Fatal(err)
	}
	res := burstResult{all: r.SLOAttainment, refused: r.refused()}
	text := getMetrics(t, url+"/metrics")
	for _, m := range regexp.MustCompile(metrics.DispatcherOverflowBatchesTotal+`\{[^}]*\} (\S+)`).FindAllStringSubmatch(text, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		res.overflow += v
	}
	price := map[string]float64{"v100": 2.2, "t4": 1.2}
	re := regexp.MustCompile(metrics.DispatcherSlotBusySecondsTotal + `\{backend="[^"]*",hardware="([^"]*)",module="[^"]*",session="[^"]*",slot="spare\d+"\} (\S+)`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		res.spareCost += v / burstWindow.Seconds() * price[m[1]]
	}
	t.Logf("rate %.1f pool %v spare %v: %v", rate, pool, spare, r)

	return res
}

// simWindow simulates plan on the window's arrivals as the gateway serves
// them (flush idle, admission, the spare slots given) and returns the
// attainment of all requests and the share refused.
func simWindow(t *testing.T, plan *api.Plan, win *arrival.Trace, spare []dispatcher.Slot) burstResult {
	t.Helper()
	rep, err := simulate.Run(plan, simulate.Options{Flush: dispatcher.FlushIdle, Arrival: "trace", Trace: win, Admission: true, Spare: spare})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Sessions[0]
	return burstResult{all: s.SLOAttainment, refused: float64(s.Refused) / float64(s.Requests)}
}

// spareFor returns the spare slots the gateway gives plan's modules over a
// pool of count backends by hardware (listed as burstRun lists them).
func spareFor(t *testing.T, base string, plan *api.Plan, pool map[string]int) []dispatcher.Slot {
	t.Helper()
	list, port := "backends:\n", 1
	for _, hw := range []string{"v100", "t4"} {
		for i := range pool[hw] {
			port++
			list += fmt.Sprintf("  - {id: %s-%d, address: \"127.0.0.1:%d\", hardware: %s}\n", hw, i, port, hw)
		}
	}
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "demo.yaml", Data: []byte(base)}, api.NamedDoc{Name: "backends.yaml", Data: []byte(list)})
	if err != nil {
		t.Fatal(err)
	}
	placed, _, err := placement.Place(plan, placement.Members(cfg.Backends), nil, placement.Options{Static: true})
	if err != nil {
		t.Fatal(err)
	}
	return dataplane.SpareSlots(cfg, placed)
}

// burstControl is the gateway's control loop for a run: the plans (a) and
// (b) are measured as planned, so their rate re-plan is held (on a pool of
// exactly their machines it could only stack more machines on the same
// backends); (c) is the mean-rate plan with overflow to spares and the
// control loop's re-planning, as the gateway runs by default.
func burstControl(spare bool) replan.Options {
	if !spare {
		return replan.Options{SustainUp: time.Hour}
	}
	return replan.Options{}
}
