package evaluation

import (
	"errors"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/simulate"
)

// Tuning compares how three ways of following a changing rate serve the
// same arrivals (issue 21, docs/traffic.md "The tuner, simulated"): InferLine's
// Tuner (replan.Tuner, as `piccolo gateway --trace --tune` runs it), the
// control loop's rate re-plan (replan.Controller with the trace planner, as
// `piccolo gateway --trace` runs it, static timing) and coarse-grained
// tuning (whole-pipeline replicas scaled on the measured rate, InferLine's
// baseline after AutoScale), with the trace plan served unchanged beside
// them.
//
// Every decision depends on the arrivals alone, not on how they were served,
// so each is made first on the virtual clock from the arrivals' 100 ms
// counts, and the plans it switches to are then simulated on the real
// dispatcher (simulate.Options.Changes), each switch Delay after its decision.
type TuningOptions struct {
	// Config is the config; Session its traced session (default the first).
	Config  *api.Config
	Session string
	// Sample is the planning trace; Plan the trace plan made for it
	// (unplaced): the tuner's, the control loop's and "unchanged"'s first plan.
	Sample *arrival.Trace
	Plan   *api.Plan
	// Coarse is the coarse-grained plan (simulate.PlanCoarse on Sample):
	// coarse-grained tuning's first plan; its machines scale in whole
	// pipeline replicas.
	Coarse *api.Plan
	// Replan is the control loop's planner (serving.TracePlanner.Plan),
	// Covers its band (TracePlanner.Covers); Members the pool it places on.
	Replan  func(*api.Config) (*api.Plan, error)
	Covers  func(map[replan.ModuleKey]float64) map[replan.ModuleKey]float64
	Members []placement.Member
	// Arrivals are the requests served, from 0; Change the time the rate
	// changes (a step's step, a ramp's start), for "first scale-up after".
	Arrivals *arrival.Trace
	Change   time.Duration
	// Delay is from a decision to its machines serving (backends already
	// running: placement and the plan switch).
	Delay time.Duration
	// Flush is the gateway's flush rule (dispatcher.FlushIdle); Admission
	// as the gateway's.
	Flush     dispatcher.Flush
	Admission bool
}

// TuningRow is one way of following the rate on the arrivals.
type TuningRow struct {
	Name string
	// Changes are the plan switches it made (when they serve); Planned counts
	// the planner runs among them (the tuner and coarse-grained tuning run
	// none).
	Changes []simulate.PlanChange
	Planned int
	// FirstUp is the first switch to more machines after TuningOptions.Change,
	// from it (serving); -1 when none.
	FirstUp time.Duration
	// Attainment is of all the requests; After of those arriving from Change on.
	Attainment, After float64
	// MachineSeconds is Σ machines × time served over the arrivals' span;
	// MeanCost the plans' cost (cost units per hour) averaged over that span.
	MachineSeconds, MeanCost float64
	// Peak is the most machines it served with.
	Peak float64
}

