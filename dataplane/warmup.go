package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	// warmRecheck: a backend whose first warm-up round is slower than this
	// ratio is measured again alone on its host before that counts (the
	// first round runs on every backend at once, and backends that share a
	// host's cores, as the demo's CPU backends do, slow each other then);
	// the faster of its two rounds is its pace. A round at or below it is
	// kept: a device as fast as profiled costs one batch.
	warmRecheck = 1.1
	// warmBound: a round still running this many times its profiled
	// duration is cut; the device is at least that slow.
	warmBound = 4
	// warmMinRound: the least time a round is given (a profile of a few ms
	// must not cut a round at the network's own delay).
	warmMinRound = 250 * time.Millisecond
	// warmTimeout bounds a runner's warm-up; warmRecheckFor bounds the
	// second rounds (one host's backends one at a time). A backend not
	// measured by then takes the measured ones' pace (the prior); one
	// whose first round looked slow and was not measured alone is counted
	// in the info line as unconfirmed.
	warmTimeout    = 5 * time.Second
	warmRecheckFor = 2 * time.Second
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
// when none succeeded), its dummy item, its ratio, or why it failed.
type warmResult struct {
	t     warmTarget
	item  []api.Tensor
	ratio float64
	err   error
}

// warmTargets lists, per backend this runner sends batches to (its groups'
// and its spare machines, spares by module), the configs its pace could be
// measured at, for the backends that are up, whose pace is not measured yet
// (a backend measured before, by its own batches or an earlier warm-up,
// keeps its pace) and that prev (the runner serving now, nil: none) sends
// no batch to: a warm-up batch on a device that serves traffic would delay
// that traffic, and the plan change that waits for it (the first version
// warmed up, at a drift re-plan, the spares whose first round had not been
// confirmed: the new plan came 2.3 s later and 71 requests failed late).
// Models whose dummy inputs a backend rejected (Health.warmsUp) are left
// out. Within a backend, the largest batch first, then by model.
func (r *LiveRunner) warmTargets(placed *api.Plan, spares map[*liveModule][]dispatcher.Slot, prev *LiveRunner) map[string][]warmTarget {
	busy := map[string]bool{}
	if prev != nil {
		for _, mods := range prev.sessions {
			for _, lm := range mods {
				for id := range lm.clients { // the plan's backends and the spares
					busy[id] = true
				}
			}
		}
	}
	out := map[string][]warmTarget{}
	seen := map[warmTarget]bool{}
	add := func(lm *liveModule, backend, hardware string, batch, concurrency int) {
		c := lm.clients[backend]
		if c == nil || lm.profiled == nil || busy[backend] || !r.health.warmsUp(lm.model) {
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

// warmUp measures the pace of every backend warmTargets lists (prev: the
// runner serving now) before the runner takes traffic, as a full batch of its own would (Health.paced):
// a first warm-up round (warmRound) on every backend at once, of its first
// target (a target that fails, as an executor that rejects dummy inputs,
// is followed by the backend's next); a round at most warmRecheck times
// its profile is the backend's pace; a slower one is run again alone on
// its host (each host's backends one at a time, within warmRecheckFor)
// and the faster of the two is. A backend with no pace of its own after
// this keeps the prior (the measured ones' lower median). Failures are
// logged once per model for the Health's life, the paces measured in one
// info line; nothing fails the runner. Bounded by warmTimeout. With
// calibration off there is no pace, and no warm-up.
func (r *LiveRunner) warmUp(ctx context.Context, placed *api.Plan, spares map[*liveModule][]dispatcher.Slot, prev *LiveRunner, log *zap.Logger) {
	if r.health.opts.Calibration == nil {
		return
	}
	targets := r.warmTargets(placed, spares, prev)
	if len(targets) == 0 {
		return
	}
	if log == nil {
		log = zap.NewNop()
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	first := make([]warmResult, 0, len(targets))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, ts := range targets {
		wg.Go(func() {
			var res warmResult
			for _, t := range ts {
				res = warmResult{t: t}
				if res.item, res.err = warmItem(ctx, t); res.err == nil {
					res.ratio, res.err = warmRound(ctx, t, res.item)
				}
				if res.err == nil || ctx.Err() != nil {
					break
				}
			}
			mu.Lock()
			first = append(first, res)
			mu.Unlock()
		})
	}
	wg.Wait()
	var paces, unconfirmed []string
	failed := map[string][]warmResult{}
	byHost := map[string][]*warmResult{}
	for i := range first {
		res := &first[i]
		switch {
		case res.err != nil:
			failed[res.t.model] = append(failed[res.t.model], *res)
		case res.ratio > warmRecheck:
			h := res.t.client.Addr()
			if host, _, err := net.SplitHostPort(h); err == nil {
				h = host
			}
			byHost[h] = append(byHost[h], res)
		default:
			r.health.paced(res.t.bh, res.ratio, time.Now())
			paces = append(paces, res.String())
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, warmRecheckFor)
	defer rcancel()
	for _, rs := range byHost {
		sort.Slice(rs, func(i, j int) bool { return rs[i].t.backend < rs[j].t.backend })
		wg.Go(func() {
			for _, res := range rs {
				ratio, err := warmRound(rctx, res.t, res.item)
				mu.Lock()
				if err != nil {
					unconfirmed = append(unconfirmed, res.String())
				} else {
					res.ratio = min(res.ratio, ratio)
					r.health.paced(res.t.bh, res.ratio, time.Now())
					paces = append(paces, res.String())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(paces)
	slices.Sort(unconfirmed)
	if len(paces)+len(unconfirmed) > 0 {
		log.Info("backends' pace measured by warm-up batches before they take traffic", zap.Strings("paces", paces),
			zap.Strings("unconfirmed", unconfirmed), zap.Duration("took", time.Since(start)))
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

// String is the result as the warm-up's info line lists it.
func (res *warmResult) String() string {
	return fmt.Sprintf("%s ×%.2f (%s b%d c%d)", res.t.backend, res.ratio, res.t.model, res.t.batch, res.t.concurrency)
}

// warmRound runs t.concurrency batches of item (t.batch dummy rows) on t's
// backend at once (the plan's config: a device of several lanes is
// profiled with its lanes busy) and returns how long the slowest took over
// t's profiled duration (the device time the backend reports, else the
// round trip). A round still running at warmBound × the profile
// (at least warmMinRound) is cut and counts as that bound: the device is at
// least that slow. The first call after a load pays for nothing the
// backend's own warm-up did not (the ONNX executor runs every lane at the
// loaded shapes in Load), and the connection is the load's.
func warmRound(ctx context.Context, t warmTarget, item []api.Tensor) (float64, error) {
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
			var tm backends.Timing
			_, tm, errs[i] = t.client.InferTimed(rctx, t.model, [][]api.Tensor{item})
			took[i] = time.Since(start)
			if tm.Reported() {
				took[i] = tm.Compute // the device's own time (docs/calibration.md, "Device time")
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() == nil && rctx.Err() != nil {
			return float64(bound) / float64(t.profiled), nil // cut at the bound: at least this slow
		}
		return 0, err
	}
	return float64(slices.Max(took)) / float64(t.profiled), nil
}

// warmItem builds the warm-up batch of t: one item of t.batch rows of zeros
// for every input the model's metadata names on t's backend
// (api.ZeroTensor: each variable dimension after the batch 1, as an executor
// that fixes its input shape, as the ONNX one does, reports it).
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
		if item[i], err = api.ZeroTensor(in.Name, in.Datatype, in.Shape, t.batch, 0); err != nil {
			return nil, fmt.Errorf("model %q: %w", t.model, err)
		}
	}
	return item, nil
}
