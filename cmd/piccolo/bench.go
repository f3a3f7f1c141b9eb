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
		n     int
		seed  uint64
		quiet bool
	)
	cmd := &cobra.Command{
		Use:   "planner",
		Short: "Plan seeded random workloads with every policy and ablation; print costs against the optimum (Fig. 4/5, §IV-B)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 {
				return fmt.Errorf("--workloads %d: must be ≥ 1", n)
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
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar (there is none when stderr is not a terminal)")
	return cmd
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
