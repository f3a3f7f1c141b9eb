package status

import (
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/metrics"
)

// Sample is one gathering of a gateway's metrics (prometheus.Gatherer's
// families) at a time: what Live compares. Immutable.
type Sample struct{ s *snapshot }

// NewSample wraps families gathered at at.
func NewSample(at time.Time, fams []*dto.MetricFamily) *Sample {
	m := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		m[f.GetName()] = f
	}
	return &Sample{s: &snapshot{at: at, fams: m}}
}

// At is when the sample was gathered.
func (s *Sample) At() time.Time { return s.s.at }

// LiveReport is the gateway's live figures between two samples, the figures
// `piccolo status` prints, as JSON (the admin listener's live view reads
// it). Counts are over the window; rates are counts over WindowSeconds; the
// percentiles are histogram bucket upper bounds (seconds; -1: no
// observation; +Inf is written as 1e9).
type LiveReport struct {
	At            time.Time        `json:"at"`
	WindowSeconds float64          `json:"window_seconds"`
	PlanCost      float64          `json:"plan_cost"`
	PlanAge       float64          `json:"plan_age_seconds"`
	Sessions      []LiveSession    `json:"sessions"`
	Calibration   []LiveCalibrated `json:"calibration"`
}

// LiveSession is one session's figures over the window.
type LiveSession struct {
	Name       string  `json:"name"`
	SLOSeconds float64 `json:"slo_seconds"`
	Requests   float64 `json:"requests"`
	OK         float64 `json:"ok"`
	Rejected   float64 `json:"rejected"`   // refused by admission (429)
	Refused    float64 `json:"refused"`    // answered 429, 503 or 504: the gateway refused or could not serve
	Violations float64 `json:"violations"` // not answered successfully within the SLO
	// Attainment is the share of requests (client errors aside) answered
	// within the SLO; -1 when there were none.
	Attainment float64      `json:"attainment"`
	RatePerSec float64      `json:"rate_per_sec"`
	P50Seconds float64      `json:"p50_seconds"`
	P99Seconds float64      `json:"p99_seconds"`
	Error      string       `json:"error,omitempty"` // why it is not planned
	Modules    []LiveModule `json:"modules"`
}

// LiveModule is one module's plan and measured figures over the window.
type LiveModule struct {
	Name           string          `json:"name"`
	Model          string          `json:"model"`
	After          []string        `json:"after,omitempty"`
	BudgetSeconds  float64         `json:"budget_seconds"`
	WCLSeconds     float64         `json:"wcl_seconds"`
	PlannedRate    float64         `json:"planned_rate"`
	DummyRate      float64         `json:"dummy_rate"`
	MeasuredRate   float64         `json:"measured_rate"`
	Submitted      float64         `json:"submitted"`
	Outstanding    float64         `json:"outstanding"` // items waiting or running now
	QueueP50       float64         `json:"queue_p50_seconds"`
	ComputeP50     float64         `json:"compute_p50_seconds"`
	ComputeP99     float64         `json:"compute_p99_seconds"`
	MeanBatch      float64         `json:"mean_batch"` // -1: no batch in the window
	Configs        []api.GroupPlan `json:"configs"`
	MachinesPlaced int             `json:"machines_placed"`
}

// LiveCalibrated is one model on one device: its profiled and measured
// (p90 of the latest batches) duration at the batch size measured most.
type LiveCalibrated struct {
	Model           string  `json:"model"`
	Device          string  `json:"device"`
	Hardware        string  `json:"hardware"`
	Batch           string  `json:"batch"`
	ProfiledSeconds float64 `json:"profiled_seconds"` // 0: no profile entry at that batch
	MeasuredSeconds float64 `json:"measured_seconds"`
	Samples         float64 `json:"samples"`
}

