package controlplane

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/internal/consultest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
	"github.com/piccolo-serving/piccolo/serving"
)

// TestClusterHistoryInConsul: with --consul every change is kept in Consul
// KV, one key per version, in the config's own transaction: the seeded
// config is recorded as version 1 with the first change; a config written
// to the key by hand (outside the gateways) is recorded as its own version
// before the next change; the history keeps the newest HistoryLen versions.
// The end-to-end run (two gateways, rollback, leader change, restart) is
// cmd/piccolo's TestClusterHistoryAcrossLeaderChange.
func TestClusterHistoryInConsul(t *testing.T) {
	agent := consultest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "config.yaml", Data: []byte(testharness.ChainProfiles)})
	if err != nil {
		t.Fatal(err)
	}
	registerSimBackends(ctx, t, agent.Addr(), cfg, 2)
	planner := func(c *api.Config) (*api.Plan, error) {
		return serving.Plan(c, serving.Options{Scheduler: planner.Options{Policy: "piccolo", MaxUtilization: 0.8}})
	}
	m, err := metrics.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	plans := make(chan PlanEvent, 64)
	startCtx, startCancel := context.WithTimeout(ctx, 30*time.Second)
	defer startCancel()
	const keep = 4
	cc, err := StartConsulControl(startCtx, ClusterOptions{Consul: agent.Addr(), Prefix: "hist", Schedule: true, GatewayID: "gw-1",
		SchedulerTTL: 2 * time.Second, ConfigWait: 20 * time.Second, HistoryLen: keep, OnPlan: func(e PlanEvent) { plans <- e }},
		cfg, m, zap.NewNop(), dataplane.LiveOptions{Metrics: m}, planner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cc.WaitStepDown(5 * time.Second); cc.LiveSwitch().Close() })
	exec, err := gateway.NewDAGRunner(cc.Runner(), cc.ServedConfig().Sessions)
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewConfigStore(cc.ServedConfig(), cc.Apply)
	if err != nil {
		t.Fatal(err)
	}
	cc.Attach(exec, store)

	setRate := func(c *api.Config, rate float64) *api.Config {
		next := *c
		next.Sessions = append([]api.Session(nil), c.Sessions...)
		s := &next.Sessions[0]
		s.Modules = append([]api.Module(nil), s.Modules...)
		for i := range s.Modules {
			s.Modules[i].Rate = rate
		}
		return &next
	}
	change := func(who string, rate float64) uint64 {
		t.Helper()
		var v uint64
		c := withVersionSink(WithWho(ctx, who, ""), &v)
		if _, err := store.Update(c, "manual", 0, func(cur *api.Config) (*api.Config, error) { return setRate(cur, rate), nil }); err != nil {
			t.Fatalf("change to rate %v: %v", rate, err)
		}
		return v
	}
	listed := func() []string {
		t.Helper()
		changes, err := cc.History(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range changes {
			out = append(out, fmt.Sprintf("%d %s %s %v", c.Version, c.Cause, c.Who, c.Sessions))
			if c.PlanCost <= 0 || c.At.IsZero() || c.cfg == nil {
				t.Errorf("version %d: cost %v, at %v, sessions kept %v; want all three", c.Version, c.PlanCost, c.At, c.cfg != nil)
			}
		}
		return out
	}

	if v := change("alice", 60); v != 2 {
		t.Errorf("the first change got history version %d, want 2 (1: the seeded config)", v)
	}
	if got, want := listed(), []string{"1 initial file [pipe]", "2 manual alice [pipe]"}; !reflect.DeepEqual(got, want) {
		t.Errorf("history %q, want %q", got, want)
	}

	// An operator writes the config key by hand: the leader plans it and the
	// gateway adopts it; the next change records it first.
	kv, err := cluster.New(agent.Addr(), cluster.Options{Prefix: "hist"})
	if err != nil {
		t.Fatal(err)
	}
	kcfg, idx, err := kv.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutConfig(ctx, setRate(kcfg, 80), idx); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(20 * time.Second)
	for store.Current().Config.Sessions[0].Modules[0].Rate != 80 {
		select {
		case <-plans:
		case <-deadline:
			t.Fatal("the hand-written config was not adopted within 20 s")
		}
	}
	if v := change("bob", 100); v != 4 {
		t.Errorf("the change after a hand edit got version %d, want 4 (3: the hand edit)", v)
	}
	changes, err := cc.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ext := changes[2]; ext.Cause != "external" || ext.Who != "consul" || !strings.Contains(ext.Diff, "-      rate: 60\n+      rate: 80\n") {
		t.Errorf("version 3: cause %q who %q diff:\n%s\nwant external, consul and rate 60 → 80", ext.Cause, ext.Who, ext.Diff)
	}
	if last := changes[3]; !strings.Contains(last.Diff, "--- version 3\n+++ version 4\n") || !strings.Contains(last.Diff, "+      rate: 100\n") {
		t.Errorf("version 4's diff:\n%s", last.Diff)
	}

	// Two more: the oldest go, keep = 4 stay.
	change("alice", 120)
	change("alice", 140)
	if got, want := listed(), []string{"3 external consul [pipe]", "4 manual bob [pipe]", "5 manual alice [pipe]", "6 manual alice [pipe]"}; !reflect.DeepEqual(got, want) {
		t.Errorf("history after six versions %q, want the newest %d: %q", got, keep, want)
	}
	entries, err := kv.History(ctx)
	if err != nil || len(entries) != keep {
		t.Errorf("%d keys under hist/history/ (%v); want %d", len(entries), err, keep)
	}
	// The newest entry carries the config's ModifyIndex: written together.
	if _, idx, _ := kv.Config(ctx); entries[len(entries)-1].Index != idx {
		t.Errorf("the newest history key's ModifyIndex %d, the config's %d: not one transaction", entries[len(entries)-1].Index, idx)
	}
}

