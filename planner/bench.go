package planner

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Variant is one row of the planner benchmark: a policy with options, and the
// policy whose exhaustive optimum it is measured against ("" for none).
type Variant struct {
	Name      string
	Options   Options
	Reference string
}

func ablations(prefix, policy string) []Variant {
	v := func(name string, o Options) Variant {
		o.Policy, o.MaxUtilization = policy, 1
		return Variant{Name: prefix + "-" + name, Options: o, Reference: policy}
	}
	// A variant under another latency model has no optimum of its own here.
	other := func(name string, o Options) Variant {
		r := v(name, o)
		r.Reference = ""
		return r
	}
	return []Variant{
		v("nd", Options{NoDummy: true}),
		v("0re", Options{NoReassign: true}),
		v("1re", Options{ReassignOnce: true}),
		v("1bpc", Options{MaxConfigs: 1}),
		v("2bpc", Options{MaxConfigs: 2}),
		other("2d", Options{Model: "rr-2d"}),
		other("dt", Options{Model: "local"}),
		v("tb", Options{Split: "throughput"}),
		v("q0.01", Options{Split: "quantized", Quantum: 10 * time.Millisecond}),
		v("q0.1", Options{Split: "quantized", Quantum: 100 * time.Millisecond}),
		v("nb", Options{NoBatching: true}),
		v("np", Options{NoMultiplexing: true}),
		v("nh", Options{SingleHardware: true}),
	}
}

// BenchVariants are the rows of the paper's Fig. 4 and Fig. 5 as one table: our
// policy, the paper's, the four baselines, the ablations of §IV-C on both, and the
// two exhaustive optima. Headroom is off everywhere so costs compare.
func BenchVariants() []Variant {
	out := []Variant{
		{Name: "piccolo", Options: Options{Policy: "piccolo", MaxUtilization: 1}, Reference: "piccolo"},
		{Name: "piccolo-theorem1", Options: Options{Policy: "piccolo", MaxUtilization: 1, Model: "tc-theorem1"}},
		{Name: "paper", Options: Options{Policy: "paper"}, Reference: "paper"},
		{Name: "nexus", Options: Options{Policy: "nexus"}},
		{Name: "scrooge", Options: Options{Policy: "scrooge"}},
		{Name: "inferline", Options: Options{Policy: "inferline"}},
		{Name: "clipper", Options: Options{Policy: "clipper"}},
		{Name: "optimal(piccolo)", Options: Options{Policy: "optimal", Reference: "piccolo", MaxUtilization: 1}, Reference: "piccolo"},
		{Name: "optimal(paper)", Options: Options{Policy: "optimal", Reference: "paper"}, Reference: "paper"},
	}
	out = append(out, ablations("piccolo", "piccolo")...)
	return append(out, ablations("paper", "paper")...)
}

// BenchRow is one variant's figures over all workloads. Extra costs are
// (cost − reference cost)/reference cost, over the workloads both planned.
type BenchRow struct {
	Name                     string
	Planned, Workloads       int
	VsOptimal                Extra // against optimal under Reference's model
	VsPaper, VsPiccolo       Extra
	RuntimeP50, RuntimeP99   time.Duration
	InfeasibleWhereOptimalOK int
}

// Extra summarises extra cost against one reference.
type Extra struct {
	N             int     // workloads both planned
	Avg, Max      float64 // fractions (0.05 = 5%)
	Min           float64 // the lowest extra (negative: cheaper than the reference on some workload)
	AtReference   float64 // share of N within 1e-6 of the reference's cost
	Cheaper       float64 // share of N strictly cheaper than the reference
	SavingVsOther float64 // average saving (fraction of this cost) where cheaper
}

// BenchReport is the result of RunPlannerBench.
type BenchReport struct {
	Workloads int
	Seed      uint64
	Rows      []BenchRow
}

