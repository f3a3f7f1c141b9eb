package simulate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
)

// CommandOptions are `piccolo simulate`'s settings, one field per flag: the
// run's Options (Policy, Flush, Trace, MMPP, Session and CV2 are set by
// Command from the fields below) and the command's own.
type CommandOptions struct {
	Options
	Files    []string // -c: config files, planned with Policy when PlanFile is ""
	PlanFile string   // --plan: a plan JSON (ReadPlanFile)
	Policy   string   // --policy: the planning policy without PlanFile
	Dispatch string   // --dispatch: a dispatcher policy name
	FlushBy  string   // --flush: a dispatcher flush name
	Output   string   // -o: table or json
	Place    bool     // --place: run on the devices placement packs the plan onto
	CV2      float64  // --cv2: with --arrival gamma, > 0
	Traffic  Traffic  // --trace (and its flags), --trace-session, the MMPP's flags
}

// Command runs `piccolo simulate` as o says: the plan (read from PlanFile, or
// the config files planned with Policy; unplanned sessions are reported as
// skipped), placed on devices when o.Place, simulated (Run), and the report
// written to w as a table or JSON. Errors name the flag that is wrong: an
// unknown output, dispatch, flush or arrival process, a trace or MMPP the
// arrival kind does not fit, --cv2 ≤ 0 with gamma, no --duration (a trace
// defaults to its span), nothing to simulate; or are the run's.
func Command(w io.Writer, o CommandOptions) error {
	if o.Output != "table" && o.Output != "json" {
		return fmt.Errorf("-o %q: allowed: table, json", o.Output)
	}
	p, err := dispatcher.ParsePolicy(o.Dispatch)
	if err != nil {
		return fmt.Errorf("--dispatch: %w", err)
	}
	o.Options.Policy = p
	fl, err := dispatcher.ParseFlush(o.FlushBy)
	if err != nil {
		return fmt.Errorf("--flush: %w", err)
	}
	o.Flush = fl
	trace, err := o.Traffic.Trace(o.Arrival)
	if err != nil {
		return err
	}
	o.Trace, o.MMPP, o.Session = trace, o.Traffic.MMPP, o.Traffic.Session
	if o.Arrival == "gamma" {
		if !(o.CV2 > 0) {
			return fmt.Errorf("--cv2 %v: must be > 0 (1 is Poisson, larger is burstier)", o.CV2)
		}
		o.Options.CV2 = o.CV2 // only gamma has one: the report names it
	}
	if !arrival.OwnRate(o.Arrival) {
		if _, err := arrival.New(o.Arrival, 1, max(o.Options.CV2, 1), 0); err != nil {
			return fmt.Errorf("--arrival: %w", err)
		}
	}
	if o.Duration <= 0 && o.Arrival != "trace" {
		return fmt.Errorf("--duration not set: how long requests arrive, in virtual time (e.g. 60s; --arrival trace: default its whole span)")
	}
	plan, err := loadPlan(o.Files, o.PlanFile, o.Policy)
	if err != nil {
		return err
	}
	if o.Place {
		// Run on the devices placement packs the plan onto, so
		// modules sharing a device contend for its lanes.
		if plan, _, err = placement.Place(plan, nil, nil, placement.Options{Provision: true}); err != nil {
			return err
		}
	}
	r, err := Run(plan, o.Options)
	if err != nil {
		return err
	}
	if o.Output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.WriteTable(w)
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
	plan, err := planner.Plan(cfg, planner.Options{Policy: policy})
	if plan == nil {
		return nil, err
	}
	// Sessions that could not be planned are reported as skipped; the rest run.
	return plan, nil
}
