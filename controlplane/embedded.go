package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
	"go.uber.org/zap"
)

// Planner makes a plan for a config: scheduler.Plan, or PlanForServing (the
// serving planner of `piccolo gateway`). A plan may carry per-session
// errors (sessions it could not plan); err is for a config it could not plan at
// all. Called from ConfigStore.Update's goroutine, one call at a time.
type Planner func(cfg *api.Config) (*api.Plan, error)

// EmbeddedControl is the Control of `piccolo gateway` without --consul (the
// scheduler inside the gateway; StartEmbedded makes one). Its Apply re-plans
// the new config, refuses it if a session that was planned before, or that the
// change adds or modifies, cannot be planned now (PlanChange), then swaps the
// plan (LiveSwitch.Apply) and the sessions (DAGRunner.SetSessions) in, and
// records the plan in Metrics. Tests may build one directly from its fields.
type EmbeddedControl struct {
	Planner   Planner
	Switch    *dataplane.LiveSwitch
	DAGRunner *gateway.DAGRunner
	Metrics   *metrics.Metrics // optional
	Logger    *zap.Logger      // optional: one info line per applied change
}

// Apply is an OnConfig.
func (c *EmbeddedControl) Apply(ctx context.Context, cfg *api.Config, cause string) error {
	if c.Planner == nil || c.Switch == nil || c.DAGRunner == nil {
		return errors.New("controlplane: EmbeddedControl needs a Planner, a Switch and a DAGRunner")
	}
	start := time.Now()
	plan, err := PlanChange(c.Planner, cfg, c.Switch.Plan(), c.Switch.Config())
	if err != nil {
		return err
	}
	took := time.Since(start)
	if err := c.Switch.Apply(ctx, cfg, plan); err != nil {
		return fmt.Errorf("place the new plan: %w", err)
	}
	// The runner knows every session of the new config before the DAGRunner
	// serves them; a session removed is still served by the draining runner for
	// requests that started before.
	if err := c.DAGRunner.SetSessions(cfg.Sessions); err != nil {
		return fmt.Errorf("serve the new sessions: %w", err) // cannot happen for a valid config
	}
	if c.Metrics != nil {
		c.Metrics.SetDAGRunner(c.DAGRunner)
		_ = c.Metrics.SetPlan(plan, cause, took)
		c.Metrics.SetMembership(cfg.Backends)
	}
	if c.Logger != nil {
		c.Logger.Info("new plan live", zap.String("cause", cause), zap.Float64("plan_cost", plan.TotalCost),
			zap.Duration("planner_runtime", took), zap.Duration("took", time.Since(start)), zap.Strings("sessions", c.DAGRunner.Sessions()))
	}
	return nil
}

// PlanChange plans cfg, a change of the config prevCfg served by the plan prev,
// and applies the rule a change must pass before it goes live: every session
// that the change adds or modifies, or that was planned before, must be
// planned; a session that failed before and is untouched does not refuse the
// change. The error names every refused session and why (the admin API
// answers 422); on success the plan is returned. Used by EmbeddedControl and
// by the cluster mode's gateways, which refuse a change before storing it.
func PlanChange(planner Planner, cfg *api.Config, prev *api.Plan, prevCfg *api.Config) (*api.Plan, error) {
	plan, err := planner(cfg)
	if plan == nil {
		if err == nil {
			err = errors.New("the planner returned no plan")
		}
		return nil, fmt.Errorf("plan: %w", err)
	}
	var bad []string
	for _, sp := range plan.Sessions {
		if sp.Error == "" {
			continue
		}
		if prev != nil && prevCfg != nil && wasFailing(prev, sp.Name) && !changed(prevCfg, cfg, sp.Name) {
			continue // failing before and untouched: not this change's fault
		}
		bad = append(bad, fmt.Sprintf("session %q cannot be planned: %s", sp.Name, sp.Error))
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return nil, errors.New(strings.Join(bad, "; "))
	}
	return plan, nil
}

func wasFailing(p *api.Plan, session string) bool {
	for _, sp := range p.Sessions {
		if sp.Name == session {
			return sp.Error != ""
		}
	}
	return false
}

// changed reports whether session differs between a and b (or is new in b).
// Sources (file and line) do not count.
func changed(a, b *api.Config, session string) bool {
	sa, okA := a.Session(session)
	sb, okB := b.Session(session)
	if !okA || !okB {
		return true
	}
	if sa.Name != sb.Name || sa.SLO != sb.SLO || len(sa.Modules) != len(sb.Modules) ||
		(sa.Accuracy == nil) != (sb.Accuracy == nil) || (sa.Accuracy != nil && *sa.Accuracy != *sb.Accuracy) {
		return true
	}
	sameVariant := func(x, y api.Variant) bool { return x.Model == y.Model && x.Accuracy == y.Accuracy }
	for i := range sa.Modules {
		ma, mb := sa.Modules[i], sb.Modules[i]
		if ma.Name != mb.Name || ma.Model != mb.Model || ma.Rate != mb.Rate || strings.Join(ma.After, ",") != strings.Join(mb.After, ",") ||
			!slices.EqualFunc(ma.Variants, mb.Variants, sameVariant) {
			return true
		}
	}
	return false
}
