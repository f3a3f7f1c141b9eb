package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
)

// moduleSender is one module's dispatcher.Sender: it draws how long each of
// the module's batches runs and hands the batch to the simulation's sender.
// A batch takes its slot's profiled duration (× jitter); with a measured
// tail (api.ModulePlan.Tail) it takes Factor times that with probability
// Share, as `piccolo backend --fault slow=F,slowshare=S` makes it; raced on
// k machines (api.ModulePlan.Race, Cloudflow's competitive execution) it
// takes the shortest of k such draws, the first answer, at which the other
// copies are cancelled (the gateway's raceAttempt). A batch sent to a spare
// machine (Options.Spare) runs on that one machine. A module with neither
// tail nor race draws exactly what the shared sender alone would: one jitter
// draw a batch, none of its own. Sends allocate nothing.
type moduleSender struct {
	s      *sender
	racers int     // machines each batch runs on at once (≥ 1)
	share  float64 // of the batches slow, drawn per copy (0: no tail)
	factor float64 // a slow copy's duration over its profiled one
	rng    *rand.Rand
}

var _ dispatcher.Sender = (*moduleSender)(nil)

func (m *moduleSender) Send(b *dispatcher.Batch) {
	copies := m.racers
	if b.Slot.Group < 0 { // a spare machine: not one of a racing set
		copies = 1
	}
	ran := time.Duration(math.MaxInt64)
	for range copies {
		d := m.s.duration(b.Slot.Duration)
		if m.share > 0 && m.rng.Float64() < m.share {
			d = time.Duration(float64(d) * m.factor)
		}
		ran = min(ran, d)
	}
	m.s.send(b, ran)
}

// set takes mp's race and tail; rng is its session's tail draws (used only
// with a tail). Errors name what of mp is out of range.
func (m *moduleSender) set(mp *api.ModulePlan, rng func() *rand.Rand) error {
	if mp.Race < 0 || mp.Race > api.MaxRace {
		return fmt.Errorf("race %d: must be 0 to %d machines a batch", mp.Race, api.MaxRace)
	}
	m.racers, m.share, m.factor = max(mp.Race, 1), 0, 1
	if t := mp.Tail; t != nil {
		if !(t.Share >= 0 && t.Share <= api.MaxTailShare) || !(t.Factor >= 1 && t.Factor <= api.MaxTailFactor) {
			return fmt.Errorf("tail {share: %v, factor: %v}: want share in [0, %g] and factor in [1, %g]", t.Share, t.Factor, float64(api.MaxTailShare), float64(api.MaxTailFactor))
		}
		if t.Share > 0 && t.Factor > 1 {
			m.share, m.factor, m.rng = t.Share, t.Factor, rng()
		}
	}
	return nil
}

// racingSets returns the module plan mp's dispatcher runs in the simulator.
// A raced module (Race k > 1) is planned with k machines for each machine
// (planner's racedMachines); the simulator runs each k of them as one racing
// set: one slot of the dispatcher whose batch occupies all k machines until
// the first copy answers (moduleSender). So a group of M machines is M/k
// slots, each priced k machines (the group's cost unchanged); in a placed
// plan a set runs on the device of its first machine (Backends[j·k]), whose
// k−1 partners, whole machines on devices of their own, show no batches of
// their own in the device report. The live dispatcher picks a racer's
// partners per batch (Dispatcher.Alternate, idle machines first) instead of
// keeping sets; a set is the simpler, no more optimistic model. mp is
// returned unchanged when it is not raced.
func racingSets(mp api.ModulePlan) api.ModulePlan {
	k := mp.Race
	if k <= 1 {
		return mp
	}
	groups := make([]api.GroupPlan, len(mp.Configs))
	for i, g := range mp.Configs {
		g.Machines /= float64(k)
		g.Price *= float64(k)
		if len(g.Backends) > 0 {
			n := int(math.Ceil(g.Machines - 1e-9))
			sets := make([]string, 0, n)
			for j := 0; j < n && j*k < len(g.Backends); j++ {
				sets = append(sets, g.Backends[j*k])
			}
			g.Backends = sets
		}
		groups[i] = g
	}
	mp.Configs = groups
	return mp
}
