package controlplane

import (
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// arrivals counts each session's requests at its source modules for the
// control loop, as the DAGRunner's ArrivalObserver, in both modes: the embedded control hands its monitor's
// snapshots to its own Controller, the Consul control writes them to KV for
// the cluster's re-planner.
type arrivals struct {
	mon   *replan.RateMonitor
	table atomic.Pointer[map[string][]*replan.Counter] // session → its source modules' counters
}

func newArrivals(o replan.MonitorOptions) (*arrivals, error) {
	mon, err := replan.NewRateMonitor(time.Now(), o)
	if err != nil {
		return nil, err
	}
	a := &arrivals{mon: mon}
	a.table.Store(&map[string][]*replan.Counter{})
	return a, nil
}

// track resolves the Counters of each session's source modules of cfg (off
// the request path: when a plan with new sessions goes live), each measuring
// over its session's envelope window (replan.EnvelopeWindow of the SLO and the
// module's configured rate).
func (a *arrivals) track(cfg *api.Config) {
	m := map[string][]*replan.Counter{}
	for _, s := range cfg.Sessions {
		for _, mod := range s.Modules {
			if len(mod.After) == 0 {
				m[s.Name] = append(m[s.Name], a.mon.Handle(s.Name, mod.Name, replan.EnvelopeWindow(time.Duration(s.SLO), mod.Rate)))
			}
		}
	}
	a.table.Store(&m)
}

var _ gateway.ArrivalObserver = (*arrivals)(nil)

// Arrived implements gateway.ArrivalObserver: one arrival at each of the
// session's source modules. One atomic load and a map lookup; no lock, no
// allocation.
func (a *arrivals) Arrived(session string) {
	for _, c := range (*a.table.Load())[session] {
		c.Add(1)
	}
}
