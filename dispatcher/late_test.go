package dispatcher

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Late commit (Llama's, per batch): a module planned as two groups, a cheap
// slow one (30 ms a batch, price 1) that the plan sends nine batches in ten
// to, and a dear fast one (10 ms, price 3); budget 35 ms, admission on,
// three items at once. The first goes to the slow machine and ends at
// 30 ms; the second, also dealt to the slow group, would end at 60 ms
// there. Without late commit admission refuses it and the fast machine
// stays idle; with it, it goes to the fast machine, idle, and ends at 10
// ms. The third finds both busy and is refused either way.
func TestLateCommitTakesAnotherGroupsIdleMachine(t *testing.T) {
	plan := func() api.ModulePlan {
		slow, fast := gp(1, 30, 1, 90), gp(1, 10, 1, 10)
		slow.Price, fast.Price = 1, 3
		slow.Backends, fast.Backends = []string{"slow"}, []string{"fast"}
		return api.ModulePlan{Name: "m", Rate: 100, BudgetMs: 35, Configs: []api.GroupPlan{slow, fast}}
	}
	for _, tc := range []struct {
		late       bool
		wantOK     int
		wantSlots  string
		wantLate   uint64
		wantRefuse int
	}{
		{false, 1, "m/g0m0(slow)", 0, 2},
		{true, 2, "m/g0m0(slow) m/g1m0(fast)", 1, 1},
	} {
		t.Run(fmt.Sprintf("late-commit=%v", tc.late), func(t *testing.T) {
			clock := NewVirtualClock(t0)
			s := &vsender{clock: clock}
			d, err := New(plan(), Options{Admission: true, LateCommit: tc.late, Clock: clock, Sender: s})
			if err != nil {
				t.Fatal(err)
			}
			tr := newTracker()
			refused := 0
			for range 3 {
				switch err := d.Submit(tr.item(time.Time{})); {
				case errors.Is(err, ErrOverloaded):
					refused++
				case err != nil:
					t.Fatal(err)
				}
			}
			clock.Run(t0.Add(time.Second))
			var slots []string
			for _, b := range s.batches {
				slots = append(slots, b.slot)
			}
			st := d.Stats()
			if tr.errs["ok"] != tc.wantOK || refused != tc.wantRefuse || strings.Join(slots, " ") != tc.wantSlots || st.LateCommitted != tc.wantLate {
				t.Errorf("ok %d, refused %d, batches to %v, late-committed %d; want %d, %d, %s, %d",
					tr.errs["ok"], refused, slots, st.LateCommitted, tc.wantOK, tc.wantRefuse, tc.wantSlots, tc.wantLate)
			}
			for _, at := range tr.times {
				if at.Sub(t0) > 35*time.Millisecond {
					t.Errorf("an item finished at %v, after its 35 ms budget", at.Sub(t0))
				}
			}
		})
	}
}

// Late commit does not take a machine from its own group's batch: with RR
// (a stream per machine), the fast machine (20 ms, batches of 2) holds an
// open batch of one item, due at 35 ms, which must start by 15 ms. A late
// item dealt to the busy slow machine would end at 20 ms on the fast one,
// after that: it is refused, and every admitted item ends in time. (Moved,
// it would have pushed the open batch to end at 40 ms.)
func TestLateCommitKeepsTheOtherGroupsPromise(t *testing.T) {
	slow, fast := gp(1, 30, 1, 70), gp(2, 20, 1, 30)
	slow.Backends, fast.Backends = []string{"slow"}, []string{"fast"}
	mp := api.ModulePlan{Name: "m", Rate: 100, BudgetMs: 35, Configs: []api.GroupPlan{slow, fast}}
	clock := NewVirtualClock(t0)
	s := &vsender{clock: clock}
	d, err := New(mp, Options{Policy: RR{}, Admission: true, LateCommit: true, Clock: clock, Sender: s})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	var got []string // per item, in order: dealt slow, fast, slow
	for range 3 {
		switch err := d.Submit(tr.item(time.Time{})); {
		case errors.Is(err, ErrOverloaded):
			got = append(got, "refused")
		case err != nil:
			t.Fatal(err)
		default:
			got = append(got, "admitted")
		}
	}
	clock.Run(t0.Add(time.Second))
	if want := "admitted admitted refused"; strings.Join(got, " ") != want || tr.errs["ok"] != 2 || d.Stats().LateCommitted != 0 {
		t.Errorf("items %v, %d ok, late-committed %d; want %s, 2 ok, none late-committed", got, tr.errs["ok"], d.Stats().LateCommitted, want)
	}
	for _, at := range tr.times {
		if at.Sub(t0) > 35*time.Millisecond {
			t.Errorf("an item finished at %v, after its 35 ms budget", at.Sub(t0))
		}
	}
}
