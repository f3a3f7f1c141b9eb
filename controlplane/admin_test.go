package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/kserve"
	"github.com/piccolo-serving/piccolo/kserve/kservetest"
	"github.com/piccolo-serving/piccolo/loadgen"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
	"github.com/piccolo-serving/piccolo/serving"
)

// adminConfig is testharness.ChainProfiles plus a second session, so a change to one can
// be checked to leave the other alone.
const adminConfig = `
hardware:
  - {name: t4, price: 1}
profiles:
  - model: big
    hardware: t4
    entries:
      - {batch: 1, concurrency: 1, duration: 40ms}
---
` + testharness.ChainProfiles + `
  - name: solo
    slo: 1s
    modules:
      - {name: only, model: rec, rate: 20}
`

const adminToken = "s3cret-token"

// adminHarness is a gateway with a LiveSwitch, the embedded control, a
// ConfigStore and the admin API, over sim backends on loopback.
type adminHarness struct {
	url     string
	store   *ConfigStore
	sw      *dataplane.LiveSwitch
	exec    *gateway.DAGRunner
	metrics *metrics.Metrics
	control *EmbeddedControl
	reg     *prometheus.Registry
}

// testPlanner is the tests' plan step: the piccolo policy on the hardware
// types the config's backends have, as serving.Plan plans for them (the
// control loop hands the planner the whole catalog).
func testPlanner(cfg *api.Config) (*api.Plan, error) {
	return testharness.Planner(replan.OnlyPresent(cfg, serving.Hardware(cfg.Backends)))
}

// startAdminHarness boots n sim backends and a gateway over configText (the
// backends list is added); it returns the harness and the config's full text.
func startAdminHarness(t testing.TB, configText string, n int) (*adminHarness, string) {
	t.Helper()
	base, err := api.LoadBytes(api.NamedDoc{Name: "profiles.yaml", Data: []byte(configText)})
	if err != nil {
		t.Fatal(err)
	}
	full := configText + "\n" + testharness.StartSimBackends(t, base.Profiles, n)
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "config.yaml", Data: []byte(full)})
	if err != nil {
		t.Fatal(err)
	}
	return bootAdmin(t, cfg), full
}

func bootAdmin(t testing.TB, cfg *api.Config) *adminHarness {
	return bootAdminWith(t, cfg, testPlanner)
}

