package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/scheduler"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/simulate"
)

// traceOnlyFlags are the gateway flags that mean something only with --trace.
var traceOnlyFlags = []string{"trace-column", "speed", "skip", "trace-session", "duration", "attainment", "trace-search"}

// addGatewayTraceFlags registers the gateway's --trace (with --trace-column,
// --speed, --skip, --trace-session, --duration, --attainment, --trace-search)
// and --plan, and records which trace flags were given (o.traceGiven) before
// the command runs.
func addGatewayTraceFlags(f *pflag.FlagSet, o *gatewayOptions) {
	o.trace.addTrace(f, true)
	f.Lookup("trace").Usage = "plan for these recorded request arrivals as piccolo plan --trace does, and serve that plan: " + arrival.TraceFormats
	f.Lookup("trace-session").Usage = "with --trace: the session whose requests the trace is (default: the first session)"
	f.DurationVar(&o.trace.duration, "duration", 0, "with --trace: plan for this much of it (default: all)")
	f.Float64Var(&o.trace.target, "attainment", 0.99, "with --trace: the share of the trace's requests that must meet the SLO in simulation, in (0,1]")
	f.StringVar(&o.trace.search, "trace-search", "ladder", "with --trace: how the trace plan is searched: "+strings.Join(simulate.TraceSearches, ", ")+" (as piccolo plan --trace-search)")
	f.StringVar(&o.planFile, "plan", "", "serve this plan JSON (written by piccolo plan --no-fusion -o json), checked against the config; re-plans at measured rates above the plan's use --policy (docs/traffic.md)")
	f.BoolVar(&o.tune, "tune", false, "with --trace, without --consul: run InferLine's tuner on the traced session: scale its modules' machines within a 100 ms bucket when the live arrival envelope exceeds the trace's at any window from the SLO to 60 s, back after 15 s (docs/traffic.md, \"The tuner\"); its rate band is then the tuner's, not the control loop's")
	o.traceFlags = f
}

// planner returns the plan step the gateway's flags ask for, the rates its
// plans carry for the control loop's band (replan.Options.Covers; nil: the
// planned rates) and whether the fuse step runs: with --trace,
// controlplane.TracePlanner (the trace plan, re-planned for the trace scaled
// to a measured rate; it carries the trace's envelope); with --plan,
// controlplane.FilePlanner over the file's plan (no fuse step: the plan is
// of the config's modules as written); else PlanForServing. Errors name the
// flag: --trace flags without --trace, --trace with --plan, an unreadable
// trace or plan, a plan that does not match the config.
func (o *gatewayOptions) planner(cfg *api.Config, opts scheduler.Options, flush dispatcher.Flush, tables io.Writer) (controlplane.Planner, func(map[replan.Key]float64) map[replan.Key]float64, bool, error) {
	serving := func(c *api.Config) (*api.Plan, error) { return controlplane.PlanForServing(c, opts, o.burst) }
	if o.trace.file == "" {
		if o.tune {
			return nil, nil, false, errors.New("--tune needs --trace: the tuner compares the live arrivals with the trace the plan was made for")
		}
		if given := o.traceGiven(); len(given) > 0 {
			return nil, nil, false, fmt.Errorf("--%s given without --trace: they say how to plan for a trace", strings.Join(given, ", --"))
		}
	} else if o.tune && o.consul != "" {
		return nil, nil, false, errors.New("--tune with --consul: the tuner runs in a gateway's own control loop only (without --consul)")
	} else if o.planFile != "" {
		return nil, nil, false, errors.New("--trace and --plan both given: serve either a trace's plan (--trace) or a plan written before (--plan)")
	}
	switch {
	case o.planFile != "":
		plan, err := api.ReadPlanFile(o.planFile)
		if err != nil {
			return nil, nil, false, fmt.Errorf("--plan: %w", err)
		}
		fp, err := controlplane.NewFilePlanner(cfg, plan, serving)
		if err != nil {
			return nil, nil, false, fmt.Errorf("--plan %s: %w", o.planFile, err)
		}
		return fp.Plan, nil, false, nil
	case o.trace.file != "":
		t, err := o.trace.read()
		if err != nil {
			return nil, nil, false, fmt.Errorf("--trace: %w", err)
		}
		tp, err := controlplane.NewTracePlanner(cfg, controlplane.TracePlannerOptions{Trace: t, Search: o.trace.search, Target: o.trace.target,
			Options: opts, Load: simulate.Options{Session: o.trace.session, Duration: o.trace.duration, Seed: 1, Flush: flush}, Tables: tables})
		if err != nil {
			return nil, nil, false, fmt.Errorf("--trace %s: %w", o.trace.file, err)
		}
		o.tracePlanner = tp
		return tp.Plan, tp.Covers, !o.noFuse, nil
	}
	return serving, nil, !o.noFuse, nil
}

// traceGiven lists the --trace flags given on the command line.
func (o *gatewayOptions) traceGiven() []string {
	var out []string
	if o.traceFlags == nil {
		return nil
	}
	for _, name := range traceOnlyFlags {
		if o.traceFlags.Changed(name) {
			out = append(out, name)
		}
	}
	return out
}
