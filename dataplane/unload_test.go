package dataplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/placement"
)

// unloadProfiles: model b runs batches of 4 only, so the TC dispatcher holds a
// lone request on b in the gateway for most of its budget (hundreds of ms)
// before it sends it: a request submitted before an Apply reaches the backend
// after it, and fails if b was unloaded at the swap rather than after the
// drain. At these rates each session needs one machine, so Place puts each on
// one backend.
const unloadProfiles = `
hardware:
  - {name: v100, price: 3}
profiles:
  - {model: a, hardware: v100, entries: [{batch: 1, concurrency: 1, duration: 20ms}]}
  - {model: b, hardware: v100, entries: [{batch: 4, concurrency: 1, duration: 150ms}]}
`

const (
	sessionA = "  - {name: sa, slo: 1s, modules: [{name: m, model: a, rate: 5}]}\n"
	// sb at 20 req/s is 0.94 of a machine: with sa's 0.125 it does not fit
	// one device, so placement keeps a and b apart (sessionBSmall, 0.3 of a
	// machine, shares sa's device).
	sessionB      = "  - {name: sb, slo: 1s, modules: [{name: m, model: b, rate: 20}]}\n"
	sessionBSmall = "  - {name: sb, slo: 1s, modules: [{name: m, model: b, rate: 8}]}\n"
)

// unloadRig is n sim backends on loopback and the config texts to plan over them.
type unloadRig struct {
	servers  map[string]*grpc.Server // by address
	backends string                  // the config's backends list
	addr     map[string]string       // backend id -> address
}

func startUnloadRig(t *testing.T, n int) *unloadRig {
	t.Helper()
	base := mustLoad(t, unloadProfiles)
	rig := &unloadRig{servers: map[string]*grpc.Server{}, addr: map[string]string{}}
	var bl strings.Builder
	bl.WriteString("backends:\n")
	for i := range n {
		addr, g := testharness.StartSimBackend(t, base.Profiles)
		rig.servers[addr] = g
		id := fmt.Sprintf("gpu-%d", i)
		rig.addr[id] = addr
		fmt.Fprintf(&bl, "  - {id: %s, address: %q, hardware: v100}\n", id, addr)
	}
	rig.backends = bl.String()
	return rig
}

// config loads the profiles, the rig's backends and the given sessions.
func (rig *unloadRig) config(t *testing.T, sessions ...string) (*api.Config, *api.Plan) {
	t.Helper()
	cfg := mustLoad(t, unloadProfiles+rig.backends+"sessions:\n"+strings.Join(sessions, ""))
	plan, err := testharness.Planner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, plan
}

