package controlplane

import (
	"errors"
	"io"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/serving"
)

// Planner is the plan step's strategy: serving.Planner (serving.Options'
// Planner, a serving.TracePlanner's or serving.FilePlanner's Plan).
type Planner = serving.Planner

// Pipeline is the one route of a config change (docs/architecture.md, "Config
// path"): fuse → plan → check → place → apply, each step once per change, the
// plan passed along. The gateway's Control runs the first three here (Fuse,
// Plan, Check) on ConfigStore.Update's goroutine and hands the checked plan to
// the control loop (replan.Controller.SetPlanned), which places it
// and applies it through its replan.Target (EmbeddedControl: LiveSwitch.Apply). A rate
// re-plan enters at Plan: the control loop's planner is Pipeline.Plan. Every
// entry (admin API, -c file watcher, Consul KV, the rate controller) takes this
// route. A Pipeline is immutable and safe from any goroutine.
type Pipeline struct {
	// Planner is the plan step (policy, variants, burst headroom, the
	// pool): serving.Plan with the gateway's options.
	Planner Planner
	// NoFusion skips the fuse step (--no-fusion).
	NoFusion bool
	// Fusions, when set, is told each fusion made, one line each.
	Fusions io.Writer
}

// Fuse is the fuse step: cfg with the planner's fusion decision applied
// (serving.Fuse, docs/fusion.md), each fusion named on p.Fusions; cfg itself
// with NoFusion. Errors only when the planner makes no plan at all.
func (p Pipeline) Fuse(cfg *api.Config) (*api.Config, error) {
	if p.NoFusion {
		return cfg, nil
	}
	return serving.Fuse(cfg, p.Planner, p.Fusions)
}

// Plan is the plan step: the planner's plan for cfg, unplaced. A nil plan is
// an error matching ErrNoPlan; a plan whose sessions partly failed comes with
// the planner's error for them.
func (p Pipeline) Plan(cfg *api.Config) (*api.Plan, error) {
	plan, err := p.Planner(cfg)
	if plan == nil {
		if err == nil {
			err = errors.New("the planner returned no plan")
		}
		return nil, noPlanError{err}
	}
	return plan, err
}
