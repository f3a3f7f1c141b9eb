package arrival

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Trace is a recorded sequence of request arrivals, replayed by `--arrival trace`.
// Offsets are the arrival times from the first one (so Offsets[0] is 0), in time
// order (equal offsets are simultaneous arrivals). Immutable once read.
type Trace struct {
	// Name is where the trace came from (a file name), for messages.
	Name    string
	Offsets []time.Duration
}

// TimestampLayout is the calendar form of a trace timestamp; a fraction of a second
// (.f up to .fffffffff) may follow the seconds. Timestamps are read as UTC.
const TimestampLayout = "2006-01-02 15:04:05"

// TraceFormats says, for error messages and help, which files ReadTrace takes.
const TraceFormats = `a CSV file with a header row and a timestamp column ("YYYY-MM-DD HH:MM:SS[.ffffff]", or seconds as a number), or one offset in seconds per line`

// ReadTraceFile reads the trace at path; see ReadTrace.
func ReadTraceFile(path, column string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return ReadTrace(f, path, column)
}

// ReadTrace reads a trace in one of two forms (TraceFormats):
//
//   - CSV with a header row: arrivals are the rows, their time is in the column
//     named column (empty: the first column);
//   - one value per line, no header (column must then be empty).
//
// A value is a timestamp in TimestampLayout or a number of seconds (one form for
// the whole file). The first row tells the forms apart: when its first field reads
// as a value it is data, else it is a header. Blank lines and lines starting with
// '#' are skipped. Times must not go backwards: a trace out of order is refused,
// not sorted, because a file whose times go backwards is more often two traces
// pasted together or the wrong column than a shuffled one (sort it first if it
// is). Errors are "name:line: ..." and say what was wrong and what is allowed; an
// empty trace is an error.
func ReadTrace(r io.Reader, name, column string) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1 // checked below, with a clearer message
	fail := func(line int, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
	}
	rec, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%s: empty trace: no arrivals; a trace is %s", name, TraceFormats)
	}
	if err != nil {
		return nil, csvError(name, err)
	}
	line, _ := cr.FieldPos(0)
	col, width := 0, len(rec)
	if _, isData := parseValue(rec[0]); isData {
		// One value per line, no header.
		if width > 1 {
			return nil, fail(line, "the first row %q is data, not a header; a CSV trace needs a header row naming its columns, else one value per line", strings.Join(rec, ","))
		}
		if column != "" {
			return nil, fail(line, "--trace-column %q given, but the file has no header row (its first line is %q); a CSV trace needs a header naming its columns", column, rec[0])
		}
	} else {
		if column == "" {
			column = rec[0]
		} else if col = slices.Index(rec, column); col < 0 {
			return nil, fail(line, "no column %q in the header; columns: %s", column, strings.Join(rec, ", "))
		}
		if rec, err = cr.Read(); err != nil && err != io.EOF {
			return nil, csvError(name, err)
		}
		if err == io.EOF {
			return nil, fmt.Errorf("%s: empty trace: a header but no arrivals", name)
		}
	}
	what := "value"
	if column != "" {
		what = fmt.Sprintf("column %q", column)
	}
	t := &Trace{Name: name}
	var first, prev value
	prevLine := 0
	for {
		line, _ := cr.FieldPos(0)
		if len(rec) != width {
			return nil, fail(line, "%d fields, but the first row has %d", len(rec), width)
		}
		s := strings.TrimSpace(rec[col])
		v, ok := parseValue(s)
		switch {
		case !ok:
			return nil, fail(line, "%s: %q is neither a timestamp YYYY-MM-DD HH:MM:SS[.ffffff] nor a number of seconds", what, s)
		case len(t.Offsets) == 0:
			first = v
		case v.isTime != first.isTime:
			return nil, fail(line, "%s: %q mixes forms: earlier rows are %s; one column holds one form", what, s, first.form())
		case v.before(prev):
			return nil, fail(line, "%s: %s goes back %v from line %d; a trace must be in time order (equal times are fine): sort it first", what, s, prev.sub(v), prevLine)
		}
		off, ok := v.since(first)
		if !ok {
			return nil, fail(line, "%s: %q is too long after the first arrival; at most %v", what, s, Never)
		}
		t.Offsets = append(t.Offsets, off)
		prev, prevLine = v, line
		if rec, err = cr.Read(); err == io.EOF {
			return t, nil
		} else if err != nil {
			return nil, csvError(name, err)
		}
	}
}

// value is one trace time: a timestamp, or a number of seconds.
type value struct {
	isTime bool
	ts     time.Time
	sec    float64
}

func (v value) form() string {
	if v.isTime {
		return "timestamps"
	}
	return "numbers of seconds"
}

func (v value) before(u value) bool {
	if v.isTime {
		return v.ts.Before(u.ts)
	}
	return v.sec < u.sec
}

func (v value) sub(u value) time.Duration {
	if v.isTime {
		return v.ts.Sub(u.ts)
	}
	return time.Duration((v.sec - u.sec) * float64(time.Second))
}

// since is v − first, false when that overflows a Duration.
func (v value) since(first value) (time.Duration, bool) {
	if v.isTime {
		d := v.ts.Sub(first.ts)
		return d, d < Never
	}
	ns := math.Round((v.sec - first.sec) * float64(time.Second))
	return time.Duration(ns), ns < math.MaxInt64
}

