package evaluation

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/configs"
	"github.com/piccolo-serving/piccolo/serving"
)

// ServingOptions is the headroom rule the gateway and the demo plan with
// (serving.DefaultHeadroom: the caps, 99.9% of Poisson requests over 60 s or
// simulate.BurstItems items, seed 1, the gateway's admission and idle flush), taken from the serving package so the
// two cannot drift apart; Footing and Baseline hold every policy to it.
var ServingOptions = Options{Utilizations: serving.DefaultHeadroom.Utilizations, Target: serving.DefaultHeadroom.Target,
	SimDuration: serving.DefaultHeadroom.Duration, SimItems: serving.DefaultHeadroom.Items, Seed: serving.DefaultHeadroom.Seed,
	Admission: serving.DefaultHeadroom.Admission, Flush: serving.DefaultHeadroom.Flush}

// ServingFrom is ServingOptions from the cap u down: the caps of
// ServingOptions.Utilizations at or below u, or u alone when none is. A baseline
// compared with a plan made at cap u starts where the plan ended.
func ServingFrom(u float64) Options {
	o := ServingOptions
	o.Utilizations = nil
	for _, c := range ServingOptions.Utilizations {
		if c <= u+1e-9 {
			o.Utilizations = append(o.Utilizations, c)
		}
	}
	if len(o.Utilizations) == 0 {
		o.Utilizations = []float64{u}
	}
	return o
}

// FootingRow is one policy on one session under one headroom rule.
type FootingRow struct {
	Session, Policy string
	Outcome
	Err string // why the policy could not plan the session ("" if it did)
}

// Footing plans every session of cfg alone with each of policies (names in
// Systems) under o's headroom rule, simulating each plan with the policy's own
// dispatch, and returns one row per session and policy.
func Footing(cfg *api.Config, policies []string, o Options) ([]FootingRow, error) {
	byName := map[string]Variant{}
	for _, v := range Variants(o.Utilizations[0]) {
		byName[v.Name] = v
	}
	var rows []FootingRow
	for _, s := range cfg.Sessions {
		wl := Workload{App: s.Name, Modules: len(s.Modules),
			Config: &api.Config{Hardware: cfg.Hardware, Profiles: cfg.Profiles, Sessions: []api.Session{s}}}
		for _, p := range policies {
			v, ok := byName[p]
			if !ok {
				return nil, fmt.Errorf("policy %q: want one of %v", p, Systems)
			}
			out, _, err := runOne(wl, v, o, o.Seed)
			row := FootingRow{Session: s.Name, Policy: p, Outcome: out}
			switch {
			case err != nil:
				row.Err = err.Error()
			case !out.Planned:
				row.Err = "infeasible under its latency model"
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// Baseline plans session s of cfg with the round-robin baselines under o's
// headroom rule, Nexus first and InferLine where Nexus (one hardware type)
// cannot plan it, and returns the first that plans; an error when neither can.
func Baseline(cfg *api.Config, s *api.Session, o Options) (FootingRow, error) {
	one := &api.Config{Hardware: cfg.Hardware, Profiles: cfg.Profiles, Sessions: []api.Session{*s}}
	rows, err := Footing(one, []string{"nexus", "inferline"}, o)
	if err != nil {
		return FootingRow{}, err
	}
	var errs []error
	for _, r := range rows {
		if r.Planned {
			return r, nil
		}
		errs = append(errs, fmt.Errorf("%s: %s", r.Policy, r.Err))
	}
	return FootingRow{}, errors.Join(errs...)
}

// DemoConfig loads the demo's embedded default configs (configs.Demo).
func DemoConfig() (*api.Config, error) {
	docs := make([]api.NamedDoc, 0, len(configs.Demo))
	for _, n := range configs.Demo {
		data, err := fs.ReadFile(configs.FS, n)
		if err != nil {
			return nil, err
		}
		docs = append(docs, api.NamedDoc{Name: "configs/" + n, Data: data})
	}
	return api.LoadBytes(docs...)
}

// WriteFooting writes rows as a Markdown table.
func WriteFooting(w io.Writer, rows []FootingRow, o Options) {
	semantics := "the paper's dispatcher"
	if o.Admission {
		semantics = "the gateway's admission, a refusal a miss"
	}
	fmt.Fprintf(w, "Every policy under one headroom rule: caps %v in turn until %.1f%% of %s of simulated Poisson requests meet the SLO (each policy's own dispatch, %s); charged cost = max(planned, occupied / cap).\n\n",
		o.Utilizations, 100*o.Target, o.SimDuration, semantics)
	fmt.Fprintln(w, "| session | policy | cap | planned cost | charged cost | simulated attainment | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		if !r.Planned {
			fmt.Fprintf(w, "| %s | %s | – | – | – | – | cannot plan: %s |\n", r.Session, r.Policy, r.Err)
			continue
		}
		verdict := "meets"
		if !r.Met {
			verdict = "MISS (below the target at every cap)"
		}
		fmt.Fprintf(w, "| %s | %s | %.2f | %.4g | %.4g | %.3f%% | %s |\n", r.Session, r.Policy, r.Utilization, r.PlannedCost, r.Cost, 100*r.Attainment, verdict)
	}
}
