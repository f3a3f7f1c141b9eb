package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/internal/consultest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/serving"
)

// TestConsulControlServesAndChangesTheClusterPlan runs the cluster control as
// `piccolo gateway --consul` wires it, against a real Consul agent and two sim
// backends registered there: the first plan the elected re-planner (this
// gateway's candidate) publishes goes live on the registered backends and
// serves a request; a session added through the config store is planned,
// stored in Consul and answered once its plan is live here; a change the
// planner cannot plan is refused and changes nothing; the admin view lists the
// Consul members. The end-to-end runs (killed backends, failover, rate steps)
// are cmd/piccolo's gateway_consul_test.go and cluster_test.go.
func TestConsulControlServesAndChangesTheClusterPlan(t *testing.T) {
	agent := consultest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The chain on v100, plus a model only a t4 runs: no t4 registers.
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "config.yaml", Data: []byte(testharness.ChainProfiles)},
		api.NamedDoc{Name: "t4.yaml", Data: []byte("hardware:\n  - {name: t4, price: 1}\nprofiles:\n  - model: big\n    hardware: t4\n    entries:\n      - {batch: 1, concurrency: 1, duration: 40ms}\n")})
	if err != nil {
		t.Fatal(err)
	}
	registerSimBackends(ctx, t, agent.Addr(), cfg, 2)
	// The serving planner, as the gateway's: only the hardware present;
	// counted, for the gateway's config pipeline and the elected re-planner
	// (this gateway's candidate) together.
	var plans atomic.Int32
	planner := func(c *api.Config) (*api.Plan, error) {
		plans.Add(1)
		return serving.Plan(c, serving.Options{Scheduler: planner.Options{Policy: "piccolo", MaxUtilization: 0.8}})
	}
	m, err := metrics.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan PlanEvent, 16)
	startCtx, startCancel := context.WithTimeout(ctx, 30*time.Second)
	defer startCancel()
	cc, err := StartConsulControl(startCtx, ClusterOptions{Consul: agent.Addr(), Prefix: "test", Schedule: true, GatewayID: "gw-1",
		SchedulerTTL: 2 * time.Second, ConfigWait: 20 * time.Second, OnPlan: func(e PlanEvent) { events <- e }},
		cfg, m, zap.NewNop(), dataplane.LiveOptions{Metrics: m}, planner)
	if err != nil {
		t.Fatal(err)
	}
	var ctl Control = cc
	served := ctl.ServedConfig()
	exec, err := gateway.NewDAGRunner(ctl.Runner(), served.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewConfigStore(served, ctl.Apply)
	if err != nil {
		t.Fatal(err)
	}
	ctl.Attach(exec, store)

	placedOn := func(p *api.Plan, session string) []string {
		var ids []string
		for _, sp := range p.Sessions {
			for _, mp := range sp.Modules {
				for _, g := range mp.Configs {
					if sp.Name == session {
						ids = append(ids, g.Backends...)
					}
				}
			}
		}
		return ids
	}
	if ids := placedOn(ctl.LiveSwitch().Plan(), "pipe"); len(ids) == 0 || !strings.HasPrefix(ids[0], "gpu-") {
		t.Fatalf("first live plan places pipe on %v; want the registered gpu-* backends", ids)
	}
	infer := func(session string) error {
		var resp gateway.InferResponse
		return exec.Infer(ctx, session, &gateway.InferRequest{ID: "1", Inputs: gatewaytest.Input(1, 2, 3)}, &resp)
	}
	if err := infer("pipe"); err != nil {
		t.Fatalf("infer on the cluster's first plan: %v", err)
	}

	// An operator adds a session: answered once its plan is live here, and
	// planned once in the cluster: the gateway's pipeline plans and checks it,
	// and the leader places that plan instead of planning the change again.
	before := plans.Load()
	solo := api.Session{Name: "solo", SLO: api.Duration(time.Second), Modules: []api.Module{{Name: "only", Model: "rec", Rate: 20}}}
	snap, err := store.Update(ctx, "config", 0, func(cur *api.Config) (*api.Config, error) {
		next := *cur
		next.Sessions = append(append([]api.Session(nil), cur.Sessions...), solo)
		return &next, nil
	})
	if err != nil {
		t.Fatalf("add session solo: %v", err)
	}
	if n := plans.Load() - before; n != 1 {
		t.Errorf("one config change ran the planner %d times in the cluster; want 1", n)
	}
	if ids := placedOn(ctl.LiveSwitch().Plan(), "solo"); len(ids) == 0 {
		t.Errorf("after the change was answered, the live plan has no placement for solo (version %d)", snap.Version)
	}
	if err := infer("solo"); err != nil {
		t.Errorf("infer on the new session: %v", err)
	}

	// A change the planner cannot plan (no t4 is a member) is refused here,
	// before Consul.
	version := store.Current().Version
	impossible := api.Session{Name: "rush", SLO: api.Duration(time.Second), Modules: []api.Module{{Name: "d", Model: "big", Rate: 5}}}
	_, err = store.Update(ctx, "config", 0, func(cur *api.Config) (*api.Config, error) {
		next := *cur
		next.Sessions = append(append([]api.Session(nil), cur.Sessions...), impossible)
		return &next, nil
	})
	if err == nil || !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "rush") {
		t.Errorf("an unplannable session: %v; want ErrRejected naming rush", err)
	}
	if v := store.Current().Version; v != version {
		t.Errorf("a refused change moved the config from version %d to %d", version, v)
	}
	if _, ok := exec.Session("rush"); ok {
		t.Error("a refused session is served")
	}

	view := ctl.Members()()
	if view.Source != "consul" || len(view.Backends) != 2 {
		t.Errorf("admin backends view: source %q, %d backends; want consul and 2", view.Source, len(view.Backends))
	}
	select {
	case e := <-events:
		if e.Plan == nil || e.Live.IsZero() {
			t.Errorf("plan event %+v lacks its plan or live time", e)
		}
	default:
		t.Error("OnPlan was never called")
	}

	// The gateway stops: its re-planner candidate lets go of the lock in time.
	cancel()
	done := make(chan struct{})
	go func() { ctl.StepDown(5 * time.Second); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("StepDown did not return")
	}
	ctl.LiveSwitch().Close()
}

// registerSimBackends starts n sim backends serving cfg's profiles and
// registers them in the Consul agent at consul as v100 members gpu-0 …,
// deregistered when the test ends.
func registerSimBackends(ctx context.Context, t *testing.T, consul string, cfg *api.Config, n int) {
	t.Helper()
	for i := range n {
		addr, _ := testharness.StartSimBackend(t, cfg.Profiles)
		dereg, err := membership.Register(ctx, consul, membership.Member{ID: fmt.Sprintf("gpu-%d", i), Address: addr, Hardware: "v100"}, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = dereg(context.Background()) })
	}
}
