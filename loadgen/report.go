package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Report is the outcome of one run. Counts are exact: Sent == OK + Σ Errors.
// Latencies are of successful requests only. Pointer fields are null in JSON when
// they do not apply (no SLO known).
type Report struct {
	Target   string  `json:"target"`
	Protocol string  `json:"protocol"`
	Session  string  `json:"session"`
	Arrival  string  `json:"arrival"`
	Rate     float64 `json:"rate_rps"` // the configured mean rate, req/s
	Seed     uint64  `json:"seed"`
	// Inputs names the payloads sent, in the order requests cycle over them.
	Inputs []string `json:"inputs"`

	Sent      int64 `json:"sent"`      // requests the schedule released, dropped ones included
	Completed int64 `json:"completed"` // requests that got a reply, successful or not (gRPC UNAVAILABLE counts: gRPC reports a refused connection the same way)
	OK        int64 `json:"ok"`        // successful replies
	// Errors counts every request that did not succeed, by kind: "rejected:
	// overloaded", "deadline", "bad request", "not found", "unauthorized", "server
	// error", "unavailable", "unexpected status", "timeout", "transport", "dropped:
	// client overload", "canceled".
	Errors map[string]int64 `json:"errors"`

	DurationS     float64         `json:"duration_s"`      // from the first send to the last reply (or the end of the drain), at least the sending time unless interrupted, s
	OfferedRate   float64         `json:"offered_rps"`     // Sent / the configured duration, req/s
	Throughput    float64         `json:"throughput_rps"`  // OK / DurationS, req/s
	Goodput       *float64        `json:"goodput_rps"`     // successful replies within the SLO / DurationS, req/s
	SLOMs         *float64        `json:"slo_ms"`          // the SLO used, ms
	SLOAttainment *float64        `json:"slo_attainment"`  // successful replies within the SLO / Sent, in [0,1]
	LateSends     int64           `json:"late_sends"`      // sends released more than LateSendThreshold after their due time
	MaxSendLagMs  float64         `json:"max_send_lag_ms"` // worst such lag, ms
	Interrupted   bool            `json:"interrupted"`     // the run was canceled before its schedule ended
	Notes         []string        `json:"notes,omitempty"` // what the run could not learn (metadata, SLO)
	MinMs         float64         `json:"min_ms"`          // latency of successful requests, ms
	MeanMs        float64         `json:"mean_ms"`         //
	P50Ms         float64         `json:"p50_ms"`          // nearest-rank percentiles, see Summarize
	P90Ms         float64         `json:"p90_ms"`          //
	P99Ms         float64         `json:"p99_ms"`          //
	P999Ms        float64         `json:"p999_ms"`         //
	MaxMs         float64         `json:"max_ms"`          //
	Latencies     []time.Duration `json:"-"`               // successful requests' latencies, ascending (for WritePlot)
	// Seconds, with Options.PerSecond, splits the requests by the second of
	// the schedule they were due in (second k: due in [k s, k+1 s) after the
	// first send): where in a run the misses fell. Null without.
	Seconds []Second `json:"seconds,omitempty"`
}

// Second counts the requests due in one second of a run's schedule
// (Report.Seconds). Sent == Within + Late + Refused + Failed.
type Second struct {
	Sent    int64 `json:"sent"`
	Within  int64 `json:"within"`  // successful replies within the SLO (all of them without an SLO)
	Late    int64 `json:"late"`    // successful replies after the SLO
	Refused int64 `json:"refused"` // answered "rejected: overloaded" (429)
	Failed  int64 `json:"failed"`  // every other error kind
}

