package calibrate

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

const ms = time.Millisecond

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// paperGPUs is configs/demo/paper-gpus.yaml's m2 and m3 profiles (batches 1,
// 2, 4, 8), without sessions.
func paperGPUs() *api.Config {
	entries := func(ds ...time.Duration) []api.ProfileEntry {
		var out []api.ProfileEntry
		for i, d := range ds {
			out = append(out, api.ProfileEntry{Batch: 1 << i, Concurrency: 1, Duration: api.Duration(d)})
		}
		return out
	}
	return &api.Config{Profiles: []api.Profile{
		{Model: "m2", Hardware: "v100", Entries: entries(100*ms, 125*ms, 160*ms, 267*ms)},
		{Model: "m2", Hardware: "t4", Entries: entries(160*ms, 200*ms, 256*ms, 427*ms)},
		{Model: "m3", Hardware: "v100", Entries: entries(130*ms, 167*ms, 200*ms, 320*ms)},
		{Model: "m3", Hardware: "t4", Entries: entries(208*ms, 267*ms, 320*ms, 512*ms)},
	}}
}

func newEst(t *testing.T, o Options) *Estimator {
	t.Helper()
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.SetOffline(paperGPUs())
	return e
}

func entry(cfg *api.Config, model, hw string, batch int) time.Duration {
	for _, p := range cfg.Profiles {
		if p.Model == model && p.Hardware == hw {
			for _, en := range p.Entries {
				if en.Batch == batch {
					return en.Duration.D()
				}
			}
		}
	}
	return -1
}

func TestQuantileOverSlidingWindow(t *testing.T) {
	e := newEst(t, Options{Window: 10, MinSamples: 5})
	// 100 batches at 100..199 ms: the window keeps the last 10 (190..199),
	// the 0.9 quantile is the 9th of them.
	for i := range 100 {
		e.Observe("m2", "v100", "gpu-0", 1, 1, time.Duration(100+i)*ms, t0)
	}
	got := e.Snapshot()
	if len(got) != 1 {
		t.Fatalf("series %v, want 1", got)
	}
	m := got[0]
	if m.Estimate != 198*ms || m.Samples != 10 || m.Total != 100 || !m.Trusted || m.Profiled != 100*ms {
		t.Errorf("got %+v; want estimate 198ms, 10 samples of 100, trusted, profiled 100ms", m)
	}
}

func TestObserveCountsBatchAtCoveringEntry(t *testing.T) {
	e := newEst(t, Options{})
	e.Observe("m2", "v100", "gpu-0", 3, 1, 150*ms, t0) // entry 4
	e.Observe("m2", "v100", "gpu-0", 9, 1, 300*ms, t0) // no entry covers 9: counted at 9
	e.Observe("m9", "v100", "gpu-0", 2, 0, 10*ms, t0)  // unknown model: at 2, concurrency 1
	e.Observe("m2", "v100", "gpu-0", 2, 1, 0, t0)      // no duration: ignored
	var keys []string
	for _, m := range e.Snapshot() {
		keys = append(keys, m.SeriesKey.String())
	}
	want := "m2@v100/gpu-0 b4c1,m2@v100/gpu-0 b9c1,m9@v100/gpu-0 b2c1"
	if got := strings.Join(keys, ","); got != want {
		t.Errorf("keys %s, want %s", got, want)
	}
}

// A partial batch counts at its covering entry scaled by how much longer
// that entry is profiled to run (api.DurationAt): m2 on a V100 is profiled at
// 125 ms for 2 and 160 ms for 4, so a batch of 3 runs 142.5 ms as profiled,
// and one measured at 142.5 ms counts as 160 ms at batch 4, a device as
// profiled. Counted as measured, ten such batches taught the estimator that
// batch 4 ran 0.89× its profile.
func TestPartialBatchScaledToItsEntry(t *testing.T) {
	e := newEst(t, Options{MinSamples: 4})
	for range 10 {
		e.Observe("m2", "v100", "gpu-0", 3, 1, 142500*time.Microsecond, t0)
	}
	got := e.Snapshot()
	if len(got) != 1 || got[0].Batch != 4 || got[0].Estimate != 160*ms {
		t.Errorf("series %+v; want one at batch 4 estimating 160ms, its profile", got)
	}
}

