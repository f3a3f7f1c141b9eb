package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/piccolo-serving/piccolo/scheduler"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that reproduce the paper's evaluation",
	}
	cmd.AddCommand(newBenchPlannerCmd())
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
			var tick func()
			if w := cmd.ErrOrStderr(); !quiet && isTerminal(w) {
				// Off a terminal (a pipe, a CI log) the bar's redraws would be
				// hundreds of lines.
				bar := progressbar.NewOptions(n, progressbar.OptionSetWriter(w),
					progressbar.OptionSetDescription("planning workloads"), progressbar.OptionShowCount(),
					progressbar.OptionClearOnFinish())
				tick = func() { _ = bar.Add(1) }
			}
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

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