// placedOn is the addresses of the backends the placed plan runs model on.
func (rig *unloadRig) placedOn(plan *api.Plan, model string) []string {
	var out []string
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			if mp.Model != model {
				continue
			}
			for _, g := range mp.Configs {
				for _, id := range g.Backends {
					if a := rig.addr[id]; !slices.Contains(out, a) {
						out = append(out, a)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// serveAB starts a LiveSwitch serving sessions sa and sb, which the plan puts
// on one backend each; it returns the switch, its logs and the backend of a
// and of b (one address each).
func (rig *unloadRig) serveAB(t *testing.T) (*LiveSwitch, *observer.ObservedLogs, []string, []string) {
	t.Helper()
	cfg, plan := rig.config(t, sessionA, sessionB)
	sw, logs := newObservedSwitch(t, cfg, plan)
	onA, onB := rig.placedOn(sw.Plan(), "a"), rig.placedOn(sw.Plan(), "b")
	if len(onA) != 1 || len(onB) != 1 || onA[0] == onB[0] {
		t.Fatalf("plan places a on %v and b on %v; the test wants one backend each", onA, onB)
	}
	return sw, logs, onA, onB
}

// ready asks the backend at addr over gRPC (ModelReady) whether model is loaded.
func ready(t *testing.T, addr, model string) bool {
	t.Helper()
	c, err := backends.NewClient(addr, backends.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := c.Ready(ctx, model)
	if err != nil {
		t.Fatalf("ModelReady %q on %s: %v", model, addr, err)
	}
	return ok
}

// waitDrained waits until every previous runner of sw has been closed and its
// unloads sent (they run under applyMu, which waitDrained takes last).
func waitDrained(t *testing.T, sw *LiveSwitch) {
	t.Helper()
	// Every drain goroutine, its unloads included, ends with wg.Done. Waiting
	// only for drains to empty raced the unloads: the runner leaves drains,
	// is closed, and only then takes applyMu to unload ("unloaded [],
	// already gone []" once in a parallel run).
	done := make(chan struct{})
	go func() { sw.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // grace is 2 s; allow a loaded machine
		sw.drainMu.Lock()
		n := len(sw.drains)
		sw.drainMu.Unlock()
		t.Fatalf("drains not done after 30 s (%d previous runners still draining)", n)
	}
}

func newObservedSwitch(t *testing.T, cfg *api.Config, plan *api.Plan) (*LiveSwitch, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	sw, err := NewLiveSwitch(context.Background(), cfg, plan, LiveOptions{Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	return sw, logs
}

// unloadLines returns the "unloaded" and "already_gone" fields of each info line
// of a batch of unloads.
func unloadLines(logs *observer.ObservedLogs) (unloaded, gone [][]string) {
	for _, e := range logs.FilterMessage("unloaded models the plan no longer uses").All() {
		m := e.ContextMap()
		unloaded = append(unloaded, anyStrings(m["unloaded"]))
		gone = append(gone, anyStrings(m["already_gone"]))
	}
	return unloaded, gone
}

func anyStrings(v any) []string {
	var out []string
	if vs, ok := v.([]any); ok {
		for _, s := range vs {
			out = append(out, fmt.Sprint(s))
		}
	}
	return out
}

// TestLiveSwitchUnloadsDroppedModel: a plan serving a and b on two backends is
// replaced by one without session sb. A request on b submitted before the Apply
// finishes; then b is unloaded from its backend, a stays loaded, and one info
// line names what was unloaded.
func TestLiveSwitchUnloadsDroppedModel(t *testing.T) {
	rig := startUnloadRig(t, 2)
	sw, logs, onA, onB := rig.serveAB(t)
	if !ready(t, onB[0], "b") || !ready(t, onA[0], "a") {
		t.Fatal("the first plan's models are not loaded")
	}

	type result struct {
		out []api.Tensor
		err error
	}
	done := make(chan result, 1)
	in := []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}, Data: gatewaytest.FP32(3)}}
	sw.Run(context.Background(), "sb", "m", in, &gateway.Call{Deadline: time.Now().Add(10 * time.Second)}, func(out []api.Tensor, _ gateway.Timing, err error) {
		done <- result{out, err}
	})
	if n := sw.Runner().outstanding(); n != 1 {
		t.Fatalf("outstanding on the first runner before the Apply: %d, want 1", n)
	}

	cfg2, plan2 := rig.config(t, sessionA)
	if err := sw.Apply(context.Background(), cfg2, plan2); err != nil {
		t.Fatal(err)
	}
	if got := rig.placedOn(sw.Plan(), "b"); len(got) != 0 {
		t.Fatalf("the new plan still places b on %v", got)
	}
	select {
	case r := <-done:
		if r.err != nil || len(r.out) != 1 || string(r.out[0].Data) != string(gatewaytest.FP32(sim.Checksum(gatewaytest.FP32(3)))) {
			t.Fatalf("request submitted before the Apply: outputs %v, error %v; want b's checksum of its input", r.out, r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the request submitted before the Apply did not finish in 15 s")
	}

	waitDrained(t, sw)
	if ready(t, onB[0], "b") {
		t.Errorf("b is still loaded on %s after the plan that used it drained", onB[0])
	}
	if !ready(t, onA[0], "a") {
		t.Errorf("a, which the current plan uses, is no longer loaded on %s", onA[0])
	}
	// The backend that served only b has no use any more: its connection is closed.
	if got := sw.pool.Addrs(); !slices.Equal(got, onA) {
		t.Errorf("pooled connections after the drain: %v, want only the backend still used %v", got, onA)
	}
	unloaded, gone := unloadLines(logs)
	if want := [][]string{{"b@" + onB[0]}}; fmt.Sprint(unloaded) != fmt.Sprint(want) || len(gone[0]) != 0 {
		t.Errorf("unload info lines: unloaded %v, already gone %v; want one line unloading %v", unloaded, gone, want)
	}
}

// TestLiveSwitchKeepsModelOfCurrentPlan: a→b→a in quick succession. When the
// first runner drains, the current plan uses a again, so a stays loaded; b,
// loaded by the plan in between only, is unloaded once that one drains.
func TestLiveSwitchKeepsModelOfCurrentPlan(t *testing.T) {
	rig := startUnloadRig(t, 2)
	cfgA, planA := rig.config(t, sessionA)
	cfgB, planB := rig.config(t, sessionB)
	sw, logs := newObservedSwitch(t, cfgA, planA)
	if err := sw.Apply(context.Background(), cfgB, planB); err != nil {
		t.Fatal(err)
	}
	onB := rig.placedOn(sw.Plan(), "b")
	if err := sw.Apply(context.Background(), cfgA, planA); err != nil {
		t.Fatal(err)
	}
	onA := rig.placedOn(sw.Plan(), "a")
	waitDrained(t, sw)
	for _, addr := range onA {
		if !ready(t, addr, "a") {
			t.Errorf("a is unloaded on %s although the current plan uses it", addr)
		}
	}
	var want []string
	for _, addr := range onB {
		want = append(want, "b@"+addr)
		if ready(t, addr, "b") {
			t.Errorf("b is still loaded on %s; no plan uses it", addr)
		}
	}
	unloaded, _ := unloadLines(logs)
	if fmt.Sprint(unloaded) != fmt.Sprint([][]string{want}) {
		t.Errorf("unload info lines: %v, want one line unloading %v (and nothing of a)", unloaded, want)
	}
}

// TestLiveSwitchUnloadToleratesGoneBackend: the backend that ran the dropped
// model has stopped; the unload finds it unreachable, logs it as gone, and the
// switch serves on.
func TestLiveSwitchUnloadToleratesGoneBackend(t *testing.T) {
	rig := startUnloadRig(t, 2)
	sw, logs, onA, onB := rig.serveAB(t)
	rig.servers[onB[0]].Stop()
	cfg2, plan2 := rig.config(t, sessionA)
	if err := sw.Apply(context.Background(), cfg2, plan2); err != nil {
		t.Fatal(err)
	}
	waitDrained(t, sw)
	unloaded, gone := unloadLines(logs)
	if len(unloaded) != 1 || len(unloaded[0]) != 0 || fmt.Sprint(gone[0]) != fmt.Sprint([]string{"b@" + onB[0]}) {
		t.Errorf("unload info lines: unloaded %v, already gone %v; want b@%s gone", unloaded, gone, onB[0])
	}
	if w := logs.FilterLevelExact(zapcore.WarnLevel).Len(); w != 0 {
		t.Errorf("%d warnings for a backend that left; want none", w)
	}
	if !ready(t, onA[0], "a") {
		t.Errorf("a is no longer loaded on %s", onA[0])
	}
}

// TestLiveSwitchCloseUnloadsNothing: a gateway shutting down leaves every model
// loaded, the previous plan's included, for the other gateways.
func TestLiveSwitchCloseUnloadsNothing(t *testing.T) {
	rig := startUnloadRig(t, 1)
	cfgA, planA := rig.config(t, sessionA)
	cfgB, planB := rig.config(t, sessionB)
	sw, logs := newObservedSwitch(t, cfgA, planA)
	if err := sw.Apply(context.Background(), cfgB, planB); err != nil {
		t.Fatal(err)
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	addr := rig.addr["gpu-0"]
	if !ready(t, addr, "a") || !ready(t, addr, "b") {
		t.Errorf("after Close: a loaded %v, b loaded %v; want both", ready(t, addr, "a"), ready(t, addr, "b"))
	}
	if n := logs.FilterMessage("unloaded models the plan no longer uses").Len(); n != 0 {
		t.Errorf("%d unload batches after Close, want none", n)
	}
}

// What an Apply that fails partway through its loads did load is unloaded
// after the next successful Apply's drain when no runner uses it; what the
// served plan uses stays. Not at once: the cluster follower retries a failed
// plan every 2 s, and each retry would load it all again. gpu-1 cannot run
// model b, so a plan that puts b on gpu-0 and gpu-1 loads b on gpu-0 (loads
// go in backend order) and then fails on gpu-1.
func TestLiveSwitchFailedApplyUnloadsWhatItLoaded(t *testing.T) {
	base := mustLoad(t, unloadProfiles)
	var onlyA []api.Profile
	for _, p := range base.Profiles {
		if p.Model == "a" {
			onlyA = append(onlyA, p)
		}
	}
	gpu0, _ := testharness.StartSimBackend(t, base.Profiles)
	gpu1, _ := testharness.StartSimBackend(t, onlyA)
	backendsText := fmt.Sprintf("backends:\n  - {id: gpu-0, address: %q, hardware: v100}\n  - {id: gpu-1, address: %q, hardware: v100}\n", gpu0, gpu1)
	load := func(sessions string) (*api.Config, *api.Plan) {
		cfg := mustLoad(t, unloadProfiles+backendsText+"sessions:\n"+sessions)
		plan, err := testharness.Planner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cfg, plan
	}
	cfg, plan := load(sessionA)
	sw, logs := newObservedSwitch(t, cfg, plan)
	if !ready(t, gpu0, "a") {
		t.Fatal("a is not loaded on gpu-0")
	}
	// sb at 30 req/s needs two machines of b (27 req/s each at batch 4):
	// Place puts them on gpu-1 and, wrapping, gpu-0.
	cfg2, plan2 := load(sessionA + "  - {name: sb, slo: 1s, modules: [{name: m, model: b, rate: 30}]}\n")
	for range 2 { // as a follower's retry would
		err := sw.Apply(context.Background(), cfg2, plan2)
		if err == nil || !strings.Contains(err.Error(), "gpu-1") {
			t.Fatalf("Apply with b on gpu-1: %v, want a load error naming gpu-1", err)
		}
	}
	if !ready(t, gpu0, "b") {
		t.Fatal("b is not loaded on gpu-0 after the failed Applies: the test's premise does not hold")
	}
	// The next plan that goes live (here the same sa again) drains the old
	// runner, and its unloads take the orphan with them.
	if err := sw.Apply(context.Background(), cfg, plan); err != nil {
		t.Fatal(err)
	}
	waitDrained(t, sw) // the unloads are done under applyMu
	if ready(t, gpu0, "b") {
		t.Errorf("b is still loaded on gpu-0 after the next plan's drain; logs: %v", logs.All())
	}
	if !ready(t, gpu0, "a") {
		t.Error("a, which the served plan uses, was unloaded from gpu-0")
	}
	// The failed Apply may also have loaded a where its packed placement put
	// it (gpu-1); that is an orphan too. What the served plan uses is not.
	unloaded, _ := unloadLines(logs)
	if len(unloaded) != 1 || !slices.Contains(unloaded[0], "b@"+gpu0) || slices.Contains(unloaded[0], "a@"+gpu0) {
		t.Errorf("unload log lines %v, want one unloading b@%s and not a@%s", unloaded, gpu0, gpu0)
	}
}

// TestStaticPlacementSpreadsFractions: with a static backends list the
// gateway packs as the planner's cost assumes and spreads the fractions
// over the backends packing leaves idle (placement on a static list,
// docs/ocr.md "One lane, four models"). Sessions sa (0.125 of a machine of
// a) and sb (0.3 of a machine of b), which pack onto one device (what
// placement.Options Provision counts), take one backend each of the two,
// and both are served.
func TestStaticPlacementSpreadsFractions(t *testing.T) {
	rig := startUnloadRig(t, 2)
	cfg, plan := rig.config(t, sessionA, sessionBSmall)
	sw, _ := newObservedSwitch(t, cfg, plan)
	onA, onB := rig.placedOn(sw.Plan(), "a"), rig.placedOn(sw.Plan(), "b")
	if len(onA) != 1 || len(onB) != 1 || slices.Equal(onA, onB) {
		t.Fatalf("a on %v, b on %v; want one backend each", onA, onB)
	}
	provisioned, _, err := placement.Place(plan, nil, nil, placement.Options{Provision: true})
	devices := placement.Devices(provisioned)
	if err != nil {
		t.Fatal(err)
	}
	if devices != 1 {
		t.Errorf("the plan packs onto %d devices; want 1", devices)
	}
	in := []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}, Data: gatewaytest.FP32(3)}}
	for _, session := range []string{"sa", "sb"} {
		errc := make(chan error, 1)
		sw.Run(context.Background(), session, "m", in, &gateway.Call{Deadline: time.Now().Add(10 * time.Second)}, func(_ []api.Tensor, _ gateway.Timing, err error) {
			errc <- err
		})
		if err := <-errc; err != nil {
			t.Errorf("session %s: %v", session, err)
		}
	}
}
