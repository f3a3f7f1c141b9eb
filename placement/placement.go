// Package placement assigns a plan's machines to backends: one function,
// Place(plan, members, prev, Options), for the gateway (static and its control
// loop), the cluster's re-planner, health re-placement, the simulator, the demo
// and `piccolo plan`. Pure functions of their arguments; safe from any
// goroutine. Imports api only.
package placement

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/piccolo-serving/piccolo/api"
)

// Member is one live backend as placement needs it: its id and hardware type.
// The membership package's richer Member converts to this in the wiring.
type Member struct {
	ID       string `json:"id"`
	Hardware string `json:"hardware"`
}

// ErrShortfall is what Shortfall.Err wraps: the pool has fewer devices of some
// hardware type than the plan needs.
var ErrShortfall = errors.New("not enough backends for the plan")

// Shortfall reports how a placement used the pool: per hardware type, devices
// needed vs present, and which groups got fewer machines than planned. A
// placement with no shortfall has Modules empty and Needed ≤ Present everywhere.
type Shortfall struct {
	// Hardware lists every hardware type the plan or the pool has, by name.
	Hardware []HardwareUse `json:"hardware"`
	// Modules lists the groups placed on fewer machines than planned, in plan order.
	Modules []ModuleShortfall `json:"modules,omitempty"`
	// Shared counts the machines placed on a device another machine already
	// holds because the pool was short (Options.RoundRobin and Static only).
	Shared int `json:"shared,omitempty"`
	// Interfering counts the fractional machines packed beside a model they
	// interfere with beyond Options.Tolerance (Options.Slowdowns) because no
	// device of their type was free.
	Interfering int `json:"interfering,omitempty"`
}

// HardwareUse is one hardware type's devices: Needed by the plan (full machines
// plus the devices the fractional machines pack onto), Present in the pool, Used
// by the placement (≤ Present) and the Idle ones' ids (present, unused: free to
// release or unload).
type HardwareUse struct {
	Hardware string   `json:"hardware"`
	Needed   int      `json:"needed"`
	Present  int      `json:"present"`
	Used     int      `json:"used"`
	Idle     []string `json:"idle,omitempty"`
}

// ModuleShortfall is one group placed on fewer machines than planned: Machines
// planned, Placed (the placed plan's Machines; 0 when the group was dropped).
type ModuleShortfall struct {
	Session  string  `json:"session"`
	Module   string  `json:"module"`
	Group    int     `json:"group"`
	Hardware string  `json:"hardware"`
	Machines float64 `json:"machines"`
	Placed   float64 `json:"placed"`
}

// Missing returns the devices missing over all hardware types: Σ max(0, Needed − Present).
func (s Shortfall) Missing() int {
	n := 0
	for _, h := range s.Hardware {
		n += max(0, h.Needed-h.Present)
	}
	return n
}

// Err returns nil when the pool sufficed, else an error wrapping ErrShortfall
// that names, per hardware type, devices needed vs present and the
// under-provisioned modules.
func (s Shortfall) Err() error {
	if s.Missing() == 0 && len(s.Modules) == 0 {
		return nil
	}
	var hw, mods []string
	for _, h := range s.Hardware {
		if h.Needed > h.Present {
			hw = append(hw, fmt.Sprintf("%s: %d needed, %d present", h.Hardware, h.Needed, h.Present))
		}
	}
	for _, m := range s.Modules {
		mods = append(mods, fmt.Sprintf("%s/%s on %s: %.3g of %.3g machines", m.Session, m.Module, m.Hardware, m.Placed, m.Machines))
	}
	return fmt.Errorf("%w: %s; under-provisioned: %s", ErrShortfall, strings.Join(hw, "; "), strings.Join(mods, "; "))
}

// occEps is the tolerance on occupancies: a device holds fractions summing to at
// most 1 + occEps, and a machine count within occEps of an integer is whole.
const occEps = 1e-9

// unit is one machine of one group: a full device or a fractional occupancy.
type unit struct {
	group  int     // index into groups
	slot   int     // position in the group's backends
	occ    float64 // 1 for a full machine
	prefer []int   // device indices this module ran on before, in that order
	dev    int     // device placed on (-1 before)
}

