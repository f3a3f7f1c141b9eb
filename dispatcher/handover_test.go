package dispatcher

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// orderSender is a vsender that also records the items of each batch, in the
// order they were sent.
type orderSender struct {
	vsender
	items []*Item
}

func (s *orderSender) Send(b *Batch) {
	s.items = append(s.items, b.Items...)
	s.vsender.Send(b)
}

// Handover moves what d has not sent, in arrival order, to the dispatcher
// that replaces it: one machine, batch 2, 100 ms. Seven items at 0: d sends
// items 0 and 1, queues 2–3 and 4–5 on its machine and holds 6 in its open
// batch. After the handover d runs 0 and 1 alone; the new dispatcher runs
// 2–6, in order (2–3 at once, 4–5 at 100 ms, 6 with the next batch), and
// an arrival there is predicted behind them (its batch, with item 6, done
// at 300 ms, not 100 ms as before) and, due at 250 ms, refused. Nothing is lost, failed or run twice.
func TestHandoverMovesUnsentItems(t *testing.T) {
	mp := api.ModulePlan{Name: "m", Rate: 20, BudgetMs: 10000, Configs: []api.GroupPlan{gp(2, 100, 1, 20)}}
	for _, p := range []Policy{TC{}, RR{}} {
		t.Run(p.Name(), func(t *testing.T) {
			clock := NewVirtualClock(t0)
			oldS, newS := &orderSender{vsender: vsender{clock: clock}}, &orderSender{vsender: vsender{clock: clock}}
			d, err := New(mp, Options{Policy: p, Admission: true, Clock: clock, Sender: oldS})
			if err != nil {
				t.Fatal(err)
			}
			to, err := New(mp, Options{Policy: p, Admission: true, Clock: clock, Sender: newS})
			if err != nil {
				t.Fatal(err)
			}
			tr := newTracker()
			items := make([]*Item, 7)
			for i := range items {
				items[i] = tr.item(t0.Add(time.Duration(i) * time.Microsecond))
				if err := d.Submit(items[i]); err != nil {
					t.Fatalf("item %d: %v", i, err)
				}
			}
			if len(oldS.items) != 2 {
				t.Fatalf("d sent %d items before the handover, want 2 (its first batch)", len(oldS.items))
			}
			idle := to.Predict(clock.Now())
			if n := d.Handover(to); n != 5 {
				t.Fatalf("Handover moved %d items, want 5 (2 queued batches of 2 and the open batch's 1)", n)
			}
			if got := d.Predict(clock.Now()); got != 200*time.Millisecond {
				t.Errorf("d's Predict after the handover = %v, want 200ms (its running batch, then one of its own)", got)
			}
			busy := to.Predict(clock.Now())
			if idle != 100*time.Millisecond || busy != 300*time.Millisecond {
				t.Errorf("the new dispatcher's Predict: %v before the handover, %v after; want 100ms, then 300ms", idle, busy)
			}
			late := tr.item(time.Time{})
			late.Deadline = clock.Now().Add(250 * time.Millisecond)
			if err := to.Submit(late); !errors.Is(err, ErrOverloaded) {
				t.Errorf("an arrival due at 250 ms behind the moved work (done at 300 ms): Submit = %v, want ErrOverloaded", err)
			}
			clock.Run(t0.Add(20 * time.Second))
			for i, it := range items {
				if tr.done[it] != 1 {
					t.Errorf("item %d completed %d times, want once", i, tr.done[it])
				}
			}
			if tr.errs["ok"] != len(items) || len(tr.errs) != 1 {
				t.Errorf("completions %v, want %d ok", tr.errs, len(items))
			}
			if len(oldS.items) != 2 || oldS.items[0] != items[0] || oldS.items[1] != items[1] {
				t.Errorf("d sent %d items, want only its first batch (items 0 and 1)", len(oldS.items))
			}
			if len(newS.items) != 5 {
				t.Fatalf("the new dispatcher sent %d items, want the 5 moved", len(newS.items))
			}
			for i, it := range newS.items {
				if it != items[2+i] {
					t.Errorf("the new dispatcher's item %d is not item %d: arrival order lost", i, 2+i)
				}
			}
			ds, ts := d.Stats(), to.Stats()
			if ds.HandedOver != 5 || ds.Submitted != 7 || ds.Completed != 2 {
				t.Errorf("d's stats: handed over %d, submitted %d, completed %d; want 5, 7, 2", ds.HandedOver, ds.Submitted, ds.Completed)
			}
			if ts.TakenOver != 5 || ts.Submitted != 0 || ts.Completed != 5 || ts.Overloaded != 1 {
				t.Errorf("new stats: taken over %d, submitted %d, completed %d, overloaded %d; want 5, 0, 5, 1",
					ts.TakenOver, ts.Submitted, ts.Completed, ts.Overloaded)
			}
			if n := d.Handover(to); n != 0 {
				t.Errorf("a second Handover moved %d items, want 0", n)
			}
		})
	}
}

