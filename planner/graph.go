package planner

import (
	"fmt"
	"math"
	"slices"

	"github.com/piccolo-serving/piccolo/api"
)

// graph is a session's DAG by module index (api.Session.Graph, plus children),
// with the longest-path arithmetic the splitter needs. Immutable after newGraph.
type graph struct {
	dag      api.Graph
	names    []string
	parents  [][]int // dag.Parents
	children [][]int
	topo     []int // dag.Order: parents before children
}

func newGraph(s *api.Session) (*graph, error) {
	dag, err := s.Graph()
	if err != nil {
		return nil, fmt.Errorf("session %q: %w", s.Name, err)
	}
	n := len(s.Modules)
	g := &graph{dag: dag, names: make([]string, n), parents: dag.Parents, children: make([][]int, n), topo: dag.Order}
	for i, m := range s.Modules {
		g.names[i] = m.Name
		g.children[i] = s.Children(i)
	}
	return g, nil
}

// longest returns the longest source-to-sink path length under weights w, and for
// every module the length of the longest path through it.
func (g *graph) longest(w []float64) (float64, []float64) {
	head, through := make([]float64, len(w)), make([]float64, len(w))
	total := api.LongestPath(g.dag, w, head, through) // through holds the tails
	for i := range through {
		through[i] += head[i] - w[i]
	}
	return total, through
}

// parentBurst returns the burst module i's parents pass it (burst(p) for
// parent p): the longest, or at an anyof module the shortest; 0 for a source.
func (g *graph) parentBurst(i int, burst func(p int) float64) float64 {
	anyOf := g.dag.AnyOf != nil && g.dag.AnyOf[i]
	b := 0.0
	for k, p := range g.parents[i] {
		switch {
		case k == 0:
			b = burst(p)
		case anyOf:
			b = math.Min(b, burst(p))
		default:
			b = math.Max(b, burst(p))
		}
	}
	return b
}

// criticalPath returns the module names of a longest path under w, source first:
// from the first sink in topological order where a longest path ends, back
// through the parent with the longest path ending at it (the first such
// parent); at an anyof module, through the parent with the shortest (the
// branch that wins, api.LongestPath).
func (g *graph) criticalPath(w []float64) []string {
	head := make([]float64, len(w))
	api.LongestPath(g.dag, w, head, nil)
	end := -1
	for _, i := range g.topo {
		if len(g.children[i]) == 0 && (end == -1 || head[i] > head[end]) {
			end = i
		}
	}
	var path []string
	for i := end; i >= 0; {
		path = append(path, g.names[i])
		from := -1
		anyOf := g.dag.AnyOf != nil && g.dag.AnyOf[i]
		for _, p := range g.parents[i] {
			if from == -1 || !anyOf && head[p] > head[from] || anyOf && head[p] < head[from] {
				from = p
			}
		}
		i = from
	}
	slices.Reverse(path)
	return path
}
