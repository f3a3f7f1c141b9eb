package api

import (
	"container/heap"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrCycle is returned (wrapped) by Session.TopoOrder when the modules' After lists
// do not form a DAG. The wrapping error names the cycle: "a -> b -> a".
var ErrCycle = errors.New("modules form a cycle")

// The helpers below read a session's DAG from the modules' After lists each time
// they are called: they precompute nothing that could go stale. Parents and
// Children are O(n·k) for n modules of k After names each; TopoOrder, Sources and
// Sinks are O((n+e)·log n). An After name that is not a module of the session is
// ignored (Load rejects it); a repeated name counts once; when two modules share
// a name (Load rejects that too) the first one is meant. Module indices are
// positions in Session.Modules.

// ModuleIndex returns the index of the module called name, or -1.
func (s *Session) ModuleIndex(name string) int {
	for i := range s.Modules {
		if s.Modules[i].Name == name {
			return i
		}
	}
	return -1
}

// Parents returns the indices of the modules that module i runs after, in the
// order of its After list. It returns nil when i is out of range or the module
// takes the session's input.
func (s *Session) Parents(i int) []int {
	if i < 0 || i >= len(s.Modules) {
		return nil
	}
	var out []int
	for _, name := range s.Modules[i].After {
		p := s.ModuleIndex(name)
		if p < 0 || containsInt(out, p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Children returns the indices of the modules that run after module i, in
// ascending order. It returns nil when i is out of range or no module follows it.
func (s *Session) Children(i int) []int {
	if i < 0 || i >= len(s.Modules) {
		return nil
	}
	name := s.Modules[i].Name
	if s.ModuleIndex(name) != i {
		return nil // a later duplicate name: After names mean the first
	}
	var out []int
	for j := range s.Modules {
		for _, a := range s.Modules[j].After {
			if a == name {
				out = append(out, j)
				break
			}
		}
	}
	return out
}

// Sources returns the indices of the modules with no parents (they take the
// session's input), in ascending order.
func (s *Session) Sources() []int {
	parents, _ := s.graph()
	var out []int
	for i, ps := range parents {
		if len(ps) == 0 {
			out = append(out, i)
		}
	}
	return out
}

// Sinks returns the indices of the modules with no children (their outputs are
// the session's outputs), in ascending order.
func (s *Session) Sinks() []int {
	_, children := s.graph()
	var out []int
	for i, cs := range children {
		if len(cs) == 0 {
			out = append(out, i)
		}
	}
	return out
}

// TopoOrder returns every module index once, parents before children; among the
// modules ready at a step the lowest index comes first, so the order is
// deterministic. If the After lists form a cycle it returns an error wrapping
// ErrCycle that names the cycle, e.g. `session "s": modules form a cycle: a -> b -> a`.
func (s *Session) TopoOrder() ([]int, error) {
	parents, children := s.graph()
	n := len(parents)
	waiting := make([]int, n) // parents not yet ordered
	ready := &intHeap{}
	for i, ps := range parents {
		waiting[i] = len(ps)
		if waiting[i] == 0 {
			heap.Push(ready, i)
		}
	}
	order := make([]int, 0, n)
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		order = append(order, i)
		for _, c := range children[i] {
			if waiting[c]--; waiting[c] == 0 {
				heap.Push(ready, c)
			}
		}
	}
	if len(order) < n {
		return nil, fmt.Errorf("session %q: %w: %s", s.Name, ErrCycle, strings.Join(s.Cycle(), " -> "))
	}
	return order, nil
}

// Graph is a DAG of modules by index: Order lists every module once, parents
// before children (TopoOrder's order); Parents[i] are module i's parents (in
// its After order). Immutable once built; Session.Graph and SessionPlan.Graph
// build one. AnyOf, when not nil, marks the modules that run on the first of
// their parents to finish (Module.AnyOf, Cloudflow's anyof): on a path into
// one the head is the shortest over its parents rather than the longest.
type Graph struct {
	Order   []int
	Parents [][]int
	AnyOf   []bool
}

// Graph returns the session's DAG, indexed as s.Modules. Errors are
// TopoOrder's (a cycle).
func (s *Session) Graph() (Graph, error) {
	order, err := s.TopoOrder()
	if err != nil {
		return Graph{}, err
	}
	parents, _ := s.graph()
	return Graph{Order: order, Parents: parents, AnyOf: s.anyOf()}, nil
}

// FanOuts returns which modules fan out: run once per element of their one
// parent's outputs (dimension 0). A module fans out when it has a fan-out
// distribution (Module.FanOut, whose mean may be below 1), or a higher
// rate than its one parent, or the same rate as a parent that fans out (one
// item per element all along a chain such as cls → rotate → rec). The
// gateway's DAG runs modules so (gateway/dag.go) and its rate counters
// measure their distributions (controlplane/arrivals.go): one rule for both.
// Errors are TopoOrder's (a cycle).
func (s *Session) FanOuts() ([]bool, error) {
	order, err := s.TopoOrder()
	if err != nil {
		return nil, err
	}
	parents, _ := s.graph()
	out := make([]bool, len(s.Modules))
	for _, i := range order {
		if len(parents[i]) != 1 {
			continue
		}
		p := parents[i][0]
		pr, r := s.Modules[p].Rate, s.Modules[i].Rate
		out[i] = len(s.Modules[i].FanOut) > 0 || pr > 0 && (r > pr || r == pr && out[p])
	}
	return out, nil
}

// anyOf returns which modules are anyof joins, or nil when none is.
func (s *Session) anyOf() []bool {
	var out []bool
	for i := range s.Modules {
		if s.Modules[i].AnyOf() {
			if out == nil {
				out = make([]bool, len(s.Modules))
			}
			out[i] = true
		}
	}
	return out
}

// Graph returns the DAG of the plan's modules (their After lists), indexed
// as p.Modules. Errors are Session.TopoOrder's (a cycle).
func (p *SessionPlan) Graph() (Graph, error) {
	s := Session{Name: p.Name, Modules: make([]Module, len(p.Modules))}
	for i, m := range p.Modules {
		s.Modules[i] = Module{Name: m.Name, After: m.After, Join: m.Join}
	}
	return s.Graph()
}

// Weight is what a module weighs on a path: a time.Duration, or a number
// such as milliseconds or seconds. Weights are ≥ 0.
type Weight interface{ ~int64 | ~float64 }

// LongestPath returns the length of the longest path through g, a path's
// length being the sum of its modules' weights w (len(w) modules, indexed as
// g). It fills head[i], when head is not nil, with the longest path ending at
// module i, and tail[i], when tail is not nil, with the longest path starting
// at it, module i included in both; head[i]+tail[i]−w[i] is the longest path
// through i. Examples: a session's latency under WCLs or budgets is the
// longest path; the time a request still needs after module i is
// tail[i]−w[i]. LongestPath allocates only when head and tail are both nil.
//
// With anyof modules (g.AnyOf) a request ends when its sinks do, and an
// anyof module starts with its first parent: head[i] of an anyof module is
// the shortest head of its parents plus w[i], and the total is the longest
// head of a sink (a losing branch's own head may be longer). tail keeps the
// longest continuation, the time left when module i's branch is the one
// that wins; a graph without AnyOf takes the plain longest path both ways.
func LongestPath[W Weight](g Graph, w, head, tail []W) W {
	if head == nil && tail == nil {
		head = make([]W, len(w))
	}
	if g.AnyOf != nil {
		if head == nil { // the total needs the heads: one allocation
			head = make([]W, len(w))
		}
		return anyOfPath(g, w, head, tail)
	}
	var total W
	if head != nil {
		for _, i := range g.Order {
			var before W
			for _, p := range g.Parents[i] {
				before = max(before, head[p])
			}
			head[i] = before + w[i]
			total = max(total, head[i])
		}
	}
	if tail != nil {
		clear(tail)
		for k := len(g.Order) - 1; k >= 0; k-- {
			i := g.Order[k]
			tail[i] += w[i] // tail[i] held the longest tail of its children
			for _, p := range g.Parents[i] {
				tail[p] = max(tail[p], tail[i])
			}
			total = max(total, tail[i])
		}
	}
	return total
}

// anyOfPath is LongestPath for a graph with anyof modules, head not nil.
func anyOfPath[W Weight](g Graph, w, head, tail []W) W {
	for _, i := range g.Order {
		var before W
		for k, p := range g.Parents[i] {
			if k == 0 || !g.AnyOf[i] {
				before = max(before, head[p])
			} else {
				before = min(before, head[p])
			}
		}
		head[i] = before + w[i]
	}
	var total W
	for _, i := range g.Order {
		if !hasChild(g, i) {
			total = max(total, head[i])
		}
	}
	if tail != nil {
		LongestPath(Graph{Order: g.Order, Parents: g.Parents}, w, nil, tail)
	}
	return total
}

// hasChild reports whether some module of g runs after module i (O(edges):
// graphs with anyof modules only).
func hasChild(g Graph, i int) bool {
	for _, ps := range g.Parents {
		if containsInt(ps, i) {
			return true
		}
	}
	return false
}

// graph returns the parents (in After order) and children (ascending) of every
// module, built in O(n+e) with a map local to the call.
func (s *Session) graph() (parents, children [][]int) {
	n := len(s.Modules)
	index := make(map[string]int, n)
	for i := range s.Modules {
		if _, dup := index[s.Modules[i].Name]; !dup {
			index[s.Modules[i].Name] = i
		}
	}
	parents = make([][]int, n)
	children = make([][]int, n)
	var seen map[int]bool // for long After lists, where a linear check would be quadratic
	for j := range s.Modules {
		after := s.Modules[j].After
		if len(after) > 16 {
			seen = make(map[int]bool, len(after))
		}
		for _, name := range after {
			p, ok := index[name]
			if !ok {
				continue
			}
			if len(after) > 16 {
				if seen[p] {
					continue
				}
				seen[p] = true
			} else if containsInt(parents[j], p) {
				continue
			}
			parents[j] = append(parents[j], p)
		}
	}
	for j, ps := range parents {
		for _, p := range ps {
			children[p] = append(children[p], j)
		}
	}
	return parents, children
}

// Cycle returns the module names along one cycle of the DAG in data-flow order,
// the first name repeated at the end ("a", "b", "a"), or nil if there is none:
// what TopoOrder's error names.
func (s *Session) Cycle() []string {
	const (
		unseen = iota
		onStack
		finished
	)
	_, children := s.graph()
	n := len(children)
	state := make([]int, n)
	type frame struct{ node, next int } // next: index into children[node]
	for root := 0; root < n; root++ {
		if state[root] != unseen {
			continue
		}
		stack := []frame{{root, 0}}
		state[root] = onStack
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.next == len(children[top.node]) {
				state[top.node] = finished
				stack = stack[:len(stack)-1]
				continue
			}
			c := children[top.node][top.next]
			top.next++
			switch state[c] {
			case unseen:
				state[c] = onStack
				stack = append(stack, frame{c, 0})
			case onStack:
				var names []string
				for k := len(stack) - 1; k >= 0; k-- {
					if stack[k].node == c {
						for _, f := range stack[k:] {
							names = append(names, s.Modules[f.node].Name)
						}
						return append(names, s.Modules[c].Name)
					}
				}
			}
		}
	}
	return nil
}

// containsInt reports whether x is in xs (linear: lists here are a module's
// parents, few by nature, and a repeated After name is rejected by Load).
func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// intHeap is a min-heap of module indices.
type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// ShortestRest returns, for each module of p (indexed as p.Modules), the
// least time a request still needs once an item reaches the module: the
// longest path, in each module's shortest group duration (DurationMs of its
// fastest config), from the module, included, to a sink. It is what the
// gateway keeps back from the end-to-end deadline when it decides how late
// an item may still be sent (docs/dataplane.md, "Module deadlines").
// Errors are Graph's (a cycle).
func (p *SessionPlan) ShortestRest() ([]time.Duration, error) {
	return p.rest(func(mp *ModulePlan) time.Duration {
		var w time.Duration
		for k, c := range mp.Configs {
			if d := time.Duration(c.DurationMs * float64(time.Millisecond)); k == 0 || d < w {
				w = d
			}
		}
		return w
	})
}

// BudgetRest returns, for each module of p (indexed as p.Modules), the
// longest path in module budgets (BudgetMs) from the module, included, to a
// sink: the reference latency of the rest of the request's sequential paths
// from there. Llama's per-invocation slack gives a module the share
// budget/BudgetRest of the time a request has left (its Algorithm 1, the
// least share over the paths through the module: the longest path gives
// it; dispatcher.ModuleTimes.PathBudget). Errors are Graph's (a cycle).
func (p *SessionPlan) BudgetRest() ([]time.Duration, error) {
	return p.rest(func(mp *ModulePlan) time.Duration { return time.Duration(mp.BudgetMs * float64(time.Millisecond)) })
}

// rest is the longest path from each module, included, to a sink in the
// weight w gives each module.
func (p *SessionPlan) rest(w func(*ModulePlan) time.Duration) ([]time.Duration, error) {
	g, err := p.Graph()
	if err != nil {
		return nil, err
	}
	ws, rest := make([]time.Duration, len(p.Modules)), make([]time.Duration, len(p.Modules))
	for i := range p.Modules {
		ws[i] = w(&p.Modules[i])
	}
	LongestPath(g, ws, nil, rest)
	return rest, nil
}

// RacingBranches returns, for each anyof module of s (Module.AnyOf), in
// module order, its racing branches: for each parent in After order, the
// modules of that parent's branch, the parent first, then up its chain
// while a module has one parent that feeds it alone. When one parent
// finishes first, the other branches' work is cut (docs/planner.md,
// "Related systems"). joins[k] is the index of the k-th anyof module and
// branches[k][p] the branch of its parent p. The gateway (its DAG) and the
// simulator cut the same modules.
//
// Errors name the anyof module's source line, the session and the module:
// an anyof module with fewer than two parents, a parent that also feeds
// another module, a module on two branches.
func (s *Session) RacingBranches() (joins []int, branches [][][]int, err error) {
	parents, children := s.graph()
	on := map[int]bool{}
	for i := range s.Modules {
		if !s.Modules[i].AnyOf() {
			continue
		}
		name := s.Modules[i].Name
		if len(parents[i]) < 2 {
			return nil, nil, fmt.Errorf("%s: session %q: module %q joins anyof with %d parent(s); anyof races at least two modules in after",
				s.Modules[i].Source, s.Name, name, len(parents[i]))
		}
		var bs [][]int
		for _, p := range parents[i] {
			if len(children[p]) != 1 {
				return nil, nil, fmt.Errorf("%s: session %q: module %q races its parents (anyof), but parent %q also feeds other modules; each parent of an anyof module must feed it alone",
					s.Modules[i].Source, s.Name, name, s.Modules[p].Name)
			}
			var b []int
			for x := p; ; x = parents[x][0] {
				if on[x] {
					return nil, nil, fmt.Errorf("%s: session %q: module %q is on two racing branches", s.Modules[i].Source, s.Name, s.Modules[x].Name)
				}
				on[x] = true
				b = append(b, x)
				if len(parents[x]) != 1 || len(children[parents[x][0]]) != 1 {
					break
				}
			}
			bs = append(bs, b)
		}
		joins, branches = append(joins, i), append(branches, bs)
	}
	return joins, branches, nil
}