// Tuning runs the comparison of TuningOptions: rows unchanged, tuner,
// control loop, coarse-grained. Errors: a missing option, a planner or
// simulation error.
func Tuning(o TuningOptions) ([]TuningRow, error) {
	if o.Config == nil || o.Plan == nil || o.Coarse == nil || o.Sample == nil || o.Arrivals == nil || o.Replan == nil {
		return nil, errors.New("tuning: Config, Plan, Coarse, Sample, Arrivals and Replan are required")
	}
	name, rate, err := simulate.SessionRate(o.Config, o.Session)
	if err != nil {
		return nil, err
	}
	o.Session = name
	s, _ := o.Config.Session(name)
	slo := time.Duration(s.SLO)
	counts := replan.BucketCounts(o.Arrivals)
	rows := []TuningRow{{Name: "trace plan, unchanged"}}

	tu, err := tunerChanges(o, slo, counts)
	if err != nil {
		return nil, err
	}
	rows = append(rows, tu)
	cl, err := controlChanges(o, s, rate, counts)
	if err != nil {
		return nil, err
	}
	rows = append(rows, cl)
	co, err := coarseChanges(o, counts)
	if err != nil {
		return nil, err
	}
	rows = append(rows, co)

	span := o.Arrivals.Span()
	for i := range rows {
		r := &rows[i]
		base := o.Plan
		if i == len(rows)-1 {
			base = o.Coarse
		}
		rep, err := simulate.Run(base, simulate.Options{Arrival: "trace", Trace: o.Arrivals, Session: name, Flush: o.Flush,
			Admission: o.Admission, Seed: 1, Changes: r.Changes, PerSecond: true})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name, err)
		}
		sr := rep.Sessions[0]
		r.Attainment = sr.SLOAttainment
		arrived, within := 0, 0
		for k, sec := range sr.Seconds {
			if time.Duration(k)*time.Second >= o.Change {
				arrived += sec.Arrived
				within += sec.Within
			}
		}
		if arrived > 0 {
			r.After = float64(within) / float64(arrived)
		}
		r.FirstUp = -1
		prev := PlanMachines(base)
		r.Peak = prev
		at, cost := time.Duration(0), base.TotalCost
		for _, c := range r.Changes {
			m := PlanMachines(c.Plan)
			if r.FirstUp < 0 && c.At >= o.Change && m > prev {
				r.FirstUp = c.At - o.Change
			}
			if c.At < span {
				r.MachineSeconds += prev * (c.At - at).Seconds()
				r.MeanCost += cost * (c.At - at).Seconds()
				at = c.At
			}
			prev, cost = m, c.Plan.TotalCost
			r.Peak = max(r.Peak, m)
		}
		r.MachineSeconds += prev * (span - at).Seconds()
		r.MeanCost += cost * (span - at).Seconds()
		r.MeanCost /= span.Seconds()
	}
	return rows, nil
}

// PlanMachines is the plan's machines (Σ groups' Machines, fractional), all
// sessions and modules.
func PlanMachines(p *api.Plan) float64 {
	n := 0.0
	for _, sp := range p.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				n += g.Machines
			}
		}
	}
	return n
}

var tuningStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// tunerChanges runs replan.Tuner on the counts as StartTuner does: Observe
// and Check every bucket, each decision the plan Tuned.
func tunerChanges(o TuningOptions, slo time.Duration, counts []int) (TuningRow, error) {
	const name = "tuner (InferLine §5)"
	tu, err := replan.NewTuner(o.Plan, o.Session, slo, o.Sample, tuningStart)
	if err != nil {
		return TuningRow{Name: name}, err
	}
	return tunedChanges(name, tu, o.Plan, o.Delay, counts), nil
}

// tunedChanges drives tu over the counts as controlplane.StartTuner drives
// it (Observe and Check each bucket, oldest first) and returns the row of
// the plans it makes live: Tuned(base) at each decision, delay after the
// bucket that made it. One loop for the module tuner and the coarse one.
func tunedChanges(name string, tu replan.Tuning, base *api.Plan, delay time.Duration, counts []int) TuningRow {
	row := TuningRow{Name: name}
	for b, n := range counts {
		end := time.Duration(b+1) * replan.TunerBucket
		tu.Observe(tuningStart.Add(end), n)
		if _, ok := tu.Decide(); ok {
			row.Changes = append(row.Changes, simulate.PlanChange{At: end + delay, Plan: tu.Tuned(base)})
		}
	}
	return row
}

// virtualClock is the control loop's clock here: Step is called with the
// time, and Tick is never used.
type virtualClock struct{ now *time.Time }

func (c virtualClock) Now() time.Time { return *c.now }
func (c virtualClock) Tick(time.Duration) (<-chan time.Time, func()) {
	return nil, func() {}
}

// StaticTick and StaticSustainUp are the embedded gateway's control-loop
// timing (controlplane.StaticTick, StaticSustainUp).
const (
	staticTick      = 100 * time.Millisecond
	staticSustainUp = 500 * time.Millisecond
)