// Live computes the figures between from (nil: since the gateway started,
// every counter from zero) and now, for plan's sessions and modules (nil:
// from the plan metrics, as `piccolo status` without a token).
func Live(plan *api.Plan, from, now *Sample) LiveReport {
	var f *snapshot
	if from != nil {
		f = from.s
	}
	n := now.s
	r := LiveReport{At: n.at, PlanCost: n.sum(metrics.PlanCost, nil), PlanAge: n.sum(metrics.PlanAgeSeconds, nil)}
	if f != nil {
		r.WindowSeconds = n.at.Sub(f.at).Seconds()
	} else if st := n.sum(metrics.ProcessStartTimeSeconds, nil); st > 0 {
		r.WindowSeconds = float64(n.at.UnixNano())/1e9 - st
	}
	per := func(v float64) float64 {
		if r.WindowSeconds <= 0 {
			return 0
		}
		return v / r.WindowSeconds
	}
	sessions, slo, mods := modulesOf(plan, n)
	byName := map[string]*api.SessionPlan{}
	if plan != nil {
		r.PlanCost = plan.TotalCost
		for i := range plan.Sessions {
			byName[plan.Sessions[i].Name] = &plan.Sessions[i]
		}
	}
	r.Sessions = make([]LiveSession, 0, len(sessions))
	for _, s := range sessions {
		l := map[string]string{"session": s}
		ls := LiveSession{Name: s, SLOSeconds: slo[s], Modules: []LiveModule{}}
		ls.Requests = delta(f, n, metrics.GatewayRequestsTotal, l)
		ls.OK = delta(f, n, metrics.GatewayRequestsTotal, map[string]string{"session": s, "code": "200"})
		var clientErr float64
		for _, c := range []string{"400", "404", "405", "413", "499"} {
			clientErr += delta(f, n, metrics.GatewayRequestsTotal, map[string]string{"session": s, "code": c})
		}
		for _, c := range []string{"429", "503", "504"} {
			ls.Refused += delta(f, n, metrics.GatewayRequestsTotal, map[string]string{"session": s, "code": c})
		}
		ls.Rejected = delta(f, n, metrics.GatewayAdmissionRejectionsTotal, l)
		ls.Violations = delta(f, n, metrics.GatewaySLOViolationsTotal, l)
		ls.Attainment = -1
		if m := ls.Requests - clientErr; m > 0 {
			ls.Attainment = (m - ls.Violations) / m
		}
		ls.RatePerSec = per(ls.Requests)
		ls.P50Seconds = jsonBound(quantileBucket(f, n, metrics.GatewayRequestSeconds, l, 0.5))
		ls.P99Seconds = jsonBound(quantileBucket(f, n, metrics.GatewayRequestSeconds, l, 0.99))
		sp := byName[s]
		if sp != nil {
			ls.Error = sp.Error
		}
		for _, m := range mods {
			if m.session != s {
				continue
			}
			ml := map[string]string{"session": s, "module": m.name}
			lm := LiveModule{Name: m.name, BudgetSeconds: m.budget, WCLSeconds: m.wcl, PlannedRate: m.rate, DummyRate: m.dummy, Configs: []api.GroupPlan{}}
			if sp != nil {
				for i := range sp.Modules {
					if mp := &sp.Modules[i]; mp.Name == m.name {
						lm.Model, lm.After, lm.Configs = mp.Model, mp.After, mp.Configs
						for _, g := range mp.Configs {
							lm.MachinesPlaced += len(g.Backends)
						}
					}
				}
			}
			lm.Submitted = delta(f, n, metrics.DispatcherItemsTotal, map[string]string{"session": s, "module": m.name, "outcome": "submitted"})
			lm.MeasuredRate = per(lm.Submitted)
			lm.Outstanding = n.sum(metrics.GatewayModuleOutstanding, ml)
			lm.QueueP50 = jsonBound(quantileBucket(f, n, metrics.GatewayModuleQueueSeconds, ml, 0.5))
			lm.ComputeP50 = jsonBound(quantileBucket(f, n, metrics.GatewayModuleComputeSeconds, ml, 0.5))
			lm.ComputeP99 = jsonBound(quantileBucket(f, n, metrics.GatewayModuleComputeSeconds, ml, 0.99))
			lm.MeanBatch = -1
			if batches := delta(f, n, metrics.GatewayBatchSize, ml); batches > 0 {
				_, _, nowSum := n.buckets(metrics.GatewayBatchSize, ml)
				_, _, fromSum := f.buckets(metrics.GatewayBatchSize, ml)
				lm.MeanBatch = (nowSum - fromSum) / batches
			}
			ls.Modules = append(ls.Modules, lm)
		}
		r.Sessions = append(r.Sessions, ls)
	}
	r.Calibration = liveCalibration(n)
	return r
}

// jsonBound makes a quantileBucket result JSON-safe: -1 for none (NaN), 1e9
// for past the last bucket (+Inf).
func jsonBound(v float64) float64 {
	switch {
	case math.IsNaN(v):
		return -1
	case math.IsInf(v, 1):
		return 1e9
	}
	return v
}

// liveCalibration is writeCalibration's table as values.
func liveCalibration(now *snapshot) []LiveCalibrated {
	out := []LiveCalibrated{}
	key := func(l map[string]string) string {
		return l["model"] + "\x00" + l["device"] + "\x00" + l["hardware"] + "\x00" + l["batch"] + "\x00" + l["concurrency"]
	}
	prof, samples := map[string]float64{}, map[string]float64{}
	for _, sr := range now.series(metrics.CalibrationProfiledSeconds) {
		prof[key(sr.labels)] = sr.value
	}
	for _, sr := range now.series(metrics.CalibrationSamples) {
		samples[key(sr.labels)] = sr.value
	}
	best := map[string]int{} // model+device → index in out
	most := map[string]float64{}
	for _, sr := range now.series(metrics.CalibrationMeasuredSeconds) {
		l, k := sr.labels, key(sr.labels)
		md := l["model"] + "\x00" + l["device"]
		i, ok := best[md]
		if !ok {
			i = len(out)
			best[md] = i
			out = append(out, LiveCalibrated{Model: l["model"], Device: l["device"], Hardware: l["hardware"]})
			most[md] = -1
		}
		out[i].Samples += samples[k]
		if samples[k] > most[md] {
			most[md] = samples[k]
			out[i].Batch, out[i].ProfiledSeconds, out[i].MeasuredSeconds = l["batch"], prof[k], sr.value
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Model < out[j].Model || out[i].Model == out[j].Model && out[i].Device < out[j].Device
	})
	return out
}
