package dispatcher

import (
	"math"
	"sync/atomic"
	"time"
)

// MachineHealth is what the dispatcher reads of one backend's health when it
// hands a batch to a machine: whether the backend is down (ejected: its
// machines are never chosen while another can take the batch) and its
// slowness (the ratio of its measured batch durations to the profiled ones,
// ≥ 1; a slow machine's lanes are estimated to free that much later, and a
// batch meant for it goes to an idle, not slow machine of its group instead).
// The data plane owns one per backend and sets it from any goroutine; the
// dispatcher reads it with atomic loads under its lock, so the request path
// takes no lock and allocates nothing for it.
type MachineHealth struct {
	down     atomic.Bool
	slowness atomic.Uint64 // float64 bits; 0 means 1
	pace     atomic.Uint64 // float64 bits: SetPace's ratio; 0 means 1
	host     atomic.Int64  // ns: SetHostShare's
}

// SetHostShare sets the backend's network-and-host share: how much longer
// than the time the backend itself reports (its queue and compute) the
// gateway's round trip of its batches takes, an EWMA the data plane keeps
// (docs/calibration.md, "Device time"). Durations and the pace are the
// device's own and leave it out; a prediction of when a batch's answer is
// back at the gateway adds it (HostShare).
func (h *MachineHealth) SetHostShare(d time.Duration) { h.host.Store(int64(max(d, 0))) }

// HostShare returns SetHostShare's duration; 0 when not set or unknown.
func (h *MachineHealth) HostShare() time.Duration {
	if h == nil {
		return 0
	}
	return time.Duration(h.host.Load())
}

// Down reports whether the backend is ejected.
func (h *MachineHealth) Down() bool { return h != nil && h.down.Load() }

// SetDown ejects the backend (true) or returns it (false); it reports whether
// that changed anything. After ejecting, call Dispatcher.Reroute on the
// dispatchers that use it to move the batches queued on its machines.
func (h *MachineHealth) SetDown(down bool) bool { return h.down.Swap(down) != down }

// Slowness returns the backend's measured/profiled duration ratio; 1 when not
// slow or unknown.
func (h *MachineHealth) Slowness() float64 {
	if h == nil {
		return 1
	}
	return ratioAbove1(&h.slowness)
}

// ratioAbove1 reads a ratio stored as float64 bits: itself above 1, else 1.
func ratioAbove1(v *atomic.Uint64) float64 {
	if r := math.Float64frombits(v.Load()); r > 1 {
		return r
	}
	return 1
}

// SetSlowness sets the ratio the dispatcher uses for the backend (≤ 1: not slow).
func (h *MachineHealth) SetSlowness(s float64) { h.slowness.Store(math.Float64bits(s)) }

// SetPace sets the backend's pace: how much longer than profiled offline
// its latest batches ran, compute only (not the wait behind other batches;
// the device's own time when the backend reports it), bounded to 10. The data plane sets it after each batch
// (docs/calibration.md, "Admission before calibration"); a machine there
// expects its batches to take its slot's profiled duration
// (Options.Profiled) times the pace, or the planned duration if longer: a
// plan made from the calibrated profiles already plans that pace. ratio ≤ 1
// clears it.
func (h *MachineHealth) SetPace(ratio float64) { h.pace.Store(math.Float64bits(min(ratio, maxRatio))) }

// Pace returns the backend's pace (SetPace); 1 when not set.
func (h *MachineHealth) Pace() float64 {
	if h == nil {
		return 1
	}
	return ratioAbove1(&h.pace)
}

// HealthTable gives the MachineHealth of a backend id. The dispatcher calls
// Machine once per machine when it builds a plan's table (New, SetPlan), never
// per request; it must return the same value for an id every time.
type HealthTable interface {
	Machine(backend string) *MachineHealth
}

// slowThreshold is the slowness from which a machine's batches go to an idle
// machine of its group that is not slow, when there is one.
const slowThreshold = 1.5

func (m *machine) isDown() bool { return m.health.Down() }

// duration is the machine's expected batch duration: its planned duration
// times its measured slowness or its pace, the larger.
func (m *machine) duration() time.Duration {
	return m.scaled(max(m.health.Slowness(), m.paceRatio()))
}

// scaled is m's planned duration times s (≥ 1), exactly the planned one at 1.
func (m *machine) scaled(s float64) time.Duration {
	if s == 1 {
		return m.slot.Duration
	}
	return time.Duration(float64(m.slot.Duration) * s)
}

