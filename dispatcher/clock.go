package dispatcher

import (
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Clock is the dispatcher's only source of time: the live gateway passes
// SystemClock, the simulator a *VirtualClock. The dispatcher owns no goroutine
// and no socket; it acts when Submit is called, when a timer it armed fires,
// and when a Batch is done.
//
// scheduler/replan has a Clock of its own (Now and Tick), and the two stay
// apart on purpose: each is the small interface its consumer needs, defined
// where it is consumed. The data plane needs one-shot timers it can re-arm
// without allocating and that a virtual clock can run as a discrete-event
// simulation; the control plane needs periodic ticks, faked in its tests. The
// wall clock is the same for both: SystemClock here and replan.SystemClock
// there are each time.Now plus the standard library's timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f once, after d, on the clock's own schedule
	// (SystemClock: a goroutine of the runtime; VirtualClock: inside Run or
	// Step). The returned Timer may be stopped and re-armed any number of times.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a re-armable one-shot timer made by Clock.AfterFunc. Re-arming a timer
// allocates nothing, which is how the dispatcher keeps its hot path allocation-free.
type Timer interface {
	// Stop cancels the timer; it reports whether the call stopped it before it fired.
	Stop() bool
	// Reset re-arms the timer to fire after d; it reports whether it had been active.
	Reset(d time.Duration) bool
}

// SystemClock is the wall clock: time.Now and time.AfterFunc. It is the
// default of Options.Clock.
type SystemClock struct{}

var _ Clock = SystemClock{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc returns time.AfterFunc(d, f), f run under a recover: a panic in a
// dispatcher's timer (a flush, a dummy, a relax) is reported (api.Recovered)
// instead of ending the process and every request in flight.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(d, func() {
		defer func() {
			if v := recover(); v != nil {
				_ = api.Recovered("timer", v)
			}
		}()
		f()
	})
}

var _ Timer = (*time.Timer)(nil)

// VirtualClock is a discrete-event clock: time advances only inside Run and Step,
// jumping from one timer to the next. Timers due at the same instant fire in the
// order they were armed. It is single-threaded: Now, AfterFunc, the timers' Stop and
// Reset, Run and Step must all be called from one goroutine (timer callbacks run on
// it too). Arming and re-arming a timer allocates nothing after the first AfterFunc.
type VirtualClock struct {
	base time.Time
	now  int64 // ns since base
	heap []*vtimer
	seq  uint64
}

var _ Clock = (*VirtualClock)(nil)

// NewVirtualClock returns a virtual clock that reads start until it is run.
func NewVirtualClock(start time.Time) *VirtualClock { return &VirtualClock{base: start} }

// Now returns the virtual time.
func (c *VirtualClock) Now() time.Time { return c.base.Add(time.Duration(c.now)) }

// Elapsed returns the virtual time since the start.
func (c *VirtualClock) Elapsed() time.Duration { return time.Duration(c.now) }

// AfterFunc arms a timer that calls f when the virtual time reaches Now()+d.
// A negative d counts as 0.
func (c *VirtualClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &vtimer{c: c, f: f, index: -1}
	t.Reset(d)
	return t
}

// Pending returns the number of armed timers.
func (c *VirtualClock) Pending() int { return len(c.heap) }

// Step fires the earliest armed timer, advancing the clock to its time. It reports
// false, and does nothing, when no timer is armed.
func (c *VirtualClock) Step() bool {
	if len(c.heap) == 0 {
		return false
	}
	t := c.pop()
	if t.at > c.now {
		c.now = t.at
	}
	t.f()
	return true
}

// Run fires, in time order, every timer due at or before until (including timers
// armed by those callbacks), then leaves the clock at until if that is later. It
// returns the number of timers fired.
func (c *VirtualClock) Run(until time.Time) int {
	n := 0
	u := int64(until.Sub(c.base))
	for len(c.heap) > 0 && c.heap[0].at <= u {
		c.Step()
		n++
	}
	if u > c.now {
		c.now = u
	}
	return n
}

// NextAt returns the time of the earliest armed timer, false when none is armed.
func (c *VirtualClock) NextAt() (time.Time, bool) {
	if len(c.heap) == 0 {
		return time.Time{}, false
	}
	return c.base.Add(time.Duration(c.heap[0].at)), true
}

type vtimer struct {
	c     *VirtualClock
	f     func()
	at    int64 // ns since c.base
	seq   uint64
	index int // position in c.heap, -1 when not armed
}

func (t *vtimer) Stop() bool {
	if t.index < 0 {
		return false
	}
	t.c.remove(t.index)
	return true
}

func (t *vtimer) Reset(d time.Duration) bool {
	c := t.c
	if d < 0 {
		d = 0
	}
	t.at = c.now + int64(d)
	c.seq++
	t.seq = c.seq
	if t.index >= 0 {
		c.fix(t.index)
		return true
	}
	t.index = len(c.heap)
	c.heap = append(c.heap, t)
	c.up(t.index)
	return false
}

func (c *VirtualClock) less(i, j int) bool {
	a, b := c.heap[i], c.heap[j]
	if a.at == b.at {
		return a.seq < b.seq
	}
	return a.at < b.at
}

func (c *VirtualClock) swap(i, j int) {
	h := c.heap
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (c *VirtualClock) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !c.less(j, i) {
			break
		}
		c.swap(i, j)
		j = i
	}
}

func (c *VirtualClock) down(i int) bool {
	i0, n := i, len(c.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && c.less(r, l) {
			j = r
		}
		if !c.less(j, i) {
			break
		}
		c.swap(i, j)
		i = j
	}
	return i > i0
}

func (c *VirtualClock) fix(i int) {
	if !c.down(i) {
		c.up(i)
	}
}

func (c *VirtualClock) pop() *vtimer {
	t := c.heap[0]
	c.remove(0)
	return t
}

func (c *VirtualClock) remove(i int) {
	n := len(c.heap) - 1
	t := c.heap[i]
	if i != n {
		c.swap(i, n)
	}
	c.heap[n] = nil
	c.heap = c.heap[:n]
	if i != n {
		c.fix(i)
	}
	t.index = -1
}
