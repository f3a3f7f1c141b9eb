package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/piccolo-serving/piccolo/api"
)

// configsOf is a session plan's configs per module: hardware, batch and
// machines, what a rollback must bring back.
func configsOf(sp *api.SessionPlan) []string {
	var out []string
	for _, m := range sp.Modules {
		for _, g := range m.Configs {
			out = append(out, fmt.Sprintf("%s %s b%d c%d x%.3f", m.Name, g.Hardware, g.Batch, g.Concurrency, g.Machines))
		}
	}
	return out
}

// TestAdminHistoryAndRollback: three changes, a rollback to the first: the
// history lists every version with who, what and the cost, and the served
// plan is the first change's again.
func TestAdminHistoryAndRollback(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 2)
	put := func(rate int) {
		t.Helper()
		body := fmt.Sprintf("name: solo\nslo: 1s\nmodules:\n  - {name: only, model: rec, rate: %d}\n", rate)
		if st, _, b := adminDo(t, "PUT", h.url+"/admin/sessions/solo", adminToken, body); st != 200 {
			t.Fatalf("PUT solo rate %d: %d %s", rate, st, b)
		}
	}
	put(60)
	first := configsOf(sessionPlan(h.plan(t), "solo"))
	put(150)
	put(300)
	if got := configsOf(sessionPlan(h.plan(t), "solo")); reflect.DeepEqual(got, first) {
		t.Fatalf("the third change serves the first's plan %v: the test cannot tell a rollback", got)
	}
	st, head, b := adminDo(t, "POST", h.url+"/admin/sessions/solo:rollback?to=2", adminToken, "")
	if st != 200 || head.Get("ETag") != `"5"` {
		t.Fatalf("rollback to 2: %d ETag %q %s", st, head.Get("ETag"), b)
	}
	if got := configsOf(sessionPlan(h.plan(t), "solo")); !reflect.DeepEqual(got, first) {
		t.Errorf("after the rollback solo is served by %v, want the first change's %v", got, first)
	}
	if s, _ := h.exec.Session("solo"); s.Modules[0].Rate != 60 {
		t.Errorf("the runner serves solo at rate %v after the rollback, want 60", s.Modules[0].Rate)
	}

	st, _, b = adminDo(t, "GET", h.url+"/admin/history", adminToken, "")
	var hist struct{ Changes []Change }
	if err := json.Unmarshal(b, &hist); st != 200 || err != nil {
		t.Fatalf("GET /admin/history: %d %v %s", st, err, b)
	}
	var got []string
	for _, c := range hist.Changes {
		got = append(got, fmt.Sprintf("%d %s %s %v", c.Version, c.Cause, c.Who, c.Sessions))
		if c.Version > 1 && (c.PlanCost <= 0 || c.At.IsZero() || !strings.Contains(c.Diff, "rate:")) {
			t.Errorf("version %d: cost %v at %v diff %q; want a cost, a time and the rate's diff", c.Version, c.PlanCost, c.At, c.Diff)
		}
	}
	if hist.Changes[0].PlanCost <= 0 {
		t.Errorf("the initial version's plan cost %v, want the first plan's", hist.Changes[0].PlanCost)
	}
	want := []string{"1 initial file [pipe solo]", "2 manual admin [solo]", "3 manual admin [solo]", "4 manual admin [solo]", "5 manual admin [solo]"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("history %q, want %q", got, want)
	}
	if last := hist.Changes[len(hist.Changes)-1]; !strings.Contains(last.Note, "rollback of solo to version 2") ||
		!strings.Contains(last.Diff, "\n-      rate: 300\n") || !strings.Contains(last.Diff, "\n+      rate: 60\n") || last.PlanCost != hist.Changes[1].PlanCost {
		t.Errorf("the rollback's entry: note %q cost %v (first change's %v) diff:\n%s", last.Note, last.PlanCost, hist.Changes[1].PlanCost, last.Diff)
	} else {
		t.Logf("the rollback's entry:\n%s", last.Diff)
	}

	for _, tc := range []struct {
		path string
		want int
	}{
		{"/admin/sessions/solo:rollback?to=99", 404},
		{"/admin/sessions/solo:rollback?to=x", 400},
		{"/admin/sessions/solo:rollback", 400},
		{"/admin/sessions/solo:rollback?to=2&force=1", 400},
	} {
		if st, _, b := adminDo(t, "POST", h.url+tc.path, adminToken, ""); st != tc.want {
			t.Errorf("POST %s: %d %s, want %d", tc.path, st, b, tc.want)
		}
	}
	// A session created after version 1, rolled back to 1: removed.
	if st, _, b := adminDo(t, "PUT", h.url+"/admin/sessions/extra", adminToken, `{"name":"extra","slo":"1s","modules":[{"name":"d","model":"det","rate":5}]}`); st != 201 {
		t.Fatalf("PUT extra: %d %s", st, b)
	}
	if st, _, b := adminDo(t, "POST", h.url+"/admin/sessions/extra:rollback?to=1", adminToken, ""); st != 200 || !strings.Contains(string(b), `"deleted": "extra"`) {
		t.Errorf("rollback of extra to 1: %d %s; want it deleted", st, b)
	}
}

// TestFileRefusedOverNewerAdminChange: a reload of the -c files written
// before an admin change to a session they would overwrite is refused (log,
// metric, nothing changes); a later save of the file wins.
func TestFileRefusedOverNewerAdminChange(t *testing.T) {
	h, full := startAdminHarness(t, adminConfig, 2)
	dir := t.TempDir()
	path := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(path, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	reports := make(chan error, 16)
	cw, err := StartConfigWatcher(context.Background(), h.store, []string{path},
		WatchOptions{Debounce: 100 * time.Millisecond, OnReload: func(_ ConfigSnapshot, err error) { reports <- err }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cw.Close() })
	if st, _, b := adminDo(t, "PUT", h.url+"/admin/sessions/solo", adminToken, "name: solo\nslo: 1s\nmodules:\n  - {name: only, model: rec, rate: 40}\n"); st != 200 {
		t.Fatalf("PUT solo: %d %s", st, b)
	}
	// A file written an hour ago (a restore, a checkout keeping times) moved
	// into place: it edits pipe and still has solo at rate 20.
	stale := strings.Replace(full, "slo: 1s", "slo: 900ms", 1)
	tmp := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(tmp, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(tmp, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	err = waitReload(t, reports, "stale file")
	if err == nil || !strings.Contains(err.Error(), `overwrite session "solo"`) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("stale file: %v; want it refused naming solo and the admin change's version", err)
	}
	var m dto.Metric
	if err := cw.Refusals().Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		n := m.GetCounter().GetValue()
		t.Errorf("refusals metric %v, want 1", n)
	}
	if v := h.store.Current().Version; v != 2 {
		t.Errorf("version %d after a refused reload, want 2", v)
	}
	// Saved again now: the operator's latest word, applied.
	if err := os.WriteFile(path, []byte(stale+"\n# saved again\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := waitReload(t, reports, "file saved again"); err != nil {
		t.Fatalf("file saved after the admin change: %v", err)
	}
	if s, _ := h.store.Current().Config.Session("solo"); s.Modules[0].Rate != 20 {
		t.Errorf("solo rate %v after the newer file, want the file's 20", s.Modules[0].Rate)
	}
	if c := h.store.History(); c[len(c)-1].Who != "file" {
		t.Errorf("the last change is %q's, want file's", c[len(c)-1].Who)
	}
}