// TestEncodeChangeTrimmed: an entry over historyEntryMax is kept without
// its diff, then without its sessions, saying so; a normal one round-trips.
func TestEncodeChangeTrimmed(t *testing.T) {
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "config.yaml", Data: []byte(testharness.ChainProfiles)})
	if err != nil {
		t.Fatal(err)
	}
	c := Change{Version: 7, Cause: "manual", Who: "alice", Sessions: []string{"pipe"}, Diff: "-a\n+b\n", PlanCost: 1.5}
	b, err := encodeChange(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeChange(cluster.HistoryEntry{Version: 7, Value: b})
	if err != nil || back.Diff != c.Diff || back.Who != "alice" || back.cfg == nil || !reflect.DeepEqual(sessionYAML(back.cfg, "pipe"), sessionYAML(cfg, "pipe")) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	c.Diff = strings.Repeat("+x\n", historyEntryMax)
	b, err = encodeChange(c, cfg)
	if err != nil || len(b) > historyEntryMax {
		t.Fatalf("a large diff: %d bytes, %v", len(b), err)
	}
	if back, _ = decodeChange(cluster.HistoryEntry{Version: 7, Value: b}); back.Diff != "" || back.cfg == nil || !strings.Contains(back.Note, "diff not kept") {
		t.Errorf("a large diff: note %q, sessions kept %v", back.Note, back.cfg != nil)
	}
	big := *cfg
	big.Sessions = nil
	for i := range 2000 {
		s := cfg.Sessions[0]
		s.Name = fmt.Sprintf("session-%04d", i)
		big.Sessions = append(big.Sessions, s)
	}
	b, err = encodeChange(c, &big)
	if err != nil || len(b) > historyEntryMax {
		t.Fatalf("large sessions: %d bytes, %v", len(b), err)
	}
	if back, _ = decodeChange(cluster.HistoryEntry{Version: 7, Value: b}); back.cfg != nil || !strings.Contains(back.Note, "no rollback to this version") {
		t.Errorf("large sessions: note %q, sessions kept %v", back.Note, back.cfg != nil)
	}
}
