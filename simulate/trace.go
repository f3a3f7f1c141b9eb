package simulate

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/planner"
)

// PeakWindow is the window over which PlanForTrace measures a trace's peak rate
// (arrival.Trace.PeakRate), the rate peak provisioning plans for.
const PeakWindow = 500 * time.Millisecond

// rateStep is the factor between two planned rates PlanForTrace tries: each
// costs about 15% more capacity than the one before.
const rateStep = 1.15

// TracePlans is what PlanForTrace found: the trace's rates and three plans of the
// session the trace drives, each simulated on the trace.
type TracePlans struct {
	Session     string  // the session the trace drives
	Target      float64 // the SLO attainment asked for, in (0, 1]
	MeanRate    float64 // req/s, the trace's mean over the simulated window
	PeakRate    float64 // req/s, the trace's busiest PeakWindow in that window
	Requests    int     // arrivals in the window
	DurationS   float64 // the simulated window, s
	Mean        PlanRun // planned at MeanRate: what a plan from the mean rate gives
	Trace       PlanRun // the cheapest plan found whose simulation meets Target
	Peak        PlanRun // planned at PeakRate: peak provisioning
	TracePassed bool    // whether Trace meets Target (false: no rate up to the peak did)
	// Search is the search that found Trace: "ladder" (PlanForTrace) or
	// "inferline" (PlanForTraceWith); Ladder is the ladder's plan when Trace
	// is InferLine's, for comparison (nil Plan otherwise).
	Search string
	Ladder PlanRun
	// InferLine is the search's record when Search is "inferline".
	InferLine InferLineStats
	// Coarse is the coarse-grained plan (whole-pipeline replicas, PlanCoarse),
	// made by PlanForTraceWith for comparison (nil Plan when none met the
	// target or PlanForTrace made the plans).
	Coarse PlanRun
}

// PlanRun is one plan and its simulation on the trace.
type PlanRun struct {
	RatePerSec float64 // the rate the traced session was planned at, req/s
	Plan       *api.Plan
	Report     *Report
	// Attainment is the traced session's simulated SLO attainment, in [0, 1].
	Attainment float64
}

// PlanForTrace plans cfg for the request arrivals of a recorded trace (InferLine's
// planner, §4: plan against the trace, check by simulation). load carries the trace
// (load.Trace, skip and speed applied), the session it drives (load.Session,
// default: cfg's first session), and the simulation's policy, flush, seed and
// window (load.Duration, default the whole trace); load.Arrival is set to
// "trace". The traced session's modules get their rates from the trace: each
// module's configured rate scaled by trace rate / session rate (its source
// modules' rate), or the trace rate itself when the session has no rate; the
// other sessions keep their rates and arrive as Poisson in the simulations.
//
// It searches headroom as PlanForBursts does, with the trace as the arrival
// process, but as rate rather than utilisation: it plans the session at the
// trace's mean rate, then at rates rateStep apart up to its peak rate (each at
// opts' utilisation), and keeps the first plan whose simulation meets target for
// every session, on the trace and on each of 8 block-bootstrap resamples of it
// (heldOut: the margin for traffic the trace does not hold; the peak rung,
// the last, needs to meet it on the trace alone). A plan for a higher rate may choose bigger batches, which
// carry a burst more cheaply than more machines of the mean-rate plan's small
// batches; and the last rung is peak provisioning, so the plan found never
// costs more than that. It also returns the mean-rate and peak plans with their
// simulations, for comparison. The error is non-nil when the trace session
// cannot be planned or simulated, or when even the peak plan misses target
// (the result then has TracePassed false and is still returned).
func PlanForTrace(cfg *api.Config, opts planner.Options, target float64, load Options) (*TracePlans, error) {
	si, n, mean, err := traceLoad(cfg, target, &load, "plan for a trace")
	if err != nil {
		return nil, err
	}
	peak := max(load.Trace.PeakRate(PeakWindow, load.Duration), mean)
	tp := &TracePlans{Session: load.Session, Target: target, MeanRate: mean, PeakRate: peak, Requests: n, DurationS: load.Duration.Seconds()}
	var rates []float64
	for r := mean; r < peak; r *= rateStep {
		rates = append(rates, r)
	}
	rates = append(rates, peak)
	// planAt plans the traced session at rate; a plan in which it could not be
	// planned is no plan for the trace (the search would pass it on the other
	// sessions alone).
	planAt := func(rate float64) (*api.Plan, error) {
		p, err := planner.Plan(withSessionRate(cfg, si, rate), opts)
		if serr := sessionErr(p, load.Session); p == nil || serr != nil {
			return nil, fmt.Errorf("planning session %q at %.4g req/s: %w", load.Session, rate, errors.Join(err, serr))
		}
		return p, err
	}
	p, rep, i, passed, err := search(len(rates), func(i int) (*api.Plan, error) { return planAt(rates[i]) }, load, target, newHeldOut(load))
	if rep == nil {
		return nil, err
	}
	tp.Trace, tp.TracePassed = run(p, rep, rates[i], load.Session), passed
	// The mean-rate and peak plans are the first and last rungs: reuse the search's
	// when it stopped there, else plan and simulate them.
	for _, c := range []struct {
		into *PlanRun
		k    int
	}{{&tp.Mean, 0}, {&tp.Peak, len(rates) - 1}} {
		if c.k == i {
			*c.into = tp.Trace
			continue
		}
		p, err := planAt(rates[c.k])
		if p == nil {
			return nil, err
		}
		r, err := Run(p, load)
		if err != nil {
			return nil, err
		}
		*c.into = run(p, r, rates[c.k], load.Session)
	}
	if !passed {
		return tp, fmt.Errorf("no plan of session %q up to its peak rate %.4g req/s meets the SLO for %.2f%% of the trace's requests (peak plan: %.2f%%)", load.Session, peak, 100*target, 100*tp.Peak.Attainment)
	}
	return tp, err
}

