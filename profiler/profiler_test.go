package profiler_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/loadgen"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/profiler"
)

// simProfiles is what the sim backend emulates. At concurrency 2 a batch takes
// 1.25× as long as at 1 (throughput ×1.6) except at batch 4, where it takes twice
// as long (no gain from a second lane).
const simProfiles = `
profiles:
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 20ms}
      - {batch: 2, concurrency: 1, duration: 24ms}
      - {batch: 4, concurrency: 1, duration: 32ms}
      - {batch: 1, concurrency: 2, duration: 25ms}
      - {batch: 2, concurrency: 2, duration: 30ms}
      - {batch: 4, concurrency: 2, duration: 64ms}
`

// startSim serves a sim backend of simProfiles on 127.0.0.1:0 until the test ends
// and returns its address and server.
func startSim(t testing.TB) (string, *backends.Server) {
	t.Helper()
	var cfg api.Config
	if err := yaml.Unmarshal([]byte(simProfiles), &cfg); err != nil {
		t.Fatal(err)
	}
	exec, err := sim.New("v100", cfg.Profiles, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, exec)
}

// serve serves exec over gRPC on 127.0.0.1:0 until the test ends and returns
// its address and server.
func serve(t testing.TB, exec backends.Executor) (string, *backends.Server) {
	t.Helper()
	srv, err := backends.NewServer(exec, backends.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := backends.NewGRPCServer(srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String(), srv
}

// profiled returns the sim's duration of (batch, concurrency).
func profiled(t *testing.T, b, c int) time.Duration {
	t.Helper()
	var cfg api.Config
	if err := yaml.Unmarshal([]byte(simProfiles), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, e := range cfg.Profiles[0].Entries {
		if e.Batch == b && e.Concurrency == c {
			return e.Duration.D()
		}
	}
	t.Fatalf("no profile entry for batch %d concurrency %d", b, c)
	return 0
}

func options(addr string) profiler.Options {
	return profiler.Options{
		Target: addr, Model: "m", Hardware: "v100",
		Batches: []int{4, 1, 2}, Concurrencies: []int{2, 1},
		Duration: 400 * time.Millisecond, Warmup: 2, WarmupTime: 200 * time.Millisecond,
	}
}

// TestRunMeasuresTheSimProfile is the main test: profiling a sim backend gives
// back the profile it emulates, within what a loaded machine adds.
func TestRunMeasuresTheSimProfile(t *testing.T) {
	addr, srv := startSim(t)
	res, err := profiler.Run(context.Background(), options(addr))
	if err != nil {
		t.Fatal(err)
	}
	if res.Percentile != 90 {
		t.Errorf("percentile %v; want the default 90", res.Percentile)
	}
	var order []string
	got := map[[2]int]profiler.Point{}
	for _, p := range res.Points {
		order = append(order, fmt.Sprintf("%d/%d", p.Batch, p.Concurrency))
		got[[2]int{p.Batch, p.Concurrency}] = p
	}
	if want := "1/1 2/1 4/1 1/2 2/2 4/2"; strings.Join(order, " ") != want {
		t.Fatalf("points (batch/concurrency) %v; want %s", order, want)
	}
	for _, p := range res.Points {
		d := profiled(t, p.Batch, p.Concurrency)
		if p.Duration != p.P90 {
			t.Errorf("batch %d c %d: duration %v is not the p90 %v", p.Batch, p.Concurrency, p.Duration, p.P90)
		}
		// The sim sleeps d; the client sees d plus gRPC and scheduling overheads.
		if p.Duration < d || p.Duration > 2*d+20*time.Millisecond {
			t.Errorf("batch %d c %d: measured p90 %v; want within [%v, %v]", p.Batch, p.Concurrency, p.Duration, d, 2*d+20*time.Millisecond)
		}
		if !(p.P50 <= p.P90 && p.P90 <= p.P99 && p.P99 <= p.Max) {
			t.Errorf("batch %d c %d: percentiles out of order: p50 %v p90 %v p99 %v max %v", p.Batch, p.Concurrency, p.P50, p.P90, p.P99, p.Max)
		}
		// Closed loop of c workers over ~400ms: about c·400ms/d calls.
		if minCalls := p.Concurrency * int(200*time.Millisecond/(2*d+20*time.Millisecond)); p.Calls < minCalls {
			t.Errorf("batch %d c %d: %d calls; want at least %d", p.Batch, p.Concurrency, p.Calls, minCalls)
		}
		if want := float64(p.Batch*p.Concurrency) / p.Duration.Seconds(); p.Throughput != want {
			t.Errorf("batch %d c %d: throughput %v; want c·b/d = %v", p.Batch, p.Concurrency, p.Throughput, want)
		}
		if ideal := float64(p.Batch*p.Concurrency) / d.Seconds(); p.ItemsPerSec > ideal*1.05 || p.ItemsPerSec < ideal/3 {
			t.Errorf("batch %d c %d: measured %.1f items/s; the profile allows %.1f", p.Batch, p.Concurrency, p.ItemsPerSec, ideal)
		}
	}
	// Where the profile says a second lane pays (batch 1 and 2: ×1.6), the
	// measured items/s rise; at batch 4 (×1) they do not rise by much.
	for _, b := range []int{1, 2} {
		one, two := got[[2]int{b, 1}], got[[2]int{b, 2}]
		if two.ItemsPerSec < 1.2*one.ItemsPerSec {
			t.Errorf("batch %d: %.1f items/s at concurrency 2, %.1f at 1; want concurrency 2 to be well ahead (profile: ×1.6)", b, two.ItemsPerSec, one.ItemsPerSec)
		}
	}
	if one, two := got[[2]int{4, 1}], got[[2]int{4, 2}]; two.ItemsPerSec > 1.25*one.ItemsPerSec {
		t.Errorf("batch 4: %.1f items/s at concurrency 2, %.1f at 1; the profile gives no gain", two.ItemsPerSec, one.ItemsPerSec)
	}
	// The model was not loaded before: Run unloads it.
	if l := srv.Loaded(); len(l) != 0 {
		t.Errorf("models still loaded after Run: %v", l)
	}

	// The YAML loads with a hardware file and the planner can plan with it.
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := profiler.WriteYAML(&buf, res, 0); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "hardware:\n") || !strings.Contains(buf.String(), "p90") {
		t.Errorf("YAML without a price must hold profiles only and say p90:\n%s", buf.String())
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	profPath := write("profile.yaml", buf.String())
	hwPath := write("hardware.yaml", "hardware:\n  - {name: v100, price: 3}\n")
	sessPath := write("sessions.yaml", "sessions:\n  - name: s\n    slo: 500ms\n    modules:\n      - {name: a, model: m, rate: 100}\n")
	cfg, err := api.Load(hwPath, profPath, sessPath)
	if err != nil {
		t.Fatalf("api.Load of the written profile: %v\n%s", err, buf.String())
	}
	want := res.Profile()
	gotProf := cfg.ProfilesOf("m")
	if len(gotProf) != 1 || len(gotProf[0].Entries) != len(want.Entries) {
		t.Fatalf("loaded profiles %+v; want one with %d entries", gotProf, len(want.Entries))
	}
	for i, e := range gotProf[0].Entries {
		w := want.Entries[i]
		if e.Batch != w.Batch || e.Concurrency != w.Concurrency || e.Duration != w.Duration {
			t.Errorf("entry %d loaded as %d/%d/%v; want %d/%d/%v", i, e.Batch, e.Concurrency, e.Duration.D(), w.Batch, w.Concurrency, w.Duration.D())
		}
	}
	plan, err := planner.Plan(cfg, planner.Options{})
	if err != nil {
		t.Fatalf("plan with the measured profile: %v", err)
	}
	if len(plan.Sessions) != 1 || plan.TotalCost <= 0 {
		t.Errorf("plan %+v; want one session at a positive cost", plan)
	}

	// With a price the file carries its own hardware entry and loads alone.
	buf.Reset()
	if err := profiler.WriteYAML(&buf, res, 2.5); err != nil {
		t.Fatal(err)
	}
	cfg, err = api.Load(write("with-hw.yaml", buf.String()))
	if err != nil {
		t.Fatalf("api.Load of the profile with hardware: %v\n%s", err, buf.String())
	}
	if h, ok := cfg.HardwareByName("v100"); !ok || h.Price != 2.5 {
		t.Errorf("hardware %+v; want v100 at 2.5", h)
	}

	var table bytes.Buffer
	if err := profiler.WriteTable(&table, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("measured:\n%s%s", table.String(), buf.String())
	if lines := strings.Count(table.String(), "\n"); lines != 1+len(res.Points)+1 || !strings.Contains(table.String(), "p99 ms") {
		t.Errorf("table:\n%s", table.String())
	}
}

// TestRunInputFile builds batches from a KServe v2 JSON request of 2 rows.
func TestRunInputFile(t *testing.T) {
	addr, _ := startSim(t)
	pl, err := loadgen.ParseRequest([]byte(`{"inputs":[{"name":"input0","datatype":"FP32","shape":[2,3],"data":[1,2,3,4,5,6]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := options(addr)
	o.Batches, o.Concurrencies, o.Duration, o.Warmup = []int{1, 4}, []int{1}, 100*time.Millisecond, 0
	o.Inputs = []loadgen.Payload{pl}
	res, err := profiler.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 2 || res.Points[1].Batch != 4 || res.Points[1].Calls == 0 {
		t.Errorf("points %+v; want batches 1 and 4 measured", res.Points)
	}

	// Inputs that disagree on their tensors are refused before any call.
	other, err := loadgen.ParseRequest([]byte(`{"inputs":[{"name":"input0","datatype":"FP32","shape":[1,2],"data":[1,2]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	o.Inputs = []loadgen.Payload{pl, other}
	if _, err := profiler.Run(context.Background(), o); !errors.Is(err, profiler.ErrBadOptions) || !strings.Contains(err.Error(), "same tensors") {
		t.Errorf("inputs of different shapes: error %v; want ErrBadOptions saying they must carry the same tensors", err)
	}
}

func TestRunErrors(t *testing.T) {
	addr, _ := startSim(t)
	// A port nothing listens on.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()

	tests := []struct {
		name   string
		change func(*profiler.Options)
		is     error
		want   []string
	}{
		{"unreachable", func(o *profiler.Options) { o.Target = dead }, backends.ErrBackendUnavailable, []string{dead}},
		{"unknown model", func(o *profiler.Options) { o.Model = "nope" }, backends.ErrUnknownModel, []string{`"nope"`, "m"}},
		{"batch above max", func(o *profiler.Options) { o.Batches = []int{1, 8} }, backends.ErrInvalidInput, []string{"batch 8, concurrency 1", "up to batch 4"}},
		{"concurrency not offered", func(o *profiler.Options) { o.Concurrencies = []int{3} }, backends.ErrInvalidInput, []string{"concurrency 3"}},
		{"no batches", func(o *profiler.Options) { o.Batches = nil }, profiler.ErrBadOptions, []string{"batches"}},
		{"batch 0", func(o *profiler.Options) { o.Batches = []int{0, 1} }, profiler.ErrBadOptions, []string{"batches", "0"}},
		{"duplicate concurrency", func(o *profiler.Options) { o.Concurrencies = []int{1, 1} }, profiler.ErrBadOptions, []string{"concurrencies", "twice"}},
		{"percentile", func(o *profiler.Options) { o.Percentile = 101 }, profiler.ErrBadOptions, []string{"percentile 101"}},
		{"no hardware", func(o *profiler.Options) { o.Hardware = "" }, profiler.ErrBadOptions, []string{"hardware"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := options(addr)
			o.Duration, o.Warmup = 50*time.Millisecond, 0
			o.Timeout = 10 * time.Second
			tc.change(&o)
			_, err := profiler.Run(context.Background(), o)
			t.Log(err)
			if !errors.Is(err, tc.is) {
				t.Fatalf("error %v; want one wrapping %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}

	// A failing point comes back as a *PointError, with the points before it.
	o := options(addr)
	o.Batches, o.Duration, o.Warmup = []int{1, 8}, 50*time.Millisecond, 0
	res, err := profiler.Run(context.Background(), o)
	var pe *profiler.PointError
	if !errors.As(err, &pe) || pe.Batch != 8 || pe.Concurrency != 1 {
		t.Errorf("error %v; want a PointError for batch 8, concurrency 1", err)
	}
	if res == nil || len(res.Points) != 0 {
		t.Errorf("result %+v; want an empty partial result", res)
	}
}

func TestParseSizes(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  string
	}{
		{in: "1,2,4,8", want: []int{1, 2, 4, 8}},
		{in: " 16 , 1", want: []int{16, 1}},
		{in: "1,x,4", err: `"x" is not a whole number`},
		{in: "1,,4", err: `"" is not a whole number`},
		{in: "0", err: `"0" is not a whole number ≥ 1`},
		{in: "-2", err: `"-2"`},
		{in: "2,2", err: "2 is given twice"},
		{in: "", err: "--batches is empty"},
	}
	for _, tc := range tests {
		got, err := profiler.ParseSizes("--batches", tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--batches") {
				t.Errorf("ParseSizes(%q) error %v; want one naming --batches and containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("ParseSizes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("ParseSizes(%q) = %v; want %v", tc.in, got, tc.want)
			}
		}
	}
}

// recorder is an executor whose model "rec" declares one BYTES input "image" and
// records every batch it runs.
type recorder struct {
	mu      sync.Mutex
	batches [][]api.Tensor
}

var _ backends.Executor = (*recorder)(nil)

func (r *recorder) Models() []string { return []string{"rec"} }

func (r *recorder) Load(model string, batch, concurrency int) (backends.Model, error) {
	if model != "rec" {
		return nil, fmt.Errorf("%w: %q", backends.ErrUnknownModel, model)
	}
	return &recModel{r: r, info: backends.ModelInfo{
		Name: "rec", MaxBatch: batch, Concurrency: concurrency,
		Inputs:  []backends.TensorSpec{{Name: "image", Datatype: "BYTES", Shape: []int64{-1}}},
		Outputs: []backends.TensorSpec{{Name: "out", Datatype: "FP32", Shape: []int64{-1, 1}}},
	}}, nil
}

type recModel struct {
	r    *recorder
	info backends.ModelInfo
}

func (m *recModel) Info() backends.ModelInfo { return m.info }
func (m *recModel) Close() error             { return nil }

func (m *recModel) Run(_ context.Context, inputs []api.Tensor, n int) ([]api.Tensor, error) {
	kept := make([]api.Tensor, len(inputs))
	for i, t := range inputs {
		kept[i] = api.Tensor{Name: t.Name, Datatype: t.Datatype, Shape: slices.Clone(t.Shape), Data: slices.Clone(t.Data)}
	}
	m.r.mu.Lock()
	m.r.batches = append(m.r.batches, kept)
	m.r.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	return []api.Tensor{{Name: "out", Datatype: "FP32", Shape: []int64{int64(n), 1}, Data: make([]byte, 4*n)}}, nil
}

// TestRunImagesMakeBytesBatches checks what reaches the server: with two image
// inputs a batch of 3 is one BYTES tensor [3] holding image 1, image 2, image 1;
// and the progress bar counts every point.
func TestRunImagesMakeBytesBatches(t *testing.T) {
	rec := &recorder{}
	addr, srv := serve(t, rec)

	dir := t.TempDir()
	for name, body := range map[string]string{"a.png": "first image", "b.jpg": "second"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	payloads, err := loadgen.LoadInputs([]string{dir}, "image")
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	o := profiler.Options{
		Target: addr, Model: "rec", Hardware: "cpu",
		Batches: []int{3, 1}, Concurrencies: []int{1, 2},
		Duration: 50 * time.Millisecond, Warmup: 1, Inputs: payloads, Progress: &progress,
	}
	res, err := profiler.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 4 {
		t.Fatalf("%d points; want 4", len(res.Points))
	}
	seen := map[int64]bool{}
	for _, b := range rec.batches {
		if len(b) != 1 || b[0].Name != "image" || b[0].Datatype != "BYTES" || len(b[0].Shape) != 1 {
			t.Fatalf("batch %+v; want one BYTES tensor image [n]", b)
		}
		n := b[0].Shape[0]
		seen[n] = true
		var want []byte
		for k := int64(0); k < n; k++ {
			img := []string{"first image", "second"}[k%2]
			want = binary.LittleEndian.AppendUint32(want, uint32(len(img)))
			want = append(want, img...)
		}
		if !bytes.Equal(b[0].Data, want) {
			t.Errorf("batch of %d carries %q; want %q", n, b[0].Data, want)
		}
	}
	if !seen[1] || !seen[3] || len(seen) != 2 {
		t.Errorf("batch sizes seen %v; want 1 and 3", seen)
	}
	if !strings.Contains(progress.String(), "4/4") {
		t.Errorf("progress output %q; want it to reach 4/4 points", progress.String())
	}
	if l := srv.Loaded(); len(l) != 0 {
		t.Errorf("models still loaded after Run: %v", l)
	}
}

// TestRunNoLoad profiles the model as the server has it loaded and leaves it
// loaded; without a loaded model NoLoad is an error.
func TestRunNoLoad(t *testing.T) {
	addr, srv := startSim(t)
	o := options(addr)
	o.NoLoad, o.Batches, o.Concurrencies, o.Duration, o.Warmup = true, []int{2}, []int{2}, 100*time.Millisecond, 0
	if _, err := profiler.Run(context.Background(), o); !errors.Is(err, backends.ErrModelNotLoaded) {
		t.Errorf("no-load of a model not loaded: error %v; want ErrModelNotLoaded", err)
	}
	if _, err := srv.Load("m", 4, 2); err != nil {
		t.Fatal(err)
	}
	res, err := profiler.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if d := profiled(t, 2, 2); len(res.Points) != 1 || res.Points[0].Duration < d {
		t.Errorf("points %+v; want one of at least %v", res.Points, d)
	}
	if l := srv.Loaded(); len(l) != 1 || l[0].MaxBatch != 4 || l[0].Concurrency != 2 {
		t.Errorf("loaded %+v; want m still loaded as it was (batch 4, concurrency 2)", l)
	}
}
