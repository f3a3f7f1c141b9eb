package dataplane

import (
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
)

// ReplaceOnEjection turns on the static mode's health checks (every backend
// a runner uses is probed each ProbeInterval; a failed probe ejects it) and
// makes the switch re-place its plan on the static
// backends list whenever a backend is ejected or comes back, or starts or
// stops straggling (Health): from then on every plan is placed (Place) on the
// config's backends less those that are down, stragglers listed last, so the share of a dead backend moves to the others of its
// hardware (a spare the plan did not use, or a machine that then serves two
// slots), and returns to it once it passes its probes. For the static mode
// (no --consul), whose placement is Place's; with Consul, membership drops a
// dead backend and the control loop re-places. Call it once, after
// NewLiveSwitch; re-placements run on a goroutine of their own, one at a
// time, until Close.
func (s *LiveSwitch) ReplaceOnEjection() {
	if !s.replace.CompareAndSwap(false, true) {
		return
	}
	s.opts.Health.startProbes()
	kick := make(chan struct{}, 1)
	s.opts.Health.setOnChange(func([]string) {
		select {
		case kick <- struct{}{}:
		default: // a re-placement is already due; it will see this change
		}
	})
	go func() {
		for {
			select {
			case <-s.stop.Done():
				return
			case <-kick:
			}
			if s.beforeReplace != nil {
				s.beforeReplace()
			}
			start := time.Now()
			changed, err := s.replaceCurrent()
			if err == nil && !changed {
				continue // placed as it was (samePlacement): nothing changed
			}
			if err != nil {
				// Typically a backend died while its model was being loaded: it
				// is ejected now, so the next try leaves it out.
				s.log.Warn("re-placing after a backend's ejection or return failed; the plan stays as it was, trying again in 500 ms", zap.Error(err))
				time.AfterFunc(500*time.Millisecond, func() {
					select {
					case kick <- struct{}{}:
					default:
					}
				})
				continue
			}
			s.log.Info("plan re-placed on the backends that are up", zap.Strings("down", s.opts.Health.Down()),
				zap.Duration("took", time.Since(start)))
		}
	}()
}

// replaceCurrent re-places the running plan on the backends up now, and
// reports whether the running generation changed.
// The running plan is read under the Apply lock: read before it, an Apply
// that took the lock first would be undone by re-placing the plan it
// replaced (the config and plan it made live swapped back for the old ones).
func (s *LiveSwitch) replaceCurrent() (changed bool, err error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	cur := s.cur.Load()
	err = s.applyLocked(s.stop, cur.cfg, unplaced(cur.plan), true)
	return s.cur.Load() != cur, err
}

// placeOn returns the backends a plan is placed on: cfg's, less the down
// ones under ReplaceOnEjection. When every backend of some hardware type is
// down, that type keeps its list: the plan then waits for them to return
// rather than fail.
func (s *LiveSwitch) placeOn(list []api.Backend) []api.Backend {
	if !s.replace.Load() {
		return list
	}
	h := s.opts.Health
	upOfType := map[string]int{}
	for _, b := range list {
		if !h.isDown(b.ID) {
			upOfType[b.Hardware]++
		}
	}
	out := make([]api.Backend, 0, len(list))
	for _, b := range list {
		if !h.isDown(b.ID) || upOfType[b.Hardware] == 0 {
			out = append(out, b)
		}
	}
	// Stragglers go last, so a spare of their hardware takes their machines.
	sort.SliceStable(out, func(i, j int) bool { return !h.isSlow(out[i].ID) && h.isSlow(out[j].ID) })
	return out
}

// unplaced returns a copy of p whose groups name no backends, to be placed
// again.
func unplaced(p *api.Plan) *api.Plan {
	out := *p
	out.Sessions = make([]api.SessionPlan, len(p.Sessions))
	for i, sp := range p.Sessions {
		sp.Modules = append([]api.ModulePlan(nil), sp.Modules...)
		for j := range sp.Modules {
			gs := append([]api.GroupPlan(nil), sp.Modules[j].Configs...)
			for k := range gs {
				gs[k].Backends = nil
			}
			sp.Modules[j].Configs = gs
		}
		out.Sessions[i] = sp
	}
	return &out
}
