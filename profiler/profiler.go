package profiler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/loadgen"
)

// Defaults of Options (and of the `piccolo profile` flags).
const (
	// DefaultPercentile is the latency percentile recorded as a point's duration.
	// The planner's WCL (d + b/w, Theorem 1) needs a batch duration that a batch
	// rarely exceeds, so the median is too optimistic; p99 rests on the slowest
	// 1% of calls, a handful in a run of seconds, and on a shared CPU swings with
	// whatever else runs. p90 is a bound most batches keep that a short run still
	// measures reproducibly.
	DefaultPercentile = 90.0
	// DefaultDuration is how long each point is measured.
	DefaultDuration = 5 * time.Second
	// DefaultWarmup is the number of warm-up calls per worker.
	DefaultWarmup = 3
	// DefaultWarmupTime bounds the warm-up of a point.
	DefaultWarmupTime = time.Second
	// DefaultTimeout bounds one call (load, metadata or inference).
	DefaultTimeout = time.Minute
)

// ErrBadOptions marks Options that Run cannot use; the message names the field.
var ErrBadOptions = errors.New("bad profiler options")

// Options say what to profile and how. Zero Duration, WarmupTime, Percentile and
// Timeout take the defaults above; Warmup 0 means no warm-up.
type Options struct {
	// Target is the server's gRPC address, host:port.
	Target string
	// Model is the model to profile, as the server names it.
	Model string
	// Hardware names the hardware type the server runs on; it becomes the
	// profile's hardware (it must match a hardware entry of the planner's config).
	Hardware string
	// Batches are the batch sizes to measure (items, ≥ 1, distinct).
	Batches []int
	// Concurrencies are the concurrencies to measure (lanes, ≥ 1, distinct).
	Concurrencies []int
	// Duration is how long each point is measured, warm-up excluded.
	Duration time.Duration
	// Warmup is the number of unrecorded calls each worker makes before a
	// point is measured; 0: none.
	Warmup int
	// WarmupTime ends a point's warm-up early once it has lasted this long (each
	// worker still makes at least one call when Warmup > 0).
	WarmupTime time.Duration
	// Percentile (0 < p ≤ 100) of the call latencies becomes the point's duration.
	Percentile float64
	// Inputs, if any, are the requests whose rows make the batches (see the
	// package doc); all must carry the same tensors. None: zeros of the model
	// metadata's declared inputs.
	Inputs []loadgen.Payload
	// NoLoad profiles the model as the server has it loaded: no
	// RepositoryModelLoad, concurrency is only the number of calls in flight.
	NoLoad bool
	// Timeout bounds each call; default DefaultTimeout.
	Timeout time.Duration
	// Progress, if not nil, receives a progress bar over the points.
	Progress io.Writer
}

// Point is the measurement of one (batch, concurrency).
type Point struct {
	Batch       int
	Concurrency int
	// Calls is the number of measured calls (warm-up excluded).
	Calls int
	// P50, P90, P99 and Max are nearest-rank latency percentiles of the calls,
	// as the client saw them (network and server overheads included).
	P50, P90, P99, Max time.Duration
	// Duration is the Result.Percentile-th percentile: the profile entry's d.
	Duration time.Duration
	// Throughput is the profile's t = c·b/d, items/s.
	Throughput float64
	// ItemsPerSec is what the point achieved: Calls·b over Elapsed.
	ItemsPerSec float64
	// Elapsed is the wall time of the measurement (warm-up excluded).
	Elapsed time.Duration
	// Latencies are the measured calls' latencies, sorted ascending (len
	// Calls): what a caller that keeps its own estimate (`piccolo demo`
	// feeding calibrate.Estimator.Observe) counts one by one.
	Latencies []time.Duration
}

// Result is the outcome of Run: the points in the order of measurement
// (concurrency ascending, then batch ascending).
type Result struct {
	Target, Model, Hardware string
	// Percentile is the one recorded as each point's Duration.
	Percentile float64
	Points     []Point
}

// PointError is the failure of one (batch, concurrency): the server refused the
// load or the batch, or a call failed.
type PointError struct {
	Batch, Concurrency int
	Err                error
}

func (e *PointError) Error() string {
	return fmt.Sprintf("point batch %d, concurrency %d: %v", e.Batch, e.Concurrency, e.Err)
}

// Unwrap returns the cause.
func (e *PointError) Unwrap() error { return e.Err }

