package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/loadgen"
	"github.com/piccolo-serving/piccolo/profiler"
)

func newProfileCmd() *cobra.Command {
	var (
		o           profiler.Options
		batches     string
		concurrency string
		inputs      []string
		inputName   string
		price       float64
		output      string
		quiet       bool
		acc         accuracyFlags
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
			if acc.dir != "" {
				return runAccuracy(cmd, o, acc, inputName)
			}
			if o.Hardware == "" {
				return fmt.Errorf("--hardware is required: the hardware type the server runs on (the profile's hardware, e.g. v100)")
			}
			var err error
			if o.Batches, err = profiler.ParseSizes("--batches", batches); err != nil {
				return err
			}
			if o.Concurrencies, err = profiler.ParseSizes("--concurrency", concurrency); err != nil {
				return err
			}
			for _, d := range []struct {
				name string
				v    time.Duration
			}{{"--duration", o.Duration}, {"--warmup-time", o.WarmupTime}, {"--timeout", o.Timeout}} {
				if d.v <= 0 {
					return fmt.Errorf("%s %v: must be > 0", d.name, d.v)
				}
			}
			if o.Warmup < 0 {
				return fmt.Errorf("--warmup %d: must be ≥ 0 calls (0: no warm-up)", o.Warmup)
			}
			if !(o.Percentile > 0 && o.Percentile <= 100) {
				return fmt.Errorf("--percentile %v: want 0 < p ≤ 100, such as 90", o.Percentile)
			}
			if price < 0 {
				return fmt.Errorf("--price %v: want a price > 0 per machine-hour (or leave it out to write profiles only)", price)
			}
			if len(inputs) > 0 {
				if o.Inputs, err = loadgen.LoadInputs(inputs, inputName); err != nil {
					return err
				}
			}
			if w := cmd.ErrOrStderr(); !quiet && isTerminal(w) {
				o.Progress = w
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, runErr := profiler.Run(ctx, o)
			if res != nil && len(res.Points) > 0 {
				if err := profiler.WriteTable(cmd.ErrOrStderr(), res); err != nil {
					return err
				}
			}
			if runErr != nil {
				return runErr
			}
			if output == "" || output == "-" {
				return profiler.WriteYAML(cmd.OutOrStdout(), res, price)
			}
			return writeProfileAtomic(output, func(f *os.File) error { return profiler.WriteYAML(f, res, price) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Target, "target", "", "KServe v2 gRPC server, host:port")
	f.StringVar(&o.Model, "model", "", "model to profile, as the server names it")
	f.StringVar(&o.Hardware, "hardware", "", "hardware type the server runs on (the profile's hardware, e.g. v100)")
	f.Float64Var(&price, "price", 0, "also write a hardware entry {name: --hardware, price: P} (cost units per machine-hour)")
	f.StringVar(&batches, "batches", "1,2,4,8", "batch sizes to measure, comma-separated")
	f.StringVar(&concurrency, "concurrency", "1", "concurrencies (lanes) to measure, comma-separated")
	f.DurationVar(&o.Duration, "duration", profiler.DefaultDuration, "measuring time per point, warm-up excluded")
	f.IntVar(&o.Warmup, "warmup", profiler.DefaultWarmup, "unrecorded warm-up calls per worker before each point (0: none)")
	f.DurationVar(&o.WarmupTime, "warmup-time", profiler.DefaultWarmupTime, "cut a point's warm-up short after this long (at least one call per worker)")
	f.Float64Var(&o.Percentile, "percentile", profiler.DefaultPercentile, "latency percentile recorded as the profile duration")
	f.DurationVar(&o.Timeout, "timeout", profiler.DefaultTimeout, "per-call timeout (load, metadata, inference)")
	f.StringArrayVar(&inputs, "input", nil, "request rows: KServe v2 JSON body, .png/.jpg image (a BYTES tensor), or a directory (repeatable)")
	f.StringVar(&inputName, "input-name", "image", "tensor name for image inputs")
	f.BoolVar(&o.NoLoad, "no-load", false, "do not load the model: profile the server's current configuration (concurrency = calls in flight)")
	f.StringVarP(&output, "output", "o", "", "write the profile YAML to this file (default: stdout)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar (it is also off when stderr is not a terminal)")
	f.StringVar(&acc.dir, "accuracy", "", "measure accuracy instead of durations: a directory of images and "+profiler.LabelsFile+" (<file>\\t<text> per line); --model must read an image and answer text")
	f.StringVar(&acc.file, "profile-file", "", "with --accuracy: write the accuracy into this config file's profiles of --variant (on --hardware, when given)")
	f.StringVar(&acc.variant, "variant", "", "with --accuracy: the model whose profile gets the accuracy (default --model)")
	f.StringVar(&acc.output, "output-name", "text", "with --accuracy: the BYTES output holding the text read")
	_ = cmd.MarkFlagRequired("target")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}

// accuracyFlags are profile's --accuracy flags.
type accuracyFlags struct {
	dir, file, variant, output string
}

// runAccuracy measures --model's word accuracy on the labelled set --accuracy
// and, with --profile-file, writes it into the profiles of --variant there.
func runAccuracy(cmd *cobra.Command, o profiler.Options, acc accuracyFlags, inputName string) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := profiler.MeasureAccuracy(ctx, profiler.AccuracyOptions{
		Target: o.Target, Model: o.Model, Dir: acc.dir, InputName: inputName, OutputName: acc.output, Timeout: o.Timeout,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s on %s: word accuracy %d/%d = %.4g, images read exactly %d/%d\n",
		o.Model, acc.dir, res.Matched, res.Words, res.Accuracy(), res.ExactImages, res.Images)
	if acc.file == "" {
		return nil
	}
	variant := acc.variant
	if variant == "" {
		variant = o.Model
	}
	doc, err := os.ReadFile(acc.file)
	if err != nil {
		return fmt.Errorf("--profile-file: %w", err)
	}
	out, err := profiler.SetAccuracy(doc, variant, o.Hardware, res.Accuracy())
	if err != nil {
		return fmt.Errorf("--profile-file %s: %w", acc.file, err)
	}
	return writeProfileAtomic(acc.file, func(f *os.File) error { _, err := f.Write(out); return err })
}

// writeProfileAtomic writes path through a temporary file in the same directory and
// renames it into place, so a failed run never leaves half a profile.
func writeProfileAtomic(path string, write func(*os.File) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("-o %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("-o %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("-o %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("-o %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("-o %s: %w", path, err)
	}
	return nil
}
