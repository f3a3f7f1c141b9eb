package dispatcher

import (
	"github.com/piccolo-serving/piccolo/internal/registry"
)

// Policy is a dispatch policy (§III-B): how a module's arrivals are grouped
// into open batches and which config group each batch is filled for. The
// dispatcher core (batching, deadline and idle flush, lanes, dummies, plan
// swap) is the same under every policy; a Policy only routes.
//
// A Policy is an immutable value chosen by name from a Registry (the
// --dispatch flag); New and SetPlan call NewRouter once per plan, from the
// caller's goroutine, never on the request path. Adding a policy is adding a
// type that implements Policy and listing it in the Registry that main builds.
// (The shape follows grpc-go's balancer builders and pickers: a named builder
// makes per-state routing that is rebuilt, never patched, when the state
// changes.)
type Policy interface {
	// Name is the name users choose the policy by, e.g. "tc" (--dispatch):
	// lower case, unique within a Registry.
	Name() string
	// NewRouter returns the routing state for one plan's table.
	NewRouter(t *Table) Router
}

// Router routes the arrivals of one plan of one module. The dispatcher calls
// its methods with the module's lock held, one call at a time; Join and Open
// run per request or per batch, so they must not block or allocate.
type Router interface {
	// Streams returns the module's open-batch streams, called once after
	// NewRouter: one entry per stream, the index in Table.Machines of the
	// machine every batch of the stream goes to, or -1 when the stream's
	// batches go to the machines of the group Open chooses (in rotation, to
	// a free lane first). A machine may own at most one stream.
	Streams() []int
	// Join returns the stream (an index into Streams) that the next arrival,
	// an item or a dummy, joins.
	Join() int
	// Open returns the group (an index into Table.Groups) that a batch
	// opening on stream s, a stream of no fixed machine, is filled for: the
	// batch's target size is that group's batch size.
	Open(s int) int
}

// Peeker is the optional half of a Router's contract: a Router that can say,
// without moving on, what Join and Open would return next. Predict (and so
// Options.Admission and the gateway's estimate) then predicts for the very
// stream and group the next arrival would join; for a Router that is no
// Peeker it predicts for the group that would complete an item soonest, which
// can admit an item its batch's group will serve late. TC's and RR's routers
// are Peekers. Called like Join and Open: with the module's lock held, per
// request; no blocking, no allocation.
type Peeker interface {
	// PeekJoin returns what Join would return now.
	PeekJoin() int
	// PeekOpen returns what Open(s) would return now.
	PeekOpen(s int) int
}

// Table is one plan of one module as a Policy sees it. Immutable.
type Table struct {
	// Groups are the config groups in throughput-cost rank order.
	Groups []TableGroup
	// Machines are the plan's machines in rank order (Dispatcher.Slots).
	Machines []TableMachine
}

// TableGroup is one config group of a Table.
type TableGroup struct {
	Batch int
	// BatchRate is the group's planned batch rate, batches/s (its rate over its
	// batch size; its capacity when the plan gives no rate). Always > 0.
	BatchRate float64
}

// TableMachine is one machine of a Table.
type TableMachine struct {
	// Group is the machine's index in Table.Groups.
	Group int
	// Rate is the machine's planned request rate, req/s (dummies included; its
	// capacity when the plan gives no rate). Always > 0.
	Rate float64
}

// TC is throughput-cost dispatch, the default: the module keeps one open
// batch, filled from its whole arrival stream; the group that receives it is
// chosen when it opens, by smooth weighted round-robin over groups with
// weight = planned batch rate, ties to the better throughput-cost rank. Each
// group's long-run share is thus its planned rate (Theorem 1's assumption).
type TC struct{}

var _ Policy = (*TC)(nil)

// Name returns "tc".
func (TC) Name() string { return "tc" }

// NewRouter returns TC's router over t's groups.
func (TC) NewRouter(t *Table) Router {
	w := make([]float64, len(t.Groups))
	for i, g := range t.Groups {
		w[i] = g.BatchRate
	}
	return &tcRouter{groups: newSWRR(w)}
}

