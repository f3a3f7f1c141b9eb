package serving

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/simulate"
)

// TracePlanner is the plan step of a gateway serving for recorded arrivals
// (`piccolo gateway --trace`, docs/traffic.md "Serving a trace plan"): the
// traced session is planned as `piccolo plan --trace` plans it
// (simulate.PlanForTraceWith), the other sessions at their rates. It is a
// Planner strategy, so the config pipeline's plan step, the control loop's
// re-plans and, with Consul, this gateway's re-planner candidate all plan with
// it.
//
// A re-plan keeps the burst provisioning. At the config's own rates (the
// first plan, a config change that leaves the traced session's rate alone)
// it plans for the trace as given. At a measured rate (the control loop
// plans for the arrival envelope it measured, replan.RateMonitor) it plans
// for the trace scaled to that rate: replayed faster or slower by measured
// envelope / the trace's own envelope (Envelope, its busiest window as the
// monitor measures it), the factor new mean / trace mean for a process of
// the same shape. So bursts are planned for at the new rate, never the mean
// alone. The control loop judges its rate band against Covers, the trace's
// envelope, so the trace's own bursts do not re-plan.
//
// Made once by NewTracePlanner; Plan is safe from any goroutine (nothing in
// it changes after NewTracePlanner).
type TracePlanner struct {
	trace    *arrival.Trace
	search   string
	scope    string // replan.TunerScopes: what the plan and the Tuner scale
	target   float64
	opts     planner.Options
	load     simulate.Options
	session  string
	declared float64 // req/s: the traced session's rate in the config at start
	mean     float64 // req/s: the trace's mean over load.Duration
	envelope float64 // the trace's busiest monitor window / its mean (Envelope)
	source   string  // the traced session's source module of the highest rate
	tables   io.Writer
}

// TracePlannerOptions configure NewTracePlanner.
type TracePlannerOptions struct {
	// Trace is the trace to plan for, --skip and --speed applied.
	Trace *arrival.Trace
	// Search is one of simulate.TraceSearches (default "ladder").
	Search string
	// Scope is the tuner's, one of replan.TunerScopes (default
	// replan.ScopeModule): with replan.ScopePipeline (coarse-grained tuning,
	// `--tune-scope pipeline`) Plan serves the coarse-grained plan
	// (whole-pipeline replicas, simulate.PlanCoarse) instead of the search's,
	// and StartTuner scales it in whole pipeline replicas.
	Scope string
	// Target is the share of the trace's requests that must meet the SLO in
	// simulation, in (0, 1] (default 0.99).
	Target float64
	// Options are the planner's (policy, utilisation).
	Options planner.Options
	// Load is the simulation's: Session (default the config's first), Duration
	// (how much of the trace; default all), Seed, Flush (the gateway's own).
	Load simulate.Options
	// Tables, when set, is told each plan's comparison of the mean-rate, trace,
	// coarse-grained and peak plans (simulate.TracePlans.WriteTable).
	Tables io.Writer
}

// NewTracePlanner returns the planner for cfg (the config at start: its
// traced session's rate is "the config's rate" of later calls). Errors: no
// trace, a target out of (0, 1], an unknown search (naming the allowed), a
// session not in cfg (naming those there are), a trace with fewer than two
// arrivals in the window.
func NewTracePlanner(cfg *api.Config, o TracePlannerOptions) (*TracePlanner, error) {
	if o.Trace == nil || len(o.Trace.Offsets) == 0 {
		return nil, errors.New("trace planner: no trace given")
	}
	if o.Search == "" {
		o.Search = "ladder"
	}
	if err := simulate.CheckTraceSearch(o.Search); err != nil {
		return nil, err
	}
	if o.Scope == "" {
		o.Scope = replan.ScopeModule
	}
	if err := replan.CheckTunerScope(o.Scope); err != nil {
		return nil, err
	}
	if o.Target == 0 {
		o.Target = 0.99
	}
	if !(o.Target > 0 && o.Target <= 1) {
		return nil, fmt.Errorf("attainment target %v: must be in (0, 1]", o.Target)
	}
	name, declared, err := simulate.SessionRate(cfg, o.Load.Session)
	if err != nil {
		return nil, err
	}
	_, mean := o.Trace.MeanRate(o.Load.Duration)
	if !(mean > 0) {
		return nil, fmt.Errorf("trace %s: fewer than two arrivals, no rate to plan for", o.Trace.Name)
	}
	s, _ := cfg.Session(name)
	var source string
	for _, m := range s.Modules {
		if len(m.After) == 0 && m.Rate == declared {
			source = m.Name
		}
	}
	o.Load.Session = name
	peak := o.Trace.PeakRate(replan.EnvelopeWindow(time.Duration(s.SLO), declared), o.Load.Duration)
	return &TracePlanner{trace: o.Trace, search: o.Search, scope: o.Scope, target: o.Target, opts: o.Options, load: o.Load, session: name,
		declared: declared, mean: mean, envelope: max(peak, mean) / mean, source: source, tables: o.Tables}, nil
}

