package kserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// A failure from behind the gateway reaches the client as a stable message
// with the request id, and the log has the whole chain under the same id; a
// request without an id gets one made for it.
func TestFailureChainGoesToLogNotClient(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	sessions := []api.Session{{Name: "s", SLO: api.Duration(time.Second), Modules: []api.Module{{Name: "m", Model: "m", Rate: 1}}}}
	chain := fmt.Errorf("%w: backend 10.0.0.7:9101 (piccolo-backend pid 4242): model \"m\": %w", gateway.ErrUnavailable, errors.New("dial tcp: connection refused"))
	exec, err := gateway.NewDAGRunner(failRunner{chain}, sessions)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(exec, ServerOptions{Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ body, id string }{
		{`{"id":"req-7","inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","data":[1]}]}`, "req-7"},
		{`{"inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","data":[1]}]}`, ""},
	} {
		logs.TakeAll()
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("/v2/models/s/infer")
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetBodyString(tc.body)
		srv.HandleHTTP(&ctx)
		var m map[string]any
		if err := json.Unmarshal(ctx.Response.Body(), &m); err != nil || len(m) != 1 {
			t.Fatalf("body %s: want exactly {\"error\": ...}", ctx.Response.Body())
		}
		msg := m["error"].(string)
		entries := logs.TakeAll()
		if len(entries) != 1 {
			t.Fatalf("logged %d lines, want 1", len(entries))
		}
		f := entries[0].ContextMap()
		id, _ := f["request_id"].(string)
		if tc.id != "" && id != tc.id {
			t.Errorf("logged request_id %q, want the request's %q", id, tc.id)
		}
		want := `unavailable: session "s" cannot be served now; retry later (request id ` + id + ")"
		if ctx.Response.StatusCode() != 503 || msg != want || id == "" {
			t.Errorf("client got %d %q, want 503 %q", ctx.Response.StatusCode(), msg, want)
		}
		if logged, _ := f["error"].(string); !strings.Contains(logged, "10.0.0.7:9101") || !strings.Contains(logged, "connection refused") {
			t.Errorf("log error %q lacks the chain", logged)
		}
	}
}