func TestCalibrate(t *testing.T) {
	off := paperGPUs()
	e := newEst(t, Options{MinSamples: 4})
	for range 8 {
		// m2 on v100 batch 4: one device as profiled, two 1.45× and 1.5× slower.
		e.Observe("m2", "v100", "gpu-0", 4, 1, 160*ms, t0)
		e.Observe("m2", "v100", "gpu-1", 4, 1, 240*ms, t0)
		e.Observe("m2", "v100", "gpu-2", 4, 1, 232*ms, t0)
	}
	for range 3 { // m3 on v100: too few samples to trust
		e.Observe("m3", "v100", "gpu-0", 8, 1, 640*ms, t0)
	}
	cal := e.Calibrate(off, t0)
	for _, c := range []struct {
		model, hw string
		batch     int
		want      time.Duration
	}{
		{"m2", "v100", 4, 232 * ms},                  // measured: the lower median of the devices
		{"m2", "v100", 8, 387150 * time.Microsecond}, // unmeasured: scaled by m2's ratio 1.45
		{"m3", "v100", 8, 464 * ms},                  // untrusted: scaled by v100's ratio over its models
		{"m2", "t4", 4, 371200 * time.Microsecond},   // nothing measured on t4: the smallest measured type's ratio
	} {
		if got := entry(cal, c.model, c.hw, c.batch); got != c.want {
			t.Errorf("%s on %s batch %d: %v, want %v", c.model, c.hw, c.batch, got, c.want)
		}
	}
	if got := entry(off, "m2", "v100", 4); got != 160*ms {
		t.Errorf("Calibrate modified its input: %v", got)
	}
	if empty := newEst(t, Options{}); empty.Calibrate(off, t0) != off {
		t.Error("with nothing measured, Calibrate should return its input")
	}
	// A type measured faster than profiled lends its speed-up to no other:
	// with m2 on v100 at half its profile, t4 keeps its profile.
	fast := newEst(t, Options{MinSamples: 4})
	for range 8 {
		fast.Observe("m2", "v100", "gpu-0", 4, 1, 80*ms, t0)
	}
	cal = fast.Calibrate(off, t0)
	if got, want := entry(cal, "m2", "v100", 4), 80*ms; got != want {
		t.Errorf("m2 on v100 measured at half its profile: %v, want %v", got, want)
	}
	if got, want := entry(cal, "m2", "t4", 4), entry(off, "m2", "t4", 4); got != want {
		t.Errorf("m2 on t4, nothing measured there, beside a faster v100: %v, want its profile %v", got, want)
	}
}

// planOn is a plan of one session whose modules run m2 and m3 on v100 at
// batch 4 for the given durations.
func planOn(m2, m3 time.Duration) *api.Plan {
	g := func(d time.Duration) []api.GroupPlan {
		return []api.GroupPlan{{Hardware: "v100", Batch: 4, Concurrency: 1, DurationMs: float64(d) / float64(ms), Machines: 1}}
	}
	return &api.Plan{Sessions: []api.SessionPlan{{Name: "s", Modules: []api.ModulePlan{
		{Name: "a", Model: "m2", Configs: g(m2)}, {Name: "b", Model: "m3", Configs: g(m3)}}}}}
}

func TestDrift(t *testing.T) {
	off := paperGPUs()
	offPlan := planOn(160*ms, 200*ms)
	e := newEst(t, Options{MinSamples: 4, Recent: 10 * time.Second})
	if _, _, ok := e.Drift(off, offPlan, t0); ok {
		t.Fatal("drift with nothing measured")
	}
	for range 8 {
		e.Observe("m2", "v100", "gpu-0", 4, 1, 208*ms, t0) // 1.3× the profile
		e.Observe("m3", "v100", "gpu-0", 4, 1, 210*ms, t0) // 1.05×
		e.Observe("m3", "v100", "gpu-0", 1, 1, 260*ms, t0) // 2×, but the plan runs no batch of 1
	}
	r, at, ok := e.Drift(off, offPlan, t0.Add(time.Second))
	if !ok || at != "m2@v100 b4c1" || r < 1.29 || r > 1.31 {
		t.Errorf("drift against the offline plan = %.3f at %v (%v), want 1.3 at m2 batch 4", r, at, ok)
	}
	// Against a plan made from the calibrated durations: none.
	if r, _, _ := e.Drift(off, planOn(208*ms, 210*ms), t0.Add(time.Second)); r != 1 {
		t.Errorf("drift against its own calibration = %.3f, want 1", r)
	}
	// A plan that assumed m2 at 416 ms (measured 208: 0.5×) and m3 at
	// 160 ms (measured 210: 1.31×): Drift names the faster m2, the farther
	// from 1; DriftSlower names m3, the one the plan is too fast for.
	mixed := planOn(416*ms, 160*ms)
	if r, at, _ := e.Drift(off, mixed, t0.Add(time.Second)); at != "m2@v100 b4c1" || r > 0.51 {
		t.Errorf("drift = %.3f at %v, want 0.5 at m2", r, at)
	}
	if r, at, ok := e.DriftSlower(off, mixed, t0.Add(time.Second)); !ok || at != "m3@v100 b4c1" || r < 1.3 || r > 1.32 {
		t.Errorf("drift slower = %.3f at %v (%v), want 1.31 at m3", r, at, ok)
	}
	if _, _, ok := e.DriftSlower(off, planOn(416*ms, 420*ms), t0.Add(time.Second)); ok {
		t.Error("drift slower with every entry faster than planned")
	}
	// Old samples do not drive a re-plan.
	if _, _, ok := e.Drift(off, offPlan, t0.Add(time.Minute)); ok {
		t.Error("drift counted series not observed for a minute")
	}
}

