package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/profiler"
)

func newProfileCmd() *cobra.Command {
	var (
		o     profiler.CommandOptions
		quiet bool
	)
	cmd := &cobra.Command{
		Use:   "profile --target ADDR --model M --hardware NAME --batches 1,2,4,8 [--concurrency 1,2]",
		Short: "Measure a model's profile (batch, concurrency → duration) against a KServe v2 server",
		Long: `profile measures how long one batch of a model takes on a KServe v2 gRPC server
(piccolo backend, or Triton in explicit model-control mode) at every (batch,
concurrency) point asked, and writes the profile YAML the planner reads.

For each concurrency c it loads the model with max batch = the largest --batches and
concurrency c (RepositoryModelLoad parameters "batch" and "concurrency"; --no-load
keeps the server's own configuration). For each batch b it sends one request of b
rows: zeros of the model metadata's inputs (-1 dimensions set to 1), or the rows of
--input repeated to b. c workers keep exactly c requests in flight (closed loop):
first --warmup calls each (cut short after --warmup-time), not recorded, then calls
for --duration, each latency recorded.

The profile duration of a point is the --percentile-th percentile of its call
latencies, p90 by default: the planner's worst-case latency needs a duration that a
batch rarely exceeds, and p99 is too noisy for runs of seconds on a shared machine.

Output: the YAML (profiles:, and hardware: when --price is given) to -o FILE or
stdout; a table of batch, concurrency, calls, p50/p90/p99/max latency, c·b/d and
measured items/s on stderr; a progress bar over the points on stderr unless -q or
stderr is not a terminal. A model that was not loaded is unloaded at the end.`,
		Example: `  piccolo profile --target 127.0.0.1:9101 --model resnet50 --hardware v100 --price 3.06 \
      --batches 1,2,4,8,16 --concurrency 1,2 --duration 10s -o resnet50-v100.yaml
  piccolo profile --target 127.0.0.1:8001 --model ocr-det --hardware cpu-2c --batches 1,2 \
      --input page.png --input-name x`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Stdout, o.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if w := cmd.ErrOrStderr(); !quiet && isTerminal(w) && o.AccuracyDir == "" {
				o.Progress = w
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return profiler.Command(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Target, "target", "", "KServe v2 gRPC server, host:port")
	f.StringVar(&o.Model, "model", "", "model to profile, as the server names it")
	f.StringVar(&o.Hardware, "hardware", "", "hardware type the server runs on (the profile's hardware, e.g. v100)")
	f.Float64Var(&o.Price, "price", 0, "also write a hardware entry {name: --hardware, price: P} (cost units per machine-hour)")
	f.StringVar(&o.BatchList, "batches", "1,2,4,8", "batch sizes to measure, comma-separated")
	f.StringVar(&o.ConcurrencyList, "concurrency", "1", "concurrencies (lanes) to measure, comma-separated")
	f.DurationVar(&o.Duration, "duration", profiler.DefaultDuration, "measuring time per point, warm-up excluded")
	f.IntVar(&o.Warmup, "warmup", profiler.DefaultWarmup, "unrecorded warm-up calls per worker before each point (0: none)")
	f.DurationVar(&o.WarmupTime, "warmup-time", profiler.DefaultWarmupTime, "cut a point's warm-up short after this long (at least one call per worker)")
	f.Float64Var(&o.Percentile, "percentile", profiler.DefaultPercentile, "latency percentile recorded as the profile duration")
	f.DurationVar(&o.Timeout, "timeout", profiler.DefaultTimeout, "per-call timeout (load, metadata, inference)")
	f.StringArrayVar(&o.InputFiles, "input", nil, "request rows: KServe v2 JSON body, .png/.jpg image (a BYTES tensor), or a directory (repeatable)")
	f.StringVar(&o.InputName, "input-name", "image", "tensor name for image inputs")
	f.BoolVar(&o.NoLoad, "no-load", false, "do not load the model: profile the server's current configuration (concurrency = calls in flight)")
	f.StringVarP(&o.Output, "output", "o", "", "write the profile YAML to this file (default: stdout)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar (it is also off when stderr is not a terminal)")
	f.StringVar(&o.AccuracyDir, "accuracy", "", "measure accuracy instead of durations: a directory of images and "+profiler.LabelsFile+" (<file>\\t<text> per line); --model must read an image and answer text")
	f.StringVar(&o.ProfileFile, "profile-file", "", "with --accuracy: write the accuracy into this config file's profiles of --variant (on --hardware, when given)")
	f.StringVar(&o.Variant, "variant", "", "with --accuracy: the model whose profile gets the accuracy (default --model)")
	f.StringVar(&o.OutputTensor, "output-name", "text", "with --accuracy: the BYTES output holding the text read")
	f.StringVar(&o.Joint, "joint", "", "with --accuracy and --profile-file: the variant combination the session --model is serving, as MODULE=VARIANT,... for every module with variants; the accuracy is written as that combination's joint_accuracy in the file's session --model (docs/variants.md)")
	_ = cmd.MarkFlagRequired("target")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}