func csvError(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s:%d: CSV: %v", name, pe.Line, pe.Err)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// parseValue reads a timestamp (TimestampLayout) or a finite number of seconds.
func parseValue(s string) (value, bool) {
	s = strings.TrimSpace(s)
	if x, err := strconv.ParseFloat(s, 64); err == nil {
		return value{sec: x}, !math.IsNaN(x) && !math.IsInf(x, 0)
	}
	ts, err := time.Parse(TimestampLayout, s)
	return value{isTime: true, ts: ts}, err == nil
}

// Window returns the trace from its first arrival at or after skip, offsets again
// from that arrival, played speed times faster (offsets divided by speed). It errs
// when speed is not a finite number > 0, skip is negative, or nothing is left.
func (t *Trace) Window(skip time.Duration, speed float64) (*Trace, error) {
	if !(speed > 0) || math.IsInf(speed, 0) {
		return nil, fmt.Errorf("trace speed %v: must be a finite number > 0 (2 replays twice as fast)", speed)
	}
	if skip < 0 {
		return nil, fmt.Errorf("trace skip %v: must be ≥ 0", skip)
	}
	i, _ := slices.BinarySearch(t.Offsets, skip)
	if i == len(t.Offsets) {
		return nil, fmt.Errorf("%s: no arrival after skipping %v (the trace spans %v)", t.Name, skip, t.Span())
	}
	w := &Trace{Name: t.Name, Offsets: make([]time.Duration, 0, len(t.Offsets)-i)}
	for _, o := range t.Offsets[i:] {
		w.Offsets = append(w.Offsets, time.Duration(float64(o-t.Offsets[i])/speed))
	}
	return w, nil
}

// Span is the time from the first arrival to the last.
func (t *Trace) Span() time.Duration { return t.Offsets[len(t.Offsets)-1] }

// MeanRate returns the number of arrivals in [0, d) and the rate they make, n/d
// req/s; d ≤ 0 or beyond the trace means the whole trace, whose rate is
// (n−1)/Span (n ≥ 2; 0 for one arrival).
func (t *Trace) MeanRate(d time.Duration) (n int, ratePerSec float64) {
	if d > 0 && d <= t.Span() {
		n, _ = slices.BinarySearch(t.Offsets, d)
		return n, float64(n) / d.Seconds()
	}
	n = len(t.Offsets)
	if n < 2 || t.Span() <= 0 {
		return n, 0
	}
	return n, float64(n-1) / t.Span().Seconds()
}

// PeakRate is the largest number of arrivals in any window of length w (sliding
// from arrival to arrival) within [0, d), divided by w: the rate of the trace's
// worst burst at that time scale, in req/s. d ≤ 0 means the whole trace.
func (t *Trace) PeakRate(w, d time.Duration) float64 {
	offs := t.Offsets
	if d > 0 {
		n, _ := slices.BinarySearch(offs, d)
		offs = offs[:n]
	}
	best, j := 0, 0
	for i := range offs {
		for offs[i]-offs[j] >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return float64(best) / w.Seconds()
}

// Process replays the trace: gaps between successive offsets, then Never.
func (t *Trace) Process() Process { return &replay{offs: t.Offsets} }

// Never is the gap a finite process (a trace) returns after its last arrival.
const Never = time.Duration(math.MaxInt64)

type replay struct {
	offs []time.Duration
	i    int
}

func (r *replay) Next() time.Duration {
	if r.i+1 >= len(r.offs) {
		return Never
	}
	r.i++
	return r.offs[r.i] - r.offs[r.i-1]
}

// Record runs p for d and returns its arrivals in [0, d) as a trace named name
// (the first at 0), so a synthetic process can be planned for like a recorded one.
// It errs when d is not > 0 or the arrivals would be more than maxRecord.
func Record(p Process, d time.Duration, name string) (*Trace, error) {
	if d <= 0 {
		return nil, fmt.Errorf("record %s: duration %v must be > 0", name, d)
	}
	t := &Trace{Name: name}
	for at := time.Duration(0); ; {
		if len(t.Offsets) == maxRecord {
			return nil, fmt.Errorf("record %s: more than %d arrivals in %v", name, maxRecord, d)
		}
		t.Offsets = append(t.Offsets, at)
		gap := p.Next()
		if gap >= d-at {
			return t, nil
		}
		at += gap
	}
}

// maxRecord bounds a recorded trace (8 bytes an arrival).
const maxRecord = 100_000_000

// Warp returns unit, the arrivals of a process at 1 req/s, replayed at a
// rate that changes with time: rate(t) req/s for d. Each arrival at u (in
// operational time) is moved to the t where Λ(t) = ∫₀ᵗ rate = u (Λ summed
// in steps of 10 ms, linear within a step), so bursts keep their shape as
// the mean changes (a diurnal ramp of a gamma process). Arrivals past Λ(d)
// are dropped. Errors: d not > 0, a rate that is negative or not finite.
func Warp(unit *Trace, rate func(time.Duration) float64, d time.Duration, name string) (*Trace, error) {
	const step = 10 * time.Millisecond
	if d <= 0 {
		return nil, fmt.Errorf("warp %s: duration %v must be > 0", name, d)
	}
	lambda := []float64{0} // Λ at k·step
	for at := time.Duration(0); at < d; at += step {
		r := rate(at)
		if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("warp %s: rate %v req/s at %v: must be a finite number ≥ 0", name, r, at)
		}
		lambda = append(lambda, lambda[len(lambda)-1]+r*step.Seconds())
	}
	out := &Trace{Name: name}
	k := 0
	for _, u := range unit.Offsets {
		x := u.Seconds()
		for k+1 < len(lambda) && lambda[k+1] <= x {
			k++
		}
		if k+1 >= len(lambda) {
			break
		}
		frac := (x - lambda[k]) / (lambda[k+1] - lambda[k])
		out.Offsets = append(out.Offsets, time.Duration(k)*step+time.Duration(frac*float64(step)))
	}
	return out, nil
}
