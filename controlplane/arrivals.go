package controlplane

import (
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// arrivals counts every module's arrivals of each session for the control
// loop, as the DAGRunner's ModuleArrivalObserver: each request at the
// session's source modules (Arrived: the demand, refused requests included),
// and the items that reach each other module (ModuleArrived: a branch taken
// with its measured share, a fan-out with its measured items; Llama's
// input-dependent flow). In both modes: the embedded control hands its
// monitor's snapshots to its own Controller, the Consul control writes them
// to KV for the cluster's re-planner; either expands them to the plan's
// modules with cluster.ExpandRates.
type arrivals struct {
	mon   *replan.RateMonitor
	table atomic.Pointer[map[string]*sessionCounters] // session → its counters
}

// sessionCounters are one session's counters: its source modules', which
// each count every request, and every other module's by name.
type sessionCounters struct {
	sources []*replan.Counter
	modules map[string]*replan.Counter
	refused *replan.Counter // the requests admission refused (replan.RefusedModule)
}

func newArrivals(start time.Time, o replan.MonitorOptions) (*arrivals, error) {
	mon, err := replan.NewRateMonitor(start, o)
	if err != nil {
		return nil, err
	}
	a := &arrivals{mon: mon}
	a.table.Store(&map[string]*sessionCounters{})
	return a, nil
}

// track resolves the Counters of every module of cfg's sessions (off the
// request path: when a plan with new sessions goes live). A source measures
// over replan.EnvelopeWindow of the session's SLO and its configured rate;
// another module over EnvelopeWindow of the SLO and the lower of its own
// configured rate and the sources', so that a window holds at least
// replan.MinWindowArrivals of its items (a branch taken by one item in ten
// waits for 100 of them) and at least as many requests as the sources' (a
// fan-out's items, several from one request, are no more independent than
// the requests they come from). A fan-out module (api.Session.FanOuts, the
// rule the DAGRunner runs it by) also counts its parent items by the items
// each brought: the distribution the control loop plans it with once it
// has counted enough (replan.HandleFanOut, cause "fanout").
func (a *arrivals) track(cfg *api.Config) {
	m := map[string]*sessionCounters{}
	for _, s := range cfg.Sessions {
		slo := time.Duration(s.SLO)
		sc := &sessionCounters{modules: map[string]*replan.Counter{}}
		var srcRate float64
		for _, mod := range s.Modules {
			if len(mod.After) == 0 {
				srcRate = max(srcRate, mod.Rate)
				sc.sources = append(sc.sources, a.mon.Handle(s.Name, mod.Name, replan.EnvelopeWindow(slo, mod.Rate)))
			}
		}
		sc.refused = a.mon.Handle(s.Name, replan.RefusedModule, replan.EnvelopeWindow(slo, srcRate))
		fanouts, _ := s.FanOuts() // a loaded config has no cycle
		for i, mod := range s.Modules {
			if len(mod.After) == 0 {
				continue
			}
			rate := mod.Rate
			if srcRate > 0 {
				rate = min(rate, srcRate)
			}
			w := replan.EnvelopeWindow(slo, rate)
			if i < len(fanouts) && fanouts[i] {
				var parent float64 // req/s; 0 (unknown): generations of the horizon
				if pi := s.ModuleIndex(mod.After[0]); pi >= 0 {
					parent = s.Modules[pi].Rate
				}
				sc.modules[mod.Name] = a.mon.HandleFanOut(s.Name, mod.Name, w, parent)
			} else {
				sc.modules[mod.Name] = a.mon.Handle(s.Name, mod.Name, w)
			}
		}
		m[s.Name] = sc
	}
	a.table.Store(&m)
}

var _ gateway.ModuleArrivalObserver = (*arrivals)(nil)

// Arrived implements gateway.ArrivalObserver: one arrival at each of the
// session's source modules. One atomic load and a map lookup; no lock, no
// allocation.
func (a *arrivals) Arrived(session string) {
	if sc := (*a.table.Load())[session]; sc != nil {
		for _, c := range sc.sources {
			c.Add(1)
		}
	}
}

// ModuleArrived implements gateway.ModuleArrivalObserver: items arrivals at
// module of session, and on a fan-out module one parent item that brought
// items (its measured distribution, replan.Counter.AddItems). Two atomic
// loads, two map lookups and one or two atomic adds; no lock, no allocation.
func (a *arrivals) ModuleArrived(session, module string, items int) {
	if sc := (*a.table.Load())[session]; sc != nil {
		if c := sc.modules[module]; c != nil {
			c.AddItems(items)
		}
	}
}

// Refused implements gateway.ModuleArrivalObserver: a request of session
// Arrived counted, refused by admission. One atomic load, a map lookup and
// one atomic add.
func (a *arrivals) Refused(session string) {
	if sc := (*a.table.Load())[session]; sc != nil {
		sc.refused.Add(1)
	}
}

// source returns the counter of session's source module, nil when it has
// none by that name.
func (a *arrivals) source(session, module string) *replan.Counter {
	if sc := (*a.table.Load())[session]; sc != nil {
		for _, c := range sc.sources {
			if c.Key().Module == module {
				return c
			}
		}
	}
	return nil
}
