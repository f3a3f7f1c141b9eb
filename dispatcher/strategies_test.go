package dispatcher

import (
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
		{"idle", []sentBatch{{at: 30 * time.Millisecond, items: 4, slot: "m/g1"}}},
		{"eager", []sentBatch{{at: 0, items: 1, slot: "m/g1"}, {at: 100 * time.Millisecond, items: 3, slot: "m/g1"}}},
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
			fourItems(t, mp, p, f, c.want)
		})
	}
}
