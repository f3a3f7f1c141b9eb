package dispatcher

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/piccolo-serving/piccolo/api"
)

// badPolicy routes its one stream to a machine no plan of the tests has.
type badPolicy struct{}

var _ Policy = (*badPolicy)(nil)

func (badPolicy) Name() string            { return "bad" }
func (badPolicy) NewRouter(*Table) Router { return badRouter{} }

type badRouter struct{}

func (badRouter) Streams() []int { return []int{7} }
func (badRouter) Join() int      { return 0 }
func (badRouter) Open(int) int   { return 0 }

func TestRegistry(t *testing.T) {
	r := Builtin()
	if diff := cmp.Diff([]string{"tc", "rr"}, r.Names()); diff != "" {
		t.Errorf("Builtin().Names() (-want +got):\n%s", diff)
	}
	for _, name := range []string{"tc", "rr"} {
		p, err := r.Lookup(name)
		if err != nil || p.Name() != name {
			t.Errorf("Lookup(%q) = %v, %v", name, p, err)
		}
	}
	_, err := r.Lookup("fifo")
	if err == nil || !strings.Contains(err.Error(), `unknown dispatch policy "fifo"; allowed: tc, rr`) {
		t.Errorf("Lookup(fifo) = %v, want an error naming the allowed policies", err)
	}
	if p, err := ParsePolicy("rr"); err != nil || p != (RR{}) {
		t.Errorf("ParsePolicy(rr) = %v, %v", p, err)
	}
	if Policies != "tc, rr" {
		t.Errorf("Policies = %q", Policies)
	}

	for _, tc := range []struct {
		name     string
		policies []Policy
		want     string
	}{
		{"duplicate", []Policy{TC{}, RR{}, TC{}}, `two dispatch policies are called "tc"`},
		{"nil", []Policy{TC{}, nil}, "dispatch policy 1 is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewRegistry(tc.policies...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewRegistry = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	r, err = NewRegistry(TC{}, badPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := r.Lookup("bad"); err != nil || p != (badPolicy{}) {
		t.Errorf("a registry built by the caller: Lookup(bad) = %v, %v", p, err)
	}
}

// TestSWRR: smooth weighted round-robin spreads the choices (5:1:1 gives
// a a b a c a a, nginx's example) and gives each its weight's share.
func TestSWRR(t *testing.T) {
	s := newSWRR([]float64{5, 1, 1})
	var got []int
	for range 7 {
		got = append(got, s.next())
	}
	if diff := cmp.Diff([]int{0, 0, 1, 0, 2, 0, 0}, got); diff != "" {
		t.Errorf("picks (-want +got):\n%s", diff)
	}
	s = newSWRR([]float64{0.3, 0.7})
	n := [2]int{}
	for range 1000 {
		n[s.next()]++
	}
	if n != [2]int{300, 700} {
		t.Errorf("0.3:0.7 over 1000 picks = %v, want [300 700]", n)
	}
}

// bestOnly is a policy the dispatcher core knows nothing about: one shared
// stream whose batches all go to the best-ranked group. It shows that a policy
// is added by writing a type, not by editing the core.
type bestOnly struct{}

var _ Policy = (*bestOnly)(nil)

func (bestOnly) Name() string            { return "best-only" }
func (bestOnly) NewRouter(*Table) Router { return bestOnlyRouter{} }

type bestOnlyRouter struct{}

func (bestOnlyRouter) Streams() []int { return []int{-1} }
func (bestOnlyRouter) Join() int      { return 0 }
func (bestOnlyRouter) Open(int) int   { return 0 }

func TestPolicyFromOutsideTheCore(t *testing.T) {
	r, err := NewRegistry(TC{}, RR{}, bestOnly{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Lookup("best-only")
	if err != nil {
		t.Fatal(err)
	}
	// Two groups of batch 2; TC would alternate between them, best-only never
	// leaves group 0 (its two machines take turns).
	mp := api.ModulePlan{Name: "m", Rate: 40, BudgetMs: 1000, Configs: []api.GroupPlan{gp(2, 10, 2, 20), gp(2, 10, 1, 20)}}
	for _, tc := range []struct {
		policy Policy
		want   map[string]int // batches per slot
	}{
		{p, map[string]int{"m/g0m0": 2, "m/g0m1": 2}},
		{TC{}, map[string]int{"m/g0m0": 1, "m/g0m1": 1, "m/g1m0": 2}},
	} {
		t.Run(tc.policy.Name(), func(t *testing.T) {
			d, clock, s := newVirtual(t, mp, tc.policy)
			tr := newTracker()
			for i := range 8 {
				submitAt(t, clock, d, time.Duration(i)*time.Millisecond, tr.item(time.Time{}), nil)
			}
			clock.Run(t0.Add(time.Second))
			got := map[string]int{}
			for _, b := range s.batches {
				got[b.slot]++
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("batches per slot (-want +got):\n%s", diff)
			}
			if tr.errs["ok"] != 8 {
				t.Errorf("completions %v, want 8 ok", tr.errs)
			}
		})
	}
}