// A closed receiver takes nothing: the items stay on d and are served there;
// with d closed as well they complete with ErrClosed, never lost.
func TestHandoverToClosed(t *testing.T) {
	mp := api.ModulePlan{Name: "m", Rate: 20, BudgetMs: 10000, Configs: []api.GroupPlan{gp(2, 100, 1, 20)}}
	clock := NewVirtualClock(t0)
	s := &vsender{clock: clock}
	d, err := New(mp, Options{Clock: clock, Sender: s})
	if err != nil {
		t.Fatal(err)
	}
	to, err := New(mp, Options{Clock: clock, Sender: s})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(api.ModulePlan{Name: "other", Configs: mp.Configs}, Options{Clock: clock, Sender: s})
	if err != nil {
		t.Fatal(err)
	}
	to.Close()
	tr := newTracker()
	for range 5 {
		if err := d.Submit(tr.item(time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.Handover(to); n != 0 {
		t.Errorf("Handover to a closed dispatcher moved %d items, want 0", n)
	}
	if n := d.Handover(other); n != 0 {
		t.Errorf("Handover to another module's dispatcher moved %d items, want 0", n)
	}
	clock.Run(t0.Add(20 * time.Second))
	if tr.errs["ok"] != 5 || len(tr.errs) != 1 {
		t.Errorf("completions %v, want 5 ok on d", tr.errs)
	}
	if st := d.Stats(); st.HandedOver != 0 || st.Completed != 5 {
		t.Errorf("d's stats: handed over %d, completed %d; want 0 and 5", st.HandedOver, st.Completed)
	}
}

// Handover beside Submits on both dispatchers, real clock, batches run on
// goroutines of their own: every item completes exactly once, OK.
func TestHandoverConcurrent(t *testing.T) {
	mp := api.ModulePlan{Name: "m", BudgetMs: 60000, Configs: []api.GroupPlan{
		{Batch: 8, Concurrency: 1, DurationMs: 1, Machines: 1, Rate: 1000}}}
	s := &goSender{}
	var disp [2]*Dispatcher
	for i := range disp {
		d, err := New(mp, Options{Flush: FlushIdle, Sender: s})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		disp[i] = d
	}
	const workers, per = 4, 500
	var count [workers * per]atomic.Int32
	var wg, done sync.WaitGroup
	done.Add(workers * per)
	var moved atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				id := w*per + i
				it := &Item{Done: func(it *Item) {
					if it.Err != nil {
						t.Errorf("item %d: %v", id, it.Err)
					}
					count[id].Add(1)
					done.Done()
				}}
				if err := disp[(w+i)%2].Submit(it); err != nil {
					t.Error(err)
				}
				if w == 0 && i%50 == 0 {
					moved.Add(int64(disp[i/50%2].Handover(disp[1-i/50%2])))
				}
			}
		}()
	}
	wg.Wait()
	waitCh := make(chan struct{})
	go func() { done.Wait(); close(waitCh) }()
	select {
	case <-waitCh:
	case <-time.After(30 * time.Second):
		t.Fatal("items never completed")
	}
	for id := range count {
		if c := count[id].Load(); c != 1 {
			t.Fatalf("item %d completed %d times", id, c)
		}
	}
	s0, s1 := disp[0].Stats(), disp[1].Stats()
	if s0.HandedOver+s1.HandedOver != uint64(moved.Load()) || s0.TakenOver+s1.TakenOver != uint64(moved.Load()) {
		t.Errorf("handed over %d+%d, taken over %d+%d; Handover returned %d in all", s0.HandedOver, s1.HandedOver, s0.TakenOver, s1.TakenOver, moved.Load())
	}
	if s0.Completed+s1.Completed != workers*per {
		t.Errorf("completed %d+%d, want %d", s0.Completed, s1.Completed, workers*per)
	}
	t.Logf("moved %d items in %d handovers", moved.Load(), per/50)
}

// The dispatcher that takes over inherits what d measured of its backends:
// after 20 ms batches on a 10 ms profile, a fresh dispatcher on the same
// backend predicts about 20 ms after the handover (10 ms before), one on
// another backend still 10 ms.
func TestHandoverCarriesSlowness(t *testing.T) {
	on := func(backend string) api.ModulePlan {
		g := gp(1, 10, 1, 50)
		g.Backends = []string{backend}
		return api.ModulePlan{Name: "m", Rate: 50, BudgetMs: 1000, Configs: []api.GroupPlan{g}}
	}
	clock := NewVirtualClock(t0)
	d, err := New(on("gpu-0"), Options{Clock: clock, Sender: slowSender{clock}})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	for i := range 30 { // the slowness follows a tenth of the gap a batch
		submitAt(t, clock, d, time.Duration(i)*100*time.Millisecond, tr.item(time.Time{}), nil)
	}
	clock.Run(t0.Add(4 * time.Second))
	same, err := New(on("gpu-0"), Options{Clock: clock, Sender: slowSender{clock}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(on("gpu-1"), Options{Clock: clock, Sender: slowSender{clock}})
	if err != nil {
		t.Fatal(err)
	}
	if got := same.Predict(clock.Now()); got != 10*time.Millisecond {
		t.Fatalf("a fresh dispatcher predicts %v, want the profile's 10ms", got)
	}
	d.Handover(same)
	d.Handover(other)
	if got := same.Predict(clock.Now()); got < 18*time.Millisecond || got > 20*time.Millisecond {
		t.Errorf("after the handover, on the same backend: Predict = %v, want about 20ms (d's measure)", got)
	}
	if got := other.Predict(clock.Now()); got != 10*time.Millisecond {
		t.Errorf("after the handover, on another backend: Predict = %v, want 10ms", got)
	}
}
