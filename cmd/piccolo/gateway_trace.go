package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/piccolo-serving/piccolo/arrival"
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
	addTrace(f, &o.trace.Source, &o.trace.Session)
	f.Lookup("trace").Usage = "plan for these recorded request arrivals as piccolo plan --trace does, and serve that plan: " + arrival.TraceFormats
	f.Lookup("trace-session").Usage = "with --trace: the session whose requests the trace is (default: the first session)"
	f.DurationVar(&o.trace.Duration, "duration", 0, "with --trace: plan for this much of it (default: all)")
	f.Float64Var(&o.trace.Target, "attainment", 0.99, "with --trace: the share of the trace's requests that must meet the SLO in simulation, in (0,1]")
	f.StringVar(&o.trace.Search, "trace-search", "ladder", "with --trace: how the trace plan is searched: "+strings.Join(simulate.TraceSearches, ", ")+" (as piccolo plan --trace-search)")
	f.StringVar(&o.planFile, "plan", "", "serve this plan JSON (written by piccolo plan --no-fusion -o json), checked against the config; re-plans at measured rates above the plan's use --policy (docs/traffic.md)")
	f.BoolVar(&o.tune, "tune", false, "with --trace, without --consul: run InferLine's tuner on the traced session: scale its modules' machines within a 100 ms bucket when the live arrival envelope exceeds the trace's at any window from the SLO to 60 s, back after 15 s (docs/traffic.md, \"The tuner\"); its rate band is then the tuner's, not the control loop's")
	f.StringVar(&o.tuneScope, "tune-scope", replan.ScopeModule, "with --tune: what the tuner scales: "+strings.Join(replan.TunerScopes, ", ")+"; pipeline serves the coarse-grained plan (whole-pipeline replicas) and scales every module together (InferLine's coarse-grained baseline, docs/traffic.md)")
	o.traceFlags = f
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
