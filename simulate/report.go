package simulate

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/piccolo-serving/piccolo/dispatcher"
)

// Report is the outcome of a simulation (also the shape loadgen reports in).
// Latencies are in ms, rates in req/s over the arrival window (Duration).
type Report struct {
	Dispatch   string          `json:"dispatch"`
	Flush      string          `json:"flush"`
	Arrival    string          `json:"arrival"`
	CV2        float64         `json:"cv2,omitempty"`
	DurationS  float64         `json:"duration_s"`
	Seed       uint64          `json:"seed"`
	SimulatedS float64         `json:"simulated_s"` // virtual time, drain included
	WallMs     float64         `json:"wall_ms"`
	Requests   int             `json:"requests"` // arrived, all sessions
	TotalCost  float64         `json:"total_cost"`
	Sessions   []SessionReport `json:"sessions"`
	// Devices lists the placed plan's devices (empty when the plan names no
	// backends: every machine is then a device of its own).
	Devices []DeviceReport `json:"devices,omitempty"`
}

// Latency summarises latencies in ms (nearest-rank percentiles).
type Latency struct {
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
}

// SessionReport is one session: end-to-end latency (arrival to the last module
// done) of the requests that completed, and errors by kind.
type SessionReport struct {
	Name          string  `json:"name"`
	SLOMs         float64 `json:"slo_ms"`
	PlanLatencyMs float64 `json:"plan_latency_ms"`
	RatePerSec    float64 `json:"rate"`
	Requests      int     `json:"requests"`
	Completed     int     `json:"completed"`
	Latency       Latency `json:"latency"`
	ThroughputRPS float64 `json:"throughput"`
	GoodputRPS    float64 `json:"goodput"`        // completed within the SLO, per second
	SLOAttainment float64 `json:"slo_attainment"` // within SLO / arrived
	// Refused are the requests admission refused at once (Options.Admission);
	// AdmittedAttainment is within SLO / (arrived − refused).
	Refused            int            `json:"refused,omitempty"`
	AdmittedAttainment float64        `json:"admitted_attainment"`
	Errors             map[string]int `json:"errors,omitempty"`
	Cost               float64        `json:"cost"`
	Modules            []ModuleReport `json:"modules,omitempty"`
	Skipped            string         `json:"skipped,omitempty"`
	// Seconds, with Options.PerSecond, counts the measured requests by the
	// second they arrived in (index k: arrived in [k s, k+1 s)).
	Seconds []SecondCount `json:"seconds,omitempty"`
}

// SecondCount is one second of SessionReport.Seconds.
type SecondCount struct {
	Arrived int `json:"arrived"`
	Within  int `json:"within"` // completed within the SLO
}

// ModuleReport is one module: latency from submission to completion of its items.
// OverWCL counts items slower than the plan's WCL for the module.
type ModuleReport struct {
	Name             string         `json:"name"`
	BudgetMs         float64        `json:"budget_ms"`
	WCLMs            float64        `json:"wcl_ms"`
	Items            int            `json:"items"` // completed without error
	Latency          Latency        `json:"latency"`
	ThroughputRPS    float64        `json:"throughput"`
	GoodputRPS       float64        `json:"goodput"` // within the budget, per second
	BudgetAttainment float64        `json:"budget_attainment"`
	OverWCL          int            `json:"over_wcl"`
	Refused          int            `json:"refused,omitempty"` // items refused by admission
	Errors           map[string]int `json:"errors,omitempty"`
	DummiesInjected  uint64         `json:"dummies_injected"`
	DummiesDropped   uint64         `json:"dummies_dropped"`
	Cost             float64        `json:"cost"`
	// Dispatcher holds the dispatcher's own counters: all items, the unmeasured
	// ones of the drain included.
	Dispatcher DispatchCounts `json:"dispatcher"`
	Groups     []GroupReport  `json:"groups"`
	Slots      []SlotReport   `json:"slots"`
	Spare      []SlotReport   `json:"spare,omitempty"` // spare machines (Options.Spare)
}

// DispatchCounts are a module dispatcher's item counters (dispatcher.Stats).
type DispatchCounts struct {
	Submitted        uint64 `json:"submitted"`
	Sent             uint64 `json:"sent"` // items that went to a backend in a batch
	DeadlineOnSubmit uint64 `json:"deadline_on_submit"`
	DeadlineOnSend   uint64 `json:"deadline_on_send"`
	Overloaded       uint64 `json:"overloaded"`               // refused by admission
	Overflow         uint64 `json:"overflow"`                 // batches sent to spare machines
	LateCommitted    uint64 `json:"late_committed,omitempty"` // batches sent to another group's idle machine (Options.LateCommit)
}