// paceRatio is the backend's pace (MachineHealth.Pace, against the offline
// profile) as a ratio to m's planned duration: the profiled duration times
// the pace over the planned one, when above 1.
func (m *machine) paceRatio() float64 {
	p := m.health.Pace()
	if p == 1 {
		return 1
	}
	return max(p*m.paceScale, 1)
}

// flushDuration is m's expected duration as the deadline flush leads by it
// (queue.sendBy): the planned duration times its pace (compute only) or,
// for a straggler (slowness from slowThreshold), its slowness, the larger.
// A slowness below that is left out: it is an EWMA of the whole call, the
// wait at the backend included, and under load it lifts the lead of
// machines that compute as planned.
func (m *machine) flushDuration() time.Duration {
	s := m.paceRatio()
	if sl := m.health.Slowness(); sl >= slowThreshold {
		s = max(s, sl)
	}
	return m.scaled(s)
}

// reroute returns the machine that should run b in place of m: m itself
// unless it is down (then the best machine that is up and can take b's size:
// its own group first, an idle one first, else the one whose lane frees
// first), or slow while its group has an idle machine that is not. With no
// better machine, m.
func (d *Dispatcher) reroute(b *Batch, m *machine) *machine {
	down := m.isDown()
	if !down && m.health.Slowness() < slowThreshold {
		return m
	}
	var best *machine
	var bestAt time.Time
	bestRank := 99
	for _, o := range d.st.machines {
		if o == m || o.isDown() || o.slot.Batch < b.Size() || o.slot.Backend == m.slot.Backend && o.slot.Backend != "" {
			continue
		}
		idle := o.idle()
		rank := 0 // 0: m's group, idle; 1: m's group, busy; 2, 3: another group
		if o.g != m.g {
			rank = 2
		}
		if !idle {
			rank++
		}
		if !down && (rank > 0 || o.health.Slowness() >= slowThreshold) {
			continue // a slow machine's batch moves only to an idle, fast machine of its group
		}
		at := o.est[o.earliestLane()]
		if best == nil || rank < bestRank || rank == bestRank && at.Before(bestAt) {
			best, bestAt, bestRank = o, at, rank
		}
	}
	if best == nil {
		return m
	}
	return best
}

// Reroute moves the batches queued on down machines to machines that are up,
// and those queued on stragglers to idle machines of their group that are
// not (as dispatchLocked would choose them), and reports how many moved. Call
// it after a MachineHealth.SetDown(true) or a SetSlowness that makes a
// straggler; batches already sent are the Sender's.
func (d *Dispatcher) Reroute() int {
	var out outList
	moved := 0
	d.mu.Lock()
	if d.closed || d.st == nil {
		d.mu.Unlock()
		return 0
	}
	now := d.clock.Now()
	for _, m := range d.st.machines {
		if !m.isDown() && m.health.Slowness() < slowThreshold || m.pending.len() == 0 {
			continue
		}
		n := m.pending.len()
		for range n {
			b := m.pending.pop()
			to := d.reroute(b, m)
			if to == m {
				m.pending.push(b) // nowhere else to go: keeps its place
				continue
			}
			moved++
			if b.onDev {
				m.dev.cancel(b.dev, now)
				b.onDev = false
			}
			to.place(b, now)
			if to.idle() {
				d.startLocked(b, now, &out)
			} else {
				to.pending.push(b)
			}
		}
	}
	d.mu.Unlock()
	d.flush(&out)
	return moved
}

// Alternate returns a slot of the module's current plan, on a backend other
// than those in exclude, that is up and can run a batch of size items: for a
// batch whose call failed (retry) or is overdue (hedge) on from. It prefers
// from's group, then machines that are not slow, then an idle one, then the
// one whose lane frees first. It takes no lane: the retried or hedged call
// runs beside the machine's own batches. ok is false when there is none.
func (d *Dispatcher) Alternate(from *Slot, size int, exclude ...string) (s Slot, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.st == nil {
		return Slot{}, false
	}
	var best *machine
	var bestAt time.Time
	bestRank := 99
next:
	for _, o := range d.st.machines {
		if o.isDown() || o.slot.Batch < size {
			continue
		}
		for _, x := range exclude {
			if o.slot.Backend == x {
				continue next
			}
		}
		rank := 0
		if o.slot.Group != from.Group {
			rank += 4
		}
		if o.health.Slowness() >= slowThreshold {
			rank += 2
		}
		if !o.idle() {
			rank++
		}
		at := o.est[o.earliestLane()]
		if best == nil || rank < bestRank || rank == bestRank && at.Before(bestAt) {
			best, bestAt, bestRank = o, at, rank
		}
	}
	if best == nil {
		return Slot{}, false
	}
	return best.slot, true
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
