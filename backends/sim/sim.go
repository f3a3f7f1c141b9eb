package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

// Platform is what ModelMetadata reports as the platform of a sim model.
const Platform = "piccolo_sim"

// Default tensor names of a sim model.
const (
	InputName  = "input0"  // declared FP32 [-1, -1]; other inputs are accepted too
	OutputName = "output0" // FP32 [n, 1]: row i is the checksum of input row i (a fan-out model: [k, 1]: row j the checksum of the input row plus j, mod 2^24)
)

// Options configure a Sim. The zero value is usable: no jitter.
type Options struct {
	// Jitter multiplies every batch duration by a factor drawn uniformly from
	// [1-Jitter, 1+Jitter]; 0 ≤ Jitter < 1.
	Jitter float64
	// Seed seeds the jitter: the same seed gives the same factors in the same
	// order of batches.
	Seed uint64
	// FanOut lists the fan-out models: model name → the distribution of the
	// rows it emits per input item (api.FanOut; weights need not be
	// normalised). Such a model's Info has FanOut, it loads at max batch 1
	// only, and its one item's output0 has k rows, k drawn from the
	// distribution by the item's input (a hash of its checksum: the same input, the same
	// k). Models not profiled on the hardware are ignored; nil: none fans out.
	FanOut map[string]api.FanOut
	// OutputWidth lists models whose output0 rows are wider than one value:
	// model name → FP32 values a row (≥ 1), each the row's checksum, so a
	// model can stand for one whose intermediates are large (1 MB a row is
	// 262,144). Models not listed: 1.
	OutputWidth map[string]int
}

// MaxOutputWidth bounds Options.OutputWidth: 64 MiB a row.
const MaxOutputWidth = 1 << 24

// Sim emulates one device of one hardware type from its profiles: a batch of n
// items takes the profiled duration linear between the profiled batches
// around n at the loaded concurrency (api.DurationAt), on one of the device's lanes, which every model loaded on
// the Sim shares (see device). Sim's configuration is immutable after New; it is
// safe for concurrent use.
type Sim struct {
	hardware string
	profiles map[string][]api.ProfileEntry // model -> entries on this hardware
	models   []string                      // sorted
	opts     Options
	fanOut   map[string]fanOut // model -> its normalised distribution (Options.FanOut)
	dev      *device
}

// fanOut is a fan-out model's normalised distribution of rows per item and
// its cumulative shares (api.FanOut.Draw).
type fanOut struct {
	f   api.FanOut
	cum []float64
}

var _ backends.Executor = (*Sim)(nil)

// New returns a Sim of hardware built from the profiles of that hardware (others
// are ignored). It errors when no profile is for hardware, when an entry has a
// batch, concurrency or duration that is not positive, when Jitter is outside
// [0, 1), or when a distribution of Options.FanOut is not one
// (api.FanOut.Normalized fails).
func New(hardware string, profiles []api.Profile, opts Options) (*Sim, error) {
	if hardware == "" {
		return nil, fmt.Errorf("sim: hardware type is empty")
	}
	if opts.Jitter < 0 || opts.Jitter >= 1 || math.IsNaN(opts.Jitter) {
		return nil, fmt.Errorf("sim: jitter %v is out of range; want 0 ≤ jitter < 1", opts.Jitter)
	}
	s := &Sim{hardware: hardware, profiles: map[string][]api.ProfileEntry{}, opts: opts, fanOut: map[string]fanOut{}, dev: &device{}}
	for model, w := range opts.OutputWidth {
		if w < 1 || w > MaxOutputWidth {
			return nil, fmt.Errorf("sim: output width of %q is %d; want 1 to %d FP32 values a row", model, w, MaxOutputWidth)
		}
	}
	for _, model := range slices.Sorted(maps.Keys(opts.FanOut)) {
		f, ok := opts.FanOut[model].Normalized()
		if !ok {
			return nil, fmt.Errorf("sim: fan-out of %q: %v is not a distribution of rows per item; want items from 0 to %d listed once, weights finite and ≥ 0, and some weight > 0",
				model, opts.FanOut[model], api.MaxFanOutItems)
		}
		s.fanOut[model] = fanOut{f: f, cum: f.Cumulative()}
	}
	var others []string
	for _, p := range profiles {
		if p.Hardware != hardware {
			others = append(others, p.Hardware)
			continue
		}
		for _, e := range p.Entries {
			if e.Batch < 1 || e.Concurrency < 0 || e.Duration <= 0 {
				return nil, fmt.Errorf("sim: %s: profile of %q on %q: entry batch %d, concurrency %d, duration %v: want batch ≥ 1, concurrency ≥ 1 (0 means 1) and duration > 0",
					e.Source, p.Model, hardware, e.Batch, e.Concurrency, e.Duration.D())
			}
		}
		s.profiles[p.Model] = append(s.profiles[p.Model], p.Entries...)
	}
	if len(s.profiles) == 0 {
		if len(others) == 0 {
			return nil, fmt.Errorf("sim: no profiles for hardware %q: the config has no profiles", hardware)
		}
		return nil, fmt.Errorf("sim: no profiles for hardware %q; the config profiles: %s", hardware, strings.Join(uniq(others), ", "))
	}
	for m := range s.profiles {
		s.models = append(s.models, m)
	}
	sort.Strings(s.models)
	return s, nil
}

