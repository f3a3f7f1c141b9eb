package demo

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/internal/testharness"
)

// onHost is a session of a CPU module (m on cpu-1t, profiled elsewhere)
// and an emulated one (g on gpu).
const onHost = `
hardware:
  - {name: cpu-1t, price: 1}
  - {name: gpu, price: 3}
profiles:
  - model: m
    hardware: cpu-1t
    entries:
      - {batch: 1, concurrency: 1, duration: 10ms}
      - {batch: 2, concurrency: 1, duration: 16ms}
      - {batch: 4, concurrency: 1, duration: 28ms}
  - model: g
    hardware: gpu
    entries:
      - {batch: 1, concurrency: 1, duration: 10ms}
      - {batch: 4, concurrency: 1, duration: 20ms}
sessions:
  - name: s
    slo: 400ms
    modules:
      - {name: a, model: m, rate: 20}
      - {name: b, model: g, rate: 20, after: [a]}
`

// slowedFrom returns a sim executor of hardware running cfg's profiles k×
// slower: a host whose CPU runs the models k× as long as profiled.
func slowedFrom(t *testing.T, cfg *api.Config, hardware string, k float64) string {
	t.Helper()
	ex, err := sim.New(hardware, testharness.Slowed(cfg, k).Profiles, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := testharness.ServeBackend(t, ex)
	return addr
}

// groupMs returns, per CPU entry of plan, the groups' durations, ms.
func groupMs(plan *api.Plan) map[hostEntry][]float64 {
	out := map[hostEntry][]float64{}
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				e := hostEntry{model: mp.Model, hardware: g.Hardware, batch: g.Batch, conc: max(g.Concurrency, 1)}
				out[e] = append(out[e], g.DurationMs)
			}
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestHostProfilePlansFromMeasuredDurations: the CPU model runs 2× its
// profile on this "host" (a sim backend slowed 2×); the demo's profile
// measures it so, and the plan made from the host config runs it at the
// measured durations (the entry measured: its estimate; the others of the
// model: scaled by its ratio), the emulated type at its profile; the table
// has one row per CPU entry, none for the emulated type; and the host config
// the gateway is handed reads back with the same profiles.
func TestHostProfilePlansFromMeasuredDurations(t *testing.T) {
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "on-host.yaml", Data: []byte(onHost)})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{MaxUtilization: 0.7}
	_, offlinePlan, err := fuseAndPlan(cfg, o, gatewayServed, true)
	if err != nil {
		t.Fatal(err)
	}
	entries := cpuEntries(offlinePlan)
	if len(entries) != 1 || entries[0].model != "m" || entries[0].hardware != "cpu-1t" {
		t.Fatalf("CPU entries of the plan: %v; want one of m on cpu-1t (g is emulated)", entries)
	}
	est, err := newProfileEstimator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	targets := map[string]hostTarget{"cpu-1t": {addr: slowedFrom(t, cfg, "cpu-1t", 2), id: "cpu-1t-0"}}
	start := time.Now()
	calls, err := profileHost(context.Background(), est, cfg, entries, targets, nil, &log)
	t.Logf("profiled in %v:\n%s", time.Since(start).Round(time.Millisecond), log.String())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(calls[entries[0]]); n < est.Options().MinSamples {
		t.Fatalf("%s: %d calls measured; want ≥ %d (calibrate's MinSamples)", entries[0], n, est.Options().MinSamples)
	}
	host := hostConfig(cfg, est, time.Now())
	_, plan, err := fuseAndPlan(host, o, gatewayServed, true)
	if err != nil {
		t.Fatal(err)
	}
	rows := hostModels(cfg, host, cpuEntries(plan), calls, est)
	for _, r := range rows {
		// 2× slower, and the host (loaded, shared) only adds; calibrate
		// bounds a ratio at 10.
		if r.Ratio() < 1.8 || r.Ratio() > 10 {
			t.Errorf("%s@%s b%d: measured %v over profiled %v = ×%.2f; want about ×2 (the backend runs 2× its profile)", r.Model, r.Hardware, r.Batch, r.Measured, r.Profiled, r.Ratio())
		}
	}
	for e, ds := range groupMs(plan) {
		want := profiledAt(host, e)
		if e.hardware == "gpu" {
			want = profiledAt(cfg, e) // emulated: as written
		}
		for _, d := range ds {
			if math.Abs(d-ms(want)) > 1e-6 {
				t.Errorf("the plan runs %s at %.3f ms; want the host config's %.3f ms", e, d, ms(want))
			}
		}
	}
	// Every entry of the measured model is this host's: the others scaled.
	for _, b := range []int{1, 2, 4} {
		e := hostEntry{model: "m", hardware: "cpu-1t", batch: b, conc: 1}
		if got, was := profiledAt(host, e), profiledAt(cfg, e); float64(got) < 1.8*float64(was) {
			t.Errorf("host config %s: %v; want ≥ 1.8× the profile's %v", e, got, was)
		}
	}
	if e := (hostEntry{model: "g", hardware: "gpu", batch: 4, conc: 1}); profiledAt(host, e) != profiledAt(cfg, e) {
		t.Errorf("host config %s: %v; want the profile's %v (an emulated type is not calibrated)", e, profiledAt(host, e), profiledAt(cfg, e))
	}
	if len(rows) == 0 || rows[0].Source != SourceProfiled {
		t.Errorf("rows %+v; want m's entry %s", rows, SourceProfiled)
	}
	checkTable(t, rows, plan)

	// What the gateway is handed (out/demo/config/host.yaml) reads back.
	data, err := api.EncodeYAML(host)
	if err != nil {
		t.Fatal(err)
	}
	back, err := api.LoadBytes(api.NamedDoc{Name: "host.yaml", Data: data})
	if err != nil {
		t.Fatalf("the host config does not load: %v\n%s", err, data)
	}
	for _, e := range []hostEntry{{"m", "cpu-1t", 1, 1}, {"m", "cpu-1t", 4, 1}, {"g", "gpu", 4, 1}} {
		if got, want := profiledAt(back, e), profiledAt(host, e); got != want {
			t.Errorf("host.yaml read back: %s %v; want %v", e, got, want)
		}
	}
}

