package replan

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/arrival"
)

// InferLine's Tuner (InferLine §5, Algorithms 3 and 4): between whole
// re-plans, it compares the live arrival envelope of a session with the
// envelope of the trace its plan was made for, at every time scale from the
// SLO to a minute at once, and scales each module's machines:
//
//   - up at once when some window's live rate exceeds the planning trace's
//     rate for that window (Algorithm 3): k_m = machines_m × r_obs / r_sample
//     for the window that exceeds its sample rate by the largest factor;
//   - down after TunerSettle (15 s) without a change (Algorithm 4), to
//     machines_m × λ_new / the sample's largest 5 s rate (× ρ_m / ρ_min, the
//     pipeline's least max-provisioning ratio, as the paper's), λ_new the
//     largest 5 s rate of the last 30 s; never below the plan.
//
// Decision (docs/traffic.md, "The tuner"): the paper sizes k_m =
// ⌈r_max·s_m / (μ_m·ρ_m)⌉ = machines_m × r_max / λ, λ the trace's MEAN rate.
// For a plan that already carries the trace's bursts, r_max is a short
// window's rate, several times λ (3.5× on gamma CV² 16 at 0.5 s), so a burst
// just above the sample's would multiply the machines by the burst ratio
// again. Scaling by the exceeding window's own ratio to the sample gives the
// plan's provisioning per window instead. Machines stay fractional
// (Piccolo's occupancy; placement packs them), and changes under 10% up or
// 10% down are not acted on (the envelope's noise; each action is a plan
// switch).
//
// The Tuner decides; it does not plan. Tuned returns the plan with each
// module's groups scaled to the decided machine count, for the control
// loop to place and publish without running the planner.
//
// Time enters through Observe: the arrivals of each TunerBucket, oldest
// first. Not safe for concurrent use: one goroutine observes and checks.

// TunerBucket is the resolution of the Tuner's envelopes.
const TunerBucket = 100 * time.Millisecond

// TunerSettle is how long after a scaling action the Tuner waits before it
// scales down (InferLine §5: 3× the 5 s activation time of a replica).
const TunerSettle = 15 * time.Second

const (
	tunerSpan       = 60 * time.Second // the largest envelope window
	tunerDownWindow = 5 * time.Second  // Algorithm 4's rate window
	tunerDownSpan   = 30 * time.Second // … over the last 30 s
)

// TunerWindows are the envelope's windows for a session of SLO slo: slo
// (rounded up to TunerBucket), doubling, up to and including 60 s.
func TunerWindows(slo time.Duration) []time.Duration {
	w := max(time.Duration(math.Ceil(float64(slo)/float64(TunerBucket)))*TunerBucket, TunerBucket)
	var out []time.Duration
	for ; w < tunerSpan; w *= 2 {
		out = append(out, w)
	}
	return append(out, tunerSpan)
}

// SampleEnvelope is the planning trace's envelope: for each window of
// TunerWindows(slo), the most arrivals in any window of that length sliding
// a TunerBucket at a time, as a rate (req/s). Windows longer than the trace
// get its mean rate over the whole trace.
func SampleEnvelope(t *arrival.Trace, slo time.Duration) []float64 {
	counts := BucketCounts(t)
	ws := TunerWindows(slo)
	out := make([]float64, len(ws))
	for i, w := range ws {
		out[i] = maxWindowRate(counts, int(w/TunerBucket))
	}
	return out
}

// BucketCounts returns t's arrivals per TunerBucket, from offset 0 (the
// last bucket holds the trace's last arrival; nil for an empty trace): what
// a tuner Observes bucket by bucket, here and in the evaluation's replay.
func BucketCounts(t *arrival.Trace) []int {
	if len(t.Offsets) == 0 {
		return nil
	}
	counts := make([]int, int(t.Span()/TunerBucket)+1)
	for _, o := range t.Offsets {
		counts[int(o/TunerBucket)]++
	}
	return counts
}

// maxWindowRate is the most arrivals in any n consecutive buckets of counts,
// per second; fewer than n buckets: all of them over their own length.
func maxWindowRate(counts []int, n int) float64 {
	if len(counts) == 0 {
		return 0
	}
	if len(counts) < n {
		n = len(counts)
	}
	sum, best := 0, 0
	for i, c := range counts {
		sum += c
		if i >= n {
			sum -= counts[i-n]
		}
		best = max(best, sum)
	}
	return float64(best) / (float64(n) * TunerBucket.Seconds())
}

