package controlplane

import (
	"context"
	"errors"
	"io"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// GatewayOptions configure StartGateway: the config pipeline's planner and
// fuse step, the live runner's options, and the Control to run.
type GatewayOptions struct {
	Planner Planner   // the plan step (PlanForServing with the gateway's flags)
	Fuse    bool      // the fuse step (off: --no-fusion)
	Fusions io.Writer // told each fusion made (optional)
	Live    dataplane.LiveOptions
	Metrics *metrics.Metrics // optional
	Logger  *zap.Logger      // optional
	// Cluster, when set (--consul), runs ConsulControl with these options
	// (its Fuse and Fusions are set from the fields above); nil runs
	// EmbeddedControl over the config's static backends.
	Cluster *ClusterOptions

	// Tests only: the control loop's and the rate monitor's options, and a
	// hook called with every plan made live.
	Loop    replan.Options
	Monitor replan.MonitorOptions
	OnPlan  func(PlanEvent)
}

// Gateway is a gateway's control plane, started: the Control with its first
// plan live, the DAGRunner over it and the ConfigStore every change goes
// through (the admin API's and the file watcher's).
type Gateway struct {
	Control Control
	Switch  *dataplane.LiveSwitch
	Runner  *gateway.DAGRunner
	Store   *ConfigStore
	// Config is the served config: the -c files fused, or with Cluster the
	// cluster's config, which may differ from the files.
	Config *api.Config
}

// StartGateway starts the Control chosen by o.Cluster on cfg, waits for its
// first plan to be live (Control's doc), builds the DAGRunner and the
// ConfigStore over it and attaches them. Errors: the Control's (a planner that
// makes no plan at all matches ErrNoPlan), or a served config the DAGRunner
// refuses. Sessions the planner could not plan are logged at warn; they answer
// 503 with the reason.
func StartGateway(ctx context.Context, cfg *api.Config, o GatewayOptions) (*Gateway, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	var ctl Control
	if o.Cluster != nil {
		copts := *o.Cluster
		copts.Fuse, copts.Fusions, copts.Loop, copts.Monitor, copts.OnPlan = o.Fuse, o.Fusions, o.Loop, o.Monitor, o.OnPlan
		cc, err := StartConsulControl(ctx, copts, cfg, o.Metrics, o.Logger, o.Live, o.Planner)
		if err != nil {
			return nil, err
		}
		ctl = cc
	} else {
		ec, err := StartEmbedded(ctx, cfg, EmbeddedOptions{Planner: o.Planner, Fuse: o.Fuse, Fusions: o.Fusions, Live: o.Live,
			Metrics: o.Metrics, Logger: o.Logger, Loop: o.Loop, Monitor: o.Monitor, OnPlan: o.OnPlan})
		if err != nil {
			return nil, err
		}
		ctl = ec
	}
	g := &Gateway{Control: ctl, Switch: ctl.LiveSwitch(), Config: ctl.ServedConfig()}
	for _, sp := range g.Switch.Plan().Sessions {
		if sp.Error != "" {
			o.Logger.Warn("session not planned; it will answer 503", zap.String("session", sp.Name), zap.String("reason", sp.Error))
		}
	}
	var err error
	if g.Runner, err = gateway.NewDAGRunner(ctl.Runner(), g.Config.Sessions); err != nil {
		return nil, errors.Join(err, g.close())
	}
	if g.Store, err = NewConfigStore(g.Config, ctl.Apply); err != nil {
		return nil, errors.Join(err, g.close())
	}
	g.Store.SetPlan(g.Switch.Plan)
	ctl.Attach(g.Runner, g.Store)
	return g, nil
}

func (g *Gateway) close() error { return g.Switch.Close() }
