package dispatcher

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// jitterSender runs each batch on a one-lane backend, FIFO across every
// module sent there, for its slot's duration times a factor drawn in
// [0.7, 1.6): batches end early and late, so lanes, devices and the
// groups' measured ratios keep moving.
type jitterSender struct {
	clock *VirtualClock
	rng   *rand.Rand
	free  map[string]time.Time
}

func (s *jitterSender) Send(b *Batch) {
	now := s.clock.Now()
	start := maxTime(s.free[b.Slot.Backend], now)
	du := time.Duration(float64(b.Slot.Duration) * (0.7 + 0.9*s.rng.Float64()))
	s.free[b.Slot.Backend] = start.Add(du)
	s.clock.AfterFunc(start.Add(du).Sub(now), func() { b.Done(nil, nil) })
}

// holder returns the machine whose running or queued batches hold it.
func (d *Dispatcher) holder(it *Item) *machine {
	for _, ms := range [2][]*machine{d.st.machines, d.spare} {
		for _, m := range ms {
			for _, b := range m.running {
				for _, x := range b.Items {
					if x == it {
						return m
					}
				}
			}
			for k := range m.pending.len() {
				for _, x := range m.pending.at(k).Items {
					if x == it {
						return m
					}
				}
			}
		}
	}
	return nil
}

// Predict's machine is the machine the batch is dispatched to, whatever the
// lanes, devices, paces, stragglers, ejected backends and spare machines:
// one machine choice (Dispatcher.target) serves Predict, admission, the
// deadline flush and dispatch. Batch-1 groups, so every Submit dispatches
// its item at once; a second module on two of the backends keeps their
// devices busy at times; health moves between arrivals. Under TC and RR,
// with and without admission.
func TestPredictedMachineIsTheMachineDispatched(t *testing.T) {
	for _, tc := range []struct {
		name   string
		p      Policy
		admit  bool
		spares bool
	}{
		{"tc", TC{}, false, false}, {"tc/admission", TC{}, true, false}, {"tc/admission/spares", TC{}, true, true},
		{"rr", RR{}, false, false}, {"rr/admission/spares", RR{}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			clock := NewVirtualClock(t0)
			s := &jitterSender{clock: clock, rng: rng, free: map[string]time.Time{}}
			h, devs := healthMap{}, &Devices{}
			a := gp(1, 10, 3, 150)
			a.Concurrency = 2
			a.Backends = []string{"d0", "d1", "d1"} // two machines stacked on d1
			b := gp(1, 6, 2, 150)
			b.Backends = []string{"d2", "d3"}
			mp := api.ModulePlan{Name: "m", Rate: 300, BudgetMs: 60, Configs: []api.GroupPlan{a, b}}
			d, err := New(mp, Options{Policy: tc.p, Admission: tc.admit, Clock: clock, Sender: s, Health: h, Devices: devs})
			if err != nil {
				t.Fatal(err)
			}
			if tc.spares {
				if err := d.SetSpare([]Slot{{Module: "m", Backend: "s0", Batch: 1, Concurrency: 1, Duration: 8 * time.Millisecond}}); err != nil {
					t.Fatal(err)
				}
			}
			og := gp(1, 15, 2, 50)
			og.Backends = []string{"d0", "d2"}
			other, err := New(api.ModulePlan{Name: "o", Rate: 50, BudgetMs: 200, Configs: []api.GroupPlan{og}},
				Options{Clock: clock, Sender: s, Health: h, Devices: devs})
			if err != nil {
				t.Fatal(err)
			}
			backends := []string{"d0", "d1", "d2", "d3", "s0"}
			checked, moved := 0, 0
			for i := range 3000 {
				clock.Run(clock.Now().Add(time.Duration(rng.IntN(6000)) * time.Microsecond))
				switch r := rng.IntN(40); {
				case r == 0: // a backend turns slow, or back
					h.Machine(backends[rng.IntN(len(backends))]).SetPace([]float64{1, 1.3, 1.8}[rng.IntN(3)])
				case r == 1:
					h.Machine(backends[rng.IntN(len(backends))]).SetSlowness([]float64{1, 1.6}[rng.IntN(2)])
				case r == 2: // ejected, or back
					h.Machine(backends[rng.IntN(4)]).SetDown(rng.IntN(3) == 0)
				case r < 12:
					if err := other.Submit(&Item{Done: func(*Item) {}}); err != nil {
						t.Fatal(err)
					}
				}
				now := clock.Now()
				it := &Item{Arrival: now, Done: func(*Item) {}, Deadline: now.Add(time.Duration(10+rng.IntN(60)) * time.Millisecond)}
				slot, _ := d.predictMachine(now, it)
				err := d.Submit(it)
				if errors.Is(err, ErrOverloaded) {
					continue
				}
				if err != nil {
					t.Fatalf("arrival %d: %v", i, err)
				}
				d.mu.Lock()
				m := d.holder(it)
				d.mu.Unlock()
				if m == nil { // sent and done already: its batch ended at once
					continue
				}
				checked++
				if m.slot.Backend != slot.Backend || m.slot.Group != slot.Group || m.slot.Machine != slot.Machine {
					t.Fatalf("arrival %d at %v: Predict assumed %s, the batch went to %s", i, now.Sub(t0), slot, &m.slot)
				}
				if m.slot.Group < 0 || m.slot.Machine != 0 {
					moved++
				}
			}
			if checked < 800 {
				t.Errorf("checked %d arrivals; want most of 3000", checked)
			}
			t.Logf("%d arrivals checked, %d not on their group's first machine", checked, moved)
		})
	}
}
