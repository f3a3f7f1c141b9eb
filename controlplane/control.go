package controlplane

import (
	"context"
	"errors"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
)

// Control makes a gateway's plan and config live. `piccolo gateway` picks one
// by flag: EmbeddedControl (the re-planner inside the gateway, static backends)
// or ConsulControl (--consul: the plan the cluster's re-planner publishes).
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
	// and ServedConfig, before the DAGRunner serves; later changes update
	// both, and the control observes the DAGRunner's arrivals
	// (DAGRunner.ObserveArrivals) for its rate monitor.
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

// Members implements Control: the Consul membership.
func (cc *ConsulControl) Members() func() BackendView { return cc.Backends }

// StepDown implements Control (WaitStepDown).
func (cc *ConsulControl) StepDown(timeout time.Duration) { cc.WaitStepDown(timeout) }