// checkTable checks writeHostModels' table: a header and one line per
// row, and a row for every CPU model entry plan runs, with its durations.
func checkTable(t *testing.T, rows []HostModel, plan *api.Plan) {
	t.Helper()
	var out bytes.Buffer
	writeHostModels(&out, rows)
	t.Logf("table:\n%s", out.String())
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 2+len(rows) || !strings.Contains(lines[1], "PROFILED") || !strings.Contains(lines[1], "MEASURED") {
		t.Fatalf("table of %d lines; want a title, a header with PROFILED and MEASURED and %d rows", len(lines), len(rows))
	}
	for _, e := range cpuEntries(plan) {
		found := false
		for _, l := range lines[2:] {
			f := strings.Fields(l)
			found = found || (len(f) >= 5 && f[0] == e.model && f[1] == e.hardware && f[4] == roundMs(profiledAt(hostConfigOf(rows), e)).String())
		}
		if !found {
			t.Errorf("no row for %s at its measured duration in the table", e)
		}
	}
}

// hostConfigOf is the rows' measured durations as a config (for profiledAt).
func hostConfigOf(rows []HostModel) *api.Config {
	c := &api.Config{}
	for _, r := range rows {
		c.Profiles = append(c.Profiles, api.Profile{Model: r.Model, Hardware: r.Hardware,
			Entries: []api.ProfileEntry{{Batch: r.Batch, Concurrency: r.Concurrency, Duration: api.Duration(r.Measured)}}})
	}
	return c
}