func uniq(xs []string) []string {
	sort.Strings(xs)
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// Hardware returns the emulated hardware type.
func (s *Sim) Hardware() string { return s.hardware }

// Models lists the models profiled on this hardware, sorted.
func (s *Sim) Models() []string { return s.models }

// Default returns the batch and concurrency a model is loaded with when none is
// asked: those of its largest profiled entry (largest batch, then largest
// concurrency), so that every profiled batch size fits; a fan-out model
// (Options.FanOut) takes batch 1, the only one it runs, at that concurrency.
func (s *Sim) Default(model string) (batch, concurrency int, err error) {
	entries, ok := s.profiles[model]
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q has no profile on %s; profiled: %s", backends.ErrUnknownModel, model, s.hardware, strings.Join(s.models, ", "))
	}
	var best api.ProfileEntry
	for _, e := range entries {
		if e.Batch > best.Batch || (e.Batch == best.Batch && lanes(e.Concurrency) > lanes(best.Concurrency)) {
			best = e
		}
	}
	if _, ok := s.fanOut[model]; ok {
		return 1, lanes(best.Concurrency), nil
	}
	return best.Batch, lanes(best.Concurrency), nil
}

func lanes(c int) int {
	if c == 0 {
		return 1
	}
	return c
}

// Load prepares model with a max batch and a concurrency (0: Default). The
// profile must have entries at that concurrency, one of them with batch ≥ the
// max batch, and a fan-out model (Options.FanOut) takes max batch 1 only;
// otherwise the error wraps backends.ErrInvalidInput and says what is allowed.
func (s *Sim) Load(model string, batch, concurrency int) (backends.Model, error) {
	entries, ok := s.profiles[model]
	if !ok {
		return nil, fmt.Errorf("%w: %q has no profile on %s; profiled: %s", backends.ErrUnknownModel, model, s.hardware, strings.Join(s.models, ", "))
	}
	fo, fans := s.fanOut[model]
	if fans && batch > 1 {
		return nil, fmt.Errorf("%w: %q on %s fans out (any number of output rows for its one input item), so it runs batch 1 only, not batch %d", backends.ErrInvalidInput, model, s.hardware, batch)
	}
	if batch == 0 || concurrency == 0 {
		b, c, _ := s.Default(model)
		if concurrency == 0 {
			concurrency = c
		}
		if batch == 0 {
			batch = largestBatch(entries, concurrency)
			if concurrency == c || fans {
				batch = b
			}
		}
	}
	// at[c] lists the entries of concurrency c sorted by batch.
	var at []api.ProfileEntry
	concs := map[int]bool{}
	for _, e := range entries {
		concs[lanes(e.Concurrency)] = true
		if lanes(e.Concurrency) == concurrency {
			at = append(at, e)
		}
	}
	if len(at) == 0 {
		return nil, fmt.Errorf("%w: %q on %s is not profiled at concurrency %d; profiled concurrencies: %v", backends.ErrInvalidInput, model, s.hardware, concurrency, slices.Sorted(maps.Keys(concs)))
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Batch < at[j].Batch })
	if max := at[len(at)-1].Batch; batch > max {
		return nil, fmt.Errorf("%w: %q on %s at concurrency %d is profiled up to batch %d; batch %d has no duration", backends.ErrInvalidInput, model, s.hardware, concurrency, max, batch)
	}
	// durations[n] for n = 1..batch: linear between the profiled batches
	// around n (api.DurationAt, the project's one model of a partial batch).
	durations := make([]time.Duration, batch+1)
	for n := 1; n <= batch; n++ {
		durations[n], _ = api.DurationAt(at, concurrency, float64(n)) // batch ≤ the largest entry: checked above
	}
	s.dev.grow(concurrency)
	width := max(s.opts.OutputWidth[model], 1)
	m := &simModel{
		info: backends.ModelInfo{
			Name: model, Platform: Platform, MaxBatch: batch, Concurrency: concurrency,
			Inputs:    []backends.TensorSpec{{Name: InputName, Datatype: "FP32", Shape: []int64{-1, -1}}},
			Outputs:   []backends.TensorSpec{{Name: OutputName, Datatype: "FP32", Shape: []int64{-1, int64(width)}}},
			AnyInputs: true,
			FanOut:    fans,
		},
		fanOut:    fo,
		width:     width,
		durations: durations,
		lanes:     make(chan struct{}, concurrency),
		dev:       s.dev,
		jitter:    s.opts.Jitter,
		seed:      s.opts.Seed ^ fnv64(model),
	}
	return m, nil
}