type groupRef struct {
	s, m, g int
	key     moduleKey
	model   string
	hw      string
	units   []int
}

type device struct {
	id      string
	used    float64
	virtual bool
	claims  int      // pending units that ran on it before
	models  []string // the models of the units placed on it
	modules []moduleKey
}

// Place assigns every machine of plan to a concrete backend of its group's
// hardware type and returns the placed plan (a copy; plan is not modified) with
// one backend id per machine in GroupPlan.Backends: a group of 2.4 machines gets
// 3 ids, the last for its fractional machine. Backends already in plan are
// ignored: prev, the previous placed plan (may be nil), is what placement keeps.
//
// Full machines get a device of their own; fractional machines of different
// modules are packed onto shared devices first-fit decreasing by occupancy, never
// beyond occupancy 1 (spatial multiplexing, paper §III-A). Placement is stable: a
// module's machines go first to the devices it ran on in prev (its model is
// loaded there), and new machines take devices no other module ran on before
// taking one that another module's pending machine may want back.
//
// When the pool is too small it places what fits: first one machine for every
// module (so every session stays served, at reduced capacity), then full machines
// in each module's throughput-cost order (group 0 first), then fractions; a group
// placed on fewer machines keeps its config with Machines, Rate and Cost scaled
// to what was placed (admission sheds the rest), a group with none is dropped,
// and a session with a module left without any group gets Error ("under-
// provisioned ...") and no modules. The Shortfall says, per hardware type,
// devices needed vs present, and which groups are short. Sessions whose plan
// failed are copied as they are.
//
// Errors (and no plan) for a nil plan, a member without id or hardware, a
// duplicate member id, or a group whose machines are not a finite number ≥ 0.
//
// With Options.Slowdowns, a fractional machine is not packed beside a model
// it interferes with (co-location avoidance, docs/calibration.md): it takes
// another shared device, a free one, or, when none is free, the shared device
// where the interference is least (Shortfall.Interfering counts those).
//
// Options choose another placement: RoundRobin, or Static (pack when the
// members hold every device, the fractions spread over the members packing
// leaves idle; else round-robin).
func Place(plan *api.Plan, members []Member, prev *api.Plan, opts Options) (*api.Plan, Shortfall, error) {
	if opts.Provision {
		return provision(plan)
	}
	if opts.Static {
		return placeStatic(plan, members, prev, opts.avoid(), opts.Chains)
	}
	if opts.RoundRobin {
		return placeRoundRobin(plan, members)
	}
	return pack(plan, members, prev, opts.avoid(), opts.Chains)
}

// Options choose how Place places.
type Options struct {
	// RoundRobin is the placement of a gateway with a static backends list
	// (no membership, no control loop): for each group, in plan order
	// (session, module, group), its ceil(machines) machines take the next
	// members of the group's hardware type, in members order, round-robin.
	// Members are used once each while any is free; when a hardware type has
	// fewer members than planned machines the rotation wraps and machines
	// share a member (Shortfall.Shared counts those machines): the plan is
	// served at reduced speed rather than scaled down. Groups that already
	// list backends keep them; prev is not used. A group whose hardware type
	// has no member is an error naming it. Shortfall.Hardware and Modules
	// stay empty.
	RoundRobin bool
	// Static is the placement of a static backends list (a gateway without
	// membership, the demo): see placeStatic.
	Static bool
	// Provision places on exactly as many devices as the plan needs, named
	// "<hardware>-<i>" (members and prev are not used): the devices the
	// simulator, `piccolo plan` and the demo count and start. A plan already
	// placed is returned as it is.
	Provision bool
	// Slowdowns are the co-location slowdowns measured on the live devices
	// (the re-planner's, from calibrate.Estimator.Colocations). Packing
	// (the default and Static) does not put two models on one device when
	// either one's slowdown beside the other exceeds 1 + Tolerance: its
	// batches would take longer than the duration the plan assumed
	// (GroupPlan.DurationMs, the model's duration alone) by more than the
	// re-planner's drift threshold. Nil: no pair is avoided.
	Slowdowns Slowdowns
	// Chains is JellyBean's network-aware assignment, for a gateway whose
	// backends keep the intermediates they make (dataplane
	// LiveOptions.Locality, docs/locality.md): a fractional machine goes to a
	// shared device where it fits beside a fraction of a module next to it
	// in its session (a parent or a child), before any other rule but the
	// device its module ran on before, so a chain's intermediate stays on
	// the device that made it. Packing and Static only.
	Chains bool
	// Tolerance is the slowdown beyond 1 that Slowdowns allow a co-located
	// model (default DefaultTolerance: the re-planner's drift threshold);
	// it must be > 0.
	Tolerance float64
}

