package dispatcher

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Sentinel errors callers branch on (errors.Is).
var (
	// ErrDeadline: the item's deadline passed before it could be sent; it was
	// never sent to a backend. It wraps api.ErrDeadline (gateway.ErrDeadline).
	ErrDeadline = fmt.Errorf("%w before dispatch", api.ErrDeadline)
	// ErrOverloaded: Options.Admission refused the item at Submit: given the
	// machines' queues it would complete after it is due (Item.Due). It was
	// never queued. It wraps api.ErrOverloaded (gateway.ErrOverloaded).
	ErrOverloaded = fmt.Errorf("%w: the item would complete after it is due", api.ErrOverloaded)
	// ErrCancelled: the item was abandoned (Item.Abandoned) before it was
	// sent; it was never sent to a backend. It wraps api.ErrCancelled
	// (gateway.ErrCancelled).
	ErrCancelled = fmt.Errorf("%w before dispatch", api.ErrCancelled)
	// ErrClosed: the dispatcher was closed.
	ErrClosed = errors.New("dispatcher closed")
	// ErrPlan: the module plan cannot be served (bad numbers); the message says which.
	ErrPlan = errors.New("invalid module plan")
	// ErrSender: the Sender broke its contract (e.g. wrong number of outputs).
	ErrSender = errors.New("sender error")
)

// Slot is one machine of a module's plan: a backend running one config. Slots are
// immutable; a plan swap makes new ones.
type Slot struct {
	Module string
	// Group is the index of the machine's config group in ModulePlan.Configs
	// (throughput-cost rank, 0 best); Machine its index within the group.
	// A spare machine (SetSpare) has Group −1 and Machine its index in the
	// spare list.
	Group, Machine int
	// Backend is the backend id from GroupPlan.Backends ("" when the plan is not
	// placed, as in the simulator).
	Backend     string
	Hardware    string
	Batch       int
	Concurrency int
	// Duration is the profiled duration of one batch on one lane.
	Duration time.Duration
	// RatePerSec is the planned request rate of this machine (dummies included):
	// the group's rate shared by occupancy (a fractional last machine gets its share).
	RatePerSec float64
	// Occupancy is 1, or the fraction of the group's last machine.
	Occupancy float64
	// Cost is Price × Occupancy, in cost units per hour.
	Cost float64
}

// String names the slot as "module/g<group>m<machine>" plus the backend if known.
func (s *Slot) String() string {
	if s == nil {
		return "<nil>"
	}
	if s.Backend != "" {
		return fmt.Sprintf("%s/g%dm%d(%s)", s.Module, s.Group, s.Machine, s.Backend)
	}
	return fmt.Sprintf("%s/g%dm%d", s.Module, s.Group, s.Machine)
}

// SlotsOf returns the slots of mp in rank order, or an error (wrapping ErrPlan)
// naming the group and field that cannot be served. A group of m machines has
// ceil(m) slots (len(Backends) when the plan is placed).
func SlotsOf(mp api.ModulePlan) ([]Slot, error) {
	if len(mp.Configs) == 0 {
		return nil, fmt.Errorf("module %q: no config groups: %w", mp.Name, ErrPlan)
	}
	if bad(mp.DummyRate) || mp.DummyRate < 0 {
		return nil, fmt.Errorf("module %q: dummy_rate %v: must be a finite number ≥ 0: %w", mp.Name, mp.DummyRate, ErrPlan)
	}
	if bad(mp.BudgetMs) || mp.BudgetMs < 0 || mp.BudgetMs > maxMs {
		return nil, fmt.Errorf("module %q: budget_ms %v: must be in [0, %g]: %w", mp.Name, mp.BudgetMs, float64(maxMs), ErrPlan)
	}
	var slots []Slot
	for gi, g := range mp.Configs {
		errf := func(format string, a ...any) error {
			return fmt.Errorf("module %q group %d (%s): %s: %w", mp.Name, gi, g.Hardware, fmt.Sprintf(format, a...), ErrPlan)
		}
		conc := g.Concurrency
		if conc == 0 {
			conc = 1
		}
		switch {
		case g.Batch < 1 || g.Batch > MaxBatch:
			return nil, errf("batch %d: must be in [1, %d]", g.Batch, MaxBatch)
		case conc < 1 || conc > MaxConcurrency:
			return nil, errf("concurrency %d: must be in [1, %d]", g.Concurrency, MaxConcurrency)
		case bad(g.DurationMs) || g.DurationMs <= 0 || g.DurationMs > maxMs:
			return nil, errf("duration_ms %v: must be > 0 and ≤ %g", g.DurationMs, float64(maxMs))
		case bad(g.Machines) || g.Machines <= 0 || g.Machines > 1e4:
			return nil, errf("machines %v: must be a number > 0 and ≤ 10000", g.Machines)
		case bad(g.Rate) || g.Rate < 0:
			return nil, errf("rate %v: must be a finite number ≥ 0", g.Rate)
		}
		n := int(math.Ceil(g.Machines - 1e-9))
		if len(g.Backends) > 0 && len(g.Backends) != n {
			return nil, errf("%d backends for %v machines: want %d (one per machine, the last may be fractional)", len(g.Backends), g.Machines, n)
		}
		for i := 0; i < n; i++ {
			occ := 1.0
			if i == n-1 {
				occ = g.Machines - float64(n-1)
			}
			s := Slot{
				Module: mp.Name, Group: gi, Machine: i,
				Hardware: g.Hardware, Batch: g.Batch, Concurrency: conc,
				Duration:   time.Duration(g.DurationMs * float64(time.Millisecond)),
				RatePerSec: g.Rate * occ / g.Machines,
				Occupancy:  occ,
				Cost:       g.Price * occ,
			}
			if len(g.Backends) > 0 {
				s.Backend = g.Backends[i]
			}
			slots = append(slots, s)
		}
	}
	return slots, nil
}

// Bounds on a group's numbers: far above any real profile, low enough that a
// typo cannot make the dispatcher allocate gigabytes.
const (
	MaxBatch       = 1 << 16
	MaxConcurrency = 1 << 10
	maxMs          = 24 * 3600 * 1000 // a day, in ms
)

func bad(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
