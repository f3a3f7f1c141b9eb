package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// schedulerHelperEnv switches the test binary into a `piccolo scheduler` child
// process (TestHelperSchedulerProcess), so a test can SIGKILL the leader.
const schedulerHelperEnv = "PICCOLO_TEST_SCHEDULER_OPTS"

// TestHelperSchedulerProcess is not a test: run as a child process with
// schedulerHelperEnv set ({Config, Consul, ID}), it runs a re-planner candidate,
// prints "READY" and exits when its stdin closes (the parent died).
func TestHelperSchedulerProcess(t *testing.T) {
	var h struct{ Config, Consul, ID string }
	helperMain(t, schedulerHelperEnv, &h, func(ctx context.Context) error {
		o := &schedulerOptions{files: []string{h.Config}, consul: h.Consul, prefix: "piccolo", id: h.ID, ttl: 2 * time.Second,
			policy: "piccolo", burst: 0.999, logFmt: "json", loop: replan.Options{Period: -1}}
		return runScheduler(ctx, o, func(string) { fmt.Println("READY") })
	})
}

type schedulerProc struct {
	id  string
	cmd *exec.Cmd
}

func startSchedulerProc(t *testing.T, cfgPath, consul, id string) *schedulerProc {
	t.Helper()
	cmd, _, _ := startChild(t, "TestHelperSchedulerProcess", schedulerHelperEnv,
		map[string]string{"Config": cfgPath, "Consul": consul, "ID": id}, "READY")
	return &schedulerProc{id: id, cmd: cmd}
}

