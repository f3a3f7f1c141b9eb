package dataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/dispatcher"
)

// The warm-up batches that measure a backend's pace before it takes traffic
// (docs/calibration.md, "Admission before calibration: the pace"), as
// production servers warm a model before it serves (Triton's model warm-up):
// the pace otherwise comes from a backend's own full batches, and until its
// first one returns nothing predicts a device slower than its profile.
const (
	// warmRecheck: a first warm-up round slower than this ratio is run once
	// more and the faster of the two kept, so that one round stalled by the
	// host does not mark a device slow; a round at or below it is kept (a
	// device as fast as profiled costs one batch).
	warmRecheck = 1.1
	// warmBound: a round still running this many times its profiled
	// duration is cut; the device is at least that slow.
	warmBound = 4
	// warmMinRound: the least time a round is given (a profile of a few ms
	// must not cut a round at the network's own delay).
	warmMinRound = 250 * time.Millisecond
	// warmTimeout bounds a runner's warm-up: a backend not measured by then
	// takes the measured ones' pace (the prior), and its probe is logged.
	warmTimeout = 5 * time.Second
)

// warmTarget is one way to measure a backend's pace: a model loaded there
// and the config (batch, concurrency) its batches run at, with the
// offline profile's duration of that config.
type warmTarget struct {
	bh                 *backendHealth
	client             *backends.Client
	backend, model     string
	batch, concurrency int
	profiled           time.Duration
}

// warmResult is one backend's warm-up: the target measured (the last tried
// when none succeeded), its ratio, or why it failed.
type warmResult struct {
	t     warmTarget
	ratio float64
	err   error
}

// warmTargets lists, per backend this runner sends batches to (its groups'
// and its spare machines, spares by module), the configs its pace could be
// measured at, for the backends whose pace is not measured yet (a backend
// measured before, by its own batches or an earlier warm-up, keeps its
// pace: a plan change costs no warm-up batch on a device that serves
// traffic) and that are up, of models whose dummy inputs no backend
// rejected (Health.warmsUp). Within a backend, the largest batch first,
// then by model.
func (r *LiveRunner) warmTargets(placed *api.Plan, spares map[*liveModule][]dispatcher.Slot) map[string][]warmTarget {
	out := map[string][]warmTarget{}
	seen := map[warmTarget]bool{}
	add := func(lm *liveModule, backend, hardware string, batch, concurrency int) {
		c := lm.clients[backend]
		if c == nil || lm.profiled == nil || !r.health.warmsUp(lm.model) {
			return
		}
		p := lm.profiled(hardware, batch, concurrency)
		if p <= 0 {
			return
		}
		bh := r.health.entry(backend)
		if bh.paceRatio.Load() != 0 || bh.Down() {
			return
		}
		t := warmTarget{bh: bh, client: c, backend: backend, model: lm.model, batch: batch, concurrency: max(concurrency, 1), profiled: p}
		if !seen[t] {
			seen[t] = true
			out[backend] = append(out[backend], t)
		}
	}
	for _, sp := range placed.Sessions {
		for _, mp := range sp.Modules {
			lm := r.sessions[sp.Name][mp.Name]
			if lm == nil {
				continue
			}
			for _, g := range mp.Configs {
				for _, id := range g.Backends {
					add(lm, id, g.Hardware, g.Batch, g.Concurrency)
				}
			}
			for _, s := range spares[lm] {
				add(lm, s.Backend, s.Hardware, s.Batch, s.Concurrency)
			}
		}
	}
	for _, ts := range out {
		sort.Slice(ts, func(i, j int) bool {
			return ts[i].batch > ts[j].batch || ts[i].batch == ts[j].batch && ts[i].model < ts[j].model
		})
	}
	return out
}

