package dataplane

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest/observer"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/metrics"
)

// sessionBOnA is session sb with its module m on model a instead of b.
const sessionBOnA = "  - {name: sb, slo: 1s, modules: [{name: m, model: a, rate: 5}]}\n"

// sessionBSlower is session sb planned for 19 req/s instead of 20: the same
// model on the same backend, a plan of its own.
const sessionBSlower = "  - {name: sb, slo: 1s, modules: [{name: m, model: b, rate: 19}]}\n"

// sessionAOther is session sa planned for 4 req/s instead of 5.
const sessionAOther = "  - {name: sa, slo: 1s, modules: [{name: m, model: a, rate: 4}]}\n"

// runQueued sends n requests to sb/m through sw, which hold them in m's open
// batch (b runs batches of 4 only, so the TC dispatcher waits for
// batch-mates until its deadline flush), and returns the channel their
// errors come back on; it fails the test if an output is not the sim's
// checksum of its input.
func runQueued(t *testing.T, sw *LiveSwitch, n int) <-chan error {
	t.Helper()
	done := make(chan error, n)
	for i := range n {
		x := float32(i + 1)
		in := []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}, Data: gatewaytest.FP32(x)}}
		sw.Run(context.Background(), "sb", "m", in, &gateway.Call{Deadline: time.Now().Add(10 * time.Second)}, func(out []api.Tensor, _ gateway.Timing, err error) {
			if err == nil && (len(out) != 1 || string(out[0].Data) != string(gatewaytest.FP32(sim.Checksum(gatewaytest.FP32(x))))) {
				t.Errorf("request %d: outputs %v, want the checksum of its input", i, out)
			}
			done <- err
		})
	}
	return done
}

// serveQueued serves session sb (model b) on one sim backend through a
// LiveSwitch and queues n requests on it (runQueued).
func serveQueued(t *testing.T, n int) (*unloadRig, *LiveSwitch, *observer.ObservedLogs, <-chan error) {
	t.Helper()
	rig := startUnloadRig(t, 1)
	cfg, plan := rig.config(t, sessionB)
	sw, logs := newObservedSwitch(t, cfg, plan)
	return rig, sw, logs, runQueued(t, sw, n)
}

// waitAll receives n results from done, failing the test on an error or
// after 15 s.
func waitAll(t *testing.T, done <-chan error, n int) {
	t.Helper()
	for i := range n {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("a request submitted before the Apply failed: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of %d requests submitted before the Apply did not finish in 15 s", n-i, n)
		}
	}
}

// TestLiveSwitchHandsQueuedItemsOver: requests waiting in a module's open
// batch when a plan is applied move to the new runner's dispatcher of the
// same module (which then counts them in its queues) and complete there,
// OK; the old runner's bookkeeping (outstanding, which its drain waits for)
// comes back to 0 through their own callbacks.
func TestLiveSwitchHandsQueuedItemsOver(t *testing.T) {
	const n = 3
	rig, sw, logs, done := serveQueued(t, n)
	cfg, plan := rig.config(t, sessionBSlower)
	old := sw.Runner()
	if got := old.outstanding(); got != n {
		t.Fatalf("outstanding on the first runner before the Apply: %d, want %d", got, n)
	}
	if err := sw.Apply(context.Background(), cfg, plan); err != nil {
		t.Fatal(err)
	}
	cur := sw.Runner()
	if cur == old {
		t.Fatal("Apply kept the runner")
	}
	if got := old.Stats()["sb/m"].HandedOver; got != n {
		t.Errorf("the old dispatcher handed over %d items, want %d", got, n)
	}
	if got := cur.Stats()["sb/m"].TakenOver; got != n {
		t.Errorf("the new dispatcher took over %d items, want %d", got, n)
	}
	waitAll(t, done, n)
	if got := old.outstanding(); got != 0 {
		t.Errorf("outstanding on the old runner after its items finished on the new one: %d, want 0", got)
	}
	if got := cur.outstanding(); got != 0 {
		t.Errorf("outstanding on the new runner: %d, want 0 (the moved items are the old runner's)", got)
	}
	if st := cur.Stats()["sb/m"]; st.Completed != n || st.Submitted != 0 {
		t.Errorf("the new dispatcher completed %d and was submitted %d, want %d and 0", st.Completed, st.Submitted, n)
	}
	if st := old.Stats()["sb/m"]; st.Completed != 0 {
		t.Errorf("the old dispatcher completed %d items, want 0 (all handed over)", st.Completed)
	}
	if len(logs.FilterMessage("queued items handed to the new plan's dispatchers").All()) != 1 {
		t.Error("no debug line for the handover")
	}
	waitDrained(t, sw)
}

