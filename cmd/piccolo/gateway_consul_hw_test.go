package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/internal/consultest"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// twoHardwareConfig declares v100 and t4, but the test runs only v100
// backends: t4 is in the catalog, not in the cluster.
const twoHardwareConfig = `
membership: consul
hardware:
  - {name: v100, price: 3}
  - {name: t4, price: 1}
profiles:
  - model: det
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 10ms}
  - model: det
    hardware: t4
    entries:
      - {batch: 1, concurrency: 1, duration: 2ms}
sessions:
  - name: s
    slo: 400ms
    modules:
      - {name: d, model: det, rate: 20}
`

// In cluster mode, an admin change that only an absent hardware type could
// serve is refused at the gateway (422, naming the session), as the leader,
// which plans with the hardware present, could not plan it either. It used to
// be accepted (200) and then served as 503 "session has no plan".
func TestGatewayConsulRefusesChangeOnlyAbsentHardwareServes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Consul and a backend process")
	}
	agent := consultest.Start(t)
	cfgPath := filepath.Join(t.TempDir(), "piccolo.yaml")
	if err := os.WriteFile(cfgPath, []byte(twoHardwareConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	startBackendProc(t, cfgPath, "v100", agent.Addr(), "gpu-0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startConsulGateway(t, ctx, cfgPath, agent.Addr(), replan.Options{}, replan.MonitorOptions{}, newPlanEvents())
	deadline := time.Now().Add(20 * time.Second)
	for len(membersOf(t, url)) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the gateway does not see the backend")
		}
		time.Sleep(100 * time.Millisecond)
	}
	before := adminPlan(t, url)
	// piccolo status names the cluster plan and its scheduler: this gateway,
	// the only candidate.
	var status bytes.Buffer
	if err := runStatus(ctx, &statusOptions{target: url, timeout: 5 * time.Second, adminToken: "tok", stderr: io.Discard}, &status); err != nil {
		t.Fatal(err)
	}
	// The cluster mode's metrics pass promlint too.
	if m := getMetrics(t, url+"/metrics"); !strings.Contains(m, "piccolo_plan_scheduler_info{scheduler=") {
		t.Errorf("/metrics has no piccolo_plan_scheduler_info")
	}
	if !regexp.MustCompile(`cluster plan: version [1-9][0-9]*, published by scheduler gateway-\S+; this gateway is the elected scheduler`).MatchString(status.String()) {
		t.Errorf("piccolo status does not name the cluster plan's scheduler:\n%s", status.String())
	}

	// 5 ms: a v100 takes 10 ms, only a t4 (absent) could meet it.
	st, body := adminDo(t, url, "PUT", "/admin/sessions/s", "tok", "name: s\nslo: 5ms\nmodules:\n  - {name: d, model: det, rate: 20}\n")
	if st != 422 || !strings.Contains(body, `session \"s\" cannot be planned`) {
		t.Errorf("PUT of an SLO only the absent t4 meets: %d %s, want 422 naming session s", st, body)
	}
	if after := adminPlan(t, url); !replan.SamePlan(before, after) || after.Sessions[0].SLOMs != 400 {
		t.Errorf("the refused change altered the plan: SLO %v ms", after.Sessions[0].SLOMs)
	}
	if st, b := adminDo(t, url, "POST", "/v2/models/s/infer", "", inferBody); st != 200 {
		t.Errorf("session s after the refused change: %d %s, want 200", st, b)
	}
	// A change the present v100 can serve still goes through.
	if st, b := adminDo(t, url, "PUT", "/admin/sessions/s", "tok", "name: s\nslo: 300ms\nmodules:\n  - {name: d, model: det, rate: 20}\n"); st != 200 {
		t.Errorf("PUT of a 300 ms SLO: %d %s, want 200", st, b)
	}
}

// Without Consul too: a config whose catalog names a type none of its
// backends has (t4, the cheaper) is planned on the types present. The gateway
// used to refuse to start: "no backend of hardware t4".
func TestGatewayPlansOnTheHardwareItsBackendsHave(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startSimGateway(t, ctx, strings.Replace(twoHardwareConfig, "membership: consul\n", "", 1),
		func(_ *backendOptions, o *gatewayOptions) { o.adminToken = "tok" }).url
	p := adminPlan(t, url)
	if len(p.Sessions) != 1 || p.Sessions[0].Error != "" || p.Sessions[0].Modules[0].Configs[0].Hardware != "v100" {
		t.Fatalf("plan %+v, want session s on v100", p.Sessions)
	}
	if st, b := adminDo(t, url, "POST", "/v2/models/s/infer", "", inferBody); st != 200 {
		t.Errorf("infer: %d %s", st, b)
	}
}