// bootAdminWith is bootAdmin with planner as the config pipeline's plan step.
// opts change the admin API's options before it starts.
func bootAdminWith(t testing.TB, cfg *api.Config, planner Planner, opts ...func(*AdminOptions)) *adminHarness {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics, err := metrics.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g, err := StartGateway(ctx, cfg, GatewayOptions{Planner: planner, Live: dataplane.LiveOptions{Metrics: metrics}, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	sw, exec := g.Switch, g.Runner
	t.Cleanup(func() { sw.Close() })
	reg.MustRegister(sw)
	h := &adminHarness{sw: sw, exec: exec, metrics: metrics, reg: reg, control: g.Control.(*EmbeddedControl), store: g.Store}
	aopts := AdminOptions{Token: adminToken, Store: h.store, Plan: sw.Plan, DryRun: h.control.DryRun, Gatherer: reg}
	for _, o := range opts {
		o(&aopts)
	}
	admin, err := NewAdmin(aopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	srv, err := kserve.NewServer(exec, kserve.ServerOptions{Metrics: metrics, Admin: admin.Handle})
	if err != nil {
		t.Fatal(err)
	}
	h.url = kservetest.ServeHTTP(t, srv)
	return h
}

// adminDo sends an admin request with token (none when empty) and returns the
// status, the headers and the body.
func adminDo(t testing.TB, method, url, token, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (h *adminHarness) plan(t testing.TB) api.Plan {
	t.Helper()
	st, _, b := adminDo(t, "GET", h.url+"/admin/plan", adminToken, "")
	if st != 200 {
		t.Fatalf("GET /admin/plan: %d %s", st, b)
	}
	var p api.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("GET /admin/plan: %v in %s", err, b)
	}
	return p
}

func sessionPlan(p api.Plan, name string) *api.SessionPlan {
	for i := range p.Sessions {
		if p.Sessions[i].Name == name {
			return &p.Sessions[i]
		}
	}
	return nil
}

func budgetSum(sp *api.SessionPlan) float64 {
	var s float64
	for _, m := range sp.Modules {
		s += m.BudgetMs
	}
	return s
}

func TestAdminAuth(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 1)
	for _, tc := range []struct {
		name, method, path, auth string
		want                     int
	}{
		{"no token", "GET", "/admin/plan", "", 401},
		{"wrong token", "GET", "/admin/plan", "Bearer nope", 401},
		{"token prefix only", "GET", "/admin/sessions", "Bearer " + adminToken[:4], 401},
		{"not bearer", "GET", "/admin/plan", "Basic " + adminToken, 401},
		{"no token on a change", "DELETE", "/admin/sessions/solo", "", 401},
		{"right token", "GET", "/admin/plan", "Bearer " + adminToken, 200},
		{"scheme in lower case (RFC 7235: case-insensitive)", "GET", "/admin/plan", "bearer " + adminToken, 200},
		{"scheme in upper case", "GET", "/admin/plan", "BEARER " + adminToken, 200},
		{"unknown endpoint", "GET", "/admin/nope", "Bearer " + adminToken, 404},
		{"wrong method", "POST", "/admin/plan", "Bearer " + adminToken, 405},
		{"a nested name with a verb", "POST", "/admin/sessions/a/b:plan", "Bearer " + adminToken, 404},
		{"a verb with no name", "POST", "/admin/sessions/:rollback?to=1", "Bearer " + adminToken, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.auth != "" {
				hdr = []string{"Authorization", tc.auth}
			}
			st, head, body := adminDo(t, tc.method, h.url+tc.path, "", "", hdr...)
			if st != tc.want {
				t.Fatalf("status %d, want %d: %s", st, tc.want, body)
			}
			if st == 401 && !strings.HasPrefix(head.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without WWW-Authenticate: Bearer (got %q)", head.Get("WWW-Authenticate"))
			}
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				t.Errorf("body is not JSON: %q", body)
			}
			if st != 200 && m["error"] == nil {
				t.Errorf("error answer without an error: %s", body)
			}
		})
	}
	// The session survived the unauthorized DELETE.
	if _, ok := h.store.Current().Config.Session("solo"); !ok || h.store.Current().Version != 1 {
		t.Errorf("an unauthorized DELETE changed the config (version %d)", h.store.Current().Version)
	}
}

func TestNewAdminNeedsAToken(t *testing.T) {
	if _, err := NewAdmin(AdminOptions{Store: &ConfigStore{}, Plan: func() *api.Plan { return nil }}); err == nil {
		t.Error("NewAdmin accepted an empty token")
	}
}

func TestAdminReads(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 2)
	st, head, b := adminDo(t, "GET", h.url+"/admin/sessions", adminToken, "")
	if st != 200 || head.Get("ETag") != `"1"` {
		t.Fatalf("GET /admin/sessions: %d ETag %q %s", st, head.Get("ETag"), b)
	}
	var list struct {
		Version  uint64
		Sessions []sessionJSON
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	if list.Version != 1 || len(list.Sessions) != 2 || list.Sessions[0].Name != "pipe" || list.Sessions[1].Name != "solo" {
		t.Errorf("sessions: %+v", list)
	}
	st, _, b = adminDo(t, "GET", h.url+"/admin/sessions/pipe", adminToken, "")
	want := `{"name":"pipe","slo":"1s","modules":[{"name":"detect","model":"det","rate":50},{"name":"recognize","model":"rec","rate":50,"after":["recognize"]}]}`
	want = strings.Replace(want, `"after":["recognize"]`, `"after":["detect"]`, 1)
	var got, wantV any
	_ = json.Unmarshal(b, &got)
	_ = json.Unmarshal([]byte(want), &wantV)
	if st != 200 || fmt.Sprint(got) != fmt.Sprint(wantV) {
		t.Errorf("GET /admin/sessions/pipe: %d %s\nwant %s", st, b, want)
	}
	// YAML on request: a document the config loader reads back.
	st, head, b = adminDo(t, "GET", h.url+"/admin/sessions", adminToken, "", "Accept", "application/yaml")
	if st != 200 || head.Get("Content-Type") != "application/yaml" {
		t.Fatalf("GET /admin/sessions as YAML: %d %q %s", st, head.Get("Content-Type"), b)
	}
	profiles := adminConfig[:strings.LastIndex(adminConfig, "sessions:")]
	back, err := api.LoadBytes(api.NamedDoc{Name: "p.yaml", Data: []byte(profiles)}, api.NamedDoc{Name: "s.yaml", Data: b})
	if err != nil || len(back.Sessions) != 2 || back.Sessions[0].SLO.D() != time.Second {
		t.Errorf("the YAML answer does not load back as the sessions: %v\n%s", err, b)
	}
	st, _, b = adminDo(t, "GET", h.url+"/admin/sessions/nope", adminToken, "")
	if st != 404 || !strings.Contains(string(b), "pipe, solo") {
		t.Errorf("GET unknown session: %d %s; want 404 listing the known ones", st, b)
	}

	p := h.plan(t)
	if len(p.Sessions) != 2 || sessionPlan(p, "pipe") == nil || sessionPlan(p, "pipe").Modules[0].Configs[0].Backends == nil {
		t.Errorf("GET /admin/plan: not the placed plan of both sessions: %+v", p)
	}
	st, _, b = adminDo(t, "GET", h.url+"/admin/backends", adminToken, "")
	var bv BackendView
	if err := json.Unmarshal(b, &bv); err != nil || st != 200 {
		t.Fatalf("GET /admin/backends: %d %v %s", st, err, b)
	}
	if bv.Source != "static" || bv.Stale || len(bv.Backends) != 2 || bv.Backends[0].ID != "gpu-0" ||
		bv.Backends[0].Hardware != "v100" || bv.Backends[0].Price != 3 || len(bv.Backends[0].Placed) == 0 {
		t.Errorf("GET /admin/backends: %s", b)
	}
}

