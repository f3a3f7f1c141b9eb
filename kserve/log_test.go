package kserve

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// failRunner fails every item with err.
type failRunner struct{ err error }

func (f failRunner) Run(_ context.Context, _, _ string, _ []api.Tensor, _ *gateway.Call, done func([]api.Tensor, gateway.Timing, error)) {
	done(nil, gateway.Timing{}, f.err)
}
func (failRunner) Estimate(string, string) time.Duration { return 0 }

// A failed request is logged once with its session and request id (warn for a
// backend failure, debug for the client's), a successful one not at all.
func TestFailedRequestsAreLoggedWithRequestFields(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	sessions := []api.Session{{Name: "s", SLO: api.Duration(time.Second), Modules: []api.Module{{Name: "m", Model: "m", Rate: 1}}}}
	for _, tc := range []struct {
		runner gateway.ModuleRunner
		level  string
		status int
	}{
		{failRunner{gateway.ErrUnavailable}, "warn", 503},
		{gatewaytest.EchoRunner{}, "", 200},
	} {
		logs.TakeAll()
		exec, err := gateway.NewDAGRunner(tc.runner, sessions)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := NewServer(exec, ServerOptions{Logger: zap.New(core)})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := srv.NewHTTPServer()
		go hs.Serve(ln)
		body := `{"id":"req-42","inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","data":[1]}]}`
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + ln.Addr().String() + "/v2/models/s/infer")
		req.Header.SetMethod("POST")
		req.SetBodyString(body)
		err = fasthttp.Do(req, resp)
		status := resp.StatusCode()
		hs.Shutdown()
		if err != nil {
			t.Fatal(err)
		}
		if status != tc.status {
			t.Errorf("status %d, want %d", status, tc.status)
		}
		entries := logs.TakeAll()
		if tc.level == "" {
			if len(entries) != 0 {
				t.Errorf("a successful request logged %d lines", len(entries))
			}
			continue
		}
		if len(entries) != 1 || entries[0].Level.String() != tc.level {
			t.Fatalf("logged %v, want one %s line", entries, tc.level)
		}
		f := entries[0].ContextMap()
		if f["session"] != "s" || f["request_id"] != "req-42" || !strings.Contains(f["error"].(string), "unavailable") {
			t.Errorf("fields %v, want session s, request_id req-42 and the error", f)
		}
	}
}
