package evaluation

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Paper holds the paper's published summary numbers (§IV-B, §IV-C): average
// extra cost of each Fig. 5 ablation over Piccolo, as fractions.
var Paper = map[string]float64{
	"np": 0.140, "nb": 0.896, "nh": 0.232, "1bpc": 0.144, "2bpc": 0.014, "2d": 0.185, "dt": 0.176,
	"tb": 0.392, "q0.01": 0.008, "q0.1": 0.255, "0re": 0.029, "1re": 0.005, "nd": 0.003,
}

// Ratios returns, for variant a against variant b, the ratio a/b of f over the
// workloads (keep(w) true) where both plans met the target; and how many
// workloads a missed (planned, simulated below the target) and failed to plan
// where b met.
func (r *Result) Ratios(a, b string, f func(Outcome) float64, keep func(Workload) bool) (ratios []float64, missed, infeasible int) {
	ia, ib := r.Index(a), r.Index(b)
	if ia < 0 || ib < 0 {
		return nil, 0, 0
	}
	for w, wl := range r.Workloads {
		if keep != nil && !keep(wl) {
			continue
		}
		oa, ob := r.Outcomes[ia][w], r.Outcomes[ib][w]
		if !ob.Met {
			continue
		}
		switch {
		case !oa.Planned:
			infeasible++
		case !oa.Met:
			missed++
		default:
			if x, y := f(oa), f(ob); y > 0 && !math.IsInf(x, 0) {
				ratios = append(ratios, x/y)
			}
		}
	}
	slices.Sort(ratios)
	return ratios, missed, infeasible
}

func cost(o Outcome) float64       { return o.Cost }
func throughput(o Outcome) float64 { return o.SourceThroughput }
func runtimeMs(o Outcome) float64  { return float64(o.Runtime.Microseconds()) / 1000 }
func remaining(o Outcome) float64  { return max(o.RemainingMs, 0) }

// Values returns f of the named variant over the workloads where it met the
// target, sorted.
func (r *Result) Values(name string, f func(Outcome, Workload) float64) []float64 {
	i := r.Index(name)
	if i < 0 {
		return nil
	}
	var xs []float64
	for w, wl := range r.Workloads {
		if o := r.Outcomes[i][w]; o.Met {
			xs = append(xs, f(o, wl))
		}
	}
	slices.Sort(xs)
	return xs
}