func TestPersistRoundTrip(t *testing.T) {
	e := newEst(t, Options{Window: 4, MinSamples: 2})
	for i := range 6 {
		e.Observe("m2", "v100", "gpu-0", 2, 1, time.Duration(100+i)*ms, t0)
	}
	path := filepath.Join(t.TempDir(), "calibration.json")
	if err := e.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	f := newEst(t, Options{Window: 4, MinSamples: 2})
	if found, err := f.Load(path); err != nil || !found {
		t.Fatalf("Load: found %v, err %v", found, err)
	}
	a, b := e.Snapshot(), f.Snapshot()
	if len(b) != 1 || a[0].Estimate != b[0].Estimate || a[0].Total != b[0].Total || b[0].Samples != 4 || !b[0].Last.IsZero() {
		t.Errorf("loaded %+v, saved %+v", b, a)
	}
	// New samples go after the loaded ones, oldest first out.
	f.Observe("m2", "v100", "gpu-0", 2, 1, 50*ms, t0)
	if got := f.Snapshot()[0].Estimate; got != 105*ms {
		t.Errorf("after one more sample: estimate %v, want 105ms", got)
	}
	if found, err := f.Load(filepath.Join(t.TempDir(), "none.json")); found || err != nil {
		t.Errorf("missing file: found %v, err %v; want neither", found, err)
	}
}

func TestBadInput(t *testing.T) {
	for _, o := range []Options{{Quantile: 1.5}, {Window: 4, MinSamples: 5}, {Window: -1}, {Recent: 20 * time.Second, Forget: 5 * time.Second}, {MaxAge: -1}} {
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), "want") {
			t.Errorf("New(%+v) = %v, want an error saying what is allowed", o, err)
		}
	}
	e := newEst(t, Options{})
	for _, c := range []struct{ data, want string }{
		{`{`, "unexpected end"},
		{`{"version": 7}`, "version 7"},
		{`{"version": 1, "series": [{"model": "m2", "hardware": "v100", "batch": 0, "concurrency": 1}]}`, "batch ≥ 1"},
		{`{"version": 1, "series": [{"model": "m2", "hardware": "v100", "batch": 1, "concurrency": 1, "durations_us": [-3]}]}`, "-3µs"},
	} {
		if err := e.Unmarshal([]byte(c.data)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Unmarshal(%s) = %v, want an error with %q", c.data, err, c.want)
		}
	}
	if len(e.Snapshot()) != 0 {
		t.Error("a rejected file added series")
	}
}

// BenchmarkObserve is the data plane's cost per batch.
func BenchmarkObserve(b *testing.B) {
	e, _ := New(Options{})
	e.SetOffline(paperGPUs())
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.Observe("m2", "v100", "gpu-0", 1+i%8, 1, 150*ms, now)
	}
}

