package dispatcher

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// With Options.Locality a batch goes to the free machine on its items'
// Home, not the next in rotation; when that machine is busy, the choice is
// the one machine choice's (never a queue behind the home); without
// Locality, Home changes nothing.
func TestLocalityPrefersTheFreeHome(t *testing.T) {
	for _, local := range []bool{false, true} {
		clock := NewVirtualClock(t0)
		s := &vsender{clock: clock}
		g := gp(1, 10, 3, 150)
		g.Backends = []string{"d0", "d1", "d2"}
		d, err := New(api.ModulePlan{Name: "m", Rate: 150, BudgetMs: 60, Configs: []api.GroupPlan{g}},
			Options{Clock: clock, Sender: s, Locality: local})
		if err != nil {
			t.Fatal(err)
		}
		for range 4 { // one at a time: the home is free each time
			if err := d.Submit(&Item{Home: "d2", Done: func(*Item) {}}); err != nil {
				t.Fatal(err)
			}
			clock.Run(clock.Now().Add(20 * time.Millisecond))
		}
		// Two at once: the second finds its home busy.
		for range 2 {
			if err := d.Submit(&Item{Home: "d2", Done: func(*Item) {}}); err != nil {
				t.Fatal(err)
			}
		}
		clock.Run(clock.Now().Add(50 * time.Millisecond))
		var on []string
		for _, b := range s.batches {
			on = append(on, b.slot[strings.Index(b.slot, "(")+1:len(b.slot)-1])
		}
		got := strings.Join(on, " ")
		want := "d0 d1 d2 d0 d1 d2"
		if local {
			want = "d2 d2 d2 d2 d2 d0"
		}
		if got != want {
			t.Errorf("locality %v: batches went to %s; want %s", local, got, want)
		}
		if st := d.Stats(); local && st.Local != 5 || !local && st.Local != 0 {
			t.Errorf("locality %v: Stats.Local %d", local, st.Local)
		}
	}
}

// A batch's home is the one most of its items name.
func TestBatchHomeIsTheMajority(t *testing.T) {
	for _, tc := range []struct {
		homes []string
		want  string
	}{
		{nil, ""},
		{[]string{"", ""}, ""},
		{[]string{"a", "b", "b"}, "b"},
		{[]string{"a", "", "b", "a"}, "a"},
		{[]string{"a", "b", "c", "d", "e", "e", "e"}, "a"}, // a fifth home is not counted
	} {
		b := &Batch{}
		for _, h := range tc.homes {
			b.Items = append(b.Items, &Item{Home: h})
		}
		if got := b.home(); got != tc.want {
			t.Errorf("homes %q: home %q; want %q", tc.homes, got, tc.want)
		}
	}
}