// TunerDecision is one scaling action: the machines each module of the
// session gets (module name → machines), why, and the rate it was sized for.
type TunerDecision struct {
	Up       bool // scale up (Algorithm 3), else down (Algorithm 4)
	Rate     float64
	Window   time.Duration // the window whose rate exceeded the sample's (up only)
	Machines map[string]float64
}

// Tuner is InferLine's Tuner for one session of a plan (see above).
type Tuner struct {
	session  string
	windows  []time.Duration
	sample   []float64          // req/s per window
	sample5  float64            // req/s: the sample's largest 5 s rate
	lambda   float64            // the planning trace's mean rate, req/s
	planned  map[string]float64 // module → the plan's machines
	rho      map[string]float64 // module → max-provisioning ratio
	rhoMin   float64
	current  map[string]float64 // module → machines now
	counts   []int              // ring of the last tunerSpan of buckets
	next     int                // ring position of the next bucket
	filled   int                // buckets observed, up to len(counts)
	now      time.Time
	lastMove time.Time
}

// NewTuner returns the Tuner of session in plan (unplaced or placed), planned
// for the trace sample (its mean rate is λ). Errors: the session is not in
// the plan or not planned, a module with no machines, a sample with fewer
// than two arrivals.
func NewTuner(plan *api.Plan, session string, slo time.Duration, sample *arrival.Trace, now time.Time) (*Tuner, error) {
	_, lambda := sample.MeanRate(0)
	if !(lambda > 0) {
		return nil, errors.New("tuner: the planning trace has fewer than two arrivals")
	}
	sp, err := plannedSession(plan, session)
	if err != nil {
		return nil, fmt.Errorf("tuner: %w", err)
	}
	t := &Tuner{session: session, windows: TunerWindows(slo), sample: SampleEnvelope(sample, slo), lambda: lambda,
		planned: map[string]float64{}, rho: map[string]float64{}, current: map[string]float64{}, rhoMin: math.Inf(1),
		counts: make([]int, int(tunerSpan/TunerBucket)), now: now, lastMove: now,
		sample5: maxWindowRate(BucketCounts(sample), int(tunerDownWindow/TunerBucket))}
	for _, mp := range sp.Modules {
		var machines, capacity float64
		for _, g := range mp.Configs {
			machines += g.Machines
			capacity += g.Machines * g.Throughput
		}
		if !(machines > 0 && capacity > 0) {
			return nil, fmt.Errorf("tuner: session %q module %q has no machines", session, mp.Name)
		}
		t.planned[mp.Name], t.current[mp.Name] = machines, machines
		// ρ_m = λ·s_m / μ_m, s_m = module rate / session rate (the module's
		// share of the session's requests), μ_m its machines' throughput.
		t.rho[mp.Name] = lambda * (mp.Rate / sessionRate(sp)) / capacity
		t.rhoMin = math.Min(t.rhoMin, t.rho[mp.Name])
	}
	return t, nil
}

// plannedSession is session's plan in plan. Error: not in it, or not planned.
func plannedSession(plan *api.Plan, session string) (*api.SessionPlan, error) {
	for i := range plan.Sessions {
		if sp := &plan.Sessions[i]; sp.Name == session && sp.Error == "" {
			return sp, nil
		}
	}
	return nil, fmt.Errorf("session %q is not planned in the plan", session)
}

func sessionRate(sp *api.SessionPlan) float64 {
	r := 0.0
	for _, mp := range sp.Modules {
		if len(mp.After) == 0 {
			r = math.Max(r, mp.Rate)
		}
	}
	return r
}

// Observe records the arrivals of the TunerBucket ending at at.
func (t *Tuner) Observe(at time.Time, arrivals int) {
	t.counts[t.next] = arrivals
	t.next = (t.next + 1) % len(t.counts)
	t.filled = min(t.filled+1, len(t.counts))
	t.now = at
}

// windowRate is the rate (req/s) over the last n observed buckets, 0 until n
// were observed: the live envelope's point for that window, as of now.
// Checked every bucket, it sees a burst as soon as the sliding maximum would.
func (t *Tuner) windowRate(n int) float64 {
	if t.filled < n {
		return 0
	}
	sum := 0
	for i := 1; i <= n; i++ {
		sum += t.counts[(t.next-i+len(t.counts))%len(t.counts)]
	}
	return float64(sum) / (float64(n) * TunerBucket.Seconds())
}

