package dispatcher

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// healthMap is a HealthTable over a map, one MachineHealth per backend id.
type healthMap map[string]*MachineHealth

func (h healthMap) Machine(id string) *MachineHealth {
	if h[id] == nil {
		h[id] = &MachineHealth{}
	}
	return h[id]
}

func placedPlan() api.ModulePlan {
	g := gp(2, 10, 2, 100)
	g.Backends = []string{"a", "b"}
	return api.ModulePlan{Name: "m", BudgetMs: 100, Configs: []api.GroupPlan{g}}
}

// A down backend's machine is never chosen, under TC and RR, and its queued
// batches move when Reroute is called; once up, it serves again.
func TestDownMachineIsSkipped(t *testing.T) {
	for _, p := range []Policy{TC{}, RR{}} {
		t.Run(p.Name(), func(t *testing.T) {
			clock := NewVirtualClock(t0)
			s := &vsender{clock: clock}
			h := healthMap{}
			d, err := New(placedPlan(), Options{Policy: p, Clock: clock, Sender: s, Health: h})
			if err != nil {
				t.Fatal(err)
			}
			tr := newTracker()
			h.Machine("a").SetDown(true)
			for i := range 40 {
				submitAt(t, clock, d, time.Duration(i)*10*time.Millisecond, tr.item(time.Time{}), nil)
			}
			clock.Run(t0.Add(time.Second))
			for _, b := range s.batches {
				if strings.Contains(b.slot, "(a)") {
					t.Fatalf("batch sent to down backend a: %+v", b)
				}
			}
			if tr.errs["ok"] != 40 {
				t.Fatalf("outcomes %v; want 40 ok", tr.errs)
			}
			h.Machine("a").SetDown(false)
			s.batches = nil
			for i := range 40 {
				submitAt(t, clock, d, time.Second+time.Duration(i)*10*time.Millisecond, tr.item(time.Time{}), nil)
			}
			clock.Run(t0.Add(2 * time.Second))
			onA := 0
			for _, b := range s.batches {
				if strings.Contains(b.slot, "(a)") {
					onA++
				}
			}
			if onA == 0 {
				t.Fatalf("backend a back up but sent no batch: %+v", s.batches)
			}
		})
	}
}

// Batches queued on a machine that goes down move to the others.
func TestRerouteMovesQueuedBatches(t *testing.T) {
	clock := NewVirtualClock(t0)
	var held []*Batch
	h := healthMap{}
	d, err := New(placedPlan(), Options{Clock: clock, Sender: senderFunc(func(b *Batch) { held = append(held, b) }), Health: h})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	for range 8 { // 4 batches of 2 on 2 machines of 1 lane: 2 run, 2 queue
		if err := d.Submit(tr.item(time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	if len(held) != 2 {
		t.Fatalf("%d batches sent; want 2 (one a machine)", len(held))
	}
	h.Machine("a").SetDown(true)
	if n := d.Reroute(); n != 1 {
		t.Fatalf("Reroute moved %d batches; want 1", n)
	}
	for i := 0; i < len(held); i++ { // finish everything, as the Sender would
		held[i].Done(nil, nil)
	}
	if tr.errs["ok"] != 8 {
		t.Fatalf("outcomes %v; want 8 ok", tr.errs)
	}
	if s, ok := d.Alternate(&Slot{Group: 0}, 2, "b"); ok {
		t.Fatalf("Alternate without b gave %v; want none (a is down)", s.String())
	}
	if s, ok := d.Alternate(&Slot{Group: 0}, 2, "a"); !ok || s.Backend != "b" {
		t.Fatalf("Alternate = %v, %v; want b", s.String(), ok)
	}
}

type senderFunc func(*Batch)

func (f senderFunc) Send(b *Batch) { f(b) }