// RunPlannerBench plans every workload with every variant and summarises costs and
// runtimes. progress, if not nil, is called after each workload.
func RunPlannerBench(workloads []*api.Config, variants []Variant, seed uint64, progress func()) (BenchReport, error) {
	n := len(workloads)
	costs := make([][]float64, len(variants)) // NaN: not planned
	times := make([][]time.Duration, len(variants))
	for v := range variants {
		costs[v] = make([]float64, n)
		times[v] = make([]time.Duration, n)
	}
	for w, cfg := range workloads {
		for v, variant := range variants {
			start := time.Now()
			p, err := Plan(cfg, variant.Options)
			times[v][w] = time.Since(start)
			switch {
			case err == nil:
				if cerr := Verify(cfg, p); cerr != nil {
					return BenchReport{}, fmt.Errorf("workload %d, %s: plan fails its check: %w", w, variant.Name, cerr)
				}
				costs[v][w] = p.TotalCost
			case errors.Is(err, ErrInfeasible):
				costs[v][w] = math.NaN()
			default:
				return BenchReport{}, fmt.Errorf("workload %d, %s: %w", w, variant.Name, err)
			}
		}
		if progress != nil {
			progress()
		}
	}
	index := map[string]int{}
	for v, variant := range variants {
		index[variant.Name] = v
	}
	extra := func(v, ref int) Extra {
		var e Extra
		if ref < 0 {
			return e
		}
		at, cheaper, saving := 0, 0, 0.0
		for w := 0; w < n; w++ {
			c, r := costs[v][w], costs[ref][w]
			if math.IsNaN(c) || math.IsNaN(r) || r <= 0 {
				continue
			}
			e.N++
			x := (c - r) / r
			e.Avg += x
			if e.N == 1 || x > e.Max {
				e.Max = x
			}
			if e.N == 1 || x < e.Min {
				e.Min = x
			}
			if math.Abs(c-r) <= 1e-6*r {
				at++
			} else if c < r {
				cheaper++
				saving += (r - c) / r
			}
		}
		if e.N > 0 {
			e.Avg /= float64(e.N)
			e.AtReference = float64(at) / float64(e.N)
			e.Cheaper = float64(cheaper) / float64(e.N)
		}
		if cheaper > 0 {
			e.SavingVsOther = saving / float64(cheaper)
		}
		return e
	}
	lookup := func(name string) int {
		if i, ok := index[name]; ok {
			return i
		}
		return -1
	}
	rep := BenchReport{Workloads: n, Seed: seed}
	for v, variant := range variants {
		row := BenchRow{Name: variant.Name, Workloads: n}
		for w := 0; w < n; w++ {
			if !math.IsNaN(costs[v][w]) {
				row.Planned++
			}
		}
		if variant.Reference != "" {
			opt := lookup("optimal(" + variant.Reference + ")")
			row.VsOptimal = extra(v, opt)
			if opt >= 0 {
				for w := 0; w < n; w++ {
					if math.IsNaN(costs[v][w]) && !math.IsNaN(costs[opt][w]) {
						row.InfeasibleWhereOptimalOK++
					}
				}
			}
		}
		row.VsPaper = extra(v, lookup("paper"))
		row.VsPiccolo = extra(v, lookup("piccolo"))
		ts := append([]time.Duration(nil), times[v]...)
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		row.RuntimeP50 = ts[(len(ts)-1)/2]
		row.RuntimeP99 = ts[int(math.Ceil(0.99*float64(len(ts))))-1]
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

// Markdown renders the report as the table committed under docs/.
func (r BenchReport) Markdown() string {
	var b strings.Builder
	pct := func(x float64) string { return fmt.Sprintf("%.2f%%", 100*x) }
	fmt.Fprintf(&b, "%d workloads, seed %d. Extra cost = (cost − reference)/reference over the workloads both planned.\n\n", r.Workloads, r.Seed)
	b.WriteString("| variant | planned | vs own optimum: min / avg / max extra, at optimum | infeasible where optimum is not | vs paper: avg / max extra | vs piccolo: avg / max extra | runtime p50 / p99 |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, row := range r.Rows {
		opt := "–"
		if row.VsOptimal.N > 0 {
			opt = fmt.Sprintf("%s / %s / %s, %s", pct(row.VsOptimal.Min), pct(row.VsOptimal.Avg), pct(row.VsOptimal.Max), pct(row.VsOptimal.AtReference))
		}
		inf := "–"
		if row.VsOptimal.N > 0 {
			inf = fmt.Sprint(row.InfeasibleWhereOptimalOK)
		}
		fmt.Fprintf(&b, "| %s | %d/%d | %s | %s | %s / %s | %s / %s | %s / %s |\n", row.Name, row.Planned, row.Workloads, opt, inf,
			pct(row.VsPaper.Avg), pct(row.VsPaper.Max), pct(row.VsPiccolo.Avg), pct(row.VsPiccolo.Max),
			fmtDur(row.RuntimeP50), fmtDur(row.RuntimeP99))
	}
	return b.String()
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000)
}

func isInfeasible(err error) bool { return errors.Is(err, ErrInfeasible) }
