package dispatcher

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Admission refuses at once exactly the items that would complete after
// their deadline given the machine's queue, and keeps its promise to the
// others. One machine, batch 1, 10 ms, budget 35 ms: five items at 0 would
// finish at 10, 20, 30, 40 and 50 ms; the last two are refused.
func TestAdmissionRefusesWhatWouldBeLate(t *testing.T) {
	mp := api.ModulePlan{Name: "m", Rate: 50, BudgetMs: 35, Configs: []api.GroupPlan{gp(1, 10, 1, 50)}}
	for _, p := range []Policy{TC{}, RR{}} {
		t.Run(p.Name(), func(t *testing.T) {
			clock := NewVirtualClock(t0)
			s := &vsender{clock: clock}
			d, err := New(mp, Options{Policy: p, Admission: true, Clock: clock, Sender: s})
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Predict(clock.Now()); got != 10*time.Millisecond {
				t.Errorf("Predict on an idle machine = %v, want the batch duration 10ms", got)
			}
			tr := newTracker()
			var refused int
			for i := range 5 {
				want := time.Duration(min(i+1, 4)) * 10 * time.Millisecond // the fourth is refused: nothing queues after it
				if got := d.Predict(clock.Now()); got != want {
					t.Errorf("item %d: Predict = %v, want %v", i, got, want)
				}
				if err := d.Submit(tr.item(time.Time{})); errors.Is(err, ErrOverloaded) {
					refused++
				} else if err != nil {
					t.Fatal(err)
				}
			}
			clock.Run(t0.Add(time.Second))
			if refused != 2 || tr.errs["ok"] != 3 || len(tr.errs) != 1 {
				t.Errorf("refused %d, completions %v; want 2 refused and 3 ok", refused, tr.errs)
			}
			for _, at := range tr.times {
				if at.Sub(t0) > 35*time.Millisecond {
					t.Errorf("an admitted item finished at %v, after its 35 ms deadline", at.Sub(t0))
				}
			}
			if st := d.Stats(); st.Overloaded != 2 || st.Submitted != 3 {
				t.Errorf("stats: overloaded %d submitted %d, want 2 and 3", st.Overloaded, st.Submitted)
			}
		})
	}
}

// HandoffMargin keeps a margin per batch queued ahead, and none before an
// idle machine. One machine, batch 1, 10 ms, budget 40 ms, five items at 0:
// without it four are admitted (ends at 10, 20, 30 and 40 ms); with 2 ms a
// batch ahead the fourth, ending at 40 ms behind three batches, needs 46 and
// is refused. A lone item whose batch takes its whole budget is admitted.
// With a spare machine, the batches the margin keeps off the planned machine
// go to the spare (Dispatcher.target counts the margin too): all five are
// admitted, none late.
func TestHandoffMarginPerQueuedBatch(t *testing.T) {
	for _, tc := range []struct {
		margin   time.Duration
		budgetMs float64
		n, want  int
		spare    bool
	}{{0, 40, 5, 4, false}, {2 * time.Millisecond, 40, 5, 3, false}, {2 * time.Millisecond, 10, 1, 1, false}, {2 * time.Millisecond, 40, 5, 5, true}} {
		mp := api.ModulePlan{Name: "m", Rate: 50, BudgetMs: tc.budgetMs, Configs: []api.GroupPlan{gp(1, 10, 1, 50)}}
		clock := NewVirtualClock(t0)
		d, err := New(mp, Options{Admission: true, HandoffMargin: tc.margin, Clock: clock, Sender: &vsender{clock: clock}})
		if err != nil {
			t.Fatal(err)
		}
		if tc.spare {
			if err := d.SetSpare([]Slot{{Module: "m", Backend: "b1", Batch: 1, Concurrency: 1, Duration: 10 * time.Millisecond}}); err != nil {
				t.Fatal(err)
			}
		}
		tr := newTracker()
		admitted := 0
		for range tc.n {
			if err := d.Submit(tr.item(time.Time{})); err == nil {
				admitted++
			} else if !errors.Is(err, ErrOverloaded) {
				t.Fatal(err)
			}
		}
		clock.Run(t0.Add(time.Second))
		if admitted != tc.want || tr.errs["ok"] != tc.want {
			t.Errorf("margin %v, budget %v ms, %d items, spare %v: admitted %d, completions %v; want %d admitted, all ok",
				tc.margin, tc.budgetMs, tc.n, tc.spare, admitted, tr.errs, tc.want)
		}
		for _, at := range tr.times {
			if at.Sub(t0) > time.Duration(tc.budgetMs)*time.Millisecond {
				t.Errorf("margin %v, spare %v: an admitted item finished at %v, after its %v ms budget", tc.margin, tc.spare, at.Sub(t0), tc.budgetMs)
			}
		}
	}
}

