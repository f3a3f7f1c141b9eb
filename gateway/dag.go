package gateway

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// BranchOutput is the name of the output tensor by which a module chooses which of
// its children run (paper §III-A: a DAG whose edges carry only part of the rate).
// Its elements are INT32 or INT64 indexes into the module's children (in the order
// the session lists its modules) or BYTES naming children; every element chooses one
// child, and children not chosen are skipped. A module without this output runs all
// its children. The branch tensor is consumed: children do not receive it. A sink
// module's "branch" output is an ordinary output.
const BranchOutput = "branch"

// maxChildren bounds a module's children so a branch choice fits a bit set.
const maxChildren = 64

// dag is a session compiled for execution: modules indexed in the order the session
// lists them, with parents, children and precomputed response parameter keys.
// Immutable once built.
type dag struct {
	name    string
	slo     time.Duration
	mods    []node
	order   []int     // topological
	graph   api.Graph // order and every module's parents, for api.LongestPath
	sources []int
	sinks   []int
	session api.Session
	lanes   int // racing branches into anyof modules, over all of them (run.lanes)
	joins   int // anyof modules (run.joins)
	// laneJoin[l] is the anyof module racing branch l feeds, laneTop[l] the
	// branch's last module (the anyof module's parent).
	laneJoin, laneTop []int
}

// node is one module of a dag.
type node struct {
	name     string
	parents  []int
	children []int
	// fanout: the module has exactly one parent and a higher rate than it, or the
	// same rate as a parent that fans out, so each parent output element (dim 0)
	// becomes one item of this module (see doc.go).
	fanout                         bool
	queueKey, computeKey, totalKey string
	// anyOf: the module runs on the first of its parents to finish
	// (api.JoinAnyOf); raced[k] are the modules of its parent k's branch,
	// that parent first, then up the chain of modules that feed only it.
	anyOf bool
	raced [][]int
	// lane: the racing branch this module is on (an index into run.lanes,
	// whose Call its items carry), -1 for none; join: an anyof module's
	// index into run.joins.
	lane, join int
}

// compile validates s as a DAG and indexes it. Errors name the session, the module
// and what is allowed.
func compile(s api.Session) (*dag, error) {
	if s.Name == "" {
		return nil, fmt.Errorf("%s: session without a name", s.Source)
	}
	if len(s.Modules) == 0 {
		return nil, fmt.Errorf("%s: session %q has no modules", s.Source, s.Name)
	}
	if s.SLO < 0 {
		return nil, fmt.Errorf("%s: session %q: SLO %v is negative", s.Source, s.Name, s.SLO.D())
	}
	d := &dag{name: s.Name, slo: s.SLO.D(), mods: make([]node, len(s.Modules)), session: s}
	index := make(map[string]int, len(s.Modules))
	for i, m := range s.Modules {
		if m.Name == "" {
			return nil, fmt.Errorf("%s: session %q: module %d has no name", m.Source, s.Name, i)
		}
		if _, dup := index[m.Name]; dup {
			return nil, fmt.Errorf("%s: session %q: module %q is listed twice", m.Source, s.Name, m.Name)
		}
		index[m.Name] = i
		d.mods[i] = node{
			name:       m.Name,
			queueKey:   "piccolo." + m.Name + ".queue_ms",
			computeKey: "piccolo." + m.Name + ".compute_ms",
			totalKey:   "piccolo." + m.Name + ".total_ms",
			anyOf:      m.AnyOf(),
			lane:       -1,
		}
	}
	for i, m := range s.Modules {
		for _, p := range m.After {
			j, ok := index[p]
			if !ok {
				return nil, fmt.Errorf("%s: session %q: module %q runs after %q, which is not a module of the session (modules: %s)",
					m.Source, s.Name, m.Name, p, strings.Join(moduleNames(s), ", "))
			}
			if j == i {
				return nil, fmt.Errorf("%s: session %q: module %q runs after itself", m.Source, s.Name, m.Name)
			}
			d.mods[i].parents = append(d.mods[i].parents, j)
			d.mods[j].children = append(d.mods[j].children, i)
		}
	}
	for i := range d.mods {
		n := &d.mods[i]
		sort.Ints(n.children)
		if len(n.children) > maxChildren {
			return nil, fmt.Errorf("session %q: module %q has %d children; at most %d are allowed", s.Name, n.name, len(n.children), maxChildren)
		}
		if len(n.parents) == 0 {
			d.sources = append(d.sources, i)
		}
		if len(n.children) == 0 {
			d.sinks = append(d.sinks, i)
		}
	}
	// The topological order and the cycle check are api's (one rule for the
	// planner, the plan and the gateway); the message keeps naming the
	// modules as it always has.
	order, err := s.TopoOrder()
	if err != nil {
		cyc := s.Cycle()
		return nil, fmt.Errorf("%s: session %q: modules %s form a cycle; `after` must describe a DAG: %w",
			s.Source, s.Name, strings.Join(cyc[:len(cyc)-1], ", "), api.ErrCycle)
	}
	d.order = order
	d.graph = api.Graph{Order: d.order, Parents: make([][]int, len(d.mods))}
	for i := range d.mods {
		d.graph.Parents[i] = d.mods[i].parents
	}
	if err := d.compileAnyOf(s); err != nil {
		return nil, err
	}
	fanouts, err := s.FanOuts() // api's rule, which the rate counters share
	if err != nil {
		return nil, err
	}
	for i := range d.mods {
		d.mods[i].fanout = fanouts[i]
	}
	return d, nil
}

// compileAnyOf indexes the racing branches of the anyof modules
// (api.Session.RacingBranches: each parent of one must feed it alone, its
// work cancelled when another parent wins, and so must every module up its
// chain that has one parent and one child).
func (d *dag) compileAnyOf(s api.Session) error {
	joins, branches, err := s.RacingBranches()
	if err != nil {
		return err
	}
	for k, i := range joins {
		n := &d.mods[i]
		if d.graph.AnyOf == nil {
			d.graph.AnyOf = make([]bool, len(d.mods))
		}
		d.graph.AnyOf[i] = true
		n.join = d.joins
		d.joins++
		for _, lane := range branches[k] {
			for _, x := range lane {
				d.mods[x].lane = d.lanes
			}
			n.raced = append(n.raced, lane)
			d.laneJoin, d.laneTop = append(d.laneJoin, i), append(d.laneTop, lane[0])
			d.lanes++
		}
	}
	return nil
}

func moduleNames(s api.Session) []string {
	out := make([]string, len(s.Modules))
	for i, m := range s.Modules {
		out[i] = m.Name
	}
	return out
}

// estimate returns the longest path through the DAG when every module takes what
// the runner estimates (0: unknown, counted as nothing).
func (d *dag) estimate(r ModuleRunner) time.Duration {
	var buf [32]time.Duration // weights and heads: no allocation for DAGs of up to 16 modules
	n := len(d.mods)
	s := buf[:]
	if 2*n > len(buf) {
		s = make([]time.Duration, 2*n)
	}
	w, head := s[:n], s[n:2*n]
	for i := range d.mods {
		w[i] = r.Estimate(d.name, d.mods[i].name)
	}
	return api.LongestPath(d.graph, w, head, nil)
}
