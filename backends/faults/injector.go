package faults

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// ErrInjected is wrapped by every error a fault makes up on the backend (fail,
// and reset without a Listener), so its logs can tell them from real ones.
var ErrInjected = errors.New("injected fault")

// Options configure an Injector. The zero value is usable.
type Options struct {
	// Seed seeds the draws of the fail share: the same seed fails the same
	// calls in the same order of calls.
	Seed uint64
	// Logger logs every change of the faults, once; never per call.
	Logger *zap.Logger
	// Registerer, when set, gets the gauge piccolo_backend_fault{kind}.
	Registerer prometheus.Registerer
	// Now is the time fault shared reads when a batch starts, to tell
	// whether another model ran within SharedWindow (nil: time.Now; tests
	// pass a fake one). Batch durations are real time either way.
	Now func() time.Time
}

// Injector holds one backend's active faults and applies them through the
// wrappers it returns (Executor, Listener, ServerOption).
type Injector struct {
	seed  uint64
	log   *zap.Logger
	gauge *prometheus.GaugeVec
	now   func() time.Time

	mu  sync.Mutex // serializes Set; guards lis
	lis *listener  // nil until Listener

	cur       atomic.Pointer[active] // nil: no fault
	draws     atomic.Uint64          // fail share draw counter
	malformed atomic.Uint64          // alternates the malformed kinds
}

// active is one published Set; immutable but for changed, which is closed when
// the Set is replaced (waking hanging batches).
type active struct {
	set     Set
	changed chan struct{}
}

// New returns an Injector with no fault active.
func New(opts Options) (*Injector, error) {
	j := &Injector{seed: opts.Seed, log: opts.Logger, now: opts.Now}
	if j.log == nil {
		j.log = zap.NewNop()
	}
	if j.now == nil {
		j.now = time.Now
	}
	if opts.Registerer != nil {
		j.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "piccolo_backend_fault",
			Help: "Active injected fault by kind: 1 for refuse, reset, hang, malformed; the factor k for slow; the share p for fail; 0 when off."},
			[]string{"kind"})
		if err := opts.Registerer.Register(j.gauge); err != nil {
			return nil, fmt.Errorf("faults: metrics: %w", err)
		}
		for _, k := range Kinds {
			j.gauge.WithLabelValues(k).Set(0)
		}
	}
	return j, nil
}

// Get returns the active faults.
func (j *Injector) Get() Set {
	if a := j.cur.Load(); a != nil {
		return a.set
	}
	return Set{}
}

// Clear removes every fault (reopening the listening socket after refuse).
func (j *Injector) Clear() error { return j.Set(Set{}) }

// Set replaces the active faults with s. A Set that does not validate, that
// needs the Listener (refuse, reset) before Listener was called, or whose
// listening socket cannot be reopened changes nothing and returns an error.
func (j *Injector) Set(s Set) error {
	if err := s.Validate(); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if (s.Refuse || s.Reset) && j.lis == nil {
		return fmt.Errorf("faults: refuse and reset need the gRPC listener (Injector.Listener); this backend has none")
	}
	old := j.Get()
	if j.lis != nil && s.Refuse != old.Refuse {
		if err := j.lis.refuse(s.Refuse); err != nil {
			return err
		}
	}
	var next *active
	if !s.None() {
		next = &active{set: s, changed: make(chan struct{})}
	}
	if prev := j.cur.Swap(next); prev != nil {
		close(prev.changed)
	}
	if j.gauge != nil {
		for i, v := range s.values() {
			j.gauge.WithLabelValues(Kinds[i]).Set(v)
		}
	}
	if old != s {
		if s.None() {
			j.log.Info("faults cleared", zap.String("was", old.String()))
		} else {
			j.log.Info("faults set", zap.String("faults", s.String()), zap.String("was", old.String()))
		}
	}
	return nil
}

// failNow draws whether this call fails under a share p: a seeded
// counter-based generator (lock-free; the same seed fails the same calls).
func (j *Injector) failNow(p float64) bool {
	if p >= 1 {
		return true
	}
	u := float64(splitmix64(j.seed+j.draws.Add(1)*0x9e3779b97f4a7c15)>>11) / (1 << 53)
	return u < p
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