// normalize applies the defaults and checks o.
func (o *Options) normalize() error {
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.WarmupTime == 0 {
		o.WarmupTime = DefaultWarmupTime
	}
	if o.Percentile == 0 {
		o.Percentile = DefaultPercentile
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	switch {
	case o.Target == "":
		return fmt.Errorf("%w: target is empty; want the server's gRPC address host:port", ErrBadOptions)
	case o.Model == "":
		return fmt.Errorf("%w: model is empty; want the model name the server knows", ErrBadOptions)
	case o.Hardware == "":
		return fmt.Errorf("%w: hardware is empty; want the hardware type the server runs on, such as v100", ErrBadOptions)
	case o.Duration < 0 || o.WarmupTime < 0 || o.Timeout < 0:
		return fmt.Errorf("%w: duration %v, warm-up time %v and timeout %v must be > 0", ErrBadOptions, o.Duration, o.WarmupTime, o.Timeout)
	case o.Warmup < 0:
		return fmt.Errorf("%w: warm-up %d calls: must be ≥ 0", ErrBadOptions, o.Warmup)
	case !(o.Percentile > 0 && o.Percentile <= 100):
		return fmt.Errorf("%w: percentile %v: want 0 < p ≤ 100, such as 90", ErrBadOptions, o.Percentile)
	}
	for _, l := range []struct {
		name string
		xs   *[]int
	}{{"batches", &o.Batches}, {"concurrencies", &o.Concurrencies}} {
		if len(*l.xs) == 0 {
			return fmt.Errorf("%w: no %s given", ErrBadOptions, l.name)
		}
		xs := slices.Clone(*l.xs)
		slices.Sort(xs)
		for i, x := range xs {
			if x < 1 {
				return fmt.Errorf("%w: %s: %d is not allowed; want whole numbers ≥ 1", ErrBadOptions, l.name, x)
			}
			if i > 0 && x == xs[i-1] {
				return fmt.Errorf("%w: %s: %d is given twice", ErrBadOptions, l.name, x)
			}
		}
		*l.xs = xs
	}
	return nil
}

// Run profiles o.Model on o.Target at every (batch, concurrency) of o; see the
// package doc for the procedure and the errors. It returns the points measured so
// far together with the error when a point fails or ctx ends.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	client, err := backends.NewClient(o.Target, backends.ClientOptions{})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	res := &Result{Target: o.Target, Model: o.Model, Hardware: o.Hardware, Percentile: o.Percentile}

	call := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		return f(cctx)
	}
	var wasReady bool
	if err := call(func(c context.Context) error {
		live, err := client.Live(c)
		if err == nil && !live {
			err = fmt.Errorf("%w: the server answers but is not ready", backends.ErrBackendUnavailable)
		}
		if err != nil {
			return err
		}
		wasReady, err = client.Ready(c, o.Model)
		return err
	}); err != nil {
		if errors.Is(err, backends.ErrBackendUnavailable) {
			return nil, fmt.Errorf("profile: target %s is unreachable (want a KServe v2 gRPC server at host:port): %w", o.Target, err)
		}
		return nil, fmt.Errorf("profile: target %s: %w", o.Target, err)
	}
	if o.NoLoad && !wasReady {
		return nil, fmt.Errorf("profile: model %q is not loaded on %s and no-load is set: %w", o.Model, o.Target, backends.ErrModelNotLoaded)
	}
	loaded := false
	if !o.NoLoad && !wasReady {
		defer func() {
			if loaded {
				// Unload even when ctx ended (an interrupted run).
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.Timeout)
				defer cancel()
				_ = client.Unload(uctx, o.Model)
			}
		}()
	}

	bar := newBar(o.Progress, len(o.Batches)*len(o.Concurrencies))
	defer bar.finish()
	maxBatch := o.Batches[len(o.Batches)-1]
	var src *rowSource
	var batches map[int][]api.Tensor
	for _, c := range o.Concurrencies {
		if !o.NoLoad {
			err := call(func(cc context.Context) error { return client.Load(cc, o.Model, maxBatch, c) })
			switch {
			case errors.Is(err, backends.ErrUnknownModel):
				return res, fmt.Errorf("profile: model %q: %w", o.Model, err)
			case err != nil:
				return res, &PointError{Batch: maxBatch, Concurrency: c, Err: fmt.Errorf("load with max batch %d and concurrency %d: %w", maxBatch, c, err)}
			}
			loaded = true
		}
		if src == nil {
			if src, err = inputRows(ctx, client, o, call); err != nil {
				return res, err
			}
			batches = make(map[int][]api.Tensor, len(o.Batches))
			for _, b := range o.Batches {
				batches[b] = src.batch(b)
			}
		}
		for _, b := range o.Batches {
			bar.describe(fmt.Sprintf("batch %d, concurrency %d", b, c))
			p, err := measure(ctx, client, o, b, c, batches[b])
			if err != nil {
				if ctx.Err() != nil {
					return res, fmt.Errorf("profile: stopped at batch %d, concurrency %d: %w", b, c, ctx.Err())
				}
				return res, &PointError{Batch: b, Concurrency: c, Err: err}
			}
			res.Points = append(res.Points, p)
			bar.add()
		}
	}
	return res, nil
}