// PlanForTraceWith is PlanForTrace with the trace plan found by search:
// "ladder" (PlanForTrace's own) or "inferline" (PlanInferLine, whose plan
// then replaces Trace, the ladder's kept in Ladder). Errors: an unknown
// search (naming the allowed ones), and PlanForTrace's and PlanInferLine's.
func PlanForTraceWith(search string, cfg *api.Config, opts planner.Options, target float64, load Options) (*TracePlans, error) {
	if err := CheckTraceSearch(search); err != nil {
		return nil, err
	}
	tp, err := PlanForTrace(cfg, opts, target, load)
	if tp == nil {
		return nil, err
	}
	tp.Search = search
	tp.Coarse, _, _ = PlanCoarse(cfg, target, load) // a comparison only: none found is no error
	if search == "ladder" {
		return tp, err
	}
	il, stats, ilErr := PlanInferLine(cfg, target, load)
	if ilErr != nil {
		return nil, ilErr
	}
	tp.Ladder, tp.Trace, tp.InferLine, tp.Search = tp.Trace, il, stats, "inferline"
	tp.TracePassed = il.Attainment >= target
	return tp, nil
}

// traceLoad checks what a trace planner is given (target in (0, 1], a trace
// with two arrivals or more, a session of cfg) and completes load for the
// simulations: arrival "trace", the session's name, the trace's span as the
// window when none is set. It returns the session's index, and the trace's
// arrivals and mean rate (req/s) in the window. who names the planner in the
// error for a missing trace.
func traceLoad(cfg *api.Config, target float64, load *Options, who string) (si, n int, mean float64, err error) {
	if !(target > 0 && target <= 1) {
		return 0, 0, 0, fmt.Errorf("attainment target %v: must be in (0, 1]", target)
	}
	if load.Trace == nil || len(load.Trace.Offsets) == 0 {
		return 0, 0, 0, fmt.Errorf("%s: no trace given", who)
	}
	if si, err = traceSession(cfg, load.Session); err != nil {
		return 0, 0, 0, err
	}
	load.Arrival, load.Session = "trace", cfg.Sessions[si].Name
	if load.Duration <= 0 {
		load.Duration = load.Trace.Span() + 1
	}
	if n, mean = load.Trace.MeanRate(load.Duration); !(mean > 0) {
		return 0, 0, 0, fmt.Errorf("trace %s: fewer than two arrivals, no rate to plan for", load.Trace.Name)
	}
	return si, n, mean, nil
}

