package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/scheduler"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// schedulerOptions are the flags of `piccolo scheduler`.
type schedulerOptions struct {
	files   []string
	consul  string
	prefix  string
	id      string
	ttl     time.Duration
	policy  string
	maxUtil float64
	burst   float64
	logFmt  string
	listen  string
	follow  bool // --calibration

	control replan.Options // tests: the control loop's tuning
}

func newSchedulerCmd() *cobra.Command {
	o := &schedulerOptions{}
	cmd := &cobra.Command{
		Use:   "scheduler --consul ADDR -c FILE...",
		Short: "Run for the cluster's scheduler: plan, place and publish plans in Consul for every gateway",
		Long: `scheduler is a standalone scheduler candidate of a Consul cluster
(docs/control-plane.md, "Distribution"). Candidates — this command, and every
piccolo gateway --consul without --schedule=false — elect one leader with a
Consul lock under --cluster-prefix. The leader re-plans and places on a
membership change, a sustained rate change reported by the gateways, a change of
the cluster's config and periodically, and publishes each plan in Consul KV,
where every gateway picks it up and swaps it in. A standby waits on the lock and
takes over when the leader stops (at once) or dies (after --ttl).

The -c files seed the cluster's config (hardware, profiles, sessions) when
Consul holds none yet; once it does, that config is planned and the files are
not read again. With --listen, GET /metrics (piccolo_scheduler_leader) and
GET /healthz are served there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runScheduler(ctx, o, func(addr string) {
				if addr != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "piccolo scheduler: /metrics on %s\n", addr)
				}
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "config", "c", nil, "config file seeding the cluster's config (repeatable; files are merged)")
	f.StringVar(&o.consul, "consul", "", "the Consul agent's HTTP address host:port (required)")
	f.StringVar(&o.prefix, "cluster-prefix", cluster.DefaultPrefix, "the Consul KV prefix of the cluster")
	f.StringVar(&o.id, "id", "", "this candidate's id, unique in the cluster (default scheduler-<host>-<pid>)")
	f.DurationVar(&o.ttl, "ttl", cluster.DefaultTTL, "how long the leader may miss heartbeats before a standby takes over (>= 1s)")
	f.StringVar(&o.policy, "policy", "piccolo", "planning policy: "+strings.Join(scheduler.Policies, ", "))
	f.Float64Var(&o.maxUtil, "max-utilization", 0, "plan machines to run at most this share of their throughput, in (0,1] (0: choose it by simulation, see --burst-target)")
	f.Float64Var(&o.burst, "burst-target", controlplane.DefaultBurstTarget, "with --max-utilization 0: the share of simulated Poisson requests that must meet the SLO")
	f.StringVar(&o.logFmt, "log", logFormats.Names()[0], logFlagHelp)
	f.StringVar(&o.listen, "listen", "", "serve /metrics and /healthz on this host:port; off (or empty, the default): none")
	f.BoolVar(&o.follow, "calibration", true, "while leading, plan and re-plan (drift, co-location) from every gateway's calibration in Consul KV, merged (docs/calibration.md, \"Cluster\"); false: the offline profiles only")
	return cmd
}

// runScheduler campaigns until ctx ends. ready gets the metrics address ("" without --listen).
func runScheduler(ctx context.Context, o *schedulerOptions, ready func(metricsAddr string)) error {
	if o.consul == "" {
		return errors.New("--consul is required: the Consul agent's HTTP address host:port, as given to piccolo gateway and backend")
	}
	if len(o.files) == 0 {
		return errors.New("no config given: pass -c FILE (repeatable) with the hardware, profiles and sessions that seed the cluster's config")
	}
	if o.ttl < time.Second {
		return fmt.Errorf("--ttl %v: must be at least 1s (Consul's TTL check resolution)", o.ttl)
	}
	logFmt, err := parseLogFormat(o.logFmt)
	if err != nil {
		return err
	}
	cfg, err := api.Load(o.files...)
	if err != nil {
		return err
	}
	if len(cfg.Sessions) == 0 {
		return errors.New("the config has no sessions: nothing to schedule")
	}
	if !slices.Contains(scheduler.Policies, o.policy) {
		return fmt.Errorf("--policy %q: allowed: %s", o.policy, strings.Join(scheduler.Policies, ", "))
	}
	log, err := logFmt.New()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	kv, err := cluster.New(o.consul, cluster.Options{Prefix: o.prefix, Logger: log})
	if err != nil {
		return fmt.Errorf("--consul %s: %w", o.consul, err)
	}
	id := o.id
	if id == "" {
		id = "scheduler-" + cluster.DefaultID()
	}
	if o.follow && o.control.Calibration == nil {
		// Measures nothing itself: the leader's view is the gateways' (cluster.Followed).
		est, err := calibrate.New(calibrate.Options{})
		if err != nil {
			return err
		}
		o.control.Calibration = est
	}
	planOpts := scheduler.Options{Policy: o.policy, MaxUtilization: o.maxUtil}
	sched, err := cluster.NewReplanner(kv, cluster.ReplannerOptions{ID: id, Seed: cfg, TTL: o.ttl, Logger: log, Control: o.control,
		Plan: func(c *api.Config) (*api.Plan, error) { return controlplane.PlanForServing(c, planOpts, o.burst) }})
	if err != nil {
		return err
	}
	addr := ""
	if !listenOff(o.listen) {
		reg := processRegistry()
		reg.MustRegister(metrics.LeaderGauge(sched.Leading))
		ln, err := net.Listen("tcp", o.listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", o.listen, err)
		}
		defer serveMetrics(ln, reg, map[string]http.HandlerFunc{"/healthz": func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "ok leader=%v\n", sched.Leading())
		}}).Close()
		addr = ln.Addr().String()
	}
	log.Info("scheduler candidate running", zap.String("id", id), zap.String("consul", o.consul), zap.String("lock", kv.LockKey()))
	if ready != nil {
		ready(addr)
	}
	err = sched.Run(ctx)
	log.Info("scheduler candidate stopped", zap.String("id", id))
	return err
}
