package loadgen

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/piccolo-serving/piccolo/arrival"
)

// CommandOptions are `piccolo loadgen`'s settings, one field per flag: the
// run's Options (Trace, MMPP and Payloads are set by Command from the fields
// below) and the command's own.
type CommandOptions struct {
	Options
	Source     arrival.Source // --trace (and its flags), the MMPP's flags
	InputFiles []string       // --input: JSON bodies, images or directories (cycled)
	InputName  string         // --input-name: tensor name of image inputs
	Output     string         // -o: table or json
	Plot       string         // --plot: the latency CDF's file (.png, .svg, .pdf); "": none
	// RateGiven and DurationGiven say whether --rate and --duration were
	// given: a trace's duration defaults to its span, and --rate goes with
	// the processes that have no rate of their own.
	RateGiven, DurationGiven bool
}

// Command runs `piccolo loadgen` as o says (Run) and writes the report to w
// as a table or JSON (WriteTable, WriteJSON), and the latency CDF to o.Plot.
// Errors name the flag that is wrong: an unknown output, a trace or MMPP the
// arrival kind does not fit, --rate given to a process with its own rate or
// missing for one without, --max-inflight ≤ 0, a duration ≤ 0, an unreadable
// input; or are the run's or the plot's.
func Command(ctx context.Context, w io.Writer, o CommandOptions) error {
	if o.Output != "table" && o.Output != "json" {
		return fmt.Errorf("-o %q: allowed: table, json", o.Output)
	}
	trace, err := o.Source.Trace(o.Arrival)
	if err != nil {
		return err
	}
	o.Trace, o.MMPP = trace, o.Source.MMPP
	if o.Arrival == "trace" && !o.DurationGiven {
		o.Duration = trace.Span() + 1 // the whole trace
	}
	switch {
	case arrival.OwnRate(o.Arrival):
		if o.RateGiven {
			return fmt.Errorf("--rate given with --arrival %s: its rate comes from the trace, or from --burst-rate, --quiet-rate and their lengths", o.Arrival)
		}
	default:
		if !o.RateGiven {
			return fmt.Errorf("--rate not set: --arrival %s needs a mean rate in req/s (mmpp and trace take theirs from their own flags)", o.Arrival)
		}
	}
	if o.MaxInflight <= 0 {
		return fmt.Errorf("--max-inflight %d: must be > 0", o.MaxInflight)
	}
	if err := Positive(Flag{Name: "--duration", Value: o.Duration}, Flag{Name: "--drain", Value: o.Drain}, Flag{Name: "--timeout", Value: o.Timeout}); err != nil {
		return err
	}
	if len(o.InputFiles) > 0 {
		p, err := LoadInputs(o.InputFiles, o.InputName)
		if err != nil {
			return err
		}
		o.Payloads = p
	}
	rep, err := Run(ctx, o.Options)
	if err != nil {
		return err
	}
	if o.Plot != "" {
		slo := o.SLO
		if rep.SLOMs != nil {
			slo = time.Duration(*rep.SLOMs * float64(time.Millisecond))
		}
		title := fmt.Sprintf("%s: %s %.4g req/s", rep.Session, rep.Arrival, rep.Rate)
		if err := WritePlot(o.Plot, title, rep.Latencies, slo); err != nil {
			return err
		}
	}
	if o.Output == "json" {
		return WriteJSON(w, rep)
	}
	return WriteTable(w, rep)
}

// Flag is a duration flag's name and value, for Positive.
type Flag struct {
	Name  string
	Value time.Duration
}

// Positive returns an error naming the first flag whose value is not > 0
// ("--drain 0s: must be > 0"); nil when all are. loadgen's and profile's
// duration flags are checked with it.
func Positive(flags ...Flag) error {
	for _, f := range flags {
		if f.Value <= 0 {
			return fmt.Errorf("%s %v: must be > 0", f.Name, f.Value)
		}
	}
	return nil
}
