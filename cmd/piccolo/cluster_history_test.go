package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/controlplane"
)

// sessionConfigs is session s's configs in p (hardware, batch, machines per
// module; backends aside): what a rollback must bring back.
func sessionConfigs(p *api.Plan) []string {
	var out []string
	for _, sp := range p.Sessions {
		for _, m := range sp.Modules {
			for _, g := range m.Configs {
				out = append(out, fmt.Sprintf("%s/%s %s b%d x%.3f", sp.Name, m.Name, g.Hardware, g.Batch, g.Machines))
			}
		}
	}
	return out
}

// TestClusterHistoryAcrossLeaderChange is issue 36's history in Consul mode,
// with a real Consul agent, two backend processes and two `piccolo gateway
// --consul` (both scheduler candidates, named admin tokens from a file):
//
//  1. Three changes on the leading gateway (alice, alice, bob): both gateways
//     list the same history (1 the seeded config, 2–4 the changes, by name).
//  2. A rollback to the first change: the served plan on both gateways is
//     the first change's again; the rollback is version 5.
//  3. The leading gateway stops; the other leads. Its history is complete,
//     and a rollback from it (to version 3) serves version 3's plan.
//  4. A gateway started afterwards lists the whole history.
func TestClusterHistoryAcrossLeaderChange(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Consul and two backend processes")
	}
	agent, cfgPath, _ := startConsulRig(t, 50, 2)
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	sum := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	if err := os.WriteFile(tokens, []byte("- {name: alice, sha256: "+sum("alice-tok")+"}\n- {name: bob, sha256: "+sum("bob-tok")+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(ctx context.Context, id string, evs *planEvents) string {
		o := &gatewayOptions{files: []string{cfgPath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo",
			dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: 5 * time.Second, consul: agent.Addr(),
			clusterPrefix: "piccolo", schedule: true, gatewayID: id, adminTokens: tokens, configWait: 15 * time.Second, onPlan: evs.add}
		url, done := startGateway(t, ctx, o)
		t.Cleanup(func() {
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Errorf("gateway %s did not stop", id)
			}
		})
		return url
	}
	ctx1, stop1 := context.WithCancel(context.Background())
	defer stop1()
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	ev1, ev2 := newPlanEvents(), newPlanEvents()
	url1, url2 := start(ctx1, "gw-1", ev1), start(ctx2, "gw-2", ev2)
	leading := func(url string) bool {
		return metricLine(t, url, "piccolo_scheduler_leader") == "piccolo_scheduler_leader 1"
	}
	if leading(url1) == leading(url2) {
		t.Fatalf("leader metric: gateway 1 %v, gateway 2 %v; want exactly one", leading(url1), leading(url2))
	}
	leader, other, stopLeader, otherEvs := url1, url2, stop1, ev2
	if leading(url2) {
		leader, other, stopLeader, otherEvs = url2, url1, stop2, ev1
	}
	plan := func(url string) []string {
		t.Helper()
		st, b := adminDo(t, url, "GET", "/admin/plan", "alice-tok", "")
		var p api.Plan
		if st != 200 || json.Unmarshal([]byte(b), &p) != nil {
			t.Fatalf("GET %s/admin/plan: %d %s", url, st, b)
		}
		return sessionConfigs(&p)
	}
	type answer struct {
		Version        uint64 `json:"version"`
		HistoryVersion uint64 `json:"history_version"`
	}
	change := func(url, method, path, token, body string) answer {
		t.Helper()
		st, b := adminDo(t, url, method, path, token, body)
		var a answer
		if st != 200 || json.Unmarshal([]byte(b), &a) != nil {
			t.Fatalf("%s %s%s: %d %s", method, url, path, st, b)
		}
		return a
	}
	put := func(url, token string, rate int) answer {
		return change(url, "PUT", "/admin/sessions/s", token, fmt.Sprintf("name: s\nslo: 400ms\nmodules:\n  - {name: d, model: det, rate: %d}\n", rate))
	}
	history := func(url string) []string {
		t.Helper()
		st, b := adminDo(t, url, "GET", "/admin/history", "bob-tok", "")
		var h struct{ Changes []controlplane.Change }
		if st != 200 || json.Unmarshal([]byte(b), &h) != nil {
			t.Fatalf("GET %s/admin/history: %d %s", url, st, b)
		}
		var out []string
		for _, c := range h.Changes {
			out = append(out, fmt.Sprintf("%d %s %s", c.Version, c.Cause, c.Who))
			if c.PlanCost <= 0 || (c.Version > 1 && !strings.Contains(c.Diff, "rate:")) {
				t.Errorf("%s: version %d: cost %v diff %q; want a cost and the rate's diff", url, c.Version, c.PlanCost, c.Diff)
			}
		}
		return out
	}
	// waitServes waits until the gateway whose plans evs reports serves want.
	waitServes := func(evs *planEvents, url string, want []string, what string) {
		t.Helper()
		if reflect.DeepEqual(plan(url), want) {
			return
		}
		evs.waitPlan(t, 20*time.Second, what, func(e controlplane.PlanEvent) bool { return reflect.DeepEqual(sessionConfigs(e.Plan), want) })
	}

	// 1. Three changes on the leader.
	if a := put(leader, "alice-tok", 60); a.HistoryVersion != 2 {
		t.Errorf("the first change: history version %d, want 2 (1: the seeded config)", a.HistoryVersion)
	}
	first := plan(leader)
	put(leader, "alice-tok", 150)
	second := plan(leader)
	put(leader, "bob-tok", 300)
	if third := plan(leader); reflect.DeepEqual(third, first) || reflect.DeepEqual(second, first) || reflect.DeepEqual(third, second) {
		t.Fatalf("plans %v, %v, %v are not distinct: the test cannot tell a rollback", first, second, third)
	}
	t.Logf("plans served: rate 60 %v, 150 %v, 300 %v", first, second, plan(leader))
	want := []string{"1 initial file", "2 manual alice", "3 manual alice", "4 manual bob"}
	for _, url := range []string{leader, other} {
		if got := history(url); !reflect.DeepEqual(got, want) {
			t.Errorf("history on %s: %q, want %q", url, got, want)
		}
	}

	// 2. Roll back to the first change, on the leader.
	if a := change(leader, "POST", "/admin/sessions/s:rollback?to=2", "bob-tok", ""); a.HistoryVersion != 5 {
		t.Errorf("the rollback: history version %d, want 5", a.HistoryVersion)
	}
	if got := plan(leader); !reflect.DeepEqual(got, first) {
		t.Errorf("after the rollback the leader serves %v, want the first change's %v", got, first)
	}
	waitServes(otherEvs, other, first, "the first change's plan on the other gateway")
	want = append(want, "5 manual bob")
	if got := history(other); !reflect.DeepEqual(got, want) {
		t.Errorf("history on the other gateway after the rollback: %q, want %q", got, want)
	}

	// 3. The leader stops; the other gateway leads.
	oldLeader := otherEvs.last().Leader
	stopLeader()
	otherEvs.waitPlan(t, 15*time.Second, "a plan published by the other gateway's candidate", func(e controlplane.PlanEvent) bool { return e.Leader != oldLeader })
	if !leading(other) {
		t.Fatal("the remaining gateway does not lead")
	}
	t.Logf("leader %s stopped; %s leads", oldLeader, otherEvs.last().Leader)
	if got := history(other); !reflect.DeepEqual(got, want) {
		t.Errorf("history after the leader change: %q, want %q", got, want)
	}
	if a := change(other, "POST", "/admin/sessions/s:rollback?to=3", "alice-tok", ""); a.HistoryVersion != 6 {
		t.Errorf("the rollback on the new leader: history version %d, want 6", a.HistoryVersion)
	}
	if got := plan(other); !reflect.DeepEqual(got, second) {
		t.Errorf("after the rollback to version 3 the new leader serves %v, want version 3's %v", got, second)
	}
	want = append(want, "6 manual alice")

	// 4. A gateway started now reads the whole history from Consul.
	ctx3, stop3 := context.WithCancel(context.Background())
	defer stop3()
	third := start(ctx3, "gw-3", newPlanEvents())
	got := history(third)
	t.Logf("history listed by a gateway started afterwards: %q", got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("history on a gateway started after the changes: %q, want %q", got, want)
	}
	st, b := adminDo(t, third, "GET", "/admin/history", "tok", "")
	if st != 401 {
		t.Errorf("GET /admin/history with a token not in the file: %d %s; want 401", st, b)
	}
	st, b = adminDo(t, third, "POST", "/admin/sessions/s:rollback?to=1", "carol-tok", "")
	if st != 401 {
		t.Errorf("rollback with an unknown token: %d %s; want 401", st, b)
	}
}

// A tokens file that does not load stops the gateway at start, naming the
// flag, the file, the line and what is wanted.
func TestGatewayAdminTokensFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(bad, []byte("- name: alice\n  sha256: alice-tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{bad, "--admin-tokens " + bad + ": " + bad + `:2: sha256 of "alice" is not 64 hex digits`},
		{filepath.Join(dir, "missing.yaml"), "--admin-tokens " + filepath.Join(dir, "missing.yaml") + ": open "},
	} {
		o := &gatewayOptions{files: []string{"unused.yaml"}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo",
			dispatch: "tc", maxBody: 1 << 20, logFmt: "json", adminTokens: tc.file}
		err := runGateway(context.Background(), o, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--admin-tokens %s: %v; want %q", tc.file, err, tc.want)
		}
	}
}
