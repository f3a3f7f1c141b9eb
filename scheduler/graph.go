package scheduler

import (
	"fmt"

	"github.com/piccolo-serving/piccolo/api"
)

// graph is a session's DAG by module index (from api.Session's DAG helpers), with
// the longest-path arithmetic the splitter needs. Immutable after newGraph.
type graph struct {
	names    []string
	parents  [][]int
	children [][]int
	topo     []int // parents before children
}

func newGraph(s *api.Session) (*graph, error) {
	topo, err := s.TopoOrder()
	if err != nil {
		return nil, fmt.Errorf("session %q: %w", s.Name, err)
	}
	n := len(s.Modules)
	g := &graph{names: make([]string, n), parents: make([][]int, n), children: make([][]int, n), topo: topo}
	for i, m := range s.Modules {
		g.names[i] = m.Name
		g.parents[i] = s.Parents(i)
		g.children[i] = s.Children(i)
	}
	return g, nil
}

// longest returns the longest source-to-sink path length under weights w, and for
// every module the length of the longest path through it.
func (g *graph) longest(w []float64) (float64, []float64) {
	n := len(w)
	head := make([]float64, n) // longest path ending at i, including i
	tail := make([]float64, n) // longest path starting at i, including i
	for _, i := range g.topo {
		best := 0.0
		for _, p := range g.parents[i] {
			best = max(best, head[p])
		}
		head[i] = best + w[i]
	}
	total := 0.0
	for k := n - 1; k >= 0; k-- {
		i := g.topo[k]
		best := 0.0
		for _, c := range g.children[i] {
			best = max(best, tail[c])
		}
		tail[i] = best + w[i]
		total = max(total, head[i])
	}
	through := make([]float64, n)
	for i := range through {
		through[i] = head[i] + tail[i] - w[i]
	}
	return total, through
}

// criticalPath returns the module names of a longest path under w, source first.
func (g *graph) criticalPath(w []float64) []string {
	n := len(w)
	head := make([]float64, n)
	from := make([]int, n)
	end := -1
	for _, i := range g.topo {
		from[i] = -1
		for _, p := range g.parents[i] {
			if from[i] == -1 || head[p] > head[from[i]] {
				from[i] = p
			}
		}
		if from[i] >= 0 {
			head[i] = head[from[i]]
		}
		head[i] += w[i]
		if end == -1 || head[i] > head[end] {
			end = i
		}
	}
	var path []string
	for i := end; i >= 0; i = from[i] {
		path = append([]string{g.names[i]}, path...)
	}
	return path
}