// runLoad runs loadgen against session on a goroutine; the report arrives on the
// channel.
func runLoad(t *testing.T, url, session string, rate float64, d time.Duration) <-chan *loadgen.Report {
	ch := make(chan *loadgen.Report, 1)
	go func() {
		rep, err := loadgen.Run(context.Background(), loadgen.Options{Target: url, Session: session, Rate: rate,
			Arrival: "constant", Duration: d, SLO: 2 * time.Second})
		if err != nil {
			t.Errorf("loadgen %s: %v", session, err)
		}
		ch <- rep
	}()
	return ch
}

func checkAllAnswered(t *testing.T, rep *loadgen.Report) {
	t.Helper()
	if rep == nil {
		return
	}
	if rep.Sent == 0 || rep.OK != rep.Sent || len(rep.Errors) != 0 {
		t.Errorf("session %s: sent %d, ok %d, errors %v; want every request answered", rep.Session, rep.Sent, rep.OK, rep.Errors)
	}
}

func TestAdminPutChangesPlanUnderLoad(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 2)
	before := h.plan(t)
	pipe := sessionPlan(before, "pipe")
	if pipe.SLOMs != 1000 {
		t.Fatalf("initial plan: pipe SLO %v ms", pipe.SLOMs)
	}
	loadPipe := runLoad(t, h.url, "pipe", 20, 3*time.Second)
	loadSolo := runLoad(t, h.url, "solo", 10, 3*time.Second)
	time.Sleep(time.Second)
	body := `
# tighter SLO, same modules
name: pipe
slo: 700ms
modules:
  - {name: detect, model: det, rate: 50}
  - {name: recognize, model: rec, rate: 50, after: [detect]}
`
	st, head, b := adminDo(t, "PUT", h.url+"/admin/sessions/pipe", adminToken, body, "Content-Type", "application/yaml", "If-Match", `"1"`)
	if st != 200 || head.Get("ETag") != `"2"` {
		t.Fatalf("PUT pipe: %d ETag %q %s", st, head.Get("ETag"), b)
	}
	var res changeResult
	_ = json.Unmarshal(b, &res)
	t.Logf("PUT pipe under load: re-planned and swapped in %.1f ms (version %d)", res.TookMs, res.Version)
	after := h.plan(t)
	np := sessionPlan(after, "pipe")
	if np.SLOMs != 700 || budgetSum(np) > 700+1e-6 || budgetSum(np) >= budgetSum(pipe) {
		t.Errorf("plan after the PUT: pipe SLO %v ms, budgets %v ms (before %v); want SLO 700 and budgets within it",
			np.SLOMs, budgetSum(np), budgetSum(pipe))
	}
	if s, _ := h.exec.Session("pipe"); s.SLO.D() != 700*time.Millisecond {
		t.Errorf("executor still serves pipe with SLO %v", s.SLO.D())
	}
	// The same version again: someone changed it meanwhile.
	st, _, b = adminDo(t, "PUT", h.url+"/admin/sessions/pipe", adminToken, body, "If-Match", `"1"`)
	if st != 412 {
		t.Errorf("PUT with a stale If-Match: %d %s, want 412", st, b)
	}
	checkAllAnswered(t, <-loadPipe)
	checkAllAnswered(t, <-loadSolo)
	if mf, err := h.reg.Gather(); err == nil {
		found := false
		for _, f := range mf {
			if f.GetName() == "piccolo_plan_replans_total" {
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetValue() == "manual" && m.GetCounter().GetValue() == 1 {
							found = true
						}
					}
				}
			}
		}
		if !found {
			t.Error("metrics: no re-plan of cause manual recorded")
		}
	}
}

