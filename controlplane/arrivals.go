package controlplane

import (
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/scheduler/control"
)

// arrivals counts each session's requests at its source modules for the
// control loop, in both modes: the embedded control hands its monitor's
// snapshots to its own Controller, the Consul control writes them to KV for
// the cluster's scheduler.
type arrivals struct {
	mon   *control.RateMonitor
	table atomic.Pointer[map[string]map[string]*control.Counter] // session → source module
}

func newArrivals(o control.MonitorOptions) (*arrivals, error) {
	mon, err := control.NewRateMonitor(time.Now(), o)
	if err != nil {
		return nil, err
	}
	a := &arrivals{mon: mon}
	a.table.Store(&map[string]map[string]*control.Counter{})
	return a, nil
}

// track resolves a Counter per session source module of cfg (off the request
// path: when a plan with new sessions goes live), each measuring over its
// session's envelope window (control.EnvelopeWindow of the SLO and the
// module's configured rate).
func (a *arrivals) track(cfg *api.Config) {
	m := map[string]map[string]*control.Counter{}
	for _, s := range cfg.Sessions {
		m[s.Name] = map[string]*control.Counter{}
		for _, mod := range s.Modules {
			if len(mod.After) == 0 {
				m[s.Name][mod.Name] = a.mon.Handle(s.Name, mod.Name, control.EnvelopeWindow(time.Duration(s.SLO), mod.Rate))
			}
		}
	}
	a.table.Store(&m)
}

// countingRunner is the LiveSwitch with the rate monitor's counters: the
// DAGRunner calls Estimate once per module per admitted-or-refused request, so a
// source module's Estimate counts one arrival (refused ones too: the rate is
// the demand). One atomic load and two map lookups; no lock, no allocation.
type countingRunner struct {
	*dataplane.LiveSwitch
	a *arrivals
}

var (
	_ gateway.ModuleRunner   = countingRunner{}
	_ gateway.MetadataSource = countingRunner{}
	_ gateway.Abandoner      = countingRunner{}
)

// Estimate implements gateway.ModuleRunner.
func (r countingRunner) Estimate(session, module string) time.Duration {
	if c := (*r.a.table.Load())[session][module]; c != nil {
		c.Add(1)
	}
	return r.LiveSwitch.Estimate(session, module)
}
