package main

import (
	"context"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/internal/demo"
)

func newDemoCmd() *cobra.Command {
	var o demo.Options
	cmd := &cobra.Command{
		Use:   "demo [-c FILE...] [--duration 60s] [--serve]",
		Short: "Start backends and a gateway on loopback, load every session, print what it measured",
		Long: `demo runs the main job on its embedded default (or the configs given with -c):
it plans every session, starts the backends the plan needs (sim executors for GPU
types; real ONNX Runtime backends for cpu-<N>t types) and a gateway over them as
child processes on loopback, sends Poisson load at each session's planned rate for
--duration, and prints per session the throughput, p50/p99 latency, SLO attainment,
the plan's cost and the round-robin baseline's. Latency plots and the processes'
logs go to --out. With --serve it keeps everything running and prints the URLs and
a request to paste.

The CPU models are planned as this host runs them, not as the config's profiles
(taken on another machine) say: before the load the demo profiles each CPU model
its plan runs on the backends it started (seconds), or starts from the
calibration its last run's gateway kept (--calibration-file), and prints the
profiled and measured durations side by side (docs/ocr.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			o.Out, o.Log = cmd.OutOrStdout(), cmd.ErrOrStderr()
			_, err := demo.Run(ctx, o)
			return err
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.Files, "config", "c", nil, "config file (repeatable); default: the embedded demo configs")
	f.DurationVar(&o.Duration, "duration", 60*time.Second, "how long to load each session")
	f.BoolVar(&o.Serve, "serve", false, "keep running after the load; print URLs and a curl request")
	f.StringVar(&o.OutDir, "out", "out/demo", "directory for latency plots and process logs")
	f.StringArrayVar(&o.GatewayArgs, "gateway-arg", nil, "one more argument for the demo's gateway, after its own (repeatable; e.g. --gateway-arg=--slack=0 --gateway-arg=--invocation-slack)")
	f.Float64Var(&o.MaxUtilization, "max-utilization", 0, "plan machines to run at most this share of their throughput, in (0,1] (0: the highest whose simulation meets the SLO for 99.9% of Poisson requests)")
	f.StringVar(&o.Policy, "policy", "piccolo", "planning policy the demo plans and its gateway serves with (the baselines with --dispatch rr): "+strings.Join(demo.DemoPolicies, ", "))
	addFusionFlag(f, &o.NoFusion)
	f.IntVar(&o.MaxBackendsPerType, "max-backends", 6, "at most this many backend processes per hardware type")
	f.BoolVar(&o.NoHostProfile, "no-host-profile", false, "plan the CPU models from the config's profiles as written: no profile on this host, no calibration file")
	f.BoolVar(&o.Reprofile, "reprofile", false, "profile the CPU models on this host even when --calibration-file holds them (the file is forgotten)")
	f.StringVar(&o.CalibrationFile, "calibration-file", "", "this host's calibration: read at the start (used when it holds every CPU model of the plan), kept by the gateway for the next run (default <out>/calibration-<hostname>.json)")
	f.BoolVar(&o.NoSpares, "no-spares", false, "start only the planned devices: no idle spare backends of the emulated (sim) types for the gateway's re-plans")
	f.BoolVar(&o.NoSpread, "no-spread", false, "start only the one-lane CPU backends (cpu-<N>t) the plan packs onto: no more, up to the host's cores, for the gateway to spread the plan's fractional machines over (docs/ocr.md, \"One lane, four models\")")
	cmd.SetContext(context.Background())
	return cmd
}
