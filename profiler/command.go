package profiler

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/piccolo-serving/piccolo/loadgen"
)

// CommandOptions are `piccolo profile`'s settings, one field per flag: the
// run's Options (Batches, Concurrencies and Inputs are set by Command from
// the fields below) and the command's own.
type CommandOptions struct {
	Options
	BatchList       string   // --batches: batch sizes, comma-separated
	ConcurrencyList string   // --concurrency: concurrencies (lanes), comma-separated
	InputFiles      []string // --input: request rows (JSON body, image, or a directory)
	InputName       string   // --input-name: tensor name of image inputs
	Price           float64  // --price: also write a hardware entry (cost units per machine-hour); 0: none
	Output          string   // -o: the profile YAML file; "" or "-": Stdout

	// --accuracy: measure accuracy instead of durations.
	AccuracyDir  string // --accuracy: images and LabelsFile
	ProfileFile  string // --profile-file: write the accuracy into this config file
	Variant      string // --variant: the model whose profile gets it ("": Model)
	Joint        string // --joint: MODULE=VARIANT,...: write a joint accuracy of session Model instead
	OutputTensor string // --output-name: the BYTES output holding the text read

	Stdout, Stderr io.Writer // the YAML (or the accuracy line); the table
}

// Command runs `piccolo profile` as o says: with AccuracyDir, the accuracy
// measurement (MeasureAccuracy, written into ProfileFile's profiles of
// Variant); else the duration profile (Run), its table on Stderr and its
// YAML (WriteYAML) on Stdout or, atomically, in Output. Errors name the flag
// that is wrong (a missing --hardware, sizes that do not parse, a duration
// ≤ 0, a percentile outside (0, 100], a negative price, an unreadable
// input), or are the run's; a run that failed part-way still writes the
// table of the points it measured.
func Command(ctx context.Context, o CommandOptions) error {
	if o.AccuracyDir != "" {
		return o.accuracy(ctx)
	}
	if o.Hardware == "" {
		return fmt.Errorf("--hardware is required: the hardware type the server runs on (the profile's hardware, e.g. v100)")
	}
	var err error
	if o.Batches, err = ParseSizes("--batches", o.BatchList); err != nil {
		return err
	}
	if o.Concurrencies, err = ParseSizes("--concurrency", o.ConcurrencyList); err != nil {
		return err
	}
	if err := loadgen.Positive(loadgen.Flag{Name: "--duration", Value: o.Duration}, loadgen.Flag{Name: "--warmup-time", Value: o.WarmupTime},
		loadgen.Flag{Name: "--timeout", Value: o.Timeout}); err != nil {
		return err
	}
	if o.Warmup < 0 {
		return fmt.Errorf("--warmup %d: must be ≥ 0 calls (0: no warm-up)", o.Warmup)
	}
	if !(o.Percentile > 0 && o.Percentile <= 100) {
		return fmt.Errorf("--percentile %v: want 0 < p ≤ 100, such as 90", o.Percentile)
	}
	if o.Price < 0 {
		return fmt.Errorf("--price %v: want a price > 0 per machine-hour (or leave it out to write profiles only)", o.Price)
	}
	if len(o.InputFiles) > 0 {
		if o.Inputs, err = loadgen.LoadInputs(o.InputFiles, o.InputName); err != nil {
			return err
		}
	}
	res, runErr := Run(ctx, o.Options)
	if res != nil && len(res.Points) > 0 {
		if err := WriteTable(o.Stderr, res); err != nil {
			return err
		}
	}
	if runErr != nil {
		return runErr
	}
	if o.Output == "" || o.Output == "-" {
		return WriteYAML(o.Stdout, res, o.Price)
	}
	return writeAtomic(o.Output, func(f *os.File) error { return WriteYAML(f, res, o.Price) })
}

// accuracy measures Model's word accuracy on the labelled set AccuracyDir
// and, with ProfileFile, writes it into the profiles of Variant there, or,
// with Joint, as that variant combination's joint accuracy of session Model.
// The flags are checked before the set is measured.
func (o CommandOptions) accuracy(ctx context.Context) error {
	var combo map[string]string
	if o.Joint != "" {
		switch {
		case o.ProfileFile == "":
			return fmt.Errorf("--joint: give --profile-file, the config file whose session %s gets the joint accuracy", o.Model)
		case o.Variant != "":
			return fmt.Errorf("--joint and --variant: give one (--variant writes a model's accuracy into its profiles, --joint a combination's into the session)")
		}
		var err error
		if combo, err = ParseJoint(o.Joint); err != nil {
			return err
		}
	}
	res, err := MeasureAccuracy(ctx, AccuracyOptions{
		Target: o.Target, Model: o.Model, Dir: o.AccuracyDir, InputName: o.InputName, OutputName: o.OutputTensor, Timeout: o.Timeout,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Stdout, "%s on %s: word accuracy %d/%d = %.4g, images read exactly %d/%d\n",
		o.Model, o.AccuracyDir, res.Matched, res.Words, res.Accuracy(), res.ExactImages, res.Images)
	if o.ProfileFile == "" {
		return nil
	}
	doc, err := os.ReadFile(o.ProfileFile)
	if err != nil {
		return fmt.Errorf("--profile-file: %w", err)
	}
	var out []byte
	if combo != nil {
		out, err = SetJointAccuracy(doc, o.Model, combo, res.Accuracy())
	} else {
		variant := o.Variant
		if variant == "" {
			variant = o.Model
		}
		out, err = SetAccuracy(doc, variant, o.Hardware, res.Accuracy())
	}
	if err != nil {
		return fmt.Errorf("--profile-file %s: %w", o.ProfileFile, err)
	}
	return writeAtomic(o.ProfileFile, func(f *os.File) error { _, err := f.Write(out); return err })
}

// writeAtomic writes path through a temporary file in the same directory and
// renames it into place, so a failed run never leaves half a profile.
func writeAtomic(path string, write func(*os.File) error) error {
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
