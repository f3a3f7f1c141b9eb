package controlplane

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestViewServesPageAndFigures: the live view's files load without the
// token (they hold no data), its figures do not; with the token they are the
// running plan's and match /metrics after requests.
func TestViewServesPageAndFigures(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 2)
	for _, c := range []struct {
		path, ctype string
		status      int
	}{
		{"/admin/view/", "text/html; charset=utf-8", 200},
		{"/admin/view/view.js", "text/javascript; charset=utf-8", 200},
		{"/admin/view/view.css", "text/css; charset=utf-8", 200},
		{"/admin/view/nothing.js", "application/json", 404},
		{"/admin/view/?token=x", "application/json", 400}, // the token never goes in the query
		{"/admin/view/state", "application/json", 401},
	} {
		st, head, b := adminDo(t, "GET", h.url+c.path, "", "")
		if st != c.status || head.Get("Content-Type") != c.ctype {
			t.Errorf("GET %s without a token: %d %s, want %d %s\n%s", c.path, st, head.Get("Content-Type"), c.status, c.ctype, b)
		}
		if st == 200 && !strings.Contains(head.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: no CSP keeping the page to its own files: %q", c.path, head.Get("Content-Security-Policy"))
		}
	}
	if st, _, _ := adminDo(t, "GET", h.url+"/admin/view/state", "wrong", ""); st != 401 {
		t.Errorf("GET /admin/view/state with a wrong token: %d, want 401", st)
	}

	const n = 7
	body := `{"inputs":[{"name":"input0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`
	for range n {
		resp, err := http.Post(h.url+"/v2/models/solo/infer", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("infer: %d %s", resp.StatusCode, b)
		}
	}
	st, _, b := adminDo(t, "GET", h.url+"/admin/view/state", adminToken, "")
	if st != 200 {
		t.Fatalf("GET /admin/view/state: %d %s", st, b)
	}
	var got viewState
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Window != "since start" || got.ConfigVersion != 1 || len(got.Sessions) != 2 {
		t.Errorf("state: window %q, version %d, %d sessions; want since start, 1, 2", got.Window, got.ConfigVersion, len(got.Sessions))
	}
	resp, err := http.Get(h.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(name string, labels map[string]string) float64 {
		var v float64
		for _, m := range fams[name].GetMetric() {
			ok := true
			for _, l := range m.GetLabel() {
				if w, has := labels[l.GetName()]; has && w != l.GetValue() {
					ok = false
				}
			}
			if ok {
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		return v
	}
	plan := h.plan(t)
	for _, s := range got.Live.Sessions {
		if s.Name != "solo" {
			continue
		}
		wantSub := sum("piccolo_dispatcher_items_total", map[string]string{"session": "solo", "outcome": "submitted"})
		wantReq := sum("piccolo_gateway_requests_total", map[string]string{"session": "solo"})
		if s.Requests != n || s.Requests != wantReq || s.OK != n || s.Attainment != 1 || s.P99Seconds <= 0 {
			t.Errorf("solo: %+v; want %d requests (/metrics: %v), all ok within the SLO, a p99", s, n, wantReq)
		}
		if len(s.Modules) != 1 || s.Modules[0].PlannedRate != sessionPlan(plan, "solo").Modules[0].Rate ||
			s.Modules[0].Submitted != wantSub || len(s.Modules[0].Configs) == 0 || s.Modules[0].MachinesPlaced == 0 {
			t.Errorf("solo's module: %+v; want the plan's rate and configs, %v submitted (/metrics)", s.Modules, wantSub)
		}
		return
	}
	t.Errorf("no session solo in %s", bytes.TrimSpace(b))
}
