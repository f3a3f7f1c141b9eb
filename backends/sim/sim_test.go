package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

func profiles(t *testing.T, text string) []api.Profile {
	t.Helper()
	var cfg api.Config
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.Profiles
}

const resnet = `
profiles:
  - model: resnet50
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 5ms}
      - {batch: 4, concurrency: 1, duration: 9ms}
      - {batch: 16, concurrency: 1, duration: 30ms}
      - {batch: 2, concurrency: 2, duration: 8ms}
      - {batch: 8, concurrency: 2, duration: 40ms}
  - model: ssd
    hardware: t4
    entries:
      - {batch: 1, duration: 50ms}
`

func TestDurationTable(t *testing.T) {
	s, err := New("v100", profiles(t, resnet), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		batch, concurrency int
		want               map[int]time.Duration // batch size n → duration
	}{
		// Linear between the profiled batches around n (1→5, 4→9, 16→30 ms), the
		// smallest's below it.
		{16, 1, map[int]time.Duration{1: 5 * time.Millisecond, 2: 6333333, 4: 9 * time.Millisecond, 5: 10750 * time.Microsecond, 10: 19500 * time.Microsecond, 16: 30 * time.Millisecond}},
		{4, 1, map[int]time.Duration{1: 5 * time.Millisecond, 3: 7666666, 4: 9 * time.Millisecond}},
		{8, 2, map[int]time.Duration{1: 8 * time.Millisecond, 2: 8 * time.Millisecond, 3: 13333333, 8: 40 * time.Millisecond}},
	} {
		m, err := s.Load("resnet50", tc.batch, tc.concurrency)
		if err != nil {
			t.Fatal(err)
		}
		sm := m.(*simModel)
		for n, want := range tc.want {
			if got := sm.Duration(n); got != want {
				t.Errorf("b=%d c=%d: batch of %d takes %v, want %v", tc.batch, tc.concurrency, n, got, want)
			}
		}
		if info := m.Info(); info.MaxBatch != tc.batch || info.Concurrency != tc.concurrency || cap(sm.lanes) != tc.concurrency {
			t.Errorf("info %+v, lanes %d", info, cap(sm.lanes))
		}
	}
}

