package controlplane

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestAdminDryRun: a dry run that doubles a session's rate answers the diff
// (cost up, more v100 machines, the modules' configs before and after), one
// the planner cannot plan answers 422 with the reason, and neither changes
// anything: the config version and the served plan stay the same.
func TestAdminDryRun(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 2)
	_, _, planBefore := adminDo(t, "GET", h.url+"/admin/plan", adminToken, "")
	doubled := `{"name":"pipe","slo":"1s","modules":[{"name":"detect","model":"det","rate":100},{"name":"recognize","model":"rec","rate":100,"after":["detect"]}]}`
	for _, tc := range []struct{ method, path string }{
		{"PUT", "/admin/sessions/pipe?dry_run=true"},
		{"POST", "/admin/sessions/pipe:plan"},
	} {
		st, head, b := adminDo(t, tc.method, h.url+tc.path, adminToken, doubled)
		if st != 200 || head.Get("ETag") != `"1"` {
			t.Fatalf("%s %s: %d ETag %q %s", tc.method, tc.path, st, head.Get("ETag"), b)
		}
		var d PlanDiff
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %s: cost %.2f -> %.2f, hardware %+v, simulated attainment %v", tc.method, tc.path, d.CostBefore, d.CostAfter, d.Hardware, d.Attainment)
		if !d.DryRun || !d.WouldApply || d.Version != 1 || d.CostAfter <= d.CostBefore {
			t.Errorf("dry run of the doubled rate: %+v; want would_apply, version 1, cost up", d)
		}
		if a, ok := d.Attainment["pipe"]; !ok || a < 0.5 || a > 1 {
			t.Errorf("simulated attainment %v; want pipe's, in [0.5, 1] for a plan the gateway would serve", d.Attainment)
		}
		if len(d.Hardware) != 1 || d.Hardware[0].Hardware != "v100" || d.Hardware[0].Delta <= 0 {
			t.Errorf("hardware diff %+v; want more v100 machines", d.Hardware)
		}
		var mods []string
		for _, m := range d.Modules {
			mods = append(mods, m.Session+"/"+m.Module)
			if len(m.Before) == 0 || len(m.After) == 0 {
				t.Errorf("module %s/%s: configs before %v after %v; want both", m.Session, m.Module, m.Before, m.After)
			}
		}
		if strings.Join(mods, ",") != "pipe/detect,pipe/recognize" {
			t.Errorf("modules in the diff: %v; want pipe's two (solo is unchanged)", mods)
		}
	}
	// A model only hardware the pool lacks (t4) runs: refused, with the reason.
	st, _, b := adminDo(t, "PUT", h.url+"/admin/sessions/pipe?dry_run=true", adminToken,
		`{"name":"pipe","slo":"1s","modules":[{"name":"detect","model":"big","rate":5}]}`)
	var d PlanDiff
	_ = json.Unmarshal(b, &d)
	if st != 422 || d.WouldApply || !strings.Contains(d.Error, `session "pipe" cannot be planned`) || !strings.Contains(d.Error, `no backend has hardware "t4"`) {
		t.Errorf("dry run of a session the pool cannot carry: %d %s; want 422 naming the session and why", st, b)
	}
	t.Logf("refused: %s", d.Error)
	// Deleting a session frees its machines.
	st, _, b = adminDo(t, "DELETE", h.url+"/admin/sessions/pipe?dry_run=true", adminToken, "")
	_ = json.Unmarshal(b, &d)
	if st != 200 || d.CostAfter >= d.CostBefore {
		t.Errorf("dry run of a DELETE: %d %s; want the cost down", st, b)
	}
	// Bad input is still refused as the real change would be.
	if st, _, b := adminDo(t, "PUT", h.url+"/admin/sessions/pipe?dry_run=maybe", adminToken, doubled); st != 400 {
		t.Errorf("dry_run=maybe: %d %s, want 400", st, b)
	}
	if st, _, b := adminDo(t, "PUT", h.url+"/admin/sessions/pipe?dry_run=true", adminToken, `{"name":"pipe","slo":"1s","modules":[{"name":"d","model":"nope","rate":1}]}`); st != 400 {
		t.Errorf("dry run of an unknown model: %d %s, want 400", st, b)
	}
	if v := h.store.Current().Version; v != 1 {
		t.Errorf("config version %d after dry runs, want 1", v)
	}
	_, _, planAfter := adminDo(t, "GET", h.url+"/admin/plan", adminToken, "")
	if !bytes.Equal(planBefore, planAfter) {
		t.Errorf("the served plan changed after dry runs:\nbefore %s\nafter %s", planBefore, planAfter)
	}
	if s, _ := h.exec.Session("pipe"); s.Modules[0].Rate != 50 {
		t.Errorf("the runner serves pipe at rate %v after dry runs, want 50", s.Modules[0].Rate)
	}
}
