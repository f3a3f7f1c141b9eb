package demo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/placement"
)

// TestDemoEmbeddedDefault builds the piccolo binary and runs the demo on its
// embedded default for a few seconds: backends and gateway start as children, every
// planned session is loaded and answers, the report and plots are written, and no
// child outlives the run. It starts from a calibration file of this "host"
// (every CPU model 1.3× its profile), so that the plan does not depend on how
// loaded the machine running the test is: the demo plans from the file (no
// profile), and prints its table.
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
	// The accuracy pass retries what admission refuses: minutes on a
	// 2-core machine shared by a dozen builds (load average 30).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	calFile := writeHostCalibration(t, filepath.Join(dir, "calibration.json"), 1.3)
	res, err := Run(ctx, Options{Duration: 6 * time.Second, OutDir: filepath.Join(dir, "out"), Binary: bin, Out: &out, Log: &log, CalibrationFile: calFile})
	t.Logf("log:\n%s\nreport:\n%s", log.String(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sessions) == 0 {
		t.Fatal("no session in the report")
	}
	// One backend process per device of the placed plan (fewer than one per
	// machine, since the fractional machines share devices), plus the idle
	// spares of the emulated types and the one-lane CPU devices the
	// fractions spread over (one cpu-1t more on a host of 2 cores or more).
	if res.Devices == 0 || res.Spares == 0 || res.Backends != res.Devices+res.Spares+res.Spread {
		t.Errorf("%d backend processes for a plan placed on %d devices, %d spares and %d spread devices, want one per device, spare and spread device, spares > 0", res.Backends, res.Devices, res.Spares, res.Spread)
	}
	if runtime.NumCPU() >= 2 && res.Spread == 0 {
		t.Errorf("no cpu-1t backend beyond the packing's one on a host of %d cores", runtime.NumCPU())
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
	// The CPU models as this host runs them, from the file: a row per CPU
	// model of the plan, printed before the load.
	if !strings.Contains(log.String(), "planning the CPU models from "+calFile) || !strings.Contains(out.String(), "measured on this host") {
		t.Error("the demo did not plan from the calibration file, or printed no table of the CPU models")
	}
	if len(res.HostModels) == 0 {
		t.Error("no CPU model in the result")
	}
	for _, h := range res.HostModels {
		if h.Source != SourceFile && h.Model != "ocr-boxes" || h.Ratio() < 1.29 || h.Ratio() > 1.31 {
			t.Errorf("CPU model %s@%s b%d: %s ×%.3f; want the file's ×1.3", h.Model, h.Hardware, h.Batch, h.Source, h.Ratio())
		}
	}
	for _, s := range res.Sessions {
		if s.Report == nil {
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
	if !variants {
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

// writeHostCalibration writes to path a calibration of the embedded demo
// as a host running every CPU entry k× its profile, and the emulated types
// as profiled, would give (12 batches of each entry on one device of its
// type: a gateway's file holds the emulated types too, and without them the
// gateway would scale those by the CPU's ratio) and returns path.
func writeHostCalibration(t *testing.T, path string, k float64) string {
	t.Helper()
	files, err := writeEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := api.Load(files...)
	if err != nil {
		t.Fatal(err)
	}
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	est.SetOffline(cfg)
	now := time.Now()
	for _, p := range cfg.Profiles {
		r := 1.0
		if coresPerMachine(p.Hardware) > 0 {
			r = k
		}
		for _, en := range p.Entries {
			for range 12 {
				est.Observe(p.Model, p.Hardware, p.Hardware+"-0", en.Batch, max(en.Concurrency, 1), time.Duration(r*float64(en.Duration)), now)
			}
		}
	}
	if err := est.Save(path, now); err != nil {
		t.Fatal(err)
	}
	return path
}