// DefaultTolerance is Options.Tolerance's default: 0.1, the re-planner's
// drift threshold (replan.Options.DriftThreshold), so that a pair is kept
// apart exactly when sharing a device would drift its durations out of the
// plan's.
const DefaultTolerance = 0.1

// Pair is two models on one device of a hardware type: Model's batches run
// beside With's.
type Pair struct {
	Hardware string `json:"hardware"`
	Model    string `json:"model"`
	With     string `json:"with"`
}

// Slowdowns are measured co-location slowdowns: per Pair, Model's batch
// duration on a device shared with With over its duration on a device of
// the same type alone (1.3: 30% slower; calibrate.Colocation.Slowdown).
type Slowdowns map[Pair]float64

// avoid returns the interference check packing uses: nil without
// Slowdowns.
func (o Options) avoid() *interference {
	if len(o.Slowdowns) == 0 {
		return nil
	}
	tol := o.Tolerance
	if !(tol > 0) {
		tol = DefaultTolerance
	}
	return &interference{s: o.Slowdowns, limit: 1 + tol}
}

// interference is Options.Slowdowns with the limit 1 + Tolerance.
type interference struct {
	s     Slowdowns
	limit float64
}

// worst returns the largest slowdown between model and any of others on a
// device of hardware hw, either way round (1: none measured).
func (in *interference) worst(hw, model string, others []string) float64 {
	w := 1.0
	if in == nil {
		return w
	}
	for _, o := range others {
		w = max(w, in.s[Pair{hw, model, o}], in.s[Pair{hw, o, model}])
	}
	return w
}

// clash reports whether model interferes beyond the limit with a model on d.
func (in *interference) clash(hw, model string, d *device) bool {
	return in != nil && in.worst(hw, model, d.models) > in.limit
}

// pack is Place's default placement (packFit's first-fit packing).
func pack(plan *api.Plan, members []Member, prev *api.Plan, avoid *interference, chains bool) (*api.Plan, Shortfall, error) {
	return packFit(plan, members, prev, avoid, false, chains)
}

// packSpread is a static list's packing (placeStatic): pack, and, when
// that fits the pool with devices of a type left idle, the same with the
// fractional machines spread over them (packFit's spread), kept when it
// fits the pool too. Shortfall.Needed stays the first-fit packing's (the
// devices the plan needs, not the ones spreading used).
//
// Spreading, because a device runs one batch a lane: fractional machines
// of several modules stacked on a one-lane device wait for each other's
// batches, a wait the planner does not count (it plans each fraction as a
// machine of its own, and its burst check simulates them so), while a
// device of a static list left idle costs the same and serves nothing. The
// demo's two OCR sessions stacked their det and per-box chain on one
// single-lane cpu-1t backend, 0.71 of its time busy: Poisson bursts queued
// seconds of work there, and admission refused 0.8–1.6% of their requests
// in simulation, none on two devices (docs/ocr.md, "One lane, four
// models"). Only a static list: with membership (the default placement) an
// idle member is one the cluster may release (HardwareUse.Idle).
func packSpread(plan *api.Plan, members []Member, prev *api.Plan, avoid *interference, chains bool) (*api.Plan, Shortfall, error) {
	placed, short, err := pack(plan, members, prev, avoid, chains)
	if err != nil || short.Err() != nil || !idleBeside(short) {
		return placed, short, err
	}
	spread, ss, err := packFit(plan, members, prev, avoid, true, chains)
	if err != nil || ss.Err() != nil {
		return placed, short, nil
	}
	for i := range ss.Hardware {
		for _, h := range short.Hardware {
			if h.Hardware == ss.Hardware[i].Hardware {
				ss.Hardware[i].Needed = h.Needed
			}
		}
	}
	return spread, ss, nil
}

