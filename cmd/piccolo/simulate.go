package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/scheduler"
	"github.com/piccolo-serving/piccolo/simulate"
)

func newSimulateCmd() *cobra.Command {
	var (
		files    []string
		planFile string
		policy   string
		dispatch string
		flush    string
		output   string
		place    bool
		cv2      float64
		o        simulate.Options
		tf       trafficFlags
	)
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
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: allowed: table, json", output)
			}
			p, err := dispatcher.ParsePolicy(dispatch)
			if err != nil {
				return fmt.Errorf("--dispatch: %w", err)
			}
			o.Policy = p
			fl, err := dispatcher.ParseFlush(flush)
			if err != nil {
				return fmt.Errorf("--flush: %w", err)
			}
			o.Flush = fl
			trace, err := tf.arrivalArgs(o.Arrival)
			if err != nil {
				return err
			}
			o.Trace, o.MMPP, o.Session = trace, tf.mmpp, tf.session
			if o.Arrival == "gamma" {
				if !(cv2 > 0) {
					return fmt.Errorf("--cv2 %v: must be > 0 (1 is Poisson, larger is burstier)", cv2)
				}
				o.CV2 = cv2 // only gamma has one: the report names it
			}
			if !arrival.OwnRate(o.Arrival) {
				if _, err := arrival.New(o.Arrival, 1, max(o.CV2, 1), 0); err != nil {
					return fmt.Errorf("--arrival: %w", err)
				}
			}
			if o.Duration <= 0 && o.Arrival != "trace" {
				return fmt.Errorf("--duration not set: how long requests arrive, in virtual time (e.g. 60s; --arrival trace: default its whole span)")
			}
			plan, err := loadPlan(files, planFile, policy)
			if err != nil {
				return err
			}
			if place {
				// Run on the devices placement packs the plan onto, so
				// modules sharing a device contend for its lanes.
				if plan, _, err = placement.Place(plan, nil, nil, placement.Options{Provision: true}); err != nil {
					return err
				}
			}
			r, err := simulate.Run(plan, o)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return r.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&files, "config", "c", nil, "config file (repeatable; files are merged); planned with --policy when --plan is not given")
	f.StringVar(&planFile, "plan", "", "plan JSON to simulate (as written by 'piccolo plan -o json', or by hand)")
	f.StringVar(&policy, "policy", "piccolo", "planning policy when --plan is not given: "+strings.Join(scheduler.Policies, ", "))
	f.StringVar(&dispatch, "dispatch", "tc", "dispatch policy: "+dispatcher.Policies)
	f.StringVar(&flush, "flush", dispatcher.FlushIdle.Name(), "when a partial batch goes: idle (also as soon as a machine of its group is idle, while the measured arrival rate leaves capacity for batches that small) or deadline (the paper's §III-B: only at the latest time its oldest item allows)")
	f.StringVar(&o.Arrival, "arrival", "constant", "arrival process: "+arrival.Kinds)
	f.Float64Var(&cv2, "cv2", 1, "with --arrival gamma: squared coefficient of variation of the inter-arrival gaps (1 is Poisson, >1 is burstier)")
	f.Float64Var(&o.RatePerSec, "rate", 0, "request rate per session in req/s (0: the plan's)")
	f.DurationVar(&o.Duration, "duration", 0, "how long requests arrive, in virtual time (e.g. 60s; a trace: default its whole span)")
	tf.addTrace(f, true)
	tf.addMMPP(f)
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the arrival processes and jitter")
	f.Float64Var(&o.Jitter, "jitter", 0, "batch durations vary uniformly by ±this fraction, in [0,1)")
	f.BoolVar(&o.Admission, "admission", false, "refuse at once a request the machines' queues say would finish after its deadline, as 'piccolo gateway' does (counted as refused, not as a failure); false: the paper's dispatcher, which admits everything")
	f.BoolVar(&place, "place", true, "run the plan on the devices placement packs it onto (fractional machines of different modules share a device and its lanes); false: every machine a device of its own. A plan naming backends runs on them")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// loadPlan reads the plan file, or plans the configs with the planning policy.
func loadPlan(files []string, planFile, policy string) (*api.Plan, error) {
	if planFile != "" {
		p, err := api.ReadPlanFile(planFile)
		if err != nil {
			return nil, fmt.Errorf("--plan: %w", err)
		}
		return p, nil
	}
	if len(files) == 0 {
		return nil, errors.New("nothing to simulate: pass --plan PLAN.json, or -c FILE (repeatable) to plan first")
	}
	cfg, err := api.Load(files...)
	if err != nil {
		return nil, err
	}
	plan, err := scheduler.Plan(cfg, scheduler.Options{Policy: policy})
	if plan == nil {
		return nil, err
	}
	// Sessions that could not be planned are reported as skipped; the rest run.
	return plan, nil
}
