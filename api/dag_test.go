package api

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// session builds a session from "name:after,after" specs.
func session(specs ...string) *Session {
	s := &Session{Name: "s"}
	for _, spec := range specs {
		var m Module
		name, after, _ := strings.Cut(spec, ":")
		m.Name = name
		for after != "" {
			var a string
			a, after, _ = strings.Cut(after, ",")
			m.After = append(m.After, a)
		}
		s.Modules = append(s.Modules, m)
	}
	return s
}

func TestDAGHelpers(t *testing.T) {
	tests := []struct {
		name     string
		s        *Session
		order    []int
		parents  [][]int
		children [][]int
		sources  []int
		sinks    []int
	}{
		{"single", session("a"), []int{0}, [][]int{nil}, [][]int{nil}, []int{0}, []int{0}},
		{"chain listed backwards", session("c:b", "b:a", "a"),
			[]int{2, 1, 0}, [][]int{{1}, {2}, nil}, [][]int{nil, {0}, {1}}, []int{2}, []int{0}},
		{"diamond", session("detect", "car:detect", "plate:detect", "out:plate,car"),
			[]int{0, 1, 2, 3}, [][]int{nil, {0}, {0}, {2, 1}}, [][]int{{1, 2}, {3}, {3}, nil}, []int{0}, []int{3}},
		{"two sources, lowest index first", session("x:b", "b", "a"),
			[]int{1, 0, 2}, [][]int{{1}, nil, nil}, [][]int{nil, {0}, nil}, []int{1, 2}, []int{0, 2}},
		{"unknown and repeated after names", session("a", "b:a,a,zz"),
			[]int{0, 1}, [][]int{nil, {0}}, [][]int{{1}, nil}, []int{0}, []int{1}},
		{"empty", session(), []int{}, [][]int{}, [][]int{}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			order, err := tc.s.TopoOrder()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.order, order); diff != "" {
				t.Errorf("TopoOrder (-want +got):\n%s", diff)
			}
			for i := range tc.s.Modules {
				if diff := cmp.Diff(tc.parents[i], tc.s.Parents(i)); diff != "" {
					t.Errorf("Parents(%d) (-want +got):\n%s", i, diff)
				}
				if diff := cmp.Diff(tc.children[i], tc.s.Children(i)); diff != "" {
					t.Errorf("Children(%d) (-want +got):\n%s", i, diff)
				}
			}
			if diff := cmp.Diff(tc.sources, tc.s.Sources()); diff != "" {
				t.Errorf("Sources (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.sinks, tc.s.Sinks()); diff != "" {
				t.Errorf("Sinks (-want +got):\n%s", diff)
			}
			// Parents before children, each module once.
			pos := make(map[int]int, len(order))
			for k, i := range order {
				pos[i] = k
			}
			if len(pos) != len(tc.s.Modules) {
				t.Errorf("order %v does not hold each of %d modules once", order, len(tc.s.Modules))
			}
			for i := range tc.s.Modules {
				for _, p := range tc.s.Parents(i) {
					if pos[p] >= pos[i] {
						t.Errorf("parent %d after child %d in %v", p, i, order)
					}
				}
			}
		})
	}
}

func TestDAGOutOfRange(t *testing.T) {
	s := session("a", "b:a")
	for _, i := range []int{-1, 2} {
		if p := s.Parents(i); p != nil {
			t.Errorf("Parents(%d) = %v, want nil", i, p)
		}
		if c := s.Children(i); c != nil {
			t.Errorf("Children(%d) = %v, want nil", i, c)
		}
	}
	if got := s.ModuleIndex("b"); got != 1 {
		t.Errorf("ModuleIndex(b) = %d, want 1", got)
	}
	if got := s.ModuleIndex("zz"); got != -1 {
		t.Errorf("ModuleIndex(zz) = %d, want -1", got)
	}
}

func TestTopoOrderCycle(t *testing.T) {
	tests := []struct {
		name string
		s    *Session
		want string
	}{
		{"self", session("a:a"), `session "s": modules form a cycle: a -> a`},
		{"two", session("a:b", "b:a"), `session "s": modules form a cycle: a -> b -> a`},
		{"three behind a source", session("in", "a:in,c", "b:a", "c:b", "out:c"), `session "s": modules form a cycle: a -> b -> c -> a`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			order, err := tc.s.TopoOrder()
			if err == nil {
				t.Fatalf("TopoOrder = %v, want a cycle error", order)
			}
			if !errors.Is(err, ErrCycle) {
				t.Errorf("error %v does not wrap ErrCycle", err)
			}
			if err.Error() != tc.want {
				t.Errorf("error = %q, want %q", err, tc.want)
			}
		})
	}
}

