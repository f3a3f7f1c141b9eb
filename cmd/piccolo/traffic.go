package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/simulate"
)

// addTrace registers --trace, --trace-column, --speed and --skip; with session
// (non-nil), --trace-session too. Shared by loadgen, simulate, plan and gateway.
func addTrace(f *pflag.FlagSet, s *arrival.Source, session *string) {
	f.StringVar(&s.File, "trace", "", "trace of request arrivals to replay: "+arrival.TraceFormats)
	f.StringVar(&s.Column, "trace-column", "", "the trace's time column, by its header name (default: the first column)")
	f.Float64Var(&s.Speed, "speed", 1, "replay the trace this many times faster (offsets divided by it)")
	f.DurationVar(&s.Skip, "skip", 0, "start the trace at its first arrival this long after its first")
	if session != nil {
		f.StringVar(session, "trace-session", "", "the session whose requests the trace (or mmpp) is; the others arrive as Poisson at their rates (default: the first session)")
	}
}

// addMMPP registers the MMPP's flags (--arrival mmpp).
func addMMPP(f *pflag.FlagSet, m *arrival.MMPP) {
	f.Float64Var(&m.BurstRate, "burst-rate", 0, "mmpp: request rate during a burst, req/s")
	f.DurationVar(&m.BurstLength, "burst-length", time.Second, "mmpp: mean length of a burst (exponentially distributed)")
	f.Float64Var(&m.QuietRate, "quiet-rate", 0, "mmpp: request rate between bursts, req/s (0: none)")
	f.DurationVar(&m.QuietLength, "quiet-length", 10*time.Second, "mmpp: mean time between bursts (exponentially distributed)")
}

// addPlanFlags registers plan's traffic flags: the trace (or a synthetic process,
// recorded for --duration) to plan for, and the attainment to reach.
func addPlanFlags(f *pflag.FlagSet, tf *simulate.Traffic) {
	addTrace(f, &tf.Source, &tf.Session)
	addMMPP(f, &tf.MMPP)
	f.StringVar(&tf.Kind, "arrival", "", "plan for these arrivals, simulated: trace (the default with --trace), or a synthetic process recorded for --duration: mmpp, gamma (with --cv2), poisson; none: plan at the configured rates")
	f.Float64Var(&tf.CV2, "cv2", 1, "with --arrival gamma: squared coefficient of variation of the inter-arrival gaps (1 is Poisson, >1 is burstier)")
	f.Uint64Var(&tf.Seed, "seed", 1, "with --arrival: seed of the synthetic process and of the simulations")
	f.Float64Var(&tf.Target, "attainment", 0.99, "with --trace or --arrival: the share of requests that must meet the SLO in simulation, in (0,1]")
	f.StringVar(&tf.Flush, "flush", dispatcher.FlushIdle.Name(), "the flush rule the gateway serves with (its --flush), which the plan's simulations dispatch with (the burst check; with --trace or --arrival, the trace search): idle (the gateway's default) or deadline (the paper's)")
	f.DurationVar(&tf.Duration, "duration", 0, "with --trace: plan for this much of it (default: all); with a synthetic --arrival: how much of it to record and plan for (required)")
	f.StringVar(&tf.Search, "trace-search", "ladder", "with --trace or --arrival: how the trace plan is searched: ladder (Piccolo's planner at rates from the trace's mean to its peak) or inferline (InferLine's planner: per module hardware, batch and whole replicas, greedy moves each checked by simulating the trace; docs/traffic.md)")
}