// idleBeside reports whether some hardware type has both a device in use
// and an idle one: only then can spreading move a fraction.
func idleBeside(s Shortfall) bool {
	for _, h := range s.Hardware {
		if h.Used > 0 && len(h.Idle) > 0 {
			return true
		}
	}
	return false
}

// packFit packs plan on members: full machines on devices of their own,
// fractions first-fit decreasing onto shared devices; with spread, a
// fraction takes a free device while the full machines still to place
// leave one, else the least used device it fits on (pick); with chains,
// a fraction first takes a device beside a fraction of its DAG neighbour
// (Options.Chains).
func packFit(plan *api.Plan, members []Member, prev *api.Plan, avoid *interference, spread, chains bool) (*api.Plan, Shortfall, error) {
	if plan == nil {
		return nil, Shortfall{}, errors.New("placement: no plan")
	}
	// Devices per hardware type, by id.
	devs := map[string][]*device{}
	seen := map[string]bool{}
	for i, mb := range members {
		switch {
		case mb.ID == "" || mb.Hardware == "":
			return nil, Shortfall{}, fmt.Errorf("placement: member %d (id %q, hardware %q): id and hardware must both be set", i, mb.ID, mb.Hardware)
		case seen[mb.ID]:
			return nil, Shortfall{}, fmt.Errorf("placement: member id %q listed twice; ids must be unique", mb.ID)
		}
		seen[mb.ID] = true
		devs[mb.Hardware] = append(devs[mb.Hardware], &device{id: mb.ID})
	}
	present := map[string]int{}
	for hw, ds := range devs {
		sort.Slice(ds, func(i, j int) bool { return ds[i].id < ds[j].id })
		present[hw] = len(ds)
	}
	index := func(hw, id string) int {
		for i, d := range devs[hw] {
			if d.id == id {
				return i
			}
		}
		return -1
	}

	// Where each module ran before, per hardware type, in order of first use.
	before := map[moduleKey]map[string][]string{}
	if prev != nil {
		for m := range prev.Machines() {
			k := moduleKey{m.Session.Name, m.Module.Name}
			if before[k] == nil {
				before[k] = map[string][]string{}
			}
			if !contains(before[k][m.Group.Hardware], m.Backend) {
				before[k][m.Group.Hardware] = append(before[k][m.Group.Hardware], m.Backend)
			}
		}
	}

	// One unit per machine.
	var groups []groupRef
	var units []unit
	for si, sp := range plan.Sessions {
		if sp.Error != "" {
			continue
		}
		for mi, mp := range sp.Modules {
			k := moduleKey{sp.Name, mp.Name}
			for gi, g := range mp.Configs {
				if math.IsNaN(g.Machines) || math.IsInf(g.Machines, 0) || g.Machines < 0 {
					return nil, Shortfall{}, fmt.Errorf("placement: session %q module %q group %d: machines %v: must be a finite number ≥ 0", sp.Name, mp.Name, gi, g.Machines)
				}
				ref := groupRef{s: si, m: mi, g: gi, key: k, model: mp.Model, hw: g.Hardware}
				var prefer []int
				for _, id := range before[k][g.Hardware] {
					if i := index(g.Hardware, id); i >= 0 {
						prefer = append(prefer, i)
					}
				}
				n := int(math.Ceil(g.Machines - occEps))
				for slot := range n {
					occ := 1.0
					if slot == n-1 {
						if f := g.Machines - float64(n-1); f < 1-occEps {
							occ = f
						}
					}
					ref.units = append(ref.units, len(units))
					units = append(units, unit{group: len(groups), slot: slot, occ: occ, prefer: prefer, dev: -1})
				}
				groups = append(groups, ref)
			}
		}
	}
	for _, u := range units {
		for _, d := range u.prefer {
			devs[groups[u.group].hw][d].claims++
		}
	}

	// Priority, so that a short pool still serves every session it can: first
	// one machine per module (the first machine of its first group), then the
	// other full machines in throughput-cost order (the group's position in its
	// module), then the other fractions; within a tier full machines come
	// before fractions, and fractions largest first (first-fit decreasing).
	order := make([]int, len(units))
	for i := range order {
		order[i] = i
	}
	tier := func(u unit) int {
		switch {
		case u.slot == 0 && groups[u.group].g == 0:
			return 0
		case u.occ >= 1:
			return 1
		}
		return 2
	}
	sort.SliceStable(order, func(a, b int) bool {
		ua, ub := units[order[a]], units[order[b]]
		if ta, tb := tier(ua), tier(ub); ta != tb {
			return ta < tb
		}
		fa, fb := ua.occ >= 1, ub.occ >= 1
		if fa != fb {
			return fa
		}
		if fa {
			return groups[ua.group].g < groups[ub.group].g
		}
		return ua.occ > ub.occ
	})
	// The full machines still to place, per hardware type: spreading leaves
	// them a free device each.
	fullLeft := map[string]int{}
	for _, u := range units {
		if u.occ >= 1 {
			fullLeft[groups[u.group].hw]++
		}
	}
	var short Shortfall
	for _, ui := range order {
		u := &units[ui]
		ref := groups[u.group]
		hw := ref.hw
		var clash func(*device) bool
		if avoid != nil {
			clash = func(d *device) bool { return avoid.clash(hw, ref.model, d) }
		}
		if u.occ >= 1 {
			fullLeft[hw]--
		}
		var near func(*device) bool
		if chains && u.occ < 1 {
			near = func(d *device) bool { return neighbours(plan, ref.key, d.modules) }
		}
		u.dev = pick(devs[hw], u, clash, near, spread && u.occ < 1, fullLeft[hw])
		if clash != nil && u.occ < 1 && (u.dev == len(devs[hw]) || devs[hw][u.dev].virtual) {
			// No device it can share and none free: beside the model it
			// interferes with least rather than on a missing device.
			if i := leastInterfering(devs[hw], u, func(d *device) float64 { return avoid.worst(hw, ref.model, d.models) }); i >= 0 {
				u.dev = i
				short.Interfering++
			}
		}
		if u.dev == len(devs[hw]) {
			devs[hw] = append(devs[hw], &device{id: fmt.Sprintf("<missing %s %d>", hw, u.dev), virtual: true})
		}
		d := devs[hw][u.dev]
		d.used += u.occ
		if !contains(d.models, ref.model) {
			d.models = append(d.models, ref.model)
		}
		if u.occ < 1 {
			d.modules = append(d.modules, ref.key)
		}
		for _, d := range u.prefer {
			devs[hw][d].claims--
		}
	}

	// The placed plan.
	out := *plan
	out.Sessions = make([]api.SessionPlan, len(plan.Sessions))
	out.TotalCost = 0
	for si, sp := range plan.Sessions {
		if sp.Error == "" {
			sp.Modules = append([]api.ModulePlan(nil), sp.Modules...)
			for mi := range sp.Modules {
				mp := &sp.Modules[mi]
				mp.Configs = append([]api.GroupPlan(nil), mp.Configs...)
				for gi := range mp.Configs {
					mp.Configs[gi].Backends = nil
				}
			}
		}
		out.Sessions[si] = sp
	}
	for _, ref := range groups {
		g := &out.Sessions[ref.s].Modules[ref.m].Configs[ref.g]
		placed := 0.0
		g.Backends = make([]string, 0, len(ref.units))
		var frac string
		for _, ui := range ref.units {
			u := units[ui]
			d := devs[ref.hw][u.dev]
			if d.virtual {
				continue
			}
			placed += u.occ
			if u.occ < 1 {
				frac = d.id
			} else {
				g.Backends = append(g.Backends, d.id)
			}
		}
		if frac != "" {
			g.Backends = append(g.Backends, frac)
		}
		if placed < g.Machines-occEps {
			short.Modules = append(short.Modules, ModuleShortfall{Session: ref.key.Session, Module: ref.key.Module, Group: ref.g,
				Hardware: ref.hw, Machines: g.Machines, Placed: placed})
			scale := placed / g.Machines
			g.Rate *= scale
			g.Cost *= scale
			g.Machines = placed
		}
	}
	for si := range out.Sessions {
		sp := &out.Sessions[si]
		if sp.Error != "" {
			continue
		}
		var empty []string
		sp.Cost = 0
		for mi := range sp.Modules {
			mp := &sp.Modules[mi]
			had := false
			for _, g := range plan.Sessions[si].Modules[mi].Configs {
				had = had || g.Machines > 0
			}
			kept := mp.Configs[:0]
			mp.Cost = 0
			for _, g := range mp.Configs {
				if g.Machines > 0 {
					kept = append(kept, g)
					mp.Cost += g.Cost
				}
			}
			mp.Configs = kept
			if had && len(kept) == 0 {
				empty = append(empty, mp.Name)
			}
			sp.Cost += mp.Cost
		}
		if len(empty) > 0 {
			*sp = api.SessionPlan{Name: sp.Name, SLOMs: sp.SLOMs,
				Error: fmt.Sprintf("under-provisioned: no backend left for module(s) %s", strings.Join(empty, ", "))}
		}
		out.TotalCost += sp.Cost
	}
	for hw := range present {
		if _, ok := devs[hw]; !ok {
			devs[hw] = nil
		}
	}
	for hw, ds := range devs {
		h := HardwareUse{Hardware: hw, Present: present[hw]}
		for _, d := range ds {
			switch {
			case d.used > 0:
				h.Needed++
				if !d.virtual {
					h.Used++
				}
			case !d.virtual:
				h.Idle = append(h.Idle, d.id)
			}
		}
		short.Hardware = append(short.Hardware, h)
	}
	sort.Slice(short.Hardware, func(i, j int) bool { return short.Hardware[i].Hardware < short.Hardware[j].Hardware })
	return &out, short, nil
}