func run(p *api.Plan, r *Report, rate float64, session string) PlanRun {
	pr := PlanRun{RatePerSec: rate, Plan: p, Report: r}
	for _, s := range r.Sessions {
		if s.Name == session {
			pr.Attainment = s.SLOAttainment
		}
	}
	return pr
}

func sessionErr(p *api.Plan, session string) error {
	if p == nil {
		return nil
	}
	for _, s := range p.Sessions {
		if s.Name == session && s.Error != "" {
			return fmt.Errorf("session %q: %s", session, s.Error)
		}
	}
	return nil
}

// SessionRate returns the name and request rate (req/s: its source modules' largest
// rate) of the session called name in cfg, or of its first session when name is
// empty: the session PlanForTrace gives a trace to, and the mean rate a synthetic
// process for it runs at. Errors list the sessions there are.
func SessionRate(cfg *api.Config, name string) (string, float64, error) {
	si, err := traceSession(cfg, name)
	if err != nil {
		return "", 0, err
	}
	return cfg.Sessions[si].Name, sourceRate(cfg.Sessions[si]), nil
}

func sourceRate(s api.Session) float64 {
	var r float64
	for _, m := range s.Modules {
		if len(m.After) == 0 {
			r = math.Max(r, m.Rate)
		}
	}
	return r
}

// traceSession is the index of the session named name in cfg (empty: the first).
func traceSession(cfg *api.Config, name string) (int, error) {
	if len(cfg.Sessions) == 0 {
		return 0, errors.New("plan for a trace: the config has no session")
	}
	if name == "" {
		return 0, nil
	}
	var names []string
	for i, s := range cfg.Sessions {
		if s.Name == name {
			return i, nil
		}
		names = append(names, s.Name)
	}
	return 0, fmt.Errorf("trace session %q: not in the config; sessions: %s", name, strings.Join(names, ", "))
}

// withSessionRate returns a copy of cfg whose session si runs at rate req/s: its
// modules' rates scaled by rate / the session's rate (the largest source module
// rate), or all set to rate when the session has none. cfg is not changed.
func withSessionRate(cfg *api.Config, si int, rate float64) *api.Config {
	c := *cfg
	c.Sessions = slices.Clone(cfg.Sessions)
	s := &c.Sessions[si]
	s.Modules = slices.Clone(s.Modules)
	base := sourceRate(*s)
	for i := range s.Modules {
		if base > 0 {
			s.Modules[i].Rate *= rate / base
		} else {
			s.Modules[i].Rate = rate
		}
	}
	return &c
}

// WriteTable writes the comparison for people: the trace's rates, and for the
// mean-rate, trace and peak plans the rate planned, the cost and the simulated
// attainment of the traced session.
func (tp *TracePlans) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "trace: session %s, %d requests in %.4gs: mean %.4g req/s, peak %.4g req/s (busiest %v)\n",
		tp.Session, tp.Requests, tp.DurationS, tp.MeanRate, tp.PeakRate, PeakWindow)
	fmt.Fprintf(w, "target: %.4g%% of the trace's requests within the SLO, simulated\n", 100*tp.Target)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  PLAN\tPLANNED RATE\tCOST\tATTAINMENT")
	for _, r := range []struct {
		name string
		run  PlanRun
	}{{"mean rate", tp.Mean}, {"trace", tp.Trace}, {"ladder", tp.Ladder}, {"coarse", tp.Coarse}, {"peak", tp.Peak}} {
		name := r.name
		switch {
		case r.run.Plan == nil:
			continue
		case r.name == "coarse":
			name = "coarse-grained (pipeline replicas)"
		case r.name == "ladder":
			name = "trace, ladder search"
		case r.name == "trace" && !tp.TracePassed:
			name = "trace (none met the target)"
		case r.name == "trace" && tp.Search == "inferline":
			name = fmt.Sprintf("trace, InferLine search (chosen; %d simulations)", tp.InferLine.Simulations)
		case r.name == "trace":
			name = "trace (chosen)"
		}
		fmt.Fprintf(tw, "  %s\t%.4g req/s\t%.4g\t%.2f%%\n", name, r.run.RatePerSec, r.run.Plan.TotalCost, 100*r.run.Attainment)
	}
	tw.Flush()
}