// warmUp measures the pace of every backend warmTargets lists before the
// runner takes traffic: on each backend, concurrently across backends, it
// runs a warm-up round (warmRound) of the first target, and its ratio to
// the offline profile is the backend's first pace sample (Health.paced),
// as a full batch of its own would be. A target that fails (the backend
// rejects dummy inputs, an executor that needs real data) is followed by
// the backend's next; a backend with none that succeeds keeps the prior
// (the measured ones' lower median). Failures are logged once per model
// for the Health's life, the paces measured in one info line; nothing
// fails the runner. Bounded by warmTimeout. With calibration off there is
// no pace, and no warm-up.
func (r *LiveRunner) warmUp(ctx context.Context, placed *api.Plan, spares map[*liveModule][]dispatcher.Slot, log *zap.Logger) {
	if r.health.opts.Calibration == nil {
		return
	}
	targets := r.warmTargets(placed, spares)
	if len(targets) == 0 {
		return
	}
	if log == nil {
		log = zap.NewNop()
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	results := make(chan warmResult, len(targets))
	var wg sync.WaitGroup
	for _, ts := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res warmResult
			for _, t := range ts {
				res = warmResult{t: t}
				res.ratio, res.err = warmMeasure(ctx, t)
				if res.err == nil || ctx.Err() != nil {
					break
				}
			}
			if res.err == nil {
				r.health.paced(res.t.bh, res.ratio, time.Now())
			}
			results <- res
		}()
	}
	wg.Wait()
	close(results)
	var paces []string
	failed := map[string][]warmResult{}
	for res := range results {
		if res.err != nil {
			failed[res.t.model] = append(failed[res.t.model], res)
			continue
		}
		paces = append(paces, fmt.Sprintf("%s ×%.2f (%s b%d c%d)", res.t.backend, res.ratio, res.t.model, res.t.batch, res.t.concurrency))
	}
	slices.Sort(paces)
	if len(paces) > 0 {
		log.Info("backends' pace measured by warm-up batches before they take traffic", zap.Strings("paces", paces),
			zap.Duration("took", time.Since(start)))
	}
	for model, rs := range failed {
		if !r.health.warnWarmUpOnce(model, errors.Is(rs[0].err, backends.ErrInvalidInput)) {
			continue
		}
		ids := make([]string, len(rs))
		for i, res := range rs {
			ids[i] = res.t.backend
		}
		slices.Sort(ids)
		log.Warn("warm-up batch failed: the backend takes the measured backends' pace until its own first full batch",
			zap.String("model", model), zap.Strings("backends", ids), zap.Error(rs[0].err))
	}
}

// warmMeasure runs warm-up rounds of t and returns the backend's ratio to
// t's profiled duration: the first round's, or when that is above
// warmRecheck, the smaller of two (the first call after a load may pay
// for what is not the device's pace: a connection, a cache). A round cut
// at its bound counts as that bound, a lower bound on the ratio.
func warmMeasure(ctx context.Context, t warmTarget) (float64, error) {
	item, err := warmItem(ctx, t)
	if err != nil {
		return 0, err
	}
	best := math.Inf(1)
	for round := range 2 {
		took, err := warmRound(ctx, t, item)
		if err != nil {
			return 0, err
		}
		best = min(best, float64(took)/float64(t.profiled))
		if round == 0 && best <= warmRecheck {
			break
		}
	}
	return best, nil
}

// warmRound runs t.concurrency batches of t.batch dummy items on t's
// backend at once (the plan's config: a device of several lanes is
// profiled with its lanes busy) and returns how long the slowest took. A
// round still running at warmBound × the profile (at least warmMinRound)
// is cut and returns that bound.
func warmRound(ctx context.Context, t warmTarget, item []api.Tensor) (time.Duration, error) {
	bound := max(time.Duration(warmBound*float64(t.profiled)), warmMinRound)
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	errs := make([]error, t.concurrency)
	took := make([]time.Duration, t.concurrency)
	var wg sync.WaitGroup
	for i := range t.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, errs[i] = t.client.Infer(rctx, t.model, [][]api.Tensor{item})
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() == nil && rctx.Err() != nil {
			return bound, nil // cut at the bound: at least this slow
		}
		return 0, err
	}
	return slices.Max(took), nil
}

// warmItem builds the warm-up batch of t: one item of t.batch rows of zeros
// for every input the model's metadata names on t's backend, of its
// datatype, each variable dimension after the batch 1 (an executor that
// fixes its input shape, as the ONNX one does, reports it; BYTES elements
// are empty).
func warmItem(ctx context.Context, t warmTarget) ([]api.Tensor, error) {
	info, err := t.client.Metadata(ctx, t.model)
	if err != nil {
		return nil, err
	}
	if len(info.Inputs) == 0 {
		return nil, fmt.Errorf("model %q: its metadata names no input to warm it up with", t.model)
	}
	item := make([]api.Tensor, len(info.Inputs))
	for i, in := range info.Inputs {
		size := api.ElementSize(in.Datatype)
		if size < 0 {
			return nil, fmt.Errorf("model %q input %q: unknown datatype %q", t.model, in.Name, in.Datatype)
		}
		shape := append([]int64{int64(t.batch)}, in.Shape[min(1, len(in.Shape)):]...)
		n := int64(1)
		for j := 1; j < len(shape); j++ {
			if shape[j] < 0 {
				shape[j] = 1
			}
			n *= shape[j]
		}
		n *= int64(t.batch)
		item[i] = api.Tensor{Name: in.Name, Datatype: in.Datatype, Shape: shape, Data: make([]byte, n*int64(cmp.Or(size, 4)))}
	}
	return item, nil
}
