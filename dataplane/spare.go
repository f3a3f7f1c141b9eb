package dataplane

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
)

// spareBackend is one backend of the pool that the placed plan leaves idle,
// offered to one module as a spare machine (dispatcher.SetSpare).
type spareBackend struct {
	lm   *liveModule
	slot dispatcher.Slot
	addr string
}

// SpareSlots returns, for every module of placed (a plan placed on cfg's
// backends), the spare machines the live gateway gives it with
// LiveOptions.Spare: the backends of cfg's pool (the static `backends:`
// list, or the Consul members the plan was made with) that no group of
// placed names and whose hardware has a profile for the module's model, each
// as a slot (Group −1, Backend its id) of the profile's entry with the
// smallest batch that holds the module's largest group batch (a batch closed
// for any group fits it), among those the highest throughput; when no entry
// is that large, the largest batch. An entry longer than the module's budget
// is of no use and is skipped. One idle backend may be spare for several
// modules (each loads its own model there); each module's dispatcher then
// counts the backend's lanes as its own, so two modules overflowing at once
// may queue on it. Sorted by backend id. For `piccolo simulate` and tests to
// simulate what the gateway serves.
func SpareSlots(cfg *api.Config, placed *api.Plan) []dispatcher.Slot {
	var out []dispatcher.Slot
	for _, s := range spareSlots(cfg, placed, nil) {
		out = append(out, s.slot)
	}
	return out
}

// spareSlots is SpareSlots with each slot's backend address and module (nil
// when mods is nil; a module mods lacks is skipped when it is not).
func spareSlots(cfg *api.Config, placed *api.Plan, mods map[string]map[string]*liveModule) []spareBackend {
	used := map[string]bool{}
	for id := range placed.Backends() {
		used[id] = true
	}
	var idle []api.Backend
	for _, b := range cfg.Backends {
		if !used[b.ID] {
			idle = append(idle, b)
		}
	}
	if len(idle) == 0 {
		return nil
	}
	var out []spareBackend
	for _, sp := range placed.Sessions {
		for _, mp := range sp.Modules {
			lm := mods[sp.Name][mp.Name]
			if lm == nil && mods != nil {
				continue
			}
			need := 1
			for _, g := range mp.Configs {
				need = max(need, g.Batch)
			}
			budget := time.Duration(mp.BudgetMs * float64(time.Millisecond))
			for _, b := range idle {
				e, ok := spareEntry(cfg, mp.Model, b.Hardware, need, budget)
				if !ok {
					continue
				}
				out = append(out, spareBackend{lm: lm, addr: b.Address, slot: dispatcher.Slot{
					Module: mp.Name, Group: -1, Backend: b.ID, Hardware: b.Hardware,
					Batch: e.Batch, Concurrency: max(e.Concurrency, 1), Duration: e.Duration.D(), Occupancy: 1,
				}})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].slot.Backend < out[j].slot.Backend })
	return out
}

// spareEntry picks the profile entry of model on hardware a spare machine
// runs (spareSlots gives the rule); false when there is none.
func spareEntry(cfg *api.Config, model, hardware string, need int, budget time.Duration) (api.ProfileEntry, bool) {
	var best api.ProfileEntry
	found := false
	better := func(e api.ProfileEntry) bool {
		switch {
		case !found:
			return true
		case (e.Batch >= need) != (best.Batch >= need):
			return e.Batch >= need
		case e.Batch >= need && e.Batch != best.Batch:
			return e.Batch < best.Batch
		case e.Batch != best.Batch:
			return e.Batch > best.Batch
		}
		return e.Throughput() > best.Throughput()
	}
	for _, p := range cfg.ProfilesOf(model) {
		if p.Hardware != hardware {
			continue
		}
		for _, e := range p.Entries {
			if e.Batch < 1 || e.Duration.D() <= 0 || budget > 0 && e.Duration.D() > budget {
				continue
			}
			if better(e) {
				best, found = e, true
			}
		}
	}
	return best, found
}

// attachSpares gives each module of r its spare machines (spareSlots): a
// client for each, the module's model loaded there now, at plan apply,
// because loading takes seconds and the first overflow must not wait for
// it. A spare backend that cannot be reached or refuses the load is logged
// and left out; the plan itself does not depend on it. Called by
// newLiveRunner when LiveOptions.Spare is set, after the plan's own loads;
// returns the slots given, by module (their backends are warmed up too).
// The modules of the kept sessions (keptSession: their owner is not r yet)
// keep the spares they had: their client and health maps are read by the
// requests they serve.
func (r *LiveRunner) attachSpares(ctx context.Context, cfg *api.Config, placed *api.Plan, log *zap.Logger) map[*liveModule][]dispatcher.Slot {
	if log == nil {
		log = zap.NewNop()
	}
	mods := r.sessions
	if len(r.kept) > 0 {
		mods = map[string]map[string]*liveModule{}
		for s, m := range r.sessions {
			if !slices.Contains(r.kept, s) {
				mods[s] = m
			}
		}
	}
	spares := spareSlots(cfg, placed, mods)
	type loadKey struct{ addr, model string }
	loaded := map[loadKey]error{}
	bySlot := map[*liveModule][]dispatcher.Slot{}
	for _, s := range spares {
		k := loadKey{s.addr, s.lm.model}
		err, tried := loaded[k]
		if !tried {
			err = r.loadSpare(ctx, s)
			loaded[k] = err
		}
		if err != nil {
			log.Warn("spare backend left out", zap.String("session", s.lm.session), zap.String("module", s.lm.name),
				zap.String("backend", s.slot.Backend), zap.Error(err))
			continue
		}
		bySlot[s.lm] = append(bySlot[s.lm], s.slot)
	}
	for lm, slots := range bySlot {
		if err := lm.disp.SetSpare(slots); err != nil {
			log.Warn("spare backends left out", zap.String("session", lm.session), zap.String("module", lm.name), zap.Error(err))
			delete(bySlot, lm)
		}
	}
	return bySlot
}

// loadSpare makes a client for s's backend and loads s's model there with
// the spare slot's batch and concurrency. A model the plan itself loaded on
// that address was loaded with the plan's numbers, which a spare backend
// cannot have (it is idle), so every spare load is one of its own.
func (r *LiveRunner) loadSpare(ctx context.Context, s spareBackend) error {
	c, err := r.pool.Client(s.addr)
	if err != nil {
		return err
	}
	if err := c.Load(ctx, s.lm.model, s.slot.Batch, s.slot.Concurrency); err != nil {
		return fmt.Errorf("load model %q (batch %d, concurrency %d): %w", s.lm.model, s.slot.Batch, s.slot.Concurrency, err)
	}
	r.loaded[modelAt{s.addr, s.lm.model}] = true
	s.lm.clients[s.slot.Backend] = c
	// The spare's batches feed its backend's health as the plan's do (pace,
	// straggler EWMA, calibration samples, ejection on a transport failure,
	// and the model reloaded when an ejected backend comes back): without
	// the entry a spare that slowed was trusted at its warm-up pace for good,
	// and one that died kept taking overflow batches that failed.
	s.lm.health[s.slot.Backend] = r.health.track(s.slot.Backend, r.pool, s.addr, s.lm.model, s.slot.Batch, s.slot.Concurrency)
	return nil
}