// GroupReport is one config group: its planned WCL and the slowest item it ran.
type GroupReport struct {
	Index    int     `json:"index"`
	Hardware string  `json:"hardware"`
	Batch    int     `json:"batch"`
	Machines float64 `json:"machines"`
	RatePlan float64 `json:"planned_rate"`
	WCLMs    float64 `json:"wcl_ms"`
	Items    int     `json:"items"`
	MaxMs    float64 `json:"max_ms"`
}

// SlotReport is one machine. Utilisation = busy lane-time / (lanes × simulated time).
type SlotReport struct {
	Slot        string  `json:"slot"`
	Group       int     `json:"group"`
	Machine     int     `json:"machine"`
	Backend     string  `json:"backend,omitempty"`
	Hardware    string  `json:"hardware"`
	Batch       int     `json:"batch"`
	Concurrency int     `json:"concurrency"`
	DurationMs  float64 `json:"duration_ms"`
	Batches     uint64  `json:"batches"`
	MeanBatch   float64 `json:"mean_batch"` // real items + dummies per batch
	Items       uint64  `json:"items"`
	Dummies     uint64  `json:"dummies"`
	Utilisation float64 `json:"utilisation"`
	Cost        float64 `json:"cost"`
}

// Summarize returns the latency summary of samples, sorting them in place.
func Summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(samples)))) - 1
		return toMs(samples[max(0, min(i, len(samples)-1))])
	}
	var sum time.Duration
	for _, v := range samples {
		sum += v
	}
	return Latency{P50Ms: q(0.5), P90Ms: q(0.9), P99Ms: q(0.99), P999Ms: q(0.999),
		MaxMs: toMs(samples[len(samples)-1]), MeanMs: toMs(sum) / float64(len(samples))}
}

func toMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (s *sim) report() *Report {
	win := s.o.Duration.Seconds()
	elapsed := s.clock.Elapsed()
	r := &Report{Dispatch: s.o.Policy.Name(), Flush: s.o.Flush.Name(), Arrival: s.o.Arrival, DurationS: win, Seed: s.o.Seed,
		SimulatedS: elapsed.Seconds()}
	if s.o.Arrival == "gamma" {
		r.CV2 = s.o.CV2
	}
	for _, ss := range s.sessions {
		if s.live > 0 {
			// Requests still in flight after the drain.
			ss.errs[KindUnfinished] += ss.arrived - len(ss.lat) - sumErrs(ss.errs) - ss.refused
		}
		sr := SessionReport{Name: ss.plan.Name, SLOMs: ss.plan.SLOMs, PlanLatencyMs: ss.plan.LatencyMs,
			RatePerSec: ss.rate, Requests: ss.arrived, Completed: len(ss.lat), Refused: ss.refused,
			ThroughputRPS: float64(len(ss.lat)) / win, GoodputRPS: float64(ss.good) / win, Cost: ss.plan.Cost,
			Seconds: ss.seconds}
		if ss.arrived > 0 {
			sr.SLOAttainment = float64(ss.good) / float64(ss.arrived)
		}
		if n := ss.arrived - ss.refused; n > 0 {
			sr.AdmittedAttainment = float64(ss.good) / float64(n)
		}
		sr.Latency = Summarize(ss.lat)
		if len(ss.errs) > 0 {
			sr.Errors = ss.errs
		}
		for _, m := range ss.mods {
			sr.Modules = append(sr.Modules, m.report(win, elapsed))
		}
		r.Requests += ss.arrived
		r.TotalCost += ss.plan.Cost
		r.Sessions = append(r.Sessions, sr)
	}
	r.Sessions = append(r.Sessions, s.skipped...)
	r.Devices = s.deviceReports(elapsed)
	return r
}

