package planner

import (
	"math"
	"slices"

	"github.com/piccolo-serving/piccolo/api"
)

// TailMiss is the share of a module's items (0.1%) that its measured tail
// (api.Tail) may make late: the complement of the 99.9% of requests the
// serving plan's burst check holds every session to (simulate.BurstCheck's
// default target).
const TailMiss = 0.001

// tailMissTol absorbs float rounding in the comparisons with TailMiss
// (0.1³ is 1.0000000000000002e-3).
const tailMissTol = 1e-9

// tailForms says how a module with the measured tail t (api.Tail: a share s
// of its batches take f times their profiled duration d), each batch run on
// k machines at once (k = 1: no race; Cloudflow's competitive execution, the
// first answer taken), is planned: whether the tail is within TailMiss
// (plain), whether the held-up form is offered, and the mean batch duration
// over d, 1 + p·(f − 1). No tail, s = 0 or f = 1 is plain with mean 1.
// docs/planner.md, "Choosing the race from a measured tail", has the rule
// with the simulated figures.
//
// A batch is slow when all k copies are: p = s^k of them. A slow batch holds
// its machine f·d instead of d, and the batches queued behind it meanwhile
// wait for it: at most f of them (one per d, the machine fully busy). So
// the share of items a slow batch makes late is at most q = p·(1 + f).
// Counting only the slow batches themselves (q = p) is not enough: with
// s = 0.1, f = 8, racing on 3 machines (p = 0.1%) in a 100 ms SLO met it for
// 96.8–99.8% of simulated requests from 100 req/s up, racing on 4 (q =
// 0.09%) for 99.95–100% (simulate/race_test.go).
//
// Where q ≤ TailMiss the tail is within the misses the target allows: the
// WCL is computed with d, and the machines (a raced module's k-machine
// racing sets) are sized at the mean time a batch holds its machine,
// (1 + p·(f − 1))·d. Otherwise every config of the module is offered in the
// forms below, each a candidate of its own, and the planner takes the
// cheapest that meets the budget:
//
//   - headroom: machines sized for every batch to be slow, at f·d, so that no
//     batch waits for a machine even when all are slow (Theorem 1 with f·d
//     for d); the WCL computed with f·d;
//   - held up, only where q ≤ √TailMiss (3.2%): machines sized at the mean;
//     the WCL computed with 2f·d, a batch held up behind one slow batch and
//     slow itself. What is late is then held up behind two slow batches,
//     about q² of the items, within TailMiss; for a heavier tail chains of
//     slow batches are common, and only headroom bounds them.
//
// The plan records the duration a group's WCL is computed with
// (api.GroupPlan.TailMs); its DurationMs and Throughput stay the profile's.
func tailForms(t *api.Tail, k int) (plain, heldUp bool, mean float64) {
	if t == nil || !(t.Share > 0) || !(t.Factor > 1) {
		return true, false, 1
	}
	p := math.Pow(t.Share, float64(max(k, 1)))
	q := p * (1 + t.Factor)
	return q <= TailMiss*(1+tailMissTol), q <= math.Sqrt(TailMiss)*(1+tailMissTol), 1 + p*(t.Factor-1)
}

// raceFor returns the k that race: auto weighs against no race for a module
// with tail t: the smallest k in 2..api.MaxRace whose q = Share^k·(1 + Factor)
// is within TailMiss (tailForms), so that its WCL holds at the profiled
// duration. 0 when no race is needed or none helps: no tail, q within
// TailMiss already at k = 1 (a light tail costs only its mean), or a tail so
// heavy that even api.MaxRace copies leave q above TailMiss.
func raceFor(t *api.Tail) int {
	if plain, _, _ := tailForms(t, 1); plain {
		return 0
	}
	for k := 2; k <= api.MaxRace; k++ {
		if plain, _, _ := tailForms(t, k); plain {
			return k
		}
	}
	return 0
}

// withTail returns the candidates a module with tail t, each batch run on k
// machines at once, is planned with (tailForms): cands themselves without a
// tail; each Throughput over the mean where the tail is within TailMiss;
// else for each the headroom form and, where offered, the held-up form, in
// throughput-cost order. Every candidate changed keeps the profile's
// duration (Candidate.profiled). cands may be modified.
func withTail(cands []Candidate, t *api.Tail, k int) []Candidate {
	plain, heldUp, mean := tailForms(t, k)
	if plain {
		if mean == 1 {
			return cands
		}
		for i := range cands {
			cands[i].profiled = cands[i].Duration
			cands[i].Throughput /= mean
		}
		return cands
	}
	out := make([]Candidate, 0, 2*len(cands))
	for _, c := range cands {
		c.profiled = c.Duration
		room := c
		room.Duration, room.Throughput = t.Factor*c.Duration, c.Throughput/t.Factor
		out = append(out, room)
		if heldUp {
			held := c
			held.Duration, held.Throughput = 2*t.Factor*c.Duration, c.Throughput/mean
			out = append(out, held)
		}
	}
	sortCandidates(out)
	return out
}

// chooseRaces plans session s, whose modules with race: auto
// (api.RaceAuto) are resolved first, and returns the plan. For each such
// module with a tail (api.Tail) for which raceFor finds a k, two plans of
// the whole session are compared: no race (the module planned for its tail,
// tailForms: headroom, or held up where offered) against race k (its
// WCL at the profiled duration, k whole machines for each machine,
// racedMachines). The cheaper that meets the SLO is kept; at equal cost, no
// race. The modules are settled one after another, in the session's order,
// each against the choices already made (one plan more per module that may
// race); a module with auto and no tail, or a tail that needs no race or
// that no race helps, is not raced. The plan records the race chosen
// (api.ModulePlan.Race, 0 for none).
func chooseRaces(s *api.Session, plan func(*api.Session) (api.SessionPlan, error)) (api.SessionPlan, error) {
	cur := *s
	cur.Modules = slices.Clone(s.Modules)
	var auto []int
	for i := range cur.Modules {
		if m := &cur.Modules[i]; m.Race == api.RaceAuto {
			m.Race = 0
			if raceFor(m.Tail) > 1 {
				auto = append(auto, i)
			}
		}
	}
	best, err := plan(&cur)
	for _, i := range auto {
		next := cur
		next.Modules = slices.Clone(cur.Modules)
		next.Modules[i].Race = api.Race(raceFor(next.Modules[i].Tail))
		sp, e := plan(&next)
		if e == nil && (err != nil || sp.Cost < best.Cost-1e-9) {
			best, err, cur = sp, nil, next
		}
	}
	return best, err
}

// hasAutoRace reports whether a module of s has race: auto.
func hasAutoRace(s *api.Session) bool {
	return slices.ContainsFunc(s.Modules, func(m api.Module) bool { return m.Race == api.RaceAuto })
}
