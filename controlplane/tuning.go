package controlplane

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/serving"
)

// StartTuner runs InferLine's Tuner (replan.Tuner, docs/traffic.md "The
// tuner"), or with the trace planner's Scope pipeline coarse-grained tuning
// (replan.CoarseTuner), on the traced session of this gateway until ctx ends: every
// monitor bucket it reads the session's arrivals (the rate monitor's closed
// buckets), checks them against the envelope of the trace the served plan was
// made for, and hands the controller the served plan with the machines it
// decided (Controller.Tune: placed and published without a planner run).
// Each plan the controller makes otherwise (a config change, the periodic
// re-plan) becomes the Tuner's new base, with the trace scaled as it was
// planned. The control loop must hold the session's rate band (Options.Hold =
// tp.Hold). Errors: the session has no arrival counter.
func (c *EmbeddedControl) StartTuner(ctx context.Context, tp *serving.TracePlanner) error {
	counter := c.rates.source(tp.Session(), tp.Source())
	if counter == nil {
		return errors.New("tuner: the traced session has no arrival counter")
	}
	s, _ := c.served.Load().Session(tp.Session())
	slo := time.Duration(s.SLO)
	bucket := c.rates.mon.Bucket()
	go func() {
		t := time.NewTicker(bucket)
		defer t.Stop()
		var (
			tu   replan.Tuning
			base *api.Plan
			pos  int64 = -1
			buf  []int64
		)
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				last := c.ctl.Status().Last
				if last == nil {
					continue
				}
				if last.Cause != replan.CauseTune && last.Unplaced != base {
					sample, err := tp.Sample(last.Rates[replan.ModuleKey{Session: tp.Session(), Module: tp.Source()}])
					if err == nil {
						tu, err = replan.NewScopedTuner(tp.Scope(), last.Unplaced, tp.Session(), slo, sample, now)
					}
					if err != nil {
						c.log.Warn("tuner off for this plan", zap.Error(err))
						tu = nil
					}
					base = last.Unplaced
					_, pos = counter.Closed(-1, nil)
				}
				if tu == nil {
					continue
				}
				buf, pos = counter.Closed(pos, buf[:0])
				for i, n := range buf {
					tu.Observe(now.Add(-time.Duration(len(buf)-1-i)*bucket), int(n))
					if d, ok := tu.Decide(); ok {
						c.log.Info("tuner scaled the plan", zap.String("scope", tp.Scope()), zap.Bool("up", d.Up), zap.Float64("rate", d.Rate), zap.Duration("window", d.Window),
							zap.Any("machines", d.Machines))
						c.ctl.Tune(tu.Tuned(base))
					}
				}
			}
		}
	}()
	return nil
}