func TestAdminInvalidChangesLeaveEverything(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 1)
	before := h.plan(t)
	_, _, sessBefore := adminDo(t, "GET", h.url+"/admin/sessions/pipe", adminToken, "")
	for _, tc := range []struct {
		name, path, body string
		status           int
		want             []string // all in the error
	}{
		{"negative rate", "/admin/sessions/pipe",
			"name: pipe\nslo: 1s\nmodules:\n  - {name: detect, model: det, rate: -5}\n", 400,
			[]string{"PUT /admin/sessions/pipe:4", "rate"}},
		{"unknown model", "/admin/sessions/pipe",
			`{"name": "pipe", "slo": "1s", "modules": [{"name": "detect", "model": "nosuch", "rate": 5}]}`, 400,
			[]string{"nosuch", "model"}},
		{"cycle", "/admin/sessions/pipe",
			"name: pipe\nslo: 1s\nmodules:\n  - {name: a, model: det, rate: 5, after: [b]}\n  - {name: b, model: rec, rate: 5, after: [a]}\n", 400,
			[]string{"cycle"}},
		{"name differs from the path", "/admin/sessions/pipe",
			"name: other\nslo: 1s\nmodules:\n  - {name: a, model: det, rate: 5}\n", 400,
			[]string{`"other"`, `"pipe"`}},
		{"unknown field", "/admin/sessions/pipe",
			"name: pipe\nslo: 1s\nsla: 2s\nmodules:\n  - {name: a, model: det, rate: 5}\n", 400,
			[]string{"PUT /admin/sessions/pipe:3", "sla"}},
		{"empty body", "/admin/sessions/pipe", "  \n", 400, []string{"empty"}},
		{"not YAML", "/admin/sessions/pipe", "{name: [", 400, []string{"PUT /admin/sessions/pipe"}},
		{"SLO below the fastest path", "/admin/sessions/pipe",
			"name: pipe\nslo: 5ms\nmodules:\n  - {name: detect, model: det, rate: 50}\n", 400,
			[]string{"PUT /admin/sessions/pipe:2", "slo"}},
		{"no backend of its hardware", "/admin/sessions/pipe",
			"name: pipe\nslo: 1s\nmodules:\n  - {name: detect, model: big, rate: 5}\n", 422,
			[]string{"rejected", `hardware "t4"`}},
		{"delete unknown", "/admin/sessions/nope", "", 404, []string{"nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "PUT"
			if tc.body == "" {
				method = "DELETE"
			}
			st, _, b := adminDo(t, method, h.url+tc.path, adminToken, tc.body)
			if st != tc.status {
				t.Fatalf("status %d, want %d: %s", st, tc.status, b)
			}
			var m struct{ Error string }
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("body not JSON: %s", b)
			}
			for _, w := range tc.want {
				if !strings.Contains(m.Error, w) {
					t.Errorf("error %q lacks %q", m.Error, w)
				}
			}
		})
	}
	if v := h.store.Current().Version; v != 1 {
		t.Errorf("config version %d after refused changes, want 1", v)
	}
	_, _, sessAfter := adminDo(t, "GET", h.url+"/admin/sessions/pipe", adminToken, "")
	if string(sessAfter) != string(sessBefore) {
		t.Errorf("session changed by refused changes:\n%s\nwas\n%s", sessAfter, sessBefore)
	}
	if after := h.plan(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("plan changed by refused changes")
	}
	status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/pipe/infer", `{"inputs":[{"name":"input0","shape":[1,1],"datatype":"FP32","data":[1]}]}`)
	if status != 200 {
		t.Errorf("pipe after refused changes: %d %v", status, m)
	}
}