// pick returns the device for u among ds (len(ds): a new, missing device).
// clash (nil: none) says which devices hold a model u must not share with.
// With spread (a fraction, packFit's second pass), a free real device
// nobody wants back while more are free than keep (the full machines still
// to place), else the real device already shared it fits on with the
// least occupancy (one no other module's pending machine wants back
// first); before either, the devices u's module ran on, then (near not
// nil: Options.Chains) the first real shared device it fits on that near
// accepts.
func pick(ds []*device, u *unit, clash func(*device) bool, near func(*device) bool, spread bool, keep int) int {
	fits := func(d *device) bool { return d.used+u.occ <= 1+occEps && (clash == nil || d.used == 0 || !clash(d)) }
	// The devices this module ran on before.
	for _, i := range u.prefer {
		if d := ds[i]; (u.occ >= 1 && d.used == 0) || (u.occ < 1 && fits(d)) {
			return i
		}
	}
	if near != nil {
		for i, d := range ds {
			if !d.virtual && d.used > 0 && fits(d) && near(d) {
				return i
			}
		}
	}
	if spread {
		free, first := 0, -1
		for i, d := range ds {
			if !d.virtual && d.used == 0 {
				free++
				if first < 0 && d.claims == 0 {
					first = i
				}
			}
		}
		if first >= 0 && free > keep {
			return first
		}
		// Devices another module's pending machine wants back last, as
		// first fit leaves them.
		for _, claimed := range []bool{false, true} {
			least := -1
			for i, d := range ds {
				if !d.virtual && d.used > 0 && (d.claims > 0) == claimed && fits(d) && (least < 0 || d.used < ds[least].used) {
					least = i
				}
			}
			if least >= 0 {
				return least
			}
		}
	}
	// A fraction: first fit on a device already shared (real ones come first).
	if u.occ < 1 {
		for i, d := range ds {
			if d.used > 0 && fits(d) {
				if d.virtual && freeReal(ds) >= 0 {
					break
				}
				return i
			}
		}
	}
	// A free device nobody wants back, then any free device.
	for i, d := range ds {
		if !d.virtual && d.used == 0 && d.claims == 0 {
			return i
		}
	}
	if i := freeReal(ds); i >= 0 {
		return i
	}
	// The pool is short: pack onto the missing devices as if they existed,
	// so Needed counts what the plan needs.
	for i, d := range ds {
		if d.virtual && (d.used == 0 || (u.occ < 1 && fits(d))) {
			return i
		}
	}
	return len(ds)
}

