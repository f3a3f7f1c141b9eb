package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/loadgen"
	"github.com/piccolo-serving/piccolo/profiler"
)

// The demo plans on this host (docs/ocr.md, "The demo plans on this host"):
// the CPU models' profiles in configs/ocr.yaml were taken on another machine,
// and a newcomer's runs them otherwise (a fresh machine of the same kind
// measured 1.4–2.5× under the demo's load). Before the load the demo
// either measures every CPU model its plan runs, on the backends it started
// (profileHost: the profiler package, seconds), or starts from the
// calibration a previous demo's gateway kept for this host
// (--calibration-file, calibrate's file format); hostConfig makes the config
// whose CPU profiles are those measurements, which the demo plans from and
// hands the gateway. Emulated (sim) types keep their profiles: the sim
// backends run them as written.

// HostModel is one CPU model entry of the demo's plan: its profile from the
// config (another machine's) beside what the demo measured on this host, the
// duration the plan uses (Result.HostModels, the table before the load).
type HostModel struct {
	Model, Hardware    string
	Batch, Concurrency int
	// Profiled is the config's duration at this entry; Measured the host
	// config's (hostConfig), which the plan uses.
	Profiled, Measured time.Duration
	// Source says where Measured comes from: SourceProfiled (Samples calls of
	// the profile just run), SourceFile (Samples batches of the calibration
	// file) or SourceScaled (no trusted measurement of the entry: scaled by
	// its model's or its type's measured ratio, calibrate.Estimator.Calibrate).
	Source  string
	Samples int
}

// Sources of HostModel.Measured.
const (
	SourceProfiled = "profiled here"
	SourceFile     = "calibration file"
	SourceScaled   = "scaled"
)

// Ratio is Measured/Profiled (0 without a profile).
func (h HostModel) Ratio() float64 {
	if h.Profiled <= 0 {
		return 0
	}
	return float64(h.Measured) / float64(h.Profiled)
}

// hostEntry is a profile entry on a CPU type that a plan runs.
type hostEntry struct {
	model, hardware string
	batch, conc     int
}

func (e hostEntry) String() string {
	return fmt.Sprintf("%s@%s b%d", e.model, e.hardware, e.batch)
}

// cpuEntries returns the entries plan's groups run on CPU hardware types
// (coresPerMachine > 0), each once, sorted by hardware, model and batch.
func cpuEntries(plan *api.Plan) []hostEntry {
	seen := map[hostEntry]bool{}
	var out []hostEntry
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				e := hostEntry{model: mp.Model, hardware: g.Hardware, batch: g.Batch, conc: max(g.Concurrency, 1)}
				if coresPerMachine(g.Hardware) == 0 || mp.Model == "" || seen[e] {
					continue
				}
				seen[e] = true
				out = append(out, e)
			}
		}
	}
	slices.SortFunc(out, func(a, b hostEntry) int {
		return cmp.Or(strings.Compare(a.hardware, b.hardware), strings.Compare(a.model, b.model), cmp.Compare(a.batch, b.batch), cmp.Compare(a.conc, b.conc))
	})
	return out
}

// profileInputs returns the requests a profile of model is made of and
// whether the demo can profile it: the sample images for ocr-pre and the
// chains that start with it (which decode an image), zeros at the served
// shapes (the profiler's default: nil) for the ONNX models and the per-box
// steps, whose durations depend on the shapes only. ocr-boxes is not
// profiled: its duration depends on the text its probability map shows,
// which zeros do not (a map of zeros finds no box); calibrate scales it by
// its type's measured ratio.
func profileInputs(model string, images []loadgen.Payload) ([]loadgen.Payload, bool) {
	first, _, _ := strings.Cut(model, "+")
	switch first {
	case "ocr-pre":
		return images, len(images) > 0
	case "ocr-boxes":
		return nil, false
	}
	return nil, true
}

// Bounds of one entry's profile (pointDuration): long enough for
// profileMinSamples calls where the host runs the model up to 3× its
// profile (a point with fewer is topped up at the pace it measured, within
// maxProfileStep), short enough that the whole step takes seconds.
const (
	minPoint       = time.Second
	maxPoint       = 4 * time.Second
	pointCalls     = 24               // calls of the profiled duration a point lasts
	maxProfileTime = 15 * time.Second // the points' own durations
	maxProfileStep = 20 * time.Second // with the top-ups of slow points
	profileWarmup  = 2                // unrecorded calls before each point
)

// profileWindow is the window of the Estimator profileHost observes into:
// every call of a point (a fast step makes thousands), so that an entry's
// estimate is the p90 of its whole point, as the progress line prints it.
// With calibration's default window, the latest 64 calls, a Go step of 1 ms
// was estimated from its point's last 0.1 s: ocr-ctc's p90 of 1,598 calls
// 0.97 ms, its estimate 8.3 ms on a loaded host.
const profileWindow = 1 << 14