// inputRows returns the rows batches are built from: o.Inputs, else zeros of the
// model metadata's inputs.
func inputRows(ctx context.Context, client *backends.Client, o Options, call func(func(context.Context) error) error) (*rowSource, error) {
	if len(o.Inputs) > 0 {
		return newRowSource(o.Inputs)
	}
	var info backends.ModelInfo
	if err := call(func(c context.Context) error {
		var err error
		info, err = client.Metadata(c, o.Model)
		return err
	}); err != nil {
		return nil, fmt.Errorf("profile: model %q: metadata: %w", o.Model, err)
	}
	src, err := zeroSource(info.Inputs)
	if err != nil {
		return nil, fmt.Errorf("profile: model %q: %w", o.Model, err)
	}
	return src, nil
}

// measure warms up and then measures one point with c workers, each keeping one
// call of item (b rows) in flight.
func measure(ctx context.Context, client *backends.Client, o Options, b, c int, item []api.Tensor) (Point, error) {
	items := [][]api.Tensor{item}
	// Calls that start before the phase's end get at least o.Timeout to finish.
	phase := func(stop time.Time, maxCalls int, record bool) ([]time.Duration, time.Time, error) {
		pctx, cancel := context.WithDeadline(ctx, stop.Add(o.Timeout))
		defer cancel()
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			all      []time.Duration
			last     time.Time
			firstErr error
		)
		for w := 0; w < c; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var lat []time.Duration
				var end time.Time
				for n := 0; n < maxCalls && (n == 0 || time.Now().Before(stop)); n++ {
					start := time.Now()
					_, err := client.Infer(pctx, o.Model, items)
					end = time.Now()
					if err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
							cancel()
						}
						mu.Unlock()
						return
					}
					if record {
						lat = append(lat, end.Sub(start))
					}
				}
				mu.Lock()
				all = append(all, lat...)
				if end.After(last) {
					last = end
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		return all, last, firstErr
	}
	if o.Warmup > 0 {
		if _, _, err := phase(time.Now().Add(o.WarmupTime), o.Warmup, false); err != nil {
			return Point{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	start := time.Now()
	lat, last, err := phase(start.Add(o.Duration), math.MaxInt, true)
	if err != nil {
		return Point{}, err
	}
	slices.Sort(lat)
	p := Point{
		Batch: b, Concurrency: c, Calls: len(lat),
		P50: loadgen.Percentile(lat, 50), P90: loadgen.Percentile(lat, 90), P99: loadgen.Percentile(lat, 99), Max: lat[len(lat)-1],
		Duration: loadgen.Percentile(lat, o.Percentile),
		Elapsed:  last.Sub(start), Latencies: lat,
	}
	p.Throughput = float64(c*b) / p.Duration.Seconds()
	p.ItemsPerSec = float64(p.Calls*b) / p.Elapsed.Seconds()
	return p, nil
}

// bar is a progress bar over the points; the zero bar draws nothing.
type bar struct{ pb *progressbar.ProgressBar }

func newBar(w io.Writer, points int) bar {
	if w == nil {
		return bar{}
	}
	return bar{pb: progressbar.NewOptions(points,
		progressbar.OptionSetWriter(w),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionFullWidth(),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)}
}

func (b bar) describe(s string) {
	if b.pb != nil {
		b.pb.Describe(s)
	}
}

func (b bar) add() {
	if b.pb != nil {
		_ = b.pb.Add(1)
	}
}

func (b bar) finish() {
	if b.pb != nil && !b.pb.IsFinished() {
		_ = b.pb.Exit() // stopped early: leave the bar where it was
	}
}
