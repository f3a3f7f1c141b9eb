package main

import (
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/piccolo-serving/piccolo/evaluation"
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
		o     evaluation.BenchOptions
		quiet bool
	)
	cmd := &cobra.Command{
		Use:   "planner",
		Short: "Plan seeded random workloads with every policy and ablation; print costs against the optimum (Fig. 4/5, §IV-B)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !o.Variants {
				o.Tick = progressTick(cmd, o.Workloads, "planning workloads", quiet)
			}
			return evaluation.BenchPlanner(cmd.OutOrStdout(), o)
		},
	}
	cmd.Flags().IntVar(&o.Workloads, "workloads", 500, "number of random workloads")
	cmd.Flags().Uint64Var(&o.Seed, "seed", 1, "workload generator seed")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar (it is also off when stderr is not a terminal)")
	cmd.Flags().BoolVar(&o.Variants, "variants", false, "workloads with model variants and accuracy targets: the variant search against every combination, the optimum and always the most accurate variants")
	return cmd
}

func newBenchPaperCmd() *cobra.Command {
	var quiet bool
	o := evaluation.BenchOptions{Options: evaluation.DefaultOptions}
	cmd := &cobra.Command{
		Use:   "paper",
		Short: "The paper's evaluation (§IV) on its five applications: Figs. 4a–11 as CSV and PNG, Table II, each summary beside the paper's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Tick = progressTick(cmd, o.Workloads, "planning and simulating workloads", quiet)
			return evaluation.BenchPaper(cmd.OutOrStdout(), o)
		},
	}
	cmd.Flags().IntVar(&o.Workloads, "workloads", 663, "number of workloads (the paper's Fig. 6 counts 663)")
	cmd.Flags().Uint64Var(&o.Seed, "seed", 1, "workload and simulation seed")
	cmd.Flags().StringVarP(&o.Out, "out", "o", "eval", "directory for the figures' CSV and PNG files")
	cmd.Flags().Float64SliceVar(&o.Utilizations, "max-utilization", o.Utilizations, "the headroom rule every policy, baseline and ablation plans under: these caps in turn until the simulation meets --target")
	cmd.Flags().Float64Var(&o.Target, "target", o.Target, "simulated SLO attainment a plan must reach; below it the plan is a miss")
	cmd.Flags().DurationVar(&o.SimDuration, "sim-duration", o.SimDuration, "virtual time of each plan's simulation")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar (it is also off when stderr is not a terminal)")
	cmd.Flags().IntVar(&o.InferLineEvery, "inferline-every", o.InferLineEvery, "also plan every k-th workload with the project's InferLine planner (simulation-checked, whole replicas) for Fig. 4a; 0: never")
	cmd.Flags().IntVar(&o.Workers, "workers", 0, "workloads run at once (0: one per CPU); the numbers do not change with it")
	cmd.Flags().StringVar(&o.Pool, "pool", "testbed", "GPU pool of the applications: testbed (the paper's P100 + V100) or current (T4 + A100); sources in docs/evaluation/sources.md")
	cmd.Flags().BoolVar(&o.Random, "random", false, "the planner benchmark's random workloads (synthetic profiles, `bench planner`) instead of the five applications")
	return cmd
}

func newBenchFootingCmd() *cobra.Command {
	var files, policies []string
	cmd := &cobra.Command{
		Use:   "footing",
		Short: "Every policy on each session under the gateway's headroom rule, each plan simulated: cost and SLO attainment (docs/evaluation.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return evaluation.BenchFooting(cmd.OutOrStdout(), files, policies)
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
