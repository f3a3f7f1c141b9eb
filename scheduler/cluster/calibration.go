package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// Calibration is a candidate's own calibration (the gateway's
// calibrate.Estimator, in ReplannerOptions.Control.Calibration) that the
// elected re-planner follows together with every gateway's calibration in
// Consul KV.
type Calibration interface {
	replan.Calibration
	Marshal(now time.Time) ([]byte, error)
	Options() calibrate.Options
}

// CalibrationEvery is how often the elected re-planner reads every
// gateway's calibration from Consul KV and merges it with its own.
const CalibrationEvery = 2 * time.Second

// Followed is the elected re-planner's calibration (replan.Calibration): the
// merge (calibrate.Merge: per device, the series with the newest batch) of
// its own calibration and every gateway's under <prefix>/calibration/,
// made again every CalibrationEvery by Follow. Drift, planning and
// co-location read the latest merge; SetOffline reaches the own calibration
// too (its batches are counted at the offline profile's entries). Safe from
// any goroutine.
type Followed struct {
	own Calibration
	c   *Client
	log *zap.Logger

	merged  atomic.Pointer[calibrate.Estimator]
	offline atomic.Pointer[api.Config]
	mu      sync.Mutex // one refresh at a time
}

// NewFollowed returns own followed with the calibrations in c's KV; until
// the first Refresh it reads own's series only.
func NewFollowed(own Calibration, c *Client, log *zap.Logger) *Followed {
	if log == nil {
		log = zap.NewNop()
	}
	f := &Followed{own: own, c: c, log: log}
	e, _ := calibrate.New(own.Options())
	f.merged.Store(e)
	return f
}

// Refresh merges own's series (marshalled now) with every gateway's in
// Consul KV, and makes the merge the one read. A gateway's malformed value
// is logged and skipped; an unreachable Consul keeps the last merge and
// returns the error.
func (f *Followed) Refresh(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	all, err := f.c.Calibrations(ctx, "")
	if err != nil {
		return err
	}
	own, err := f.own.Marshal(time.Now())
	if err != nil {
		return err
	}
	// The gateways' series reach the leader up to two exchange periods late
	// (a gateway's put, then this refresh): a drift is as recent as its own
	// gateway saw it, so the merge counts one measured within Recent plus
	// that delay (with Recent alone, 2 s since the forgetting rule, no
	// other gateway's drift ever counted: TestLeaderFollowsGatewaysCalibration).
	o := f.own.Options()
	o.Recent += 2 * CalibrationEvery
	o.Forget = max(o.Forget, o.Recent)
	m, err := calibrate.Merge(o, append([][]byte{own}, all...)...)
	if m == nil {
		return err
	}
	if err != nil {
		f.log.Warn("a gateway's calibration in Consul skipped", zap.Error(err))
	}
	if off := f.offline.Load(); off != nil {
		m.SetOffline(off)
	}
	f.merged.Store(m)
	return nil
}

// Follow refreshes every CalibrationEvery until ctx ends.
func (f *Followed) Follow(ctx context.Context) {
	t := time.NewTicker(CalibrationEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := f.Refresh(ctx); err != nil && ctx.Err() == nil {
				f.log.Debug("calibrations not read from Consul; planning from the last ones", zap.Error(err))
			}
		}
	}
}

// SetOffline is replan.Calibration's: the offline profiles for own and for
// the merges.
func (f *Followed) SetOffline(offline *api.Config) {
	f.offline.Store(offline)
	f.own.SetOffline(offline)
	f.merged.Load().SetOffline(offline)
}

// Calibrate is replan.Calibration's, on the latest merge.
func (f *Followed) Calibrate(offline *api.Config, now time.Time) *api.Config {
	return f.merged.Load().Calibrate(offline, now)
}

// Drift is replan.Calibration's, on the latest merge.
func (f *Followed) Drift(offline *api.Config, plan *api.Plan, now time.Time) (float64, string, bool) {
	return f.merged.Load().Drift(offline, plan, now)
}

// DriftSlower is replan.Calibration's, on the latest merge.
func (f *Followed) DriftSlower(offline *api.Config, plan *api.Plan, now time.Time) (float64, string, bool) {
	return f.merged.Load().DriftSlower(offline, plan, now)
}

// Colocations is replan.Calibration's, on the latest merge.
func (f *Followed) Colocations(placed *api.Plan) []calibrate.Colocation {
	return f.merged.Load().Colocations(placed)
}