// perSecond fills rep.Seconds from the result slots and the due time of each
// (due[k], from the start of the schedule).
func (rep *Report) perSecond(results []atomic.Uint64, due []time.Duration, slo time.Duration) {
	if len(due) == 0 {
		return
	}
	rep.Seconds = make([]Second, int(due[len(due)-1]/time.Second)+1)
	for k := range results {
		v := results[k].Load()
		sec := &rep.Seconds[int(due[k]/time.Second)]
		sec.Sent++
		switch kind(v & 0xff) {
		case kindOK:
			if slo <= 0 || time.Duration(v>>8) <= slo {
				sec.Within++
			} else {
				sec.Late++
			}
		case kindOverloaded:
			sec.Refused++
		default:
			sec.Failed++
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fill computes the counts and the latency summary from the result slots.
func (rep *Report) fill(results []atomic.Uint64, slo, configured, elapsed time.Duration) {
	rep.Sent = int64(len(results))
	var byKind [numKinds]int64
	lat := make([]time.Duration, 0, len(results))
	for i := range results {
		v := results[i].Load()
		k := kind(v & 0xff)
		byKind[k]++
		if k.replied() {
			rep.Completed++
		}
		if k == kindOK {
			lat = append(lat, time.Duration(v>>8))
		}
	}
	rep.OK = byKind[kindOK]
	for k := kindOK + 1; k < numKinds; k++ {
		if byKind[k] > 0 {
			rep.Errors[k.String()] = byKind[k]
		}
	}
	s := Summarize(lat, slo)
	rep.Latencies = lat
	rep.MinMs, rep.MeanMs, rep.MaxMs = ms(s.Min), ms(s.Mean), ms(s.Max)
	rep.P50Ms, rep.P90Ms, rep.P99Ms, rep.P999Ms = ms(s.P50), ms(s.P90), ms(s.P99), ms(s.P999)
	rep.DurationS = elapsed.Seconds()
	if configured > 0 {
		rep.OfferedRate = float64(rep.Sent) / configured.Seconds()
	}
	if rep.DurationS > 0 {
		rep.Throughput = float64(rep.OK) / rep.DurationS
	}
	if slo > 0 {
		sloMs := ms(slo)
		rep.SLOMs = &sloMs
		good := 0.0
		if rep.DurationS > 0 {
			good = float64(s.WithinSLO) / rep.DurationS
		}
		rep.Goodput = &good
		att := 0.0
		if rep.Sent > 0 {
			att = float64(s.WithinSLO) / float64(rep.Sent)
		}
		rep.SLOAttainment = &att
	}
}

// ErrorTotal returns Σ Errors.
func (rep *Report) ErrorTotal() int64 {
	var n int64
	for _, c := range rep.Errors {
		n += c
	}
	return n
}

// WriteJSON writes rep as one indented JSON object.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteTable writes rep for people: one aligned line per figure.
func WriteTable(w io.Writer, rep *Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	line("target", "%s (%s), session %q", rep.Target, rep.Protocol, rep.Session)
	line("inputs", "%s", strings.Join(rep.Inputs, ", "))
	line("arrivals", "%s at %.6g req/s, seed %d", rep.Arrival, rep.Rate, rep.Seed)
	line("sent", "%d (offered %.1f req/s; late sends %d, worst lag %.1f ms)", rep.Sent, rep.OfferedRate, rep.LateSends, rep.MaxSendLagMs)
	line("completed", "%d replies, %d ok, %d errors", rep.Completed, rep.OK, rep.ErrorTotal())
	line("duration", "%.2f s", rep.DurationS)
	line("throughput", "%.1f req/s", rep.Throughput)
	if rep.SLOMs != nil {
		line("goodput", "%.1f req/s within SLO %.4g ms", *rep.Goodput, *rep.SLOMs)
		line("SLO attainment", "%.2f%%", 100**rep.SLOAttainment)
	} else {
		line("goodput", "n/a (no SLO)")
		line("SLO attainment", "n/a (no SLO)")
	}
	if rep.OK > 0 {
		line("latency (ms)", "p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f  (mean %.2f, min %.2f)",
			rep.P50Ms, rep.P90Ms, rep.P99Ms, rep.P999Ms, rep.MaxMs, rep.MeanMs, rep.MinMs)
	} else {
		line("latency (ms)", "n/a (no successful request)")
	}
	if len(rep.Errors) == 0 {
		line("errors", "none")
	}
	for _, k := range slices.Sorted(maps.Keys(rep.Errors)) {
		line("errors", "%s: %d", k, rep.Errors[k])
	}
	if rep.Interrupted {
		line("note", "interrupted before the schedule ended")
	}
	for _, n := range rep.Notes {
		line("note", "%s", n)
	}
	for k, sec := range rep.Seconds {
		if sec.Sent > 0 && sec.Within < sec.Sent {
			line(fmt.Sprintf("second %d", k), "%d sent, %d within the SLO, %d late, %d refused, %d failed", sec.Sent, sec.Within, sec.Late, sec.Refused, sec.Failed)
		}
	}
	return tw.Flush()
}
