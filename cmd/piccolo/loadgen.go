package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/loadgen"
)

func newLoadgenCmd() *cobra.Command {
	var (
		o     loadgen.CommandOptions
		quiet bool
	)
	cmd := &cobra.Command{
		Use:   "loadgen --target URL|ADDR --session S (--rate R | --arrival mmpp ... | --arrival trace --trace FILE)",
		Short: "Send open-loop inference load to a session and report latency, goodput and errors",
		Long: `loadgen sends KServe v2 inference requests to one session at the times an arrival
process dictates (constant, poisson or gamma with --cv2 at --rate; mmpp bursts; or the
replay of a recorded trace), whatever the replies: a slow server never slows the
sends (open loop). Sends stop after --duration; replies still
missing --drain later count as "timeout". At most --max-inflight requests are
outstanding; a request due beyond that is counted as "dropped: client overload".
Sends the scheduler released late (a loaded client) are counted as late sends.

HTTP: POST {target}/v2/models/{session}/infer. gRPC: inference.GRPCInferenceService
ModelInfer at host:port.

Inputs (--input, repeatable, cycled over the requests): a KServe v2 JSON request
body, a .png/.jpg image (sent as a BYTES tensor named --input-name of shape [1];
over HTTP with Triton's binary-data extension), or a directory of them. Without
--input the model metadata's declared inputs are sent as zeros (dimension 0 = 1).

--arrival mmpp alternates bursts at --burst-rate (mean length --burst-length) with
quiet spells at --quiet-rate (mean length --quiet-length); --arrival trace sends at the
times of --trace FILE (a CSV with a header and a timestamp column, or one offset in
seconds per line; see docs/traffic.md), from --skip on, --speed times faster, for
--duration (default: the whole trace).

The SLO for goodput and attainment is --slo, else the gateway's model metadata
parameter slo_ms (HTTP), else n/a. The report (-o table or json) gives sent,
completed, ok, errors by kind, throughput, goodput, SLO attainment, nearest-rank
p50/p90/p99/p99.9/max latency of successful requests, and late sends; --plot
writes their latency CDF (.png, .svg or .pdf).`,
		Example: `  piccolo loadgen --target http://127.0.0.1:8000 --session traffic --rate 100 --duration 30s --slo 400ms
  piccolo loadgen --target http://127.0.0.1:8000 --session traffic --arrival trace --trace arrivals.csv --speed 2
  piccolo loadgen --target 127.0.0.1:8001 --protocol grpc --session ocr --rate 20 --arrival gamma --cv2 4 \
      --input testdata/images -o json --plot cdf.png`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.RateGiven, o.DurationGiven = cmd.Flags().Changed("rate"), cmd.Flags().Changed("duration")
			if w := cmd.ErrOrStderr(); !quiet && isTerminal(w) {
				o.Progress = w
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return loadgen.Command(ctx, cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Target, "target", "", "server: http://host:port[/base] or host:port (HTTP), host:port (gRPC)")
	f.StringVar(&o.Protocol, "protocol", "http", "protocol: "+loadgen.Protocols)
	f.StringVar(&o.Session, "session", "", "session (the model name the gateway exposes)")
	f.Float64Var(&o.Rate, "rate", 0, "mean request rate, req/s (constant, poisson, gamma)")
	f.StringVar(&o.Arrival, "arrival", "poisson", "arrival process: "+arrival.Kinds)
	f.Float64Var(&o.CV2, "cv2", 1, "with --arrival gamma: squared coefficient of variation of the inter-arrival gaps (1 is Poisson, >1 is burstier)")
	f.Uint64Var(&o.Seed, "seed", 1, "arrival process seed (same seed, same schedule)")
	addTrace(f, &o.Source, nil)
	addMMPP(f, &o.Source.MMPP)
	f.DurationVar(&o.Duration, "duration", loadgenDefault.Duration, "how long to send (a trace: default its whole span)")
	f.DurationVar(&o.Drain, "drain", loadgenDefault.Drain, "how long to wait for replies after the last send; still missing then: timeout")
	f.DurationVar(&o.Timeout, "timeout", loadgenDefault.Timeout, "per-request client timeout")
	f.IntVar(&o.MaxInflight, "max-inflight", loadgenDefault.MaxInflight, "at most this many outstanding requests; beyond: dropped (client overload)")
	f.BoolVar(&o.PerSecond, "per-second", false, "also split the report by the second each request was due in (json: seconds; table: the seconds with a miss)")
	f.DurationVar(&o.SLO, "slo", 0, "latency objective for goodput and attainment (default: the model metadata's slo_ms)")
	f.StringArrayVar(&o.InputFiles, "input", nil, "request input: KServe v2 JSON body, .png/.jpg image, or a directory (repeatable; cycled)")
	f.StringVar(&o.InputName, "input-name", "image", "tensor name for image inputs")
	f.StringVarP(&o.Output, "output", "o", "table", "output format: table or json")
	f.StringVar(&o.Plot, "plot", "", "write the latency CDF to this file (.png, .svg, .pdf)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar (it is also off when stderr is not a terminal)")
	_ = cmd.MarkFlagRequired("target")
	_ = cmd.MarkFlagRequired("session")
	return cmd
}

// loadgenDefault holds the defaults of the loadgen flags.
var loadgenDefault = loadgen.Options{Duration: 10 * time.Second, Drain: 10 * time.Second, Timeout: 10 * time.Second, MaxInflight: 10000}
