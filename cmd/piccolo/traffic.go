package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/scheduler"
	"github.com/piccolo-serving/piccolo/simulate"
)

// trafficFlags are the flags of the arrival processes with parameters beyond a
// rate, shared by loadgen, simulate and plan: a trace to replay, and an MMPP.
type trafficFlags struct {
	file    string
	column  string
	speed   float64
	skip    time.Duration
	session string
	mmpp    arrival.MMPP
	// plan's own: the process to plan for (when not a trace), the target
	// attainment and the stretch of arrivals planned for.
	kind     string
	cv2      float64
	seed     uint64
	target   float64
	duration time.Duration
	flush    string
	search   string // --trace-search: simulate.TraceSearches
}

// addTrace registers --trace, --trace-column, --speed and --skip; with session,
// --trace-session too.
func (tf *trafficFlags) addTrace(f *pflag.FlagSet, session bool) {
	f.StringVar(&tf.file, "trace", "", "trace of request arrivals to replay: "+arrival.TraceFormats)
	f.StringVar(&tf.column, "trace-column", "", "the trace's time column, by its header name (default: the first column)")
	f.Float64Var(&tf.speed, "speed", 1, "replay the trace this many times faster (offsets divided by it)")
	f.DurationVar(&tf.skip, "skip", 0, "start the trace at its first arrival this long after its first")
	if session {
		f.StringVar(&tf.session, "trace-session", "", "the session whose requests the trace (or mmpp) is; the others arrive as Poisson at their rates (default: the first session)")
	}
}

// addMMPP registers the MMPP's flags (--arrival mmpp).
func (tf *trafficFlags) addMMPP(f *pflag.FlagSet) {
	f.Float64Var(&tf.mmpp.BurstRate, "burst-rate", 0, "mmpp: request rate during a burst, req/s")
	f.DurationVar(&tf.mmpp.BurstLength, "burst-length", time.Second, "mmpp: mean length of a burst (exponentially distributed)")
	f.Float64Var(&tf.mmpp.QuietRate, "quiet-rate", 0, "mmpp: request rate between bursts, req/s (0: none)")
	f.DurationVar(&tf.mmpp.QuietLength, "quiet-length", 10*time.Second, "mmpp: mean time between bursts (exponentially distributed)")
}

// arrivalArgs checks the flags kind needs and returns the trace to replay (nil
// unless kind is "trace"). Errors name the flag.
func (tf *trafficFlags) arrivalArgs(kind string) (*arrival.Trace, error) {
	if kind != "trace" {
		if tf.file != "" {
			return nil, fmt.Errorf("--trace %s given with --arrival %s: replaying a trace needs --arrival trace", tf.file, kind)
		}
		if kind == "mmpp" {
			if err := tf.mmpp.Validate(); err != nil {
				return nil, fmt.Errorf("--arrival mmpp (--burst-rate, --burst-length, --quiet-rate, --quiet-length): %w", err)
			}
		}
		return nil, nil
	}
	if tf.file == "" {
		return nil, fmt.Errorf("--arrival trace needs --trace FILE: %s", arrival.TraceFormats)
	}
	return tf.read()
}

// read reads the trace and applies --skip and --speed.
func (tf *trafficFlags) read() (*arrival.Trace, error) {
	t, err := arrival.ReadTraceFile(tf.file, tf.column)
	if err != nil {
		return nil, err
	}
	return t.Window(tf.skip, tf.speed)
}

// addPlanFlags registers plan's traffic flags: the trace (or a synthetic process,
// recorded for --duration) to plan for, and the attainment to reach.
func (tf *trafficFlags) addPlanFlags(f *pflag.FlagSet) {
	tf.addTrace(f, true)
	tf.addMMPP(f)
	f.StringVar(&tf.kind, "arrival", "", "plan for these arrivals, simulated: trace (the default with --trace), or a synthetic process recorded for --duration: mmpp, gamma (with --cv2), poisson; none: plan at the configured rates")
	f.Float64Var(&tf.cv2, "cv2", 1, "with --arrival gamma: squared coefficient of variation of the inter-arrival gaps (1 is Poisson, >1 is burstier)")
	f.Uint64Var(&tf.seed, "seed", 1, "with --arrival: seed of the synthetic process and of the simulations")
	f.Float64Var(&tf.target, "attainment", 0.99, "with --trace or --arrival: the share of requests that must meet the SLO in simulation, in (0,1]")
	f.StringVar(&tf.flush, "flush", dispatcher.FlushDeadline.Name(), "with --trace or --arrival: the flush rule the simulations dispatch with: deadline (the paper's, as the gateway's own headroom search simulates) or idle (the gateway's serving default; bursts defeat its capacity guard, see docs/traffic.md)")
	f.DurationVar(&tf.duration, "duration", 0, "with --trace: plan for this much of it (default: all); with a synthetic --arrival: how much of it to record and plan for (required)")
	f.StringVar(&tf.search, "trace-search", "ladder", "with --trace or --arrival: how the trace plan is searched: ladder (Piccolo's planner at rates from the trace's mean to its peak) or inferline (InferLine's planner: per module hardware, batch and whole replicas, greedy moves each checked by simulating the trace; docs/traffic.md)")
}

// planning says whether plan plans for arrivals (a trace or a process).
func (tf *trafficFlags) planning() bool { return tf.file != "" || tf.kind != "" }

// planner returns `piccolo plan --trace`'s planner: simulate.PlanForTrace on the
// trace, or on the synthetic process recorded for --duration at the traced
// session's configured rate. It writes the comparison of the mean-rate, trace and
// peak plans to w and returns the trace plan.
func (tf *trafficFlags) planner(w io.Writer) func(*api.Config, scheduler.Options) (*api.Plan, error) {
	return func(cfg *api.Config, opts scheduler.Options) (*api.Plan, error) {
		flush, err := dispatcher.ParseFlush(tf.flush)
		if err != nil {
			return nil, fmt.Errorf("--flush: %w", err)
		}
		t, err := tf.planTrace(cfg)
		if err != nil {
			return nil, err
		}
		if tf.search == "" {
			tf.search = "ladder"
		}
		tp, err := simulate.PlanForTraceWith(tf.search, cfg, opts, tf.target, simulate.Options{Trace: t, Session: tf.session, Duration: tf.duration, Seed: tf.seed, Flush: flush})
		if tp == nil {
			return nil, err
		}
		tp.WriteTable(w)
		return tp.Trace.Plan, err
	}
}

// planTrace is the trace plan plans for: --trace, or the --arrival process run for
// --duration.
func (tf *trafficFlags) planTrace(cfg *api.Config) (*arrival.Trace, error) {
	if tf.kind == "" || tf.kind == "trace" {
		return tf.arrivalArgs("trace")
	}
	if _, err := tf.arrivalArgs(tf.kind); err != nil {
		return nil, err
	}
	if tf.duration <= 0 {
		return nil, fmt.Errorf("--arrival %s needs --duration: how long a stretch of its arrivals to plan for (e.g. 300s)", tf.kind)
	}
	_, rate, err := simulate.SessionRate(cfg, tf.session)
	if err != nil {
		return nil, err
	}
	p, err := arrival.Spec{Kind: tf.kind, Rate: rate, CV2: tf.cv2, MMPP: tf.mmpp}.New(tf.seed)
	if err != nil {
		return nil, fmt.Errorf("--arrival: %w", err)
	}
	return arrival.Record(p, tf.duration, tf.kind+" arrivals")
}
