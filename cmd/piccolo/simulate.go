package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/simulate"
)

func newSimulateCmd() *cobra.Command {
	var o simulate.CommandOptions
	cmd := &cobra.Command{
		Use:   "simulate [-c FILE...] [--plan PLAN.json]",
		Short: "Simulate a plan with the real dispatcher on a virtual clock",
		Long: `simulate runs a discrete-event simulation of a plan: requests arrive per the
arrival process, go through the real dispatcher (TC or round-robin) on a virtual
clock, and virtual backends run each batch for its profiled duration. It reports
p50/p90/p99/p99.9/max latency, throughput, goodput, SLO attainment and errors by
kind per session and module, each group's slowest item against its WCL, and per
slot the batches, mean batch size, dummies, utilisation and cost.

The plan is read from --plan (plan JSON as 'piccolo plan -o json' writes it, or
written by hand); without --plan, the config files given with -c are planned with
--policy first. --rate replaces each session's request rate (module rates scale
with it; machines and dummy rates stay as planned).

--arrival mmpp (bursts: --burst-rate, --burst-length, --quiet-rate, --quiet-length)
and --arrival trace (replay --trace FILE from --skip, --speed times faster; its
whole span unless --duration) drive one session, --trace-session (default the
first); the other sessions arrive as Poisson at their planned rates. See
docs/traffic.md.

Under constant arrivals at the planned rates no item should exceed its group's
WCL: 'over WCL' counts those that do.`,
		Example: `  piccolo plan -c configs/paper/profiles.yaml -c configs/paper/sessions.yaml -o json > plan.json
  piccolo simulate --plan plan.json --dispatch tc --arrival poisson --duration 60s
  piccolo simulate -c configs/demo/paper-gpus.yaml --arrival mmpp --burst-rate 250 --burst-length 1s --quiet-rate 25 --quiet-length 8s --duration 300s
  piccolo simulate -c configs/demo/paper-gpus.yaml --arrival trace --trace arrivals.csv --speed 2
  piccolo simulate -c configs/paper/profiles.yaml -c configs/paper/sessions.yaml --dispatch rr -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return simulate.Command(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.Files, "config", "c", nil, "config file (repeatable; files are merged); planned with --policy when --plan is not given")
	f.StringVar(&o.PlanFile, "plan", "", "plan JSON to simulate (as written by 'piccolo plan -o json', or by hand)")
	f.StringVar(&o.Policy, "policy", "piccolo", "planning policy when --plan is not given: "+strings.Join(planner.Policies, ", "))
	f.StringVar(&o.Dispatch, "dispatch", "tc", "dispatch policy: "+dispatcher.Policies)
	f.StringVar(&o.FlushBy, "flush", dispatcher.FlushIdle.Name(), "when a partial batch goes: idle (also as soon as a machine of its group is idle, while the measured arrival rate leaves capacity for batches that small) or deadline (the paper's §III-B: only at the latest time its oldest item allows)")
	f.StringVar(&o.Arrival, "arrival", "constant", "arrival process: "+arrival.Kinds)
	f.Float64Var(&o.CV2, "cv2", 1, "with --arrival gamma: squared coefficient of variation of the inter-arrival gaps (1 is Poisson, >1 is burstier)")
	f.Float64Var(&o.RatePerSec, "rate", 0, "request rate per session in req/s (0: the plan's)")
	f.DurationVar(&o.Duration, "duration", 0, "how long requests arrive, in virtual time (e.g. 60s; a trace: default its whole span)")
	addTrace(f, &o.Traffic.Source, &o.Traffic.Session)
	addMMPP(f, &o.Traffic.MMPP)
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the arrival processes and jitter")
	f.Float64Var(&o.Jitter, "jitter", 0, "batch durations vary uniformly by ±this fraction, in [0,1)")
	f.BoolVar(&o.InvocationSlack, "invocation-slack", false, "time each item's flush deadline by Llama's per-invocation slack, as 'piccolo gateway --invocation-slack' does (docs/dataplane.md, \"Per-invocation slack\")")
	f.BoolVar(&o.LateCommit, "late-commit", false, "send a batch that would end late on its group's machine to an idle machine of another of the module's planned groups that ends it in time, as 'piccolo gateway --late-commit' does (docs/dataplane.md, \"Late commit\")")
	f.BoolVar(&o.Admission, "admission", false, "refuse at once a request the machines' queues say would finish after its deadline, as 'piccolo gateway' does (counted as refused, not as a failure); false: the paper's dispatcher, which admits everything")
	f.BoolVar(&o.Place, "place", true, "run the plan on the devices placement packs it onto (fractional machines of different modules share a device and its lanes); false: every machine a device of its own. A plan naming backends runs on them")
	f.StringVarP(&o.Output, "output", "o", "table", "output format: table or json")
	return cmd
}
