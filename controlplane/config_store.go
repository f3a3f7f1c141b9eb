package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// ErrRejected is wrapped by ConfigStore.Update when a valid config was refused by
// the store's OnConfig (the planner could not plan a changed session, or the plan
// cannot be placed on the backends): the running config stays as it was. The
// admin API answers it with 422.
var ErrRejected = errors.New("config change rejected")

// ErrVersionMismatch is wrapped by ConfigStore.Update when the caller asked to
// change a version that is no longer current (the admin API's If-Match): 412.
var ErrVersionMismatch = errors.New("config version mismatch")

// OnConfig applies a new, valid config to the running system: the control loop
// re-plans and swaps the plan in; EmbeddedControl.Apply is the default. cause is
// one of ReplanCauses ("config" for a file reload, "manual" for the admin API).
// It is called by ConfigStore.Update with the store's lock held, so calls never
// overlap; it must return only when the new config is live, or an error when it
// could not be made live, in which case everything must still run as before.
type OnConfig func(ctx context.Context, cfg *api.Config, cause string) error

// ConfigSnapshot is one version of the running config. Config is immutable:
// never modify it or anything it points to; build a new Config instead.
type ConfigSnapshot struct {
	Config  *api.Config
	Version uint64    // 1 for the config the gateway started with, +1 for each change
	Cause   string    // what made this version: "initial", "config", "manual"
	At      time.Time // when it became live
}

// ConfigStore is the one place the running config changes: the admin API and the
// file watcher both go through Update, which serialises changes with a mutex,
// applies each with OnConfig and only then publishes it. Current is lock-free
// and returns an immutable snapshot, safe from any goroutine.
type ConfigStore struct {
	mu       sync.Mutex // serialises Update
	cur      atomic.Pointer[ConfigSnapshot]
	onConfig OnConfig
	hist     history          // every version, the newest HistoryLen (history.go)
	plan     func() *api.Plan // the running plan, for the history's costs (SetPlan)
}

// NewConfigStore returns a store whose version 1 is initial, which must be valid
// and already live (it is not passed to onConfig). onConfig may be nil: changes
// are then only validated and recorded (useful in tests and for a gateway whose
// plan comes from elsewhere).
func NewConfigStore(initial *api.Config, onConfig OnConfig) (*ConfigStore, error) {
	if initial == nil {
		return nil, errors.New("controlplane: NewConfigStore needs the initial config")
	}
	if err := initial.Validate(); err != nil {
		return nil, fmt.Errorf("controlplane: initial config: %w", err)
	}
	s := &ConfigStore{onConfig: onConfig}
	s.cur.Store(&ConfigSnapshot{Config: initial, Version: 1, Cause: "initial", At: time.Now()})
	s.hist.add(nil, *s.cur.Load(), "file", "", 0)
	return s, nil
}

// Current returns the running config and its version.
func (s *ConfigStore) Current() ConfigSnapshot { return *s.cur.Load() }

// Update makes a change: change gets the running config (never modify it) and
// returns the new one; change's error (wrap api.ErrInvalidConfig for a config
// that is not valid) is returned as it is and nothing changes. The new config is
// validated (api.Config.Validate) and passed to OnConfig; an OnConfig error is
// returned wrapping ErrRejected and nothing changes. ifVersion, when not 0, is
// the version the caller read: if another change came first, Update fails with
// ErrVersionMismatch. On success the new snapshot is returned.
func (s *ConfigStore) Update(ctx context.Context, cause string, ifVersion uint64,
	change func(cur *api.Config) (*api.Config, error)) (ConfigSnapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cur.Load()
	if ifVersion != 0 && ifVersion != cur.Version {
		return *cur, fmt.Errorf("%w: the change was made against version %d, the running config is version %d: read it again",
			ErrVersionMismatch, ifVersion, cur.Version)
	}
	next, err := change(cur.Config)
	if err != nil {
		return *cur, err
	}
	if next == nil {
		return *cur, errors.New("controlplane: config change produced no config")
	}
	if err := next.Validate(); err != nil {
		return *cur, err
	}
	if s.onConfig != nil {
		if err := s.onConfig(ctx, next, cause); err != nil {
			return *cur, fmt.Errorf("%w: %w", ErrRejected, err)
		}
	}
	snap := &ConfigSnapshot{Config: next, Version: cur.Version + 1, Cause: cause, At: time.Now()}
	s.cur.Store(snap)
	who, note := whoOf(ctx, cause)
	s.hist.add(cur.Config, *snap, who, note, s.planCost())
	return *snap, nil
}

// Adopt records cfg, made live by someone else (a plan the cluster's re-planner
// published, carrying a config another gateway's admin API changed), as the
// running config, without calling OnConfig. It never waits for an Update in
// progress (that Update may be waiting for this very plan); the version is one
// more than the current. Returns the new snapshot.
func (s *ConfigStore) Adopt(cfg *api.Config, cause string) ConfigSnapshot {
	for {
		cur := s.cur.Load()
		next := &ConfigSnapshot{Config: cfg, Version: cur.Version + 1, Cause: cause, At: time.Now()}
		if s.cur.CompareAndSwap(cur, next) {
			s.hist.add(cur.Config, *next, "cluster", "", s.planCost())
			return *next
		}
	}
}
