package demo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/placement"
)

// TestDemoEmbeddedDefault builds the piccolo binary and runs the demo on its
// embedded default for a few seconds: backends and gateway start as children, every
// planned session is loaded and answers, the report and plots are written, and no
// child outlives the run.
func TestDemoEmbeddedDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "piccolo")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/piccolo")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out, log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Duration: 6 * time.Second, OutDir: filepath.Join(dir, "out"), Binary: bin, Out: &out, Log: &log})
	t.Logf("log:\n%s\nreport:\n%s", log.String(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sessions) == 0 {
		t.Fatal("no session in the report")
	}
	// One backend process per device of the placed plan (fewer than one per
	// machine, since the fractional machines share devices), plus the idle
	// spares of the emulated types.
	if res.Devices == 0 || res.Spares == 0 || res.Backends != res.Devices+res.Spares {
		t.Errorf("%d backend processes for a plan placed on %d devices and %d spares, want one per device and spare, spares > 0", res.Backends, res.Devices, res.Spares)
	}
	if strings.Contains(log.String(), "warning: the gateway's round-robin placement") {
		t.Error("the gateway's static placement overloads a device the packing shares")
	}
	if !strings.Contains(out.String(), "devices once placed") {
		t.Error("the report does not give the plan's devices beside its cost")
	}
	// The baseline column names the baseline and its simulated attainment
	// under the plan's headroom rule (docs/evaluation.md, "Equal footing").
	if !strings.Contains(out.String(), "% simulated)") {
		t.Error("the report's baseline column does not give the baseline's simulated attainment")
	}
	// The CPU models as this host runs them: a row per CPU model of the
	// plan, printed before the load.
	if len(res.HostModels) == 0 || !strings.Contains(out.String(), "measured on this host") {
		t.Error("the report has no table of the CPU models profiled vs measured on this host")
	}
	slowest := 0.0
	for _, h := range res.HostModels {
		slowest = max(slowest, h.Ratio())
	}
	for _, s := range res.Sessions {
		if s.Report == nil {
			// A host that runs the CPU models several times slower than
			// their profiles (a 2-core machine shared by a dozen builds
			// measured ×7) cannot meet an OCR session's 3 s bound: the
			// plan says so instead of admitting what it cannot serve.
			if slowest >= 3 && strings.Contains(s.NotPlannedError, "infeasible") && strings.HasPrefix(s.Name, "ocr") {
				t.Logf("session %s not planned on a host that runs its CPU models up to ×%.1f their profiles: %s", s.Name, slowest, s.NotPlannedError)
				continue
			}
			t.Errorf("session %s was not loaded: %s", s.Name, s.NotPlannedError)
			continue
		}
		if s.Report.Sent == 0 || s.Report.OK == 0 || s.Report.SLOAttainment == nil {
			t.Errorf("session %s: sent %d, ok %d, attainment %v", s.Name, s.Report.Sent, s.Report.OK, s.Report.SLOAttainment)
		}
		if _, err := os.Stat(s.Plot); err != nil {
			t.Errorf("session %s: no latency plot: %v", s.Name, err)
		}
		if !strings.Contains(out.String(), s.Name) {
			t.Errorf("the report does not name session %s", s.Name)
		}
	}
	// The OCR session with variants: the plan's choice and the target are
	// printed, and the words it read of the hard set meet the target.
	variants := false
	for _, s := range res.Sessions {
		if len(s.Variants) == 0 || s.OCR == nil {
			continue
		}
		variants = true
		if !strings.Contains(out.String(), s.Name+" variants: ") {
			t.Errorf("the report does not print session %s's variants", s.Name)
		}
		if got := float64(s.OCR.WordsRead) / float64(s.OCR.Words); s.OCR.Set != "hard" || got < s.AccuracyTarget {
			t.Errorf("session %s read %.1f%% of the %s set's words; want the hard set, at least its target %v", s.Name, 100*got, s.OCR.Set, s.AccuracyTarget)
		}
	}
	if !variants && slowest < 3 {
		t.Error("no OCR session with variants in the embedded default")
	}
	if !strings.Contains(log.String(), "stopped") {
		t.Error("the demo did not say it stopped its processes")
	}
}

// TestCheckStaticPlacement: the check warns when the gateway's placement
// (placement.Place, static) over the started backends puts more than one machine's
// occupancy on one of them: never when they hold the devices packing needs;
// when they do not, round-robin may share one beyond 1.
func TestCheckStaticPlacement(t *testing.T) {
	group := func(m float64) api.ModulePlan {
		return api.ModulePlan{Name: "m", Configs: []api.GroupPlan{{Hardware: "g", Machines: m}}}
	}
	plan := func(ms ...float64) *api.Plan {
		p := &api.Plan{}
		for i, m := range ms {
			p.Sessions = append(p.Sessions, api.SessionPlan{Name: string(rune('a' + i)), Modules: []api.ModulePlan{group(m)}})
		}
		return p
	}
	two := []placement.Member{{ID: "g-0", Hardware: "g"}, {ID: "g-1", Hardware: "g"}}
	// Packing puts 1 on one device, 0.5 + 0.4 on the other (round-robin
	// would put 0.4 back on g-0: 1.4, the check's old false alarm).
	if err := checkStaticPlacement(plan(1, 0.5, 0.4), two); err != nil {
		t.Errorf("1, 0.5, 0.4 on two devices: %v; want none (packing fits them)", err)
	}
	if err := checkStaticPlacement(plan(0.5, 0.4), two[:1]); err != nil {
		t.Errorf("0.5, 0.4 on one device: %v", err)
	}
	// 1, 0.6, 0.6 need three devices: on two the gateway goes round-robin,
	// 1 on g-0, 0.6 on g-1, 0.6 on g-0 again: 1.6.
	if err := checkStaticPlacement(plan(1, 0.6, 0.6), two); err == nil || !strings.Contains(err.Error(), "g-0 at occupancy 1.6") {
		t.Errorf("1, 0.6, 0.6 on two devices: %v; want g-0 overloaded at 1.6", err)
	}
}
