package dispatcher

import (
	"errors"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// deviceSender runs batches as a one-lane backend does, FIFO over every
// machine placed on it, each for the device's real batch duration (not the
// plan's), and records when each item ended.
type deviceSender struct {
	clock *VirtualClock
	du    time.Duration
	free  map[string]time.Time
	ended map[*Item]time.Time
}

func (s *deviceSender) Send(b *Batch) {
	now := s.clock.Now()
	start := maxTime(s.free[b.Slot.Backend], now)
	s.free[b.Slot.Backend] = start.Add(s.du)
	items := append([]*Item(nil), b.Items...)
	s.clock.AfterFunc(start.Add(s.du).Sub(now), func() {
		for _, it := range items {
			s.ended[it] = s.clock.Now()
		}
		b.Done(nil, nil)
	})
}

// inflatedPlan is a module planned from numbers a burst inflated: batch 16
// at 60 ms (the offline profile says 10 ms), four machines on a pool of one
// backend, d0 (the plan needs more than the pool has), budget 50 ms. With
// pace, the backend's measured pace (MachineHealth.SetPace; 0: never
// measured).
func inflatedPlan(t *testing.T, clock *VirtualClock, s Sender, pace float64) *Dispatcher {
	t.Helper()
	g := gp(16, 60, 4, 1000)
	g.Backends = []string{"d0", "d0", "d0", "d0"}
	mp := api.ModulePlan{Name: "m", Rate: 1000, BudgetMs: 50, Configs: []api.GroupPlan{g}}
	h := healthMap{}
	if pace > 0 {
		h.Machine("d0").SetPace(pace)
	}
	d, err := New(mp, Options{Admission: true, Flush: FlushIdle, Clock: clock, Sender: s, Health: h, Devices: &Devices{},
		Profiled: func(hw string, batch, conc int) time.Duration { return 10 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// An idle module admits a lone request it can finish in time, whatever the
// plan says: planned at 60 ms a batch on a budget of 50 ms (and four
// machines on one backend), but its backend measured at 1.2× its 10 ms
// profile, a lone item due in 50 ms is admitted (predicted at 15 ms: the
// pace, a quarter up) and ends at 12 ms. Before,
// the planned duration was the floor of every prediction, and the module
// refused every request until a re-plan.
func TestIdleModuleAdmitsWhatItCanFinishWhateverThePlan(t *testing.T) {
	clock := NewVirtualClock(t0)
	s := &deviceSender{clock: clock, du: 12 * time.Millisecond, free: map[string]time.Time{}, ended: map[*Item]time.Time{}}
	d := inflatedPlan(t, clock, s, 1.2)
	if got := d.Predict(clock.Now()); got < 15*time.Millisecond-time.Microsecond || got > 15*time.Millisecond+time.Microsecond {
		t.Errorf("Predict on the idle module = %v; want 15ms (the profile × the measured pace × measuredMargin), not the plan's 60ms", got)
	}
	it := &Item{Deadline: clock.Now().Add(50 * time.Millisecond), Done: func(*Item) {}}
	if err := d.Submit(it); err != nil {
		t.Fatalf("a lone item due in 50 ms on an idle module measured at 12 ms a batch: %v; want admitted", err)
	}
	clock.Run(t0.Add(time.Second))
	if end, ok := s.ended[it]; !ok || end.After(it.Deadline) {
		t.Errorf("the lone item ended at %v (done %v); want by its deadline, 50ms", end.Sub(t0), ok)
	}
}

// After a burst drains, the next request is admitted at once: a burst at
// about 4× what the backend serves for 2 s on the inflated plan, then,
// when the last admitted item has ended (an event, not a sleep), a lone
// item. Every item admitted, in the burst or after, ends by its deadline.
func TestAdmittedAtOnceAfterABurstDrains(t *testing.T) {
	clock := NewVirtualClock(t0)
	s := &deviceSender{clock: clock, du: 12 * time.Millisecond, free: map[string]time.Time{}, ended: map[*Item]time.Time{}}
	d := inflatedPlan(t, clock, s, 1.2)
	var admitted, refused, ended, late int
	done := func(it *Item) {
		ended++
		if it.Err != nil || s.ended[it].After(it.Deadline) {
			late++
		}
	}
	const rate, burst = 5000.0, 2 * time.Second // the backend: 16 items / 12 ms, about 1330/s
	for i := range int(rate * burst.Seconds()) {
		clock.AfterFunc(time.Duration(float64(i)/rate*float64(time.Second)), func() {
			it := &Item{Deadline: clock.Now().Add(50 * time.Millisecond), Done: done}
			switch err := d.Submit(it); {
			case err == nil:
				admitted++
			case errors.Is(err, ErrOverloaded):
				refused++
			default:
				t.Errorf("Submit in the burst: %v", err)
			}
		})
	}
	clock.Run(t0.Add(burst))
	for ended < admitted { // the queue drains: step to each completion
		clock.Run(clock.Now().Add(time.Millisecond))
	}
	t.Logf("burst: %d admitted, %d refused; drained at %v", admitted, refused, clock.Now().Sub(t0))
	if refused == 0 || admitted < 2000 {
		t.Fatalf("burst: %d admitted, %d refused; want the backend's ~2600 admitted and the rest refused", admitted, refused)
	}
	it := &Item{Deadline: clock.Now().Add(50 * time.Millisecond), Done: done}
	if err := d.Submit(it); err != nil {
		t.Fatalf("the first item after the burst drained: %v; want admitted", err)
	}
	clock.Run(clock.Now().Add(time.Second))
	if ended != admitted+1 || late > 0 {
		t.Errorf("%d of %d admitted ended, %d late or failed; want all, none late", ended, admitted+1, late)
	}
}

// A request that truly cannot be finished in time is still refused: on the
// inflated plan with the backend measured slower than the budget allows,
// or with nothing measured yet (the plan's duration stands), or due sooner
// than even the measured pace ends it, or behind a queue that ends it
// late; and what is admitted ends in time.
func TestAdmissionStillRefusesWhatCannotBeInTime(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pace   float64 // 0: never measured
		du     time.Duration
		due    time.Duration
		queued int // items submitted just before, due in 1 s
		admit  bool
	}{
		{"measured 5x the profile", 5, 50 * time.Millisecond, 45 * time.Millisecond, 0, false},
		{"pace never measured: the plan's 60 ms", 0, 12 * time.Millisecond, 50 * time.Millisecond, 0, false},
		{"due before the measured batch ends", 1.2, 12 * time.Millisecond, 10 * time.Millisecond, 0, false},
		{"behind 64 queued items", 1.2, 12 * time.Millisecond, 50 * time.Millisecond, 64, false},
		{"behind 32 queued items", 1.2, 12 * time.Millisecond, 50 * time.Millisecond, 32, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewVirtualClock(t0)
			s := &deviceSender{clock: clock, du: tc.du, free: map[string]time.Time{}, ended: map[*Item]time.Time{}}
			d := inflatedPlan(t, clock, s, tc.pace)
			var late int
			done := func(it *Item) {
				if it.Err != nil || s.ended[it].After(it.Deadline) {
					late++
				}
			}
			for range tc.queued {
				if err := d.Submit(&Item{Deadline: clock.Now().Add(time.Second), Done: done}); err != nil {
					t.Fatal(err)
				}
			}
			it := &Item{Deadline: clock.Now().Add(tc.due), Done: done}
			err := d.Submit(it)
			if tc.admit != (err == nil) || err != nil && !errors.Is(err, ErrOverloaded) {
				t.Fatalf("Submit of an item due in %v: %v; want admitted %v", tc.due, err, tc.admit)
			}
			clock.Run(t0.Add(2 * time.Second))
			if late > 0 {
				t.Errorf("%d admitted items ended late or failed", late)
			}
		})
	}
}
