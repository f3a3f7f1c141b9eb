package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// checkCounts asserts the report's accounting invariant: every request sent has
// exactly one outcome.
func checkCounts(t *testing.T, rep *Report) {
	t.Helper()
	if got := rep.OK + rep.ErrorTotal(); got != rep.Sent {
		t.Errorf("ok %d + errors %d = %d, want sent %d (errors %v)", rep.OK, rep.ErrorTotal(), got, rep.Sent, rep.Errors)
	}
	if rep.Completed < rep.OK || rep.Completed > rep.Sent {
		t.Errorf("completed %d outside [ok %d, sent %d]", rep.Completed, rep.OK, rep.Sent)
	}
}

func fp32Payload(t *testing.T) []Payload {
	t.Helper()
	p, err := ParseRequest([]byte(`{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return []Payload{p}
}

// TestOpenLoopSlowServer: a slow server must not slow the sends. With 300 ms per
// reply and 50 req/s for 1 s, a closed loop would send about 3; open loop sends 50,
// and the server sees many of them at once.
func TestOpenLoopSlowServer(t *testing.T) {
	ts := startServer(t, &testServer{delay: 300 * time.Millisecond})
	began := time.Now()
	rep, err := Run(t.Context(), Options{
		Target: ts.URL, Session: "s", Rate: 50, Arrival: "constant", Duration: time.Second,
		SLO: time.Second, Payloads: fp32Payload(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(began)
	checkCounts(t, rep)
	if rep.Sent != 50 || rep.OK != 50 || rep.Completed != 50 {
		t.Errorf("sent %d, ok %d, completed %d; want 50 each (errors %v)", rep.Sent, rep.OK, rep.Completed, rep.Errors)
	}
	if got := ts.received.Load(); got != 50 {
		t.Errorf("server received %d requests, want 50", got)
	}
	// 300 ms × 50 req/s = 15 outstanding in steady state; a closed loop has 1.
	if got := ts.maxInflight.Load(); got < 8 {
		t.Errorf("server saw at most %d requests at once, want ≥ 8 (open loop)", got)
	}
	if rep.P50Ms < 300 || rep.MinMs < 300 {
		t.Errorf("p50 %.1f ms, min %.1f ms; the server sleeps 300 ms", rep.P50Ms, rep.MinMs)
	}
	if elapsed > 10*time.Second {
		t.Errorf("run took %v; 1 s of sends + 0.3 s of replies should end far sooner", elapsed)
	}
	if rep.DurationS < 1.2 || rep.DurationS > 10 {
		t.Errorf("duration %.2f s, want about 1.3 s", rep.DurationS)
	}
	if rep.OfferedRate != 50 {
		t.Errorf("offered rate %v, want 50", rep.OfferedRate)
	}
	if rep.SLOAttainment == nil || *rep.SLOAttainment != 1 {
		t.Errorf("SLO attainment %v, want 1 (all replies in ~300 ms, SLO 1 s)", rep.SLOAttainment)
	}
	// Every request carried its own id.
	ids := map[string]bool{}
	for _, b := range mustBodies(t, ts) {
		ids[b.ID] = true
	}
	if len(ids) != 50 {
		t.Errorf("server saw %d distinct ids, want 50", len(ids))
	}
}

func TestErrorKindsHTTP(t *testing.T) {
	statuses := []int{0, 429, 504, 500, 503, 400, 404, 401}
	ts := startServer(t, &testServer{status: func(id int) int { return statuses[id%len(statuses)] }})
	rep, err := Run(t.Context(), Options{
		Target: ts.URL, Session: "s", Rate: 200, Arrival: "constant", Duration: 400 * time.Millisecond,
		Payloads: fp32Payload(t), SLO: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if rep.Sent != 80 {
		t.Fatalf("sent %d, want 80 (200 req/s × 0.4 s)", rep.Sent)
	}
	want := map[string]int64{
		"rejected: overloaded": 10, "deadline": 10, "server error": 10, "unavailable": 10,
		"bad request": 10, "not found": 10, "unauthorized": 10,
	}
	if d := cmp.Diff(want, rep.Errors); d != "" {
		t.Errorf("errors by kind (-want +got):\n%s", d)
	}
	if rep.OK != 10 || rep.Completed != 80 {
		t.Errorf("ok %d, completed %d; want 10, 80", rep.OK, rep.Completed)
	}
	if *rep.SLOAttainment != 10.0/80 {
		t.Errorf("attainment %v, want 0.125: errors count as misses", *rep.SLOAttainment)
	}
}

func TestTransportErrorAndMetadataFallback(t *testing.T) {
	// Port 1 on loopback: nobody listens there.
	rep, err := Run(t.Context(), Options{
		Target: "127.0.0.1:1", Session: "s", Rate: 100, Arrival: "constant", Duration: 100 * time.Millisecond,
		Timeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if rep.Sent != 10 || rep.Errors["transport"] != 10 || rep.Completed != 0 {
		t.Errorf("sent %d, completed %d, errors %v; want 10 transport errors", rep.Sent, rep.Completed, rep.Errors)
	}
	if rep.SLOMs != nil || rep.SLOAttainment != nil || rep.Goodput != nil {
		t.Errorf("no SLO known, yet slo %v attainment %v goodput %v", rep.SLOMs, rep.SLOAttainment, rep.Goodput)
	}
	if d := cmp.Diff([]string{"fallback FP32 [1,1] input0"}, rep.Inputs); d != "" {
		t.Errorf("inputs (-want +got):\n%s", d)
	}

	// A live server without metadata (404): the fallback input is sent.
	ts := startServer(t, &testServer{})
	rep, err = Run(t.Context(), Options{Target: ts.URL, Session: "s", Rate: 100, Arrival: "constant", Duration: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if rep.OK != 5 || len(mustBodies(t, ts)) != 5 {
		t.Fatalf("ok %d, server bodies %d; want 5", rep.OK, len(mustBodies(t, ts)))
	}
	in := mustBodies(t, ts)[0].Inputs
	if len(in) != 1 || in[0].Name != "input0" || in[0].Datatype != "FP32" || !cmp.Equal(in[0].Shape, []int64{1, 1}) {
		t.Errorf("fallback input %+v, want FP32 [1,1] input0", in)
	}
}

func TestMetadataInputAndSLO(t *testing.T) {
	ts := startServer(t, &testServer{
		metadata: `{"name":"s","versions":["1"],"platform":"piccolo","inputs":[{"name":"pixels","datatype":"UINT8","shape":[-1,2,-1]},{"name":"flag","datatype":"BOOL","shape":[1]}],"outputs":[],"parameters":{"slo_ms":250}}`,
	})
	rep, err := Run(t.Context(), Options{Target: ts.URL, Session: "s", Rate: 100, Arrival: "constant", Duration: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if rep.SLOMs == nil || *rep.SLOMs != 250 {
		t.Errorf("slo_ms %v, want 250 from the metadata", rep.SLOMs)
	}
	if rep.OK != 3 {
		t.Fatalf("ok %d, want 3 (errors %v)", rep.OK, rep.Errors)
	}
	in := mustBodies(t, ts)[0].Inputs
	if len(in) != 2 {
		t.Fatalf("server got %d inputs, want 2", len(in))
	}
	if in[0].Name != "pixels" || !cmp.Equal(in[0].Shape, []int64{1, 2, 1}) || string(in[0].Data) != "[0,0]" {
		t.Errorf("input 0: %s %v %s; want pixels [1 2 1] [0,0]", in[0].Name, in[0].Shape, in[0].Data)
	}
	if in[1].Name != "flag" || string(in[1].Data) != "[false]" {
		t.Errorf("input 1: %s %s; want flag [false]", in[1].Name, in[1].Data)
	}
	// The --slo flag wins over the metadata.
	rep, err = Run(t.Context(), Options{Target: ts.URL, Session: "s", Rate: 100, Duration: 10 * time.Millisecond, SLO: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if *rep.SLOMs != 40 {
		t.Errorf("slo_ms %v, want the option's 40", *rep.SLOMs)
	}
}

// TestDrainBounded: replies that never come are counted as timeouts once the
// drain ends, and Run returns then, not when the server finally answers.
func TestDrainBounded(t *testing.T) {
	ts := startServer(t, &testServer{delay: 5 * time.Second})
	began := time.Now()
	rep, err := Run(t.Context(), Options{
		Target: ts.URL, Session: "s", Rate: 50, Arrival: "constant", Duration: 200 * time.Millisecond,
		Drain: 300 * time.Millisecond, Timeout: 30 * time.Second, Payloads: fp32Payload(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(began)
	checkCounts(t, rep)
	if rep.Sent != 10 || rep.Errors["timeout"] != 10 || rep.OK != 0 {
		t.Errorf("sent %d, ok %d, errors %v; want 10 timeouts", rep.Sent, rep.OK, rep.Errors)
	}
	if elapsed > 3*time.Second {
		t.Errorf("Run took %v; sends 0.2 s + drain 0.3 s should end well before the 5 s replies", elapsed)
	}
	if rep.DurationS < 0.45 || rep.DurationS > 3 {
		t.Errorf("duration %.2f s, want about 0.5 s (sends + drain)", rep.DurationS)
	}
}

func TestClientTimeout(t *testing.T) {
	ts := startServer(t, &testServer{delay: 2 * time.Second})
	rep, err := Run(t.Context(), Options{
		Target: ts.URL, Session: "s", Rate: 20, Arrival: "constant", Duration: 200 * time.Millisecond,
		Timeout: 100 * time.Millisecond, Drain: 20 * time.Second, Payloads: fp32Payload(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if rep.Sent != 4 || rep.Errors["timeout"] != 4 {
		t.Errorf("sent %d, errors %v; want 4 timeouts", rep.Sent, rep.Errors)
	}
	if rep.DurationS > 1.9 {
		t.Errorf("duration %.2f s: the 100 ms client timeout should end the run long before the 2 s replies", rep.DurationS)
	}
}

// TestMaxInflightDrops: beyond the bound a due request is dropped and counted,
// and the schedule goes on.
func TestMaxInflightDrops(t *testing.T) {
	ts := startServer(t, &testServer{delay: 3 * time.Second})
	rep, err := Run(t.Context(), Options{
		Target: ts.URL, Session: "s", Rate: 20, Arrival: "constant", Duration: 500 * time.Millisecond,
		MaxInflight: 2, Payloads: fp32Payload(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if rep.Sent != 10 || rep.OK != 2 || rep.Errors["dropped: client overload"] != 8 {
		t.Errorf("sent %d, ok %d, errors %v; want 10 sent, 2 ok, 8 dropped", rep.Sent, rep.OK, rep.Errors)
	}
	if got := ts.received.Load(); got != 2 {
		t.Errorf("server received %d, want 2", got)
	}
}

func TestCancelStopsRun(t *testing.T) {
	ts := startServer(t, &testServer{})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	rep, err := Run(ctx, Options{Target: ts.URL, Session: "s", Rate: 50, Arrival: "constant", Duration: time.Minute, Payloads: fp32Payload(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if time.Since(began) > 10*time.Second {
		t.Errorf("Run took %v after a 300 ms cancel", time.Since(began))
	}
	if !rep.Interrupted || rep.Sent >= 3000 || rep.Sent < 5 {
		t.Errorf("interrupted %v, sent %d; want an interrupted run of about 15", rep.Interrupted, rep.Sent)
	}
}

func TestPoissonAndGammaRates(t *testing.T) {
	ts := startServer(t, &testServer{})
	for _, a := range []struct {
		kind string
		cv2  float64
	}{{"poisson", 0}, {"gamma", 4}} {
		t.Run(a.kind, func(t *testing.T) {
			rep, err := Run(t.Context(), Options{Target: ts.URL, Session: "s", Rate: 400, Arrival: a.kind, CV2: a.cv2, Seed: 7, Duration: time.Second, Payloads: fp32Payload(t)})
			if err != nil {
				t.Fatal(err)
			}
			checkCounts(t, rep)
			if n := scheduleLen(Options{Rate: 400, Arrival: a.kind, CV2: max(a.cv2, 1), Seed: 7, Duration: time.Second}); int64(n) != rep.Sent {
				t.Errorf("sent %d, the seeded schedule has %d", rep.Sent, n)
			}
			if rep.Sent < 200 || rep.Sent > 600 {
				t.Errorf("sent %d in 1 s at 400 req/s", rep.Sent)
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	ok := Options{Target: "127.0.0.1:1", Session: "s", Rate: 1, Duration: time.Millisecond}
	tests := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"no target", func(o *Options) { o.Target = "" }, "no target"},
		{"no session", func(o *Options) { o.Session = "" }, "no session"},
		{"zero rate", func(o *Options) { o.Rate = 0 }, "rate 0 req/s"},
		{"protocol", func(o *Options) { o.Protocol = "udp" }, `protocol "udp"; allowed: http, grpc`},
		{"arrival", func(o *Options) { o.Arrival = "bursty" }, `unknown arrival process "bursty"`},
		{"huge", func(o *Options) { o.Rate = 1e9; o.Duration = time.Hour }, "at most"},
		{"scheme", func(o *Options) { o.Target = "ftp://x" }, `scheme "ftp"`},
		{"grpc url", func(o *Options) { o.Protocol = "grpc"; o.Target = "http://x:1" }, "give host:port"},
		{"negative", func(o *Options) { o.Timeout = -1 }, "none may be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			_, err := Run(t.Context(), o)
			if !errors.Is(err, ErrBadOptions) || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Errorf("err = %v, want ErrBadOptions containing %q", err, tc.want)
			}
		})
	}
}

func TestReportOutputs(t *testing.T) {
	ts := startServer(t, &testServer{delay: 5 * time.Millisecond, status: func(id int) int {
		if id%4 == 3 {
			return 429
		}
		return 0
	}})
	rep, err := Run(t.Context(), Options{Target: ts.URL, Session: "s", Rate: 200, Arrival: "constant", Duration: 200 * time.Millisecond, SLO: time.Second, Payloads: fp32Payload(t)})
	if err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not parse: %v\n%s", err, js.String())
	}
	for _, k := range []string{"sent", "completed", "ok", "errors", "duration_s", "offered_rps", "throughput_rps", "goodput_rps", "slo_ms", "slo_attainment", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "late_sends"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if back["sent"].(float64) != 40 || back["ok"].(float64) != 30 || back["errors"].(map[string]any)["rejected: overloaded"].(float64) != 10 {
		t.Errorf("JSON counts: sent %v ok %v errors %v; want 40, 30, 10 overloaded", back["sent"], back["ok"], back["errors"])
	}

	var tab bytes.Buffer
	if err := WriteTable(&tab, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sent", "40", "rejected: overloaded: 10", "p99.9", "SLO attainment", "75.00%"} {
		if !bytes.Contains(tab.Bytes(), []byte(want)) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}

	path := filepath.Join(t.TempDir(), "cdf.png")
	if err := WritePlot(path, "test", rep.Latencies, time.Second); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("plot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 200 {
		t.Errorf("plot is %v, want a readable size", b)
	}
	if err := WritePlot(filepath.Join(t.TempDir(), "x.gif"), "", rep.Latencies, 0); err == nil {
		t.Error("WritePlot .gif: no error, want unknown format")
	}
	if err := WritePlot(filepath.Join(t.TempDir(), "x.png"), "", nil, 0); err == nil {
		t.Error("WritePlot with no latencies: no error")
	}
}