func sumErrs(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func (m *module) report(win float64, elapsed time.Duration) ModuleReport {
	st := m.d.Stats()
	mr := ModuleReport{Name: m.plan.Name, BudgetMs: m.plan.BudgetMs, WCLMs: m.plan.WCLMs, Items: len(m.lat),
		ThroughputRPS: float64(len(m.lat)) / win, GoodputRPS: float64(m.good) / win,
		OverWCL: m.overWCL, Refused: m.refused, DummiesInjected: st.DummiesInjected, DummiesDropped: st.DummiesDropped, Cost: m.plan.Cost}
	if n := len(m.lat) + sumErrs(m.errs); n > 0 {
		mr.BudgetAttainment = float64(m.good) / float64(n)
	}
	mr.Dispatcher = DispatchCounts{Submitted: st.Submitted, DeadlineOnSubmit: st.DeadlineOnSubmit, DeadlineOnSend: st.DeadlineOnSend, Overloaded: st.Overloaded, Overflow: st.Overflow, LateCommitted: st.LateCommitted}
	for _, sl := range st.Slots {
		mr.Dispatcher.Sent += sl.Items
	}
	mr.Latency = Summarize(m.lat)
	if len(m.errs) > 0 {
		mr.Errors = m.errs
	}
	for i, g := range m.plan.Configs {
		mr.Groups = append(mr.Groups, GroupReport{Index: i, Hardware: g.Hardware, Batch: g.Batch, Machines: g.Machines,
			RatePlan: g.Rate, WCLMs: g.WCLMs, Items: m.groupN[i], MaxMs: toMs(m.groupMax[i])})
	}
	for _, ss := range st.Slots {
		mr.Slots = append(mr.Slots, slotReport(ss, elapsed))
	}
	for _, ss := range st.Spare {
		mr.Spare = append(mr.Spare, slotReport(ss, elapsed))
	}
	return mr
}

func slotReport(ss dispatcher.SlotStats, elapsed time.Duration) SlotReport {
	s := ss.Slot
	sr := SlotReport{Slot: s.String(), Group: s.Group, Machine: s.Machine, Backend: s.Backend, Hardware: s.Hardware,
		Batch: s.Batch, Concurrency: s.Concurrency, DurationMs: toMs(s.Duration), Batches: ss.Batches,
		Items: ss.Items, Dummies: ss.Dummies, Cost: s.Cost}
	if ss.Batches > 0 {
		sr.MeanBatch = float64(ss.Items+ss.Dummies) / float64(ss.Batches)
	}
	if elapsed > 0 {
		sr.Utilisation = float64(ss.Busy) / (float64(s.Concurrency) * float64(elapsed))
	}
	return sr
}

// WriteTable writes r for a terminal: one block per session, one line per module
// and per slot.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "dispatch %s, flush %s, arrivals %s", r.Dispatch, r.Flush, r.Arrival)
	if r.CV2 > 0 {
		fmt.Fprintf(w, " (cv² %g)", r.CV2)
	}
	fmt.Fprintf(w, ", %gs of arrivals (%.3gs simulated), seed %d: %d requests in %.0f ms wall\n",
		r.DurationS, r.SimulatedS, r.Seed, r.Requests, r.WallMs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range r.Sessions {
		fmt.Fprintf(tw, "\nsession %s\tSLO %gms\tplanned latency %.1fms\tcost %.4g\n", s.Name, s.SLOMs, s.PlanLatencyMs, s.Cost)
		if s.Skipped != "" {
			fmt.Fprintf(tw, "  skipped: %s\n", s.Skipped)
			continue
		}
		fmt.Fprintf(tw, "  rate %.4g req/s\trequests %d\tcompleted %d\tthroughput %.4g/s\tgoodput %.4g/s\tSLO attainment %.2f%%\terrors %s\n",
			s.RatePerSec, s.Requests, s.Completed, s.ThroughputRPS, s.GoodputRPS, 100*s.SLOAttainment, errString(s.Errors))
		if s.Refused > 0 {
			fmt.Fprintf(tw, "  refused %d (%.2f%%)\tadmitted %d\tadmitted within SLO %.3f%%\n",
				s.Refused, 100*float64(s.Refused)/float64(max(s.Requests, 1)), s.Requests-s.Refused, 100*s.AdmittedAttainment)
		}
		fmt.Fprintf(tw, "  latency ms\tp50 %.1f\tp90 %.1f\tp99 %.1f\tp99.9 %.1f\tmax %.1f\n",
			s.Latency.P50Ms, s.Latency.P90Ms, s.Latency.P99Ms, s.Latency.P999Ms, s.Latency.MaxMs)
		fmt.Fprintln(tw, "  module\tbudget\tWCL\titems\tp50\tp99\tmax\tover WCL\tdummies\terrors")
		for _, m := range s.Modules {
			fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\t%d\t%.1f\t%.1f\t%.1f\t%d\t%d\t%s\n", m.Name, m.BudgetMs, m.WCLMs, m.Items,
				m.Latency.P50Ms, m.Latency.P99Ms, m.Latency.MaxMs, m.OverWCL, m.DummiesInjected, errString(m.Errors))
		}
		fmt.Fprintln(tw, "  slot\thardware\tbatch×conc\tduration\tbatches\tmean batch\tdummies\tutilisation\tcost")
		for _, m := range s.Modules {
			for _, sl := range m.Slots {
				fmt.Fprintf(tw, "  %s\t%s\t%d×%d\t%.1fms\t%d\t%.2f\t%d\t%.1f%%\t%.4g\n", sl.Slot, sl.Hardware, sl.Batch, sl.Concurrency,
					sl.DurationMs, sl.Batches, sl.MeanBatch, sl.Dummies, 100*sl.Utilisation, sl.Cost)
			}
		}
	}
	if len(r.Devices) > 0 {
		fmt.Fprintf(tw, "\n%d devices\tlanes\tbatches\tqueued\tmax wait\tutilisation\tmodules\n", len(r.Devices))
		for _, d := range r.Devices {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%.1fms\t%.1f%%\t%s\n", d.ID, d.Lanes, d.Batches, d.Queued, d.MaxWaitMs, 100*d.Utilisation, strings.Join(d.Modules, " "))
		}
	}
	return tw.Flush()
}

func errString(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