// remainingShare is Fig. 11's value: the remaining budget over the SLO.
func remainingShare(o Outcome, w Workload) float64 {
	return remaining(o) / (w.Config.Sessions[0].SLO.Seconds() * 1000)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Stats summarises normalized values: mean, max, share equal to 1 (within
// 1e-6), share below 1.
type Stats struct {
	N                     int
	Mean, Max, Min        float64
	AtOne, Below          float64
	Missed, Infeasible, W int // W: workloads where the reference met
}

func stats(xs []float64, missed, infeasible int) Stats {
	s := Stats{N: len(xs), Missed: missed, Infeasible: infeasible, W: len(xs) + missed + infeasible}
	if len(xs) == 0 {
		// No workload to compare on: no mean (a bar left out, "none met" in
		// the summary), not a 0 that reads as −100%.
		s.Mean, s.Max, s.Min = math.NaN(), math.NaN(), math.NaN()
		return s
	}
	s.Min, s.Max = xs[0], xs[len(xs)-1]
	for _, x := range xs {
		s.Mean += x
		if math.Abs(x-1) <= 1e-6 {
			s.AtOne++
		} else if x < 1 {
			s.Below++
		}
	}
	s.Mean /= float64(len(xs))
	s.AtOne /= float64(len(xs))
	s.Below /= float64(len(xs))
	return s
}

// CostStats is Stats of a's normalized total cost against b.
func (r *Result) CostStats(a, b string) Stats {
	return stats(r.Ratios(a, b, cost, nil))
}

// Figure is one figure's data: named series of values (a CDF's samples, or one
// bar per label).
type Figure struct {
	Name, Title, XLabel, YLabel string
	Bars                        bool
	Labels                      []string    // bar labels (Bars)
	Series                      []string    // series names, in legend order
	Values                      [][]float64 // Values[s]: sorted samples (CDF) or one per label (Bars; NaN: none)
	// Totals[s], when set and above len(Values[s]), is the number of workloads
	// the CDF is over: the samples missing (a miss or no plan) are never
	// reached, so the curve ends at len/Totals below 1. Nil: len(Values[s]).
	Totals []int
	// LogX draws the x axis on a log scale (every sample > 0).
	LogX bool
	// Clipped says, when the x axis is clipped (clip), where and which
	// samples lie beyond it; the CSV keeps every sample.
	XMax    float64
	Clipped string
}

// total is the number of workloads series s is over.
func (f Figure) total(s int) int {
	if s < len(f.Totals) && f.Totals[s] > len(f.Values[s]) {
		return f.Totals[s]
	}
	return len(f.Values[s])
}

// clip bounds a CDF's x axis so that a few outliers do not squeeze the rest:
// at the 97.5th percentile of every sample when the largest is more than 1.25×
// that, the samples beyond named in f.Clipped (series, count, largest). The
// CSV keeps every sample.
func (f *Figure) clip() {
	var all []float64
	for _, xs := range f.Values {
		for _, x := range xs {
			if !math.IsInf(x, 0) && !math.IsNaN(x) {
				all = append(all, x)
			}
		}
	}
	if len(all) < 10 {
		return
	}
	slices.Sort(all)
	q := all[int(0.975*float64(len(all)-1))]
	if !(q > 0) || all[len(all)-1] <= 1.25*q {
		return
	}
	f.XMax = 1.1 * q
	var notes []string
	for s, xs := range f.Values {
		k := len(xs) - sort.SearchFloat64s(xs, f.XMax)
		for k > 0 && xs[len(xs)-k] <= f.XMax {
			k--
		}
		if k > 0 {
			notes = append(notes, fmt.Sprintf("%s %d (max %.3g)", f.Series[s], k, xs[len(xs)-1]))
		}
	}
	f.Clipped = fmt.Sprintf("axis clipped at %.3g; beyond: %s", f.XMax, strings.Join(notes, ", "))
}

// Figures returns the data of Figs. 4a, 4b and 5–11, and of two figures the
// paper states in words: the planner's runtime per workload ("runtime": Fig.
// 10's runtime side, §IV-C) and its ratio to the brute force's ("brute",
// §IV-B: "more than 1000 times faster").
func (r *Result) Figures() []Figure {
	var figs []Figure
	systems := Systems[1:]
	f4a := Figure{Name: "fig4a", Title: "Fig. 4a: normalized total cost (met plans only)", YLabel: "cost / piccolo's", Bars: true, Labels: systems,
		Series: []string{"Table III (as the paper describes it)", "InferLine's planner: whole replicas", "InferLine's planner: occupied / 0.8"}}
	f4b := Figure{Name: "fig4b", Title: "Fig. 4b: CDF of normalized total cost (misses never reach 1)", XLabel: "cost / piccolo's", YLabel: "CDF"}
	row, il, ilOcc := make([]float64, len(systems)), make([]float64, len(systems)), make([]float64, len(systems))
	for i, s := range systems {
		xs, m, inf := r.Ratios(s, "piccolo", cost, nil)
		row[i], il[i], ilOcc[i] = stats(xs, m, inf).Mean, math.NaN(), math.NaN()
		f4b.Series = append(f4b.Series, s)
		f4b.Values = append(f4b.Values, xs)
		f4b.Totals = append(f4b.Totals, len(xs)+m+inf)
		if s == "inferline" {
			il[i], ilOcc[i] = r.InferLineStats(false).Mean, r.InferLineStats(true).Mean
		}
	}
	f4a.Values = [][]float64{row, il, ilOcc}
	f4b.clip()
	figs = append(figs, f4a, f4b)

	f5 := Figure{Name: "fig5", Title: "Fig. 5: average normalized total cost of the ablations", YLabel: "cost / its base's", Bars: true,
		Labels: Ablations, Series: []string{"paper's Piccolo", "piccolo", "paper (published)"}}
	for _, b := range []string{"paper", "piccolo"} {
		row := make([]float64, len(Ablations))
		for i, a := range Ablations {
			row[i] = r.CostStats(b+"-"+a, b).Mean
		}
		f5.Values = append(f5.Values, row)
	}
	pub := make([]float64, len(Ablations))
	for i, a := range Ablations {
		pub[i] = 1 + Paper[a]
	}
	f5.Values = append(f5.Values, pub)
	figs = append(figs, f5)

	// cdf is over every workload where the base met the target: a variant's
	// misses and infeasible plans are counted in Totals, never reached.
	cdf := func(name, title, xlabel string, series []string, f func(Outcome) float64, keep func(Workload) bool) Figure {
		fig := Figure{Name: name, Title: title, XLabel: xlabel, YLabel: "CDF"}
		for _, s := range series {
			xs, m, inf := r.Ratios(s, base(s), f, keep)
			fig.Series = append(fig.Series, s)
			fig.Values = append(fig.Values, xs)
			fig.Totals = append(fig.Totals, len(xs)+m+inf)
		}
		fig.clip()
		return fig
	}
	figs = append(figs,
		cdf("fig6", "Fig. 6: normalized throughput of the source module", "throughput per machine / piccolo's",
			[]string{"piccolo-np", "piccolo-nb", "piccolo-nh"}, throughput, nil),
		cdf("fig7", "Fig. 7: CDF of normalized cost, 1 or 2 configs per module", "cost / its base's",
			[]string{"paper-1bpc", "paper-2bpc", "piccolo-1bpc", "piccolo-2bpc"}, cost, nil))
	f8 := Figure{Name: "fig8", Title: "Fig. 8: WCL of piccolo's configs under other dispatch", XLabel: "WCL / WCL under TC", YLabel: "CDF",
		Series: []string{"2d (round-robin)", "d + b/t (machine-local)"}}
	var rr, dt []float64
	for _, x := range r.WCL {
		rr, dt = append(rr, x.RR2d), append(dt, x.LocalDBT)
	}
	slices.Sort(rr)
	slices.Sort(dt)
	f8.Values = [][]float64{rr, dt}
	f8.clip()
	figs = append(figs, f8)
	mods := func(n int) func(Workload) bool { return func(w Workload) bool { return w.Modules == n } }
	f9 := Figure{Name: "fig9", Title: "Fig. 9: CDF of normalized cost of Picc-tb", XLabel: "cost / its base's", YLabel: "CDF"}
	for _, s := range []string{"piccolo-tb", "paper-tb"} {
		for _, n := range []int{2, 3} {
			xs, m, inf := r.Ratios(s, base(s), cost, mods(n))
			f9.Series = append(f9.Series, fmt.Sprintf("%s, %d modules", s, n))
			f9.Values = append(f9.Values, xs)
			f9.Totals = append(f9.Totals, len(xs)+m+inf)
		}
	}
	f9.clip()
	figs = append(figs, f9,
		cdf("fig10", "Fig. 10: CDF of normalized cost of the quantized splits (no plan: never reached)", "cost / its base's",
			[]string{"piccolo-q0.01", "piccolo-q0.1", "paper-q0.01", "paper-q0.1"}, cost, nil),
	)
	f11 := Figure{Name: "fig11", Title: "Fig. 11: remaining latency budget (SLO − planned path)", XLabel: "remaining budget / SLO", YLabel: "CDF"}
	for _, s := range []string{"piccolo", "piccolo-0re", "piccolo-1re", "paper", "paper-0re", "paper-1re"} {
		f11.Series = append(f11.Series, s)
		f11.Values = append(f11.Values, r.Values(s, remainingShare))
	}
	figs = append(figs, f11)

	rt := Figure{Name: "runtime", Title: "Planner runtime per workload (the plan kept)", XLabel: "planning time, ms (log)", YLabel: "CDF", LogX: true}
	for _, s := range RuntimeSeries {
		rt.Series = append(rt.Series, s)
		rt.Values = append(rt.Values, r.Runtimes(s))
	}
	brute := Figure{Name: "brute", Title: "Brute force (optimal) runtime over the planner's, per workload", XLabel: "runtime / the planner's (log)", YLabel: "CDF", LogX: true}
	for _, s := range []string{"piccolo", "paper"} {
		brute.Series = append(brute.Series, "optimal / "+s)
		brute.Values = append(brute.Values, r.RuntimeRatios("optimal", s))
	}
	return append(figs, rt, brute)
}

// RuntimeSeries are the policies the runtime figure shows.
var RuntimeSeries = []string{"piccolo", "paper", "piccolo-q0.01", "piccolo-q0.1", "optimal"}

// Runtimes returns the planning time, in ms, of the named variant's plan kept
// on every workload it planned, sorted (each > 0).
func (r *Result) Runtimes(name string) []float64 {
	i := r.Index(name)
	if i < 0 {
		return nil
	}
	var xs []float64
	for _, o := range r.Outcomes[i] {
		if o.Planned && o.Runtime > 0 {
			xs = append(xs, runtimeMs(o))
		}
	}
	slices.Sort(xs)
	return xs
}

// RuntimeRatios returns, per workload both planned, a's planning time over
// b's, sorted.
func (r *Result) RuntimeRatios(a, b string) []float64 {
	ia, ib := r.Index(a), r.Index(b)
	if ia < 0 || ib < 0 {
		return nil
	}
	var xs []float64
	for w := range r.Workloads {
		oa, ob := r.Outcomes[ia][w], r.Outcomes[ib][w]
		if oa.Planned && ob.Planned && oa.Runtime > 0 && ob.Runtime > 0 {
			xs = append(xs, oa.Runtime.Seconds()/ob.Runtime.Seconds())
		}
	}
	slices.Sort(xs)
	return xs
}

// quantile returns the q-quantile (nearest rank) of sorted xs, NaN when empty.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return xs[int(math.Round(q*float64(len(xs)-1)))]
}

// InferLineStats is Stats of the project's InferLine planner's cost against
// piccolo's charged cost, on the workloads it ran on where piccolo met the
// target: its whole replicas, or with occupied its simulated occupancy over
// the first cap (Options.Utilizations[0]), the charge piccolo's plan gets at
// that cap.
func (r *Result) InferLineStats(occupied bool) Stats {
	ip := r.Index("piccolo")
	var xs []float64
	missed, infeasible := 0, 0
	for _, o := range r.InferLine {
		b := r.Outcomes[ip][o.Workload]
		switch {
		case !b.Met:
		case !o.Planned:
			infeasible++
		case !o.Met:
			missed++
		case occupied:
			xs = append(xs, o.Occupied/r.Options.Utilizations[0]/b.Cost)
		default:
			xs = append(xs, o.Cost/b.Cost)
		}
	}
	slices.Sort(xs)
	return stats(xs, missed, infeasible)
}

// Write writes each figure as dir/NAME.csv and dir/NAME.png.
func Write(dir string, figs []Figure) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range figs {
		if err := writeCSV(filepath.Join(dir, f.Name+".csv"), f); err != nil {
			return err
		}
		if err := writePNG(filepath.Join(dir, f.Name+".png"), f); err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
	}
	return nil
}