func largestBatch(entries []api.ProfileEntry, concurrency int) int {
	b := 0
	for _, e := range entries {
		if lanes(e.Concurrency) == concurrency && e.Batch > b {
			b = e.Batch
		}
	}
	return b
}

func fnv64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// simModel is one loaded model: a table of durations by batch size, a lane
// semaphore of its own (its concurrency) and its Sim's device lanes. Batches
// waiting for a lane queue in FIFO order (a Go channel's blocked senders are
// served in order; the device's queue is FIFO).
type simModel struct {
	info      backends.ModelInfo
	fanOut    fanOut          // a fan-out model's distribution; f nil otherwise
	width     int             // values a row of output0 (Options.OutputWidth)
	durations []time.Duration // index: batch size n
	lanes     chan struct{}
	dev       *device
	jitter    float64
	seed      uint64
	batches   atomic.Uint64 // jitter draw counter
}

var _ backends.Model = (*simModel)(nil)

func (m *simModel) Info() backends.ModelInfo { return m.info }

func (m *simModel) Close() error { return nil }

// Duration returns how long a batch of n items runs, before jitter.
func (m *simModel) Duration(n int) time.Duration { return m.durations[n] }

// Run computes the outputs, waits for a lane of the model and then one of the
// device, then holds both for the profiled duration of n items (times the
// jitter factor) or until ctx ends. A fan-out model's one item (n = 1) takes
// batch 1's duration whatever the k rows it emits.
func (m *simModel) Run(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, error) {
	out, _, err := m.RunTimed(ctx, inputs, n)
	return out, err
}

var _ backends.TimedModel = (*simModel)(nil)

// RunTimed is Run with its Timing: Queue, the wait for the model's lane and
// the device's; Compute, the emulated device time (the profiled duration
// times the jitter), not the timer's wall time: the emulated device is as
// fast as its profile however late a loaded host wakes the timer, as a
// real device's own time does not count its host's scheduling.
func (m *simModel) RunTimed(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, backends.Timing, error) {
	if n < 1 || n >= len(m.durations) {
		return nil, backends.Timing{}, fmt.Errorf("%w: batch of %d items; the loaded max batch is %d", backends.ErrInvalidInput, n, m.info.MaxBatch)
	}
	out, err := m.output(inputs, n)
	if err == nil && m.width > 1 {
		out = widen(out, m.width)
	}
	if err != nil {
		return nil, backends.Timing{}, fmt.Errorf("%w: %v", backends.ErrInvalidInput, err)
	}
	d := m.jittered(n)
	start := time.Now()
	select {
	case m.lanes <- struct{}{}:
	case <-ctx.Done():
		return nil, backends.Timing{}, ctx.Err()
	}
	defer func() { <-m.lanes }()
	if err := m.dev.acquire(ctx); err != nil {
		return nil, backends.Timing{}, err
	}
	defer m.dev.release()
	tm := backends.Timing{Queue: time.Since(start), Compute: max(d, 1)}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return []api.Tensor{out}, tm, nil
	case <-ctx.Done():
		return nil, backends.Timing{}, ctx.Err()
	}
}

