package demo

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/configs"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
)

// TestPlanCoresCountsTheHostsCores: the demo's default plan puts its CPU
// machines on one host, and the cores they keep busy are Σ occupancy ×
// cores per machine, the sim types none; with the host's cores free the
// plan fits, with one of two taken by another process it does not.
func TestPlanCoresCountsTheHostsCores(t *testing.T) {
	for hw, want := range map[string]float64{"cpu-1t": 1, "cpu-2t": 2, "cpu-builtin": 1, "t4": 0, "v100": 0} {
		if got := coresPerMachine(hw); got != want {
			t.Errorf("coresPerMachine(%q) = %v, want %v", hw, got, want)
		}
	}
	var docs []api.NamedDoc
	for _, name := range configs.Demo {
		b, err := configs.FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, api.NamedDoc{Name: name, Data: b})
	}
	cfg, err := api.LoadBytes(docs...)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planner.Plan(cfg, planner.Options{Policy: "piccolo", MaxUtilization: 0.75})
	if err != nil {
		t.Fatal(err)
	}
	placed, _, err := placement.Place(plan, nil, nil, placement.Options{Provision: true})
	if err != nil {
		t.Fatal(err)
	}
	cores := planCores(placed)
	want := 0.0 // Σ machines of the CPU groups, each cpu-1t or cpu-builtin: 1 core a machine
	for _, sp := range placed.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				want += g.Machines * coresPerMachine(g.Hardware)
			}
		}
	}
	total := 0.0
	for id, c := range cores {
		if !strings.HasPrefix(id, "cpu-") {
			t.Errorf("planCores counts backend %s, which runs no CPU type", id)
		}
		total += c
	}
	if want == 0 || math.Abs(total-want) > 1e-9 {
		t.Errorf("planCores totals %.3f cores over %v, want %.3f (> 0)", total, cores, want)
	}
	quiet := &HostCPU{Cores: 2, Free: 2, Planned: cores, Reserve: demoReserveCores}
	if err := quiet.fitError(); err != nil {
		t.Errorf("2 cores free: %v; want the demo's plan to fit", err)
	}
	busy := &HostCPU{Cores: 2, Free: 0.9, Planned: cores, Reserve: demoReserveCores}
	if err := busy.fitError(); err == nil || !strings.Contains(err.Error(), "0.90 of its 2 cores free") {
		t.Errorf("one core busy: %v; want an error naming the free cores", err)
	}
}

// TestCPUSecondsOfThisProcess reads this process's CPU time from /proc.
func TestCPUSecondsOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	before, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 200_000_000 {
		x += i
	}
	after, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before || x == 0 {
		t.Errorf("CPU time %v s then %v s after a busy loop; want it to grow", before, after)
	}
	if h := measureHost(100 * time.Millisecond); h.Cores < 1 || math.IsNaN(h.Free) || h.Free < 0 || h.Free > float64(h.Cores)+1e-9 {
		t.Errorf("measureHost = %+v; want 0 ≤ free ≤ cores", h)
	}
}

// TestGatewayRefusalsReadsMetrics: the refusals and the modules'
// measured/planned durations come from the gateway's /metrics text.
func TestGatewayRefusalsReadsMetrics(t *testing.T) {
	const text = `# TYPE piccolo_gateway_admission_rejections_total counter
piccolo_gateway_admission_rejections_total{session="s"} 3
# TYPE piccolo_gateway_door_shed_total counter
piccolo_gateway_door_shed_total{session=""} 1
piccolo_gateway_door_shed_total{session="s"} 4
# TYPE piccolo_gateway_module_compute_seconds histogram
piccolo_gateway_module_compute_seconds_bucket{session="s",module="m",le="+Inf"} 2
piccolo_gateway_module_compute_seconds_sum{session="s",module="m"} 0.2
piccolo_gateway_module_compute_seconds_count{session="s",module="m"} 2
# TYPE piccolo_gateway_module_queue_seconds histogram
piccolo_gateway_module_queue_seconds_bucket{session="s",module="m",le="+Inf"} 2
piccolo_gateway_module_queue_seconds_sum{session="s",module="m"} 0.08
piccolo_gateway_module_queue_seconds_count{session="s",module="m"} 2
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(text))
	}))
	defer srv.Close()
	plan := &api.Plan{Sessions: []api.SessionPlan{{Name: "s", Modules: []api.ModulePlan{{Name: "m", Configs: []api.GroupPlan{{DurationMs: 50}}}}}}}
	got, door, err := gatewayRefusals(context.Background(), srv.URL, plan)
	if err != nil {
		t.Fatal(err)
	}
	if door != 5 {
		t.Errorf("door shed %v; want the 5 of piccolo_gateway_door_shed_total, its series summed", door)
	}
	r := got["s"]
	if r == nil || r.Admission != 3 || r.Door != 4 || len(r.Slow) != 1 || r.Slow[0] != "m 2× (queued 40 ms)" {
		t.Errorf("gatewayRefusals = %+v; want 3 refused by admission, 4 at the door and [m 2× (queued 40 ms)]", r)
	}
}

// TestReportNamesTheDoorAndAShortPool: requests the gateway's door shed are
// said in the report, apart from admission's, so that a reader of a demo's
// 429s knows the gateway's own CPU refused them; and a hardware type the
// plan needs more devices of than the demo started is said under the plan
// line (the gateway fits the plan to the pool and refuses the rest). With
// neither, no line.
func TestReportNamesTheDoorAndAShortPool(t *testing.T) {
	for _, c := range []struct {
		name, line, marker string
		res                *Result
	}{
		{"3 shed at the door", "gateway door: 3 request(s) refused before they were read", "gateway door",
			&Result{DoorShed: 3}},
		{"v100 short", "plan: needs 10 v100 devices, 8 started (--max-backends): the gateway fits the plan to them and refuses the rest",
			"started (--max-backends)", &Result{Short: []ShortType{{Hardware: "v100", Needed: 10, Started: 8}}}},
	} {
		var b strings.Builder
		writeReport(&b, c.res)
		if !strings.Contains(b.String(), c.line) {
			t.Errorf("report with %s:\n%s\nwant %q", c.name, b.String(), c.line)
		}
		b.Reset()
		writeReport(&b, &Result{})
		if strings.Contains(b.String(), c.marker) {
			t.Errorf("report without %s names it:\n%s", c.name, b.String())
		}
	}
}

// TestReportSaysJointAccuracy: a variant session whose planned accuracy is
// a measured joint one says so beside it.
func TestReportSaysJointAccuracy(t *testing.T) {
	var b strings.Builder
	writeReport(&b, &Result{Sessions: []SessionResult{{Name: "v", Variants: []string{"det d-480"}, AccuracyTarget: 0.9, Accuracy: 0.953, AccuracyJoint: true}}})
	if !strings.Contains(b.String(), "v variants: det d-480; accuracy target 0.9, planned 0.953 (measured jointly)") {
		t.Errorf("report:\n%s\nwant the planned accuracy said measured jointly", b.String())
	}
}