func TestAdminCreateAndDelete(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 2)
	infer := `{"inputs":[{"name":"input0","shape":[1,1],"datatype":"FP32","data":[1]}]}`
	loadSolo := runLoad(t, h.url, "solo", 10, 3*time.Second)
	time.Sleep(500 * time.Millisecond)
	st, _, b := adminDo(t, "PUT", h.url+"/admin/sessions/extra", adminToken,
		`{"name":"extra","slo":"1s","modules":[{"name":"d","model":"det","rate":5}]}`, "Content-Type", "application/json")
	if st != 201 {
		t.Fatalf("PUT new session: %d %s", st, b)
	}
	if status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/extra/infer", infer); status != 200 {
		t.Errorf("infer on the new session: %d %v", status, m)
	}
	st, _, b = adminDo(t, "DELETE", h.url+"/admin/sessions/pipe", adminToken, "")
	if st != 200 || !strings.Contains(string(b), `"deleted": "pipe"`) {
		t.Fatalf("DELETE pipe: %d %s", st, b)
	}
	if status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/pipe/infer", infer); status != 404 {
		t.Errorf("infer on the deleted session: %d %v, want 404", status, m)
	}
	if p := h.plan(t); sessionPlan(p, "pipe") != nil || sessionPlan(p, "solo") == nil || sessionPlan(p, "extra") == nil {
		t.Errorf("plan after DELETE: %+v", p.Sessions)
	}
	checkAllAnswered(t, <-loadSolo)
	if status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/solo/infer", infer); status != 200 {
		t.Errorf("solo after the changes: %d %v", status, m)
	}
}

// TestAdminConcurrentChanges: changes from many clients are serialised: every
// one that succeeds gets its own version, and the final config holds them all.
func TestAdminConcurrentChanges(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 1)
	var wg sync.WaitGroup
	versions := make(chan string, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("s%d", i)
			st, head, b := adminDo(t, "PUT", h.url+"/admin/sessions/"+name, adminToken,
				fmt.Sprintf(`{"name":%q,"slo":"1s","modules":[{"name":"d","model":"det","rate":2}]}`, name))
			if st != 201 {
				t.Errorf("PUT %s: %d %s", name, st, b)
			}
			versions <- head.Get("ETag")
		}()
	}
	wg.Wait()
	close(versions)
	seen := map[string]bool{}
	for v := range versions {
		seen[v] = true
	}
	if len(seen) != 4 || h.store.Current().Version != 5 || len(h.store.Current().Config.Sessions) != 6 {
		t.Errorf("versions %v, final version %d with %d sessions; want 4 distinct, 5, 6",
			seen, h.store.Current().Version, len(h.store.Current().Config.Sessions))
	}
}

// TestAdminUnknownQueryRefused: a query parameter the API does not know is
// refused with 400 naming it and the allowed ones, and nothing changes.
func TestAdminUnknownQueryRefused(t *testing.T) {
	h, _ := startAdminHarness(t, adminConfig, 1)
	for _, tc := range []struct{ method, path, body, param string }{
		{"PUT", "/admin/sessions/solo?force=1", `{"name":"solo","slo":"1s","modules":[{"name":"only","model":"rec","rate":40}]}`, "force"},
		{"DELETE", "/admin/sessions/solo?cascade=true", "", "cascade"},
		{"GET", "/admin/sessions?watch=1", "", "watch"},
		{"GET", "/admin/sessions/solo?x=1", "", "x"},
		{"GET", "/admin/plan?verbose", "", "verbose"},
		{"GET", "/admin/backends?a=1", "", "a"},
	} {
		st, _, b := adminDo(t, tc.method, h.url+tc.path, adminToken, tc.body)
		var e struct{ Error string }
		_ = json.Unmarshal(b, &e)
		if st != 400 || !strings.Contains(e.Error, fmt.Sprintf("unknown query parameter %q", tc.param)) || !strings.Contains(e.Error, "allowed:") {
			t.Errorf("%s %s: %d %s; want 400 naming %q and the allowed parameters", tc.method, tc.path, st, b, tc.param)
		}
	}
	if v := h.store.Current().Version; v != 1 {
		t.Errorf("config version %d after refused calls, want 1", v)
	}
	if s, _ := h.store.Current().Config.Session("solo"); s.Modules[0].Rate != 20 {
		t.Errorf("solo's rate %v after refused calls, want 20", s.Modules[0].Rate)
	}
}
