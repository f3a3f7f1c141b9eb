package dispatcher

import (
	"errors"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// A group's slowness raised by a few stalled batches (a host that starved the
// backend for a moment) must not lock admission for good: once admission
// refuses on an idle group, no batch runs to lower it again. Here one 10 ms
// machine and a 15 ms budget: the first three batches take 40 ms, every later
// one 10 ms; an item every 100 ms for 20 s. The stale slowness relaxes while
// the group is idle and refusing, so admission takes items again within a few
// seconds (before the fix: 197 of the 200 refused).
func TestStaleSlownessDoesNotLockAdmission(t *testing.T) {
	mp := api.ModulePlan{Name: "m", BudgetMs: 15, Configs: []api.GroupPlan{gp(1, 10, 1, 10)}}
	clock := NewVirtualClock(t0)
	sent := 0
	s := senderFunc(func(b *Batch) {
		took := b.Slot.Duration
		if sent++; sent <= 3 {
			took = 40 * time.Millisecond
		}
		clock.AfterFunc(took, func() { b.Done(nil, nil) })
	})
	d, err := New(mp, Options{Clock: clock, Sender: s, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	refused := 0
	var lastRefused time.Duration
	for i := range 200 {
		at := time.Duration(i) * 100 * time.Millisecond
		it := tr.item(time.Time{})
		clock.AfterFunc(at, func() {
			it.Arrival = clock.Now()
			if err := d.Submit(it); errors.Is(err, ErrOverloaded) {
				refused++
				lastRefused = at
			} else if err != nil {
				t.Errorf("Submit at %v: %v", at, err)
			}
		})
	}
	clock.Run(t0.Add(21 * time.Second))
	t.Logf("refused %d of 200, the last at %v; %d completed", refused, lastRefused, d.Stats().Completed)
	if refused > 30 || lastRefused > 5*time.Second {
		t.Errorf("admission refused %d of 200 items on an idle machine, the last at %v; want it to take items again within 5 s of the stalled batches", refused, lastRefused)
	}
	if got := d.Stats().Completed; got < 150 {
		t.Errorf("%d items completed; want most of the 200", got)
	}
}
