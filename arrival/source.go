package arrival

import (
	"fmt"
	"time"
)

// Source is what an arrival process needs beyond a kind and a rate, as the
// commands take it (loadgen, simulate, plan and gateway's --trace, --trace-column,
// --speed, --skip and the MMPP's --burst-rate, --burst-length, --quiet-rate,
// --quiet-length): a trace to replay, and an MMPP. Errors of its methods name
// those flags.
type Source struct {
	File   string        // --trace: the trace file (TraceFormats); "": none
	Column string        // --trace-column: its time column by header name ("": the first)
	Speed  float64       // --speed: replayed this many times faster (offsets divided by it)
	Skip   time.Duration // --skip: start at its first arrival this long after its first
	MMPP   MMPP          // --arrival mmpp's bursts and quiet spells
}

// Trace checks the flags kind needs and returns the trace to replay (nil
// unless kind is "trace"): a trace file given with another kind, a trace kind
// with no file, or an invalid MMPP is an error.
func (s Source) Trace(kind string) (*Trace, error) {
	if kind != "trace" {
		if s.File != "" {
			return nil, fmt.Errorf("--trace %s given with --arrival %s: replaying a trace needs --arrival trace", s.File, kind)
		}
		if kind == "mmpp" {
			if err := s.MMPP.Validate(); err != nil {
				return nil, fmt.Errorf("--arrival mmpp (--burst-rate, --burst-length, --quiet-rate, --quiet-length): %w", err)
			}
		}
		return nil, nil
	}
	if s.File == "" {
		return nil, fmt.Errorf("--arrival trace needs --trace FILE: %s", TraceFormats)
	}
	return s.Read()
}

// Read reads the trace file (ReadTraceFile) and applies Skip and Speed
// (Trace.Window).
func (s Source) Read() (*Trace, error) {
	t, err := ReadTraceFile(s.File, s.Column)
	if err != nil {
		return nil, err
	}
	return t.Window(s.Skip, s.Speed)
}