// TestLiveSwitchKeepsAnUnchangedSession: a plan change that leaves a
// session as it was placed (here sa's rate changes, sb's plan does not)
// keeps that session's dispatchers: sb's requests queued at the Apply stay
// where they are, in the same dispatcher, and complete OK; the new runner
// owns them (the old one's drain does not wait for them, and closes without
// closing sb's dispatcher or unloading its model: a request after the
// drain is answered); sa gets a new dispatcher.
func TestLiveSwitchKeepsAnUnchangedSession(t *testing.T) {
	const n = 3
	rig := startUnloadRig(t, 2)
	cfg, plan := rig.config(t, sessionA, sessionB)
	sw, logs := newObservedSwitch(t, cfg, plan)
	done := runQueued(t, sw, n)
	old := sw.Runner()
	cfg2, plan2 := rig.config(t, sessionAOther, sessionB)
	if err := sw.Apply(context.Background(), cfg2, plan2); err != nil {
		t.Fatal(err)
	}
	cur := sw.Runner()
	if cur == old {
		t.Fatal("Apply kept the runner")
	}
	if cur.sessions["sb"]["m"] != old.sessions["sb"]["m"] {
		t.Error("sb, placed as it was, got a new module")
	}
	if cur.sessions["sa"]["m"] == old.sessions["sa"]["m"] {
		t.Error("sa, planned at another rate, kept its module")
	}
	if got := old.Stats()["sb/m"].HandedOver; got != 0 {
		t.Errorf("sb's dispatcher handed over %d items, want 0 (it is kept)", got)
	}
	if got := old.outstanding(); got != 0 {
		t.Errorf("outstanding on the old runner right after the Apply: %d, want 0 (sb's items are the new runner's)", got)
	}
	if got := cur.outstanding(); got > n {
		t.Errorf("outstanding on the new runner: %d, want at most the %d queued", got, n)
	}
	lines := logs.FilterMessage("sessions the new plan leaves as they were keep their dispatchers").All()
	if len(lines) != 1 || !slices.Equal(anyStrings(lines[0].ContextMap()["sessions"]), []string{"sb"}) {
		t.Errorf("log lines for the kept sessions: %v, want one naming [sb]", lines)
	}
	waitAll(t, done, n)
	waitDrained(t, sw)
	if st := cur.Stats()["sb/m"]; st.Completed != n {
		t.Errorf("sb's dispatcher completed %d, want the %d queued", st.Completed, n)
	}
	after := runQueued(t, sw, 1)
	waitAll(t, after, 1)
}

// TestLiveSwitchKeepsItemsOfAChangedModel: when the new plan runs the module
// on another model, the queued items stay on the old runner and finish on
// the model they were submitted for.
func TestLiveSwitchKeepsItemsOfAChangedModel(t *testing.T) {
	const n = 2
	rig, sw, _, done := serveQueued(t, n)
	old := sw.Runner()
	cfg2, plan2 := rig.config(t, sessionBOnA)
	if err := sw.Apply(context.Background(), cfg2, plan2); err != nil {
		t.Fatal(err)
	}
	if got := old.Stats()["sb/m"].HandedOver; got != 0 {
		t.Errorf("the old dispatcher handed over %d items to a module of another model, want 0", got)
	}
	waitAll(t, done, n)
	if st := old.Stats()["sb/m"]; st.Completed != n {
		t.Errorf("the old dispatcher completed %d items, want %d", st.Completed, n)
	}
}

