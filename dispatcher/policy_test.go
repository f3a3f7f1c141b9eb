package dispatcher

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
