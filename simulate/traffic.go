package simulate

import (
	"fmt"
	"io"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
)

// Traffic is the arrivals a plan is made (or a simulation run) for, as
// `piccolo plan`, `piccolo simulate` and `piccolo gateway --trace` take them:
// the Source (a trace, an MMPP) and the traced session, and for planning the
// synthetic process, the attainment to reach and the stretch planned for.
// Errors of its methods name the flags.
type Traffic struct {
	arrival.Source
	Session string // --trace-session: the traced session ("": the first)
	// plan's own: the process to plan for (when not a trace), the target
	// attainment and the stretch of arrivals planned for.
	Kind     string        // --arrival: trace, or a synthetic process; "": plan at the configured rates
	CV2      float64       // --cv2: with --arrival gamma
	Seed     uint64        // --seed: of the synthetic process and the simulations
	Target   float64       // --attainment: simulated share within the SLO, in (0,1]
	Duration time.Duration // --duration: plan for this much (a synthetic process: required)
	Flush    string        // --flush: the rule the simulations dispatch with
	Search   string        // --trace-search: TraceSearches ("": ladder)
}

// Planning reports whether the plan is made for arrivals (a trace or a
// process) rather than at the configured rates.
func (t *Traffic) Planning() bool { return t.File != "" || t.Kind != "" }

// Planner returns `piccolo plan --trace`'s planner: PlanForTraceWith on the
// trace, or on the synthetic process recorded for Duration at the traced
// session's configured rate. It writes the comparison of the mean-rate, trace
// and peak plans to w and returns the trace plan.
func (t *Traffic) Planner(w io.Writer) func(*api.Config, planner.Options) (*api.Plan, error) {
	return func(cfg *api.Config, opts planner.Options) (*api.Plan, error) {
		flush, err := dispatcher.ParseFlush(t.Flush)
		if err != nil {
			return nil, fmt.Errorf("--flush: %w", err)
		}
		tr, err := t.planTrace(cfg)
		if err != nil {
			return nil, err
		}
		if t.Search == "" {
			t.Search = "ladder"
		}
		tp, err := PlanForTraceWith(t.Search, cfg, opts, t.Target, Options{Trace: tr, Session: t.Session, Duration: t.Duration, Seed: t.Seed, Flush: flush})
		if tp == nil {
			return nil, err
		}
		tp.WriteTable(w)
		return tp.Trace.Plan, err
	}
}

// planTrace is the trace the plan is made for: the trace file, or the Kind
// process run for Duration.
func (t *Traffic) planTrace(cfg *api.Config) (*arrival.Trace, error) {
	if t.Kind == "" || t.Kind == "trace" {
		return t.Trace("trace")
	}
	if _, err := t.Trace(t.Kind); err != nil {
		return nil, err
	}
	if t.Duration <= 0 {
		return nil, fmt.Errorf("--arrival %s needs --duration: how long a stretch of its arrivals to plan for (e.g. 300s)", t.Kind)
	}
	_, rate, err := SessionRate(cfg, t.Session)
	if err != nil {
		return nil, err
	}
	p, err := arrival.Spec{Kind: t.Kind, Rate: rate, CV2: t.CV2, MMPP: t.MMPP}.New(t.Seed)
	if err != nil {
		return nil, fmt.Errorf("--arrival: %w", err)
	}
	return arrival.Record(p, t.Duration, t.Kind+" arrivals")
}
