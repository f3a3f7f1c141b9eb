package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// TestGatewayAdminAndWatch boots `piccolo backend` and `piccolo gateway` with the
// admin token from the environment and file watching on: the admin API needs
// the token, a PUT re-plans live, and an edit of a -c file is reloaded.
func TestGatewayAdminAndWatch(t *testing.T) {
	t.Setenv("PICCOLO_ADMIN_TOKEN", "tok")
	text := detGatewayConfig
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sg := startSimGateway(t, ctx, text, func(_ *backendOptions, o *gatewayOptions) { o.watch = true })
	url, gdone, profiles := sg.url, sg.done, sg.cfgPath
	do := func(method, path, token, body string) (int, string) {
		return adminDo(t, url, method, path, token, body)
	}
	if st, b := do("GET", "/admin/plan", "", ""); st != 401 {
		t.Errorf("GET /admin/plan without a token: %d %s", st, b)
	}
	sloOf := func() float64 {
		st, b := do("GET", "/admin/plan", "tok", "")
		var p api.Plan
		if st != 200 || json.Unmarshal([]byte(b), &p) != nil || len(p.Sessions) != 1 {
			t.Fatalf("GET /admin/plan: %d %s", st, b)
		}
		return p.Sessions[0].SLOMs
	}
	if got := sloOf(); got != 1000 {
		t.Errorf("initial plan SLO %v ms", got)
	}
	if st, b := do("PUT", "/admin/sessions/s", "tok", "name: s\nslo: 600ms\nmodules:\n  - {name: d, model: det, rate: 20}\n"); st != 200 {
		t.Fatalf("PUT: %d %s", st, b)
	}
	if got := sloOf(); got != 600 {
		t.Errorf("plan SLO after the PUT: %v ms, want 600", got)
	}
	if err := os.WriteFile(profiles, []byte(strings.Replace(text, "slo: 1s", "slo: 900ms", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for sloOf() != 900 {
		if time.Now().After(deadline) {
			t.Fatalf("the file edit was not applied within 20 s (plan SLO %v ms)", sloOf())
		}
		time.Sleep(100 * time.Millisecond)
	}
	body := `{"inputs":[{"name":"input0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`
	if st, b := do("POST", "/v2/models/s/infer", "", body); st != 200 {
		t.Errorf("infer after the changes: %d %s", st, b)
	}
	cancel()
	select {
	case err := <-gdone:
		if err != nil {
			t.Errorf("gateway: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("gateway did not stop")
	}
}
