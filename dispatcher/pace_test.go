package dispatcher

import (
	"errors"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// A machine whose backend runs its batches slower than profiled (its pace,
// MachineHealth.SetPace) is expected so from the next batch: the deadline
// flush sends a partial batch that much earlier, so that it still ends by
// its oldest deadline, and admission refuses an item its pace would finish
// late. A plan made from the calibrated profiles (its planned duration
// already the profile times the pace: Options.Profiled) does not count the
// pace twice.
func TestPaceLeadsFlushAndAdmission(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pace     float64
		profiled time.Duration // Options.Profiled; 0: nil (the planned duration)
		flushAt  time.Duration // when the lone item's batch goes
		admit    bool          // an item due 120 ms after it arrives, on an idle machine
	}{
		{"no pace", 0, 0, 200 * time.Millisecond, true},
		{"pace 1.5, plan from the profile", 1.5, 0, 150 * time.Millisecond, false},
		{"pace 1.5, plan from the profile, given", 1.5, 100 * time.Millisecond, 150 * time.Millisecond, false},
		{"pace 1.5, plan calibrated", 1.5, 100 * time.Millisecond * 2 / 3, 200 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gp(4, 100, 1, 10)
			g.Backends = []string{"a"}
			mp := api.ModulePlan{Name: "m", BudgetMs: 300, Configs: []api.GroupPlan{g}}
			clock := NewVirtualClock(t0)
			s := &vsender{clock: clock}
			h := healthMap{}
			h.Machine("a").SetPace(tc.pace)
			o := Options{Clock: clock, Sender: s, Health: h, Admission: true}
			if tc.profiled > 0 {
				o.Profiled = func(hw string, batch, conc int) time.Duration {
					if hw != "hw" || batch != 4 || conc != 1 {
						t.Errorf("Profiled(%q, %d, %d); want the group's hw, 4, 1", hw, batch, conc)
					}
					return tc.profiled
				}
			}
			d, err := New(mp, o)
			if err != nil {
				t.Fatal(err)
			}
			tr := newTracker()
			submitAt(t, clock, d, 0, tr.item(time.Time{}), nil)
			clock.Run(t0.Add(time.Second))
			if len(s.batches) != 1 || s.batches[0].at != tc.flushAt {
				t.Fatalf("batches %+v; want one at %v", s.batches, tc.flushAt)
			}
			it := tr.item(clock.Now())
			it.Deadline = clock.Now().Add(120 * time.Millisecond)
			err = d.Submit(it)
			if tc.admit != (err == nil) || err != nil && !errors.Is(err, ErrOverloaded) {
				t.Fatalf("Submit of an item due in 120 ms (planned 100 ms): %v; want admitted %v", err, tc.admit)
			}
		})
	}
}

