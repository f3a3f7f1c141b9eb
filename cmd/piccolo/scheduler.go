package main

import (
	"context"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	schedulerprocess "github.com/piccolo-serving/piccolo/scheduler/process"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/serving"
)

// schedulerOptions are the flags of `piccolo scheduler`.
type schedulerOptions struct {
	files        []string
	consul       string
	consulAuth   membership.ConsulAuth
	backendToken string
	prefix       string
	id           string
	ttl          time.Duration
	policy       string
	maxUtil      float64
	burst        float64
	logFmt       string
	listen       string
	follow       bool // --calibration
	chains       bool // --keep-chains

	loop replan.Options // tests: the control loop's tuning
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
not read again. With --listen, GET /metrics (piccolo_replanner_leader) and
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
	addConsulAuthFlags(f, &o.consulAuth)
	f.StringVar(&o.backendToken, "backend-token", "", "the credential every backend's Consul registration must carry (its HMAC; backends started with the same --admin-token make it); a backend without it is not placed on (default: $"+backendTokenEnv+")")
	f.StringVar(&o.prefix, "cluster-prefix", cluster.DefaultPrefix, "the Consul KV prefix of the cluster")
	f.StringVar(&o.id, "id", "", "this candidate's id, unique in the cluster (default scheduler-<host>-<pid>)")
	f.DurationVar(&o.ttl, "ttl", cluster.DefaultTTL, "how long the leader may miss heartbeats before a standby takes over (>= 1s)")
	f.StringVar(&o.policy, "policy", "piccolo", "planning policy: "+strings.Join(planner.Policies, ", "))
	f.Float64Var(&o.maxUtil, "max-utilization", 0, "plan machines to run at most this share of their throughput, in (0,1] (0: choose it by simulation, see --burst-target)")
	f.Float64Var(&o.burst, "burst-target", serving.DefaultBurstTarget, "with --max-utilization 0: the share of simulated Poisson requests that must meet the SLO")
	f.StringVar(&o.logFmt, "log", logFormats.Names()[0], logFlagHelp)
	f.StringVar(&o.listen, "listen", "", "serve /metrics and /healthz on this host:port; off (or empty, the default): none")
	f.BoolVar(&o.chains, "keep-chains", false, "place each chain's fractional machines on one device, for gateways that hold intermediates on the backend (their --locality-bytes; docs/locality.md)")
	f.BoolVar(&o.follow, "calibration", true, "while leading, plan and re-plan (drift, co-location) from every gateway's calibration in Consul KV, merged (docs/calibration.md, \"Cluster\"); false: the offline profiles only")
	return cmd
}

// runScheduler campaigns until ctx ends (scheduler/process.Run). ready
// gets the metrics address ("" without --listen).
func runScheduler(ctx context.Context, o *schedulerOptions, ready func(metricsAddr string)) error {
	if o.follow && o.loop.Calibration == nil {
		// Measures nothing itself: the leader's view is the gateways' (cluster.Followed).
		est, err := calibrate.New(calibrate.Options{})
		if err != nil {
			return err
		}
		o.loop.Calibration = est
	}
	o.loop.Chains = o.loop.Chains || o.chains
	return schedulerprocess.Run(ctx, schedulerprocess.Options{Files: o.files, Consul: o.consul, Prefix: o.prefix, ID: o.id, TTL: o.ttl,
		Policy: o.policy, MaxUtil: o.maxUtil, Burst: o.burst, Listen: o.listen, NewLogger: newLogger(o.logFmt), Loop: o.loop,
		ConsulAuth: o.consulAuth, BackendToken: backendToken(o.backendToken)}, ready)
}