// TestReplacementThatChangesNothingKeepsRunner: a health re-placement (a
// backend starts or stops straggling) that would place the plan where it runs
// builds no new runner and loads nothing; one that moves a module (its
// backend down) does.
func TestReplacementThatChangesNothingKeepsRunner(t *testing.T) {
	rig := startUnloadRig(t, 2)
	cfg, plan := rig.config(t, sessionA)
	sw, _ := newObservedSwitch(t, cfg, plan)
	sw.replace.Store(true) // placeOn as under ReplaceOnEjection, without its probes
	cur := sw.cur.Load()
	on := rig.placedOn(cur.plan, "a")
	if len(on) != 1 {
		t.Fatalf("model a placed on %v; want one backend", on)
	}
	var used, idle string
	for id, addr := range rig.addr {
		if addr == on[0] {
			used = id
		} else {
			idle = id
		}
	}
	ctx := context.Background()
	sw.opts.Health.entry(idle).slow.Store(true) // the idle backend straggles: a goes nowhere else
	if err := sw.apply(ctx, cur.cfg, unplaced(cur.plan), true); err != nil {
		t.Fatal(err)
	}
	if sw.cur.Load() != cur {
		t.Error("a re-placement that places the plan as it runs built a new runner")
	}
	sw.opts.Health.entry(used).SetDown(true) // a's backend is down: a moves to the idle one
	defer sw.opts.Health.entry(used).SetDown(false)
	if err := sw.apply(ctx, cur.cfg, unplaced(cur.plan), true); err != nil {
		t.Fatal(err)
	}
	if now := sw.cur.Load(); now == cur || !slices.Equal(rig.placedOn(now.plan, "a"), []string{rig.addr[idle]}) {
		t.Errorf("a's backend down: a runs on %v, want the idle backend %s", rig.placedOn(sw.cur.Load().plan, "a"), rig.addr[idle])
	}
}

// occupiedOf is session's machine-seconds in sw's counter name
// (metrics.GatewayOccupiedMachineSecondsTotal or
// GatewayDeviceMachineSecondsTotal), over its modules and hardware types,
// as a scrape reads it.
func occupiedOf(t *testing.T, sw *LiveSwitch, name, session string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(sw)
	return counterSum(t, []*prometheus.Registry{reg}, name, "session", session)
}

// counterSum sums the counter name over regs' series whose label is value.
func counterSum(t *testing.T, regs []*prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	total := 0.0
	for _, reg := range regs {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == label && l.GetValue() == value {
						total += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return total
}

// TestOccupancySurvivesPlanChanges: the occupancy counter a charged cost is
// read from goes on across plan changes, where the per-slot counters
// restart: a change that keeps sb's dispatcher counts it once, not twice; a
// change that replaces it carries the old dispatcher's time; new batches
// add to it.
func TestOccupancySurvivesPlanChanges(t *testing.T) {
	const n = 3
	rig := startUnloadRig(t, 2)
	cfg, plan := rig.config(t, sessionA, sessionB)
	sw, _ := newObservedSwitch(t, cfg, plan)
	waitAll(t, runQueued(t, sw, n), n)
	for _, name := range []string{metrics.GatewayOccupiedMachineSecondsTotal, metrics.GatewayDeviceMachineSecondsTotal} {
		t.Run(name, func(t *testing.T) {
			before := occupiedOf(t, sw, name, "sb")
			if !(before > 0) {
				t.Fatalf("sb %v machine-seconds after %d requests, want > 0", before, n)
			}
			for _, sessions := range [][]string{{sessionAOther, sessionB}, {sessionA, sessionBSlower}} {
				cfg, plan := rig.config(t, sessions...)
				if err := sw.Apply(context.Background(), cfg, plan); err != nil {
					t.Fatal(err)
				}
				waitDrained(t, sw)
				if got := occupiedOf(t, sw, name, "sb"); got != before {
					t.Errorf("after a plan change with no new requests sb %v machine-seconds, want the %v before it", got, before)
				}
			}
			waitAll(t, runQueued(t, sw, 1), 1)
			if got := occupiedOf(t, sw, name, "sb"); !(got > before) {
				t.Errorf("after one more request sb %v machine-seconds, want more than %v", got, before)
			}
		})
	}
	// The device ran within the time its batches occupied their machines.
	if dev, occ := occupiedOf(t, sw, metrics.GatewayDeviceMachineSecondsTotal, "sb"), occupiedOf(t, sw, metrics.GatewayOccupiedMachineSecondsTotal, "sb"); dev > occ {
		t.Errorf("sb: device %v machine-seconds, more than the %v its batches occupied", dev, occ)
	}
}