// output computes output0 of a batch of n items: FP32 [n, 1], row i the
// checksum of input row i; a fan-out model's (n = 1): FP32 [k, 1], k drawn
// from its distribution by the item's checksum, row j (c + j) mod 2^24 (fanOutRow).
func (m *simModel) output(inputs []api.Tensor, n int) (api.Tensor, error) {
	out := api.Tensor{Name: OutputName, Datatype: "FP32", Shape: []int64{int64(n), 1}, Data: make([]byte, 4*n)}
	if err := checksums(inputs, n, out.Data); err != nil {
		return api.Tensor{}, err
	}
	if m.fanOut.f == nil {
		return out, nil
	}
	c := math.Float32frombits(binary.LittleEndian.Uint32(out.Data)) // n = 1: MaxBatch 1
	k := m.fanOut.f.Draw(m.fanOut.cum, fanOutU(c))
	out.Shape[0], out.Data = int64(k), make([]byte, 4*k)
	for j := 0; j < k; j++ {
		binary.LittleEndian.PutUint32(out.Data[4*j:], math.Float32bits(fanOutRow(c, j)))
	}
	return out, nil
}

// widen repeats every row's one value of out width times: FP32 [k, 1] →
// [k, width].
func widen(out api.Tensor, width int) api.Tensor {
	k := int(out.Shape[0])
	data := make([]byte, 4*k*width)
	for i := 0; i < k; i++ {
		v := out.Data[4*i : 4*i+4]
		row := data[4*i*width : 4*(i+1)*width]
		for j := 0; j < len(row); j += 4 {
			copy(row[j:j+4], v)
		}
	}
	return api.Tensor{Name: out.Name, Datatype: out.Datatype, Shape: []int64{int64(k), int64(width)}, Data: data}
}

// jittered returns the duration of a batch of n items times this batch's jitter
// factor, drawn from [1-J, 1+J] by a seeded counter-based generator (lock-free).
func (m *simModel) jittered(n int) time.Duration {
	d := m.durations[n]
	if m.jitter > 0 {
		u := float64(splitmix64(m.seed+m.batches.Add(1)*0x9e3779b97f4a7c15)>>11) / (1 << 53)
		d = time.Duration(float64(d) * (1 + m.jitter*(2*u-1)))
	}
	return d
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// checksums writes into dst (4n bytes, FP32 little-endian) the checksum of every
// input row: row i of every input, in input order, hashed together.
func checksums(inputs []api.Tensor, n int, dst []byte) error {
	offsets := make([][]int, len(inputs))
	for j := range inputs {
		var err error
		if offsets[j], err = inputs[j].RowOffsets(nil); err != nil {
			return err
		}
		if len(offsets[j]) != n+1 {
			return fmt.Errorf("input %q has %d rows; want %d", inputs[j].Name, len(offsets[j])-1, n)
		}
	}
	for i := 0; i < n; i++ {
		h := uint32(fnvOffset)
		for j := range inputs {
			h = fnvAdd(h, inputs[j].Data[offsets[j][i]:offsets[j][i+1]])
		}
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(fold(h)))
	}
	return nil
}

const (
	fnvOffset = 2166136261
	fnvPrime  = 16777619
)

func fnvAdd(h uint32, b []byte) uint32 {
	for _, c := range b {
		h ^= uint32(c)
		h *= fnvPrime
	}
	return h
}

// fold keeps 24 bits of h, which a float32 holds exactly.
func fold(h uint32) float32 { return float32((h ^ h>>24) & 0xffffff) }

// Checksum returns what a sim model outputs in output0 for one input row, given
// that row's bytes of every input in request order (for an item of one row: each
// input's Data). FNV-1a over the bytes, folded to 24 bits, as a float32. Tests
// use it to check that item i's output came from item i's input.
func Checksum(rows ...[]byte) float32 {
	h := uint32(fnvOffset)
	for _, r := range rows {
		h = fnvAdd(h, r)
	}
	return fold(h)
}

// fanOutU hashes an item's checksum c (a whole number below 2^24) into a
// uniform u in [0, 1): the item's draw from a fan-out distribution.
func fanOutU(c float32) float64 {
	return float64(splitmix64(uint64(c))>>11) / (1 << 53)
}

// fanOutRow is row j of a fan-out answer for the item of checksum c:
// (c + j) mod 2^24.
func fanOutRow(c float32, j int) float32 {
	return float32((uint32(c) + uint32(j)) & 0xffffff)
}
