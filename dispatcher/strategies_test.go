package dispatcher

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// eagerFlush is a flush rule from outside the built-in registry: any idle
// machine takes the open batch at once, whatever the load.
type eagerFlush struct{}

var _ Flush = eagerFlush{}

func (eagerFlush) Name() string                { return "eager" }
func (eagerFlush) Early() bool                 { return true }
func (eagerFlush) NeededGap(FlushView) float64 { return 0 }

// lastGroup is a dispatch policy from outside the built-in registry: one
// shared stream whose batches are all for the last group, and no Peeker.
type lastGroup struct{}

var _ Policy = lastGroup{}

func (lastGroup) Name() string              { return "last" }
func (lastGroup) NewRouter(t *Table) Router { return lastRouter(len(t.Groups) - 1) }

type lastRouter int

func (lastRouter) Streams() []int { return []int{-1} }
func (lastRouter) Join() int      { return 0 }
func (r lastRouter) Open(int) int { return int(r) }

// TestOutsideStrategies registers a flush rule and a dispatch policy beside
// the built-in ones, chooses them by name as main does with --flush and
// --dispatch, and checks that the dispatcher runs them: under the plan's
// 1010 req/s FlushIdle holds a lone item for its batch-mates (the machine
// would run over 80% busy with batches of one), "eager" sends it at once; and
// every batch goes to the last group. Four items come 10 ms apart.
func TestOutsideStrategies(t *testing.T) {
	flushes, err := BuiltinFlushes().With(eagerFlush{})
	if err != nil {
		t.Fatal(err)
	}
	policies, err := Builtin().With(lastGroup{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := BuiltinFlushes().Lookup("eager"); err == nil {
		t.Fatal("the built-in registry has eager")
	}
	mp := api.ModulePlan{Name: "m", Rate: 1010, BudgetMs: 300, Configs: []api.GroupPlan{gp(4, 100, 1, 10), gp(4, 100, 1, 1000)}}
	for _, c := range []struct {
		flush string
		want  []sentBatch
	}{
		{"idle", []sentBatch{{at: 30 * time.Millisecond, items: 4}}},
		{"eager", []sentBatch{{at: 0, items: 1}, {at: 100 * time.Millisecond, items: 3}}},
	} {
		t.Run(c.flush, func(t *testing.T) {
			f, err := flushes.Lookup(c.flush)
			if err != nil {
				t.Fatal(err)
			}
			p, err := policies.Lookup("last")
			if err != nil {
				t.Fatal(err)
			}
			clock := NewVirtualClock(t0)
			s := &vsender{clock: clock}
			d, err := New(mp, Options{Policy: p, Flush: f, Clock: clock, Sender: s})
			if err != nil {
				t.Fatal(err)
			}
			tr := newTracker()
			for i := range 4 {
				submitAt(t, clock, d, time.Duration(i)*10*time.Millisecond, tr.item(time.Time{}), nil)
			}
			clock.Run(t0.Add(time.Second))
			if len(s.batches) != len(c.want) {
				t.Fatalf("batches %+v, want %+v", s.batches, c.want)
			}
			for i, w := range c.want {
				if g := s.batches[i]; g.at != w.at || g.items != w.items || !strings.HasPrefix(g.slot, "m/g1") {
					t.Errorf("batch %d: %d items at %v on %s, want %d at %v on the last group (m/g1…)", i, g.items, g.at, g.slot, w.items, w.at)
				}
			}
		})
	}
}
