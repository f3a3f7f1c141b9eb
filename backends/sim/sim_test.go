package sim

import (
	"context"
	"errors"
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
