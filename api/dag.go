package api

import (
	"errors"
	"fmt"
	"strings"
)

// ErrCycle is returned (wrapped) by Session.TopoOrder when the modules' After lists
// do not form a DAG. The wrapping error names the cycle: "a -> b -> a".
var ErrCycle = errors.New("modules form a cycle")

// The helpers below read a session's DAG from the modules' After lists each time
// they are called: they precompute nothing that could go stale and are O(n²) in the
// number of modules, which is small. An After name that is not a module of the
// session is ignored (Load rejects it); a repeated name counts once. Module
// indices are positions in Session.Modules.

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
	var out []int
	for j := range s.Modules {
		if containsInt(s.Parents(j), i) {
			out = append(out, j)
		}
	}
	return out
}

// Sources returns the indices of the modules with no parents (they take the
// session's input), in ascending order.
func (s *Session) Sources() []int {
	var out []int
	for i := range s.Modules {
		if len(s.Parents(i)) == 0 {
			out = append(out, i)
		}
	}
	return out
}

// Sinks returns the indices of the modules with no children (their outputs are
// the session's outputs), in ascending order.
func (s *Session) Sinks() []int {
	var out []int
	for i := range s.Modules {
		if len(s.Children(i)) == 0 {
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
	n := len(s.Modules)
	parents := make([][]int, n)
	for i := range parents {
		parents[i] = s.Parents(i)
	}
	done := make([]bool, n)
	order := make([]int, 0, n)
	for len(order) < n {
		next := -1
		for i := 0; i < n && next < 0; i++ {
			if done[i] {
				continue
			}
			ready := true
			for _, p := range parents[i] {
				if !done[p] {
					ready = false
					break
				}
			}
			if ready {
				next = i
			}
		}
		if next < 0 {
			return nil, fmt.Errorf("session %q: %w: %s", s.Name, ErrCycle, strings.Join(s.cycle(), " -> "))
		}
		done[next] = true
		order = append(order, next)
	}
	return order, nil
}

// cycle returns the module names along one cycle of the DAG in data-flow order,
// the first name repeated at the end ("a", "b", "a"), or nil if there is none.
func (s *Session) cycle() []string {
	const (
		unseen = iota
		onStack
		finished
	)
	n := len(s.Modules)
	children := make([][]int, n)
	for j := 0; j < n; j++ {
		for _, p := range s.Parents(j) {
			children[p] = append(children[p], j)
		}
	}
	state := make([]int, n)
	var stack []int
	var found []int
	var visit func(i int) bool
	visit = func(i int) bool {
		state[i] = onStack
		stack = append(stack, i)
		for _, c := range children[i] {
			switch state[c] {
			case onStack:
				for k, v := range stack {
					if v == c {
						found = append(append([]int(nil), stack[k:]...), c)
						return true
					}
				}
			case unseen:
				if visit(c) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = finished
		return false
	}
	for i := 0; i < n; i++ {
		if state[i] == unseen && visit(i) {
			break
		}
	}
	if found == nil {
		return nil
	}
	names := make([]string, len(found))
	for k, i := range found {
		names[k] = s.Modules[i].Name
	}
	return names
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