func writeCSV(path string, f Figure) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(file)
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	if f.Bars {
		_ = w.Write(append([]string{"label"}, f.Series...))
		for i, l := range f.Labels {
			rec := []string{l}
			for s := range f.Series {
				rec = append(rec, g(f.Values[s][i]))
			}
			_ = w.Write(rec)
		}
	} else {
		// cdf is over every workload of the series (Figure.Totals): the
		// misses are the rows that are not there.
		_ = w.Write([]string{"series", "value", "cdf"})
		for s, name := range f.Series {
			for i, x := range f.Values[s] {
				_ = w.Write([]string{name, g(x), g(float64(i+1) / float64(f.total(s)))})
			}
		}
	}
	w.Flush()
	return errorsJoin(w.Error(), file.Close())
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255}, color.RGBA{R: 140, G: 86, B: 75, A: 255},
}

func writePNG(path string, f Figure) error {
	p := plot.New()
	p.Title.Text = f.Title
	p.X.Label.Text, p.Y.Label.Text = f.XLabel, f.YLabel
	p.Add(plotter.NewGrid())
	// Bars: top right, above them (Y.Max leaves room); CDFs rise to the right,
	// so their top left is empty.
	p.Legend.Top, p.Legend.Left = true, !f.Bars
	if f.Bars {
		w := vg.Points(float64(36 / len(f.Series)))
		for s, name := range f.Series {
			vals := make(plotter.Values, len(f.Labels))
			for i, x := range f.Values[s] {
				if !math.IsNaN(x) {
					vals[i] = x
				}
			}
			b, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return err
			}
			b.Color, b.LineStyle.Width = palette[s%len(palette)], 0
			b.Offset = w * vg.Length(float64(s)-float64(len(f.Series)-1)/2)
			p.Add(b)
			p.Legend.Add(name, b)
		}
		p.NominalX(f.Labels...)
		top := 0.0
		for _, row := range f.Values {
			for _, x := range row {
				if !math.IsNaN(x) {
					top = max(top, x)
				}
			}
		}
		// Room above the bars for the legend.
		p.Y.Min, p.Y.Max = 0, 1.35*top
	} else {
		if f.LogX {
			p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
		}
		if f.Clipped != "" {
			p.X.Label.Text += "\n" + wrap(f.Clipped, 90)
		}
		for s, name := range f.Series {
			xs := f.Values[s]
			if len(xs) == 0 {
				continue
			}
			if n := f.total(s); n > len(xs) {
				name = fmt.Sprintf("%s (%d of %d: miss or no plan)", name, n-len(xs), n)
			}
			pts := make(plotter.XYs, 0, len(xs)+1)
			pts = append(pts, plotter.XY{X: xs[0], Y: 0})
			for i, x := range xs {
				if f.XMax > 0 && x > f.XMax {
					pts = append(pts, plotter.XY{X: f.XMax, Y: float64(i) / float64(f.total(s))})
					break
				}
				pts = append(pts, plotter.XY{X: x, Y: float64(i+1) / float64(f.total(s))})
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color, l.Width = palette[s%len(palette)], vg.Points(1.5)
			if s >= len(palette) {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			}
			p.Add(l)
			p.Legend.Add(name, l)
		}
		// Room above CDF 1 for the legend, one line a series.
		p.Y.Min, p.Y.Max = 0, 1+0.09*float64(len(f.Series))
		p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25}, {Value: 0.5, Label: "0.5"}, {Value: 0.75}, {Value: 1, Label: "1"}})
		if f.XMax > 0 {
			p.X.Max = f.XMax
		}
	}
	return p.Save(6*vg.Inch, 3.6*vg.Inch, path)
}

