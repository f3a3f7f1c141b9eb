package evaluation

import (
	"fmt"
	"io"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/planner"
)

// BenchOptions are the settings of `piccolo bench planner` and `piccolo
// bench paper`, one field per flag.
type BenchOptions struct {
	Workloads int    // --workloads: how many, ≥ 1
	Seed      uint64 // --seed: workload generator (and simulation) seed
	Variants  bool   // planner --variants: workloads with model variants and accuracy targets
	Random    bool   // paper --random: the planner benchmark's random workloads
	Out       string // paper -o: directory of the figures' CSV and PNG files
	Pool      string // paper --pool: the GPU pool (Pools; "" is the paper's testbed)
	Options          // paper: the headroom rule, target and simulated time (Seed is set from Seed)
	// Tick, when set, is called once per workload done (a progress bar).
	Tick func()
}

// BenchPlanner runs `piccolo bench planner` (Fig. 4/5, §IV-B): o.Workloads
// seeded random workloads planned with every policy and ablation
// (planner.RunPlannerBench), costs against the optimum, as Markdown on w;
// with o.Variants the variant search against every combination, the optimum
// and the most accurate variants (planner.RunVariantBench). Errors: fewer
// than one workload, or the benchmark's.
func BenchPlanner(w io.Writer, o BenchOptions) error {
	n := o.Workloads
	if n < 1 {
		return fmt.Errorf("--workloads %d: must be ≥ 1", n)
	}
	start := time.Now()
	if o.Variants {
		// Model variants (docs/variants.md): how the variant search
		// compares with the optimum and with the most accurate variants.
		rows, err := planner.RunVariantBench(planner.GenerateVariantWorkloads(o.Seed, n, planner.DefaultWorkloadSpec))
		if err != nil {
			return err
		}
		fmt.Fprint(w, planner.VariantBenchLines(rows, n))
		fmt.Fprintf(w, "(%d workloads with variants in %s)\n", n, time.Since(start).Round(time.Second))
		return nil
	}
	ws := planner.GenerateWorkloads(o.Seed, n, planner.DefaultWorkloadSpec)
	rep, err := planner.RunPlannerBench(ws, planner.BenchVariants(), o.Seed, o.Tick)
	if err != nil {
		return err
	}
	fmt.Fprint(w, rep.Markdown())
	fmt.Fprintf(w, "\n(%d workloads × %d variants in %s)\n", n, len(planner.BenchVariants()), time.Since(start).Round(time.Second))
	return nil
}

// BenchPaper runs `piccolo bench paper` (§IV): o.Workloads workloads of the
// five applications (or, with o.Random, the planner benchmark's), planned and
// simulated under o.Options (Run); Figs. 4a–11 written to o.Out (CSV and
// PNG), and the summary and Table II beside the paper's on w. Errors: fewer
// than one workload, or the run's or the writer's.
func BenchPaper(w io.Writer, o BenchOptions) error {
	n := o.Workloads
	if n < 1 {
		return fmt.Errorf("--workloads %d: must be ≥ 1", n)
	}
	apps, err := AppsOn(o.Pool)
	if err != nil {
		return err
	}
	o.Options.Seed = o.Seed
	ws := Generate(apps, o.Seed, n, DefaultWorkloadSpec)
	if o.Random {
		ws = Random(o.Seed, n)
	}
	res, err := Run(ws, o.Options, o.Tick)
	if err != nil {
		return err
	}
	if err := Write(o.Out, res.Figures()); err != nil {
		return err
	}
	rows, err := TableII()
	if err != nil {
		return err
	}
	if !o.Random {
		pool := o.Pool
		if pool == "" {
			pool = "testbed"
		}
		fmt.Fprintf(w, "GPU pool: %s (docs/evaluation/sources.md)\n\n", pool)
	}
	res.Summary(w)
	fmt.Fprintln(w, "\nTable II (M2 then M3 of Table I at 50 and 40 req/s, SLO 0.9 s):")
	WriteTableII(w, rows)
	fmt.Fprintf(w, "\n(%d workloads × %d variants, planned and simulated in %s; figures in %s)\n", n, len(res.Variants), res.Elapsed.Round(time.Second), o.Out)
	return nil
}

// BenchFooting runs `piccolo bench footing` (docs/evaluation.md): every
// policy of policies on each session of the config files (none: the demo's
// embedded configs) under the gateway's headroom rule (ServingOptions), each
// plan simulated, cost and SLO attainment as a table on w. Errors: a config
// that does not load, or Footing's.
func BenchFooting(w io.Writer, files, policies []string) error {
	var (
		cfg *api.Config
		err error
	)
	if len(files) == 0 {
		cfg, err = DemoConfig()
	} else {
		cfg, err = api.Load(files...)
	}
	if err != nil {
		return err
	}
	rows, err := Footing(cfg, policies, ServingOptions)
	if err != nil {
		return err
	}
	WriteFooting(w, rows, ServingOptions)
	return nil
}
