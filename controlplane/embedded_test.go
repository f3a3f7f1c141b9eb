package controlplane

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/planner"
)

// A change that passes the planning check but cannot go live (its only
// backend refuses connections, so its models cannot be loaded) is refused
// after the control loop tried it: Update fails, the config version, the plan
// and the backends stay, and requests are still answered on the old backends.
func TestEmbeddedChangeThatCannotGoLiveRollsBack(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 2)
	before := h.plan(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	_, err = h.store.Update(ctx, "config", 0, func(cur *api.Config) (*api.Config, error) {
		next := *cur
		next.Backends = []api.Backend{{ID: "gone", Address: dead, Hardware: "v100"}}
		return &next, nil
	})
	if err == nil {
		t.Fatal("a change onto an unreachable backend went live")
	}
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if v := h.store.Current().Version; v != 1 {
		t.Errorf("config version %d after the refused change, want 1", v)
	}
	if after := h.plan(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("plan changed by the refused change:\n%v\nwas\n%v", after, before)
	}
	if got := h.control.ServedConfig().Backends; len(got) != 2 || got[0].ID == "gone" {
		t.Errorf("served backends after the refused change: %v", got)
	}
	status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/pipe/infer", `{"inputs":[{"name":"input0","shape":[1,1],"datatype":"FP32","data":[1]}]}`)
	if status != 200 {
		t.Errorf("infer after the refused change: %d %v", status, m)
	}
	// The controller went back to the served config: its next decision is
	// not a retry of the refused one. Waited for (a loaded host may take its
	// time over that decision), not slept on.
	deadline := time.Now().Add(10 * time.Second)
	for st := h.control.Controller().Status(); st.Err != ""; st = h.control.Controller().Status() {
		if time.Now().After(deadline) {
			t.Errorf("controller still failing 10 s after the rollback: %s", st.Err)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An admin change is planned once: the config pipeline plans and checks it,
// and the control loop places and applies that plan instead of planning again
// (fusion is off here, so the fuse step plans nothing). Counted at the
// planner itself (planner.Runs), so a run anywhere on the route counts,
// not only the plan step's calls.
func TestEmbeddedChangeIsPlannedOnce(t *testing.T) {
	base, err := api.LoadBytes(api.NamedDoc{Name: "profiles.yaml", Data: []byte(adminConfig)})
	if err != nil {
		t.Fatal(err)
	}
	full := adminConfig + "\n" + testharness.StartSimBackends(t, base.Profiles, 2)
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "config.yaml", Data: []byte(full)})
	if err != nil {
		t.Fatal(err)
	}
	h := bootAdminWith(t, cfg, testPlanner)
	before := planner.Runs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.store.Update(ctx, "manual", 0, func(cur *api.Config) (*api.Config, error) {
		next := *cur
		next.Sessions = append([]api.Session(nil), cur.Sessions...)
		s := next.Sessions[0]
		s.Modules = append([]api.Module(nil), s.Modules...)
		s.Modules[0].Rate *= 2
		next.Sessions[0] = s
		return &next, nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := planner.Runs() - before; n != 1 {
		t.Errorf("one config change ran the planner %d times; want 1", n)
	}
}
