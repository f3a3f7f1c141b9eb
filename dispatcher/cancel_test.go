package dispatcher

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// An abandoned item is taken out of the open batch and of the batches queued
// on a machine by Sweep, completed with ErrCancelled and never sent; one left
// in the queue when its batch goes is dropped there; one whose batch was
// already sent runs and is counted as dropped.
func TestSweepTakesAbandonedItemsOut(t *testing.T) {
	// Batch 2, 100 ms a batch, one machine: a, b go at once; c, d queue behind
	// them; e sits in the open batch.
	mp := api.ModulePlan{Name: "m", BudgetMs: 1000, Configs: []api.GroupPlan{gp(2, 100, 1, 20)}}
	clock := NewVirtualClock(t0)
	s := &vsender{clock: clock}
	d, err := New(mp, Options{Clock: clock, Sender: s, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	var flags [5]atomic.Bool
	items := make([]*Item, 5)
	for i := range items {
		items[i] = tr.item(t0)
		items[i].Abandoned = &flags[i]
		if err := d.Submit(items[i]); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.batches) != 1 {
		t.Fatalf("sent %d batches, want 1 (a, b) with c, d queued", len(s.batches))
	}
	before := d.Predict(clock.Now())
	flags[0].Store(true) // a: running
	flags[2].Store(true) // c: queued
	flags[3].Store(true) // d: queued, with c: its batch goes
	flags[4].Store(true) // e: open
	if n := d.Sweep(); n != 3 {
		t.Fatalf("Sweep took %d items out, want 3 (c, d queued, e open)", n)
	}
	if after := d.Predict(clock.Now()); after >= before {
		t.Errorf("prediction %v after the sweep, %v before: the emptied queued batch still counted", after, before)
	}
	clock.Run(t0.Add(5 * time.Second))
	if len(s.batches) != 1 {
		t.Errorf("sent %+v, want only the first batch: nothing abandoned unsent may run", s.batches)
	}
	st := d.Stats()
	if st.Cancelled != 3 || st.Dropped != 1 || st.Completed != 2 {
		t.Errorf("stats cancelled %d dropped %d completed %d, want 3, 1, 2", st.Cancelled, st.Dropped, st.Completed)
	}
	if tr.errs[ErrCancelled.Error()] != 3 || tr.errs["ok"] != 2 {
		t.Errorf("completions %v, want 3 cancelled and 2 ok (a ran, its result is the caller's to drop)", tr.errs)
	}

	// Abandoned without a sweep (say it moved to another dispatcher): dropped
	// when its batch is sent.
	f, g := tr.item(time.Time{}), tr.item(time.Time{})
	var ff atomic.Bool
	f.Abandoned = &ff
	if err := d.Submit(f); err != nil {
		t.Fatal(err)
	}
	ff.Store(true)
	if err := d.Submit(g); err != nil {
		t.Fatal(err)
	}
	clock.Run(t0.Add(10 * time.Second))
	if last := s.batches[len(s.batches)-1]; len(s.batches) != 2 || last.items != 1 {
		t.Errorf("batches %+v, want a second one of 1 item (g; f dropped at send)", s.batches)
	}
	if st := d.Stats(); st.Cancelled != 4 {
		t.Errorf("cancelled %d, want 4", st.Cancelled)
	}
}

// Under overload, admission refuses the low class first: with the high class
// at 60% of the machine's capacity and the low one at 340% (4× in all), every
// high item is admitted and served by its deadline; the low class takes the
// refusals but keeps at least its floor of the admitted items.
func TestPriorityClassesUnderOverload(t *testing.T) {
	hi, lo := classOverload(t, 60, 340)
	if frac := float64(hi.inTime) / float64(hi.sent); frac < 0.99 {
		t.Errorf("high class: %.3f within the SLO, want ≥ 0.99", frac)
	}
	if lo.refused < lo.sent/2 {
		t.Errorf("low class: %d of %d refused; it should absorb the overload", lo.refused, lo.sent)
	}
	admitted := float64(lo.sent - lo.refused)
	if share := admitted / (admitted + float64(hi.sent-hi.refused)); share < 0.1 {
		t.Errorf("low class: %.3f of the admitted items, below its floor 0.1", share)
	}
	if lo.late+lo.failed > (lo.sent-lo.refused)/100 {
		t.Errorf("low class: %d late and %d failed of %d admitted", lo.late, lo.failed, lo.sent-lo.refused)
	}
}

// The floor: the high class alone at 3× the machine's capacity, the low
// class at 1×: the low class still gets about its floor (0.1) of the
// admitted items, judged as the high class whenever it falls below.
func TestPriorityClassFloor(t *testing.T) {
	hi, lo := classOverload(t, 300, 100)
	admitted := float64(lo.sent - lo.refused)
	share := admitted / (admitted + float64(hi.sent-hi.refused))
	if share < 0.09 {
		t.Errorf("low class: %.3f of the admitted items, want about its floor 0.1 (≥ 0.09)", share)
	}
	if hi.late+hi.failed+lo.late+lo.failed > 0 {
		t.Errorf("admitted items late or failed: high %+v, low %+v", hi, lo)
	}
}

type classCounts struct{ sent, refused, inTime, late, failed int }

// classOverload runs 20 s of constant arrivals of class 0 at hiRate and
// class 2 at loRate (items/s) into one machine of 100 items/s (batch 4,
// 40 ms; SLO 200 ms; ClassFloor 0.1) and returns what each class saw.
func classOverload(t *testing.T, hiRate, loRate float64) (hi, lo classCounts) {
	t.Helper()
	mp := api.ModulePlan{Name: "m", BudgetMs: 200, Configs: []api.GroupPlan{gp(4, 40, 1, 100)}}
	clock := NewVirtualClock(t0)
	s := &vsender{clock: clock}
	d, err := New(mp, Options{Clock: clock, Sender: s, Admission: true, ClassFloor: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	const dur = 20 * time.Second
	type counts = classCounts
	var by [Classes]counts
	submit := func(rate float64, class int) {
		n := int(rate * dur.Seconds())
		for i := range n {
			clock.AfterFunc(time.Duration((float64(i)+0.5*float64(class))/rate*float64(time.Second)), func() {
				it := &Item{Class: class}
				it.Done = func(it *Item) {
					switch {
					case it.Err != nil:
						by[class].failed++
					case it.Finished.After(it.Deadline):
						by[class].late++
					default:
						by[class].inTime++
					}
				}
				by[class].sent++
				if err := d.Submit(it); errors.Is(err, ErrOverloaded) {
					by[class].refused++
				} else if err != nil {
					t.Error(err)
				}
			})
		}
	}
	submit(hiRate, 0)
	submit(loRate, 2)
	clock.Run(t0.Add(dur + 2*time.Second))
	hi, lo = by[0], by[2]
	t.Logf("high %+v, low %+v", hi, lo)
	st := d.Stats()
	if st.ByClass[0].Overloaded != uint64(hi.refused) || st.ByClass[2].Overloaded != uint64(lo.refused) {
		t.Errorf("stats by class %+v, client counts high %d low %d refused", st.ByClass, hi.refused, lo.refused)
	}
	return hi, lo
}

// Within a machine's queue the higher class goes first: two low items queued
// behind a running batch give their places to two high items queued after
// them, unless moving back would make them late (the floor).
func TestHigherClassServedFirstInTheQueue(t *testing.T) {
	for _, tc := range []struct {
		name     string
		budgetMs float64
		highAt   time.Duration // when the high items finish
	}{
		{"promoted", 1000, 200 * time.Millisecond},
		{"floor keeps the low items in place", 250, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Batch 2, 100 ms, one machine: L1 L2 run, L3 L4 queue, then H1 H2.
			mp := api.ModulePlan{Name: "m", BudgetMs: tc.budgetMs, Configs: []api.GroupPlan{gp(2, 100, 1, 20)}}
			d, clock, _ := newVirtual(t, mp, TC{})
			finished := map[int][]time.Duration{}
			for i, class := range []int{2, 2, 2, 2, 0, 0} {
				it := &Item{Arrival: t0, Class: class, Done: func(it *Item) {
					if it.Err != nil {
						t.Errorf("item %d: %v", i, it.Err)
					}
					finished[it.Class] = append(finished[it.Class], it.Finished.Sub(t0))
				}}
				if err := d.Submit(it); err != nil {
					t.Fatal(err)
				}
			}
			clock.Run(t0.Add(time.Second))
			for _, at := range finished[0] {
				if at != tc.highAt {
					t.Errorf("high items finished at %v, want %v", finished[0], tc.highAt)
					break
				}
			}
			t.Logf("high %v, low %v", finished[0], finished[2])
		})
	}
}

// Traffic of one class, whichever, is admitted exactly as without classes:
// the headroom applies only while a higher class is arriving.
func TestOneClassAdmittedAsWithoutClasses(t *testing.T) {
	run := func(class int) (refused int) {
		mp := api.ModulePlan{Name: "m", BudgetMs: 200, Configs: []api.GroupPlan{gp(4, 40, 1, 100)}}
		clock := NewVirtualClock(t0)
		d, err := New(mp, Options{Clock: clock, Sender: &vsender{clock: clock}, Admission: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3000 {
			clock.AfterFunc(time.Duration(i)*time.Second/300, func() {
				if errors.Is(d.Submit(&Item{Class: class, Done: func(*Item) {}}), ErrOverloaded) {
					refused++
				}
			})
		}
		clock.Run(t0.Add(20 * time.Second))
		return refused
	}
	high, normal, low := run(0), run(1), run(2)
	if high == 0 || normal != high || low != high {
		t.Errorf("refused at 3×: %d high, %d normal, %d low; want the same (and > 0)", high, normal, low)
	}
}