func TestColocations(t *testing.T) {
	e := newEst(t, Options{MinSamples: 4})
	for range 8 {
		e.Observe("m2", "v100", "gpu-0", 4, 1, 160*ms, t0) // alone
		e.Observe("m2", "v100", "gpu-1", 4, 1, 240*ms, t0) // beside m3
		e.Observe("m3", "v100", "gpu-1", 4, 1, 250*ms, t0) // beside m2; m3 is alone nowhere
	}
	p := planOn(160*ms, 200*ms)
	p.Sessions[0].Modules[0].Configs[0].Backends = []string{"gpu-0", "gpu-1"}
	p.Sessions[0].Modules[1].Configs[0].Backends = []string{"gpu-1"}
	got := e.Colocations(p)
	if len(got) != 1 {
		t.Fatalf("colocations %+v; want m2 on gpu-1 only (m3 has no device alone)", got)
	}
	c := got[0]
	if c.Model != "m2" || c.Device != "gpu-1" || strings.Join(c.With, ",") != "m3" || c.Slowdown != 1.5 || c.Alone != 160*ms {
		t.Errorf("got %+v; want m2 on gpu-1 with m3, 240ms against 160ms alone: 1.5×", c)
	}
}

// A drift that moves neither the module's latency by a twentieth of its
// budget nor its capacity by a twentieth of a machine is not counted (the
// demo's millisecond OCR steps on a few hundredths of a machine); the same
// relative drift on a whole machine is.
func TestDriftFloor(t *testing.T) {
	off := paperGPUs()
	e := newEst(t, Options{MinSamples: 4, Recent: 10 * time.Second})
	for range 8 {
		e.Observe("m2", "v100", "gpu-0", 4, 1, 208*ms, t0) // 1.3× the profile
	}
	small := planOn(160*ms, 200*ms)
	small.Sessions[0].Modules[0].BudgetMs = 2000           // 48 ms is 2.4% of it
	small.Sessions[0].Modules[0].Configs[0].Machines = 0.1 // 0.3 × 0.1 = 0.03 machines
	if r, at, ok := e.Drift(off, small, t0.Add(time.Second)); ok {
		t.Errorf("drift %.3f at %s counted on 0.1 machine with a 2 s budget", r, at)
	}
	small.Sessions[0].Modules[0].Configs[0].Machines = 1
	if r, _, ok := e.Drift(off, small, t0.Add(time.Second)); !ok || r < 1.29 {
		t.Errorf("drift on a whole machine = %.3f (%v), want 1.3 counted", r, ok)
	}
}

// Merge keeps, per device, the series with the newest batch (ties: more
// batches), from whichever gateway measured it; merged series count for
// Drift as the gateway's own do; a malformed calibration is named and
// skipped.
func TestMerge(t *testing.T) {
	a, b := newEst(t, Options{MinSamples: 4}), newEst(t, Options{MinSamples: 4})
	for range 8 {
		a.Observe("m2", "v100", "gpu-0", 4, 1, 160*ms, t0)                  // a's only
		a.Observe("m2", "v100", "gpu-1", 4, 1, 170*ms, t0)                  // older than b's
		b.Observe("m2", "v100", "gpu-1", 4, 1, 208*ms, t0.Add(time.Second)) // newer
		b.Observe("m3", "v100", "gpu-2", 4, 1, 300*ms, t0)
	}
	a.Observe("m3", "v100", "gpu-2", 4, 1, 310*ms, t0) // same time, fewer batches than b's
	da, err := a.Marshal(t0)
	if err != nil {
		t.Fatal(err)
	}
	db, err := b.Marshal(t0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Merge(Options{MinSamples: 4}, da, []byte("{"), db)
	if err == nil || !strings.Contains(err.Error(), "calibration 1") {
		t.Errorf("Merge with a malformed calibration: err %v; want it named (calibration 1)", err)
	}
	got := map[string]time.Duration{}
	for _, s := range m.Snapshot() {
		got[s.Model+"/"+s.Device] = s.Estimate
	}
	want := map[string]time.Duration{"m2/gpu-0": 160 * ms, "m2/gpu-1": 208 * ms, "m3/gpu-2": 300 * ms}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("merged %s = %v; want %v (all: %v)", k, got[k], w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("merged %v; want %v", got, want)
	}
	// The merged series keep their batches' times: the merged view drifts
	// (m3 at 300 ms against the plan's 200 ms) as b's own estimator does.
	off := paperGPUs()
	plan := planOn(160*ms, 200*ms)
	m.SetOffline(off)
	if r, _, ok := m.Drift(off, plan, t0.Add(2*time.Second)); !ok {
		t.Errorf("merged drift = %.3f, %v; want the merged series counted", r, ok)
	}
	// Unmarshal (a file read at start) still does not count them for Drift.
	u := newEst(t, Options{MinSamples: 4})
	if err := u.Unmarshal(db); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := u.Drift(off, plan, t0.Add(2*time.Second)); ok {
		t.Error("series read with Unmarshal counted for drift before a batch was measured")
	}
}
