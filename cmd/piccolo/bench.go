package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/evaluation"
	"github.com/piccolo-serving/piccolo/scheduler"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that reproduce the paper's evaluation",
	}
	cmd.AddCommand(newBenchPlannerCmd(), newBenchPaperCmd(), newBenchFootingCmd())
	return cmd
}

func newBenchPlannerCmd() *cobra.Command {
	var (
		n        int
		seed     uint64
		quiet    bool
		variants bool
	)
	cmd := &cobra.Command{
		Use:   "planner",
		Short: "Plan seeded random workloads with every policy and ablation; print costs against the optimum (Fig. 4/5, §IV-B)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 {
				return fmt.Errorf("--workloads %d: must be ≥ 1", n)
			}
			if variants {
				// Model variants (docs/variants.md): how the variant search
				// compares with the optimum and with the most accurate variants.
				start := time.Now()
				rows, err := scheduler.RunVariantBench(scheduler.GenerateVariantWorkloads(seed, n, scheduler.DefaultWorkloadSpec))
				if err != nil {
					return err
				}
				fmt.Fprint(cmd.OutOrStdout(), scheduler.VariantBenchLines(rows, n))
				fmt.Fprintf(cmd.OutOrStdout(), "(%d workloads with variants in %s)\n", n, time.Since(start).Round(time.Second))
				return nil
			}
			ws := scheduler.GenerateWorkloads(seed, n, scheduler.DefaultWorkloadSpec)
			tick := progressTick(cmd, n, "planning workloads", quiet)
			start := time.Now()
			rep, err := scheduler.RunPlannerBench(ws, scheduler.BenchVariants(), seed, tick)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), rep.Markdown())
			fmt.Fprintf(cmd.OutOrStdout(), "\n(%d workloads × %d variants in %s)\n", n, len(scheduler.BenchVariants()), time.Since(start).Round(time.Second))
			return nil
		},
	}
	cmd.Flags().IntVar(&n, "workloads", 500, "number of random workloads")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "workload generator seed")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar (it is also off when stderr is not a terminal)")
	cmd.Flags().BoolVar(&variants, "variants", false, "workloads with model variants and accuracy targets: the variant search against every combination, the optimum and always the most accurate variants")
	return cmd
}

func newBenchPaperCmd() *cobra.Command {
	var (
		n      int
		seed   uint64
		out    string
		quiet  bool
		random bool
	)
	o := evaluation.DefaultOptions
	cmd := &cobra.Command{
		Use:   "paper",
		Short: "The paper's evaluation (§IV) on its five applications: Figs. 4a–11 as CSV and PNG, Table II, each summary beside the paper's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 {
				return fmt.Errorf("--workloads %d: must be ≥ 1", n)
			}
			apps, err := evaluation.Apps()
			if err != nil {
				return err
			}
			o.Seed = seed
			tick := progressTick(cmd, n, "planning and simulating workloads", quiet)
			ws := evaluation.Generate(apps, seed, n, evaluation.DefaultWorkloadSpec)
			if random {
				ws = evaluation.Random(seed, n)
			}
			res, err := evaluation.Run(ws, o, tick)
			if err != nil {
				return err
			}
			if err := evaluation.Write(out, res.Figures()); err != nil {
				return err
			}
			rows, err := evaluation.TableII()
			if err != nil {
				return err
			}
			stdout := cmd.OutOrStdout()
			res.Summary(stdout)
			fmt.Fprintln(stdout, "\nTable II (M2 then M3 of Table I at 50 and 40 req/s, SLO 0.9 s):")
			evaluation.WriteTableII(stdout, rows)
			fmt.Fprintf(stdout, "\n(%d workloads × %d variants, planned and simulated in %s; figures in %s)\n", n, len(res.Variants), res.Elapsed.Round(time.Second), out)
			return nil
		},
	}
	cmd.Flags().IntVar(&n, "workloads", 663, "number of workloads (the paper's Fig. 6 counts 663)")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "workload and simulation seed")
	cmd.Flags().StringVarP(&out, "out", "o", "eval", "directory for the figures' CSV and PNG files")
	cmd.Flags().Float64SliceVar(&o.Utilizations, "max-utilization", o.Utilizations, "the headroom rule every policy, baseline and ablation plans under: these caps in turn until the simulation meets --target")
	cmd.Flags().Float64Var(&o.Target, "target", o.Target, "simulated SLO attainment a plan must reach; below it the plan is a miss")
	cmd.Flags().DurationVar(&o.SimDuration, "sim-duration", o.SimDuration, "virtual time of each plan's simulation")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar (it is also off when stderr is not a terminal)")
	cmd.Flags().BoolVar(&random, "random", false, "the planner benchmark's random workloads (synthetic profiles, `bench planner`) instead of the five applications")
	return cmd
}

func newBenchFootingCmd() *cobra.Command {
	var files, policies []string
	cmd := &cobra.Command{
		Use:   "footing",
		Short: "Every policy on each session under the gateway's headroom rule, each plan simulated: cost and SLO attainment (docs/evaluation.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var (
				cfg *api.Config
				err error
			)
			if len(files) == 0 {
				cfg, err = evaluation.DemoConfig()
			} else {
				cfg, err = api.Load(files...)
			}
			if err != nil {
				return err
			}
			rows, err := evaluation.Footing(cfg, policies, evaluation.ServingOptions)
			if err != nil {
				return err
			}
			evaluation.WriteFooting(cmd.OutOrStdout(), rows, evaluation.ServingOptions)
			return nil
		},
	}
	cmd.Flags().StringSliceVarP(&files, "config", "c", nil, "config files (default: the demo's embedded configs)")
	cmd.Flags().StringSliceVar(&policies, "policies", []string{"piccolo", "paper", "nexus", "scrooge", "inferline", "clipper"}, "policies to compare")
	return cmd
}

// progressTick returns a function that advances a progress bar of n steps on
// cmd's stderr, or nil when quiet or stderr is not a terminal (a pipe, a CI log:
// there the bar's redraws would be hundreds of lines).
func progressTick(cmd *cobra.Command, n int, desc string, quiet bool) func() {
	w := cmd.ErrOrStderr()
	if quiet || !isTerminal(w) {
		return nil
	}
	bar := progressbar.NewOptions(n, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
	return func() { _ = bar.Add(1) }
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