// Decide runs Algorithm 3, then Algorithm 4, and returns the decision when
// some module's machines change.
func (t *Tuner) Decide() (TunerDecision, bool) {
	// Algorithm 3: the window whose live rate exceeds the sample's most.
	factor, rmax, win := 1.0, 0.0, time.Duration(0)
	for i, w := range t.windows {
		if r := t.windowRate(int(w / TunerBucket)); r > t.sample[i] && r/t.sample[i] > factor {
			factor, rmax, win = r/t.sample[i], r, w
		}
	}
	if factor > 1 {
		d := TunerDecision{Up: true, Rate: rmax, Window: win, Machines: map[string]float64{}}
		for m, k := range t.planned {
			if want := k * factor; want > t.current[m]*(1+upStep) {
				d.Machines[m] = want
			}
		}
		if len(d.Machines) > 0 {
			t.apply(d)
			return d, true
		}
	}
	// factor ≥ 1 is what Algorithm 3 asks for now: scaling down below it
	// would scale up again at the next check (a window up to 60 s long
	// remembers the high rate longer than Algorithm 4's 30 s).
	if t.now.Sub(t.lastMove) <= TunerSettle {
		return TunerDecision{}, false
	}
	// Algorithm 4: λ_new, the largest 5 s rate of the last 30 s, against the
	// sample's largest 5 s rate, with the pipeline's least provisioning ratio.
	ordered := t.ordered()
	if n := int(tunerDownSpan / TunerBucket); len(ordered) > n {
		ordered = ordered[len(ordered)-n:]
	}
	lnew := maxWindowRate(ordered, int(tunerDownWindow/TunerBucket))
	d := TunerDecision{Rate: lnew, Machines: map[string]float64{}}
	for m, k := range t.planned {
		want := k * math.Max(factor, lnew/t.sample5*t.rho[m]/t.rhoMin)
		if want < k*(1+downStep) {
			want = k // within the noise of the plan: the plan
		}
		if want < t.current[m]*(1-downStep) || (want == k && t.current[m] > k) {
			d.Machines[m] = want
		}
	}
	if len(d.Machines) == 0 {
		return TunerDecision{}, false
	}
	t.apply(d)
	return d, true
}

// upStep and downStep are the least change the Tuner acts on, as a share of
// the machines a module has: smaller ones are the envelope's noise, and each
// action is a plan switch.
const upStep, downStep = 0.1, 0.1

// ordered is the observed buckets, oldest first.
func (t *Tuner) ordered() []int {
	out := make([]int, 0, t.filled)
	start := (t.next - t.filled + len(t.counts)) % len(t.counts)
	for i := range t.filled {
		out = append(out, t.counts[(start+i)%len(t.counts)])
	}
	return out
}

func (t *Tuner) apply(d TunerDecision) {
	for m, k := range d.Machines {
		t.current[m] = k
	}
	t.lastMove = t.now
}

// Machines returns the machines each module has now (module → machines).
func (t *Tuner) Machines() map[string]float64 {
	out := make(map[string]float64, len(t.current))
	for m, k := range t.current {
		out[m] = k
	}
	return out
}

// Tuned returns a copy of plan (unplaced) whose session's modules have the
// machines the Tuner decided: each group's machines and cost scaled by
// module machines now / planned machines, the plan's costs summed again.
// Batches, budgets and rates stay: the tuner adds replicas of the plan's
// configs, it does not plan.
func (t *Tuner) Tuned(plan *api.Plan) *api.Plan {
	return ScaleMachines(plan, t.session, func(module string) float64 { return t.current[module] / t.planned[module] })
}

// ScaleMachines returns a copy of plan, unplaced, with every group of
// session's modules at factor(module) × its machines and cost, the plan's
// costs summed again; batches, budgets and rates stay (replicas added or
// removed, no planning). plan is not changed.
func ScaleMachines(plan *api.Plan, session string, factor func(module string) float64) *api.Plan {
	out := *plan
	out.Sessions = append([]api.SessionPlan(nil), plan.Sessions...)
	out.TotalCost = 0
	for i := range out.Sessions {
		sp := &out.Sessions[i]
		if sp.Name == session {
			sp.Modules = append([]api.ModulePlan(nil), sp.Modules...)
			sp.Cost = 0
			for j := range sp.Modules {
				mp := &sp.Modules[j]
				f := factor(mp.Name)
				mp.Configs = append([]api.GroupPlan(nil), mp.Configs...)
				mp.Cost = 0
				for k := range mp.Configs {
					g := &mp.Configs[k]
					g.Machines *= f
					g.Cost = g.Machines * g.Price
					g.Backends = nil // placed again
					mp.Cost += g.Cost
				}
				sp.Cost += mp.Cost
			}
		}
		out.TotalCost += sp.Cost
	}
	return &out
}