func TestLoadDefaultsAndErrors(t *testing.T) {
	s, err := New("v100", profiles(t, resnet), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Models(); len(got) != 1 || got[0] != "resnet50" {
		t.Errorf("models %v, want [resnet50] (ssd is on t4)", got)
	}
	m, err := s.Load("resnet50", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if info := m.Info(); info.MaxBatch != 16 || info.Concurrency != 1 {
		t.Errorf("default load %d/%d, want the largest entry 16/1", info.MaxBatch, info.Concurrency)
	}
	if m, err = s.Load("resnet50", 0, 2); err != nil || m.Info().MaxBatch != 8 {
		t.Errorf("concurrency 2 alone: %v, %v; want max batch 8", m, err)
	}
	for _, tc := range []struct {
		model  string
		b, c   int
		target error
		says   string
	}{
		{"ssd", 1, 1, backends.ErrUnknownModel, "resnet50"},
		{"resnet50", 1, 3, backends.ErrInvalidInput, "[1 2]"},
		{"resnet50", 17, 1, backends.ErrInvalidInput, "up to batch 16"},
		{"resnet50", 9, 2, backends.ErrInvalidInput, "up to batch 8"},
	} {
		if _, err := s.Load(tc.model, tc.b, tc.c); !errors.Is(err, tc.target) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Load(%s, %d, %d) = %v; want %v saying %q", tc.model, tc.b, tc.c, err, tc.target, tc.says)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name, hw, text string
		opts           Options
		says           string
	}{
		{"no profile for hardware", "a100", resnet, Options{}, "t4, v100"},
		{"jitter too large", "v100", resnet, Options{Jitter: 1}, "jitter"},
		{"negative jitter", "v100", resnet, Options{Jitter: -0.1}, "jitter"},
		{"zero duration", "v100", "profiles: [{model: m, hardware: v100, entries: [{batch: 1, duration: 0s}]}]", Options{}, "duration > 0"},
		{"zero batch", "v100", "profiles: [{model: m, hardware: v100, entries: [{batch: 0, duration: 1ms}]}]", Options{}, "batch ≥ 1"},
		{"no profiles", "v100", "{}", Options{}, "no profiles"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.hw, profiles(t, tc.text), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

func TestJitterIsSeededAndBounded(t *testing.T) {
	ps := profiles(t, "profiles: [{model: m, hardware: cpu, entries: [{batch: 1, duration: 1ms}]}]")
	draws := func(seed uint64) []time.Duration {
		s, err := New("cpu", ps, Options{Jitter: 0.5, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := s.Load("m", 1, 1)
		sm := m.(*simModel)
		var out []time.Duration
		for i := 0; i < 200; i++ {
			out = append(out, sm.jittered(1))
		}
		return out
	}
	a, b, c := draws(1), draws(1), draws(2)
	same, lo, hi := 0, time.Hour, time.Duration(0)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs with the same seed: %v vs %v", i, a[i], b[i])
		}
		if a[i] == c[i] {
			same++
		}
		lo, hi = min(lo, a[i]), max(hi, a[i])
	}
	if same > 20 {
		t.Errorf("seeds 1 and 2 agree on %d of 200 draws", same)
	}
	if lo < 500*time.Microsecond || hi > 1500*time.Microsecond || hi-lo < 500*time.Microsecond {
		t.Errorf("jitter 0.5 of 1ms drew from %v to %v; want spread over [0.5ms, 1.5ms]", lo, hi)
	}
}

func TestRunChecksumsRowsAndHonoursCtx(t *testing.T) {
	s, err := New("cpu", profiles(t, "profiles: [{model: m, hardware: cpu, entries: [{batch: 4, duration: 10s}]}]"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.Load("m", 4, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	in := []api.Tensor{{Name: "x", Datatype: "UINT8", Shape: []int64{2, 3}, Data: []byte{1, 2, 3, 4, 5, 6}}}
	start := time.Now()
	if _, err := m.Run(ctx, in, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Run ignored ctx for %v", el)
	}
	if Checksum([]byte{1, 2, 3}) == Checksum([]byte{4, 5, 6}) || Checksum([]byte{1, 2}, []byte{3}) != Checksum([]byte{1, 2, 3}) {
		t.Error("Checksum does not tell rows apart, or depends on how a row is cut")
	}
}

const twoModels = `
profiles:
  - model: a
    hardware: g
    entries:
      - {batch: 1, concurrency: 1, duration: 150ms}
  - model: b
    hardware: g
    entries:
      - {batch: 1, concurrency: 1, duration: 150ms}
`

// TestModelsOnOneDeviceContend: two models loaded on one Sim (one device, one
// lane) run their batches one after the other, while the same two batches on
// two Sims (two devices) run at once. The test fails if the models of one
// device do not queue behind each other.
func TestModelsOnOneDeviceContend(t *testing.T) {
	in := []api.Tensor{{Name: InputName, Datatype: "FP32", Shape: []int64{1, 1}, Data: make([]byte, 4)}}
	both := func(ma, mb backends.Model) time.Duration {
		start := time.Now()
		errs := make(chan error, 2)
		for _, m := range []backends.Model{ma, mb} {
			go func() {
				_, err := m.Run(context.Background(), in, 1)
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start)
	}
	load := func(s *Sim, model string) backends.Model {
		m, err := s.Load(model, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	one, err := New("g", profiles(t, twoModels), Options{})
	if err != nil {
		t.Fatal(err)
	}
	shared := both(load(one, "a"), load(one, "b"))
	other, _ := New("g", profiles(t, twoModels), Options{})
	apart := both(load(one, "a"), load(other, "b"))
	const d = 150 * time.Millisecond
	if shared < 2*d-10*time.Millisecond {
		t.Errorf("two models on one device (one lane) ran two 150ms batches in %v: want them to queue (≥ 2 × 150ms)", shared)
	}
	if apart >= 2*d-10*time.Millisecond {
		t.Errorf("the same batches on two devices took %v: want them to run at once (< 2 × 150ms)", apart)
	}
	t.Logf("two 150ms batches of two models: one device %v, two devices %v", shared, apart)
}

// TestDeviceLanesGrowAndCancel: the device has the largest loaded
// concurrency's lanes; a waiter whose context ends leaves the queue.
func TestDeviceLanesGrowAndCancel(t *testing.T) {
	d := &device{}
	d.grow(1)
	if err := d.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := d.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire on a full device: %v, want the context's deadline", err)
	}
	got := make(chan error, 1)
	go func() { got <- d.acquire(context.Background()) }()
	for waiting, deadline := 0, time.Now().Add(10*time.Second); waiting == 0; { // the waiter is queued: grow must hand it the lane
		if time.Now().After(deadline) {
			t.Fatal("the second acquire never queued on the full device")
		}
		time.Sleep(time.Millisecond)
		d.mu.Lock()
		waiting = len(d.waiting)
		d.mu.Unlock()
	}
	d.grow(2) // the waiter gets the new lane
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiter did not get the lane the device grew")
	}
	d.release()
	d.release()
	if d.busy != 0 || len(d.waiting) != 0 {
		t.Errorf("busy %d, waiting %d after releasing every lane", d.busy, len(d.waiting))
	}
}

const detector = `
profiles:
  - model: det
    hardware: g
    entries:
      - {batch: 1, concurrency: 1, duration: 1ms}
      - {batch: 8, concurrency: 2, duration: 4ms}
  - model: cls
    hardware: g
    entries:
      - {batch: 8, concurrency: 1, duration: 2ms}
`

// TestFanOutModel: a model listed in Options.FanOut reports Info().FanOut,
// loads at batch 1 only (by default too), emits over many distinct inputs a
// row count whose mean is the distribution's and whose values are its
// items, the same count for the same input, and rows that tell the item and
// their place; a model not listed is unchanged.
func TestFanOutModel(t *testing.T) {
	f := api.FanOut{{Items: 0, Share: 120}, {Items: 1, Share: 310}, {Items: 4, Share: 55}, {Items: 12, Share: 9}} // measured counts
	s, err := New("g", profiles(t, detector), Options{FanOut: map[string]api.FanOut{"det": f, "elsewhere": {{Items: 2, Share: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Load("det", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if info := m.Info(); !info.FanOut || info.MaxBatch != 1 || info.Concurrency != 2 {
		t.Errorf("default load of det: %+v; want FanOut, max batch 1 at the largest entry's concurrency 2", info)
	}
	if b, c, err := s.Default("det"); b != 1 || c != 2 || err != nil {
		t.Errorf("Default(det) = %d, %d, %v; want 1, 2", b, c, err)
	}
	if m, err := s.Load("det", 1, 1); err != nil || !m.Info().FanOut || m.(*simModel).Duration(1) != time.Millisecond {
		t.Errorf("Load(det, 1, 1) = %v; want the fan-out model at batch 1's 1ms", err)
	}
	if _, err := s.Load("det", 4, 2); !errors.Is(err, backends.ErrInvalidInput) || !strings.Contains(err.Error(), `"det"`) || !strings.Contains(err.Error(), "fans out") || !strings.Contains(err.Error(), "batch 1 only") {
		t.Errorf("Load(det, 4, 2) = %v; want ErrInvalidInput naming det and saying it fans out so it runs batch 1 only", err)
	}
	if c, err := s.Load("cls", 0, 0); err != nil || c.Info().FanOut || c.Info().MaxBatch != 8 {
		t.Errorf("Load(cls) = %v; want a plain model at batch 8", err)
	}

	norm, _ := f.Normalized()
	listed := map[int]bool{}
	for _, x := range f {
		listed[x.Items] = true
	}
	sm := m.(*simModel)
	const n = 20000
	hist := map[int]int{}
	total := 0
	row := make([]byte, 4)
	for i := range n {
		binary.LittleEndian.PutUint32(row, uint32(i))
		in := []api.Tensor{{Name: InputName, Datatype: "FP32", Shape: []int64{1, 1}, Data: row}}
		out, err := sm.output(in, 1)
		if err != nil {
			t.Fatal(err)
		}
		k := int(out.Shape[0])
		if err := out.Validate(); err != nil || len(out.Data) != 4*k || len(out.Shape) != 2 || out.Shape[1] != 1 {
			t.Fatalf("input %d: output shape %v with %d bytes (%v); want a valid [k, 1] of 4k bytes", i, out.Shape, len(out.Data), err)
		}
		if want := fanOutRows(norm, row); k != want {
			t.Fatalf("input %d: %d rows; fanOutRows says %d", i, k, want)
		}
		hist[k]++
		total += k
	}
	for k := range hist {
		if !listed[k] {
			t.Errorf("%d inputs fanned out to %d rows, which the distribution does not list (histogram %v)", hist[k], k, hist)
		}
	}
	if mean, want := float64(total)/n, norm.Mean(); math.Abs(mean-want) > 0.03*want {
		t.Errorf("mean rows per item %.4f over %d inputs; want the distribution's %.4f within 3%% (histogram %v)", mean, n, want, hist)
	}
	t.Logf("rows per item over %d inputs: mean %.4f (distribution's %.4f), histogram %v", n, float64(total)/n, norm.Mean(), hist)
	for _, x := range norm {
		if got := float64(hist[x.Items]) / n; math.Abs(got-x.Share) > 0.02 {
			t.Errorf("share of items with %d rows %.4f; want %.4f within 0.02", x.Items, got, x.Share)
		}
	}

	// Through Run: the same input twice gives the same rows, each the
	// input's checksum plus its place.
	in := func(b ...byte) []api.Tensor {
		return []api.Tensor{{Name: "img", Datatype: "UINT8", Shape: []int64{1, int64(len(b))}, Data: b}}
	}
	var img []byte
	for i := 0; img == nil; i++ { // an input that fans out to more than one row
		if b := []byte{byte(i), byte(i >> 8), 7}; fanOutRows(norm, b) > 1 {
			img = b
		}
	}
	first, err := m.Run(context.Background(), in(img...), 1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.Run(context.Background(), in(img...), 1)
	if err != nil {
		t.Fatal(err)
	}
	k := fanOutRows(norm, img)
	if len(first) != 1 || first[0].Name != OutputName || first[0].Shape[0] != int64(k) || !bytes.Equal(first[0].Data, again[0].Data) {
		t.Fatalf("Run twice on one input: %v then %v; want output0 of %d rows both times", first, again, k)
	}
	for j := range k {
		got := math.Float32frombits(binary.LittleEndian.Uint32(first[0].Data[4*j:]))
		if want := fanOutChecksum(j, img); got != want || want != float32((uint32(Checksum(img))+uint32(j))%(1<<24)) {
			t.Errorf("row %d is %v; want fanOutChecksum %v (the input's checksum %v plus %d)", j, got, want, Checksum(img), j)
		}
	}
	if _, err := m.Run(context.Background(), []api.Tensor{{Name: InputName, Datatype: "FP32", Shape: []int64{2, 1}, Data: make([]byte, 8)}}, 2); !errors.Is(err, backends.ErrInvalidInput) {
		t.Errorf("a batch of 2 on the fan-out model: %v; want ErrInvalidInput", err)
	}
}

func TestFanOutChecksumWraps(t *testing.T) {
	if got := fanOutRow(1<<24-1, 2); got != 1 {
		t.Errorf("row 2 of checksum 2^24-1 is %v; want 1 (mod 2^24)", got)
	}
}

func TestNewRejectsBadFanOut(t *testing.T) {
	for name, f := range map[string]api.FanOut{
		"empty":          {},
		"zero weights":   {{Items: 1, Share: 0}},
		"negative items": {{Items: -1, Share: 1}},
		"too many items": {{Items: api.MaxFanOutItems + 1, Share: 1}},
		"listed twice":   {{Items: 1, Share: 1}, {Items: 1, Share: 2}},
		"NaN weight":     {{Items: 1, Share: math.NaN()}},
	} {
		_, err := New("g", profiles(t, detector), Options{FanOut: map[string]api.FanOut{"det": f}})
		if err == nil || !strings.Contains(err.Error(), `fan-out of "det"`) || !strings.Contains(err.Error(), "listed once") {
			t.Errorf("%s: New = %v; want an error naming det and what a distribution is", name, err)
		}
	}
}

// fanOutRows returns the rows k a fan-out model with distribution f
// (normalised: api.FanOut.Normalized, as Options.FanOut's are made) emits for
// the input item whose row of every input, in request order, is rows: f's
// items at the cumulative share u in [0, 1) that the item's Checksum hashes
// to (splitmix64), so the same input always fans out to the same k and many
// distinct inputs fan out as f says.
func fanOutRows(f api.FanOut, rows ...[]byte) int {
	return f.Draw(f.Cumulative(), fanOutU(Checksum(rows...)))
}

// fanOutChecksum returns row j (0 ≤ j < k) of a fan-out model's output0 for
// the input item whose row of every input, in request order, is rows: the
// item's Checksum plus j, modulo 2^24 (a float32 holds it exactly), so a row
// tells both the item it came from and its place among the item's k rows.
func fanOutChecksum(j int, rows ...[]byte) float32 {
	return fanOutRow(Checksum(rows...), j)
}