// TestHostProfileOCR profiles the embedded demo's CPU models on real ONNX
// Runtime and the Go OCR steps (what `piccolo backend --executor ocr`
// serves): each model the profile can feed is measured (ocr-pre with a test
// image, the others with zeros at their shapes), ocr-boxes is scaled by its
// type's ratio, the plan made from the host config runs every profiled entry
// at its measured duration, and the table has a row per CPU model of the
// plan.
func TestHostProfileOCR(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the OCR models for seconds")
	}
	ex := testharness.OCRExecutor(t, 1) // skips without the models
	addr, _ := testharness.ServeBackend(t, ex)
	files, err := writeEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := api.Load(files...)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{MaxUtilization: 0.75}
	_, offlinePlan, err := fuseAndPlan(cfg, o, gatewayServed, true)
	if err != nil {
		t.Fatal(err)
	}
	entries := cpuEntries(offlinePlan)
	est, err := newProfileEstimator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	images, err := profileImages()
	if err != nil || len(images) != 1 {
		t.Fatalf("profile images: %d, %v; want one", len(images), err)
	}
	// One executor serves both CPU types here, as a backend of each would.
	targets := map[string]hostTarget{"cpu-1t": {addr: addr, id: "cpu-1t-0"}, "cpu-builtin": {addr: addr, id: "cpu-builtin-0"}}
	var log bytes.Buffer
	start := time.Now()
	calls, err := profileHost(context.Background(), est, cfg, entries, targets, images, &log)
	took := time.Since(start)
	t.Logf("profiled %d entries in %v:\n%s", len(entries), took.Round(time.Millisecond), log.String())
	if err != nil {
		t.Fatal(err)
	}
	// testharness.OCRExecutor serves no variants (ocr-det-480): the
	// models it serves are profiled, but ocr-boxes (not with zeros).
	for _, e := range entries {
		_, can := profileInputs(e.model, images)
		serves := !strings.Contains(e.model, "-480")
		if can && serves && len(calls[e]) == 0 {
			t.Errorf("%s was not profiled", e)
		}
		if !can && len(calls[e]) != 0 {
			t.Errorf("%s was profiled with inputs that do not stand for it", e)
		}
	}
	// The step's bound (maxProfileTime, plus a top-up and the loads) on a
	// loaded 2-core machine.
	if took > 3*maxProfileTime {
		t.Errorf("profiling took %v; want seconds (bound %v)", took, maxProfileTime)
	}
	host := hostConfig(cfg, est, time.Now())
	_, plan, err := fuseAndPlan(host, o, gatewayServed, true)
	if err != nil {
		t.Fatal(err)
	}
	all := entries
	for _, e := range cpuEntries(plan) {
		if !slices.Contains(all, e) {
			all = append(all, e)
		}
	}
	rows := hostModels(cfg, host, all, calls, est)
	byEntry := map[hostEntry]HostModel{}
	for _, r := range rows {
		byEntry[hostEntry{r.Model, r.Hardware, r.Batch, r.Concurrency}] = r
	}
	for e, ds := range groupMs(plan) {
		r, ok := byEntry[e]
		if !ok {
			if coresPerMachine(e.hardware) > 0 {
				t.Errorf("no row for the plan's CPU entry %s", e)
			}
			continue
		}
		for _, d := range ds {
			if math.Abs(d-ms(r.Measured)) > 1e-6 {
				t.Errorf("the plan runs %s at %.3f ms; want the measured %.3f ms (%s)", e, d, ms(r.Measured), r.Source)
			}
		}
	}
	// A profiled entry's duration is the p90 of all its calls (nearest
	// rank, either side of its rounding), not of the latest few.
	for e, lat := range calls {
		r := byEntry[e]
		if r.Source != SourceProfiled {
			continue
		}
		k := int(math.Ceil(0.9*float64(len(lat)))) - 1
		if r.Measured != lat[k] && r.Measured != lat[max(k-1, 0)] && r.Measured != lat[min(k+1, len(lat)-1)] {
			t.Errorf("%s: measured %v; want the p90 of its %d calls, %v", e, r.Measured, len(lat), lat[k])
		}
	}
	pre, boxes := byEntry[hostEntry{"ocr-pre", "cpu-builtin", 1, 1}], byEntry[hostEntry{"ocr-boxes", "cpu-builtin", 1, 1}]
	if pre.Source == SourceProfiled && boxes.Model != "" {
		want := min(max(pre.Ratio(), minHostRatio), maxHostRatio) // calibrate's bounds
		if boxes.Source != SourceScaled || boxes.Ratio() < 0.97*want || boxes.Ratio() > 1.03*want {
			t.Errorf("ocr-boxes: %s ×%.2f; want scaled by its type's ratio, ocr-pre's ×%.2f (within [%g, %g])", boxes.Source, boxes.Ratio(), pre.Ratio(), minHostRatio, maxHostRatio)
		}
	}
	checkTable(t, rows, plan)
}