type tcRouter struct{ groups swrr }

func (*tcRouter) Streams() []int { return []int{-1} }
func (*tcRouter) Join() int      { return 0 }
func (r *tcRouter) Open(int) int { return r.groups.next() }

var _ Peeker = (*tcRouter)(nil)

func (*tcRouter) PeekJoin() int      { return 0 }
func (r *tcRouter) PeekOpen(int) int { return r.groups.peek() }

// RR is per-item round-robin over machines, weighted by planned rate: each
// machine batches its own items to its group's batch size. This is the
// dispatch of Nexus, InferLine and Clipper, whose worst case the paper puts at
// 2d (Fig. 3, bottom): the baseline.
type RR struct{}

var _ Policy = (*RR)(nil)

// Name returns "rr".
func (RR) Name() string { return "rr" }

// NewRouter returns RR's router: one stream per machine, items dealt by
// smooth weighted round-robin over the machines' planned rates.
func (RR) NewRouter(t *Table) Router {
	w := make([]float64, len(t.Machines))
	streams := make([]int, len(t.Machines))
	for i, m := range t.Machines {
		w[i], streams[i] = m.Rate, i
	}
	return &rrRouter{streams: streams, machines: newSWRR(w)}
}

type rrRouter struct {
	streams  []int
	machines swrr
}

func (r *rrRouter) Streams() []int { return r.streams }
func (r *rrRouter) Join() int      { return r.machines.next() }
func (r *rrRouter) Open(int) int   { return 0 } // never called: every stream has its machine

var _ Peeker = (*rrRouter)(nil)

func (r *rrRouter) PeekJoin() int  { return r.machines.peek() }
func (*rrRouter) PeekOpen(int) int { return 0 }

// swrr is smooth weighted round-robin (nginx's): each pick adds every choice's
// weight to its current value, takes the largest (ties to the lowest index)
// and takes the sum of the weights off it. Choice i's long-run share is w_i/Σw,
// spread as evenly as the weights allow. Written here, not taken from a
// library, because it runs under the dispatcher's lock per item and must not
// allocate, and the one in grpc-go (balancer/weightedroundrobin's scheduler)
// is unexported.
type swrr struct {
	weight, cur []float64
	sum         float64
}

func newSWRR(weights []float64) swrr {
	s := swrr{weight: weights, cur: make([]float64, len(weights))}
	for _, w := range weights {
		s.sum += w
	}
	return s
}

// next returns the index of the next choice.
func (s *swrr) next() int {
	if len(s.weight) == 1 {
		return 0
	}
	best := 0
	for i, w := range s.weight {
		s.cur[i] += w
		if s.cur[i] > s.cur[best] {
			best = i
		}
	}
	s.cur[best] -= s.sum
	return best
}

// peek returns what next would return, without moving on.
func (s *swrr) peek() int {
	best := 0
	for i, w := range s.weight {
		if s.cur[i]+w > s.cur[best]+s.weight[best] {
			best = i
		}
	}
	return best
}

// Registry holds the dispatch policies users may choose, by name (the
// --dispatch flag): a registry.Registry, the one shape of every strategy
// registry. Build one in main with every policy offered (NewRegistry, or
// Builtin().With); it is immutable after.
type Registry = registry.Registry[Policy]

// NewRegistry returns a registry of policies, listed (Names, error messages)
// in the order given: put the default first. A nil policy, an empty name or
// two policies of one name is an error naming it.
func NewRegistry(policies ...Policy) (*Registry, error) {
	return registry.New("dispatch policy", "dispatch policies", policies...)
}

// Builtin returns a registry of the policies this package defines, TC and RR.
func Builtin() *Registry {
	return registry.Must(NewRegistry(TC{}, RR{})) // two constant, distinct names (TestRegistry)
}

// Policies lists the built-in policies' names, comma separated, for flag help.
var Policies = Builtin().String()

// ParsePolicy returns the built-in policy called name (Builtin().Lookup): the
// parser of the --dispatch flag.
func ParsePolicy(name string) (Policy, error) { return Builtin().Lookup(name) }
