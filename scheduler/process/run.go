package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/serving"
)

// Options are `piccolo scheduler`'s settings, one field per flag
// (named in the comments); Run checks them.
type Options struct {
	Files   []string      // -c: config files seeding the cluster's config (merged)
	Consul  string        // --consul: the Consul agent's HTTP host:port (required)
	Prefix  string        // --cluster-prefix: the Consul KV prefix of the cluster
	ID      string        // --id: the candidate's id ("": scheduler-<host>-<pid>)
	TTL     time.Duration // --ttl: heartbeat TTL, ≥ 1 s
	Policy  string        // --policy: a name of planner.Policies
	MaxUtil float64       // --max-utilization, in (0,1]; 0: chosen by simulation
	Burst   float64       // --burst-target: simulated share of requests within the SLO
	Listen  string        // --listen: /metrics and /healthz host:port; off/"": none
	// NewLogger makes the process's logger (--log); required.
	NewLogger func() (*zap.Logger, error)

	Loop replan.Options // tests: the control loop's tuning

	// ConsulAuth: --consul-token, --consul-cacert, ... (the CONSUL_*
	// environment for what is not given); BackendToken (--backend-token):
	// the credential every backend's registration must carry (none: any).
	ConsulAuth   membership.ConsulAuth
	BackendToken string
}

// Run runs a standalone re-planner candidate of a Consul cluster
// (`piccolo scheduler`, cluster.Replanner: the elected one plans with
// serving.Plan, places and publishes) until ctx ends, then returns its
// result (nil once it has stepped down). ready, when set, is called with the
// metrics address ("" without o.Listen) once it campaigns. Errors, each
// naming its flag: no --consul or -c, a TTL under 1 s, a config with no
// sessions, an unknown policy, or a listener that cannot bind.
func Run(ctx context.Context, o Options, ready func(metricsAddr string)) error {
	if o.Consul == "" {
		return errors.New("--consul is required: the Consul agent's HTTP address host:port, as given to piccolo gateway and backend")
	}
	if len(o.Files) == 0 {
		return errors.New("no config given: pass -c FILE (repeatable) with the hardware, profiles and sessions that seed the cluster's config")
	}
	if o.TTL < time.Second {
		return fmt.Errorf("--ttl %v: must be at least 1s (Consul's TTL check resolution)", o.TTL)
	}
	cfg, err := api.Load(o.Files...)
	if err != nil {
		return err
	}
	if len(cfg.Sessions) == 0 {
		return errors.New("the config has no sessions: nothing to schedule")
	}
	if !slices.Contains(planner.Policies, o.Policy) {
		return fmt.Errorf("--policy %q: allowed: %s", o.Policy, strings.Join(planner.Policies, ", "))
	}
	log, err := o.NewLogger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	kv, err := cluster.New(o.Consul, cluster.Options{Prefix: o.Prefix, Logger: log, Auth: o.ConsulAuth, BackendToken: o.BackendToken})
	if err != nil {
		return fmt.Errorf("--consul %s: %w", o.Consul, err)
	}
	id := o.ID
	if id == "" {
		id = "scheduler-" + cluster.DefaultID()
	}
	planOpts := planner.Options{Policy: o.Policy, MaxUtilization: o.MaxUtil}
	sched, err := cluster.NewReplanner(kv, cluster.ReplannerOptions{ID: id, Seed: cfg, TTL: o.TTL, Logger: log, Loop: o.Loop,
		Plan: serving.Options{Scheduler: planOpts, BurstTarget: o.Burst}.Planner()})
	if err != nil {
		return err
	}
	addr := ""
	if !metrics.ListenOff(o.Listen) {
		reg := metrics.ProcessRegistry()
		reg.MustRegister(metrics.LeaderGauge(sched.Leading))
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", o.Listen, err)
		}
		defer metrics.Serve(ln, reg, map[string]http.HandlerFunc{"/healthz": func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "ok leader=%v\n", sched.Leading())
		}}).Close()
		addr = ln.Addr().String()
	}
	log.Info("scheduler candidate running", zap.String("id", id), zap.String("consul", o.Consul), zap.String("lock", kv.LockKey()))
	if ready != nil {
		ready(addr)
	}
	err = sched.Run(ctx)
	log.Info("scheduler candidate stopped", zap.String("id", id))
	return err
}