// wrap breaks s into lines of at most n bytes at ", " or spaces.
func wrap(s string, n int) string {
	var lines []string
	for len(s) > n {
		i := strings.LastIndex(s[:n], ", ")
		if i <= 0 {
			i = strings.LastIndex(s[:n], " ")
		}
		if i <= 0 {
			break
		}
		lines = append(lines, s[:i+1])
		s = strings.TrimLeft(s[i+1:], " ")
	}
	return strings.Join(append(lines, s), "\n")
}

// Summary writes each figure's summary beside the paper's published numbers.
func (r *Result) Summary(w io.Writer) {
	pct := func(x float64) string { return fmt.Sprintf("%+.1f%%", 100*(x-1)) }
	o := r.Options
	fmt.Fprintf(w, "%d workloads on the paper's five applications; every plan simulated (%s of Poisson arrivals) and re-planned at caps %v until %.1f%% of requests meet the SLO, else a miss. Normalized = over the workloads where both plans met the target.\n\n",
		len(r.Workloads), o.SimDuration, o.Utilizations, 100*o.Target)
	fmt.Fprintf(w, "%-8s %-16s %-44s %s\n", "figure", "variant", "ours: avg / max extra, at base, cheaper; misses, infeasible", "paper")
	line := func(fig, name string, s Stats, paper string) {
		ours := fmt.Sprintf("%s / %s, %.0f%%, %.0f%%; %d, %d of %d", pct(s.Mean), pct(s.Max), 100*s.AtOne, 100*s.Below, s.Missed, s.Infeasible, s.W)
		if s.N == 0 {
			ours = fmt.Sprintf("none met; %d, %d of %d", s.Missed, s.Infeasible, s.W)
		}
		fmt.Fprintf(w, "%-8s %-16s %-44s %s\n", fig, name, ours, paper)
	}
	for _, s := range Systems[1:] {
		paper := "+4.4% to +44.3% avg, +31.4% to +101.8% max (the four systems)"
		switch s {
		case "paper":
			paper = "(the paper's Piccolo; it is the paper's reference)"
		case "optimal":
			paper = "Piccolo at the optimum on 97.13%, ≤ +7.69% over it"
		}
		line("4a/4b", s, r.CostStats(s, "piccolo"), paper)
	}
	if len(r.InferLine) > 0 {
		st := r.InferLineStats(false)
		var occ []float64
		var rt time.Duration
		ip := r.Index("piccolo")
		for _, o := range r.InferLine {
			rt += o.Runtime
			if b := r.Outcomes[ip][o.Workload]; o.Met && b.Met {
				occ = append(occ, o.Occupied/o.Cost)
			}
		}
		line("4a", "InferLine plnr", st, fmt.Sprintf("(the project's planner on every %dth workload, whole replicas; %.0f%% occupied on average; %s a workload)",
			o.InferLineEvery, 100*mean(occ), (rt/time.Duration(len(r.InferLine))).Round(time.Millisecond)))
		line("4a", "InferLine occ", r.InferLineStats(true), fmt.Sprintf("(the same plans charged by occupancy / %.2g)", o.Utilizations[0]))
	}
	for _, s := range []string{"nexus", "scrooge", "inferline", "clipper"} {
		line("4a/paper", s, r.CostStats(s, "paper"), "+4.4% to +44.3% avg over the paper's Piccolo")
	}
	line("diag", "paper-exact", r.CostStats("paper-exact", "piccolo"), "(paper's Piccolo with (b−1)/w for Theorem 1's b/w)")
	for _, a := range Ablations {
		for _, b := range []string{"paper", "piccolo"} {
			line("5", b+"-"+a, r.CostStats(b+"-"+a, b), fmt.Sprintf("%+.1f%%", 100*Paper[a]))
		}
	}
	for _, a := range []string{"np", "nb", "nh"} {
		s := stats(r.Ratios("piccolo-"+a, "piccolo", throughput, nil))
		paper := map[string]string{"np": "-11.4%", "nb": "-42.9%", "nh": "-47.0%"}[a]
		fmt.Fprintf(w, "%-8s %-16s source module throughput per machine %s avg, higher on %.0f%% (%d workloads)   %s\n", "6", "piccolo-"+a, pct(s.Mean),
			100*(1-s.Below-s.AtOne), s.N, paper)
	}
	for _, x := range []struct{ v, paper string }{{"paper-1bpc", "at Piccolo 17.95%, max +61.6%"}, {"paper-2bpc", "at Piccolo 56.26%, max +25.3%"},
		{"piccolo-1bpc", "(same)"}, {"piccolo-2bpc", "(same)"}} {
		line("7", x.v, r.CostStats(x.v, base(x.v)), x.paper)
	}
	var rr, dt float64
	for _, x := range r.WCL {
		rr += x.RR2d
		dt += x.LocalDBT
	}
	if n := float64(len(r.WCL)); n > 0 {
		fmt.Fprintf(w, "%-8s %-16s WCL over TC's %s avg (%d config groups)   +47.0%%\n", "8", "2d", pct(rr/n), len(r.WCL))
		fmt.Fprintf(w, "%-8s %-16s WCL over TC's %s avg (%d config groups)   +11.3%%\n", "8", "dt", pct(dt/n), len(r.WCL))
	}
	for _, n := range []int{2, 3} {
		for _, v := range []string{"piccolo-tb", "paper-tb"} {
			s := stats(r.Ratios(v, base(v), cost, func(w Workload) bool { return w.Modules == n }))
			paper := map[int]string{2: "at Piccolo 94.36%, max +2.6%", 3: "dearer on all, +35.7% to +73.8%"}[n]
			line("9", fmt.Sprintf("%s/%dm", v, n), s, paper)
		}
	}
	for _, x := range []struct{ v, paper string }{{"piccolo-q0.01", "+0.8% avg, +11.1% max, cheaper on ~1%"}, {"piccolo-q0.1", "+25.5% avg, +50.0% max"},
		{"paper-q0.01", "(same)"}, {"paper-q0.1", "(same)"}} {
		line("10", x.v, r.CostStats(x.v, base(x.v)), x.paper)
	}
	for _, x := range []struct{ v, paper string }{{"piccolo", "Piccolo 0.008 s avg"}, {"paper", ""}, {"piccolo-q0.01", "849 ms avg"}, {"piccolo-q0.1", ""}, {"optimal", "10.29 s avg"}} {
		xs := r.Runtimes(x.v)
		fmt.Fprintf(w, "%-8s %-16s planning time ms: mean %.3g, p50 %.3g, p90 %.3g, max %.3g (%d plans)   %s\n", "runtime", x.v,
			mean(xs), quantile(xs, 0.5), quantile(xs, 0.9), quantile(xs, 1), len(xs), x.paper)
	}
	for _, b := range []string{"piccolo", "paper"} {
		xs := r.RuntimeRatios("optimal", b)
		ms := mean(r.Runtimes("optimal")) / mean(r.Runtimes(b))
		fmt.Fprintf(w, "%-8s %-16s optimal's runtime / %s's: per workload p10 %.3gx, p50 %.3gx, p90 %.3gx, max %.3gx; ratio of means %.3gx   %s\n", "brute", b, b,
			quantile(xs, 0.1), quantile(xs, 0.5), quantile(xs, 0.9), quantile(xs, 1), ms, "> 1000x (10.29 s / 0.008 s)")
	}
	for _, f := range r.Figures() {
		if f.Clipped != "" {
			fmt.Fprintf(w, "%-8s %s\n", f.Name, f.Clipped)
		}
	}
	for _, x := range []struct{ v, paper string }{{"piccolo-0re", "6.23x"}, {"piccolo-1re", "2.11x"}, {"paper-0re", "6.23x"}, {"paper-1re", "2.11x"}} {
		a, b := mean(r.Values(x.v, remainingShare)), mean(r.Values(base(x.v), remainingShare))
		fmt.Fprintf(w, "%-8s %-16s mean remaining budget %.2f%% of the SLO, %.2fx its base's %.2f%%   %s\n", "11", x.v, 100*a, a/b, 100*b, x.paper)
	}
}