// Envelope is the traced session's rate at the config's own rate as the
// control loop's rate monitor measures it (req/s): the trace's busiest window
// of the monitor's length (replan.EnvelopeWindow of the session's SLO and
// configured rate) in the planned stretch. The trace plan carries it.
func (tp *TracePlanner) Envelope() float64 { return tp.envelope * tp.mean }

// Covers is the control loop's Options.Covers: the rates (req/s) a plan made
// at rates carries as the rate monitor measures them. At the config's own
// rate the traced session's modules carry the trace's envelope (Envelope,
// scaled to each module's share of the session's rate), not its mean, so the
// trace's own bursts do not re-plan; at a measured rate the plan was scaled
// to it, and carries it.
func (tp *TracePlanner) Covers(rates map[replan.ModuleKey]float64) map[replan.ModuleKey]float64 {
	out := maps.Clone(rates)
	src := rates[replan.ModuleKey{Session: tp.session, Module: tp.source}]
	if tp.Scale(src) != 1 || tp.declared <= 0 {
		return out
	}
	for k, r := range rates {
		if k.Session == tp.session {
			out[k] = r / tp.declared * tp.Envelope()
		}
	}
	return out
}

// Scale is the factor TracePlanner replays the trace faster by when cfg runs
// the traced session at rate req/s: 1 at the config's own rate, else rate /
// Envelope, so that the scaled trace's busiest window is the measured
// envelope.
func (tp *TracePlanner) Scale(rate float64) float64 {
	if math.Abs(rate-tp.declared) <= 1e-9*math.Max(1, tp.declared) {
		return 1
	}
	return rate / tp.Envelope()
}

// Plan plans cfg for the trace at the traced session's rate in cfg (see the
// type's doc), on the hardware cfg's backends have (as PlanForServing). When no
// plan up to the trace's peak meets the target, the peak plan is returned
// and the shortfall written to Tables: serving the best plan there is beats
// serving none. With Scope pipeline it returns the coarse-grained plan;
// error: none meets the target.
func (tp *TracePlanner) Plan(cfg *api.Config) (*api.Plan, error) {
	cfg = replan.OnlyPresent(cfg, Hardware(cfg.Backends))
	_, rate, err := simulate.SessionRate(cfg, tp.session)
	if err != nil {
		return nil, err
	}
	load := tp.load
	scale := tp.Scale(rate)
	if scale != 1 {
		if load.Trace, err = tp.trace.Window(0, scale); err != nil {
			return nil, err
		}
		if load.Duration > 0 {
			load.Duration = time.Duration(float64(load.Duration) / scale)
		}
	} else {
		load.Trace = tp.trace
	}
	res, err := simulate.PlanForTraceWith(tp.search, cfg, tp.opts, tp.target, load)
	if res == nil {
		return nil, err
	}
	if tp.tables != nil {
		// One write, so that a log writer makes it one entry.
		var b bytes.Buffer
		fmt.Fprintf(&b, "trace plan for session %q at %.4g req/s (configured, or the measured envelope): the trace replayed ×%.3g\n", tp.session, rate, scale)
		res.WriteTable(&b)
		if err != nil {
			fmt.Fprintf(&b, "serving the best plan found: %v\n", err)
		}
		_, _ = tp.tables.Write(b.Bytes())
	}
	if tp.scope == replan.ScopePipeline {
		if res.Coarse.Plan == nil {
			return nil, fmt.Errorf("coarse-grained plan (--tune-scope pipeline): no number of pipeline replicas meets the SLO for %.2f%% of session %q's trace", 100*tp.target, tp.session)
		}
		return res.Coarse.Plan, nil
	}
	return res.Trace.Plan, nil
}

// Sample is the trace the plan for the traced session at rate req/s was
// made for: the planned stretch, scaled as Plan scales it. The Tuner
// compares the live envelope with this trace's.
func (tp *TracePlanner) Sample(rate float64) (*arrival.Trace, error) {
	t := tp.trace
	if s := tp.Scale(rate); s != 1 {
		var err error
		if t, err = t.Window(0, s); err != nil {
			return nil, err
		}
	}
	if d := tp.load.Duration; d > 0 {
		cut := time.Duration(float64(d) / tp.Scale(rate))
		n := 0
		for n < len(t.Offsets) && t.Offsets[n] < cut {
			n++
		}
		t = &arrival.Trace{Name: t.Name, Offsets: t.Offsets[:n]}
	}
	return t, nil
}

// Hold is the control loop's Options.Hold when the Tuner runs: the traced
// session's modules, whose rate band the Tuner judges instead.
func (tp *TracePlanner) Hold(k replan.ModuleKey) bool { return k.Session == tp.session }

// Session is the traced session's name.
func (tp *TracePlanner) Session() string { return tp.session }

// Source is the traced session's source module of the highest rate: the
// module whose arrivals the Tuner reads.
func (tp *TracePlanner) Source() string { return tp.source }