// neighbours reports whether one of mods (fractions placed on a device) is
// k's parent or child in k's session of plan.
func neighbours(plan *api.Plan, k moduleKey, mods []moduleKey) bool {
	for _, o := range mods {
		if o.Session != k.Session || o.Module == k.Module {
			continue
		}
		for _, sp := range plan.Sessions {
			if sp.Name != k.Session {
				continue
			}
			for _, mp := range sp.Modules {
				if mp.Name == k.Module && contains(mp.After, o.Module) || mp.Name == o.Module && contains(mp.After, k.Module) {
					return true
				}
			}
		}
	}
	return false
}

// leastInterfering returns the real device u fits on whose worst slowdown
// with u's model is least (the first such; -1: u fits on none).
func leastInterfering(ds []*device, u *unit, worst func(*device) float64) int {
	best, bw := -1, 0.0
	for i, d := range ds {
		if d.virtual || d.used+u.occ > 1+occEps {
			continue
		}
		if w := worst(d); best < 0 || w < bw {
			best, bw = i, w
		}
	}
	return best
}

func freeReal(ds []*device) int {
	for i, d := range ds {
		if !d.virtual && d.used == 0 {
			return i
		}
	}
	return -1
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// placeRoundRobin is Options.RoundRobin.
func placeRoundRobin(plan *api.Plan, members []Member) (*api.Plan, Shortfall, error) {
	if plan == nil {
		return nil, Shortfall{}, errors.New("placement: no plan")
	}
	byHW := map[string][]string{}
	for _, m := range members {
		byHW[m.Hardware] = append(byHW[m.Hardware], m.ID)
	}
	next := map[string]int{}
	shared := 0
	out := *plan
	out.Sessions = make([]api.SessionPlan, len(plan.Sessions))
	for si, sp := range plan.Sessions {
		sp.Modules = append([]api.ModulePlan(nil), sp.Modules...)
		for mi := range sp.Modules {
			mp := &sp.Modules[mi]
			mp.Configs = append([]api.GroupPlan(nil), mp.Configs...)
			for gi := range mp.Configs {
				g := &mp.Configs[gi]
				if len(g.Backends) > 0 {
					continue
				}
				ids := byHW[g.Hardware]
				if len(ids) == 0 {
					return nil, Shortfall{}, fmt.Errorf("session %q module %q group %d: no backend of hardware %q in the config's backends list (have: %s)",
						sp.Name, mp.Name, gi, g.Hardware, hardwareList(byHW))
				}
				n := int(math.Ceil(g.Machines - occEps))
				g.Backends = make([]string, n)
				for i := range n {
					if next[g.Hardware] >= len(ids) {
						shared++
					}
					g.Backends[i] = ids[next[g.Hardware]%len(ids)]
					next[g.Hardware]++
				}
			}
		}
		out.Sessions[si] = sp
	}
	return &out, Shortfall{Shared: shared}, nil
}

// hardwareList names the members by hardware type, for errors.
func hardwareList(byHW map[string][]string) string {
	if len(byHW) == 0 {
		return "none"
	}
	var s []string
	for hw, ids := range byHW {
		s = append(s, fmt.Sprintf("%s: %s", hw, strings.Join(ids, ", ")))
	}
	sort.Strings(s)
	return strings.Join(s, "; ")
}

// moduleKey names a module of a session.
type moduleKey struct{ Session, Module string }
