package dispatcher

import (
	"sync"
	"sync/atomic"
	"time"
)

// Device is one backend's lanes as every dispatcher that sends batches there
// sees them: the dispatchers of the modules a placed plan packs onto the
// backend (fractional machines of different modules share a device), and,
// across a plan swap, the dispatchers of the old and the new runner. A
// backend runs the batches it is sent FIFO over its lanes whatever their
// module (the `sim` backend, and ONNX Runtime's session per device), so a
// batch sent now starts when the earliest lane frees of the batches sent
// there before it, by any dispatcher.
//
// A dispatcher counts a batch on the device from the moment it hands the
// batch to a machine there (sent at once, or queued behind the machine's
// own batches) until its Done, for the duration it expects (the profile
// times the backend's straggler slowness); a batch that leaves the queue
// unsent is taken back. Counting queued batches too is what makes several
// machines of one plan placed on one backend (a static list shorter than
// the plan) wait behind each other, as the backend runs them; those
// machines also send no more batches at once than the device has lanes, so
// the backend runs them in the order counted (machine.lanes).
// The lanes' estimated free times are corrected when a batch ends: the
// lane it was counted on moves by how much earlier or later than expected
// it ended. Predict and dispatch read the earliest free lane with one
// atomic load; sending and ending a batch take the device's own lock, after
// the dispatcher's (never the other way round).
//
// Without a DeviceTable (Options.Devices) a dispatcher counts only its own
// batches, and a batch queued behind another module's on a shared backend
// starts later than predicted (docs/dataplane.md, "Devices").
type Device struct {
	mu    sync.Mutex
	est   []time.Time     // per lane: when its last counted batch is expected to end
	shift []time.Duration // per lane: how far ended batches have moved est, in all
	free  atomic.Int64    // the earliest of est, Unix ns (0: never used)
	seq   uint64          // batches counted so far (deviceTicket.seq)
}

// DeviceTable gives the Device of a backend id. The dispatcher calls Device
// once per placed machine when it builds a plan's table (New, SetPlan,
// SetSpare), never per request; it must return the same Device for an id
// every time, to every dispatcher that should see the others' batches.
type DeviceTable interface {
	Device(backend string) *Device
}

// Devices is a DeviceTable that makes each backend's Device on first use.
// Safe for concurrent use; the zero value is ready.
type Devices struct {
	mu sync.Mutex
	m  map[string]*Device
}

var _ DeviceTable = (*Devices)(nil)

// Device returns backend's Device, made on the first call for it.
func (t *Devices) Device(backend string) *Device {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.m[backend]
	if v == nil {
		if t.m == nil {
			t.m = map[string]*Device{}
		}
		v = &Device{}
		t.m[backend] = v
	}
	return v
}

// ensure gives v at least lanes lanes: the largest concurrency of the
// machines placed on it, as the backend loads its models.
func (v *Device) ensure(lanes int) {
	v.mu.Lock()
	for len(v.est) < lanes {
		v.est = append(v.est, time.Time{})
		v.shift = append(v.shift, 0)
	}
	v.mu.Unlock()
}

// freeAt returns when a batch sent to v could start: the earliest lane's
// estimated free time (at or before now: at once).
func (v *Device) freeAt() time.Time {
	ns := v.free.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// deviceTicket is a batch counted on a device: its lane, its duration,
// when it was expected to end when counted, and the lane's shift then.
type deviceTicket struct {
	seq   uint64 // the order it was counted in: the backend runs them in this order
	lane  int
	dur   time.Duration
	end   time.Time
	shift time.Duration
}

// reserve counts a batch that can start no earlier than start and runs for
// dur: it is queued on the device's earliest lane.
func (v *Device) reserve(start time.Time, dur time.Duration) deviceTicket {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.est) == 0 {
		v.est, v.shift = append(v.est, time.Time{}), append(v.shift, 0)
	}
	lane := v.earliestLane()
	end := maxTime(v.est[lane], start).Add(dur)
	v.est[lane] = end
	v.publish()
	v.seq++
	return deviceTicket{seq: v.seq, lane: lane, dur: dur, end: end, shift: v.shift[lane]}
}

// endOf returns when t's batch is expected to end now: its end when
// counted, moved with the batches before it on its lane that ended since.
func (v *Device) endOf(t deviceTicket) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	if t.lane >= len(v.est) {
		return t.end
	}
	return t.end.Add(v.shift[t.lane] - t.shift)
}

// done ends, at now, the batch t counted: the lane's later batches move by
// how much earlier or later than expected it ended, none before now.
func (v *Device) done(t deviceTicket, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if t.lane < len(v.est) {
		v.moveLocked(t.lane, now.Sub(t.end.Add(v.shift[t.lane]-t.shift)), now)
	}
}

// cancel takes back t, a batch that will not run there (its items expired,
// or it moved to another machine): the lane's later batches move up by its
// duration, none before now.
func (v *Device) cancel(t deviceTicket, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if t.lane < len(v.est) {
		v.moveLocked(t.lane, -t.dur, now)
	}
}

// moveLocked shifts lane by delta, to no earlier than now.
func (v *Device) moveLocked(lane int, delta time.Duration, now time.Time) {
	v.shift[lane] += delta
	v.est[lane] = maxTime(v.est[lane].Add(delta), now)
	v.publish()
}

func (v *Device) earliestLane() int {
	j := 0
	for i := 1; i < len(v.est); i++ {
		if v.est[i].Before(v.est[j]) {
			j = i
		}
	}
	return j
}

// publish stores the earliest lane for freeAt; v.mu held.
func (v *Device) publish() {
	at := v.est[v.earliestLane()]
	if at.IsZero() {
		v.free.Store(0)
		return
	}
	v.free.Store(at.UnixNano())
}