// Scope is what the plan and the Tuner scale: one of replan.TunerScopes.
func (tp *TracePlanner) Scope() string { return tp.scope }

// FilePlanner is the plan step of `piccolo gateway --plan FILE`: it serves a
// plan written by `piccolo plan -o json` (docs/traffic.md "Serving a trace
// plan"). The plan is checked once, by NewFilePlanner, against the config;
// Plan returns it while the modules' rates are at most those the plan was
// made for, or at the config's own rates, and plans with Fallback otherwise
// (a measured rate the file's plan was not provisioned for).
// Safe from any goroutine.
type FilePlanner struct {
	plan     *api.Plan
	rates    map[replan.ModuleKey]float64 // the rates plan was made for
	declared map[replan.ModuleKey]float64 // the config's rates at start
	fallback Planner
}

// NewFilePlanner checks plan against cfg and returns its planner. Every
// session of cfg must be in plan, planned (no error), with the config's
// modules in order, each with the model (or one of the variants) the config
// gives it; every session of plan must be in cfg; and planner.Verify must
// pass on cfg at the plan's module rates (WCLs, budgets, SLOs, costs, prices
// recomputed). Errors name each session and module that does not match. A
// plan of fused modules (`piccolo plan` fuses by default) does not match the
// -c config: write it with `piccolo plan --no-fusion -o json`.
func NewFilePlanner(cfg *api.Config, plan *api.Plan, fallback Planner) (*FilePlanner, error) {
	if plan == nil {
		return nil, errors.New("--plan: no plan")
	}
	var bad []string
	planned := map[string]api.SessionPlan{}
	for _, sp := range plan.Sessions {
		planned[sp.Name] = sp
		if _, ok := cfg.Session(sp.Name); !ok {
			bad = append(bad, fmt.Sprintf("session %q is in the plan but not in the config", sp.Name))
		}
	}
	rates := map[replan.ModuleKey]float64{}
	for _, s := range cfg.Sessions {
		sp, ok := planned[s.Name]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("session %q is in the config but not in the plan", s.Name))
			continue
		case sp.Error != "":
			bad = append(bad, fmt.Sprintf("session %q is not planned in the plan: %s", s.Name, sp.Error))
			continue
		case len(sp.Modules) != len(s.Modules):
			bad = append(bad, fmt.Sprintf("session %q: the plan has %d modules (%s), the config %d (%s); a fused plan needs `piccolo plan --no-fusion`",
				s.Name, len(sp.Modules), moduleNames(sp.Modules), len(s.Modules), configModuleNames(s.Modules)))
			continue
		}
		for i, m := range s.Modules {
			mp := sp.Modules[i]
			if mp.Name != m.Name {
				bad = append(bad, fmt.Sprintf("session %q module %d: the plan has %q, the config %q", s.Name, i, mp.Name, m.Name))
				continue
			}
			if !servesModel(m, mp.Model) {
				bad = append(bad, fmt.Sprintf("session %q module %q: the plan runs model %q, the config allows %s", s.Name, m.Name, mp.Model, strings.Join(models(m), ", ")))
			}
			rates[replan.ModuleKey{Session: s.Name, Module: m.Name}] = mp.Rate
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("--plan does not match the config: %s", strings.Join(bad, "; "))
	}
	if err := planner.Verify(replan.WithRates(cfg, rates), plan); err != nil {
		return nil, fmt.Errorf("--plan fails its check against the config at the plan's rates: %w", err)
	}
	return &FilePlanner{plan: plan, rates: rates, declared: replan.Declared(cfg), fallback: fallback}, nil
}

// Plan returns the file's plan (a copy) when every module of cfg runs at
// the config's own rate or at most at the rate the plan was made for, else
// Fallback's plan for cfg.
func (fp *FilePlanner) Plan(cfg *api.Config) (*api.Plan, error) {
	for k, r := range replan.Declared(cfg) {
		if pr, ok := fp.rates[k]; !ok || (r > pr*(1+1e-9) && r != fp.declared[k]) {
			return fp.fallback(cfg)
		}
	}
	return clonePlan(fp.plan), nil
}

func clonePlan(p *api.Plan) *api.Plan {
	c := *p
	c.Sessions = slices.Clone(p.Sessions)
	for i := range c.Sessions {
		c.Sessions[i].Modules = slices.Clone(c.Sessions[i].Modules)
		for j := range c.Sessions[i].Modules {
			c.Sessions[i].Modules[j].Configs = slices.Clone(c.Sessions[i].Modules[j].Configs)
		}
	}
	return &c
}

func servesModel(m api.Module, model string) bool { return slices.Contains(models(m), model) }

func models(m api.Module) []string {
	var out []string
	for _, v := range m.Choices() {
		out = append(out, v.Model)
	}
	return out
}

func moduleNames(ms []api.ModulePlan) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return strings.Join(out, ", ")
}

func configModuleNames(ms []api.Module) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return strings.Join(out, ", ")
}