// TestHostCalibrationFile: the demo starts from a calibration file when it
// holds a trusted series of every CPU model of the plan, to the same host
// config as the estimator it was saved from; a file without one of them is
// not enough, a missing file is none, and a malformed one is an error that
// names it.
func TestHostCalibrationFile(t *testing.T) {
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "on-host.yaml", Data: []byte(onHost)})
	if err != nil {
		t.Fatal(err)
	}
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	est.SetOffline(cfg)
	now := time.Now()
	for i := range 20 {
		est.Observe("m", "cpu-1t", "cpu-1t-0", 2, 1, time.Duration(30+i)*time.Millisecond, now)
	}
	path := filepath.Join(t.TempDir(), "calibration.json")
	if err := est.Save(path, now); err != nil {
		t.Fatal(err)
	}
	m2 := []hostEntry{{"m", "cpu-1t", 2, 1}}
	loaded, _, err := loadHostCalibration(path, cfg)
	if err != nil || loaded == nil || !covers(loaded, m2) {
		t.Fatalf("loadHostCalibration: %v, %v; want the file, covering m", loaded, err)
	}
	want, got := hostConfig(cfg, est, now), hostConfig(cfg, loaded, now)
	for _, b := range []int{1, 2, 4} {
		e := hostEntry{"m", "cpu-1t", b, 1}
		if profiledAt(got, e) != profiledAt(want, e) || profiledAt(got, e) == profiledAt(cfg, e) {
			t.Errorf("%s from the file: %v; want the calibration's %v (profile %v)", e, profiledAt(got, e), profiledAt(want, e), profiledAt(cfg, e))
		}
	}
	if sameCPUProfiles(cfg, got) || !sameCPUProfiles(cfg, cfg) {
		t.Error("sameCPUProfiles: the file's calibration is taken for the config's profiles, or a config for another")
	}
	rows := hostModels(cfg, got, m2, nil, loaded)
	if len(rows) != 1 || rows[0].Source != SourceFile || rows[0].Samples != 20 {
		t.Errorf("rows %+v; want m b2 from the %s (20 batches)", rows, SourceFile)
	}
	if covers(loaded, append(m2, hostEntry{"other", "cpu-1t", 1, 1})) {
		t.Error("a file without a model of the plan covers it; want not")
	}
	if !covers(loaded, append(m2, hostEntry{"ocr-boxes", "cpu-builtin", 1, 1})) {
		t.Error("a file without ocr-boxes (never profiled) does not cover the plan; want it to")
	}
	if est, _, err := loadHostCalibration(filepath.Join(t.TempDir(), "none.json"), cfg); est != nil || err != nil {
		t.Errorf("a missing file: %v, %v; want nothing", est, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version": 99}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadHostCalibration(bad, cfg); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("a malformed file: %v; want an error naming %s", err, bad)
	}
	if err := forget(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("forget left %s: %v", bad, err)
	}
	if err := forget(bad); err != nil {
		t.Errorf("forgetting a missing file: %v; want no error", err)
	}
}

// TestWarnUnplanned: a session that plans from the configured profiles but
// not from this host's is named with the host's slowest ratio; one that
// plans from both, or from neither, is not.
func TestWarnUnplanned(t *testing.T) {
	configured := &api.Plan{Sessions: []api.SessionPlan{{Name: "a"}, {Name: "b"}, {Name: "c", Error: "infeasible"}}}
	host := &api.Plan{Sessions: []api.SessionPlan{{Name: "a", Error: "infeasible: the fastest latency it can reach is 4s"}, {Name: "b"}, {Name: "c", Error: "infeasible"}}}
	rows := []HostModel{{Profiled: 10 * time.Millisecond, Measured: 72 * time.Millisecond}, {Profiled: 10 * time.Millisecond, Measured: 20 * time.Millisecond}}
	var log bytes.Buffer
	warnUnplanned(&log, configured, host, rows)
	got := log.String()
	if strings.Count(got, "warning: session") != 1 || !strings.Contains(got, "session a ") || !strings.Contains(got, "×7.2") || !strings.Contains(got, "fastest latency") {
		t.Errorf("warnings:\n%s\nwant one, of session a, with ×7.2 and the planner's reason", got)
	}
}