// TestTopoOrderLarge checks that a long chain and a wide fan-in stay fast
// (near-linear): a quadratic implementation would take minutes here.
func TestTopoOrderLarge(t *testing.T) {
	const n = 20000
	s := &Session{Name: "big"}
	for i := 0; i < n; i++ {
		m := Module{Name: fmt.Sprint("m", i)}
		if i > 0 {
			m.After = []string{fmt.Sprint("m", i-1)}
		}
		s.Modules = append(s.Modules, m)
	}
	sink := Module{Name: "sink"}
	for i := 0; i < n; i++ {
		sink.After = append(sink.After, fmt.Sprint("m", i))
	}
	s.Modules = append(s.Modules, sink)
	order, err := s.TopoOrder()
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != n+1 || order[0] != 0 || order[n] != n {
		t.Errorf("order has %d modules, first %d, last %d", len(order), order[0], order[n])
	}
	// Close the chain into a cycle: the error must still come back.
	s.Modules[0].After = []string{"sink"}
	if _, err := s.TopoOrder(); !errors.Is(err, ErrCycle) {
		t.Errorf("closed chain: err = %v, want ErrCycle", err)
	}
}

func BenchmarkTopoOrder(b *testing.B) {
	s := session("detect", "car:detect", "plate:detect", "face:detect", "ocr:plate", "out:car,ocr,face")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.TopoOrder(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLongestPath: a chain, a diamond and a fan-out, under durations (the
// gateway's estimates) and under float weights (the planner's budgets).
func TestLongestPath(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name       string
		s          *Session
		w          []time.Duration
		total      time.Duration
		head, tail []time.Duration
	}{
		{"single", session("a"), []time.Duration{5 * ms}, 5 * ms, []time.Duration{5 * ms}, []time.Duration{5 * ms}},
		{"chain listed backwards", session("c:b", "b:a", "a"), []time.Duration{1 * ms, 2 * ms, 4 * ms}, 7 * ms,
			[]time.Duration{7 * ms, 6 * ms, 4 * ms}, []time.Duration{1 * ms, 3 * ms, 7 * ms}},
		{"diamond", session("detect", "car:detect", "plate:detect", "out:plate,car"),
			[]time.Duration{10 * ms, 30 * ms, 20 * ms, 5 * ms}, 45 * ms,
			[]time.Duration{10 * ms, 40 * ms, 30 * ms, 45 * ms}, []time.Duration{45 * ms, 35 * ms, 25 * ms, 5 * ms}},
		{"fan-out", session("det", "cls:det", "rec:det", "log:det"),
			[]time.Duration{10 * ms, 3 * ms, 8 * ms, 0}, 18 * ms,
			[]time.Duration{10 * ms, 13 * ms, 18 * ms, 10 * ms}, []time.Duration{18 * ms, 3 * ms, 8 * ms, 0}},
		{"two sources", session("x:b", "b", "a"), []time.Duration{1 * ms, 2 * ms, 9 * ms}, 9 * ms,
			[]time.Duration{3 * ms, 2 * ms, 9 * ms}, []time.Duration{1 * ms, 3 * ms, 9 * ms}},
		{"empty", session(), nil, 0, []time.Duration{}, []time.Duration{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := tc.s.Graph()
			if err != nil {
				t.Fatal(err)
			}
			head, tail := make([]time.Duration, len(tc.w)), make([]time.Duration, len(tc.w))
			if got := LongestPath(g, tc.w, head, tail); got != tc.total {
				t.Errorf("LongestPath = %v, want %v", got, tc.total)
			}
			if diff := cmp.Diff(tc.head, head); diff != "" {
				t.Errorf("head (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.tail, tail); diff != "" {
				t.Errorf("tail (-want +got):\n%s", diff)
			}
			if got := LongestPath(g, tc.w, nil, nil); got != tc.total {
				t.Errorf("LongestPath without head or tail = %v, want %v", got, tc.total)
			}
			// The same in float64 seconds, tails only (the gateway's setTails).
			w := make([]float64, len(tc.w))
			for i, d := range tc.w {
				w[i] = d.Seconds()
			}
			tailS := make([]float64, len(w))
			if got := LongestPath(g, w, nil, tailS); math.Abs(got-tc.total.Seconds()) > 1e-12 {
				t.Errorf("LongestPath in seconds = %v, want %v", got, tc.total.Seconds())
			}
			for i := range tailS {
				if math.Abs(tailS[i]-tc.tail[i].Seconds()) > 1e-12 {
					t.Errorf("tail[%d] in seconds = %v, want %v", i, tailS[i], tc.tail[i].Seconds())
				}
			}
		})
	}
	g := Graph{Order: []int{0, 1, 2, 3}, Parents: [][]int{nil, {0}, {0}, {2, 1}}}
	w, head := []time.Duration{1, 2, 3, 4}, make([]time.Duration, 4)
	if n := testing.AllocsPerRun(100, func() { LongestPath(g, w, head, nil) }); n != 0 {
		t.Errorf("LongestPath with a head buffer: %v allocs, want 0 (the gateway runs it per request)", n)
	}
}

func TestSessionPlanGraph(t *testing.T) {
	p := &SessionPlan{Name: "s", Modules: []ModulePlan{{Name: "out", After: []string{"plate", "car"}}, {Name: "car", After: []string{"detect"}}, {Name: "plate", After: []string{"detect"}}, {Name: "detect"}}}
	g, err := p.Graph()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Graph{Order: []int{3, 1, 2, 0}, Parents: [][]int{{2, 1}, {3}, {3}, nil}}, g); diff != "" {
		t.Errorf("Graph (-want +got):\n%s", diff)
	}
	p.Modules[3].After = []string{"out"}
	if _, err := p.Graph(); !errors.Is(err, ErrCycle) {
		t.Errorf("cyclic plan: Graph = %v, want ErrCycle", err)
	}
}

func TestLongestPathAnyOf(t *testing.T) {
	ms := time.Millisecond
	// src → {fast | slow1 → slow2} → pick (anyof) → out: the request ends
	// with the fast branch; the slow branch's own head (src+slow1+slow2 = 61
	// ms) is longer than the total and must not count.
	s := session("src", "fast:src", "slow1:src", "slow2:slow1", "pick:slow2,fast", "out:pick")
	s.Modules[4].Join = JoinAnyOf
	g, err := s.Graph()
	if err != nil {
		t.Fatal(err)
	}
	w := []time.Duration{1 * ms, 5 * ms, 30 * ms, 30 * ms, 2 * ms, 3 * ms}
	head, tail := make([]time.Duration, len(w)), make([]time.Duration, len(w))
	if got, want := LongestPath(g, w, head, tail), 11*ms; got != want {
		t.Errorf("LongestPath = %v, want %v (src 1 + fast 5 + pick 2 + out 3)", got, want)
	}
	if diff := cmp.Diff([]time.Duration{1 * ms, 6 * ms, 31 * ms, 61 * ms, 8 * ms, 11 * ms}, head); diff != "" {
		t.Errorf("head (-want +got):\n%s", diff)
	}
	// tails are the time left when a module's branch wins: the longest continuation.
	if diff := cmp.Diff([]time.Duration{66 * ms, 10 * ms, 65 * ms, 35 * ms, 5 * ms, 3 * ms}, tail); diff != "" {
		t.Errorf("tail (-want +got):\n%s", diff)
	}
	if got := LongestPath(g, w, nil, nil); got != 11*ms {
		t.Errorf("LongestPath without buffers = %v, want 11ms", got)
	}
	if n := testing.AllocsPerRun(100, func() { LongestPath(g, w, head, nil) }); n != 0 {
		t.Errorf("LongestPath with anyof and a head buffer: %v allocs, want 0 (the gateway runs it per request)", n)
	}
	// The plan's graph keeps the join.
	sp := SessionPlan{Modules: []ModulePlan{{Name: "a"}, {Name: "b"}, {Name: "j", After: []string{"a", "b"}, Join: JoinAnyOf}}}
	if pg, err := sp.Graph(); err != nil || pg.AnyOf == nil || !pg.AnyOf[2] {
		t.Errorf("SessionPlan.Graph AnyOf = %v (%v), want module j marked", pg.AnyOf, err)
	}
}
