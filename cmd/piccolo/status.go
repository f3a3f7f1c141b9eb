package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/status"
)

// statusOptions are the flags of `piccolo status`.
type statusOptions struct {
	target     string
	window     time.Duration
	timeout    time.Duration
	adminToken string    // bearer token of /admin/; empty: $PICCOLO_ADMIN_TOKEN
	stderr     io.Writer // warnings; nil: os.Stderr
}

func newStatusCmd() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status --target URL [--window D]",
		Short: "Show a gateway's sessions, plan, backends and live SLO attainment",
		Long: `status reads a running gateway and prints, in the terminal:

  the plan: policy, cost (units per hour), age, re-plans by cause, backends by
            hardware type; with Consul, the cluster plan's version and the
            scheduler that published it;
  calibration: per model and device, the profiled and measured (p90) batch
            duration and the batches measured (gateway --calibration;
            docs/calibration.md);
  sessions: SLO, readiness, requests, successes, admission rejections, SLO
            violations, SLO attainment, end-to-end latency p50 and p99;
  modules:  budget and planned WCL, planned request and dummy rates against the
            measured rate, machines by hardware, queue and compute p50, mean
            batch size.

The plan comes from GET /admin/plan (the plan JSON) when the gateway serves it
and accepts the admin token (--admin-token, default $PICCOLO_ADMIN_TOKEN, sent
as Authorization: Bearer), and from the piccolo_plan_* metrics of GET /metrics
otherwise; the first line says which. A gateway that refuses the token (HTTP
401) gets a one-line warning on stderr. With the token, the backends the
gateway serves with come from GET /admin/backends: id, hardware, address, what
the plan placed there, and the membership's source (static or consul) and
whether it is stale. Live figures come
from /metrics: cumulative since the gateway started, or, with --window D, over
the D between two scrapes. Latency percentiles are read from histogram buckets:
"≤256ms" means the bucket that holds the percentile ends at 256 ms.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stderr = cmd.ErrOrStderr()
			return runStatus(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.target, "target", "http://127.0.0.1:8002", "the gateway's admin listener, where /metrics and /admin/ are (--admin-listen; its HTTP address with --admin-listen same), http://host:port or host:port")
	f.DurationVar(&o.window, "window", 0, "measure live figures over this window between two scrapes (0: since the gateway started)")
	f.DurationVar(&o.timeout, "timeout", 5*time.Second, "timeout of each HTTP request")
	f.StringVar(&o.adminToken, "admin-token", "", "bearer token of the gateway's admin API, for /admin/plan and /admin/backends (default: $PICCOLO_ADMIN_TOKEN)")
	return cmd
}

// runStatus runs `piccolo status` with o's flags (package status).
func runStatus(ctx context.Context, o *statusOptions, w io.Writer) error {
	return status.Run(ctx, status.Options{Target: o.target, Window: o.window, Timeout: o.timeout,
		AdminToken: adminToken(o.adminToken), Stderr: o.stderr}, w)
}

// adminTokenEnv names the variable holding the admin API's bearer token when
// --admin-token is not given (piccolo gateway and piccolo status).
const adminTokenEnv = "PICCOLO_ADMIN_TOKEN"

// adminToken is flag, or $PICCOLO_ADMIN_TOKEN when flag is empty.
func adminToken(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(adminTokenEnv)
}
