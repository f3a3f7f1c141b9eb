package faults_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/faults"
)

// TestAdminChangesFaultsAtRunTime drives /admin/faults over real HTTP and
// checks what the gRPC client sees and what the gauge says after each call.
func TestAdminChangesFaultsAtRunTime(t *testing.T) {
	f := start(t)
	hs := httptest.NewServer(f.inj.Handler())
	defer hs.Close()
	call := func(method, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	gauge := func(kind string) float64 {
		return mustGauge(t, f, kind)
	}

	if code, body := call(http.MethodPut, `{"fail": 1, "slow": 2}`); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	var got faults.Set
	code, body := call(http.MethodGet, "")
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil || got != (faults.Set{Fail: 1, Slow: 2}) {
		t.Fatalf("GET: %d %s (%v); want fail 1, slow 2", code, body, err)
	}
	if gauge("fail") != 1 || gauge("slow") != 2 || gauge("hang") != 0 {
		t.Errorf("gauges fail %v slow %v hang %v; want 1, 2, 0", gauge("fail"), gauge("slow"), gauge("hang"))
	}
	if err := f.infer(t, "quick", 5*time.Second); !strings.Contains(errString(err), "Internal") {
		t.Errorf("after PUT fail=1: %v; want INTERNAL", err)
	}

	for _, tc := range []struct{ body, want string }{
		{`{"slow": 0.5}`, "want a factor 1 ≤ k"},
		{`{"fail": 2}`, "want a share 0 ≤ p ≤ 1"},
		{`{"hang": "yes"}`, "want a JSON object with the fields refuse, reset, hang, slow, fail, malformed"},
		{`{"crash": true}`, `unknown field \"crash\"`},
		{`{"slow": 2, "slowshare": 0.3}`, "malformed, shared, slow_share (all optional)"},
		{`{} {}`, "data after the JSON object"},
	} {
		if code, body := call(http.MethodPut, tc.body); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("PUT %s: %d %s; want 400 naming %q", tc.body, code, body, tc.want)
		}
	}
	if got := f.inj.Get(); got != (faults.Set{Fail: 1, Slow: 2}) {
		t.Errorf("bad PUTs changed the faults to %v", got)
	}
	if code, body := call(http.MethodPost, "{}"); code != http.StatusMethodNotAllowed || !strings.Contains(body, "GET, PUT, DELETE") {
		t.Errorf("POST: %d %s; want 405 naming the allowed methods", code, body)
	}

	if code, body := call(http.MethodDelete, ""); code != http.StatusOK || !strings.Contains(body, `"fail":0`) {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if gauge("fail") != 0 || gauge("slow") != 0 {
		t.Errorf("gauges after DELETE: fail %v slow %v; want 0", gauge("fail"), gauge("slow"))
	}
	if err := f.infer(t, "quick", 5*time.Second); err != nil {
		t.Errorf("after DELETE: %v", err)
	}

	// Refuse through the admin call, then clear it: the port serves again.
	if code, body := call(http.MethodPut, `{"refuse": true}`); code != http.StatusOK || gauge("refuse") != 1 {
		t.Fatalf("PUT refuse: %d %s, gauge %v", code, body, gauge("refuse"))
	}
	if err := eventually(func() error {
		if err := f.infer(t, "quick", 5*time.Second); !backends.NotExecuted(err) {
			return errNotRefused{err}
		}
		return nil
	}); err != nil {
		t.Fatalf("under refuse: %v", err)
	}
	if code, body := call(http.MethodDelete, ""); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if err := eventually(func() error { return f.infer(t, "quick", 5*time.Second) }); err != nil {
		t.Fatalf("after clearing refuse: %v", err)
	}
}

type errNotRefused struct{ err error }

func (e errNotRefused) Error() string { return "call not refused: " + errString(e.err) }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// mustGauge finds piccolo_backend_fault{kind} in the backend's registry.
func mustGauge(t *testing.T, f *faulty, kind string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "piccolo_backend_fault" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no piccolo_backend_fault{kind=%q}", kind)
	return 0
}