// profileMinSamples is how many calls of an entry the profile's estimator
// trusts (calibration's MinSamples there; the gateway's is 10). A point is
// seconds long: det on a host 2.5× slower than its profile made 9–10 calls
// in its 3.2 s, and below 10 was scaled by another model's ratio rather than
// its own p90 (with fewer than 10 calls, their maximum: on the safe side).
const profileMinSamples = 8

// newProfileEstimator is the Estimator profileHost observes into, offline
// its config: profileWindow, profileMinSamples, calibration's defaults else.
func newProfileEstimator(offline *api.Config) (*calibrate.Estimator, error) {
	est, err := calibrate.New(calibrate.Options{Window: profileWindow, MinSamples: profileMinSamples})
	if err != nil {
		return nil, err
	}
	est.SetOffline(offline)
	return est, nil
}

// pointDuration is how long the demo measures an entry profiled at d:
// pointCalls × d within [minPoint, maxPoint].
func pointDuration(d time.Duration) time.Duration {
	return min(max(time.Duration(pointCalls)*d, minPoint), maxPoint)
}

// hostTarget is the backend the demo profiles a hardware type on: its gRPC
// address and its id (the calibration's device).
type hostTarget struct{ addr, id string }

// profileHost measures each entry of entries that profileInputs allows on
// targets[entry's hardware] with the profiler (one point: the entry's batch
// and concurrency, pointDuration long, profileWarmup calls first, the
// points one after the other so that each has its device to itself, as the
// config's profiles were taken) and observes every measured call in est
// (device: the target's id). offline is the config whose durations the
// progress lines compare with. It returns the calls' latencies per entry,
// sorted; an entry that fails is logged and left out (calibrate then scales
// it), and only ctx's end is an error.
func profileHost(ctx context.Context, est *calibrate.Estimator, offline *api.Config, entries []hostEntry, targets map[string]hostTarget, images []loadgen.Payload, log io.Writer) (map[hostEntry][]time.Duration, error) {
	type job struct {
		e      hostEntry
		inputs []loadgen.Payload
		d      time.Duration
	}
	var jobs []job
	var total time.Duration
	for _, e := range entries {
		inputs, ok := profileInputs(e.model, images)
		if _, there := targets[e.hardware]; !ok || !there {
			continue
		}
		d := pointDuration(profiledAt(offline, e))
		jobs = append(jobs, job{e, inputs, d})
		total += d
	}
	// Within the step's bound, whatever the entries: shorter points.
	if total > maxProfileTime {
		for i := range jobs {
			jobs[i].d = max(jobs[i].d*maxProfileTime/total, minPoint/2)
		}
		total = maxProfileTime
	}
	calls := map[hostEntry][]time.Duration{}
	if len(jobs) == 0 {
		return calls, nil
	}
	logf(log, "profiling %d CPU model entries on this host's backends (about %.0f s; --no-host-profile plans from the config's profiles instead)", len(jobs), (total + time.Duration(len(jobs))*time.Second/2).Seconds())
	// later[i]: what the jobs after i take, warm-up and load included.
	later := make([]time.Duration, len(jobs))
	for i := len(jobs) - 2; i >= 0; i-- {
		later[i] = later[i+1] + jobs[i+1].d + time.Second/2
	}
	start := time.Now()
	minSamples := est.Options().MinSamples
	for i, j := range jobs {
		t := targets[j.e.hardware]
		o := profiler.Options{
			Target: t.addr, Model: j.e.model, Hardware: j.e.hardware,
			Batches: []int{j.e.batch}, Concurrencies: []int{j.e.conc},
			Duration: j.d, Warmup: profileWarmup, WarmupTime: time.Second, Inputs: j.inputs,
		}
		var lat []time.Duration
		res, err := profiler.Run(ctx, o)
		if err == nil && len(res.Points) > 0 {
			lat = res.Points[0].Latencies
			// A host much slower than the profile gives too few calls for
			// calibrate to trust: once more, for the calls missing at the
			// pace measured, while the step is within its bound.
			left := maxProfileStep - time.Since(start) - later[i]
			if p := res.Points[0]; p.Calls < minSamples && left >= minPoint/2 {
				o.Duration = min(time.Duration(minSamples-p.Calls+2)*p.Duration, maxPoint, left)
				o.Warmup = 0
				if more, err := profiler.Run(ctx, o); err == nil && len(more.Points) > 0 {
					lat = append(lat, more.Points[0].Latencies...)
				}
			}
		}
		if ctx.Err() != nil {
			return calls, ctx.Err()
		}
		if len(lat) == 0 {
			logf(log, "[%d/%d] %s: not profiled (%v); calibrate scales it by its type's measured ratio", i+1, len(jobs), j.e, err)
			continue
		}
		now := time.Now()
		for _, d := range lat {
			est.Observe(j.e.model, j.e.hardware, t.id, j.e.batch, j.e.conc, d, now)
		}
		slices.Sort(lat)
		calls[j.e] = lat
		p90 := loadgen.Percentile(lat, profiler.DefaultPercentile)
		prof := profiledAt(offline, j.e)
		logf(log, "[%d/%d] %s: p90 %s over %d calls (profiled %s: ×%.2f)", i+1, len(jobs), j.e, roundMs(p90), len(lat), roundMs(prof), float64(p90)/float64(max(prof, 1)))
	}
	logf(log, "profiled the CPU models in %.1f s", time.Since(start).Seconds())
	return calls, nil
}

