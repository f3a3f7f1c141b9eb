package simulate

import (
	"fmt"
	"sort"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
)

// simDevice is one placed backend (GroupPlan.Backends): the slots of every
// module placed on it share its lanes, as many as the largest concurrency of
// those slots, as the live sim backend shares them (backends/sim). A batch
// sent while every lane runs another batch waits in the device's FIFO queue:
// the dispatcher, which counts only its own module's batches, believes it
// started when sent. DeviceReport.MaxWaitMs measures that error.
type simDevice struct {
	id      string
	lanes   int
	busy    int
	queue   []*completion // FIFO, queue[head:] waiting
	head    int
	modules []string
	batches int
	queued  int
	maxWait time.Duration
	busyFor time.Duration // lane-time
}

// DeviceReport is one placed device (a backend id of the plan) in a simulation:
// the modules placed on it, its lanes, the batches it ran, how many of them
// waited because another batch held every lane (Queued) and the longest such
// wait (the error of the dispatchers' lane estimates, which count only their
// own module's batches), and its utilisation (busy lane-time / lanes ×
// simulated time).
type DeviceReport struct {
	ID          string   `json:"id"`
	Modules     []string `json:"modules"`
	Lanes       int      `json:"lanes"`
	Batches     int      `json:"batches"`
	Queued      int      `json:"queued"`
	MaxWaitMs   float64  `json:"max_wait_ms"`
	Utilisation float64  `json:"utilisation"`
}

// devicesOf builds the devices of a placed plan and of the spare slots
// (Options.Spare), by backend id: a spare backend of several modules, or one
// the plan also uses, is one device their batches share, as live (nil when no
// slot names a backend: every slot then runs on a device of its own).
func devicesOf(plan *api.Plan, spare []dispatcher.Slot) (map[string]*simDevice, error) {
	devs := map[string]*simDevice{}
	// add counts slot sl, of the module named name, on its backend's device.
	add := func(sl dispatcher.Slot, name string) {
		if sl.Backend == "" {
			return
		}
		d := devs[sl.Backend]
		if d == nil {
			d = &simDevice{id: sl.Backend}
			devs[sl.Backend] = d
		}
		d.lanes = max(d.lanes, sl.Concurrency)
		if !contains(d.modules, name) {
			d.modules = append(d.modules, name)
		}
	}
	for _, sl := range spare {
		add(sl, sl.Module+" (spare)")
	}
	for _, sp := range plan.Sessions {
		if sp.Error != "" {
			continue
		}
		for _, mp := range sp.Modules {
			slots, err := dispatcher.SlotsOf(mp)
			if err != nil {
				return nil, fmt.Errorf("session %q: %w", sp.Name, err)
			}
			for _, sl := range slots {
				add(sl, sp.Name+"/"+mp.Name)
			}
		}
	}
	if len(devs) == 0 {
		return nil, nil
	}
	return devs, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (s *sim) deviceReports(elapsed time.Duration) []DeviceReport {
	var out []DeviceReport
	for _, d := range s.sender.devs {
		r := DeviceReport{ID: d.id, Modules: d.modules, Lanes: d.lanes, Batches: d.batches, Queued: d.queued, MaxWaitMs: toMs(d.maxWait)}
		if elapsed > 0 {
			r.Utilisation = float64(d.busyFor) / (float64(d.lanes) * float64(elapsed))
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
