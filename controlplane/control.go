package controlplane

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
)

// Control makes a gateway's plan and config live. `piccolo gateway` picks one
// by flag: EmbeddedControl (the scheduler inside the gateway, static backends)
// or ConsulControl (--consul: the plan the cluster's scheduler publishes).
//
// The wiring starts it (StartEmbedded, StartConsulControl), which returns once
// a first plan is live on LiveSwitch; builds the DAGRunner over Runner with
// ServedConfig's sessions and the ConfigStore over ServedConfig with Apply as
// its OnConfig; then hands both over with Attach. Apply runs on
// ConfigStore.Update's goroutine, one call at a time; Runner is on the request
// path; the other methods may be called from any goroutine.
type Control interface {
	// LiveSwitch is the live switch serving the current plan (also the
	// Prometheus collector of the dispatchers' metrics).
	LiveSwitch() *dataplane.LiveSwitch
	// Runner is the ModuleRunner the DAGRunner runs modules on.
	Runner() gateway.ModuleRunner
	// ServedConfig is the config of the first live plan: what the DAGRunner
	// and the ConfigStore start with.
	ServedConfig() *api.Config
	// Attach hands over the DAGRunner and the ConfigStore built over Runner
	// and ServedConfig; later changes update both.
	Attach(exec *gateway.DAGRunner, store *ConfigStore)
	// Apply is the ConfigStore's OnConfig: make cfg live or fail without side
	// effects.
	Apply(ctx context.Context, cfg *api.Config, cause string) error
	// Members is the admin API's membership view (AdminOptions.Backends);
	// nil: the running config's static backends.
	Members() func() BackendView
	// StepDown waits, up to timeout, for what the control runs in the
	// background to let go of shared state after the gateway's context ended
	// (ConsulControl: the scheduler lock).
	StepDown(timeout time.Duration)
}

var (
	_ Control = (*EmbeddedControl)(nil)
	_ Control = (*ConsulControl)(nil)
)

// ErrNoPlan matches the error of StartEmbedded when the planner made no plan
// at all; its message is the planner's.
var ErrNoPlan = errors.New("no plan")

type noPlanError struct{ err error }

func (e noPlanError) Error() string        { return e.err.Error() }
func (e noPlanError) Unwrap() error        { return e.err }
func (e noPlanError) Is(target error) bool { return target == ErrNoPlan }

// EmbeddedOptions configure StartEmbedded.
type EmbeddedOptions struct {
	Planner Planner
	Live    dataplane.LiveOptions
	Metrics *metrics.Metrics // optional
	Logger  *zap.Logger      // optional
}

// StartEmbedded plans cfg, places the plan on cfg's static backends
// (dataplane.Place: with fewer backends than machines, machines share
// backends round-robin, logged at warn), loads its models and returns the
// control with the plan live. A planner that makes no plan fails with an
// error matching ErrNoPlan.
func StartEmbedded(ctx context.Context, cfg *api.Config, opts EmbeddedOptions) (*EmbeddedControl, error) {
	if opts.Planner == nil {
		return nil, errors.New("controlplane: StartEmbedded needs a Planner")
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	planStart := time.Now()
	plan, planErr := opts.Planner(cfg)
	if plan == nil {
		if planErr == nil {
			planErr = errors.New("the planner returned no plan")
		}
		return nil, noPlanError{planErr}
	}
	if err := opts.Metrics.SetPlan(plan, "initial", time.Since(planStart)); err != nil {
		return nil, err
	}
	opts.Metrics.SetMembership(cfg.Backends)
	if _, shared, err := dataplane.Place(plan, cfg.Backends); err != nil {
		return nil, err
	} else if shared > 0 {
		log.Warn("fewer backends than planned machines: some machines share a backend", zap.Int("shared_machines", shared))
	}
	sw, err := dataplane.NewLiveSwitch(ctx, cfg, plan, opts.Live)
	if err != nil {
		return nil, err
	}
	sw.ReplaceOnEjection() // static backends: health checks, and an ejected backend's share re-placed on the others
	return &EmbeddedControl{Planner: opts.Planner, Switch: sw, Metrics: opts.Metrics, Logger: opts.Logger}, nil
}

// LiveSwitch implements Control.
func (c *EmbeddedControl) LiveSwitch() *dataplane.LiveSwitch { return c.Switch }

// Runner implements Control: the live switch itself.
func (c *EmbeddedControl) Runner() gateway.ModuleRunner { return c.Switch }

// ServedConfig implements Control: the config of the live plan.
func (c *EmbeddedControl) ServedConfig() *api.Config { return c.Switch.Config() }

// Attach implements Control. Call it before the ConfigStore's first Update.
func (c *EmbeddedControl) Attach(exec *gateway.DAGRunner, _ *ConfigStore) { c.DAGRunner = exec }

// Members implements Control: nil, the admin API lists the config's backends.
func (c *EmbeddedControl) Members() func() BackendView { return nil }

// StepDown implements Control: nothing runs in the background.
func (c *EmbeddedControl) StepDown(time.Duration) {}

// Members implements Control: the Consul membership.
func (cc *ConsulControl) Members() func() BackendView { return cc.Backends }

// StepDown implements Control (WaitStepDown).
func (cc *ConsulControl) StepDown(timeout time.Duration) { cc.WaitStepDown(timeout) }