// profiledAt returns cfg's duration for e's model and hardware at the
// smallest batch ≥ e.batch at its concurrency (0: none).
func profiledAt(cfg *api.Config, e hostEntry) time.Duration {
	best := api.ProfileEntry{}
	for _, p := range cfg.Profiles {
		if p.Model != e.model || p.Hardware != e.hardware {
			continue
		}
		for _, en := range p.Entries {
			if max(en.Concurrency, 1) == e.conc && en.Batch >= e.batch && (best.Batch == 0 || en.Batch < best.Batch) {
				best = en
			}
		}
	}
	return best.Duration.D()
}

// hostConfig returns a copy of offline whose profiles on CPU hardware types
// (coresPerMachine > 0) are this host's: est's calibrated ones
// (calibrate.Estimator.Calibrate: a measured entry its estimate, the others
// scaled by their model's or type's measured ratio) on the CPU types est
// measured; on a CPU type it did not (no backend of it profiled), offline's
// scaled by the largest ratio measured on the host's CPU types. The emulated
// types keep offline's profiles.
//
// Why the largest, where Calibrate takes the smallest ratio of the measured
// types for a type nothing measured: those are devices elsewhere, these
// share this host's cores. On a loaded host (cpu-1t measured ×7, the Go
// steps ×2.3) the smallest made the unmeasured cpu-2t look three times
// faster than cpu-1t, and the plan moved det, rec and cls onto it.
func hostConfig(offline *api.Config, est *calibrate.Estimator, now time.Time) *api.Config {
	cal := est.Calibrate(offline, now)
	measured, worst := map[string]bool{}, 0.0
	for _, m := range est.Snapshot() {
		if m.Trusted && m.Ratio > 0 && coresPerMachine(m.Hardware) > 0 {
			measured[m.Hardware] = true
			worst = max(worst, m.Ratio)
		}
	}
	worst = min(max(worst, minHostRatio), maxHostRatio)
	out := *offline
	out.Profiles = slices.Clone(offline.Profiles)
	for i, p := range offline.Profiles {
		switch {
		case coresPerMachine(p.Hardware) == 0:
		case measured[p.Hardware] && i < len(cal.Profiles) && cal.Profiles[i].Model == p.Model && cal.Profiles[i].Hardware == p.Hardware:
			out.Profiles[i] = cal.Profiles[i]
		case len(measured) > 0:
			p.Entries = slices.Clone(p.Entries)
			for j := range p.Entries {
				p.Entries[j].Duration = api.Duration(math.Round(float64(p.Entries[j].Duration) * worst))
			}
			out.Profiles[i] = p
		}
	}
	return &out
}

// Bounds of the ratio hostConfig scales an unmeasured CPU type by: those
// calibrate applies to an unmeasured entry.
const (
	minHostRatio = 0.5
	maxHostRatio = 10.0
)

// hostModels returns the table's rows: every entry of entries (the plan's
// CPU entries and those profiled), its profile in offline, its duration in
// host, and where that comes from: calls (profileHost's) or est's trusted
// series (a calibration file), else scaled.
func hostModels(offline, host *api.Config, entries []hostEntry, calls map[hostEntry][]time.Duration, est *calibrate.Estimator) []HostModel {
	batches := map[hostEntry]int{}
	for _, m := range est.Snapshot() {
		if m.Trusted {
			batches[hostEntry{m.Model, m.Hardware, m.Batch, m.Concurrency}] += m.Samples
		}
	}
	minSamples := est.Options().MinSamples
	out := make([]HostModel, 0, len(entries))
	for _, e := range entries {
		h := HostModel{Model: e.model, Hardware: e.hardware, Batch: e.batch, Concurrency: e.conc,
			Profiled: profiledAt(offline, e), Measured: profiledAt(host, e), Source: SourceScaled}
		switch {
		case len(calls[e]) >= minSamples:
			h.Source, h.Samples = SourceProfiled, len(calls[e])
		case len(calls[e]) == 0 && batches[e] > 0:
			h.Source, h.Samples = SourceFile, batches[e]
		}
		out = append(out, h)
	}
	return out
}