// startFollower runs `piccolo gateway --consul --schedule=false` in-process
// with the admin API on (token "tok") and returns its HTTP base URL.
func startFollower(t *testing.T, ctx context.Context, cfgPath, consul, id string, evs *planEvents) string {
	t.Helper()
	o := &gatewayOptions{files: []string{cfgPath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo",
		dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: 5 * time.Second, consul: consul,
		clusterPrefix: "piccolo", gatewayID: id, adminToken: "tok", configWait: 15 * time.Second, onPlan: evs.add}
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

func adminDo(t *testing.T, url, method, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func adminPlan(t *testing.T, url string) *api.Plan {
	t.Helper()
	st, b := adminDo(t, url, "GET", "/admin/plan", "tok", "")
	var p api.Plan
	if st != 200 || json.Unmarshal([]byte(b), &p) != nil {
		t.Fatalf("GET %s/admin/plan: %d %s", url, st, b)
	}
	return &p
}

// TestClusterTwoGatewaysStandbyScheduler is issue 4's distribution test, with a
// real Consul agent: two scheduler processes (one elected with the Consul
// lock, one standby), two gateways that only follow the plan published in
// Consul KV, four sim backends (processes), Poisson load on both gateways.
//
//  1. Both gateways serve the leader's plan.
//  2. The leader is SIGKILLed: the standby takes over after its TTL and both
//     gateways serve its plan; every request is answered throughout.
//  3. A backend in the plan is SIGKILLed: the new leader re-plans and both
//     gateways drop it.
//  4. An admin PUT on one gateway changes the SLO: both gateways serve the
//     re-planned session; an invalid PUT changes nothing; no token → 401.
func TestClusterTwoGatewaysStandbyScheduler(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Consul, two schedulers and four backend processes")
	}
	const rate = 240.0
	agent, cfgPath, procs := startConsulRig(t, rate, 4)
	scheds := map[string]*schedulerProc{}
	scheds["sched-a"] = startSchedulerProc(t, cfgPath, agent.Addr(), "sched-a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev1, ev2 := newPlanEvents(), newPlanEvents()
	url1 := startFollower(t, ctx, cfgPath, agent.Addr(), "gw-1", ev1)
	url2 := startFollower(t, ctx, cfgPath, agent.Addr(), "gw-2", ev2)
	scheds["sched-b"] = startSchedulerProc(t, cfgPath, agent.Addr(), "sched-b")
	// Wait until both gateways see all four backends and serve the same plan.
	deadline := time.Now().Add(20 * time.Second)
	for len(membersOf(t, url1)) < 4 || len(membersOf(t, url2)) < 4 || !replan.SamePlan(adminPlan(t, url1), adminPlan(t, url2)) {
		if time.Now().After(deadline) {
			t.Fatalf("the two gateways serve different plans:\n%v\n%v", placedOn(adminPlan(t, url1)), placedOn(adminPlan(t, url2)))
		}
		time.Sleep(100 * time.Millisecond)
	}
	leader := ev1.last().Leader
	standby := "sched-a"
	if leader == "sched-a" {
		standby = "sched-b"
	}
	t.Logf("leader %s, standby %s; plan cost %.2f on %v", leader, standby, ev1.last().Plan.TotalCost, placedOn(ev1.last().Plan))

	lctx, stopLoad := context.WithCancel(ctx)
	load1 := startLoad(lctx, url1+"/v2/models/s/infer", inferBody, func() float64 { return rate / 2 })
	load2 := startLoad(lctx, url2+"/v2/models/s/infer", inferBody, func() float64 { return rate / 2 })
	time.Sleep(3 * time.Second)

	// 2. The leader dies.
	killedSched := time.Now()
	if err := scheds[leader].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	byStandby := func(e controlplane.PlanEvent) bool { return e.Leader == standby }
	f1 := ev1.waitPlan(t, 15*time.Second, "a plan from the standby", byStandby)
	f2 := ev2.waitPlan(t, 15*time.Second, "a plan from the standby", byStandby)
	t.Logf("leader SIGKILLed → standby's plan live on gateway 1 after %v, gateway 2 after %v (cause %s, cost %.2f)",
		f1.Live.Sub(killedSched).Round(time.Millisecond), f2.Live.Sub(killedSched).Round(time.Millisecond), f1.Cause, f1.Plan.TotalCost)
	if d := later(f1.Live, f2.Live).Sub(killedSched); d > 10*time.Second {
		t.Errorf("failover took %v, want ≤ 10 s (TTL 2 s)", d)
	}
	// The gateways' metrics name the new scheduler, even when its first plan
	// is the one already live.
	for _, u := range []string{url1, url2} {
		if l := metricLine(t, u, "piccolo_plan_scheduler_info"); !strings.Contains(l, `scheduler="`+standby+`"`) {
			t.Errorf("%s after the failover: %q, want scheduler %q", u, l, standby)
		}
	}
	time.Sleep(2 * time.Second)

	// 3. A backend in the plan dies; the new leader re-plans for both gateways.
	used := placedOn(ev1.last().Plan)
	victim := procs[used[len(used)-1]]
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	without := func(e controlplane.PlanEvent) bool { return !slices.Contains(placedOn(e.Plan), victim.id) }
	o1 := ev1.waitPlan(t, 10*time.Second, victim.id+" out", without)
	o2 := ev2.waitPlan(t, 10*time.Second, victim.id+" out", without)
	t.Logf("backend %s SIGKILLed → Consul reported it after %v; out of gateway 1's table after %v, gateway 2's after %v (%v and %v after the report)",
		victim.id, o1.Trigger.Sub(killed).Round(time.Millisecond), o1.Live.Sub(killed).Round(time.Millisecond), o2.Live.Sub(killed).Round(time.Millisecond),
		o1.Live.Sub(o1.Trigger).Round(time.Millisecond), o2.Live.Sub(o2.Trigger).Round(time.Millisecond))
	for i, o := range []controlplane.PlanEvent{o1, o2} {
		if d := o.Live.Sub(killed); d > 5*time.Second {
			t.Errorf("gateway %d: killed backend out after %v, want ≤ 5 s", i+1, d)
		}
		if d := o.Live.Sub(o.Trigger); d > time.Second {
			t.Errorf("gateway %d: new plan live %v after Consul reported the change, want ≤ 1 s", i+1, d)
		}
	}
	time.Sleep(6 * time.Second)
	tailEnd := time.Now()

	// 4. Operators change the session at gateway 2.
	if st, b := adminDo(t, url2, "PUT", "/admin/sessions/s", "", "name: s\nslo: 500ms\nmodules:\n  - {name: d, model: det, rate: 240}\n"); st != 401 {
		t.Errorf("PUT without a token: %d %s, want 401", st, b)
	}
	before := adminPlan(t, url1)
	if st, b := adminDo(t, url1, "PUT", "/admin/sessions/s", "tok", "name: s\nslo: 500ms\nmodules:\n  - {name: d, model: nope, rate: 240}\n"); st != 400 {
		t.Errorf("PUT with an unknown model: %d %s, want 400", st, b)
	}
	if after := adminPlan(t, url1); !replan.SamePlan(before, after) {
		t.Errorf("an invalid PUT changed the plan")
	}
	put := time.Now()
	if st, b := adminDo(t, url2, "PUT", "/admin/sessions/s", "tok", "name: s\nslo: 500ms\nmodules:\n  - {name: d, model: det, rate: 240}\n"); st != 200 {
		t.Fatalf("PUT on gateway 2: %d %s", st, b)
	}
	answered := time.Since(put)
	c1 := ev1.waitPlan(t, 10*time.Second, "the 500ms SLO", func(e controlplane.PlanEvent) bool { return e.Plan.Sessions[0].SLOMs == 500 })
	t.Logf("admin PUT on gateway 2 answered after %v (plan live there); live on gateway 1 after %v", answered.Round(time.Millisecond),
		c1.Live.Sub(put).Round(time.Millisecond))
	if p := adminPlan(t, url2); p.Sessions[0].SLOMs != 500 {
		t.Errorf("gateway 2 serves SLO %v ms after its PUT answered, want 500", p.Sessions[0].SLOMs)
	}
	if st, b := adminDo(t, url1, "GET", "/admin/sessions/s", "tok", ""); st != 200 || !strings.Contains(b, `500ms`) {
		t.Errorf("gateway 1's admin view of session s after the change at gateway 2: %d %s", st, b)
	}

	stopLoad()
	outs := append(load1.wait(), load2.wait()...)
	slo := 400 * time.Millisecond
	unanswered := checkAnswered(t, outs, killedSched)
	failover, nf := attainment(outs, killedSched, f1.Live.Add(time.Second), slo)
	tail, nt := attainment(outs, later(o1.Live, o2.Live).Add(time.Second), tailEnd, slo)
	t.Logf("requests %d, all answered: %v; SLO attainment across the scheduler failover %.4f (%d), after the backend re-plan %.4f (%d)",
		len(outs), unanswered == 0, failover, nf, tail, nt)
	if failover < 0.99 {
		t.Errorf("SLO attainment across the scheduler failover %.4f, want ≥ 0.99 (the gateways keep serving the last plan)", failover)
	}
	if tail < 0.99 {
		t.Errorf("SLO attainment after the re-plan %.4f over %d requests, want ≥ 0.99", tail, nt)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// piccolo scheduler refuses bad flags with a message naming the flag.
func TestSchedulerFlagErrors(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, consulTestConfig, 100.0), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := schedulerOptions{files: []string{cfgPath}, consul: "127.0.0.1:1", ttl: 2 * time.Second, policy: "piccolo", logFmt: "json"}
	for _, tc := range []struct {
		change func(*schedulerOptions)
		want   string
	}{
		{func(o *schedulerOptions) { o.consul = "" }, "--consul is required"},
		{func(o *schedulerOptions) { o.files = nil }, "no config given"},
		{func(o *schedulerOptions) { o.ttl = 500 * time.Millisecond }, "--ttl 500ms: must be at least 1s"},
		{func(o *schedulerOptions) { o.policy = "fifo" }, `--policy "fifo": allowed:`},
		{func(o *schedulerOptions) { o.logFmt = "xml" }, `--log "xml"`},
		{func(o *schedulerOptions) { o.files = []string{filepath.Join(dir, "missing.yaml")} }, "missing.yaml"},
	} {
		o := ok
		tc.change(&o)
		err := runScheduler(context.Background(), &o, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want one containing %q", err, tc.want)
		}
	}
}

// Two gateways, both scheduler candidates (the default with --consul): one
// leads; when it shuts down cleanly it releases the lock before exiting, so
// the other gateway leads and publishes at once rather than after the TTL, and
// keeps serving.
func TestClusterGatewayLeaderStopsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Consul and a backend process")
	}
	agent, cfgPath, _ := startConsulRig(t, 50, 1)
	ctx1, stop1 := context.WithCancel(context.Background())
	defer stop1()
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	ev1, ev2 := newPlanEvents(), newPlanEvents()
	url1 := startConsulGateway(t, ctx1, cfgPath, agent.Addr(), replan.Options{}, replan.MonitorOptions{}, ev1)
	url2 := startConsulGateway(t, ctx2, cfgPath, agent.Addr(), replan.Options{}, replan.MonitorOptions{}, ev2)
	leading := func(url string) bool {
		return metricLine(t, url, "piccolo_replanner_leader") == "piccolo_replanner_leader 1" && metricLine(t, url, "piccolo_scheduler_leader") == "piccolo_scheduler_leader 1"
	}
	if leading(url1) == leading(url2) {
		t.Fatalf("leader metric: gateway 1 %v, gateway 2 %v; want exactly one", leading(url1), leading(url2))
	}
	stop, otherURL, other := stop1, url2, ev2
	if leading(url2) {
		stop, otherURL, other = stop2, url1, ev1
	}
	oldLeader := other.last().Leader
	stopped := time.Now()
	stop()
	e := other.waitPlan(t, 10*time.Second, "a plan from the other gateway's candidate", func(e controlplane.PlanEvent) bool { return e.Leader != oldLeader })
	took := e.Live.Sub(stopped)
	t.Logf("leading gateway stopped → the other gateway's candidate published after %v (TTL %v)", took.Round(time.Millisecond), 2*time.Second)
	if took > 1500*time.Millisecond {
		t.Errorf("handover after a clean stop took %v; the lock should be released on shutdown, not left to the TTL", took)
	}
	if !leading(otherURL) {
		t.Error("the remaining gateway does not report itself leader")
	}
	if st, b := adminDoNoToken(t, otherURL+"/v2/models/s/infer", inferBody); st != 200 {
		t.Errorf("infer on the remaining gateway: %d %s", st, b)
	}
}

func adminDoNoToken(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A gateway with --scheduler-ttl under 1 s stops with an error naming the
// flag; its candidate used to fail inside Run, unseen, and the gateway waited
// for a plan forever.
func TestGatewaySchedulerTTLTooShort(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "piccolo.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, consulTestConfig, 100.0), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &gatewayOptions{files: []string{cfgPath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo",
		dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: time.Second, consul: "127.0.0.1:1",
		schedule: true, schedulerTTL: 500 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := runGateway(ctx, o, nil)
	if err == nil || !strings.Contains(err.Error(), "--scheduler-ttl") || !strings.Contains(err.Error(), "at least 1s") {
		t.Errorf("runGateway: %v, want an error naming --scheduler-ttl and the 1 s minimum", err)
	}
}