// A full batch goes to the free machine that runs it as planned, not to a
// free one slower by its pace, whatever the rotation; and Predict assumes
// the fast one.
func TestPaceSteersToTheFasterMachine(t *testing.T) {
	g := gp(1, 100, 2, 10)
	g.Backends = []string{"slow", "fast"}
	mp := api.ModulePlan{Name: "m", BudgetMs: 1000, Configs: []api.GroupPlan{g}}
	clock := NewVirtualClock(t0)
	s := &vsender{clock: clock}
	h := healthMap{}
	h.Machine("slow").SetPace(1.6)
	d, err := New(mp, Options{Clock: clock, Sender: s, Health: h, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	if p := d.Predict(clock.Now()); p != 100*time.Millisecond {
		t.Errorf("Predict with both machines idle = %v; want 100ms (the fast one)", p)
	}
	tr := newTracker()
	for i := range 3 { // one at a time: each finds both machines idle
		submitAt(t, clock, d, time.Duration(i)*200*time.Millisecond, tr.item(time.Time{}), nil)
	}
	clock.Run(t0.Add(time.Second))
	if len(s.batches) != 3 {
		t.Fatalf("%d batches sent; want 3", len(s.batches))
	}
	for _, b := range s.batches {
		if b.slot != "m/g0m1(fast)" {
			t.Errorf("batch at %v went to %s; want the fast machine while it is idle", b.at, b.slot)
		}
	}
}

// SetPace keeps a ratio above 1; ≤ 1 clears it.
func TestMachineHealthPace(t *testing.T) {
	var h MachineHealth
	if p := h.Pace(); p != 1 {
		t.Fatalf("no pace set: %v; want 1", p)
	}
	h.SetPace(1.3)
	if p := h.Pace(); p != 1.3 {
		t.Errorf("Pace = %v; want 1.3", p)
	}
	h.SetPace(0.8)
	if p := h.Pace(); p != 1 {
		t.Errorf("after SetPace(0.8): %v; want 1", p)
	}
	var nilH *MachineHealth
	if p := nilH.Pace(); p != 1 {
		t.Errorf("nil: %v; want 1", p)
	}
}

// A batch given to a machine that would end it after its deadline (a free
// machine slowed by its pace) goes to the machine that ends it first
// instead, a busy one that runs as planned; one that meets the deadline
// keeps its machine.
func TestPaceMeetingDeadline(t *testing.T) {
	g := gp(2, 100, 2, 10)
	g.Backends = []string{"slow", "fast"}
	mp := api.ModulePlan{Name: "m", BudgetMs: 1000, Configs: []api.GroupPlan{g}}
	clock := NewVirtualClock(t0)
	var held []*Batch
	h := healthMap{}
	h.Machine("slow").SetPace(1.6)
	d, err := New(mp, Options{Clock: clock, Sender: senderFunc(func(b *Batch) { held = append(held, b) }), Health: h})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	for range 2 {
		if err := d.Submit(tr.item(clock.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if len(held) != 1 || held[0].Slot.Backend != "fast" {
		t.Fatalf("first batch on %v; want the fast machine", held)
	}
	clock.Run(t0.Add(60 * time.Millisecond))
	now := clock.Now()
	d.mu.Lock()
	grp := d.st.groups[0]
	slow, fast := grp.machines[0], grp.machines[1]
	// slow, free: ends at 60+160 = 220 ms; fast, busy to 100: ends at 200 ms.
	grp.next = 0
	got1, _ := grp.choose(now, t0.Add(210*time.Millisecond))
	got2, _ := grp.choose(now, t0.Add(230*time.Millisecond))
	d.mu.Unlock()
	if got1 != fast {
		t.Errorf("deadline 210 ms, slow ends at 220, fast at 200: gave %s; want fast", got1.slot.Backend)
	}
	if got2 != slow {
		t.Errorf("deadline 230 ms, slow ends at 220: gave %s; want slow (it meets it)", got2.slot.Backend)
	}
	for _, b := range held {
		b.Done(nil, nil)
	}
}

// stragglerSender runs each batch for its slot's duration, times factor on the
// backend slow: a device as slow as its MachineHealth says.
type stragglerSender struct {
	clock  *VirtualClock
	slow   string
	factor float64
	sent   []sentBatch
	ended  map[*Item]time.Time
}

func (s *stragglerSender) Send(b *Batch) {
	s.sent = append(s.sent, sentBatch{at: s.clock.Now().Sub(t0), slot: b.Slot.Backend, items: len(b.Items)})
	du := b.Slot.Duration
	if b.Slot.Backend == s.slow {
		du = time.Duration(float64(du) * s.factor)
	}
	items := append([]*Item(nil), b.Items...)
	s.clock.AfterFunc(du, func() {
		for _, it := range items {
			s.ended[it] = s.clock.Now()
		}
		b.Done(nil, nil)
	})
}

// A group of a straggler (slowness 1.6, its pace unknown) and a fast machine,
// the fast one busy: the deadline flush times a lone item's batch by the
// machine that ends it first as the lanes stand (the straggler, free, 160
// ms), so the batch ends by its deadline; before, the flush led by the
// planned duration (a straggler's pace counted as 1), sent it at 80 ms,
// found the straggler ending it at 240 ms and the fast machine, free at
// 100 ms, at 200 ms: 20 ms late. Admission reads the same end: an item due
// sooner than the straggler ends it is refused.
func TestFlushTimesTheMachineThatEndsFirst(t *testing.T) {
	g := gp(4, 100, 2, 10)
	g.Backends = []string{"slow", "fast"}
	mp := api.ModulePlan{Name: "m", BudgetMs: 1000, Configs: []api.GroupPlan{g}}
	clock := NewVirtualClock(t0)
	s := &stragglerSender{clock: clock, slow: "slow", factor: 1.6, ended: map[*Item]time.Time{}}
	h := healthMap{}
	h.Machine("slow").SetSlowness(1.6)
	d, err := New(mp, Options{Clock: clock, Sender: s, Health: h, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	for range 4 { // a full batch: the fast machine, busy to 100 ms
		if err := d.Submit(tr.item(clock.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.sent) != 1 || s.sent[0].slot != "fast" {
		t.Fatalf("full batch sent %+v; want it on the fast machine", s.sent)
	}
	late := tr.item(clock.Now())
	late.Deadline = t0.Add(150 * time.Millisecond)
	if err := d.Submit(late); !errors.Is(err, ErrOverloaded) {
		t.Errorf("an item due at 150 ms (the straggler ends at 160, the fast machine at 200): %v; want refused", err)
	}
	x := tr.item(clock.Now())
	x.Deadline = t0.Add(180 * time.Millisecond)
	if err := d.Submit(x); err != nil {
		t.Fatalf("an item due at 180 ms (the straggler, free, ends it at 160): %v; want admitted", err)
	}
	clock.Run(t0.Add(time.Second))
	if len(s.sent) != 2 {
		t.Fatalf("sent %+v; want the full batch and x's", s.sent)
	}
	end, ok := s.ended[x]
	if !ok || end.After(x.Deadline) {
		t.Errorf("x's batch %+v ended at %v; want by its deadline, 180ms", s.sent[1], end.Sub(t0))
	}
}