// writeHostModels prints the table of rows: per CPU model entry, the
// config's profile, the duration measured on this host that the plan uses,
// their ratio and its source.
func writeHostModels(w io.Writer, rows []HostModel) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "CPU models: profiled (the config, another machine) vs measured on this host (what the plan uses):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\tHARDWARE\tBATCH\tPROFILED\tMEASURED\tRATIO\tSOURCE")
	for _, r := range rows {
		src := r.Source
		if r.Samples > 0 {
			unit := "calls"
			if r.Source == SourceFile {
				unit = "batches"
			}
			src = fmt.Sprintf("%s (%d %s)", r.Source, r.Samples, unit)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t×%.2f\t%s\n", r.Model, r.Hardware, r.Batch, roundMs(r.Profiled), roundMs(r.Measured), r.Ratio(), src)
	}
	tw.Flush()
}

func roundMs(d time.Duration) time.Duration {
	if d >= 10*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// defaultCalibrationFile is where the demo keeps this host's calibration
// when --calibration-file is not given: in outDir, named for the host, so
// that a copied out directory does not plan another machine from it.
func defaultCalibrationFile(outDir string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return filepath.Join(outDir, "calibration-"+unsafeName.ReplaceAllString(host, "_")+".json")
}

// loadHostCalibration reads path into a new Estimator (offline set: the
// config's profiles) and returns it with the file's time; a missing file is
// (nil, zero, nil), a malformed one an error naming it.
func loadHostCalibration(path string, offline *api.Config) (est *calibrate.Estimator, saved time.Time, err error) {
	est, err = calibrate.New(calibrate.Options{})
	if err != nil {
		return nil, saved, err
	}
	est.SetOffline(offline)
	found, err := est.Load(path)
	if err != nil || !found {
		return nil, saved, err
	}
	if fi, err := os.Stat(path); err == nil {
		saved = fi.ModTime()
	}
	return est, saved, nil
}

// covers reports whether est holds a trusted series of the model and
// hardware type of every entry of entries (the CPU models of the plan made
// from it) that the demo would profile (profileInputs): only then does the
// demo start from a calibration file instead of profiling.
func covers(est *calibrate.Estimator, entries []hostEntry) bool {
	trusted := map[[2]string]bool{}
	for _, m := range est.Snapshot() {
		if m.Trusted {
			trusted[[2]string{m.Model, m.Hardware}] = true
		}
	}
	for _, e := range entries {
		if _, ok := profileInputs(e.model, []loadgen.Payload{{}}); ok && !trusted[[2]string{e.model, e.hardware}] {
			return false
		}
	}
	return len(entries) > 0
}

// warnUnplanned logs each session that planned from the config's profiles
// (configured) but not from this host's (host): at the durations measured
// here (rows) it cannot meet its SLO, and the demo does not load it.
func warnUnplanned(log io.Writer, configured, host *api.Plan, rows []HostModel) {
	ok := map[string]bool{}
	for _, sp := range configured.Sessions {
		ok[sp.Name] = sp.Error == ""
	}
	slowest := 0.0
	for _, r := range rows {
		slowest = max(slowest, r.Ratio())
	}
	for _, sp := range host.Sessions {
		if sp.Error != "" && ok[sp.Name] {
			logf(log, "warning: session %s plans from the configured profiles but not from this host's (its CPU models run up to ×%.1f their profiles here): %s. It is not loaded; on a quieter host it plans, and --no-host-profile plans it from the configured profiles (admission then refuses what this host cannot serve in time)", sp.Name, slowest, sp.Error)
		}
	}
}

// sameCPUProfiles reports whether host's profiles on the CPU types are
// offline's, entry for entry: nothing of this host was applied.
func sameCPUProfiles(offline, host *api.Config) bool {
	for i, p := range offline.Profiles {
		if coresPerMachine(p.Hardware) == 0 || i >= len(host.Profiles) {
			continue
		}
		if !slices.Equal(p.Entries, host.Profiles[i].Entries) {
			return false
		}
	}
	return true
}

// forget removes the calibration file at path (a missing one is no error):
// the gateway would otherwise start from its series, not the profile the
// demo just took.
func forget(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("demo: removing the old calibration %s: %w", path, err)
	}
	return nil
}

// profileImages is the request the demo profiles ocr-pre with: of the OCR
// test images (ocrSet's), the largest file (the longest decode).
func profileImages() ([]loadgen.Payload, error) {
	_, samples := ocrSet(&api.Session{})
	all, err := ocrImages(samples)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, nil
	}
	size := func(p loadgen.Payload) int {
		n := 0
		for _, t := range p.Tensors {
			n += len(t.Data)
		}
		return n
	}
	best := all[0]
	for _, p := range all[1:] {
		if size(p) > size(best) {
			best = p
		}
	}
	return []loadgen.Payload{best}, nil
}