// A backend slower than its profile makes Predict slower too: after 30
// batches of 20 ms on a 10 ms profile, an idle machine is predicted at about
// 20 ms (the 99th-percentile ratio follows a tenth of the gap a batch).
func TestPredictLearnsSlowBackends(t *testing.T) {
	mp := api.ModulePlan{Name: "m", Rate: 50, BudgetMs: 1000, Configs: []api.GroupPlan{gp(1, 10, 1, 50)}}
	clock := NewVirtualClock(t0)
	d, err := New(mp, Options{Clock: clock, Sender: slowSender{clock}})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	for i := range 30 {
		submitAt(t, clock, d, time.Duration(i)*100*time.Millisecond, tr.item(time.Time{}), nil)
	}
	clock.Run(t0.Add(4 * time.Second))
	if got := d.Predict(clock.Now()); got < 19*time.Millisecond || got > 20*time.Millisecond {
		t.Errorf("Predict after 20 ms batches on a 10 ms profile = %v, want about 20ms", got)
	}
}

// slowSender runs every batch for twice its profiled duration.
type slowSender struct{ clock *VirtualClock }

func (s slowSender) Send(b *Batch) {
	s.clock.AfterFunc(2*b.Slot.Duration, func() { b.Done(nil, nil) })
}

// A spare machine takes the batches the planned one cannot run in time, and
// admission counts it: with one spare like the planned machine, the two items
// TestAdmissionRefusesWhatWouldBeLate refuses are served, on the spare, in
// time. A spare slot of another module is refused, naming it.
func TestSpareTakesTheOverflow(t *testing.T) {
	mp := api.ModulePlan{Name: "m", Rate: 50, BudgetMs: 35, Configs: []api.GroupPlan{gp(1, 10, 1, 50)}}
	clock := NewVirtualClock(t0)
	d, err := New(mp, Options{Admission: true, Clock: clock, Sender: &vsender{clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetSpare([]Slot{{Module: "other", Backend: "b9", Batch: 1, Concurrency: 1, Duration: 10 * time.Millisecond}}); err == nil || !strings.Contains(err.Error(), "b9") {
		t.Errorf("SetSpare with another module's slot: %v, want an error naming it", err)
	}
	if err := d.SetSpare([]Slot{{Module: "m", Backend: "b1", Batch: 1, Concurrency: 1, Duration: 10 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	for range 5 {
		if err := d.Submit(tr.item(time.Time{})); err != nil {
			t.Fatalf("Submit: %v, want every item admitted", err)
		}
	}
	clock.Run(t0.Add(time.Second))
	st := d.Stats()
	if tr.errs["ok"] != 5 || st.Overflow != 2 || len(st.Spare) != 1 || st.Spare[0].Items != 2 {
		t.Errorf("completions %v, overflow %d, spare %+v; want 5 ok, 2 batches overflowed to the spare", tr.errs, st.Overflow, st.Spare)
	}
	for _, at := range tr.times {
		if at.Sub(t0) > 35*time.Millisecond {
			t.Errorf("an item finished at %v, after its 35 ms deadline", at.Sub(t0))
		}
	}
}

// A batch whose machine is idle but slower than planned by its pace goes
// to a spare machine that ends it in time, while another machine of its
// group runs as planned: item A takes the fast machine (100 ms), item B
// finds it busy and the slow one idle, whose 160 ms (100 ms × 1.6) misses
// B's 120 ms budget; the spare's 100 ms meets it. Before, only a busy
// machine's batch overflowed, and B came back 40 ms late. When every
// machine of the group is slow the plan is short, and the batch stays on
// its machine (the spare is kept for what busy machines cannot take).
func TestSpareTakesTheSlowIdleMachinesBatch(t *testing.T) {
	for _, tc := range []struct {
		backends []string
		want     []string // the slot each batch went to, in order
	}{
		{[]string{"slow", "fast"}, []string{"m/g0m1(fast)", "m/g-1m0(spare)"}},
		{[]string{"slow"}, []string{"m/g0m0(slow)"}},
	} {
		t.Run(strings.Join(tc.backends, "+"), func(t *testing.T) {
			g := gp(1, 100, float64(len(tc.backends)), 10)
			g.Backends = tc.backends
			mp := api.ModulePlan{Name: "m", BudgetMs: 120, Configs: []api.GroupPlan{g}}
			clock := NewVirtualClock(t0)
			s := &vsender{clock: clock}
			h := healthMap{}
			h.Machine("slow").SetPace(1.6)
			d, err := New(mp, Options{Clock: clock, Sender: s, Health: h})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.SetSpare([]Slot{{Module: "m", Backend: "spare", Batch: 1, Concurrency: 1, Duration: 100 * time.Millisecond}}); err != nil {
				t.Fatal(err)
			}
			tr := newTracker()
			for range len(tc.want) {
				if err := d.Submit(tr.item(time.Time{})); err != nil {
					t.Fatal(err)
				}
			}
			clock.Run(t0.Add(time.Second))
			var got []string
			for _, b := range s.batches {
				got = append(got, b.slot)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("batches went to %v; want %v", got, tc.want)
			}
			if len(tc.backends) > 1 {
				for _, at := range tr.times {
					if at.Sub(t0) > 120*time.Millisecond {
						t.Errorf("an item finished at %v, after its 120 ms deadline", at.Sub(t0))
					}
				}
			}
		})
	}
}

// A batch that no machine ends in time goes to the spare that ends it
// first, when that is before its own machine would. Live (one device 1.6x,
// seed 6), a deadline flush fired a millisecond after the time it was set
// for, the group's machine had been taken meanwhile, and three idle spares
// would have ended the batch a millisecond after its due: the strict rule
// queued it behind the busy machine's batch instead, 21 ms late, 3 504s. A
// spare that would end it after the busy machine does not take it, nor
// one whose backend is down (ejected).
func TestLateBatchTakesTheSpareThatEndsFirst(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spare    time.Duration
		down     bool
		wantSlot string
		wantEnd  time.Duration // when the second item completes, since t0
	}{
		{"spare a millisecond short", 101 * time.Millisecond, false, "m/g-1m0(spare)", 151 * time.Millisecond},
		{"spare later than the busy machine", 300 * time.Millisecond, false, "m/g0m0(a)", 200 * time.Millisecond},
		{"spare down", 50 * time.Millisecond, true, "m/g0m0(a)", 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gp(1, 100, 1, 10)
			g.Backends = []string{"a"}
			mp := api.ModulePlan{Name: "m", BudgetMs: 1000, Configs: []api.GroupPlan{g}}
			clock := NewVirtualClock(t0)
			s := &vsender{clock: clock}
			h := healthMap{}
			h.Machine("spare").SetDown(tc.down)
			d, err := New(mp, Options{Clock: clock, Sender: s, Health: h})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.SetSpare([]Slot{{Module: "m", Backend: "spare", Batch: 1, Concurrency: 1, Duration: tc.spare}}); err != nil {
				t.Fatal(err)
			}
			tr := newTracker()
			submitAt(t, clock, d, 0, tr.item(time.Time{}), nil) // on a from 0 to 100 ms
			late := tr.item(time.Time{})
			late.Deadline = t0.Add(150 * time.Millisecond) // a: 100–200 ms; the spare: 50 ms + its duration
			submitAt(t, clock, d, 50*time.Millisecond, late, nil)
			clock.Run(t0.Add(time.Second))
			if len(s.batches) != 2 || s.batches[1].slot != tc.wantSlot {
				t.Fatalf("batches %+v; want the second on %s", s.batches, tc.wantSlot)
			}
			if len(tr.times) != 2 || tr.times[1].Sub(t0) != tc.wantEnd {
				t.Errorf("completions at %v; want the second at %v", tr.times, tc.wantEnd)
			}
		})
	}
}

// bySizeSender runs a batch in a time that grows with its size, as a real
// backend (and the sim executor, from the profile) does: 130 ms for one
// item, 320 ms for eight, linear between.
type bySizeSender struct{ clock *VirtualClock }

func (s bySizeSender) Send(b *Batch) {
	n := time.Duration(len(b.Items) + b.Dummies)
	s.clock.AfterFunc(130*time.Millisecond+(n-1)*(190*time.Millisecond)/7, func() { b.Done(nil, nil) })
}

// A partial batch ends sooner than the full batch the machine expects, and
// says nothing of how long a full one takes: it must not lower the group's
// ratio. Under FlushIdle at low load every item goes alone to the idle
// machine (130 ms against the 320 ms planned for 8); after 300 of them,
// Predict on the idle machine is still the full batch's 320 ms. Before, the
// ratio sank towards 0.5 and Predict with it (about 270 ms here), so a
// burst after a quiet spell was admitted and flushed as if a full batch
// took that long (the one-device case's late m3 batches: 5–48 ms late).
func TestPartialBatchesKeepTheRatio(t *testing.T) {
	mp := api.ModulePlan{Name: "m", Rate: 20, BudgetMs: 1000, Configs: []api.GroupPlan{gp(8, 320, 1, 20)}}
	clock := NewVirtualClock(t0)
	d, err := New(mp, Options{Clock: clock, Sender: bySizeSender{clock}, Flush: FlushIdle})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	for i := range 300 {
		submitAt(t, clock, d, time.Duration(i)*400*time.Millisecond, tr.item(time.Time{}), nil)
	}
	clock.Run(t0.Add(121 * time.Second))
	if tr.errs["ok"] != 300 {
		t.Fatalf("completions %v; want 300 ok", tr.errs)
	}
	if got := d.Predict(clock.Now()); got < 320*time.Millisecond {
		t.Errorf("Predict after 300 batches of one = %v; want the full batch's 320ms (a partial batch's speed is not the machine's)", got)
	}
}

// The margin is admission's: with Admission off, HandoffMargin is ignored
// and the machine choice overflows to a spare only what would end late.
// Five items at 0 on one 10 ms machine, budget 40 ms, one spare: the fifth
// (ending at 50 ms) overflows; the fourth, 6 ms inside the margin, does not.
func TestHandoffMarginNeedsAdmission(t *testing.T) {
	for _, tc := range []struct {
		admit bool
		want  uint64
	}{{false, 1}, {true, 2}} {
		mp := api.ModulePlan{Name: "m", Rate: 50, BudgetMs: 40, Configs: []api.GroupPlan{gp(1, 10, 1, 50)}}
		clock := NewVirtualClock(t0)
		d, err := New(mp, Options{Admission: tc.admit, HandoffMargin: 2 * time.Millisecond, Clock: clock, Sender: &vsender{clock: clock}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.SetSpare([]Slot{{Module: "m", Backend: "b1", Batch: 1, Concurrency: 1, Duration: 10 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		tr := newTracker()
		for range 5 {
			if err := d.Submit(tr.item(time.Time{})); err != nil {
				t.Fatal(err)
			}
		}
		clock.Run(t0.Add(time.Second))
		if got := d.Stats().Overflow; got != tc.want {
			t.Errorf("admission %v: %d batches overflowed to the spare, want %d", tc.admit, got, tc.want)
		}
	}
}

// Under a surge, arrivals faster than surgeFactor × the planned rate,
// admission keeps a third of the module's budget (two thirds at its onset) before a queued item's Due
// (marginFor); at about the planned rate, the per-batch margin only, however
// deep the queue. One machine, batch 1, 10 ms, budget 90 ms, HandoffMargin
// 2 ms, an item every 2 ms for 300 ms (500 req/s, five times what the
// machine serves). Planned at 50 req/s that is a surge, known after about
// twenty arrivals and ten times the plan: every item admitted after the
// first 150 ms, in the surge's onset (TestSurgeMarginOnset), ends within
// 30 ms of its arrival. Planned at 400 req/s it is not: the queue stays
// filled to the per-batch margin, and those items take more than 75 ms.
func TestSurgeMarginKeepsTheQueueShort(t *testing.T) {
	for _, tc := range []struct {
		rate   float64
		lo, hi time.Duration // the range the slowest item after 150 ms must take
	}{{50, 20 * time.Millisecond, 30 * time.Millisecond}, {400, 75 * time.Millisecond, 90 * time.Millisecond}} {
		mp := api.ModulePlan{Name: "m", Rate: tc.rate, BudgetMs: 90, Configs: []api.GroupPlan{gp(1, 10, 1, tc.rate)}}
		d, clock := surgeDispatcher(t, mp)
		var most time.Duration
		admitted, ok := 0, 0
		for i := range 150 {
			clock.AfterFunc(time.Duration(i)*2*time.Millisecond, func() {
				it := &Item{Arrival: clock.Now(), Done: func(it *Item) {
					if it.Err == nil {
						ok++
						if it.Arrival.Sub(t0) >= 150*time.Millisecond {
							most = max(most, it.Finished.Sub(it.Arrival))
						}
					}
				}}
				if err := d.Submit(it); err == nil {
					admitted++
				} else if !errors.Is(err, ErrOverloaded) {
					t.Errorf("Submit: %v", err)
				}
			})
		}
		clock.Run(t0.Add(time.Second))
		if ok != admitted {
			t.Errorf("planned %v req/s: %d admitted, %d completed ok", tc.rate, admitted, ok)
		}
		if most < tc.lo || most > tc.hi {
			t.Errorf("planned %v req/s: the slowest item admitted after 150 ms took %v, want %v to %v", tc.rate, most, tc.lo, tc.hi)
		}
		if admitted < 30 {
			t.Errorf("planned %v req/s: %d of 150 admitted, want at least 30 (the machine serves 30 in 300 ms)", tc.rate, admitted)
		}
	}
}

// The onset's margin leaves one batch queued behind the running one: a
// module whose batch (4 items, 35 ms) is long beside its budget (90 ms),
// offered 500 req/s against a plan of 5, keeps its batches full through the
// onset. Two thirds of the budget as margin, uncapped, admits only items
// that start at once or join the batch about to start: 19 in 200 ms of the
// onset, against 22 with the cap (the machine serves 22).
func TestSurgeMarginKeepsTheLaneBusy(t *testing.T) {
	mp := api.ModulePlan{Name: "m", Rate: 5, BudgetMs: 90, Configs: []api.GroupPlan{gp(4, 35, 1, 5)}}
	d, clock := surgeDispatcher(t, mp)
	// The onset: the offered estimate passes 1.5x the plan after about 20
	// items (40 ms) and 3x after about 55 (110 ms); it ends 300 ms after the
	// first. Counted: the items offered from 120 to 320 ms.
	const from, to = 120 * time.Millisecond, 320 * time.Millisecond
	inOnset, late := 0, 0
	for i := range 500 {
		clock.AfterFunc(time.Duration(i)*2*time.Millisecond, func() {
			it := &Item{Arrival: clock.Now(), Deadline: clock.Now().Add(90 * time.Millisecond), Done: func(it *Item) {
				if it.Err != nil || it.Finished.Sub(it.Arrival) > 90*time.Millisecond {
					late++
				}
			}}
			err := d.Submit(it)
			if err != nil && !errors.Is(err, ErrOverloaded) {
				t.Errorf("Submit: %v", err)
			}
			if at := it.Arrival.Sub(t0); err == nil && at >= from && at < to {
				inOnset++
			}
		})
	}
	clock.Run(t0.Add(2 * time.Second))
	t.Logf("%d admitted in the onset's %v, %d late in all", inOnset, to-from, late)
	if inOnset < 21 || late > 0 {
		t.Errorf("%d admitted in the onset's %v, %d late or failed in all; want at least 21 (full batches of 4 every 35 ms: 22; without the cap, 19), none late", inOnset, to-from, late)
	}
}

// Two thirds of the budget are kept over a surge's first 300 ms only (the
// host's stall at its start), a third after: one 10 ms machine, budget
// 90 ms, planned at 50 req/s and offered 500 req/s for 1 s. The offered
// rate's estimate (weight 1/50) passes 1.5x the plan after about 20 items
// (40 ms, the onset's start) and 3x after about 67 (134 ms).
func TestSurgeMarginOnset(t *testing.T) {
	mp := api.ModulePlan{Name: "m", Rate: 50, BudgetMs: 90, Configs: []api.GroupPlan{gp(1, 10, 1, 50)}}
	d, clock := surgeDispatcher(t, mp)
	var onset, after time.Duration // the slowest item admitted in 150–300 ms and in 500–1000 ms
	for i := range 500 {
		clock.AfterFunc(time.Duration(i)*2*time.Millisecond, func() {
			it := &Item{Arrival: clock.Now(), Done: func(it *Item) {
				switch at, took := it.Arrival.Sub(t0), it.Finished.Sub(it.Arrival); {
				case it.Err != nil:
					t.Errorf("item at %v: %v", at, it.Err)
				case at >= 150*time.Millisecond && at < 300*time.Millisecond:
					onset = max(onset, took)
				case at >= 500*time.Millisecond:
					after = max(after, took)
				}
			}}
			if err := d.Submit(it); err != nil && !errors.Is(err, ErrOverloaded) {
				t.Errorf("Submit: %v", err)
			}
		})
	}
	clock.Run(t0.Add(2 * time.Second))
	if onset < 20*time.Millisecond || onset > 30*time.Millisecond || after < 50*time.Millisecond || after > 60*time.Millisecond {
		t.Errorf("slowest item admitted at 150–300 ms took %v, at 500–1000 ms %v; want 20–30 ms (two thirds of 90 ms kept) and 50–60 ms (a third)", onset, after)
	}
}

// surgeDispatcher is the surge margin tests' dispatcher of mp: the idle
// flush, admission with the live gateway's 2 ms handoff margin, on a virtual
// clock at t0.
func surgeDispatcher(t *testing.T, mp api.ModulePlan) (*Dispatcher, *VirtualClock) {
	t.Helper()
	clock := NewVirtualClock(t0)
	d, err := New(mp, Options{Flush: FlushIdle, Admission: true, HandoffMargin: 2 * time.Millisecond, Clock: clock, Sender: &vsender{clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	return d, clock
}