// controlChanges runs replan.Controller on the counts as the embedded
// gateway does: every module of the session counted in the rate monitor, a
// Step every tick, each published plan (its unplaced form) switched to.
func controlChanges(o TuningOptions, s *api.Session, rate float64, counts []int) (TuningRow, error) {
	row := TuningRow{Name: "control loop (rate re-plan)"}
	now := tuningStart
	mon, err := replan.NewRateMonitor(now, replan.MonitorOptions{Bucket: replan.TunerBucket})
	if err != nil {
		return row, err
	}
	type counter struct {
		c     *replan.Counter
		ratio float64
		acc   float64
	}
	var ctrs []*counter
	for _, m := range s.Modules {
		ratio := 1.0
		if rate > 0 {
			ratio = m.Rate / rate
		}
		ctrs = append(ctrs, &counter{c: mon.Handle(s.Name, m.Name, replan.EnvelopeWindow(time.Duration(s.SLO), m.Rate)), ratio: ratio})
	}
	var published []*replan.Replan
	members := o.Members
	if len(members) == 0 {
		members = poolFor(o.Plan, 4)
	}
	ctl, err := replan.New(o.Config, members, replan.Options{Plan: o.Replan, Covers: o.Covers, Clock: virtualClock{&now},
		Tick: staticTick, SustainUp: staticSustainUp,
		Target: replan.Publisher(func(r *replan.Replan) error { published = append(published, r); return nil })})
	if err != nil {
		return row, err
	}
	ctl.Step(now)
	if len(published) != 1 {
		return row, errors.New("control loop: no initial plan")
	}
	every := int(staticTick / replan.TunerBucket)
	for b, n := range counts {
		for _, c := range ctrs {
			c.acc += float64(n) * c.ratio
			k := math.Floor(c.acc)
			c.acc -= k
			c.c.Add(int64(k))
		}
		now = tuningStart.Add(time.Duration(b+1) * replan.TunerBucket)
		mon.Advance(now)
		if (b+1)%every == 0 {
			ctl.ObserveRates("gateway", mon.Snapshot(now))
			ctl.Step(now)
		}
	}
	for _, r := range published[1:] {
		row.Changes = append(row.Changes, simulate.PlanChange{At: r.At.Sub(tuningStart) + o.Delay, Plan: r.Unplaced})
		if r.Cause != replan.CauseTune {
			row.Planned++
		}
	}
	return row, nil
}

// poolFor is n times the devices plan needs of each hardware type, one
// member each: a pool a re-plan can grow onto.
func poolFor(plan *api.Plan, n int) []placement.Member {
	need := map[string]float64{}
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				need[g.Hardware] += math.Ceil(g.Machines)
			}
		}
	}
	var out []placement.Member
	for hw, k := range need {
		for i := range int(k) * n {
			out = append(out, placement.Member{ID: fmt.Sprintf("%s-%d", hw, i), Hardware: hw})
		}
	}
	return out
}

// coarseChanges runs coarse-grained tuning (replan.CoarseTuner, as
// `piccolo gateway --tune --tune-scope pipeline` runs it) on the counts from
// the coarse plan.
func coarseChanges(o TuningOptions, counts []int) (TuningRow, error) {
	const name = "coarse-grained tuning (pipeline replicas)"
	tu, err := replan.NewCoarseTuner(o.Coarse, o.Session, o.Sample)
	if err != nil {
		return TuningRow{Name: name}, err
	}
	return tunedChanges(name, tu, o.Coarse, o.Delay, counts), nil
}

// WriteTuning writes rows as the table of docs/traffic.md.
func WriteTuning(w io.Writer, rows []TuningRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tFIRST UP\tPLAN CHANGES (PLANNER RUNS)\tATTAINMENT ALL / AFTER\tMACHINE-S\tMEAN COST\tPEAK MACHINES")
	for _, r := range rows {
		up := "none"
		if r.FirstUp >= 0 {
			up = fmt.Sprintf("%.1f s", r.FirstUp.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%s\t%d (%d)\t%.2f%% / %.2f%%\t%.0f\t%.2f\t%.1f\n", r.Name, up, len(r.Changes), r.Planned,
			100*r.Attainment, 100*r.After, r.MachineSeconds, r.MeanCost, r.Peak)
	}
	return tw.Flush()
}
